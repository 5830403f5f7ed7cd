//! The indexed store: the informer's cache, which listers read.
//!
//! An [`Indexer<K>`] is a map from [cache key](super::keys) to `Arc<K>` plus any number of
//! *indexes*. An index is a function from an object to a list of strings (its index values);
//! the indexer keeps, for each index, a reverse map `value → set of keys`, so "all pods in
//! namespace `ns`" or "all pods owned by the At with UID `u`" is a hash lookup instead of a
//! scan. This is client-go's `ThreadSafeStore` + `Indexer`, with two differences:
//!
//! * objects are `Arc<K>`: stored once, handed out by reference count, never copied. Nobody may
//!   mutate a cached object (client-go says "DeepCopy first"; Rust enforces it: clone the `K`
//!   out of the `Arc` before changing it);
//! * [`Indexer::replace`] does not just swap the map: it reports what changed (added, updated,
//!   deleted as a tombstone) so the informer can notify handlers without a DeltaFIFO.
//!
//! One index is built in: [`NAMESPACE_INDEX`] (`metadata.namespace`, what client-go's factory
//! informers always install). More can be added with [`Indexer::add_indexer`]; it builds the
//! new index over the objects already present and refuses a name that is taken. This module
//! offers one ready to add, [`OWNER_UID_INDEX`] with [`owner_uid_index`] (every
//! `metadata.ownerReferences[].uid`, which answers "which objects does this owner own" in
//! O(1)). It is not built in: every owned object would pay an index entry (its owner's UID
//! and a set, ~200 bytes, 2 MB at 10,000 At pods), and no operator here asks the question
//! (they find their objects by name or label, and their owner through the controller
//! reference).
//!
//! ## Invariants
//!
//! * a key is in `indices[name][value]` exactly when the object stored under that key yields
//!   `value` from index function `name`;
//! * one `RwLock` guards the map and the indexes together, so a reader never sees an object
//!   without its index entries; the lock is never held across an `.await`;
//! * `list()` and `keys()` are snapshots in unspecified (hash) order, as in client-go;
//! * each key (`namespace/name`) is allocated once, as an `Arc<str>` that the item map and
//!   every index entry of the object share: a cached object costs one key allocation however
//!   many indexes it is in.
//! * the map and the index sets give back their room as objects are deleted
//!   ([`apimachinery::shrink`]): a store that once held 50,000 pods and now holds 50 does not
//!   keep 50,000 slots.

use apimachinery::shrink::ShrinkAfterBurst;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::Metadata;

use super::ObjectMetaAccess;
use super::keys::key_of;

/// The namespace index: value = `metadata.namespace` (cluster-scoped objects have none).
pub const NAMESPACE_INDEX: &str = "namespace";
/// The owner index's usual name (add it with [`owner_uid_index`]): values = the UIDs in
/// `metadata.ownerReferences`.
pub const OWNER_UID_INDEX: &str = "owner-uid";

/// An index function: the index values of an object (several allowed, none allowed).
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Errors of index operations (client-go's messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// `by_index` on a name that was never added.
    #[error("Index with name {0} does not exist")]
    NoSuchIndex(String),
    /// `add_indexer` with a name already in use.
    #[error("indexer conflict: {0}")]
    Conflict(String),
}

/// What [`Indexer::replace`] changed, in the order handlers should hear about it: all
/// deletions first, then the listed objects in list order.
#[derive(Debug)]
pub enum Change<K> {
    /// A key that was not cached before.
    Added(Arc<K>),
    /// A key that was cached; `old` and `new` may be the same object (unchanged RV).
    Updated {
        /// The previously cached object.
        old: Arc<K>,
        /// The object now cached.
        new: Arc<K>,
    },
    /// A key that is no longer listed: a tombstone with the last known state.
    Deleted {
        /// The vanished key.
        key: String,
        /// The object the cache held.
        last_known: Arc<K>,
    },
}

/// The namespace index function.
pub fn namespace_index<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> Vec<String> {
    obj.metadata()
        .namespace()
        .filter(|ns| !ns.is_empty())
        .map(str::to_owned)
        .into_iter()
        .collect()
}

/// The owner-UID index function.
pub fn owner_uid_index<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> Vec<String> {
    obj.metadata()
        .owner_references()
        .map(|r| r.uid.to_owned())
        .collect()
}

/// A cache key, allocated once per object and shared by the item map and every index entry
/// of that object (an index entry costs a pointer, not a copy of `namespace/name`).
type SharedKey = Arc<str>;

struct Inner<K> {
    items: HashMap<SharedKey, Arc<K>>,
    indexers: HashMap<String, IndexFn<K>>,
    indices: HashMap<String, HashMap<String, HashSet<SharedKey>>>,
}

impl<K> Inner<K> {
    fn index_add(&mut self, key: &SharedKey, obj: &K) {
        for (name, f) in &self.indexers {
            let index = self.indices.entry(name.clone()).or_default();
            for v in f(obj) {
                index.entry(v).or_default().insert(Arc::clone(key));
            }
        }
    }

    fn index_remove(&mut self, key: &str, obj: &K) {
        for (name, f) in &self.indexers {
            let Some(index) = self.indices.get_mut(name) else {
                continue;
            };
            for v in f(obj) {
                if let Some(set) = index.get_mut(&v) {
                    set.remove(key);
                    set.shrink_after_burst();
                    if set.is_empty() {
                        index.remove(&v);
                    }
                }
            }
        }
    }

    fn index_update(&mut self, key: &SharedKey, old: Option<&K>, new: &K) {
        let Some(old) = old else {
            self.index_add(key, new);
            return;
        };
        for (name, f) in &self.indexers {
            let (before, after) = (f(old), f(new));
            if before == after {
                continue;
            }
            let index = self.indices.entry(name.clone()).or_default();
            for v in before {
                if let Some(set) = index.get_mut(&v) {
                    set.remove(&**key);
                    set.shrink_after_burst();
                    if set.is_empty() {
                        index.remove(&v);
                    }
                }
            }
            for v in after {
                index.entry(v).or_default().insert(Arc::clone(key));
            }
        }
    }

    fn rebuild_indices(&mut self) {
        self.indices.clear();
        for (name, f) in &self.indexers {
            let mut index: HashMap<String, HashSet<SharedKey>> = HashMap::new();
            for (key, obj) in &self.items {
                for v in f(obj) {
                    index.entry(v).or_default().insert(Arc::clone(key));
                }
            }
            self.indices.insert(name.clone(), index);
        }
    }
}

/// A thread-safe, indexed map `key → Arc<K>`. Cloning an `Indexer` clones a handle to the same
/// store.
pub struct Indexer<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

/// client-go's `Store` is the un-indexed view of the same thing; here they are one type.
pub type Store<K> = Indexer<K>;

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Indexer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static> Indexer<K> {
    /// An empty store with the built-in `namespace` index.
    pub fn new() -> Self {
        let mut indexers: HashMap<String, IndexFn<K>> = HashMap::new();
        indexers.insert(NAMESPACE_INDEX.to_owned(), Arc::new(namespace_index::<K>));
        Indexer {
            inner: Arc::new(RwLock::new(Inner {
                items: HashMap::new(),
                indexers,
                indices: HashMap::new(),
            })),
        }
    }

    // A panic while the lock is held (only possible in a user index function) poisons it; the
    // data is still consistent for every operation that finished, so keep serving it.
    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an index and builds it over the objects already stored.
    pub fn add_indexer(
        &self,
        name: impl Into<String>,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Result<(), IndexError> {
        let name = name.into();
        let mut inner = self.write();
        if inner.indexers.contains_key(&name) {
            return Err(IndexError::Conflict(name));
        }
        let f: IndexFn<K> = Arc::new(f);
        let mut index: HashMap<String, HashSet<SharedKey>> = HashMap::new();
        for (key, obj) in &inner.items {
            for v in f(obj) {
                index.entry(v).or_default().insert(Arc::clone(key));
            }
        }
        inner.indices.insert(name.clone(), index);
        inner.indexers.insert(name, f);
        Ok(())
    }

    /// The object under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// The cached copy of an object with the same key as `obj`.
    pub fn get_for(&self, obj: &K) -> Option<Arc<K>> {
        self.get(&key_of(obj))
    }

    /// Every object (unspecified order).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
    }

    /// Every key (unspecified order).
    pub fn keys(&self) -> Vec<String> {
        self.read().items.keys().map(|k| k.to_string()).collect()
    }

    /// How many objects are stored.
    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.read().items.is_empty()
    }

    /// The objects whose index `index` yields `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        let inner = self.read();
        if !inner.indexers.contains_key(index) {
            return Err(IndexError::NoSuchIndex(index.to_owned()));
        }
        Ok(inner
            .indices
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.items.get(&**k).cloned())
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The keys whose index `index` yields `value`, sorted.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.read();
        if !inner.indexers.contains_key(index) {
            return Err(IndexError::NoSuchIndex(index.to_owned()));
        }
        let mut keys: Vec<String> = inner
            .indices
            .get(index)
            .and_then(|i| i.get(value))
            .map(|k| k.iter().map(|k| k.to_string()).collect())
            .unwrap_or_default();
        keys.sort();
        Ok(keys)
    }

    /// The values index `index` currently holds (client-go's `ListIndexFuncValues`).
    pub fn index_values(&self, index: &str) -> Result<Vec<String>, IndexError> {
        let inner = self.read();
        if !inner.indexers.contains_key(index) {
            return Err(IndexError::NoSuchIndex(index.to_owned()));
        }
        let mut values: Vec<String> = inner
            .indices
            .get(index)
            .map(|i| i.keys().cloned().collect())
            .unwrap_or_default();
        values.sort();
        Ok(values)
    }

    /// Stores `obj` under its key (add and update are the same operation) and returns the
    /// object it replaced.
    pub fn insert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = key_of(obj.as_ref());
        let mut inner = self.write();
        // An update keeps the key allocation the indexes already share.
        let key: SharedKey = match inner.items.get_key_value(key.as_str()) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::from(key),
        };
        let old = inner.items.insert(Arc::clone(&key), Arc::clone(&obj));
        inner.index_update(&key, old.as_deref(), &obj);
        old
    }

    /// Removes `key` and returns the object that was stored.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.write();
        let old = inner.items.remove(key)?;
        // A mass deletion (a namespace, a finished batch) gives its room back.
        inner.items.shrink_after_burst();
        inner.index_remove(key, &old);
        Some(old)
    }

    /// Makes the store hold exactly `objs` (after a list) and reports every change: a
    /// [`Change::Deleted`] tombstone for each key that is no longer listed, then an
    /// [`Change::Added`] or [`Change::Updated`] for each listed object, in list order.
    ///
    /// The indexes are rebuilt from scratch, as client-go does. Objects are moved in, not
    /// copied; dropping the old map frees the objects that are gone or were replaced.
    pub fn replace(&self, objs: Vec<Arc<K>>) -> Vec<Change<K>> {
        let mut inner = self.write();
        let mut old_items = std::mem::take(&mut inner.items);
        let mut changes = Vec::with_capacity(objs.len());
        let mut new_items = HashMap::with_capacity(objs.len());
        let mut listed = Vec::with_capacity(objs.len());
        for obj in objs {
            let key: SharedKey = Arc::from(key_of(obj.as_ref()));
            let change = match old_items.remove(&*key) {
                Some(old) => Change::Updated {
                    old,
                    new: Arc::clone(&obj),
                },
                None => Change::Added(Arc::clone(&obj)),
            };
            // A list never repeats a key; if a faulty source does, the later object wins.
            new_items.insert(key, obj);
            listed.push(change);
        }
        for (key, last_known) in old_items {
            changes.push(Change::Deleted {
                key: key.to_string(),
                last_known,
            });
        }
        changes.extend(listed);
        inner.items = new_items;
        inner.rebuild_indices();
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        name: "owner".into(),
                        kind: "At".into(),
                        api_version: "cnat.programming-kubernetes.info/v1alpha1".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn names(mut v: Vec<Arc<Pod>>) -> Vec<String> {
        v.sort_by_key(|p| key_of(p.as_ref()));
        v.iter().map(|p| key_of(p.as_ref())).collect()
    }

    #[test]
    fn insert_get_remove_keep_indexes_in_step() {
        let s = Indexer::<Pod>::new();
        assert!(s.index_keys(OWNER_UID_INDEX, "u1").is_err(), "not built in");
        s.add_indexer(OWNER_UID_INDEX, owner_uid_index::<Pod>)
            .unwrap();
        assert!(s.insert(pod("a", "p1", "1", Some("u1"))).is_none());
        s.insert(pod("a", "p2", "2", Some("u1")));
        s.insert(pod("b", "p3", "3", None));
        assert_eq!(s.len(), 3);
        assert_eq!(
            names(s.by_index(NAMESPACE_INDEX, "a").unwrap()),
            ["a/p1", "a/p2"]
        );
        assert_eq!(
            s.index_keys(OWNER_UID_INDEX, "u1").unwrap(),
            ["a/p1", "a/p2"]
        );
        // Moving p2 to another owner updates the owner index.
        let old = s.insert(pod("a", "p2", "4", Some("u2"))).unwrap();
        assert_eq!(old.metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(s.index_keys(OWNER_UID_INDEX, "u1").unwrap(), ["a/p1"]);
        assert_eq!(s.index_keys(OWNER_UID_INDEX, "u2").unwrap(), ["a/p2"]);
        assert!(s.remove("a/p1").is_some());
        assert!(s.remove("a/p1").is_none());
        assert!(s.index_keys(OWNER_UID_INDEX, "u1").unwrap().is_empty());
        assert_eq!(s.index_values(NAMESPACE_INDEX).unwrap(), ["a", "b"]);
        assert!(s.get("b/p3").is_some());
        let mut keys = s.keys();
        keys.sort();
        assert_eq!(keys, ["a/p2", "b/p3"]);
    }

    #[test]
    fn unknown_index_and_conflicts_are_errors() {
        let s = Indexer::<Pod>::new();
        assert_eq!(
            s.by_index("nodeName", "n1").unwrap_err().to_string(),
            "Index with name nodeName does not exist"
        );
        assert_eq!(
            s.add_indexer(NAMESPACE_INDEX, |_| vec![])
                .unwrap_err()
                .to_string(),
            "indexer conflict: namespace"
        );
    }

    #[test]
    fn added_index_covers_existing_objects() {
        let s = Indexer::<Pod>::new();
        s.insert(pod("a", "p1", "1", None));
        s.insert(pod("a", "p2", "1", None));
        s.add_indexer("name-len", |p: &Pod| {
            vec![p.metadata.name.as_deref().unwrap_or("").len().to_string()]
        })
        .unwrap();
        assert_eq!(s.index_keys("name-len", "2").unwrap(), ["a/p1", "a/p2"]);
        s.insert(pod("a", "p10", "1", None));
        assert_eq!(s.index_keys("name-len", "3").unwrap(), ["a/p10"]);
    }

    #[test]
    fn replace_reports_tombstones_then_listed_objects() {
        let s = Indexer::<Pod>::new();
        s.add_indexer(OWNER_UID_INDEX, owner_uid_index::<Pod>)
            .unwrap();
        let p1 = pod("a", "p1", "1", Some("u"));
        s.insert(Arc::clone(&p1));
        s.insert(pod("a", "gone", "2", Some("u")));
        let changes = s.replace(vec![pod("a", "p1", "5", None), pod("b", "new", "6", None)]);
        assert_eq!(changes.len(), 3);
        match &changes[0] {
            Change::Deleted { key, last_known } => {
                assert_eq!(key, "a/gone");
                assert_eq!(last_known.metadata.resource_version.as_deref(), Some("2"));
            }
            other => panic!("expected a tombstone first, got {other:?}"),
        }
        match &changes[1] {
            Change::Updated { old, new } => {
                assert!(Arc::ptr_eq(old, &p1));
                assert_eq!(new.metadata.resource_version.as_deref(), Some("5"));
            }
            other => panic!("expected an update, got {other:?}"),
        }
        assert!(matches!(&changes[2], Change::Added(p) if key_of(p.as_ref()) == "b/new"));
        assert!(s.index_keys(OWNER_UID_INDEX, "u").unwrap().is_empty());
        assert_eq!(names(s.by_index(NAMESPACE_INDEX, "b").unwrap()), ["b/new"]);
        assert_eq!(s.len(), 2);
        // Replace with nothing: everything becomes a tombstone.
        let changes = s.replace(vec![]);
        assert_eq!(changes.len(), 2);
        assert!(changes.iter().all(|c| matches!(c, Change::Deleted { .. })));
        assert!(s.is_empty());
        assert!(s.index_values(NAMESPACE_INDEX).unwrap().is_empty());
    }

    #[test]
    fn keys_are_allocated_once_for_the_map_and_every_index() {
        let s = Indexer::<Pod>::new();
        s.add_indexer(OWNER_UID_INDEX, owner_uid_index::<Pod>)
            .unwrap();
        s.insert(pod("a", "p", "1", Some("u1")));
        // An update that changes an index value keeps the same key allocation.
        s.insert(pod("a", "p", "2", Some("u2")));
        s.replace(vec![pod("a", "q", "3", Some("u1"))]);
        s.insert(pod("a", "q", "4", Some("u2")));
        let inner = s.read();
        for key in inner.items.keys() {
            // The map's key, the namespace index's and the owner index's.
            assert_eq!(Arc::strong_count(key), 3, "{key}");
        }
        let owner = &inner.indices[OWNER_UID_INDEX];
        assert!(!owner.contains_key("u1"));
        assert!(owner["u2"].contains("a/q"));
    }

    #[test]
    fn objects_are_shared_not_copied() {
        let s = Indexer::<Pod>::new();
        let p = pod("a", "p", "1", None);
        s.insert(Arc::clone(&p));
        assert!(Arc::ptr_eq(&s.get("a/p").unwrap(), &p));
        assert!(Arc::ptr_eq(&s.list()[0], &p));
    }
}
