//! Memory given back after bursts: large requests free what they allocated, and this makes
//! sure the process's RSS follows.
//!
//! Go's runtime returns freed heap pages to the system on its own (the scavenger), so a
//! kube-apiserver that parsed a 3 MiB body or encoded a 48 MB LIST shrinks again. glibc's malloc
//! keeps freed memory in its arenas instead: after a burst of large bodies the server sat at
//! hundreds of MiB it no longer used. The HTTP layer counts the bytes of every request body it
//! reads and every JSON response it encodes ([`handled`]); [`release_after_bursts`] checks the
//! count every [`CHECK_INTERVAL`] and runs the release function (glibc's `malloc_trim(0)`;
//! jemalloc's flush and purge in the `sample-controller` binary) on a blocking thread when more
//! than [`RELEASE_AFTER_BYTES`] went through since the last release, and once more when an
//! interval passes with nothing handled after one that had some (the end of a burst: what its
//! last requests freed is given back too). A quiet server never releases; while a burst goes
//! on, a release runs at most once per [`RELEASE_INTERVAL_IN_BURST`]: what a burst frees it
//! allocates again within seconds, and a page handed back is faulted in and zeroed again (the
//! At benchmark's 100,000-At burst, 80 s long, had its server release every five seconds).
//! Connection floods are covered separately by [`apimachinery::serving`].
//!
//! Stored objects are the other half
//! ([`rest_unread_objects`](crate::ApiServerBuilder::rest_unread_objects), on in the standalone
//! server):
//! [`shed_rested`] lets the objects nobody read for a while
//! ([`rest_unread_after`](crate::ApiServerBuilder::rest_unread_after), 30 s by default) rest as
//! JSON bytes instead of trees ([`crate::storage::stored`]), in passes every third of that, on a thread
//! of its own whose arena holds only the rested copies; it hands what they replace to a runtime
//! thread to drop (see [`Garbage`](crate::storage::store::Garbage) for why), and counts the trees
//! dropped as handled bytes, so the release above follows a burst of writes too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often the byte count is looked at.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Bytes handled since the last look above which memory is released.
pub const RELEASE_AFTER_BYTES: u64 = 16 << 20;

/// The shortest time between two releases while a burst goes on (its end releases at once).
pub const RELEASE_INTERVAL_IN_BURST: Duration = Duration::from_secs(60);

static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Counts the bytes of one request or response body.
pub fn handled(bytes: usize) {
    HANDLED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Runs `release` after bursts of large bodies until `stop` (see the module docs).
pub async fn release_after_bursts(release: fn(), stop: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Bytes handled since the last release, and in the previous interval; when a release
    // last ran for bytes handled (not for a burst's end).
    let (mut since_release, mut previous) = (0u64, 0u64);
    let mut in_burst_release: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = HANDLED.swap(0, Ordering::Relaxed);
        since_release += now;
        let burst_ended = now == 0 && previous > 0;
        previous = now;
        let over_bound = since_release > RELEASE_AFTER_BYTES
            && in_burst_release.is_none_or(|at| at.elapsed() >= RELEASE_INTERVAL_IN_BURST);
        if over_bound {
            in_burst_release = Some(tokio::time::Instant::now());
        }
        if over_bound || burst_ended {
            tracing::debug!(
                handled_bytes = since_release,
                burst_ended,
                "handing freed memory back to the system"
            );
            since_release = 0;
            let _ = tokio::task::spawn_blocking(release).await;
        }
    }
}

/// Sheds the trees of rested objects every `interval`
/// ([`shed_interval`](crate::storage::stored::shed_interval)) until `stop` (see the module docs), on a
/// thread of its own (a pass encodes the objects it sheds), dropping what each pass replaced
/// here, on the runtime.
pub async fn shed_rested<Reg: Send + Sync + 'static>(
    store: std::sync::Arc<crate::storage::store::Store<Reg>>,
    interval: Duration,
    stop: CancellationToken,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<crate::storage::store::Garbage>();
    // Nothing is ever sent: dropping the sender wakes the thread at once to end it.
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("apiserver-shed".into())
        .spawn(move || {
            // Ends when the task below drops `wake`: when the server stops, or when a runtime
            // shut down without stopping it drops the task.
            let mut last_rv = store.resource_version();
            let mut deferred = 0;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = woken.recv_timeout(interval)
            {
                let rv = store.resource_version();
                let writes = rv.saturating_sub(last_rv);
                last_rv = rv;
                if crate::storage::stored::defer_pass(writes, interval, deferred) {
                    deferred += 1;
                    continue;
                }
                deferred = 0;
                let garbage = store.shed();
                if !garbage.is_empty() && tx.send(garbage).is_err() {
                    return;
                }
            }
        });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the thread that rests unread objects");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            garbage = rx.recv() => match garbage {
                Some(garbage) => {
                    let freed = garbage.tree_bytes();
                    // Dropped here, on a runtime thread, not on the shedding thread (see
                    // `store::Garbage`).
                    drop(garbage);
                    tracing::debug!(tree_bytes = freed, "stored objects rested as JSON bytes");
                    handled(freed);
                }
                None => break,
            },
        }
    }
    // The thread holds the store (and a `--data-dir`'s open database): the server's shutdown
    // waits for it to let go, so that a server started next on the same directory can open it.
    drop(wake);
    drop(rx);
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
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
        assert_eq!(
            RELEASES.load(Ordering::Relaxed),
            1,
            "a burst: released at once"
        );
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(
            RELEASES.load(Ordering::Relaxed),
            2,
            "and once more when it has ended (what it freed last)"
        );
        tokio::time::sleep(CHECK_INTERVAL * 3).await;
        assert_eq!(
            RELEASES.load(Ordering::Relaxed),
            2,
            "a quiet server never trims"
        );
        // A little traffic, then none: one release at the end of it.
        handled(1000);
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 2, "not while it goes on");
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 3, "once it has ended");
        tokio::time::sleep(CHECK_INTERVAL * 3).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 3, "and not again");
        // A long burst, a while after the first: released once as it crosses the bound, then
        // not again before RELEASE_INTERVAL_IN_BURST, however much it handles; once more at
        // its end.
        tokio::time::sleep(RELEASE_INTERVAL_IN_BURST).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 3, "a quiet minute");
        let intervals = (RELEASE_INTERVAL_IN_BURST.as_secs() / CHECK_INTERVAL.as_secs()) as u32;
        for i in 1..=intervals {
            handled(RELEASE_AFTER_BYTES as usize + 1);
            tokio::time::sleep(CHECK_INTERVAL).await;
            assert_eq!(
                RELEASES.load(Ordering::Relaxed),
                4,
                "interval {i} of the burst"
            );
        }
        handled(RELEASE_AFTER_BYTES as usize + 1);
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(
            RELEASES.load(Ordering::Relaxed),
            5,
            "a minute into the burst"
        );
        tokio::time::sleep(CHECK_INTERVAL).await;
        assert_eq!(RELEASES.load(Ordering::Relaxed), 6, "its end");
        stop.cancel();
        let _ = task.await;
    }
}
