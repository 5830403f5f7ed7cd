//! Simulated workload controllers: Deployments, ReplicaSets and StatefulSets.
//!
//! ## What these controllers do in a real cluster
//!
//! A Deployment or StatefulSet is, like an `At`, a wish: "keep N copies of this pod template
//! running". Controllers in kube-controller-manager make it so and report progress in the
//! object's `status`:
//!
//! * The **Deployment controller** creates a ReplicaSet per template revision and scales them
//!   (rolling updates move replicas from the old one to the new one); the **ReplicaSet
//!   controller** creates and deletes the pods. The Deployment's status counts what it sees:
//!   `replicas`, `updatedReplicas` (on the newest template), `readyReplicas`,
//!   `availableReplicas` (ready for `minReadySeconds`), the conditions `Available` and
//!   `Progressing`, and `observedGeneration`, the `metadata.generation` of the spec that status
//!   describes. `kubectl rollout status` waits until `observedGeneration` caught up and the
//!   counts equal `spec.replicas`.
//! * The **StatefulSet controller** gives every pod a stable identity: pods are named
//!   `<name>-<ordinal>` (0, 1, 2, ...), carry a controller `ownerReference` to the set and the
//!   labels `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`. With the
//!   default `podManagementPolicy: OrderedReady` it creates them one at a time in ordinal
//!   order, each only once the ones before it are Running and Ready, and scales down from the
//!   highest ordinal, one at a time; with `Parallel` it creates and deletes them all at once.
//!   A pod that disappears is recreated with the same name.
//!
//! ## What the simulation keeps and leaves out
//!
//! One background task (owned by the server handle, on with
//! `ClusterBuilder::simulate` (crate `embedded-cluster`)) follows the store's change feed. Whenever a
//! Deployment or StatefulSet changes, or a pod one of them owns does, it schedules a *sync* of
//! that object after the workload delay (`ClusterBuilder::workload_delay` (crate `embedded-cluster`), default
//! 500 ms, zero allowed; measured with `tokio::time`, so paused-clock tests control it).
//!
//! * **StatefulSets** are simulated faithfully as far as pods go: each sync takes one
//!   `OrderedReady` step (create the lowest missing ordinal once all lower ones are Running and
//!   Ready, or delete the highest extra ordinal once no pod is terminating) or, with
//!   `Parallel`, creates and deletes everything at once; a pod that ended `Failed` or
//!   `Succeeded` is deleted and recreated under its name; then it writes `status` from the pods
//!   that exist (`replicas` counts pods that are not terminating, `readyReplicas` and
//!   `availableReplicas` those Running with `Ready=True`, `currentReplicas`/`updatedReplicas`,
//!   `currentRevision`/`updateRevision`, `observedGeneration`). The simulated node runs the pods
//!   and keeps them Running and Ready (their `restartPolicy` is `Always`).
//! * **Deployments** and **ReplicaSets** are run by the [`super::deployments`] and
//!   [`super::replicasets`] controllers, as Kubernetes runs them. Only in the fast mode
//!   (`ControllerManagerBuilder::deployment_pods(false)`, a departure from Kubernetes) does this
//!   task handle them, through their status only: after the delay every count equals
//!   `spec.replicas` (default 1), `observedGeneration` catches up, and
//!   `Available`/`Progressing` are `True`. No ReplicaSets or pods are created, so a test of a
//!   controller that owns Deployments sees them "roll out" without the cost of pods.
//!   ReplicaSets created directly get their status the same way (`replicas`,
//!   `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`, `observedGeneration`),
//!   without pods either. Rolling updates, `maxSurge`/`maxUnavailable`, `minReadySeconds`,
//!   paused deployments and rollbacks are left out of that mode.
//!
//! Updates of a StatefulSet's template do not roll existing pods (the real controller replaces
//! them in reverse ordinal order); PersistentVolumeClaim templates are ignored.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed, VirtualClock};
use super::owned;
use embedded_apiserver::meta::meta_str;
use embedded_apiserver::store::{State, Store};

const DEPLOYMENTS: &str = "apps/deployments";
const REPLICASETS: &str = "apps/replicasets";
const STATEFULSETS: &str = "apps/statefulsets";
const PODS: &str = "core/pods";

/// Most pods one StatefulSet step creates (Parallel policy) while holding the store lock; the
/// next step follows at once. Keeps the lock hold time independent of `spec.replicas`.
pub const MAX_PODS_PER_STEP: usize = 100;

/// Settings of the simulated workload controllers.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadConfig {
    /// How long after a change the controllers react to it.
    pub delay: Duration,
    /// Source of the timestamps written into conditions.
    pub clock: VirtualClock,
    /// Give Deployments and ReplicaSets their status only (the fast mode,
    /// `ControllerManagerBuilder::deployment_pods(false)`); otherwise the [`super::deployments`]
    /// and [`super::replicasets`] controllers run them and this task leaves them alone.
    pub deployments_status_only: bool,
}

/// Starts the simulated Deployment and StatefulSet controllers on `tracker`; they stop when
/// `shutdown` is cancelled.
pub fn spawn(
    store: Arc<Store>,
    config: WorkloadConfig,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(run(store, config, shutdown));
}

/// `(storage, namespace, name)` of a Deployment, ReplicaSet or StatefulSet.
type WorkKey = (&'static str, String, String);

struct Controllers {
    store: Arc<Store>,
    config: WorkloadConfig,
    due: HashMap<WorkKey, Instant>,
}

async fn run(store: Arc<Store>, config: WorkloadConfig, shutdown: CancellationToken) {
    let mut c = Controllers {
        store: store.clone(),
        config,
        due: HashMap::new(),
    };
    let mut feed = ChangeFeed::new(store);
    c.resync();
    loop {
        c.sync_due();
        let next = c.due.values().min().copied();
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = feed.changed() => match feed.poll() {
                Batch::Changes(changes) => {
                    for ch in changes {
                        c.observe(&ch.storage, &ch.object);
                    }
                }
                Batch::Resync => c.resync(),
            },
            _ = async {
                match next {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

impl Controllers {
    fn schedule(&mut self, key: WorkKey) {
        let at = Instant::now() + self.config.delay;
        self.due.entry(key).or_insert(at);
    }

    fn resync(&mut self) {
        let keys: Vec<WorkKey> = self.store.read(|st| {
            let mut keys = vec![];
            for storage in [DEPLOYMENTS, REPLICASETS, STATEFULSETS] {
                if storage != STATEFULSETS && !self.config.deployments_status_only {
                    continue;
                }
                for o in st.list(storage, None) {
                    keys.push((
                        storage,
                        meta_str(o, "namespace").to_owned(),
                        meta_str(o, "name").to_owned(),
                    ));
                }
            }
            keys
        });
        for k in keys {
            self.schedule(k);
        }
    }

    fn observe(&mut self, storage: &str, obj: &Value) {
        let ns = meta_str(obj, "namespace").to_owned();
        match storage {
            DEPLOYMENTS | REPLICASETS if !self.config.deployments_status_only => {}
            DEPLOYMENTS => self.schedule((DEPLOYMENTS, ns, meta_str(obj, "name").to_owned())),
            REPLICASETS => self.schedule((REPLICASETS, ns, meta_str(obj, "name").to_owned())),
            STATEFULSETS => self.schedule((STATEFULSETS, ns, meta_str(obj, "name").to_owned())),
            PODS => {
                if let Some(owner) = controller_of(obj, "StatefulSet") {
                    self.schedule((STATEFULSETS, ns, owner));
                }
            }
            _ => {}
        }
    }

    fn sync_due(&mut self) {
        let now = Instant::now();
        let ready: Vec<WorkKey> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ready {
            self.due.remove(&k);
            match k.0 {
                DEPLOYMENTS => self.sync_deployment(&k.1, &k.2),
                REPLICASETS => self.sync_replicaset(&k.1, &k.2),
                _ => self.sync_statefulset(&k.1, &k.2),
            }
        }
    }

    fn sync_deployment(&mut self, ns: &str, name: &str) {
        let now = self.config.clock.now_time();
        self.store.write(|st| {
            let Some(d) = st.get(DEPLOYMENTS, ns, name).cloned() else {
                return;
            };
            if !meta_str(&d, "deletionTimestamp").is_empty() {
                return;
            }
            let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
            let mut status =
                json!({"observedGeneration": d["metadata"]["generation"].as_i64().unwrap_or(1)});
            for f in [
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
            ] {
                if replicas > 0 {
                    status[f] = json!(replicas);
                }
            }
            let old_conds = d["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let cond = |ty: &str, reason: &str, message: String| {
                let keep = old_conds
                    .iter()
                    .find(|c| c["type"] == ty && c["status"] == "True" && c["reason"] == reason);
                let transition = keep
                    .map(|c| c["lastTransitionTime"].clone())
                    .unwrap_or_else(|| json!(now));
                let update = keep
                    .map(|c| c["lastUpdateTime"].clone())
                    .unwrap_or_else(|| json!(now));
                json!({"type": ty, "status": "True", "reason": reason, "message": message,
                       "lastUpdateTime": update, "lastTransitionTime": transition})
            };
            status["conditions"] = json!([
                cond(
                    "Available",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".into()
                ),
                cond(
                    "Progressing",
                    "NewReplicaSetAvailable",
                    format!(
                        "ReplicaSet \"{name}-{}\" has successfully progressed.",
                        template_hash(&d)
                    )
                ),
            ]);
            if d["status"] != status {
                let mut new = d;
                new["status"] = status;
                st.write(DEPLOYMENTS, new);
                tracing::debug!(
                    namespace = ns,
                    deployment = name,
                    replicas,
                    "simulated deployment status updated"
                );
            }
        });
    }

    /// A ReplicaSet's status: every count equals `spec.replicas` (status only, like
    /// Deployments).
    fn sync_replicaset(&mut self, ns: &str, name: &str) {
        self.store.write(|st| {
            let Some(rs) = st.get(REPLICASETS, ns, name).cloned() else {
                return;
            };
            if !meta_str(&rs, "deletionTimestamp").is_empty() {
                return;
            }
            let replicas = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
            let mut status = json!({
                "replicas": replicas,
                "observedGeneration": rs["metadata"]["generation"].as_i64().unwrap_or(1),
            });
            if replicas > 0 {
                for f in ["fullyLabeledReplicas", "readyReplicas", "availableReplicas"] {
                    status[f] = json!(replicas);
                }
            }
            if rs["status"] != status {
                let mut new = rs;
                new["status"] = status;
                st.write(REPLICASETS, new);
            }
        });
    }

    fn sync_statefulset(&mut self, ns: &str, name: &str) {
        let stepped = self.store.write(|st| {
            let sts = st.get(STATEFULSETS, ns, name).cloned()?;
            if !meta_str(&sts, "deletionTimestamp").is_empty() {
                return None;
            }
            let uid = meta_str(&sts, "uid").to_owned();
            let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
            let parallel = sts["spec"]["podManagementPolicy"] == "Parallel";
            let revision = format!("{name}-{}", template_hash(&sts));
            let mut pods = owned_pods(st, ns, &uid);
            let mut changed = false;

            // A pod that ended (Failed or Succeeded) is deleted, to be recreated with its name.
            for (ord, p) in &pods {
                let phase = p["status"]["phase"].as_str().unwrap_or_default();
                if matches!(phase, "Failed" | "Succeeded")
                    && meta_str(p, "deletionTimestamp").is_empty()
                {
                    delete_pod(st, ns, &format!("{name}-{ord}"), meta_str(p, "uid"));
                    changed = true;
                }
            }
            if changed {
                pods = owned_pods(st, ns, &uid);
            }

            // Scale up: missing ordinals below `replicas`, at most `MAX_PODS_PER_STEP` per
            // step (found lazily: the work is bounded by the pods that exist, never by
            // `replicas`, which may be 2^31 - 1).
            let existing: std::collections::HashSet<i64> = pods.iter().map(|(o, _)| *o).collect();
            let missing: Vec<i64> = (0..replicas)
                .filter(|i| !existing.contains(i))
                .take(MAX_PODS_PER_STEP)
                .collect();
            for ord in missing {
                if !parallel {
                    let lower_ready = pods
                        .iter()
                        .filter(|(o, _)| *o < ord)
                        .all(|(_, p)| is_running_and_ready(p));
                    let all_lower_exist = (0..ord).all(|i| existing.contains(&i));
                    if !lower_ready || !all_lower_exist {
                        break;
                    }
                }
                create_pod(st, &sts, ord, &revision);
                changed = true;
                if !parallel {
                    break;
                }
            }
            // Scale down: extra ordinals, highest first.
            if !changed {
                let mut extra: Vec<&(i64, Value)> =
                    pods.iter().filter(|(o, _)| *o >= replicas).collect();
                extra.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
                let terminating = pods
                    .iter()
                    .any(|(_, p)| !meta_str(p, "deletionTimestamp").is_empty());
                for (ord, p) in extra {
                    if !meta_str(p, "deletionTimestamp").is_empty() {
                        continue;
                    }
                    if !parallel && terminating {
                        break;
                    }
                    delete_pod(st, ns, &format!("{name}-{ord}"), meta_str(p, "uid"));
                    changed = true;
                    if !parallel {
                        break;
                    }
                }
            }
            // Status from the pods as they are now.
            let pods = owned_pods(st, ns, &uid);
            let live: Vec<&Value> = pods
                .iter()
                .map(|(_, p)| p)
                .filter(|p| meta_str(p, "deletionTimestamp").is_empty())
                .collect();
            let count = live.len() as i64;
            let ready = live.iter().filter(|p| is_running_and_ready(p)).count() as i64;
            let mut status = json!({
                "observedGeneration": sts["metadata"]["generation"].as_i64().unwrap_or(1),
                "replicas": count,
                "currentRevision": revision,
                "updateRevision": revision,
                "collisionCount": 0,
                "availableReplicas": ready,
            });
            for (f, v) in [
                ("readyReplicas", ready),
                ("currentReplicas", count),
                ("updatedReplicas", count),
            ] {
                if v > 0 {
                    status[f] = json!(v);
                }
            }
            if sts["status"] != status {
                let mut new = sts;
                new["status"] = status;
                st.write(STATEFULSETS, new);
            }
            Some(changed)
        });
        if stepped == Some(true) {
            tracing::debug!(
                namespace = ns,
                statefulset = name,
                "simulated statefulset step"
            );
            // Pods the step created or deleted bring their own changes; re-check regardless.
            self.schedule((STATEFULSETS, ns.to_owned(), name.to_owned()));
        }
    }
}

/// The name of the owner of kind `kind` that is the pod's controller.
fn controller_of(obj: &Value, kind: &str) -> Option<String> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == kind)
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

/// Pods in `ns` whose controller reference has `uid`, with their ordinals.
fn owned_pods(st: &State, ns: &str, uid: &str) -> Vec<(i64, Value)> {
    owned::controlled_pods(st, ns, uid)
        .into_iter()
        .filter_map(|p| {
            let ord = meta_str(&p, "name")
                .rsplit_once('-')?
                .1
                .parse::<i64>()
                .ok()?;
            Some((ord, p))
        })
        .collect()
}

fn is_running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A short, stable hash of an object's pod template (FNV-1a), like `pod-template-hash`.
fn template_hash(obj: &Value) -> String {
    let text = obj["spec"]["template"].to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

fn create_pod(st: &mut State, sts: &Value, ord: i64, revision: &str) {
    let ns = meta_str(sts, "namespace");
    let name = meta_str(sts, "name");
    let pod_name = format!("{name}-{ord}");
    let Some(def) = st.registry.lookup("", "v1", "pods") else {
        return;
    };
    let template = &sts["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    labels["apps.kubernetes.io/pod-index"] = json!(ord.to_string());
    labels["controller-revision-hash"] = json!(revision);
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    spec["hostname"] = json!(pod_name);
    if let Some(svc) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        spec["subdomain"] = json!(svc);
    }
    let mut metadata = json!({
        "name": pod_name,
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [owned::controller_ref(sts, "apps/v1", "StatefulSet")],
    });
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(a);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    match owned::create(st, def, ns, pod) {
        Ok(_) => tracing::debug!(namespace = ns, pod = %pod_name, "statefulset pod created"),
        Err(e) => {
            tracing::warn!(namespace = ns, pod = %pod_name, error = %e.message, "creating statefulset pod failed")
        }
    }
}

fn delete_pod(st: &mut State, ns: &str, name: &str, uid: &str) {
    match owned::delete(st, ("", "v1", "pods"), ns, name, uid, None) {
        Ok(_) => tracing::debug!(namespace = ns, pod = name, "statefulset pod deleted"),
        Err(e) => {
            tracing::warn!(namespace = ns, pod = name, error = %e.message, "deleting statefulset pod failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hashes_are_stable_and_follow_the_template() {
        let a = json!({"spec": {"template": {"spec": {"containers": [{"image": "nginx:1"}]}}}});
        let b = json!({"spec": {"template": {"spec": {"containers": [{"image": "nginx:2"}]}}}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }

    #[test]
    fn the_controller_reference_names_the_owner() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"kind": "StatefulSet", "name": "web", "controller": true},
            {"kind": "StatefulSet", "name": "other"}
        ]}});
        assert_eq!(controller_of(&pod, "StatefulSet").as_deref(), Some("web"));
        assert_eq!(controller_of(&pod, "ReplicaSet"), None);
    }
}
