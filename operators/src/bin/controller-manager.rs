//! The `controller-manager` binary: the controller manager alone, what the container image
//! ships.
//!
//! `controller-manager run [flags]` is `sample-controller run [flags]`, flag for flag and exit
//! code for exit code (both are `sample_controller_runtime::manager::main` behind a flag parser, with
//! [`sample_operators::registry::registrations`]), so
//! the deploy manifests' `args: [run, ...]` fit either. The difference is what is linked in:
//! this binary is built from the controller crates alone (`cargo build -p sample-operators
//! --bin controller-manager`), without the embedded API server, its protobuf, CEL and storage
//! crates, or the demo. Its code is a third of `sample-controller`'s, so the image is smaller
//! and the process maps fewer pages of its own executable: see docs/13-performance.md, "Memory:
//! what the manager caches".
//!
//! ## Its allocator
//!
//! Built with the crate's default features (the container image is), the binary allocates
//! with jemalloc, as `sample-controller` does. The manager decodes every watch event into
//! objects of many small maps and strings and drops the versions they replace; glibc's malloc
//! grew slower to search as the heap grew, and musl's is slower still. Measured with
//! `MANAGER_BIN=` runs of `hack/at-vs-kube-rs.sh` against the same server, alternated
//! (docs/13-performance.md, "Flat to 100,000"), the manager's CPU per At:
//!
//! | build | 10,000 Ats | 100,000 Ats | peak RSS at 10,000 / 100,000 |
//! |---|---:|---:|---:|
//! | `release`, glibc's malloc | 0.286-0.296 ms | 0.399 ms | 42 / 244 MiB |
//! | `release`, jemalloc | 0.260-0.261 ms | 0.281 ms | 41 / 216 MiB |
//! | `dist` for musl (the image), musl's malloc | 0.337-0.350 ms | | 35 MiB |
//! | `dist` for musl (the image), jemalloc | 0.254-0.292 ms | | 35-37 MiB |
//!
//! Of the image's peak, the anonymous memory (what its memory limit cannot reclaim) was
//! 26.7 MiB with musl's malloc and 26.8 MiB with jemalloc, sampled every 20 ms; the rest is
//! the binary's own code pages (8.9 and 9.9 MiB). `--no-default-features --features crds`
//! builds it on the C library's malloc.
//!
//! Exit codes: 0 after a clean shutdown, 1 when the work failed (an unreachable cluster, a
//! missing CRD), 2 for a bad flag.

use std::process::ExitCode;

/// Every allocation of the binary (see "Its allocator" above).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::Parser;
use sample_controller_runtime::manager::ManagerCommand;

#[derive(Parser, Debug)]
#[command(
    name = "controller-manager",
    version,
    about = "The Programming Kubernetes controller manager (At, TDSet, RedisCluster, MyApp, Foo), the client-go way, in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: ManagerCommand,
}

fn main() -> ExitCode {
    // glibc's tuning and trimming (`apimachinery::malloc`) would only cost time.
    #[cfg(feature = "jemalloc")]
    apimachinery::malloc::declare_own_allocator();
    Cli::parse().command.main(
        "controller-manager",
        sample_operators::registry::registrations(),
    )
}
