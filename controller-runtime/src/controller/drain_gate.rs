//! The step in front of every sync when the manager runs as a shard of a ring: an object the
//! sharder is draining from this shard is released to it instead of synced (see
//! [`crate::sharding::drain`]). Set up with [`Workers::release_drained`](super::Workers::release_drained)(super::Workers::release_drained).

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::contract::SyncHandler;
use crate::expectations::Expectations;
use crate::sharding::drain::release_patch;
use crate::sharding::release_if_draining;
use sample_client_go::cache::{CacheObject, Lister};
use sample_client_go::client::{self, Client};

/// Releases a draining object before its sync (see [`Workers::release_drained`](super::Workers::release_drained)).
pub trait DrainGate: Send + Sync + 'static {
    /// `Some(write)` when the object `key` names is being drained from this shard: the write
    /// that releases it to the sharder, run instead of the sync. `None`: sync as usual.
    fn release<'a>(&'a self, key: &'a str) -> Option<BoxFuture<'a, Result<(), client::Error>>>;
}

pub(super) struct ListerDrain<K: CacheObject> {
    pub(super) lister: Lister<K>,
    pub(super) client: Client,
    pub(super) expectations: Option<Arc<Expectations>>,
}

impl<K: CacheObject> DrainGate for ListerDrain<K> {
    fn release<'a>(&'a self, key: &'a str) -> Option<BoxFuture<'a, Result<(), client::Error>>> {
        let obj = self.lister.get_by_key(key)?;
        release_patch(obj.metadata())?;
        Some(Box::pin(async move {
            if let Some(e) = &self.expectations {
                e.forget(key);
            }
            release_if_draining(&self.client, &*obj)
                .await
                .unwrap_or(Ok(()))
        }))
    }
}

/// A [`SyncHandler`] with the drain step in front ([`Workers::release_drained`](super::Workers::release_drained)): what the
/// workers of every controller actually run.
pub struct Draining<H> {
    pub(super) inner: Arc<H>,
    pub(super) gate: Option<Arc<dyn DrainGate>>,
}

/// A failed sync of a [`Draining`] handler: the release's write, or the sync itself.
#[derive(Debug)]
pub enum DrainedOr<E> {
    /// Releasing a draining object failed (e.g. 409: it changed since the cache read it).
    Release(client::Error),
    /// The sync failed.
    Sync(E),
}

impl<E: Display> Display for DrainedOr<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainedOr::Release(e) => write!(f, "releasing the object to the sharder: {e}"),
            DrainedOr::Sync(e) => e.fmt(f),
        }
    }
}

impl<H: SyncHandler> SyncHandler for Draining<H> {
    type Error = DrainedOr<H::Error>;

    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, Self::Error> {
        if let Some(release) = self.gate.as_ref().and_then(|g| g.release(key)) {
            return release.await.map(|()| None).map_err(DrainedOr::Release);
        }
        self.inner.sync_handler(key).await.map_err(DrainedOr::Sync)
    }

    fn is_conflict(err: &Self::Error) -> bool {
        match err {
            DrainedOr::Release(e) => e.is_conflict(),
            DrainedOr::Sync(e) => H::is_conflict(e),
        }
    }

    fn on_sync_error(&self, key: &str, message: &str) {
        self.inner.on_sync_error(key, message);
    }
}
