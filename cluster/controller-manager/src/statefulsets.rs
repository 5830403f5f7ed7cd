//! The StatefulSet controller.
//!
//! ## What it does in a real cluster
//!
//! A StatefulSet (`pkg/controller/statefulset`) gives every pod a stable identity: pods are
//! named `<name>-<ordinal>` (0, 1, 2, ...), carry a controller `ownerReference` to the set and
//! the labels `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`, and get
//! `hostname` (and `subdomain`, the set's `serviceName`) set. With the default
//! `podManagementPolicy: OrderedReady` the controller creates them one at a time in ordinal
//! order, each only once the ones before it are Running and Ready, and scales down from the
//! highest ordinal, one at a time; with `Parallel` it creates and deletes them all at once.
//! A pod that disappears, or ends (`Failed`, `Succeeded`), is recreated with the same name.
//!
//! **Revisions.** Every pod template the set has had is a *revision*, stored as a
//! ControllerRevision named `<set>-<hash of the template>`; each pod carries its revision in
//! the label `controller-revision-hash`. `status.updateRevision` is the revision of the
//! current template, `status.currentRevision` the one the pods had before the update began;
//! `updatedReplicas` and `currentReplicas` count the pods at each. A pod created for an
//! ordinal below the `partition` of a rolling update is made from the *current* revision's
//! template; every other from the update revision's.
//!
//! **Updates.** With the default `updateStrategy: RollingUpdate`, when the template changes
//! the controller replaces the pods in **reverse ordinal order**: once every pod is Running
//! and Ready and none is terminating, it deletes the highest-ordinal pod whose revision is not
//! the update revision; that pod is recreated from the new template, and the controller waits
//! until it is Running and Ready before the next. Ordinals below
//! `rollingUpdate.partition` (default 0) are left at their revision. When every pod is updated
//! and ready, `currentRevision` becomes `updateRevision` (and `currentReplicas` equals
//! `updatedReplicas`): the rollout is complete. With `updateStrategy: OnDelete` nothing is
//! rolled: a pod picks up the new template only when someone deletes it.
//!
//! ## What the simulation keeps and leaves out (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
//!
//! [`StatefulSetController`] runs on the crate's worker loop ([`crate::worker`]): its informer
//! follows StatefulSets and the pods they control, and it syncs a set the *workload delay*
//! after it or one of its pods changes (`ClusterBuilder::workload_delay` (crate
//! `embedded-cluster`), default 500 ms, zero allowed; measured with `tokio::time`, so
//! paused-clock tests control it). Each sync takes one `OrderedReady` step (or, with
//! `Parallel`, creates and deletes everything at once, at most [`MAX_PODS_PER_STEP`] pods),
//! one rolling-update step when nothing else was to be done, then writes `status` from the
//! pods that exist (`replicas` counts pods that are not terminating, `readyReplicas` and
//! `availableReplicas` those Running with `Ready=True`, `currentReplicas`/`updatedReplicas`,
//! `currentRevision`/`updateRevision`, `observedGeneration`). The node (crate `embedded-node`)
//! runs the pods and keeps them Running and Ready.
//!
//! ControllerRevisions are not served by the embedded API server: the controller remembers
//! the templates of the revisions it has seen in memory (a revision it never saw, after a
//! restart of the cluster from a data directory, is replaced by the update revision).
//! `maxUnavailable` (always 1 here), `minReadySeconds`, PersistentVolumeClaim templates and
//! their retention policy, and rollbacks through revision history are left out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control::{self, is_running_and_ready, set_count};
use crate::worker::Controller;

/// Most pods one StatefulSet step creates or deletes (Parallel policy); the next step follows
/// at once. Keeps a step's work independent of `spec.replicas`.
pub const MAX_PODS_PER_STEP: usize = 100;

/// The label holding a pod's revision.
pub const REVISION_LABEL: &str = "controller-revision-hash";

fn statefulsets() -> Resource {
    Resource::apps("statefulsets")
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// The StatefulSet controller (`statefulset-controller`), acting through `lb`.
#[derive(Debug)]
pub struct StatefulSetController {
    lb: Loopback,
    delay: Duration,
    /// Per set: revision name → its pod template (the ControllerRevisions' role).
    revisions: HashMap<Key, BTreeMap<String, Value>>,
}

impl StatefulSetController {
    /// A StatefulSet controller writing through `lb`, reacting `delay` after each change.
    pub fn new(lb: Loopback, delay: Duration) -> Self {
        StatefulSetController {
            lb,
            delay,
            revisions: HashMap::new(),
        }
    }
}

/// The StatefulSet controlling `pod`.
fn controller_sts(pod: &Value) -> Option<String> {
    controller_ref_of(pod)
        .filter(|r| r["kind"] == "StatefulSet" && r["apiVersion"] == "apps/v1")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

fn sts_pod(pod: &Value) -> bool {
    controller_sts(pod).is_some()
}

impl Controller for StatefulSetController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "statefulset-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(statefulsets()), Kind::only(pods(), sts_pod)]
    }

    fn keys_for(&self, ev: &WatchEvent, _: &Informer) -> Vec<Key> {
        if ev.resource == statefulsets() {
            vec![key_of(&ev.object)]
        } else {
            controller_sts(&ev.object)
                .map(|s| (meta_str(&ev.object, "namespace").to_owned(), s))
                .into_iter()
                .collect()
        }
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&statefulsets()).map(|o| key_of(o)).collect()
    }

    fn delay(&self) -> Duration {
        self.delay
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(sts) = cache.get(&statefulsets(), &key.0, &key.1) else {
            self.revisions.remove(key);
            return Ok(None);
        };
        if is_deleting(sts) {
            return Ok(None);
        }
        let sts = sts.to_value();
        let pods: Vec<(i64, Value)> = cache
            .controlled_by(&pods(), meta_str(&sts, "uid"))
            .into_iter()
            .filter_map(|p| Some((ordinal(p)?, p.to_value())))
            .collect();
        let history = self.revisions.entry(key.clone()).or_default();
        let stepped = sync(&self.lb, &sts, pods, history).await?;
        if stepped {
            tracing::debug!(namespace = %key.0, statefulset = %key.1, "statefulset step");
        }
        Ok(None)
    }
}

/// The ordinal of a pod named `<set>-<ordinal>`.
fn ordinal(pod: &Value) -> Option<i64> {
    meta_str(pod, "name").rsplit_once('-')?.1.parse().ok()
}

/// A short, stable hash of a pod template (FNV-1a), like the ControllerRevision name's.
fn template_hash(template: &Value) -> String {
    let text = template.to_string();
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

fn revision_of(pod: &Value) -> &str {
    pod["metadata"]["labels"][REVISION_LABEL]
        .as_str()
        .unwrap_or_default()
}

/// What a set's spec says about updates.
struct UpdateStrategy {
    rolling: bool,
    partition: i64,
}

impl UpdateStrategy {
    fn of(sts: &Value) -> Self {
        let s = &sts["spec"]["updateStrategy"];
        UpdateStrategy {
            rolling: s["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate",
            partition: s["rollingUpdate"]["partition"].as_i64().unwrap_or(0).max(0),
        }
    }
}

/// One step of the controller over one set and its pods (see the module docs); whether it
/// created or deleted a pod.
async fn sync(
    lb: &Loopback,
    sts: &Value,
    mut pods: Vec<(i64, Value)>,
    history: &mut BTreeMap<String, Value>,
) -> Result<bool, ApiError> {
    let name = meta_str(sts, "name");
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let parallel = sts["spec"]["podManagementPolicy"] == "Parallel";
    let strategy = UpdateStrategy::of(sts);
    let template = &sts["spec"]["template"];
    let update_revision = format!("{name}-{}", template_hash(template));
    history.insert(update_revision.clone(), template.clone());
    let current_revision = match sts["status"]["currentRevision"].as_str() {
        Some(r) if history.contains_key(r) => r.to_owned(),
        _ => update_revision.clone(),
    };
    history.retain(|r, _| *r == update_revision || *r == current_revision);
    pods.sort_by_key(|(o, _)| *o);
    let mut changed = false;

    // A pod that ended (Failed or Succeeded) is deleted, to be recreated with its name.
    for (_, p) in &pods {
        let phase = p["status"]["phase"].as_str().unwrap_or_default();
        if matches!(phase, "Failed" | "Succeeded") && !is_deleting(p) {
            pod_control::delete(lb, &self::pods(), p, None).await?;
            changed = true;
        }
    }
    if changed {
        // Their deletion brings the set back; the recreation waits for it to finish.
        return write_status(
            lb,
            sts,
            &pods,
            &current_revision,
            &update_revision,
            &strategy,
        )
        .await
        .map(|()| true);
    }

    // Scale up: missing ordinals below `replicas`, at most `MAX_PODS_PER_STEP` per step
    // (found lazily: the work is bounded by the pods that exist, never by `replicas`, which may
    // be 2^31 - 1).
    let existing: HashSet<i64> = pods.iter().map(|(o, _)| *o).collect();
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
        // `newVersionedStatefulSetPod`: below the partition, the current revision.
        let revision = if strategy.rolling && ord < strategy.partition {
            &current_revision
        } else {
            &update_revision
        };
        let template = history.get(revision).unwrap_or(template);
        let created = pod_control::create_pod(lb, new_pod(sts, template, ord, revision)).await;
        match created {
            Ok(p) => pods.push((ord, p)),
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        changed = true;
        if !parallel {
            break;
        }
    }

    // Scale down: extra ordinals, highest first.
    if !changed {
        let terminating = pods.iter().any(|(_, p)| is_deleting(p));
        let extra: Vec<&Value> = pods
            .iter()
            .rev()
            .filter(|(o, p)| *o >= replicas && !is_deleting(p))
            .map(|(_, p)| p)
            .take(MAX_PODS_PER_STEP)
            .collect();
        for p in extra {
            if !parallel && terminating {
                break;
            }
            pod_control::delete(lb, &self::pods(), p, None).await?;
            changed = true;
            if !parallel {
                break;
            }
        }
    }

    // Rolling update: once all is settled, the highest ordinal not at the update revision.
    if !changed && strategy.rolling {
        let settled = pods.len() as i64 == replicas
            && pods
                .iter()
                .all(|(_, p)| !is_deleting(p) && is_running_and_ready(p));
        if settled
            && let Some((ord, p)) = pods
                .iter()
                .rev()
                .find(|(o, p)| *o >= strategy.partition && revision_of(p) != update_revision)
        {
            tracing::debug!(
                namespace = meta_str(sts, "namespace"),
                statefulset = name,
                ordinal = ord,
                "rolling update: replacing a pod"
            );
            pod_control::delete(lb, &self::pods(), p, None).await?;
            changed = true;
        }
    }

    let live: Vec<(i64, Value)> = pods.into_iter().filter(|(_, p)| !is_deleting(p)).collect();
    write_status(
        lb,
        sts,
        &live,
        &current_revision,
        &update_revision,
        &strategy,
    )
    .await?;
    Ok(changed)
}

/// The pod of ordinal `ord`, from `template` at `revision`.
fn new_pod(sts: &Value, template: &Value, ord: i64, revision: &str) -> Value {
    let mut from = sts.clone();
    from["spec"]["template"] = template.clone();
    let mut pod = pod_control::pod_from_template(&from, "apps/v1", "StatefulSet");
    let pod_name = format!("{}-{ord}", meta_str(sts, "name"));
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("generateName");
        m.insert("name".into(), json!(pod_name));
    }
    let labels = &mut pod["metadata"]["labels"];
    labels["statefulset.kubernetes.io/pod-name"] = json!(pod_name);
    labels["apps.kubernetes.io/pod-index"] = json!(ord.to_string());
    labels[REVISION_LABEL] = json!(revision);
    pod["spec"]["hostname"] = json!(pod_name);
    if let Some(svc) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        pod["spec"]["subdomain"] = json!(svc);
    }
    pod
}

/// Writes the set's status from its pods (`live`: those not terminating).
async fn write_status(
    lb: &Loopback,
    sts: &Value,
    pods: &[(i64, Value)],
    current_revision: &str,
    update_revision: &str,
    strategy: &UpdateStrategy,
) -> Result<(), ApiError> {
    let live: Vec<&Value> = pods
        .iter()
        .map(|(_, p)| p)
        .filter(|p| !is_deleting(p))
        .collect();
    let count = live.len() as i64;
    let ready = live.iter().filter(|p| is_running_and_ready(p)).count() as i64;
    let at = |rev: &str| live.iter().filter(|p| revision_of(p) == rev).count() as i64;
    let mut current_revision = current_revision.to_owned();
    let mut current = at(&current_revision);
    let updated = at(update_revision);
    // `completeRollingUpdate`: every pod updated and ready.
    if strategy.rolling && updated == count && ready == count {
        current_revision = update_revision.to_owned();
        current = updated;
    }
    let mut status = json!({
        "observedGeneration": sts["metadata"]["generation"].as_i64().unwrap_or(1),
        "replicas": count,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
        "collisionCount": 0,
        "availableReplicas": ready,
    });
    set_count(&mut status, "readyReplicas", ready);
    set_count(&mut status, "currentReplicas", current);
    set_count(&mut status, "updatedReplicas", updated);
    pod_control::update_status(lb, &statefulsets(), sts, status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hashes_are_stable_and_follow_the_template() {
        let a = json!({"spec": {"containers": [{"image": "nginx:1"}]}});
        let b = json!({"spec": {"containers": [{"image": "nginx:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }

    #[test]
    fn the_controller_reference_names_the_owner() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "other"}
        ]}});
        assert_eq!(controller_sts(&pod).as_deref(), Some("web"));
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": true}
        ]}});
        assert_eq!(controller_sts(&pod), None);
    }

    #[test]
    fn the_update_strategy_defaults_to_rolling_without_a_partition() {
        let s = UpdateStrategy::of(&json!({"spec": {}}));
        assert!(s.rolling && s.partition == 0);
        let s = UpdateStrategy::of(&json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}));
        assert!(!s.rolling);
        let s = UpdateStrategy::of(
            &json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}}),
        );
        assert!(s.rolling && s.partition == 2);
    }

    #[test]
    fn pods_are_named_by_ordinal_and_carry_their_revision() {
        let sts = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {"serviceName": "web", "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}});
        let old = json!({"metadata": {"labels": {"app": "web", "v": "1"}}, "spec": {}});
        let pod = new_pod(&sts, &old, 2, "web-abc");
        assert_eq!(pod["metadata"]["name"], "web-2");
        assert!(pod["metadata"].get("generateName").is_none());
        assert_eq!(pod["metadata"]["labels"]["v"], "1");
        assert_eq!(pod["metadata"]["labels"][REVISION_LABEL], "web-abc");
        assert_eq!(
            pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
            "2"
        );
        assert_eq!(pod["spec"]["hostname"], "web-2");
        assert_eq!(pod["spec"]["subdomain"], "web");
        assert_eq!(ordinal(&pod), Some(2));
    }
}
