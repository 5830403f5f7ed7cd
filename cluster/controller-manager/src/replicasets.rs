//! The ReplicaSet controller: keeps `spec.replicas` pods of a ReplicaSet's template.
//!
//! ## What kube-controller-manager's controller does
//!
//! `pkg/controller/replicaset` (`ReplicaSetController.syncReplicaSet`) works from informers of
//! ReplicaSets and pods. For one ReplicaSet it
//!
//! 1. lists the pods of its namespace and keeps the *active* ones (`FilterActivePods`: not
//!    `Succeeded` or `Failed`, not being deleted);
//! 2. **claims** them (`ClaimPods`): a pod it controls (the `ownerReferences` entry with
//!    `controller: true` carries its UID) whose labels no longer match `spec.selector` is
//!    released (the reference removed); an orphan (no controller) that matches is adopted (the
//!    reference added), unless the ReplicaSet is being deleted;
//! 3. **manages replicas** (`manageReplicas`), unless the ReplicaSet is being deleted: with
//!    fewer active pods than `spec.replicas` (default 1) it creates the missing ones from
//!    `spec.template`, named by the server from `generateName: <rs>-` (`<rs>-` plus five random
//!    characters), carrying the template's labels, annotations and finalizers and a controller
//!    `ownerReference` (`blockOwnerDeletion: true`); with more it deletes the surplus, the
//!    least useful first (`ActivePodsWithRanks`: unscheduled before scheduled, `Pending`
//!    before `Unknown` before `Running`, not ready before ready, newer before older), each with
//!    a UID precondition. At most `burstReplicas` (500) pods are created or deleted per sync, in
//!    slow-start batches that stop at the first error;
//! 4. writes `status` (`calculateStatus`): `replicas` (the active pods it claimed),
//!    `fullyLabeledReplicas` (those carrying every template label), `readyReplicas` (`Ready`
//!    condition `True`), `availableReplicas` (ready for at least `spec.minReadySeconds`),
//!    `observedGeneration`, and the condition `ReplicaFailure` (`FailedCreate`/`FailedDelete`)
//!    while creating or deleting pods fails. When every pod is ready but some are not available
//!    yet, it looks again after `minReadySeconds`.
//!
//! An *expectations* cache remembers the creations and deletions it is waiting to see in its
//! informer, so a second sync does not create the same pods again.
//!
//! ## What this one keeps, and how
//!
//! All of the above, reaching the server only through the loopback interface
//! ([`embedded_apiserver::loopback`]) as `system:kube-controller-manager`: its writes go through
//! authorization, admission and validation like any client's, and a pod it creates is bound and
//! run by the cluster's node like any other. [`ReplicaSetController`] runs on the crate's worker
//! loop ([`crate::worker`]): its informer ([`crate::informer`]) follows ReplicaSets and pods, a
//! change of a ReplicaSet syncs it, a change of a pod syncs its controller (before and after
//! the change) or, for an active orphan, every ReplicaSet of its namespace whose selector
//! matches it (`getPodReplicaSets`). The informer catches up before every sync, so a sync
//! always sees its own earlier writes and needs no expectations cache. Claiming is
//! [`crate::claim`], pods from the template and deletes with a UID precondition are
//! [`crate::pod_control`]. A failed adoption or release is logged and the sync goes on; a
//! failed status write syncs the ReplicaSet again (at once after a conflict, else with the
//! worker's back-off).
//!
//! Departures: every change is acted on after the cluster's workload delay
//! (`ControllerManagerBuilder::workload_delay`, default 500 ms, zero allowed; measured with
//! `tokio::time`, so paused-clock tests control it), where kube-controller-manager reacts at
//! once; pods are created and deleted one after the other (stopping at the first error) rather
//! than in parallel slow-start batches; the deletion ranking leaves out the ready time,
//! restart counts and co-located pods; no Events are recorded.

use std::time::Duration;

use apimachinery::clock::Clock;
use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{EventType, Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::claim::{self, Claimed, labels_of, selector_of, string_map};
use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control::{self, is_active, is_available, is_ready, set_count};
use crate::worker::Controller;

/// Most pods one sync of one ReplicaSet creates or deletes (`burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

const POD_PHASE_RANK: [&str; 3] = ["Pending", "Unknown", "Running"];

fn replicasets() -> Resource {
    Resource::apps("replicasets")
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// The ReplicaSet controller (`replicaset-controller`), acting through `lb`.
#[derive(Debug)]
pub struct ReplicaSetController {
    lb: Loopback,
    delay: Duration,
    clock: Clock,
}

impl ReplicaSetController {
    /// A ReplicaSet controller writing through `lb`, reacting `delay` after each change, with
    /// condition timestamps and "now" (for availability) from `clock`.
    pub fn new(lb: Loopback, delay: Duration, clock: Clock) -> Self {
        ReplicaSetController { lb, delay, clock }
    }
}

impl Controller for ReplicaSetController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "replicaset-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(replicasets()), Kind::all(pods())]
    }

    /// The changed ReplicaSet; the controller of a changed pod (and the one it had before);
    /// for an active orphan pod, every ReplicaSet of its namespace whose selector matches it.
    fn keys_for(&self, ev: &WatchEvent, cache: &Informer) -> Vec<Key> {
        if ev.resource == replicasets() {
            return vec![key_of(&ev.object)];
        }
        let ns = meta_str(&ev.object, "namespace");
        let mut owners = vec![];
        for p in std::iter::once(&ev.object).chain(ev.previous.as_ref()) {
            match controller_ref_of(p) {
                Some(r) if r["kind"] == "ReplicaSet" => {
                    if let Some(n) = r["name"].as_str() {
                        owners.push(n.to_owned());
                    }
                }
                Some(_) => {}
                None if ev.kind != EventType::Deleted && is_active(p) => {
                    owners.extend(claim::selecting(
                        cache.list_namespace(&replicasets(), ns),
                        p,
                    ));
                }
                None => {}
            }
        }
        owners.sort();
        owners.dedup();
        owners.into_iter().map(|o| (ns.to_owned(), o)).collect()
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&replicasets()).map(|o| key_of(o)).collect()
    }

    fn delay(&self) -> Duration {
        self.delay
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let (ns, name) = (key.0.as_str(), key.1.as_str());
        let Some(rs) = cache.get(&replicasets(), ns, name) else {
            return Ok(None);
        };
        let rs = rs.to_value();
        let Some(selector) = selector_of(&rs["spec"]["selector"]) else {
            return Ok(None);
        };

        // Claim the active pods: ours that match, orphans that match (adopted), ours that no
        // longer match (released).
        let active = cache.list_namespace(&pods(), ns).filter(|p| is_active(p));
        let Claimed {
            owned: mut claimed,
            adopt,
            release,
        } = claim::claim(&rs, &selector, active);
        for p in adopt {
            match claim::adopt(&self.lb, &pods(), &rs, "apps/v1", "ReplicaSet", &p).await {
                Ok(pod) => claimed.push(pod),
                Err(e) => {
                    tracing::debug!(namespace = ns, pod = meta_str(&p, "name"), error = %e.message, "adopting a pod failed")
                }
            }
        }
        for p in release {
            if let Err(e) = claim::release(&self.lb, &pods(), &rs, &p).await {
                tracing::debug!(namespace = ns, pod = meta_str(&p, "name"), error = %e.message, "releasing a pod failed");
            }
        }

        let failure = if is_deleting(&rs) {
            None
        } else {
            self.manage_replicas(&rs, &claimed).await
        };
        self.write_status(&rs, &claimed, failure).await
    }
}

impl ReplicaSetController {
    /// Creates or deletes pods towards `spec.replicas`; the `ReplicaFailure` reason and
    /// message when a write failed.
    async fn manage_replicas(&mut self, rs: &Value, active: &[Value]) -> Option<(String, String)> {
        let ns = meta_str(rs, "namespace");
        let replicas = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
        let count = active.len() as i64;
        if count < replicas {
            let missing = usize::try_from(replicas - count).unwrap_or(usize::MAX);
            for _ in 0..missing.min(BURST_REPLICAS) {
                let pod = pod_control::pod_from_template(rs, "apps/v1", "ReplicaSet");
                if let Err(e) = pod_control::create_pod(&self.lb, pod).await {
                    tracing::warn!(namespace = ns, replicaset = meta_str(rs, "name"), error = %e.message, "creating a pod failed");
                    return Some(("FailedCreate".into(), e.message));
                }
            }
        } else if count > replicas {
            let surplus = usize::try_from(count - replicas).unwrap_or(usize::MAX);
            let mut ranked: Vec<&Value> = active.iter().collect();
            ranked.sort_by_key(|p| deletion_rank(p));
            for p in ranked.into_iter().take(surplus.min(BURST_REPLICAS)) {
                if let Err(e) = pod_control::delete(&self.lb, &pods(), p, None).await {
                    tracing::warn!(namespace = ns, pod = meta_str(p, "name"), error = %e.message, "deleting a pod failed");
                    return Some(("FailedDelete".into(), e.message));
                }
            }
        }
        None
    }

    /// Writes the status from the claimed pods (`calculateStatus`); when every pod is ready
    /// but some are not available yet, asks to look again after `minReadySeconds`.
    async fn write_status(
        &mut self,
        rs: &Value,
        active: &[Value],
        failure: Option<(String, String)>,
    ) -> Result<Option<Duration>, ApiError> {
        let ns = meta_str(rs, "namespace");
        let now = self.clock.now();
        let min_ready = rs["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let template_labels = string_map(&rs["spec"]["template"]["metadata"]["labels"]);
        let fully_labeled = active
            .iter()
            .filter(|p| {
                let labels = labels_of(p);
                template_labels
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
            })
            .count() as i64;
        let ready = active.iter().filter(|p| is_ready(p)).count() as i64;
        let available = active
            .iter()
            .filter(|p| is_available(p, min_ready, now))
            .count() as i64;
        let mut status = rs["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        status["replicas"] = json!(active.len());
        set_count(&mut status, "fullyLabeledReplicas", fully_labeled);
        set_count(&mut status, "readyReplicas", ready);
        set_count(&mut status, "availableReplicas", available);
        set_count(
            &mut status,
            "observedGeneration",
            rs["metadata"]["generation"].as_i64().unwrap_or(0),
        );
        let mut conditions: Vec<Value> =
            status["conditions"].as_array().cloned().unwrap_or_default();
        let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
        match failure {
            Some((reason, message)) if !has_failure => {
                conditions.push(json!({"type": "ReplicaFailure", "status": "True",
                    "reason": reason, "message": message,
                    "lastTransitionTime": self.clock.now_time()}));
            }
            None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
            _ => {}
        }
        if conditions.is_empty() {
            if let Some(o) = status.as_object_mut() {
                o.remove("conditions");
            }
        } else {
            status["conditions"] = Value::Array(conditions);
        }
        match pod_control::update_status(&self.lb, &replicasets(), rs, status).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                tracing::debug!(namespace = ns, replicaset = meta_str(rs, "name"), error = %e.message, "status update failed; retrying");
                return Err(e);
            }
        }
        let replicas = rs["spec"]["replicas"].as_i64().unwrap_or(1);
        if min_ready > 0 && ready == replicas && available != replicas {
            return Ok(Some(Duration::from_secs(
                u64::try_from(min_ready).unwrap_or(0),
            )));
        }
        Ok(None)
    }
}

/// How useful a pod is, least useful first (a shortened `ActivePodsWithRanks`).
fn deletion_rank(p: &Value) -> (bool, usize, bool, std::cmp::Reverse<String>) {
    let scheduled = p["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let phase = p["status"]["phase"].as_str().unwrap_or("Pending");
    let phase_rank = POD_PHASE_RANK.iter().position(|x| *x == phase).unwrap_or(0);
    (
        scheduled,
        phase_rank,
        is_ready(p),
        std::cmp::Reverse(meta_str(p, "creationTimestamp").to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unscheduled_pending_and_unready_pods_go_first() {
        let pod = |node: &str, phase: &str, ready: bool, created: &str| {
            json!({"metadata": {"creationTimestamp": created},
                   "spec": {"nodeName": node},
                   "status": {"phase": phase, "conditions": [
                       {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
        };
        let mut pods = [
            pod("n", "Running", true, "2024-01-01T00:00:00Z"),
            pod("n", "Running", true, "2024-01-02T00:00:00Z"),
            pod("n", "Running", false, "2024-01-01T00:00:00Z"),
            pod("", "Pending", false, "2024-01-01T00:00:00Z"),
            pod("n", "Pending", false, "2024-01-01T00:00:00Z"),
        ];
        pods.sort_by_key(deletion_rank);
        assert_eq!(pods[0]["spec"]["nodeName"], "");
        assert_eq!(pods[1]["status"]["phase"], "Pending");
        assert_eq!(pods[2]["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            pods[3]["metadata"]["creationTimestamp"],
            "2024-01-02T00:00:00Z"
        );
    }
}
