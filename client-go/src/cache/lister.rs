//! Listers: typed, read-only views of an informer's cache.
//!
//! A controller's `sync_handler` reads through a [`Lister<K>`], never through the API: in the
//! steady state a controller makes no read requests at all. Everything here is a lookup in the
//! [`Indexer`]; **no method makes a network call**. The price is freshness: a lister is exactly
//! as up to date as its informer, and before the informer has synced it returns partial
//! results (wait for [`super::SharedIndexInformer::has_synced`] first).
//!
//! * [`Lister::get`] (cluster-scoped types) and [`NamespaceLister::get`] (namespaced) read the
//!   key `"name"` / `"namespace/name"` and return a NotFound error shaped like the one generated
//!   listers return: code 404, reason `NotFound`, message `<kind>.<group> "<name>" not found`
//!   with the **lower-case singular kind** (`at.cnat.programming-kubernetes.info "x" not found`,
//!   `pod "x" not found` for the core group), which is what client-go's generated listers
//!   produce. [`crate::client::Error::is_not_found`] is true for it.
//! * [`Lister::list`] filters on labels with a [`Selector`]; the everything selector skips
//!   label checks, the nothing selector returns nothing. Order is unspecified.
//! * [`NamespaceLister::list`] uses the `namespace` index instead of scanning.
//! * [`Lister::by_index`] reads any index the informer has, e.g. [`super::OWNER_UID_INDEX`]
//!   once added with [`super::owner_uid_index`].
//!
//! Results are `Arc<K>` pointing into the cache: clone the `K` before changing it.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};

use super::selector::{Selector, SelectorError};
use super::store::{IndexError, Indexer, NAMESPACE_INDEX};
use super::{CacheObject, ObjectMetaAccess};
use crate::client::Error;

/// The NotFound error a lister returns for a missing `name` of type `K`.
pub fn not_found<K: CacheObject>(name: &str) -> Error {
    let resource = K::KIND.to_ascii_lowercase();
    let qualified = if K::GROUP.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{}", K::GROUP)
    };
    Error::from_status(Status {
        code: Some(404),
        reason: Some("NotFound".to_owned()),
        status: Some("Failure".to_owned()),
        message: Some(format!("{qualified} \"{name}\" not found")),
        details: Some(StatusDetails {
            group: Some(K::GROUP.to_owned()),
            kind: Some(resource),
            name: Some(name.to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Reads of all namespaces (or of a cluster-scoped type).
pub struct Lister<K> {
    indexer: Indexer<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            indexer: self.indexer.clone(),
        }
    }
}

impl<K: CacheObject> Lister<K> {
    /// A lister over an indexer (normally from [`super::SharedIndexInformer::lister`]).
    pub fn new(indexer: Indexer<K>) -> Self {
        Lister { indexer }
    }

    /// Every cached object whose labels match `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        filter(self.indexer.list(), selector)
    }

    /// Parses `selector` (e.g. `"app=web,tier in (a,b)"`) and lists with it.
    pub fn list_matching(&self, selector: &str) -> Result<Vec<Arc<K>>, SelectorError> {
        Ok(self.list(&Selector::parse(selector)?))
    }

    /// The object named `name` (cluster-scoped types; for namespaced ones use
    /// [`Self::namespace`]).
    pub fn get(&self, name: &str) -> Result<Arc<K>, Error> {
        self.indexer.get(name).ok_or_else(|| not_found::<K>(name))
    }

    /// The object under a full cache key (`"ns/name"` or `"name"`), as workers receive them.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get(key)
    }

    /// A view of one namespace (`""` = all namespaces).
    pub fn namespace(&self, namespace: &str) -> NamespaceLister<K> {
        NamespaceLister {
            indexer: self.indexer.clone(),
            namespace: namespace.to_owned(),
        }
    }

    /// The objects whose index `index` yields `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<K>>, IndexError> {
        self.indexer.by_index(index, value)
    }
}

/// Reads of one namespace.
pub struct NamespaceLister<K> {
    indexer: Indexer<K>,
    namespace: String,
}

impl<K: CacheObject> NamespaceLister<K> {
    /// The object `namespace/name`.
    pub fn get(&self, name: &str) -> Result<Arc<K>, Error> {
        let key = if self.namespace.is_empty() {
            name.to_owned()
        } else {
            format!("{}/{name}", self.namespace)
        };
        self.indexer.get(&key).ok_or_else(|| not_found::<K>(name))
    }

    /// The namespace's objects whose labels match `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<Arc<K>> {
        if self.namespace.is_empty() {
            return filter(self.indexer.list(), selector);
        }
        match self.indexer.by_index(NAMESPACE_INDEX, &self.namespace) {
            Ok(objs) => filter(objs, selector),
            Err(_) => {
                tracing::warn!(namespace = %self.namespace, "namespace index missing; scanning the whole cache");
                let ns = Some(self.namespace.as_str());
                filter(
                    self.indexer
                        .list()
                        .into_iter()
                        .filter(|o| o.metadata().namespace() == ns)
                        .collect(),
                    selector,
                )
            }
        }
    }

    /// Parses `selector` and lists with it.
    pub fn list_matching(&self, selector: &str) -> Result<Vec<Arc<K>>, SelectorError> {
        Ok(self.list(&Selector::parse(selector)?))
    }
}

fn filter<K: CacheObject>(objs: Vec<Arc<K>>, selector: &Selector) -> Vec<Arc<K>> {
    if selector.is_everything() {
        return objs;
    }
    objs.into_iter()
        .filter(|o| selector.matches_opt(o.metadata().labels()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(ns: &str, name: &str, app: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some([("app".to_owned(), app.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn names(mut v: Vec<Arc<Pod>>) -> Vec<String> {
        let mut out: Vec<String> = v
            .drain(..)
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        out.sort();
        out
    }

    fn lister() -> Lister<Pod> {
        let idx = Indexer::new();
        idx.insert(pod("a", "web-1", "web"));
        idx.insert(pod("a", "db-1", "db"));
        idx.insert(pod("b", "web-2", "web"));
        Lister::new(idx)
    }

    #[test]
    fn missing_object_is_a_404_shaped_like_the_generated_listers() {
        let l = lister();
        let e = l.namespace("a").get("nope").unwrap_err();
        assert!(e.is_not_found());
        assert_eq!(e.code(), Some(404));
        let status = e.as_status().unwrap();
        assert_eq!(status.message.as_deref(), Some("pod \"nope\" not found"));
        assert_eq!(status.reason.as_deref(), Some("NotFound"));
        let d = status.details.as_ref().unwrap();
        assert_eq!(
            (d.kind.as_deref(), d.name.as_deref(), d.group.as_deref()),
            (Some("pod"), Some("nope"), Some(""))
        );
        let e = not_found::<Deployment>("x");
        assert_eq!(
            e.as_status().unwrap().message.as_deref(),
            Some("deployment.apps \"x\" not found")
        );
        let ns: Lister<Namespace> = Lister::new(Indexer::new());
        assert!(ns.get("kube-system").unwrap_err().is_not_found());
    }

    #[test]
    fn get_reads_the_right_namespace() {
        let l = lister();
        assert_eq!(
            l.namespace("b")
                .get("web-2")
                .unwrap()
                .metadata
                .name
                .as_deref(),
            Some("web-2")
        );
        assert!(l.namespace("a").get("web-2").is_err());
        assert!(l.get_by_key("a/web-1").is_some());
    }

    #[test]
    fn list_filters_by_labels_and_namespace() {
        let l = lister();
        assert_eq!(names(l.list(&Selector::everything())).len(), 3);
        assert!(l.list(&Selector::nothing()).is_empty());
        assert_eq!(
            names(l.list_matching("app=web").unwrap()),
            ["web-1", "web-2"]
        );
        assert_eq!(
            names(l.namespace("a").list(&Selector::everything())),
            ["db-1", "web-1"]
        );
        assert_eq!(
            names(l.namespace("a").list_matching("app!=db").unwrap()),
            ["web-1"]
        );
        assert_eq!(
            names(l.namespace("").list_matching("app=web").unwrap()).len(),
            2
        );
        assert!(l.list_matching("app in (").is_err());
        assert_eq!(names(l.by_index(NAMESPACE_INDEX, "b").unwrap()), ["web-2"]);
    }
}
