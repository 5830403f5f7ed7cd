//! glibc's malloc, tuned for a small, long-running process (the one module of the workspace's
//! library crates that calls into C, so the one place `unsafe` is allowed).
//!
//! The image's `controller-manager` binary installs the first as the servers' release hook and
//! calls the second before its runtime starts. On any other C library (the container image is
//! static musl, whose mallocng has no per-thread arenas and returns freed memory by itself) both
//! do nothing, and so they do in a program that has called [`declare_own_allocator`]: the
//! `sample-controller` binary, which does not allocate with the C library's malloc at all (it
//! links jemalloc: the last point below).
//!
//! * [`release_freed_memory`]: `malloc_trim(0)`. glibc keeps freed memory in its arenas; this
//!   hands the free pages back to the system, after the runtime threads have handed over the
//!   chunks their per-thread caches kept ([`on_thread_park`]). Installed as the servers'
//!   release hook ([`crate::serving::set_memory_release`]), run after a connection flood has
//!   closed and after bursts of writes.
//! * [`tune_for_manager`]: `mallopt` settings for the controller manager, applied before its
//!   runtime starts threads. Measured with `hack/bench-at.sh 10000 --due now` (see
//!   docs/13-performance.md, "Memory: what the manager caches"):
//!   - `M_ARENA_MAX = 1`: glibc gives every thread that meets a locked arena an arena of its
//!     own (up to 8 per core), each holding its own free memory, and memory freed in one
//!     arena serves only the threads attached to it. The manager's allocations are short and
//!     made on its few runtime threads, whose per-thread caches (tcache) serve most of them
//!     without the arena's lock, so one arena costs no measurable CPU and strands nothing:
//!     at 10,000 Ats (two runtime workers, `hack/at-vs-kube-rs.sh`, alternated) the peak RSS
//!     was 37-38 MiB with one arena against 40 MiB with two (the earlier setting), the CPU
//!     5.4-5.6 s against 5.0-6.5 s. (With 16 workers two arenas had saved 7 MiB against
//!     glibc's default of up to 8 per core.)
//!   - `M_MMAP_THRESHOLD = 128 KiB` and `M_TRIM_THRESHOLD = 256 KiB`, fixed: glibc otherwise
//!     raises the mmap threshold (up to 32 MiB) each time a large block is freed, after which
//!     the list pages and response bodies of a relist come from the heap and leave it
//!     fragmented; fixed thresholds keep large buffers in their own mappings (returned when
//!     freed) and trim the heap's top as soon as 256 KiB are free there.
//!
//! * **The API server allocates with jemalloc, not glibc.** `sample-controller` (whose
//!   `apiserver` command is the standalone server) declares `tikv_jemallocator::Jemalloc` its
//!   global allocator, with jemalloc's background thread handing freed pages back while the
//!   server idles. A write clones, builds and drops trees of `serde_json::Value`: a pod is
//!   about 80 maps of one size class (a `BTreeMap` leaf, about 640 bytes) and hundreds of
//!   small strings, and glibc's bins grew slower to search and merge as the heap grew: under
//!   the At benchmark (`perf record`) `_int_malloc`, `free`, `unlink_chunk` and
//!   `malloc_consolidate` took 0.25 ms more per At at 100,000 Ats than at 10,000, even with a
//!   per-thread cache of 512 chunks a size class (`GLIBC_TUNABLES=glibc.malloc.tcache_count=512`,
//!   which had brought a 30,000-At run from 56-60 s of server CPU to 41-44 s). jemalloc's
//!   size-classed slabs do not search: measured in alternated `ONLY=project` runs of
//!   `hack/at-vs-kube-rs.sh` (the same server built once, jemalloc preloaded), the server's CPU
//!   per At fell from 0.861 to 0.747 ms at 10,000 Ats and from 1.248 to 0.866 ms at 100,000,
//!   the wall per At from 0.972 to 0.727 ms at 100,000, its peak RSS from 4,019 to 3,548 MiB
//!   (figures in docs/13-performance.md, "Flat to 100,000"). A server embedded in a test (or in
//!   any other program) allocates with whatever its host links.
//!
//! An operator's own `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or
//! `GLIBC_TUNABLES` wins over [`tune_for_manager`]: then nothing is changed.

/// Whether [`declare_own_allocator`] was called.
static OWN_ALLOCATOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this program's Rust allocations do not go through the C library's malloc
/// (its `#[global_allocator]` is another allocator, as `sample-controller`'s is jemalloc): from
/// then on every function of this module does nothing, since tuning or trimming glibc's
/// arenas would only cost time. Call it first thing in `main`.
pub fn declare_own_allocator() {
    OWN_ALLOCATOR.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the program allocates with the C library's malloc (see [`declare_own_allocator`]).
fn c_malloc_in_use() -> bool {
    !OWN_ALLOCATOR.load(std::sync::atomic::Ordering::Relaxed)
}

/// Hands the free pages of glibc's arenas back to the system (`malloc_trim(0)`); a no-op on
/// other C libraries and after [`declare_own_allocator`].
///
/// First it asks the runtime threads for their per-thread caches ([`on_thread_park`]): glibc
/// keeps up to seven freed chunks of each small size per thread (the tcache, up to about
/// 230 KiB a thread), counts them as in use, and `malloc_trim` leaves them where they are. A
/// cache's chunks come from wherever that thread last freed, so after a burst a few hundred
/// of them sit one to a page across the arenas and keep those pages resident: measured after
/// 10,000 Ats had rested in the embedded API server, the two runtime workers' arenas held
/// 2.3 MB of resident memory each around 0.23 MB of cached chunks. Each thread that parks
/// takes its cached chunks out (by allocating them), and a short-lived thread frees them all
/// and exits, so they reach the arenas' free lists before the trim. Called from
/// within a runtime (the servers call it on a blocking thread), it wakes idle workers with a
/// few empty tasks so that they park again; a thread that is busy and does not park within
/// [`CACHE_HANDOVER_WAIT`] keeps its cache this time.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if c_malloc_in_use() {
        thread_caches::ask();
        // An idle worker sleeps until something wakes it: a few empty tasks do, and each
        // worker parks again once they are run.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            for _ in 0..runtime.metrics().num_workers() * 2 {
                drop(runtime.spawn(async {}));
            }
        }
        std::thread::sleep(CACHE_HANDOVER_WAIT);
        let handed = thread_caches::take();
        if !handed.is_empty() {
            // Freed on a thread of its own, which exits: the chunks its own cache keeps go
            // back to their arenas when it does.
            let _ = std::thread::Builder::new()
                .name("malloc-release".into())
                .spawn(move || drop(handed))
                .map(|t| t.join());
        }
        glibc::trim();
    }
}

/// How long [`release_freed_memory`] waits for the runtime threads to hand over their caches.
pub const CACHE_HANDOVER_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Call from the async runtime's `on_thread_park` hook (the binaries' runtimes do): when a
/// release has asked for it since this thread last parked, takes the chunks of this thread's
/// malloc cache out and hands them to the release (see [`release_freed_memory`]). Otherwise
/// one atomic load and a thread-local read.
pub fn on_thread_park() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if c_malloc_in_use() {
        thread_caches::on_park();
    }
}

/// The per-thread cache hand-over of [`release_freed_memory`], in safe code: a cached chunk is
/// taken out by allocating a buffer of its size, which glibc serves from the cache first.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod thread_caches {
    use std::cell::Cell;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// glibc's defaults: 64 size classes 16 bytes apart (chunks of 32 to 1,040 bytes, asked
    /// for as 24 to 1,032), seven chunks each unless `glibc.malloc.tcache_count` says
    /// otherwise ([`super::tcache_count`]).
    const CLASSES: usize = 64;
    static PER_CLASS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    /// Threads whose chunks wait for one release at most (a release that never comes to take
    /// them does not let them pile up).
    const MAX_THREADS: usize = 64;

    /// Releases that asked; threads that have parked since the latest one remember it.
    static ASKED: AtomicU64 = AtomicU64::new(0);
    static HANDED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    thread_local! {
        static SEEN: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn ask() {
        ASKED.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn on_park() {
        let asked = ASKED.load(Ordering::Relaxed);
        if asked == 0 || SEEN.with(Cell::get) == asked {
            return;
        }
        SEEN.with(|s| s.set(asked));
        let per_class = *PER_CLASS.get_or_init(super::tcache_count);
        let taken: Vec<Vec<u8>> = (0..CLASSES)
            .flat_map(|class| (0..per_class).map(move |_| Vec::with_capacity(24 + 16 * class)))
            .collect();
        let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
        if handed.len() < MAX_THREADS * CLASSES * per_class {
            handed.extend(taken);
        }
    }

    pub(super) fn take() -> Vec<Vec<u8>> {
        std::mem::take(&mut *HANDED.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Applies the manager's malloc settings (see the module doc) unless the environment sets its
/// own; a no-op on other C libraries and after [`declare_own_allocator`]. Call it before any
/// thread is started.
pub fn tune_for_manager() {
    if !c_malloc_in_use() || user_tuned(|name| std::env::var_os(name).is_some()) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::tune(&[
        glibc::ARENA_MAX_ONE,
        glibc::FIXED_MMAP_THRESHOLD,
        glibc::FIXED_TRIM_THRESHOLD,
    ]);
}

/// The per-thread cache's chunks per size class in effect: `glibc.malloc.tcache_count` of
/// `GLIBC_TUNABLES` when set (glibc caps it at 65,535), else glibc's default of 7.
pub fn tcache_count() -> usize {
    std::env::var("GLIBC_TUNABLES")
        .ok()
        .and_then(|t| tcache_count_of(&t))
        .unwrap_or(7)
}

/// `glibc.malloc.tcache_count` of a `GLIBC_TUNABLES` value (`name=value` pairs separated by
/// colons), if it names one that parses.
fn tcache_count_of(tunables: &str) -> Option<usize> {
    tunables
        .split(':')
        .rev()
        .find_map(|pair| pair.strip_prefix("glibc.malloc.tcache_count="))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(|n| n.min(65_535))
}

/// The environment variables through which an operator tunes glibc's malloc.
const USER_SETTINGS: [&str; 4] = [
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "GLIBC_TUNABLES",
];

/// Whether the operator set any of [`USER_SETTINGS`] (`is_set` reads the environment).
fn user_tuned(is_set: impl Fn(&str) -> bool) -> bool {
    USER_SETTINGS.iter().any(|name| is_set(name))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
    const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
    const M_ARENA_MAX: std::ffi::c_int = -8;

    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }

    pub(super) fn trim() {
        // SAFETY: glibc's malloc_trim takes a plain integer, touches only the allocator's own
        // free lists under the allocator's locks, and may be called from any thread at any time.
        unsafe {
            malloc_trim(0);
        }
    }

    pub(super) const ARENA_MAX_ONE: (std::ffi::c_int, std::ffi::c_int) = (M_ARENA_MAX, 1);
    pub(super) const FIXED_MMAP_THRESHOLD: (std::ffi::c_int, std::ffi::c_int) =
        (M_MMAP_THRESHOLD, 128 * 1024);
    pub(super) const FIXED_TRIM_THRESHOLD: (std::ffi::c_int, std::ffi::c_int) =
        (M_TRIM_THRESHOLD, 256 * 1024);

    pub(super) fn tune(settings: &[(std::ffi::c_int, std::ffi::c_int)]) {
        for &(param, value) in settings {
            // SAFETY: mallopt takes two plain integers and changes only the allocator's own
            // settings under its lock.
            unsafe {
                mallopt(param, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_size_is_read_from_the_tunables() {
        assert_eq!(
            tcache_count_of("glibc.malloc.tcache_count=512:glibc.malloc.trim_threshold=262144"),
            Some(512)
        );
        assert_eq!(tcache_count_of("glibc.malloc.arena_max=1"), None);
        assert_eq!(tcache_count_of("glibc.malloc.tcache_count=x"), None);
        assert_eq!(
            tcache_count_of("glibc.malloc.tcache_count=999999"),
            Some(65_535)
        );
        assert_eq!(
            tcache_count_of("glibc.malloc.tcache_count=1:glibc.malloc.tcache_count=9"),
            Some(9),
            "the last one counts"
        );
    }

    #[test]
    fn any_user_setting_leaves_malloc_alone() {
        assert!(!user_tuned(|_| false));
        for name in USER_SETTINGS {
            assert!(user_tuned(|n| n == name), "{name}");
        }
    }
}
