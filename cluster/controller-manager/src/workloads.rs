//! Simulated Deployment and ReplicaSet status.
//!
//! ## What these controllers do in a real cluster
//!
//! A Deployment is, like an `At`, a wish: "keep N copies of this pod template running". The
//! **Deployment controller** in kube-controller-manager creates a ReplicaSet per template
//! revision and scales them (rolling updates move replicas from the old one to the new one);
//! the **ReplicaSet controller** creates and deletes the pods. The Deployment's status counts
//! what it sees: `replicas`, `updatedReplicas` (on the newest template), `readyReplicas`,
//! `availableReplicas` (ready for `minReadySeconds`), the conditions `Available` and
//! `Progressing`, and `observedGeneration`, the `metadata.generation` of the spec that status
//! describes. `kubectl rollout status` waits until `observedGeneration` caught up and the
//! counts equal `spec.replicas`.
//!
//! ## What the simulation keeps and leaves out
//!
//! This module is the **fast mode**, a departure from Kubernetes for tests that want
//! Deployments to roll out without the cost of pods (`ControllerManagerBuilder::deployment_pods(false)`,
//! `ClusterBuilder::deployment_pods(false)` in crate `embedded-cluster`). By default Deployments
//! and ReplicaSets are run as Kubernetes runs them, by [`crate::deployments`] and
//! [`crate::replicasets`], and this task does not start.
//!
//! One background task follows
//! the store's change feed ([`crate::background`]). Whenever a Deployment or ReplicaSet
//! changes, it schedules a *sync* of that object after the workload delay
//! (`ClusterBuilder::workload_delay` (crate `embedded-cluster`), default 500 ms, zero allowed;
//! measured with `tokio::time`, so paused-clock tests control it). **Deployments** get only
//! their status: after the delay every count equals `spec.replicas` (default 1),
//! `observedGeneration` catches up, and `Available`/`Progressing` are `True`. No ReplicaSets
//! or pods are created, so a test of a controller that owns Deployments sees them "roll out"
//! without the cost of pods. **ReplicaSets** created directly get their status the same way
//! (`replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`,
//! `observedGeneration`), without pods either. Rolling updates, `maxSurge`/`maxUnavailable`,
//! `minReadySeconds`, paused deployments and rollbacks are left out. (StatefulSets are
//! [`crate::statefulsets`].)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed, VirtualClock};
use embedded_apiserver::meta::meta_str;
use embedded_apiserver::store::Store;

const DEPLOYMENTS: &str = "apps/deployments";
const REPLICASETS: &str = "apps/replicasets";

/// Settings of the simulated workload controllers.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadConfig {
    /// How long after a change the controllers react to it.
    pub delay: Duration,
    /// Source of the timestamps written into conditions.
    pub clock: VirtualClock,
}

/// Starts the simulated Deployment and ReplicaSet status on `tracker`; they stop when
/// `shutdown` is cancelled.
pub fn spawn(
    store: Arc<Store>,
    config: WorkloadConfig,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(run(store, config, shutdown));
}

/// `(storage, namespace, name)` of a Deployment or ReplicaSet.
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
            for storage in [DEPLOYMENTS, REPLICASETS] {
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
            DEPLOYMENTS => self.schedule((DEPLOYMENTS, ns, meta_str(obj, "name").to_owned())),
            REPLICASETS => self.schedule((REPLICASETS, ns, meta_str(obj, "name").to_owned())),
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
                _ => self.sync_replicaset(&k.1, &k.2),
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
}
