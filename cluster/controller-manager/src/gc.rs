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
//! API server records as a finalizer on the owner:
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
//! use embedded_apiserver::loopback::{DeleteParams, ListParams, Resource};
//! use embedded_controller_manager::ControllerManager;
//! use serde_json::json;
//!
//! let server = ApiServer::builder().plain_http(true).start().await?;
//! ControllerManager::builder().start(&server); // the collector is on by default
//! let client = server.loopback("admin", &["system:masters"], "example");
//! let cms = Resource::core("configmaps");
//! let owner = client
//!     .create(&cms, "default", json!({"metadata": {"name": "owner"}}))
//!     .await?;
//! client
//!     .create(&cms, "default", json!({"metadata": {"name": "dep", "ownerReferences": [
//!         {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
//!          "uid": owner["metadata"]["uid"]}]}}))
//!     .await?;
//! let since = client.resource_version();
//! let mut watch = client.watch(&cms, Some("default"), since)?;
//! client.delete(&cms, "default", "owner", &DeleteParams::default()).await?; // Background
//! while client.get(&cms, "default", "dep").await.is_ok() {
//!     watch.next().await?; // the collector removes the dependent
//! }
//! let left = client.list(&cms, Some("default"), &ListParams::default()).await?;
//! assert!(left.items.is_empty());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## What the simulation keeps and leaves out
//!
//! This module keeps the algorithm of the real `attemptToDeleteItem`,
//! `processDeletingDependentsItem` and `orphanDependents` above, run as
//! `system:kube-controller-manager` over the loopback interface (on unless
//! `ClusterBuilder::garbage_collector` (crate `embedded-cluster`) turns it off). Instead of one
//! metadata informer per discovered resource it lists every resource the server serves
//! ([`Loopback::resources`]) and follows them all with one watch ([`Loopback::watch_all`]),
//! which also covers resources that appear later (a new CRD's). Its graph is three maps (object
//! → uid, owners and the owners it blocks; uid → object; owner uid → dependents), rebuilt from
//! a fresh list whenever the watch answers 410 Gone. Unlike the real graph, which holds a node
//! for every object of every monitored resource, only objects with owners and objects being
//! deleted are nodes: nothing asks after any other object while it lives, and an owner's
//! dependents are found by its uid. (A node for each of 10,000 Ats without owners held about
//! 5 MB.) A dependent is examined when it enters the graph or its owner references change, and
//! again when one of its owners goes or starts deleting its dependents, as the real graph
//! builder queues it; an update that leaves its owners as they were (a pod's status, say) is
//! not a reason to look again. Each decision reads the metadata of the objects it depends on
//! afresh with a GET (the real collector's live lookups through its metadata client: only
//! `metadata` is copied, as a `PartialObjectMetadata`), and every write is a client's: owner
//! references and finalizers are removed by JSON merge patches conditional on the
//! resourceVersion read (kube's `deleteOwnerRefJSONMergePatch` and `removeFinalizer`; a
//! conflict re-queues the item), and deletions carry a uid precondition and
//! a `propagationPolicy` (finalizers, pod grace periods), so every step is visible to watchers
//! exactly as in a cluster. An item that fails is retried with the workers' back-off
//! ([`crate::worker::Queue`]). It leaves out the absent-owner cache and the events about
//! invalid references. Like kube's (`DefaultIgnoredResources` of its graph builder), it ignores
//! events, `v1` and `events.k8s.io` alike: it neither lists nor follows them, so an event's
//! `ownerReferences` never get it collected (events go when their `--event-ttl` runs out), and
//! a run that records thousands of events costs the collector nothing for them.
//!
//! Namespace deletion is the namespace controller's job, which the API server does inline:
//! everything in the namespace is deleted, then the namespace goes once it is empty.

use std::collections::{HashMap, HashSet};

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{
    DeleteParams, EventType, ListParams, Loopback, Patch, Resource, Watch, WatchError,
};
use serde_json::{Value, json};

use crate::informer::{is_deleting, meta_str};
use crate::worker::Queue;

/// The resources the collector neither lists nor follows: events (`v1` and `events.k8s.io`,
/// one storage), as kube's garbage collector's `DefaultIgnoredResources`.
fn ignored(resource: &Resource) -> bool {
    resource.plural == "events" && (resource.group.is_empty() || resource.group == "events.k8s.io")
}

/// `(resource, namespace, name)` of an object.
type ObjRef = (Resource, String, String);

/// The garbage collector (`garbage-collector-controller`), acting through `lb` until the
/// server shuts down.
pub async fn run(lb: Loopback) {
    let shutdown = lb.shutdown();
    let mut gc = Collector::new(lb);
    let Some(mut watch) = gc.resync().await else {
        return;
    };
    loop {
        while let Some(w) = gc.queue.pop_due() {
            if shutdown.is_cancelled() {
                return;
            }
            // Decide on the newest graph: apply what the watch has so far.
            match watch.poll() {
                Ok(events) => gc.observe_all(events),
                Err(WatchError::Gone(_)) => match gc.resync().await {
                    Some(w) => watch = w,
                    None => return,
                },
                Err(WatchError::Closed) => return,
            }
            match gc.process(&w).await {
                Ok(()) => gc.queue.forget(&w),
                Err(e) if e.is_conflict() => gc.queue.add(w),
                Err(e) => {
                    tracing::debug!(work = ?w, error = %e.message, "garbage collector item failed; retrying");
                    gc.queue.add_rate_limited(w);
                }
            }
            tokio::task::yield_now().await;
        }
        let next = gc.queue.next_due();
        tokio::select! {
            () = shutdown.cancelled() => return,
            events = watch.next() => match events {
                Ok(events) => gc.observe_all(events),
                Err(WatchError::Gone(_)) => match gc.resync().await {
                    Some(w) => watch = w,
                    None => return,
                },
                Err(WatchError::Closed) => return,
            },
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
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

fn finalizers_of(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| {
            f.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x == f))
}

/// Pending work.
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
    /// The owners this object blocks (`blockOwnerDeletion: true`).
    blocks: Vec<String>,
}

struct Collector {
    lb: Loopback,
    nodes: HashMap<ObjRef, Node>,
    by_uid: HashMap<String, ObjRef>,
    dependents: HashMap<String, HashSet<ObjRef>>,
    queue: Queue<Work>,
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

impl Collector {
    fn new(lb: Loopback) -> Self {
        Collector {
            lb,
            nodes: HashMap::new(),
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            queue: Queue::default(),
        }
    }

    /// Rebuilds the graph from a list of every resource and watches from before the lists;
    /// `None` once the server shuts down. (Changes between the start of the watch and a list
    /// are applied twice; the graph converges to the newest, and every action reads afresh.)
    async fn resync(&mut self) -> Option<Watch> {
        let shutdown = self.lb.shutdown();
        let mut backoff = std::time::Duration::from_millis(100);
        loop {
            match self.relist().await {
                Ok(watch) => return Some(watch),
                Err(e) => {
                    tracing::warn!(error = %e.message, "garbage collector could not list; retrying");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(std::time::Duration::from_secs(30));
        }
    }

    async fn relist(&mut self) -> Result<Watch, ApiError> {
        self.nodes.clear();
        self.by_uid.clear();
        self.dependents.clear();
        let since = self.lb.resource_version();
        let watch = self.lb.watch_all(since)?;
        for info in self.lb.resources() {
            if ignored(&info.resource) {
                continue;
            }
            let list = match self
                .lb
                .list(&info.resource, None, &ListParams::default())
                .await
            {
                Ok(list) => list,
                // Gone since discovery (a CRD deleted meanwhile).
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            for o in list.items {
                // Read without keeping a decoded tree the server rests as bytes.
                o.with_value(|obj| self.observe(&info.resource, EventType::Added, obj, None));
            }
        }
        Ok(watch)
    }

    fn observe_all(&mut self, events: Vec<embedded_apiserver::loopback::WatchEvent>) {
        for ev in events {
            if ignored(&ev.resource) {
                continue;
            }
            let prev = ev.previous.as_ref();
            ev.object.with_value(|obj| match prev {
                Some(p) => p.with_value(|p| self.observe(&ev.resource, ev.kind, obj, Some(p))),
                None => self.observe(&ev.resource, ev.kind, obj, None),
            });
        }
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
    fn observe(&mut self, resource: &Resource, kind: EventType, obj: &Value, prev: Option<&Value>) {
        let r: ObjRef = (
            resource.clone(),
            meta_str(obj, "namespace").to_owned(),
            meta_str(obj, "name").to_owned(),
        );
        let uid = meta_str(obj, "uid").to_owned();
        let mut touched_owners: Vec<String> = prev
            .map(|p| owner_refs(p).into_iter().map(|o| o.uid).collect())
            .unwrap_or_default();
        let known_owners = self.nodes.get(&r).map(|n| n.owners.clone());
        self.forget(&r);
        if kind == EventType::Deleted {
            // Its dependents may now have no owner left.
            for d in self.dependents_of(&uid) {
                self.queue.add(Work::AttemptToDelete(d));
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
                self.queue.add(Work::AttemptToDelete(r.clone()));
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
                        blocks: owners
                            .iter()
                            .filter(|o| o.block)
                            .map(|o| o.uid.clone())
                            .collect(),
                    },
                );
            }
            if is_deleting(obj) {
                if has_finalizer(obj, "orphan") {
                    self.queue.add(Work::Orphan(r.clone()));
                }
                if has_finalizer(obj, "foregroundDeletion") {
                    self.queue.add(Work::DeleteDependents(r.clone()));
                }
                // Something that was deleting its dependents may have new (or re-)arrivals.
                for d in self.dependents_of(&uid) {
                    self.queue.add(Work::AttemptToDelete(d));
                }
            }
        }
        // An owner waiting for its dependents re-checks whenever one of them changes or goes.
        for o in touched_owners {
            if let Some(owner) = self.by_uid.get(&o).cloned() {
                self.queue.add(Work::DeleteDependents(owner));
            }
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<ObjRef> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    async fn process(&mut self, w: &Work) -> Result<(), ApiError> {
        match w {
            Work::AttemptToDelete(r) => self.attempt_to_delete(r).await,
            Work::DeleteDependents(r) => self.delete_dependents(r).await,
            Work::Orphan(r) => self.orphan(r).await,
        }
    }

    /// The object's metadata as the server has it now, a `PartialObjectMetadata` (`None`:
    /// gone): kube's collector reads objects with its metadata client, and needs nothing else.
    async fn get(&self, r: &ObjRef) -> Result<Option<Value>, ApiError> {
        match self.lb.get_metadata(&r.0, &r.1, &r.2).await {
            Ok(obj) => Ok(Some(obj)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The resource an owner reference's `apiVersion` and `kind` name: that version, or any
    /// served version of the kind in its group (references name a version; any will do).
    fn owner_resource(&self, o: &OwnerRef) -> Option<(Resource, bool)> {
        if let Some(info) = self.lb.resource_for_kind(&o.api_version, &o.kind) {
            return Some((info.resource, info.namespaced));
        }
        let group = o
            .api_version
            .split_once('/')
            .map_or("", |(g, _)| g)
            .to_owned();
        self.lb
            .resources()
            .into_iter()
            .find(|i| i.resource.group == group && i.kind == o.kind)
            .map(|i| (i.resource, i.namespaced))
    }

    /// What `o`, an owner of a dependent in `dependent_ns`, points at now.
    async fn classify(&self, dependent_ns: &str, o: &OwnerRef) -> Result<Owner, ApiError> {
        let Some((resource, namespaced)) = self.owner_resource(o) else {
            return Ok(Owner::Invalid);
        };
        let ns = if namespaced {
            if dependent_ns.is_empty() {
                return Ok(Owner::Invalid);
            }
            dependent_ns
        } else {
            ""
        };
        let owner = self.get(&(resource, ns.to_owned(), o.name.clone())).await?;
        Ok(match owner {
            Some(owner) if meta_str(&owner, "uid") == o.uid => {
                if is_deleting(&owner) && has_finalizer(&owner, "foregroundDeletion") {
                    Owner::Waiting
                } else {
                    Owner::Solid
                }
            }
            _ => Owner::Dangling,
        })
    }

    /// `attemptToDeleteItem`: classify the owners of `r`, then delete it or drop references.
    async fn attempt_to_delete(&mut self, r: &ObjRef) -> Result<(), ApiError> {
        let has_dependents = self
            .nodes
            .get(r)
            .is_some_and(|n| self.dependents.contains_key(&n.uid));
        let Some(obj) = self.get(r).await? else {
            return Ok(());
        };
        if is_deleting(&obj) {
            // Already going; a foreground deletion in progress is handled on its own.
            return Ok(());
        }
        let refs = owner_refs(&obj);
        if refs.is_empty() {
            return Ok(());
        }
        let mut solid = vec![];
        let mut gone = HashSet::new();
        let mut waiting = false;
        for o in &refs {
            match self.classify(&r.1, o).await? {
                Owner::Solid => solid.push(o),
                Owner::Dangling => {
                    gone.insert(o.uid.clone());
                }
                Owner::Waiting => {
                    waiting = true;
                    gone.insert(o.uid.clone());
                }
                Owner::Invalid => return Ok(()),
            }
        }
        if !solid.is_empty() {
            if gone.is_empty() {
                return Ok(());
            }
            // Keep the object, drop the references to owners that are gone or going.
            tracing::debug!(resource = %r.0, namespace = %r.1, name = %r.2, "garbage collector removed dangling owner references");
            let patch = owner_refs_patch(&obj, |uid| !gone.contains(uid));
            return self.patch(r, patch).await;
        }
        let policy = if waiting && has_dependents {
            "Foreground"
        } else if has_finalizer(&obj, "orphan") {
            "Orphan"
        } else if has_finalizer(&obj, "foregroundDeletion") {
            "Foreground"
        } else {
            "Background"
        };
        tracing::debug!(resource = %r.0, namespace = %r.1, name = %r.2, policy, "garbage collector deleting an object whose owners are gone");
        let params = DeleteParams {
            propagation_policy: Some(policy.to_owned()),
            uid: Some(meta_str(&obj, "uid").to_owned()),
            ..Default::default()
        };
        match self.lb.delete(&r.0, &r.1, &r.2, &params).await {
            Ok(_) => Ok(()),
            // Gone meanwhile, or another object took the name (the uid precondition).
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `processDeletingDependentsItem`: an owner in foreground deletion.
    async fn delete_dependents(&mut self, r: &ObjRef) -> Result<(), ApiError> {
        let Some(uid) = self.nodes.get(r).map(|n| n.uid.clone()) else {
            return Ok(());
        };
        let Some(owner) = self.get(r).await? else {
            return Ok(());
        };
        let waiting = meta_str(&owner, "uid") == uid
            && is_deleting(&owner)
            && has_finalizer(&owner, "foregroundDeletion");
        if !waiting {
            return Ok(());
        }
        let deps = self.dependents_of(&uid);
        let blocking = deps
            .iter()
            .any(|d| self.nodes.get(d).is_some_and(|n| n.blocks.contains(&uid)));
        if !blocking {
            tracing::debug!(resource = %r.0, namespace = %r.1, name = %r.2, "no dependents block the owner any more; removing foregroundDeletion");
            return self.release(r, owner, "foregroundDeletion").await;
        }
        for d in deps {
            self.queue.add(Work::AttemptToDelete(d));
        }
        Ok(())
    }

    /// `orphanDependents`, then the `orphan` finalizer goes.
    async fn orphan(&mut self, r: &ObjRef) -> Result<(), ApiError> {
        let Some(uid) = self.nodes.get(r).map(|n| n.uid.clone()) else {
            return Ok(());
        };
        let Some(owner) = self.get(r).await? else {
            return Ok(());
        };
        if meta_str(&owner, "uid") != uid || !has_finalizer(&owner, "orphan") {
            return Ok(());
        }
        let deps = self.dependents_of(&uid);
        for d in &deps {
            let Some(dep) = self.get(d).await? else {
                continue;
            };
            if owner_refs(&dep).iter().any(|o| o.uid == uid) {
                self.patch(d, owner_refs_patch(&dep, |u| u != uid)).await?;
            }
        }
        tracing::debug!(resource = %r.0, namespace = %r.1, name = %r.2, orphaned = deps.len(), "dependents orphaned; removing the orphan finalizer");
        self.release(r, owner, "orphan").await
    }

    /// Removes one of the collector's finalizers from `obj` (its metadata as read); the server
    /// removes the object if nothing else holds it. kube's `removeFinalizer`: a JSON merge
    /// patch of the finalizers left, conditional on the resourceVersion read.
    async fn release(&self, r: &ObjRef, obj: Value, finalizer: &str) -> Result<(), ApiError> {
        let fins: Vec<Value> = finalizers_of(&obj)
            .into_iter()
            .filter(|f| f != finalizer)
            .map(Value::String)
            .collect();
        self.patch(r, metadata_list_patch(&obj, "finalizers", fins))
            .await
    }

    /// A JSON merge patch of `r` (a conflict re-queues the item; an object gone meanwhile
    /// needs nothing more).
    async fn patch(&self, r: &ObjRef, patch: Value) -> Result<(), ApiError> {
        match self
            .lb
            .patch(&r.0, &r.1, &r.2, None, Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// kube's `deleteOwnerRefJSONMergePatch`: a JSON merge patch that sets the owner references of
/// `obj` (its metadata as read) to those whose uid `keep` keeps.
fn owner_refs_patch(obj: &Value, keep: impl Fn(&str) -> bool) -> Value {
    let kept: Vec<Value> = obj["metadata"]["ownerReferences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| keep(r["uid"].as_str().unwrap_or_default()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    metadata_list_patch(obj, "ownerReferences", kept)
}

/// A JSON merge patch that sets the list `metadata.<field>` of `obj` (its metadata as read) to
/// `items` (none: `null`, so the field goes), conditional on the resourceVersion read.
fn metadata_list_patch(obj: &Value, field: &str, items: Vec<Value>) -> Value {
    let list = if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    };
    json!({"metadata": {
        "resourceVersion": meta_str(obj, "resourceVersion"),
        field: list,
    }})
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
    fn the_owner_references_patch_keeps_the_rest_and_nulls_an_empty_list() {
        let obj = json!({"metadata": {"resourceVersion": "7",
            "ownerReferences": [{"uid": "1"}, {"uid": "2"}]}});
        assert_eq!(
            owner_refs_patch(&obj, |u| u != "1"),
            json!({"metadata": {"resourceVersion": "7", "ownerReferences": [{"uid": "2"}]}})
        );
        assert_eq!(
            owner_refs_patch(&obj, |_| false),
            json!({"metadata": {"resourceVersion": "7", "ownerReferences": null}})
        );
    }

    #[tokio::test]
    async fn reads_are_metadata_and_patches_are_conditional_on_the_version_read() {
        let server = embedded_apiserver::ApiServer::builder()
            .plain_http(true)
            .start()
            .await
            .unwrap();
        let gc = Collector::new(server.loopback(crate::USER, &[], "test"));
        let admin = server.loopback("admin", &["system:masters"], "test");
        let cms = Resource::core("configmaps");
        let owner = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "o", "uid": "o1"}});
        let dep = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "dep", "finalizers": ["example.com/hold"],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "name": "o", "uid": "o1"}]},
            "data": {"k": "v"}});
        admin.create(&cms, "default", owner).await.unwrap();
        admin.create(&cms, "default", dep).await.unwrap();
        let r: ObjRef = (cms.clone(), "default".into(), "dep".into());

        let read = gc.get(&r).await.unwrap().unwrap();
        assert_eq!(read["kind"], "PartialObjectMetadata");
        assert_eq!(read["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(read["metadata"]["name"], "dep");
        assert!(read.get("data").is_none(), "{read}");

        // Someone else writes in between: the patch made from the older read is refused.
        let mut newer = admin.get(&cms, "default", "dep").await.unwrap();
        newer["data"]["k"] = json!("w");
        admin.update(&cms, "default", newer).await.unwrap();
        let err = gc
            .patch(&r, owner_refs_patch(&read, |_| false))
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{}", err.message);

        // Read again, the same patches go through: references, then a finalizer.
        let read = gc.get(&r).await.unwrap().unwrap();
        gc.patch(&r, owner_refs_patch(&read, |_| false))
            .await
            .unwrap();
        let now = admin.get(&cms, "default", "dep").await.unwrap();
        assert!(now["metadata"].get("ownerReferences").is_none(), "{now}");
        assert_eq!(now["data"]["k"], "w");
        gc.release(&r, gc.get(&r).await.unwrap().unwrap(), "example.com/hold")
            .await
            .unwrap();
        let now = admin.get(&cms, "default", "dep").await.unwrap();
        assert!(now["metadata"].get("finalizers").is_none(), "{now}");
        // Gone: nothing to read, nothing to patch.
        let gone: ObjRef = (cms, "default".into(), "missing".into());
        assert!(gc.get(&gone).await.unwrap().is_none());
        server.shutdown().await;
    }

    #[tokio::test]
    async fn the_graph_queues_a_new_dependent_and_again_when_its_owner_goes() {
        let server = embedded_apiserver::ApiServer::builder()
            .plain_http(true)
            .start()
            .await
            .unwrap();
        let mut gc = Collector::new(server.loopback(crate::USER, &[], "test"));
        let cms = Resource::core("configmaps");
        let dep = json!({"metadata": {"name": "dep", "namespace": "a", "uid": "d1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o",
                                 "uid": "o1", "blockOwnerDeletion": true}]}});
        let r: ObjRef = (cms.clone(), "a".into(), "dep".into());
        gc.observe(&cms, EventType::Added, &dep, None);
        assert_eq!(gc.queue.pop_due(), Some(Work::AttemptToDelete(r.clone())));
        assert_eq!(gc.nodes[&r].blocks, ["o1"]);
        // An update that keeps its owners asks nothing new.
        gc.observe(&cms, EventType::Modified, &dep, Some(&dep));
        assert_eq!(gc.queue.pop_due(), None);
        // Its owner's deletion does.
        let owner = json!({"metadata": {"name": "o", "namespace": "a", "uid": "o1"}});
        gc.observe(&cms, EventType::Deleted, &owner, None);
        assert_eq!(gc.queue.pop_due(), Some(Work::AttemptToDelete(r.clone())));
        // A dependent that goes leaves the graph.
        gc.observe(&cms, EventType::Deleted, &dep, None);
        assert!(gc.nodes.is_empty() && gc.dependents.is_empty() && gc.by_uid.is_empty());
        server.shutdown().await;
    }
}
