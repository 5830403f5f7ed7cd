//! The garbage collector: deleting an owner deletes (or orphans) its dependents.
//!
//! ## What the garbage collector does in a real cluster
//!
//! Objects point at the objects they belong to with `metadata.ownerReferences` (`apiVersion`,
//! `kind`, `name`, `uid`, and the flags `controller` and `blockOwnerDeletion`): a ReplicaSet's
//! pods point at the ReplicaSet, an `At`'s pod points at the `At`. The API server itself never
//! follows these references. A controller inside kube-controller-manager, the **garbage
//! collector**, watches every resource, keeps a graph of owners and dependents, and acts when
//! an owner goes away. What it does depends on the `propagationPolicy` of the DELETE, which the
//! API server records as a finalizer on the owner (see [`embedded_apiserver::verbs::delete_one`]):
//!
//! * **Background** (the default): the API server removes the owner at once. The collector
//!   then finds every dependent whose owners are all gone and deletes it (with the policy its
//!   own finalizers ask for), so whole trees disappear level by level. A dependent that still
//!   has another live owner only loses the reference to the dead one.
//! * **Foreground**: the owner stays, marked with a `deletionTimestamp` and the
//!   `foregroundDeletion` finalizer, while the collector deletes its dependents (those that have
//!   dependents of their own are deleted in the foreground too). Dependents whose reference
//!   says `blockOwnerDeletion: true` hold the owner: once none of them is left, the collector
//!   removes the finalizer and the owner disappears — last, hence "foreground".
//! * **Orphan**: the owner stays with the `orphan` finalizer while the collector removes the
//!   owner's uid from every dependent's `ownerReferences`; then it removes the finalizer and
//!   the owner goes, leaving the dependents behind, unowned.
//!
//! An owner reference is *dangling* when no object with that uid exists (owners are matched by
//! uid, so a new object with the old name does not adopt the old dependents). A reference
//! from a namespaced dependent to a namespaced owner in another namespace is dangling by
//! definition; a cluster-scoped dependent with a namespaced owner is an invalid reference and
//! is never collected.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
//!
//! let server = ApiServer::builder().start().await?; // the collector is on by default
//! let owner = server.load_manifests("{apiVersion: v1, kind: ConfigMap, metadata: {name: owner}}")?;
//! assert_eq!(owner, ["ConfigMap/owner"]);
//! let store = server.store();
//! let uid = store.read(|s| s.get("core/configmaps", "default", "owner").unwrap()["metadata"]["uid"].clone());
//! server.load_manifests(&format!(
//!     "{{apiVersion: v1, kind: ConfigMap, metadata: {{name: dep, ownerReferences: \
//!       [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]}}}}"
//! ))?;
//! store.write(|s| s.delete("core/configmaps", "default", "owner")); // a Background delete
//! let mut changes = store.subscribe();
//! while store.read(|s| s.get("core/configmaps", "default", "dep").is_some()) {
//!     changes.changed().await?; // the collector removes the dependent
//! }
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## What the simulation keeps and leaves out
//!
//! This module keeps the algorithm of the real `attemptToDeleteItem`,
//! `processDeletingDependentsItem` and `orphanDependents` above, run by a background task
//! owned by the server handle (always on unless
//! `ClusterBuilder::garbage_collector` (crate `embedded-cluster`) turns it off). Instead of informers over
//! HTTP it follows the store's change feed ([`super::background`]) and keeps its graph as three
//! maps (object → uid and owners, uid → object, owner uid → dependents), rebuilt from scratch
//! whenever the feed reports a compaction. Unlike the real graph, which holds a node for every
//! object of every monitored resource, only objects with owners and objects being deleted are
//! nodes: nothing asks after any other object while it lives, and an owner's dependents are
//! found by its uid. (A node for each of 10,000 Ats without owners held about 5 MB.) A dependent is examined when it enters the graph or
//! its owner references change, and again when one of its owners goes or starts deleting its
//! dependents, as the real graph builder queues it; an update that leaves its owners as they
//! were (a pod's status, say) is not a reason to look again. It acts under the store lock, so each decision is
//! made on current data and never needs a retry; deletions go through the same
//! [`embedded_apiserver::verbs::delete_one`] as a client's DELETE (uid precondition, finalizers, pod grace
//! periods), so every step is visible to watchers exactly as in a cluster. It leaves out the
//! real collector's discovery-driven monitors, its retry queues and back-off (nothing here can
//! fail transiently) and its events about invalid references. Namespace deletion is the
//! namespace controller's job, which the API server side does inline
//! ([`embedded_apiserver::verbs::delete_one`] on a namespace): everything in it is deleted, then the
//! namespace goes once it is empty.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed};
use embedded_apiserver::meta::{finalizers_of, meta_str};
use embedded_apiserver::registry::ResourceDef;
use embedded_apiserver::store::{ChangeType, State, Store, Stored};
use embedded_apiserver::strategy;
use embedded_apiserver::verbs::{self, DeleteOptions, Target};

/// `(storage, namespace, name)` of an object.
type ObjRef = (String, String, String);

/// Starts the garbage collector on `tracker`; it stops when `shutdown` is cancelled.
pub fn spawn(store: Arc<Store>, shutdown: CancellationToken, tracker: &TaskTracker) {
    tracker.spawn(run(store, shutdown));
}

async fn run(store: Arc<Store>, shutdown: CancellationToken) {
    let mut gc = Collector::new(store.clone());
    let mut feed = ChangeFeed::new(store);
    gc.resync();
    gc.drain();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = feed.changed() => {}
        }
        // Drain everything written so far, including the collector's own writes, before
        // sleeping again.
        loop {
            match feed.poll() {
                Batch::Changes(changes) if changes.is_empty() => break,
                Batch::Changes(changes) => {
                    for c in changes {
                        gc.observe(
                            &c.storage,
                            c.kind,
                            &c.object,
                            c.prev.as_deref().map(Stored::value),
                        );
                    }
                }
                Batch::Resync => gc.resync(),
            }
            gc.drain();
            // Stay cooperative when other writers keep the feed busy.
            tokio::task::yield_now().await;
        }
    }
}

/// One owner reference, as the collector needs it.
#[derive(Clone, Debug)]
struct OwnerRef {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    block: bool,
}

fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    Some(OwnerRef {
                        api_version: r["apiVersion"].as_str()?.to_owned(),
                        kind: r["kind"].as_str()?.to_owned(),
                        name: r["name"].as_str()?.to_owned(),
                        uid: r["uid"].as_str()?.to_owned(),
                        block: r["blockOwnerDeletion"].as_bool() == Some(true),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    finalizers_of(obj).iter().any(|x| x == f)
}

fn is_deleting(obj: &Value) -> bool {
    !meta_str(obj, "deletionTimestamp").is_empty()
}

/// Pending work, deduplicated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    /// Decide whether a dependent must go (its owners are gone or going).
    AttemptToDelete(ObjRef),
    /// An owner deleted in the foreground: delete its dependents, release it when none block.
    DeleteDependents(ObjRef),
    /// An owner deleted with `orphan`: strip its references from its dependents, release it.
    Orphan(ObjRef),
}

#[derive(Clone, Debug)]
struct Node {
    uid: String,
    owners: Vec<String>,
}

struct Collector {
    store: Arc<Store>,
    nodes: HashMap<ObjRef, Node>,
    by_uid: HashMap<String, ObjRef>,
    dependents: HashMap<String, HashSet<ObjRef>>,
    queue: VecDeque<Work>,
    queued: HashSet<Work>,
}

impl Collector {
    fn new(store: Arc<Store>) -> Self {
        Collector {
            store,
            nodes: HashMap::new(),
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            queue: VecDeque::new(),
            queued: HashSet::new(),
        }
    }

    fn enqueue(&mut self, w: Work) {
        if self.queued.insert(w.clone()) {
            self.queue.push_back(w);
        }
    }

    /// Rebuilds the graph from the store and re-examines every object.
    fn resync(&mut self) {
        self.nodes.clear();
        self.by_uid.clear();
        self.dependents.clear();
        // Observed under the read lock, each object as it is stored: copying them out would
        // decode every object resting as bytes ([`embedded_apiserver::stored`]) at once.
        let store = self.store.clone();
        store.read(|st| {
            let mut storages: Vec<String> = st
                .registry
                .all()
                .iter()
                .map(|d| d.storage.clone())
                .collect();
            storages.sort();
            storages.dedup();
            for s in &storages {
                for o in st.list_shared(s, None) {
                    o.with_value(|obj| self.observe(s, ChangeType::Added, obj, None));
                }
            }
        });
    }

    fn forget(&mut self, r: &ObjRef) {
        if let Some(old) = self.nodes.remove(r) {
            if self.by_uid.get(&old.uid) == Some(r) {
                self.by_uid.remove(&old.uid);
            }
            for o in old.owners {
                if let Some(set) = self.dependents.get_mut(&o) {
                    set.remove(r);
                    if set.is_empty() {
                        self.dependents.remove(&o);
                    }
                }
            }
        }
    }

    /// Updates the graph with one change and queues what it calls for.
    fn observe(&mut self, storage: &str, kind: ChangeType, obj: &Value, prev: Option<&Value>) {
        let r: ObjRef = (
            storage.to_owned(),
            meta_str(obj, "namespace").to_owned(),
            meta_str(obj, "name").to_owned(),
        );
        let uid = meta_str(obj, "uid").to_owned();
        let mut touched_owners: Vec<String> = prev
            .map(|p| owner_refs(p).into_iter().map(|o| o.uid).collect())
            .unwrap_or_default();
        let known_owners = self.nodes.get(&r).map(|n| n.owners.clone());
        self.forget(&r);
        if kind == ChangeType::Deleted {
            // Its dependents may now have no owner left.
            let deps: Vec<ObjRef> = self
                .dependents
                .get(&uid)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            for d in deps {
                self.enqueue(Work::AttemptToDelete(d));
            }
        } else {
            let owners = owner_refs(obj);
            for o in &owners {
                self.dependents
                    .entry(o.uid.clone())
                    .or_default()
                    .insert(r.clone());
                touched_owners.push(o.uid.clone());
            }
            let owner_uids: Vec<String> = owners.iter().map(|o| o.uid.clone()).collect();
            // A new node, or new owners: are they there? (An update that leaves the owners as
            // they were asks nothing new; an owner's deletion re-examines its dependents.)
            if !owners.is_empty() && known_owners.as_ref() != Some(&owner_uids) {
                self.enqueue(Work::AttemptToDelete(r.clone()));
            }
            // Only dependents and objects being deleted are nodes: nothing asks after an
            // object that has no owners while it lives (its dependents are found by its uid).
            if !owners.is_empty() || is_deleting(obj) {
                self.by_uid.insert(uid.clone(), r.clone());
                self.nodes.insert(
                    r.clone(),
                    Node {
                        uid: uid.clone(),
                        owners: owner_uids,
                    },
                );
            }
            if is_deleting(obj) {
                if has_finalizer(obj, "orphan") {
                    self.enqueue(Work::Orphan(r.clone()));
                }
                if has_finalizer(obj, "foregroundDeletion") {
                    self.enqueue(Work::DeleteDependents(r.clone()));
                }
            }
            // Something that was deleting its dependents may have new (or re-)arrivals.
            if self.dependents.contains_key(&uid) && is_deleting(obj) {
                let deps: Vec<ObjRef> = self.dependents[&uid].iter().cloned().collect();
                for d in deps {
                    self.enqueue(Work::AttemptToDelete(d));
                }
            }
        }
        // An owner waiting for its dependents re-checks whenever one of them changes or goes.
        for o in touched_owners {
            if let Some(owner) = self.by_uid.get(&o).cloned() {
                self.enqueue(Work::DeleteDependents(owner));
            }
        }
    }

    fn drain(&mut self) {
        while let Some(w) = self.queue.pop_front() {
            self.queued.remove(&w);
            match &w {
                Work::AttemptToDelete(r) => self.attempt_to_delete(r),
                Work::DeleteDependents(r) => self.delete_dependents(r),
                Work::Orphan(r) => self.orphan(r),
            }
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<ObjRef> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `attemptToDeleteItem`: classify the owners of `r`, then delete it or drop references.
    fn attempt_to_delete(&mut self, r: &ObjRef) {
        let has_dependents = self
            .nodes
            .get(r)
            .is_some_and(|n| self.dependents.contains_key(&n.uid));
        self.store.write(|st| {
            let Some(obj) = st.get_shared(&r.0, &r.1, &r.2) else {
                return;
            };
            if is_deleting(&obj) {
                // Already going; a foreground deletion in progress is handled on its own.
                return;
            }
            let refs = owner_refs(&obj);
            if refs.is_empty() {
                return;
            }
            let mut solid = vec![];
            let mut dangling = vec![];
            let mut waiting = vec![];
            for o in &refs {
                match classify(st, &r.1, o) {
                    Owner::Solid => solid.push(o),
                    Owner::Dangling => dangling.push(o),
                    Owner::Waiting => waiting.push(o),
                    Owner::Invalid => return,
                }
            }
            if !solid.is_empty() {
                if dangling.is_empty() && waiting.is_empty() {
                    return;
                }
                // Keep the object, drop the references to owners that are gone or going.
                let drop: HashSet<&str> = dangling
                    .iter()
                    .chain(waiting.iter())
                    .map(|o| o.uid.as_str())
                    .collect();
                let mut new = Value::clone(&obj);
                retain_owner_refs(&mut new, |uid| !drop.contains(uid));
                tracing::debug!(storage = %r.0, namespace = %r.1, name = %r.2, "garbage collector removed dangling owner references");
                st.update(&r.0, new);
                return;
            }
            let policy = if !waiting.is_empty() && has_dependents {
                "Foreground"
            } else if has_finalizer(&obj, "orphan") {
                "Orphan"
            } else if has_finalizer(&obj, "foregroundDeletion") {
                "Foreground"
            } else {
                "Background"
            };
            tracing::debug!(storage = %r.0, namespace = %r.1, name = %r.2, policy, "garbage collector deleting an object whose owners are gone");
            delete(st, r, meta_str(&obj, "uid"), policy);
        });
    }

    /// `processDeletingDependentsItem`: an owner in foreground deletion.
    fn delete_dependents(&mut self, r: &ObjRef) {
        let Some(uid) = self.nodes.get(r).map(|n| n.uid.clone()) else {
            return;
        };
        let deps = self.dependents_of(&uid);
        let released = self.store.write(|st| {
            let waiting = st.get(&r.0, &r.1, &r.2).is_some_and(|owner| {
                meta_str(owner, "uid") == uid
                    && is_deleting(owner)
                    && has_finalizer(owner, "foregroundDeletion")
            });
            if !waiting {
                return true;
            }
            let blocking = deps.iter().any(|d| {
                st.get(&d.0, &d.1, &d.2).is_some_and(|dep| {
                    owner_refs(dep).iter().any(|o| o.uid == uid && o.block)
                })
            });
            if blocking {
                return false;
            }
            tracing::debug!(storage = %r.0, namespace = %r.1, name = %r.2, "no dependents block the owner any more; removing foregroundDeletion");
            release(st, r, "foregroundDeletion");
            true
        });
        if !released {
            for d in deps {
                self.enqueue(Work::AttemptToDelete(d));
            }
        }
    }

    /// `orphanDependents`, then the `orphan` finalizer goes.
    fn orphan(&mut self, r: &ObjRef) {
        let Some(uid) = self.nodes.get(r).map(|n| n.uid.clone()) else {
            return;
        };
        let deps = self.dependents_of(&uid);
        self.store.write(|st| {
            let Some(owner) = st.get(&r.0, &r.1, &r.2) else {
                return;
            };
            if meta_str(owner, "uid") != uid || !has_finalizer(owner, "orphan") {
                return;
            }
            for d in &deps {
                let Some(dep) = st.get(&d.0, &d.1, &d.2).cloned() else {
                    continue;
                };
                if owner_refs(&dep).iter().any(|o| o.uid == uid) {
                    let mut new = dep;
                    retain_owner_refs(&mut new, |u| u != uid);
                    st.update(&d.0, new);
                }
            }
            tracing::debug!(storage = %r.0, namespace = %r.1, name = %r.2, orphaned = deps.len(), "dependents orphaned; removing the orphan finalizer");
            release(st, r, "orphan");
        });
    }
}

/// What an owner reference points at.
enum Owner {
    /// A live owner.
    Solid,
    /// No such owner (or another object now has its name).
    Dangling,
    /// The owner is being deleted in the foreground and waits for its dependents.
    Waiting,
    /// The reference cannot be judged (unknown kind, or a namespaced owner of a cluster-scoped
    /// dependent): the dependent is left alone.
    Invalid,
}

fn owner_def(st: &State, o: &OwnerRef) -> Option<Arc<ResourceDef>> {
    let (group, version) = match o.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", o.api_version.as_str()),
    };
    st.registry
        .all()
        .iter()
        .find(|d| d.group == group && d.version == version && d.kind == o.kind)
        .or_else(|| {
            // Owner references name a version; any served version of the kind will do.
            st.registry
                .all()
                .iter()
                .find(|d| d.group == group && d.kind == o.kind)
        })
        .cloned()
}

fn classify(st: &State, dependent_ns: &str, o: &OwnerRef) -> Owner {
    let Some(def) = owner_def(st, o) else {
        return Owner::Invalid;
    };
    let ns = if def.namespaced {
        if dependent_ns.is_empty() {
            return Owner::Invalid;
        }
        dependent_ns
    } else {
        ""
    };
    match st.get(&def.storage, ns, &o.name) {
        Some(owner) if meta_str(owner, "uid") == o.uid => {
            if is_deleting(owner) && has_finalizer(owner, "foregroundDeletion") {
                Owner::Waiting
            } else {
                Owner::Solid
            }
        }
        _ => Owner::Dangling,
    }
}

fn retain_owner_refs(obj: &mut Value, keep: impl Fn(&str) -> bool) {
    let kept: Vec<Value> = obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| keep(r["uid"].as_str().unwrap_or_default()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if kept.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
    } else {
        obj["metadata"]["ownerReferences"] = json!(kept);
    }
}

fn def_for(st: &State, storage: &str) -> Option<Arc<ResourceDef>> {
    st.registry.by_storage(storage).into_iter().next()
}

/// Deletes an object the way a client's DELETE with `propagationPolicy` and a uid
/// precondition would.
fn delete(st: &mut State, r: &ObjRef, uid: &str, policy: &str) {
    let Some(def) = def_for(st, &r.0) else {
        return;
    };
    let target = Target {
        def,
        namespace: (!r.1.is_empty()).then(|| r.1.clone()),
        name: Some(r.2.clone()),
        subresource: None,
    };
    let opts = DeleteOptions {
        propagation: Some(policy.to_owned()),
        precondition_uid: Some(uid.to_owned()),
        ..Default::default()
    };
    if let Err(e) = verbs::delete_one(st, &target, &opts) {
        tracing::debug!(storage = %r.0, namespace = %r.1, name = %r.2, error = %e.message, "garbage collector delete failed");
    }
}

/// Removes one of the collector's finalizers; the object goes if nothing else holds it.
fn release(st: &mut State, r: &ObjRef, finalizer: &str) {
    let Some(def) = def_for(st, &r.0) else {
        return;
    };
    let Some(mut obj) = st.get(&r.0, &r.1, &r.2).cloned() else {
        return;
    };
    let fins: Vec<String> = finalizers_of(&obj)
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    if fins.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        obj["metadata"]["finalizers"] = json!(fins);
    }
    if strategy::should_delete(&def, &obj) {
        verbs::remove_object(st, &def, &r.1, &r.2, Some(obj));
    } else {
        st.update(&r.0, obj);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_owner_references_are_ignored() {
        let obj = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "1", "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "b"},
            "not an object"
        ]}});
        let refs = owner_refs(&obj);
        assert_eq!(refs.len(), 1);
        assert!(refs[0].block);
    }

    #[test]
    fn dropping_the_last_reference_removes_the_field() {
        let mut obj = json!({"metadata": {"ownerReferences": [{"uid": "1"}, {"uid": "2"}]}});
        retain_owner_refs(&mut obj, |u| u != "1");
        assert_eq!(obj["metadata"]["ownerReferences"], json!([{"uid": "2"}]));
        retain_owner_refs(&mut obj, |_| false);
        assert!(obj["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn owners_are_classified_by_uid_scope_and_deletion_state() {
        let store = Store::new(100);
        store.write(|st| {
            st.create(
                "core/configmaps",
                json!({"metadata": {"name": "live", "namespace": "a", "uid": "u-live"}}),
            );
            st.create(
                "core/configmaps",
                json!({"metadata": {"name": "going", "namespace": "a", "uid": "u-going",
                                    "deletionTimestamp": "2024-01-01T00:00:00Z",
                                    "finalizers": ["foregroundDeletion"]}}),
            );
        });
        let r = |name: &str, uid: &str, kind: &str| OwnerRef {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            block: false,
        };
        store.read(|st| {
            assert!(matches!(
                classify(st, "a", &r("live", "u-live", "ConfigMap")),
                Owner::Solid
            ));
            assert!(matches!(
                classify(st, "a", &r("live", "other-uid", "ConfigMap")),
                Owner::Dangling
            ));
            // Another namespace's object of that name is not the owner.
            assert!(matches!(
                classify(st, "b", &r("live", "u-live", "ConfigMap")),
                Owner::Dangling
            ));
            assert!(matches!(
                classify(st, "a", &r("going", "u-going", "ConfigMap")),
                Owner::Waiting
            ));
            assert!(matches!(
                classify(st, "a", &r("x", "y", "NoSuchKind")),
                Owner::Invalid
            ));
            // A cluster-scoped dependent cannot have a namespaced owner.
            assert!(matches!(
                classify(st, "", &r("live", "u-live", "ConfigMap")),
                Owner::Invalid
            ));
        });
    }
}
