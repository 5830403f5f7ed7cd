//! The DaemonSet controller.
//!
//! ## What it does in a real cluster
//!
//! The **DaemonSet controller** (`pkg/controller/daemon`) runs one pod of the template on
//! every node that should run it, replaces a pod that failed, and writes `status`:
//! `desiredNumberScheduled` (nodes that should run it), `currentNumberScheduled` (nodes that
//! do), `numberMisscheduled`, `numberReady`, `updatedNumberScheduled`, `numberAvailable`,
//! `numberUnavailable` and `observedGeneration`. Its pods carry the labels
//! `controller-revision-hash` and `pod-template-generation`, and a node affinity on
//! `metadata.name` that the scheduler honours.
//!
//! ## What the simulation keeps (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
//!
//! [`DaemonSetController`] runs on the crate's worker loop ([`crate::worker`]): its informer
//! follows DaemonSets, the pods they control and Nodes; a change of a DaemonSet or one of its
//! pods syncs that DaemonSet, a change of a Node syncs them all. It places one pod on every
//! Node that is not `unschedulable` (the cluster's one node, `embedded-node`, unless a test
//! registers more), bound to it directly with `spec.nodeName` rather than through node
//! affinity and the scheduler; at most [`MAX_PODS_PER_SYNC`] pods are created or deleted per
//! sync. Left out: rolling updates (a changed template does not replace existing pods),
//! `minReadySeconds` (ready counts as available), taints and tolerations, node selectors and
//! affinity, and creation back-off.

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control::{self, is_active, is_ready, set_count};
use crate::worker::Controller;

/// Most pods one sync creates or deletes; the next sync, woken by those writes, does the rest.
pub const MAX_PODS_PER_SYNC: usize = 100;

fn daemonsets() -> Resource {
    Resource::apps("daemonsets")
}

fn pods() -> Resource {
    Resource::core("pods")
}

fn nodes() -> Resource {
    Resource::core("nodes")
}

/// The DaemonSet controller (`daemonset-controller`), acting through `lb`.
#[derive(Debug)]
pub struct DaemonSetController {
    lb: Loopback,
}

impl DaemonSetController {
    /// A DaemonSet controller writing through `lb`.
    pub fn new(lb: Loopback) -> Self {
        DaemonSetController { lb }
    }
}

/// The DaemonSet controlling `pod`.
fn controller_ds(pod: &Value) -> Option<String> {
    controller_ref_of(pod)
        .filter(|r| r["kind"] == "DaemonSet" && r["apiVersion"] == "apps/v1")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

fn ds_pod(pod: &Value) -> bool {
    controller_ds(pod).is_some()
}

impl Controller for DaemonSetController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "daemonset-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![
            Kind::all(daemonsets()),
            Kind::only(pods(), ds_pod),
            Kind::all(nodes()),
        ]
    }

    fn keys_for(&self, ev: &WatchEvent, cache: &Informer) -> Vec<Key> {
        if ev.resource == daemonsets() {
            vec![key_of(&ev.object)]
        } else if ev.resource == nodes() {
            self.all_keys(cache)
        } else {
            controller_ds(&ev.object)
                .map(|ds| (meta_str(&ev.object, "namespace").to_owned(), ds))
                .into_iter()
                .collect()
        }
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&daemonsets()).map(|o| key_of(o)).collect()
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(ds) = cache.get(&daemonsets(), &key.0, &key.1) else {
            return Ok(None);
        };
        if is_deleting(ds) {
            return Ok(None);
        }
        let nodes: Vec<String> = cache
            .list(&nodes())
            .filter(|n| n["spec"]["unschedulable"] != true)
            .map(|n| meta_str(n, "name").to_owned())
            .collect();
        let pods: Vec<Value> = cache
            .controlled_by(&pods(), meta_str(ds, "uid"))
            .into_iter()
            .map(|p| p.to_value())
            .collect();
        sync(&self.lb, &ds.to_value(), &nodes, pods).await?;
        Ok(None)
    }
}

/// One pass of the controller over one DaemonSet, the schedulable nodes and its pods.
async fn sync(
    lb: &Loopback,
    ds: &Value,
    nodes: &[String],
    controlled: Vec<Value>,
) -> Result<(), ApiError> {
    // A failed pod is deleted, to be replaced by the next sync.
    for p in controlled
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed" && !is_deleting(p))
        .take(MAX_PODS_PER_SYNC)
    {
        pod_control::delete(lb, &pods(), p, None).await?;
    }
    let mut active: Vec<Value> = controlled.into_iter().filter(is_active).collect();
    let on_node = |pods: &[Value], node: &str| pods.iter().any(|p| p["spec"]["nodeName"] == node);
    let missing: Vec<&String> = nodes
        .iter()
        .filter(|n| !on_node(&active, n))
        .take(MAX_PODS_PER_SYNC)
        .collect();
    for node in missing {
        let mut pod = pod_control::pod_from_template(ds, "apps/v1", "DaemonSet");
        pod["metadata"]["labels"]["pod-template-generation"] = json!(
            ds["metadata"]["generation"]
                .as_i64()
                .unwrap_or(1)
                .to_string()
        );
        pod["spec"]["nodeName"] = json!(node);
        active.push(pod_control::create_pod(lb, pod).await?);
    }
    let scheduled: Vec<&Value> = active
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| nodes.iter().any(|x| x == n))
        })
        .collect();
    let current = nodes.iter().filter(|n| on_node(&active, n)).count() as i64;
    let misscheduled = active
        .iter()
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty() && !nodes.iter().any(|x| x == n))
        })
        .count() as i64;
    let ready = scheduled.iter().filter(|p| is_ready(p)).count() as i64;
    let desired = nodes.len() as i64;
    let mut status = json!({
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": ready,
    });
    set_count(
        &mut status,
        "observedGeneration",
        ds["metadata"]["generation"].as_i64().unwrap_or(0),
    );
    set_count(&mut status, "updatedNumberScheduled", current);
    set_count(&mut status, "numberAvailable", ready);
    set_count(&mut status, "numberUnavailable", (desired - ready).max(0));
    pod_control::update_status(lb, &daemonsets(), ds, status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_daemon_set_pods_are_followed() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": true}
        ]}});
        assert_eq!(controller_ds(&pod), Some("ds".to_owned()));
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds"}
        ]}});
        assert!(!ds_pod(&pod));
    }
}
