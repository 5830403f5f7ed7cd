//! The cache's source of truth on a real cluster: [`Api<K>`] as a [`ListerWatcher`], and
//! [`ClientSource`], which hands the [`SharedInformerFactory`](super::SharedInformerFactory) one
//! such lister-watcher per type and scope.
//!
//! This is client-go's `cache.NewListWatchFromClient` plus the part of
//! `informers.NewSharedInformerFactory` that turns a clientset into per-type `ListWatch`es:
//!
//! ```text
//! Client ──ClientSource──> BoxListerWatcher<K> (an Api<K>, in one namespace or all)
//!                               │ list(ListParams) / watch(WatchParams)
//!                               v
//!                          Reflector<K> ──> Indexer<K>
//! ```
//!
//! The dependency points one way: `cache` uses `client` (this file is where), `client` knows
//! nothing of `cache`. Tests swap [`ClientSource`] for
//! [`FakeListerWatcher`](super::testing::FakeListerWatcher) behind the same traits.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::factory::{InformerScope, ListerWatcherSource};
use super::lister_watcher::{BoxListerWatcher, ListerWatcher};
use super::{CacheObject, ObjectMetaAccess};
use crate::client::{Api, Client, ListParams, ObjectList, Result, WatchParams, WatchStream};

/// `Api<K>` lists and watches with its own verbs; a reflector can run on it directly.
impl<K> ListerWatcher<K> for Api<K>
where
    K: k8s_openapi::Resource + Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    async fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        Api::list(self, params).await
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        Api::watch(self, params).await
    }
}

/// Serves the factory's lister-watchers from a [`Client`]: `Api<K>` in the scope's namespace,
/// or in all namespaces when the scope names none.
///
/// Its lists and watches skip `metadata.managedFields`
/// ([`Api::without_managed_fields`]): the informers' default transform drops the field, and so
/// does every transform of this crate's caches, so the client does not build what the cache
/// would throw away (a tenth of the manager's CPU at 10,000 Ats). A type whose metadata has no
/// such field ([`ObjectMetaAccess::DECODES_MANAGED_FIELDS`] false: the operators' slim cached
/// types) is decoded from the text as it came, its decoder skipping the member as it parses:
/// cutting it out first scanned every object twice (a ninth of the manager's instructions
/// under the At benchmark). A cache that needs the field lists and watches through an `Api<K>`
/// of its own, which is a [`ListerWatcher`] as it is.
#[derive(Clone, Debug)]
pub struct ClientSource(pub Client);

impl ListerWatcherSource for ClientSource {
    fn lister_watcher<K: CacheObject>(&self, scope: &InformerScope) -> BoxListerWatcher<K> {
        let api = match scope.namespace.as_deref() {
            Some(ns) => Api::<K>::namespaced(self.0.clone(), ns),
            None => Api::<K>::all(self.0.clone()),
        };
        if <K::Ty as ObjectMetaAccess>::DECODES_MANAGED_FIELDS {
            BoxListerWatcher::new(api.without_managed_fields())
        } else {
            BoxListerWatcher::new(api)
        }
    }
}
