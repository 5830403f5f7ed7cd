//! `ListerWatcher`: the two calls a reflector needs, as client-go's `cache.ListerWatcher`.
//!
//! The reflector does not care how objects are fetched, only that it can *list* them (a
//! snapshot with a resourceVersion) and *watch* them (every change after a resourceVersion).
//! [`crate::client::Api`] implements this trait against a real API server (in
//! [`super::api_source`], so that the client never depends on the cache); tests implement it
//! with anything that speaks the same contract, such as [`super::testing::FakeListerWatcher`].

use std::future::Future;

use crate::client::{ListParams, ObjectList, Result, WatchParams, WatchStream};

/// List and watch one kind of object.
pub trait ListerWatcher<K>: Send + Sync + 'static {
    /// One LIST request (one page when `params.limit` is set).
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ObjectList<K>>> + Send;
    /// Opens a WATCH; the stream yields events until the server closes it.
    fn watch(&self, params: &WatchParams) -> impl Future<Output = Result<WatchStream<K>>> + Send;
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`ListerWatcher`], so informers of one type can hold any source.
trait DynListerWatcher<K>: Send + Sync + 'static {
    fn list_dyn<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<ObjectList<K>>>;
    fn watch_dyn<'a>(&'a self, params: &'a WatchParams) -> BoxFuture<'a, Result<WatchStream<K>>>;
}

impl<K: Send + 'static, T: ListerWatcher<K>> DynListerWatcher<K> for T {
    fn list_dyn<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<ObjectList<K>>> {
        Box::pin(self.list(params))
    }
    fn watch_dyn<'a>(&'a self, params: &'a WatchParams) -> BoxFuture<'a, Result<WatchStream<K>>> {
        Box::pin(self.watch(params))
    }
}

/// Any [`ListerWatcher<K>`] behind one type (a boxed trait object), which is what
/// [`super::SharedIndexInformer`] and [`super::SharedInformerFactory`] store.
pub struct BoxListerWatcher<K>(std::sync::Arc<dyn DynListerWatcher<K>>);

impl<K> Clone for BoxListerWatcher<K> {
    fn clone(&self) -> Self {
        BoxListerWatcher(std::sync::Arc::clone(&self.0))
    }
}

impl<K: Send + 'static> BoxListerWatcher<K> {
    /// Boxes a lister-watcher.
    pub fn new(lw: impl ListerWatcher<K>) -> Self {
        BoxListerWatcher(std::sync::Arc::new(lw))
    }
}

impl<K: Send + 'static> ListerWatcher<K> for BoxListerWatcher<K> {
    async fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        self.0.list_dyn(params).await
    }
    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        self.0.watch_dyn(params).await
    }
}
