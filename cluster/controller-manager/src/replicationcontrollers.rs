//! The ReplicationController manager.
//!
//! ## What it does in a real cluster
//!
//! The **ReplicationController manager** (`pkg/controller/replication`, which is the
//! ReplicaSet controller of `pkg/controller/replicaset` run on v1 ReplicationControllers)
//! counts the active pods its `spec.selector` matches and it controls (not `Succeeded` or
//! `Failed`, not being deleted), creates pods named `<rc>-<random>` from the template (with a
//! controlling `ownerReference`) until there are `spec.replicas` (default 1), deletes the
//! surplus (not-ready pods first), and writes `status`: `replicas`, `fullyLabeledReplicas`
//! (pods that carry every template label), `readyReplicas`, `availableReplicas` (ready for
//! `minReadySeconds`) and `observedGeneration`. A selector left empty defaults to the
//! template's labels (`SetDefaults_ReplicationController`).
//!
//! ## What the simulation keeps (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
//!
//! [`ReplicationControllerManager`] runs on the crate's worker loop ([`crate::worker`]): its
//! informer follows ReplicationControllers and the pods they control, and a change of either
//! syncs the controller, which behaves as above. At most [`MAX_PODS_PER_SYNC`] pods are
//! created or deleted per sync (the writes bring the controller back for the rest). Left out:
//! `minReadySeconds` (ready counts as available), creation back-off and slow-start batches,
//! adoption of orphaned pods, and the expectations cache (the informer catches up before each
//! sync, so a sync always counts its own earlier writes: see [`crate::informer`]).

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control::{self, is_active, is_ready, set_count};
use crate::worker::Controller;

/// Most pods one sync creates or deletes; the next sync, woken by those writes, does the rest.
pub const MAX_PODS_PER_SYNC: usize = 100;

fn rcs() -> Resource {
    Resource::core("replicationcontrollers")
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// The ReplicationController manager (`replicationcontroller`), acting through `lb`.
#[derive(Debug)]
pub struct ReplicationControllerManager {
    lb: Loopback,
}

impl ReplicationControllerManager {
    /// A manager writing through `lb`.
    pub fn new(lb: Loopback) -> Self {
        ReplicationControllerManager { lb }
    }
}

/// The ReplicationController controlling `pod`.
fn controller_rc(pod: &Value) -> Option<String> {
    controller_ref_of(pod)
        .filter(|r| r["kind"] == "ReplicationController" && r["apiVersion"] == "v1")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

fn rc_pod(pod: &Value) -> bool {
    controller_rc(pod).is_some()
}

impl Controller for ReplicationControllerManager {
    type Key = Key;

    fn name(&self) -> &'static str {
        "replicationcontroller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(rcs()), Kind::only(pods(), rc_pod)]
    }

    fn keys_for(&self, ev: &WatchEvent, _: &Informer) -> Vec<Key> {
        if ev.resource == rcs() {
            vec![key_of(&ev.object)]
        } else {
            controller_rc(&ev.object)
                .map(|rc| (meta_str(&ev.object, "namespace").to_owned(), rc))
                .into_iter()
                .collect()
        }
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&rcs()).map(|o| key_of(o)).collect()
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(rc) = cache.get(&rcs(), &key.0, &key.1) else {
            return Ok(None);
        };
        if is_deleting(rc) {
            return Ok(None);
        }
        let pods: Vec<Value> = cache
            .controlled_by(&pods(), meta_str(rc, "uid"))
            .into_iter()
            .map(|p| p.to_value())
            .collect();
        sync(&self.lb, &rc.to_value(), pods).await?;
        Ok(None)
    }
}

/// Whether every `key: value` of `selector` is among `labels`.
fn matches(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// One pass of the manager over one controller and the pods it controls.
async fn sync(lb: &Loopback, rc: &Value, controlled: Vec<Value>) -> Result<(), ApiError> {
    let template_labels = &rc["spec"]["template"]["metadata"]["labels"];
    let selector = match &rc["spec"]["selector"] {
        s if s.as_object().is_some_and(|m| !m.is_empty()) => s.clone(),
        _ => template_labels.clone(),
    };
    if selector.as_object().is_none_or(|m| m.is_empty()) {
        return Ok(()); // nothing could ever match: validation refuses such a controller
    }
    let replicas = rc["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let mut active: Vec<Value> = controlled
        .into_iter()
        .filter(|p| is_active(p) && matches(&selector, &p["metadata"]["labels"]))
        .collect();
    let count = active.len() as i64;
    if count < replicas {
        let missing = usize::try_from(replicas - count).unwrap_or(usize::MAX);
        for _ in 0..missing.min(MAX_PODS_PER_SYNC) {
            let pod = pod_control::pod_from_template(rc, "v1", "ReplicationController");
            active.push(pod_control::create_pod(lb, pod).await?);
        }
    } else if count > replicas {
        // Not-ready pods go first, then the newest (a simplified `ActivePodsWithRanks`).
        active.sort_by(|a, b| {
            is_ready(a).cmp(&is_ready(b)).then_with(|| {
                meta_str(b, "creationTimestamp").cmp(meta_str(a, "creationTimestamp"))
            })
        });
        let surplus = usize::try_from(count - replicas).unwrap_or(usize::MAX);
        let doomed: Vec<Value> = active.drain(..surplus.min(MAX_PODS_PER_SYNC)).collect();
        for p in &doomed {
            pod_control::delete(lb, &pods(), p, None).await?;
        }
    }
    let ready = active.iter().filter(|p| is_ready(p)).count() as i64;
    let fully_labeled = active
        .iter()
        .filter(|p| matches(template_labels, &p["metadata"]["labels"]))
        .count() as i64;
    let mut status = json!({"replicas": active.len()});
    set_count(&mut status, "fullyLabeledReplicas", fully_labeled);
    set_count(&mut status, "readyReplicas", ready);
    set_count(&mut status, "availableReplicas", ready);
    set_count(
        &mut status,
        "observedGeneration",
        rc["metadata"]["generation"].as_i64().unwrap_or(0),
    );
    pod_control::update_status(lb, &rcs(), rc, status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_reference_names_the_owner_kind() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ReplicationController", "name": "rc", "controller": true}
        ]}});
        assert_eq!(controller_rc(&pod), Some("rc".to_owned()));
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": true}
        ]}});
        assert_eq!(controller_rc(&pod), None);
    }

    #[test]
    fn selectors_match_by_every_label() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(matches(&json!({"app": "web"}), &labels));
        assert!(!matches(&json!({"app": "db"}), &labels));
        assert!(!matches(&json!({"app": "web"}), &json!(null)));
    }
}
