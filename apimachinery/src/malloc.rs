//! glibc's malloc, tuned for a small, long-running process (the one module of the workspace's
//! library crates that calls into C, so the one place `unsafe` is allowed).
//!
//! Both binaries (`sample-controller` and the image's `controller-manager`) install the first as
//! the servers' release hook, and call the second before the manager's runtime starts (`run`
//! only; the demo and the API server keep glibc's defaults). On any other C library (the
//! container image is static musl, whose mallocng has no per-thread arenas and returns freed
//! memory by itself) both do nothing.
//!
//! * [`release_freed_memory`]: `malloc_trim(0)`. glibc keeps freed memory in its arenas; this
//!   hands the free pages back to the system. Installed as the servers' release hook
//!   ([`crate::serving::set_memory_release`]), run after a connection flood has closed.
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
//!   An operator's own `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`
//!   or `GLIBC_TUNABLES` wins: then nothing is changed.

/// Hands the free pages of glibc's arenas back to the system (`malloc_trim(0)`); a no-op on
/// other C libraries.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
}

/// Applies the manager's malloc settings (see the module doc) unless the environment sets its
/// own; a no-op on other C libraries. Call it before any thread is started.
pub fn tune_for_manager() {
    if user_tuned(|name| std::env::var_os(name).is_some()) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::tune_for_manager();
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

    pub(super) fn tune_for_manager() {
        for (param, value) in [
            (M_ARENA_MAX, 1),
            (M_MMAP_THRESHOLD, 128 * 1024),
            (M_TRIM_THRESHOLD, 256 * 1024),
        ] {
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
    fn any_user_setting_leaves_malloc_alone() {
        assert!(!user_tuned(|_| false));
        for name in USER_SETTINGS {
            assert!(user_tuned(|n| n == name), "{name}");
        }
    }
}
