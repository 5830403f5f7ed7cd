//! Object keys and tombstones: how the cache names objects and reports deletions it did not see.
//!
//! Every object in the cache is filed under a string key, `"<namespace>/<name>"` for namespaced
//! objects and `"<name>"` for cluster-scoped ones. This is client-go's `MetaNamespaceKeyFunc`;
//! the same key is what controllers put on their work queue, so a worker can turn it back into a
//! lister lookup with [`split_key`].
//!
//! ## Tombstones
//!
//! A watch can break. While the reflector is disconnected an object may be deleted and its
//! DELETED event is then never received. The next relist notices that the key is gone and the
//! informer tells handlers with a *tombstone*: the key plus the last state the cache knew, which
//! may be stale. client-go calls this `DeletedFinalStateUnknown` and hands it over as an
//! `interface{}` next to the real object, so every Go handler type-switches. Here a delete
//! handler receives [`Deleted<K>`], an enum with both cases spelled out:
//!
//! * [`Deleted::Final`]: the watch delivered DELETED with the object's final state;
//! * [`Deleted::Tombstone`]: a relist found the object missing; `last_known` is the cached copy.
//!
//! [`Deleted::object`] gives the object either way, which is all most handlers need (they only
//! enqueue its key).

use std::fmt;
use std::sync::Arc;

use k8s_openapi::Metadata;

use super::ObjectMetaAccess;

/// A parsed cache key: `namespace` is `None` for cluster-scoped objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// A key for a namespaced object.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A key for a cluster-scoped object.
    pub fn cluster(name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: None,
            name: name.into(),
        }
    }

    /// The key of an object (see [`key_of`]).
    pub fn of<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> Self {
        let meta = obj.metadata();
        ObjectKey {
            namespace: meta
                .namespace()
                .filter(|ns| !ns.is_empty())
                .map(str::to_owned),
            name: meta.name().unwrap_or_default().to_owned(),
        }
    }

    /// Parses `"ns/name"` or `"name"`; more than one `/` is an error, as in client-go's
    /// `SplitMetaNamespaceKey`.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let mut parts = key.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, None) => Ok(ObjectKey::cluster(name)),
            (Some(ns), Some(name), None) => Ok(ObjectKey {
                namespace: (!ns.is_empty()).then(|| ns.to_owned()),
                name: name.to_owned(),
            }),
            _ => Err(KeyError(key.to_owned())),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A key that does not have the `"ns/name"` or `"name"` shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unexpected key format: {0:?}")]
pub struct KeyError(pub String);

/// The cache key of an object: `"<namespace>/<name>"`, or `"<name>"` when the namespace is
/// empty (client-go's `MetaNamespaceKeyFunc`).
pub fn key_of<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> String {
    let meta = obj.metadata();
    let name = meta.name().unwrap_or_default();
    match meta.namespace() {
        Some(ns) if !ns.is_empty() => {
            let mut key = String::with_capacity(ns.len() + 1 + name.len());
            key.push_str(ns);
            key.push('/');
            key.push_str(name);
            key
        }
        _ => name.to_owned(),
    }
}

/// Splits a key into `(namespace, name)`: `"ns/x"` gives `(Some("ns"), "x")`, `"x"` gives
/// `(None, "x")`. It splits at the first `/`; Kubernetes names never contain one, so a key with
/// more than one `/` was not made by [`key_of`] (use [`ObjectKey::parse`] to reject it).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() => (Some(ns), name),
        Some((_, name)) => (None, name),
        None => (None, key),
    }
}

/// What a delete handler receives: the final state, or a tombstone (see the module doc).
#[derive(Debug)]
pub enum Deleted<K> {
    /// The watch delivered DELETED; this is the object's last state as the server sent it.
    Final(Arc<K>),
    /// A relist found the object gone; its deletion was not observed. `last_known` is the copy
    /// the cache held, which may be older than the object's real final state.
    Tombstone {
        /// The cache key of the vanished object.
        key: String,
        /// The last state the cache knew.
        last_known: Arc<K>,
    },
}

impl<K> Clone for Deleted<K> {
    fn clone(&self) -> Self {
        match self {
            Deleted::Final(o) => Deleted::Final(Arc::clone(o)),
            Deleted::Tombstone { key, last_known } => Deleted::Tombstone {
                key: key.clone(),
                last_known: Arc::clone(last_known),
            },
        }
    }
}

impl<K: Metadata<Ty: ObjectMetaAccess>> Deleted<K> {
    /// The deleted object (final or last known state).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Deleted::Final(o) => o,
            Deleted::Tombstone { last_known, .. } => last_known,
        }
    }

    /// The cache key (a tombstone carries its own; client-go's
    /// `DeletionHandlingMetaNamespaceKeyFunc`).
    pub fn key(&self) -> String {
        match self {
            Deleted::Final(o) => key_of(o.as_ref()),
            Deleted::Tombstone { key, .. } => key.clone(),
        }
    }

    /// True when the deletion was inferred from a relist rather than observed.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Deleted::Tombstone { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ns: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn keys_of_namespaced_and_cluster_objects() {
        assert_eq!(key_of(&pod("default", "web")), "default/web");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("kube-system".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(key_of(&ns), "kube-system");
        assert_eq!(key_of(&pod("", "x")), "x");
        assert_eq!(ObjectKey::of(&pod("a", "b")).to_string(), "a/b");
        assert_eq!(ObjectKey::of(&ns).to_string(), "kube-system");
    }

    #[test]
    fn split_and_parse_round_trip() {
        assert_eq!(split_key("ns/x"), (Some("ns"), "x"));
        assert_eq!(split_key("x"), (None, "x"));
        assert_eq!(split_key("/x"), (None, "x"));
        assert_eq!(
            ObjectKey::parse("ns/x").unwrap(),
            ObjectKey::namespaced("ns", "x")
        );
        assert_eq!(ObjectKey::parse("x").unwrap(), ObjectKey::cluster("x"));
        let err = ObjectKey::parse("a/b/c").unwrap_err();
        assert_eq!(err.to_string(), "unexpected key format: \"a/b/c\"");
    }

    #[test]
    fn deleted_gives_object_and_key() {
        let p = Arc::new(pod("ns", "gone"));
        let d = Deleted::Tombstone {
            key: "ns/gone".into(),
            last_known: Arc::clone(&p),
        };
        assert!(d.is_tombstone());
        assert_eq!(d.key(), "ns/gone");
        assert!(Arc::ptr_eq(d.object(), &p));
        let f = Deleted::Final(Arc::clone(&p));
        assert!(!f.is_tombstone());
        assert_eq!(f.key(), "ns/gone");
    }
}
