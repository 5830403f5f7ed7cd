//! Plumbing shared by the server's background controllers: the change feed and the virtual clock.
//!
//! A real cluster's controllers (the garbage collector, the kubelet, the Deployment and
//! StatefulSet controllers) are separate processes that watch the API server through informers.
//! The embedded server's simulated controllers live in the same process as the store, so they
//! skip HTTP and informers and follow the store directly: a [`ChangeFeed`] wakes up whenever the
//! global revision moves and hands over every [`Change`] written since the last wake-up — the
//! same history a watch replays, so no change is missed even if many land at once. When the
//! history no longer reaches back far enough (it was compacted, by the window or by a fault
//! injection), the feed answers [`Batch::Resync`] and the controller re-examines every object it
//! cares about, which is what an informer's relist amounts to.
//!
//! Every controller writes under the store lock, inside one [`Store::write`] closure that re-reads
//! the object it is about to change. A controller therefore never needs optimistic-concurrency
//! retries: the read-check-write is atomic, like an etcd transaction. Its own writes wake it up
//! again; every controller here is *level-triggered* (it compares the object to what it should
//! be and does nothing when they already agree), so that echo is harmless.
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
use std::time::Duration;

use tokio::sync::watch;

use super::store::{Change, Store};

/// What a [`ChangeFeed`] has to report.
pub enum Batch {
    /// The changes since the last batch, oldest first (possibly none).
    Changes(Vec<Arc<Change>>),
    /// Some changes were compacted away before they could be read: look at everything again.
    Resync,
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

/// Wall-clock timestamps that advance with `tokio::time` (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct VirtualClock {
    wall0: jiff::Timestamp,
    inst0: tokio::time::Instant,
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualClock {
    /// A clock reading the current wall-clock time now.
    pub fn new() -> Self {
        VirtualClock {
            wall0: jiff::Timestamp::now(),
            inst0: tokio::time::Instant::now(),
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> jiff::Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.inst0);
        let elapsed = jiff::SignedDuration::try_from(elapsed).unwrap_or(jiff::SignedDuration::MAX);
        self.wall0.checked_add(elapsed).unwrap_or(self.wall0)
    }

    /// The current virtual time as a `metav1.Time` (RFC 3339, seconds, UTC).
    pub fn now_time(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }
}

/// Parses a duration flag: a number followed by `ms`, `s`, `m` or `h` (`250ms`, `1s`, `0s`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a number and a unit, like 250ms or 1s")
    })?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        "" if n == 0 => Duration::ZERO,
        other => {
            return Err(format!(
                "invalid duration {s:?}: unknown unit {other:?} (use ms, s, m or h)"
            ));
        }
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test(start_paused = true)]
    async fn the_virtual_clock_follows_paused_tokio_time() {
        let clock = VirtualClock::new();
        let t0 = clock.now();
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        let t1 = clock.now();
        assert_eq!(t1.duration_since(t0).as_secs(), 3600);
    }

    #[test]
    fn durations_parse_with_units_and_bad_ones_are_named() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("fast").unwrap_err().contains("\"fast\""));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
    }

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
