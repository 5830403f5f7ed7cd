//! Memory given back after bursts: large requests free what they allocated, and this makes
//! sure the process's RSS follows.
//!
//! Go's runtime returns freed heap pages to the system on its own (the scavenger), so a
//! kube-apiserver that parsed a 3 MiB body or encoded a 48 MB LIST shrinks again. glibc's malloc
//! keeps freed memory in its arenas instead: after a burst of large bodies the server sat at
//! hundreds of MiB it no longer used. The HTTP layer counts the bytes of every request body it
//! reads and every JSON response it encodes ([`handled`]); [`release_after_bursts`] checks the
//! count every [`CHECK_INTERVAL`] and, when more than [`RELEASE_AFTER_BYTES`] went through
//! since the last check, runs the release function (glibc's `malloc_trim(0)`) on a blocking
//! thread. A quiet server never trims; a busy one trims at most once per interval. Connection
//! floods are covered separately by [`apimachinery::serving`].
//!
//! Stored objects are the other half, when the server is built with
//! [`rest_unread_objects`](super::ApiServerBuilder::rest_unread_objects) (off by default, for
//! its CPU): [`shed_rested`] lets the objects nobody read for a while rest as JSON bytes
//! instead of trees ([`super::stored`]), every
//! [`SHED_INTERVAL`](super::stored::SHED_INTERVAL), and counts the trees it drops as handled
//! bytes, so the release above follows a burst of writes too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often the byte count is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Bytes handled since the last look above which memory is released.
pub const RELEASE_AFTER_BYTES: u64 = 16 << 20;

static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Counts the bytes of one request or response body.
pub fn handled(bytes: usize) {
    HANDLED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Runs `release` after bursts of large bodies until `stop` (see the module docs).
pub async fn release_after_bursts(release: fn(), stop: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if HANDLED.swap(0, Ordering::Relaxed) > RELEASE_AFTER_BYTES {
            let _ = tokio::task::spawn_blocking(release).await;
        }
    }
}

/// Sheds the trees of rested objects every [`SHED_INTERVAL`](super::stored::SHED_INTERVAL)
/// until `stop` (see the module docs). Runs on a blocking thread: a pass encodes the objects it
/// sheds.
pub async fn shed_rested(store: std::sync::Arc<super::store::Store>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(super::stored::SHED_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let store = store.clone();
        if let Ok(freed) = tokio::task::spawn_blocking(move || store.shed()).await
            && freed > 0
        {
            tracing::debug!(freed_bytes = freed, "stored objects rested as JSON bytes");
            handled(freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static RELEASES: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        RELEASES.fetch_add(1, Ordering::Relaxed);
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_released_after_a_burst_and_not_when_quiet() {
        let stop = CancellationToken::new();
        let task = tokio::spawn(release_after_bursts(count, stop.clone()));
        // The first tick is immediate; let it pass with nothing handled.
        tokio::time::sleep(Duration::from_millis(10)).await;
        HANDLED.store(0, Ordering::Relaxed);
        handled(RELEASE_AFTER_BYTES as usize + 1);
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 1);
        tokio::time::sleep(CHECK_INTERVAL * 3).await;
        assert_eq!(
            RELEASES.load(Ordering::Relaxed),
            1,
            "a quiet server never trims"
        );
        stop.cancel();
        let _ = task.await;
    }
}
