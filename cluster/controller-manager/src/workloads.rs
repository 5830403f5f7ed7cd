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
//! [`StatusController`] runs on the crate's worker loop ([`crate::worker`]), as every other
//! controller here does: its informer follows Deployments and ReplicaSets through the loopback
//! interface, and a change of either syncs that object after the workload delay
//! (`ClusterBuilder::workload_delay` (crate `embedded-cluster`), default 500 ms, zero allowed;
//! measured with `tokio::time`, so paused-clock tests control it). **Deployments** get only
//! their status, written to `deployments/status` as `system:kube-controller-manager`: after
//! the delay every count equals `spec.replicas` (default 1), `observedGeneration` catches up,
//! and `Available`/`Progressing` are `True`. No ReplicaSets or pods are created, so a test of
//! a controller that owns Deployments sees them "roll out" without the cost of pods.
//! **ReplicaSets** created directly get their status the same way (`replicas`,
//! `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`, `observedGeneration`),
//! without pods either. Rolling updates, `maxSurge`/`maxUnavailable`, `minReadySeconds`,
//! paused deployments and rollbacks are left out. (StatefulSets are
//! [`crate::statefulsets`].)

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::background::VirtualClock;
use crate::informer::{Informer, Kind, is_deleting, key_of};
use crate::worker::Controller;

fn deployments() -> Resource {
    Resource::apps("deployments")
}

fn replicasets() -> Resource {
    Resource::apps("replicasets")
}

/// Settings of the simulated status.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WorkloadConfig {
    /// How long after a change the controller reacts to it.
    pub(crate) delay: Duration,
    /// Source of the timestamps written into conditions.
    pub(crate) clock: VirtualClock,
}

/// Which of the two kinds a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Which {
    Deployment,
    ReplicaSet,
}

/// `(kind, namespace, name)` of a Deployment or ReplicaSet.
pub(crate) type WorkKey = (Which, String, String);

/// The fast mode's status simulation (`deployment-replicaset-status`), acting through `lb`.
#[derive(Debug)]
pub(crate) struct StatusController {
    lb: Loopback,
    config: WorkloadConfig,
}

impl StatusController {
    /// The status simulation writing through `lb`.
    pub(crate) fn new(lb: Loopback, config: WorkloadConfig) -> Self {
        StatusController { lb, config }
    }
}

impl Controller for StatusController {
    type Key = WorkKey;

    fn name(&self) -> &'static str {
        "deployment-replicaset-status"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(deployments()), Kind::all(replicasets())]
    }

    fn keys_for(&self, ev: &WatchEvent, _cache: &Informer) -> Vec<WorkKey> {
        let which = if ev.resource == deployments() {
            Which::Deployment
        } else {
            Which::ReplicaSet
        };
        let (ns, name) = key_of(&ev.object);
        vec![(which, ns, name)]
    }

    fn all_keys(&self, cache: &Informer) -> Vec<WorkKey> {
        let mut keys = vec![];
        for (which, resource) in [
            (Which::Deployment, deployments()),
            (Which::ReplicaSet, replicasets()),
        ] {
            keys.extend(cache.list(&resource).map(|o| {
                let (ns, name) = key_of(o);
                (which, ns, name)
            }));
        }
        keys
    }

    fn delay(&self) -> Duration {
        self.config.delay
    }

    async fn sync(
        &mut self,
        key: &WorkKey,
        cache: &Informer,
    ) -> Result<Option<Duration>, ApiError> {
        let (which, ns, name) = key;
        let resource = match which {
            Which::Deployment => deployments(),
            Which::ReplicaSet => replicasets(),
        };
        let Some(obj) = cache.get(&resource, ns, name) else {
            return Ok(None);
        };
        if is_deleting(obj) {
            return Ok(None);
        }
        let status = match which {
            Which::Deployment => deployment_status(obj, name, &self.config.clock.now_time()),
            Which::ReplicaSet => replicaset_status(obj),
        };
        if obj["status"] == status {
            return Ok(None);
        }
        let mut new = obj.to_value();
        new["status"] = status;
        self.lb.update_status(&resource, ns, new).await?;
        tracing::debug!(namespace = %ns, name = %name, ?which, "simulated status updated");
        Ok(None)
    }
}

/// A Deployment's status as if rolled out: every count equals `spec.replicas`, both
/// conditions `True` (a condition already `True` for the same reason keeps its times).
fn deployment_status(d: &Value, name: &str, now: &str) -> Value {
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
                template_hash(d)
            )
        ),
    ]);
    status
}

/// A ReplicaSet's status: every count equals `spec.replicas` (status only, like
/// Deployments).
fn replicaset_status(rs: &Value) -> Value {
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
    status
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
