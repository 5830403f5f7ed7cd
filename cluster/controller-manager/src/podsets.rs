//! Simulated ReplicationController and DaemonSet controllers.
//!
//! ## What they do in a real cluster
//!
//! Both keep pods made from a template (`spec.template`) and report what they see in
//! `status`, like the ReplicaSet controller:
//!
//! * the **ReplicationController manager** (`pkg/controller/replication`, which is the
//!   ReplicaSet controller of `pkg/controller/replicaset` run on v1 ReplicationControllers)
//!   counts the active pods its `spec.selector` matches and it controls (not `Succeeded` or
//!   `Failed`, not being deleted), creates pods named `<rc>-<random>` from the template (with a
//!   controlling `ownerReference`) until there are `spec.replicas` (default 1), deletes the
//!   surplus (not-ready pods first), and writes `status`: `replicas`, `fullyLabeledReplicas`
//!   (pods that carry every template label), `readyReplicas`, `availableReplicas` (ready for
//!   `minReadySeconds`) and `observedGeneration`. A selector left empty defaults to the
//!   template's labels (`SetDefaults_ReplicationController`);
//! * the **DaemonSet controller** (`pkg/controller/daemon`) runs one pod of the template on
//!   every node that should run it, replaces a pod that failed, and writes `status`:
//!   `desiredNumberScheduled` (nodes that should run it), `currentNumberScheduled` (nodes that
//!   do), `numberMisscheduled`, `numberReady`, `updatedNumberScheduled`, `numberAvailable`,
//!   `numberUnavailable` and `observedGeneration`. Its pods carry the labels
//!   `controller-revision-hash` and `pod-template-generation`, and a node affinity on
//!   `metadata.name` that the scheduler honours.
//!
//! ## What the simulation keeps (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
//!
//! One background task follows the store's change feed, like the Job controller
//! ([`super::jobs`]), and syncs a ReplicationController or DaemonSet whenever it, one of its
//! pods, or (for DaemonSets) a Node changes; each sync runs under the store lock, so it is
//! atomic. ReplicationControllers behave as above; at most [`MAX_PODS_PER_SYNC`] pods are
//! created or deleted per sync (the writes bring the controller back for the rest).
//! DaemonSets place one pod on every Node object that is not `unschedulable` (the server's one
//! node, `embedded-node`, unless a test registers more), bound to it directly with
//! `spec.nodeName` rather than through node affinity and the scheduler. Left out: rolling
//! updates of either (a changed template does not replace existing pods), `minReadySeconds`
//! (ready counts as available), taints and tolerations, node selectors and affinity, creation
//! back-off and slow-start batches, and the ReplicaSet expectations cache (the store lock makes
//! each sync see its own earlier writes).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed};
use super::owned;
use embedded_apiserver::meta::meta_str;
use embedded_apiserver::store::{State, Store};

const RCS: &str = "core/replicationcontrollers";
const DAEMONSETS: &str = "apps/daemonsets";
const PODS: &str = "core/pods";
const NODES: &str = "core/nodes";

/// Most pods one sync creates or deletes; the next sync, woken by those writes, does the rest.
pub const MAX_PODS_PER_SYNC: usize = 100;

/// Starts the ReplicationController and DaemonSet controllers.
pub fn spawn(store: Arc<Store>, shutdown: CancellationToken, tracker: &TaskTracker) {
    tracker.spawn(async move {
        let mut feed = ChangeFeed::new(store.clone());
        sync_all(&store);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = feed.changed() => {}
            }
            loop {
                let mut keys: Vec<(&'static str, String, String)> = match feed.poll() {
                    Batch::Changes(changes) if changes.is_empty() => break,
                    Batch::Changes(changes) => {
                        let mut keys = vec![];
                        let mut nodes_changed = false;
                        for c in &changes {
                            let ns = meta_str(&c.object, "namespace").to_owned();
                            match c.storage.as_str() {
                                RCS | DAEMONSETS => {
                                    let storage = if c.storage == RCS { RCS } else { DAEMONSETS };
                                    keys.push((storage, ns, meta_str(&c.object, "name").to_owned()))
                                }
                                PODS => {
                                    if let Some((storage, owner)) = controller_of(&c.object) {
                                        keys.push((storage, ns, owner));
                                    }
                                }
                                NODES => nodes_changed = true,
                                _ => {}
                            }
                        }
                        if nodes_changed {
                            keys.extend(store.read(|st| all_keys(st, &[DAEMONSETS])));
                        }
                        keys
                    }
                    Batch::Resync => {
                        sync_all(&store);
                        continue;
                    }
                };
                keys.sort();
                keys.dedup();
                if !keys.is_empty() {
                    store.write(|st| {
                        for (storage, ns, name) in &keys {
                            sync(st, storage, ns, name);
                        }
                    });
                }
                tokio::task::yield_now().await;
            }
        }
    });
}

fn all_keys(st: &State, storages: &[&'static str]) -> Vec<(&'static str, String, String)> {
    storages
        .iter()
        .flat_map(|s| {
            st.list(s, None).into_iter().map(move |o| {
                (
                    *s,
                    meta_str(o, "namespace").to_owned(),
                    meta_str(o, "name").to_owned(),
                )
            })
        })
        .collect()
}

fn sync_all(store: &Store) {
    store.write(|st| {
        for (storage, ns, name) in all_keys(st, &[RCS, DAEMONSETS]) {
            sync(st, storage, &ns, &name);
        }
    });
}

fn sync(st: &mut State, storage: &str, ns: &str, name: &str) {
    let Some(owner) = st.get(storage, ns, name).cloned() else {
        return;
    };
    if !meta_str(&owner, "deletionTimestamp").is_empty() {
        return;
    }
    if storage == RCS {
        sync_replication_controller(st, &owner);
    } else {
        sync_daemon_set(st, &owner);
    }
}

/// The storage and name of the ReplicationController or DaemonSet controlling `pod`.
fn controller_of(pod: &Value) -> Option<(&'static str, String)> {
    let r = pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?;
    let storage = match (r["apiVersion"].as_str()?, r["kind"].as_str()?) {
        ("v1", "ReplicationController") => RCS,
        ("apps/v1", "DaemonSet") => DAEMONSETS,
        _ => return None,
    };
    Some((storage, r["name"].as_str()?.to_owned()))
}

/// The pods in the owner's namespace that it controls (by UID).
fn owned_pods(st: &State, owner: &Value) -> Vec<Value> {
    owned::controlled_pods(st, meta_str(owner, "namespace"), meta_str(owner, "uid"))
}

/// Not finished and not being deleted (`controller.IsPodActive`).
fn is_active(p: &Value) -> bool {
    meta_str(p, "deletionTimestamp").is_empty()
        && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

fn is_ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Whether every `key: value` of `selector` is among `labels`.
fn matches(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

/// Sets `key` to `n`, or removes it when `n` is zero (Go's `omitempty`).
fn set_count(status: &mut Value, key: &str, n: i64) {
    if n != 0 {
        status[key] = json!(n);
    } else if let Some(o) = status.as_object_mut() {
        o.remove(key);
    }
}

/// Writes `status` when it differs from the stored one.
fn write_status(st: &mut State, storage: &str, owner: &Value, status: Value) {
    if owner["status"] == status {
        return;
    }
    let mut updated = owner.clone();
    updated["status"] = status;
    st.write(storage, updated);
}

/// One pass of the ReplicationController manager over one controller.
fn sync_replication_controller(st: &mut State, rc: &Value) {
    let template_labels = &rc["spec"]["template"]["metadata"]["labels"];
    let selector = match &rc["spec"]["selector"] {
        s if s.as_object().is_some_and(|m| !m.is_empty()) => s.clone(),
        _ => template_labels.clone(),
    };
    if selector.as_object().is_none_or(|m| m.is_empty()) {
        return; // nothing could ever match: validation refuses such a controller
    }
    let replicas = rc["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    let mut active: Vec<Value> = owned_pods(st, rc)
        .into_iter()
        .filter(|p| is_active(p) && matches(&selector, &p["metadata"]["labels"]))
        .collect();
    let count = active.len() as i64;
    if count < replicas {
        let missing = usize::try_from(replicas - count).unwrap_or(usize::MAX);
        for _ in 0..missing.min(MAX_PODS_PER_SYNC) {
            if let Some(p) = create_pod(st, rc, "v1", "ReplicationController", None) {
                active.push(p);
            }
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
            delete_pod(st, p);
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
    write_status(st, RCS, rc, status);
}

/// One pass of the DaemonSet controller over one DaemonSet.
fn sync_daemon_set(st: &mut State, ds: &Value) {
    let nodes: Vec<String> = st
        .list(NODES, None)
        .into_iter()
        .filter(|n| n["spec"]["unschedulable"] != true)
        .map(|n| meta_str(n, "name").to_owned())
        .collect();
    let pods = owned_pods(st, ds);
    // A failed pod is deleted, to be replaced by the next sync.
    for p in pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed" && meta_str(p, "deletionTimestamp").is_empty())
        .take(MAX_PODS_PER_SYNC)
    {
        delete_pod(st, p);
    }
    let mut active: Vec<Value> = pods.into_iter().filter(is_active).collect();
    let on_node = |pods: &[Value], node: &str| pods.iter().any(|p| p["spec"]["nodeName"] == node);
    let missing: Vec<&String> = nodes
        .iter()
        .filter(|n| !on_node(&active, n))
        .take(MAX_PODS_PER_SYNC)
        .collect();
    for node in missing {
        if let Some(p) = create_pod(st, ds, "apps/v1", "DaemonSet", Some(node)) {
            active.push(p);
        }
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
    write_status(st, DAEMONSETS, ds, status);
}

/// Creates a pod from the owner's template, controlled by it (`node`: bound there). Returns the
/// stored pod.
fn create_pod(
    st: &mut State,
    owner: &Value,
    api_version: &str,
    kind: &str,
    node: Option<&str>,
) -> Option<Value> {
    let ns = meta_str(owner, "namespace");
    let name = meta_str(owner, "name");
    let def = st.registry.lookup("", "v1", "pods")?;
    let template = &owner["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    if let Some(node) = node {
        labels["pod-template-generation"] = json!(
            owner["metadata"]["generation"]
                .as_i64()
                .unwrap_or(1)
                .to_string()
        );
        spec["nodeName"] = json!(node);
    }
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "namespace": ns,
        "labels": labels,
        "ownerReferences": [owned::controller_ref(owner, api_version, kind)],
    });
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(a);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
    match owned::create(st, def, ns, pod) {
        Ok(created) => Some(created),
        Err(e) => {
            tracing::warn!(namespace = ns, owner = name, kind, error = %e.message, "creating a pod failed");
            None
        }
    }
}

fn delete_pod(st: &mut State, pod: &Value) {
    let ns = meta_str(pod, "namespace");
    let name = meta_str(pod, "name");
    let pods = ("", "v1", "pods");
    if let Err(e) = owned::delete(st, pods, ns, name, meta_str(pod, "uid"), None) {
        tracing::warn!(namespace = ns, pod = name, error = %e.message, "deleting a pod failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_reference_names_the_owner_kind() {
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ReplicationController", "name": "rc", "controller": true}
        ]}});
        assert_eq!(controller_of(&pod), Some((RCS, "rc".to_owned())));
        let pod = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": true}
        ]}});
        assert_eq!(controller_of(&pod), None);
    }

    #[test]
    fn selectors_match_by_every_label() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(matches(&json!({"app": "web"}), &labels));
        assert!(!matches(&json!({"app": "db"}), &labels));
        assert!(!matches(&json!({"app": "web"}), &json!(null)));
    }
}
