//! The store change feed the Deployment and ReplicaSet status simulation ([`crate::workloads`])
//! follows, and the virtual clock.
//!
//! Every other controller of this crate reaches the API server through its loopback interface
//! ([`crate::informer`], [`crate::worker`]). The status simulation still follows the store
//! directly: a [`ChangeFeed`] wakes up whenever the global revision moves and hands over every
//! [`Change`] written since the last wake-up — the same history a watch replays — and answers
//! [`Batch::Resync`] when the history no longer reaches back far enough. Its writes happen
//! under the store lock, inside one [`Store::write`] closure that re-reads the object it is
//! about to change.
//!
//! ## Virtual time
//!
//! All waiting goes through `tokio::time`, so a test with a paused clock
//! (`#[tokio::test(start_paused = true)]`) can advance an hour in a millisecond. Timestamps
//! the controllers write into objects (`startedAt`, `finishedAt`, `startTime`,
//! `lastTransitionTime`) come from a [`VirtualClock`]: the wall-clock time when the server
//! started plus the `tokio::time` elapsed since, so `finishedAt - startedAt` is exactly the
//! simulated run time even when the clock is paused.

use std::sync::Arc;

use tokio::sync::watch;

use embedded_apiserver::store::{Change, Store};

/// What a [`ChangeFeed`] has to report.
pub enum Batch {
    /// The changes since the last batch, oldest first (possibly none).
    Changes(Vec<Arc<Change>>),
    /// Some changes were compacted away before they could be read: look at everything again.
    Resync,
}

impl Batch {
    /// The keys of the objects of `storage` (e.g. pods) that changed in this batch, each once
    /// per run of changes (what a simulated node or runtime re-syncs); `None` for a
    /// [`Batch::Resync`].
    pub fn changed_keys(&self, storage: &str) -> Option<Vec<embedded_apiserver::store::Key>> {
        let Batch::Changes(changes) = self else {
            return None;
        };
        let mut keys: Vec<embedded_apiserver::store::Key> = changes
            .iter()
            .filter(|c| c.storage == storage)
            .map(|c| embedded_apiserver::store::key_of(&c.object))
            .collect();
        keys.dedup();
        Some(keys)
    }
}

/// Follows the store's revision channel and reads the history since the last revision seen.
pub struct ChangeFeed {
    store: Arc<Store>,
    rx: watch::Receiver<u64>,
    seen: u64,
}

impl ChangeFeed {
    /// A feed starting at the current revision; the caller examines the current state first.
    pub fn new(store: Arc<Store>) -> Self {
        let rx = store.subscribe();
        let seen = store.resource_version();
        ChangeFeed { store, rx, seen }
    }

    /// The changes written since the last call (without waiting).
    pub fn poll(&mut self) -> Batch {
        let seen = self.seen;
        let (result, now) = self
            .store
            .read(|s| (s.changes_since(seen), s.resource_version()));
        self.seen = now;
        match result {
            Ok(changes) => Batch::Changes(changes),
            Err(_) => Batch::Resync,
        }
    }

    /// Waits until the revision moves. Never returns while the store is alive and unchanged.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The store (and its sender) lives as long as the server; if it is gone there is
            // nothing more to follow, so wait forever and let the owner's shutdown end the task.
            std::future::pending::<()>().await;
        }
    }
}

/// Wall-clock timestamps that advance with `tokio::time` (see the module docs): the shared
/// `apimachinery::clock::Clock`, under the name the node and workload controllers know it by.
pub use apimachinery::clock::Clock as VirtualClock;

/// The server's duration flags (`--pod-run-time 250ms`) read Go's syntax, as kube-apiserver's do.
pub use apimachinery::duration::parse as parse_duration;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_feed_reports_changes_then_resyncs_after_compaction() {
        let store = Arc::new(Store::new(100));
        let mut feed = ChangeFeed::new(store.clone());
        store.write(|s| s.create("core/configmaps", json!({"metadata": {"name": "a"}})));
        feed.changed().await;
        match feed.poll() {
            Batch::Changes(c) => assert_eq!(c.len(), 1),
            Batch::Resync => panic!("expected changes"),
        }
        store.write(|s| s.create("core/configmaps", json!({"metadata": {"name": "b"}})));
        store.write(|s| s.compact());
        assert!(matches!(feed.poll(), Batch::Resync));
        assert!(matches!(feed.poll(), Batch::Changes(c) if c.is_empty()));
    }
}
