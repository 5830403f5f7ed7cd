//! Storage: objects as JSON, one global resourceVersion, and the event history behind watch.
//!
//! ## resourceVersion
//!
//! A real cluster keeps its objects in etcd, whose *revision* is one counter for the whole
//! keyspace, bumped by every write. The API server hands that revision out as
//! `metadata.resourceVersion`, as the `resourceVersion` of every list and as the position of
//! every watch event. This store does the same: [`State::resource_version`] is one `u64`, each
//! create, update or delete increments it and stamps the written object with the new value
//! (rendered as a decimal string). Clients must treat it as opaque and compare it only for
//! equality (optimistic concurrency: an update carrying a stale value gets 409 Conflict), but
//! because it is monotonic, "everything that happened after N" is well defined, and that is
//! what watch is built on.
//!
//! ## The history window and 410 Gone
//!
//! Every write also appends a [`Change`] (ADDED, MODIFIED or DELETED, with the object before and
//! after) to a ring buffer. A watch "from resourceVersion N" replays the changes with
//! `rv > N` and then follows new ones. The ring holds at most `window` changes (etcd's
//! compaction, which the real server requests every five minutes); when the oldest is dropped,
//! [`State::compacted_revision`] moves up to its revision. A watch or list asking for a revision
//! below that can no longer be answered faithfully and gets `410 Expired` ("too old resource
//! version"), which tells a client-go reflector to list again from scratch.
//!
//! The same history lets [`State::snapshot_at`] rebuild a resource's contents as of an older
//! revision (undo the newer changes in reverse), which serves `resourceVersionMatch=Exact` lists
//! and the consistent snapshot behind `limit`/`continue` paging, like etcd's MVCC reads.
//!
//! ## Concurrency
//!
//! All state sits behind one mutex that is never held across an `.await`; a request handler
//! locks it, validates, writes, and unlocks. After each write batch the new revision is published
//! on a `tokio::sync::watch` channel ([`Store::subscribe`]); watch streams and background
//! controllers wait on it and then read [`State::changes_since`] their last revision, so no
//! change is ever missed even if several land between two wake-ups.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;

use super::registry::Registry;

/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
pub type Key = (String, String);

/// The kind of a stored change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was removed.
    Deleted,
}

impl ChangeType {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One entry of the event history.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The revision this change produced.
    pub rv: u64,
    /// Storage key of the resource (`core/pods`, `apps/deployments`, ...).
    pub storage: String,
    /// What happened.
    pub kind: ChangeType,
    /// The object after the change; for DELETED, the last state stamped with the deletion revision.
    pub object: Value,
    /// The object before the change (MODIFIED and DELETED).
    pub prev: Option<Value>,
}

/// `(namespace, name)` of an object.
pub fn key_of(obj: &Value) -> Key {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_owned(),
        meta["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// `metadata.resourceVersion` parsed as a number (0 when absent or not a number).
pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn stamp(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// Everything stored, plus the resource table. Reached through [`Store::read`] / [`Store::write`].
#[derive(Debug)]
pub struct State {
    rv: u64,
    objects: HashMap<String, BTreeMap<Key, Value>>,
    history: VecDeque<Arc<Change>>,
    compacted: u64,
    window: usize,
    /// The resources served; CRD registration edits it under the same lock as the objects.
    pub registry: Registry,
}

impl State {
    fn new(window: usize) -> Self {
        State {
            rv: 1,
            objects: HashMap::new(),
            history: VecDeque::new(),
            compacted: 1,
            window: window.max(1),
            registry: Registry::builtins(),
        }
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest revision a watch may start from (older ones get 410).
    pub fn compacted_revision(&self) -> u64 {
        self.compacted
    }

    /// One stored object.
    pub fn get(&self, storage: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(storage)?
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Stored objects of a resource, ordered by namespace then name; `namespace: None` = all.
    pub fn list(&self, storage: &str, namespace: Option<&str>) -> Vec<&Value> {
        let Some(map) = self.objects.get(storage) else {
            return vec![];
        };
        match namespace {
            None => map.values().collect(),
            Some(ns) => map
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v)
                .collect(),
        }
    }

    fn record(&mut self, change: Change) {
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.window {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    /// Stores a new object (the caller has checked it does not exist) and returns it stamped
    /// with the new revision. The same write as [`State::update`], which records an `ADDED`
    /// change when there was no previous object.
    pub fn create(&mut self, storage: &str, obj: Value) -> Value {
        self.update(storage, obj)
    }

    /// Replaces a stored object and returns it stamped with the new revision.
    pub fn update(&mut self, storage: &str, mut obj: Value) -> Value {
        self.rv += 1;
        stamp(&mut obj, self.rv);
        let key = key_of(&obj);
        let prev = self
            .objects
            .entry(storage.to_owned())
            .or_default()
            .insert(key, obj.clone());
        self.record(Change {
            rv: self.rv,
            storage: storage.to_owned(),
            kind: if prev.is_some() {
                ChangeType::Modified
            } else {
                ChangeType::Added
            },
            object: obj.clone(),
            prev,
        });
        obj
    }

    /// Removes an object; returns its last state stamped with the deletion revision.
    pub fn delete(&mut self, storage: &str, namespace: &str, name: &str) -> Option<Value> {
        self.delete_as(storage, namespace, name, None)
    }

    /// Removes an object whose final state is `last` (an update that released the last
    /// finalizer): watchers see one DELETED event carrying `last`, never the intermediate write.
    pub fn delete_as(
        &mut self,
        storage: &str,
        namespace: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Value> {
        let prev = self
            .objects
            .get_mut(storage)?
            .remove(&(namespace.to_owned(), name.to_owned()))?;
        self.rv += 1;
        let mut obj = last.unwrap_or_else(|| prev.clone());
        stamp(&mut obj, self.rv);
        self.record(Change {
            rv: self.rv,
            storage: storage.to_owned(),
            kind: ChangeType::Deleted,
            object: obj.clone(),
            prev: Some(prev),
        });
        Some(obj)
    }

    /// The changes with a revision above `rv`, oldest first; `Err(compacted)` when some of them
    /// have been compacted away.
    pub fn changes_since(&self, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history.range(start..).cloned().collect())
    }

    /// A resource's contents as of revision `rv` (undoing newer changes); `Err(compacted)` when
    /// the history needed has been compacted.
    pub fn snapshot_at(&self, storage: &str, rv: u64) -> Result<BTreeMap<Key, Value>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let mut map = self.objects.get(storage).cloned().unwrap_or_default();
        for change in self.history.iter().rev() {
            if change.rv <= rv {
                break;
            }
            if change.storage != storage {
                continue;
            }
            let key = key_of(&change.object);
            match (&change.kind, &change.prev) {
                (ChangeType::Added, _) => {
                    map.remove(&key);
                }
                (_, Some(prev)) => {
                    map.insert(key, prev.clone());
                }
                (_, None) => {
                    map.remove(&key);
                }
            }
        }
        Ok(map)
    }

    /// Drops the whole event history: every watch or exact list from an older revision now
    /// gets 410. A test hook to exercise clients' relist paths deterministically.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Removes every object of a resource (CRD deletion), recording DELETED changes.
    pub fn delete_all(&mut self, storage: &str) -> Vec<Value> {
        let keys: Vec<Key> = self
            .objects
            .get(storage)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.into_iter()
            .filter_map(|(ns, name)| self.delete(storage, &ns, &name))
            .collect()
    }
}

/// The shared store: [`State`] behind a mutex plus the revision broadcast.
#[derive(Debug)]
pub struct Store {
    state: Mutex<State>,
    rv_tx: watch::Sender<u64>,
}

impl Store {
    /// An empty store keeping `window` changes of history.
    pub fn new(window: usize) -> Self {
        let state = State::new(window);
        let (rv_tx, _) = watch::channel(state.rv);
        Store {
            state: Mutex::new(state),
            rv_tx,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written object (every write is a
        // single map insert), so a poisoned lock is safe to keep using.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with shared access to the state.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// Runs `f` with exclusive access, then wakes every watcher if the revision moved.
    pub fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (out, before, after) = {
            let mut st = self.lock();
            let before = st.rv;
            let out = f(&mut st);
            (out, before, st.rv)
        };
        if after != before {
            self.rv_tx.send_replace(after);
        }
        out
    }

    /// A receiver that changes whenever the revision moves; pair it with
    /// [`State::changes_since`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.read(|s| s.rv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "data": {"v": v}})
    }

    #[test]
    fn every_write_bumps_the_one_global_revision() {
        let store = Store::new(100);
        let a = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        let b = store.write(|s| s.create("core/pods", cm("b", "1")));
        assert_eq!(rv_of(&b), rv_of(&a) + 1);
        let d = store
            .write(|s| s.delete("core/configmaps", "default", "a"))
            .unwrap();
        assert_eq!(rv_of(&d), rv_of(&b) + 1);
        assert_eq!(store.resource_version(), rv_of(&d));
    }

    #[test]
    fn history_is_trimmed_to_the_window_and_older_reads_are_refused() {
        let store = Store::new(2);
        let first = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.update("core/configmaps", cm("a", "3")));
        store.read(|s| {
            assert!(s.changes_since(rv_of(&first) - 1).is_err());
            let since = s.changes_since(rv_of(&first) + 1).unwrap();
            assert_eq!(since.len(), 1);
            assert_eq!(since[0].object["data"]["v"], "3");
        });
    }

    #[test]
    fn snapshots_undo_newer_changes() {
        let store = Store::new(100);
        let a1 = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.create("core/configmaps", cm("b", "1")));
        store.write(|s| s.delete("core/configmaps", "default", "a"));
        let snap = store.read(|s| s.snapshot_at("core/configmaps", rv_of(&a1)).unwrap());
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[&("default".into(), "a".into())]["data"]["v"], "1");
    }
}
