//! The `sample-controller` binary.
//!
//! * `sample-controller demo`: the zero-setup tour: an embedded API server and the controller
//!   manager; four Ats (two run once at their schedule, one is refused at admission, one is
//!   marked InvalidSpec), a TDSet following its time window and a RedisCluster resized and
//!   deleted through its finalizer (see `src/demo.rs`; `--operators` chooses).
//! * `sample-controller run`: the controller manager against a real cluster (see
//!   `sample_controller::manager` for the flags).
//! * `sample-controller apiserver`: the embedded API server alone, for `kubectl` experiments.
//!
//! Exit codes: 0 on success or a clean shutdown, 1 when the work failed (an unreachable
//! cluster, a missing CRD, a demo that did not finish), 2 for a bad flag.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
mod demo;

use demo::DemoOptions;
use sample_controller::manager::{self, LogFormat, ManagerError, ManagerOptions, verbosity_level};
use sample_controller::{logging, otlp};

#[derive(Parser, Debug)]
#[command(
    name = "sample-controller",
    version,
    about = "The Programming Kubernetes sample-controller / cnat At operator, the client-go way, in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller manager against a cluster (kubeconfig, --master or in-cluster).
    Run(Box<ManagerOptions>),
    /// Zero-setup demo: embedded API server and controllers; four Ats (two run once at their
    /// schedule, one refused at admission, one marked InvalidSpec), a TDSet and a RedisCluster.
    Demo(DemoOptions),
    /// Run the embedded Kubernetes API server until SIGINT/SIGTERM.
    Apiserver(Box<embedded_apiserver::standalone::ApiServerArgs>),
}

/// glibc keeps freed memory in its arenas; `malloc_trim(0)` hands the free pages back to the
/// system. Run by the servers after a connection flood has closed
/// ([`apimachinery::serving::set_memory_release`]), so the process's memory comes back down.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_freed_memory() {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's malloc_trim takes a plain integer, touches only the allocator's own free
    // lists under the allocator's locks, and may be called from any thread at any time.
    unsafe {
        malloc_trim(0);
    }
}

/// glibc malloc settings for the controller manager, applied before its runtime starts
/// threads. Measured with `hack/bench-at.sh 10000 --due now` (see the README's "Where the
/// manager's memory goes"):
///
/// * `M_ARENA_MAX = 2`: glibc gives every thread that meets a locked arena an arena of its own
///   (up to 8 per core), each holding its own free memory; the manager's allocations are made
///   on its few runtime threads and are short, so two arenas keep the contention low and stop
///   freed memory from being stranded in many;
/// * `M_MMAP_THRESHOLD = 128 KiB` and `M_TRIM_THRESHOLD = 256 KiB`, fixed: glibc otherwise
///   raises the mmap threshold (up to 32 MiB) each time a large block is freed, after which
///   the list pages and response bodies of a relist come from the heap and leave it
///   fragmented; fixed thresholds keep large buffers in their own mappings (returned when
///   freed) and trim the heap's top as soon as 256 KiB are free there.
///
/// An operator's own `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or
/// `GLIBC_TUNABLES` wins: then nothing is changed. (The container image is static musl, whose
/// allocator, mallocng, has no per-thread arenas and gives freed memory back by itself; there
/// is nothing to set there.)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn tune_allocator_for_manager() {
    const M_TRIM_THRESHOLD: std::ffi::c_int = -1;
    const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
    const M_ARENA_MAX: std::ffi::c_int = -8;
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    let user_set = [
        "MALLOC_ARENA_MAX",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "GLIBC_TUNABLES",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if user_set {
        return;
    }
    for (param, value) in [
        (M_ARENA_MAX, 2),
        (M_MMAP_THRESHOLD, 128 * 1024),
        (M_TRIM_THRESHOLD, 256 * 1024),
    ] {
        // SAFETY: mallopt takes two plain integers and changes only the allocator's own
        // settings under its lock; it is called before the runtime starts any thread.
        unsafe {
            mallopt(param, value);
        }
    }
}

fn main() -> ExitCode {
    apimachinery::crypto::install_provider();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    apimachinery::serving::set_memory_release(release_freed_memory);
    let cli = Cli::parse();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if matches!(cli.command, Command::Run(_)) {
        tune_allocator_for_manager();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sample-controller: error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Run(opts) => {
            init_logging(
                opts.log_format,
                &logging::filter_directives(opts.verbosity, verbosity_level(opts.verbosity)),
                opts.otlp_endpoint
                    .as_deref()
                    .is_some_and(|e| !e.trim().is_empty()),
            );
            match runtime.block_on(manager::run(*opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(ManagerError::Flag(e)) => {
                    eprintln!("sample-controller: error: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("sample-controller: error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Demo(opts) => {
            // The demo prints its own story on stdout; logs stay at warnings unless -v.
            let own = if opts.verbosity == 0 {
                tracing::Level::WARN
            } else {
                verbosity_level(opts.verbosity)
            };
            init_logging(
                LogFormat::Text,
                &logging::filter_directives(opts.verbosity, own),
                false,
            );
            match runtime.block_on(demo::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sample-controller: demo failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Apiserver(args) => {
            init_logging(
                LogFormat::Text,
                &logging::filter_directives(0, tracing::Level::INFO),
                false,
            );
            match runtime.block_on(embedded_apiserver::standalone::run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sample-controller: error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Logs to stderr, as text or JSON, one line per event (see `sample_controller::logging`):
/// `directives` are the `-v` level's filter, replaced by `RUST_LOG` when that is set; colour
/// only on a terminal and without `NO_COLOR`. With `otlp`, the OTLP layer
/// (`sample_controller::otlp`) is installed beside the log layer with its own filter (the
/// `sync` and `request` spans, at any `-v`), so the logs are the same with or without it.
fn init_logging(format: LogFormat, directives: &str, otlp: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directives));
    let colour = logging::use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(logging::OneLineWriter::new);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => fmt.with_target(false).with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_filter(filter).boxed(),
    };
    let spans = otlp.then(|| otlp::layer(otlp::SpanQueue::global().clone()));
    let result = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    if let Err(e) = result {
        eprintln!("sample-controller: cannot set up logging: {e}");
    }
}
