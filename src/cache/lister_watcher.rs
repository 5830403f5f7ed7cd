//! `ListerWatcher`: the two calls a reflector needs, as client-go's `cache.ListerWatcher`.
//!
//! The reflector does not care how objects are fetched, only that it can *list* them (a
//! snapshot with a resourceVersion) and *watch* them (every change after a resourceVersion).
//! [`crate::client::Api`] implements this trait against a real API server; tests can implement
//! it with anything that speaks the same contract.

use std::future::Future;

use crate::client::{ListParams, ObjectList, Result, WatchParams, WatchStream};

/// List and watch one kind of object.
pub trait ListerWatcher<K>: Send + Sync + 'static {
    /// One LIST request (one page when `params.limit` is set).
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ObjectList<K>>> + Send;
    /// Opens a WATCH; the stream yields events until the server closes it.
    fn watch(&self, params: &WatchParams) -> impl Future<Output = Result<WatchStream<K>>> + Send;
}
