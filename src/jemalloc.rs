//! The binary's allocator, jemalloc: handing its freed memory back to the system.
//!
//! jemalloc's background thread purges an arena's dirty pages ten seconds after they were
//! freed, but two things hold pages that nothing uses any more:
//!
//! * **Each thread's cache** (tcache) keeps freed regions of every small size class for that
//!   thread's next allocations, whichever slab they came from, and is trimmed only as the
//!   thread allocates. A runtime worker that goes idle after a burst keeps its cache, and the
//!   cached regions keep their slabs' pages resident, one or two live regions a page.
//! * **The decay** gives pages back gradually over its ten seconds.
//!
//! [`release`] is the servers' release hook (`apimachinery::serving::set_memory_release`,
//! and the API server's after bursts of writes): it asks every runtime worker to flush its
//! cache when it next parks ([`on_thread_park`], the runtime's park hook), wakes the idle ones,
//! flushes its own thread's, then purges every arena's dirty pages at once. Measured with
//! `hack/bench-hostile.sh`'s last line (10,000 Ats created by ten clients, then 60 s without a
//! write, objects resting as bytes): the RSS grew by 2.70 to 2.89 times the live JSON with the
//! background thread alone, and by 1.76 to 1.81 times with this release (the API server's
//! `storage/stored` module docs break that down).
//!
//! The one module of the binary that calls into C (`mallctl`), so the one place `unsafe` is
//! allowed.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Every allocation of the binary (see the module docs of `main`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long [`release`] waits for the runtime workers to flush their caches.
const FLUSH_WAIT: Duration = Duration::from_millis(50);

/// Releases that asked; threads that have flushed since the latest one remember it.
static ASKED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

/// Hands freed memory back to the system now (see the module docs). Called on a blocking
/// thread; from within a runtime it wakes idle workers with a few empty tasks, so that they
/// park again and flush their caches.
pub fn release() {
    ASKED.fetch_add(1, Ordering::Relaxed);
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        for _ in 0..runtime.metrics().num_workers() * 2 {
            drop(runtime.spawn(async {}));
        }
    }
    std::thread::sleep(FLUSH_WAIT);
    flush_thread_cache();
    // MALLCTL_ARENAS_ALL: every arena.
    if let Err(code) = mallctl_void(c"arena.4096.purge") {
        tracing::debug!(code, "jemalloc: purging the arenas failed");
    }
}

/// The runtime's park hook: flushes this thread's cache when a [`release`] has asked since it
/// last did; otherwise one atomic load and a thread-local read.
pub fn on_thread_park() {
    let asked = ASKED.load(Ordering::Relaxed);
    if asked != 0 && SEEN.with(Cell::get) != asked {
        SEEN.with(|s| s.set(asked));
        flush_thread_cache();
    }
}

fn flush_thread_cache() {
    if let Err(code) = mallctl_void(c"thread.tcache.flush") {
        tracing::debug!(code, "jemalloc: flushing the thread's cache failed");
    }
}

/// A `mallctl` that reads and writes nothing (an action such as a flush or a purge).
fn mallctl_void(name: &CStr) -> Result<(), i32> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call; with null old and new
    // pointers and a zero length jemalloc reads and writes no memory of ours, and these actions
    // take the allocator's own locks.
    let code = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if code == 0 { Ok(()) } else { Err(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both actions exist under these names in the linked jemalloc: a renamed control would
    /// fail with ENOENT and leave the memory where it is.
    #[test]
    fn the_flush_and_the_purge_are_known_to_jemalloc() {
        assert_eq!(mallctl_void(c"thread.tcache.flush"), Ok(()));
        assert_eq!(mallctl_void(c"arena.4096.purge"), Ok(()));
        assert!(mallctl_void(c"arena.4096.no-such-action").is_err());
    }

    /// A thread flushes once per release, however often it parks.
    #[test]
    fn a_parked_thread_flushes_once_per_release() {
        std::thread::spawn(|| {
            on_thread_park();
            let before = SEEN.with(Cell::get);
            ASKED.fetch_add(1, Ordering::Relaxed);
            on_thread_park();
            let seen = SEEN.with(Cell::get);
            assert_eq!(seen, ASKED.load(Ordering::Relaxed));
            assert_ne!(seen, before);
            on_thread_park();
            assert_eq!(SEEN.with(Cell::get), seen);
        })
        .join()
        .expect("the thread");
    }
}
