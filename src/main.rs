//! The `sample-controller` binary.
//!
//! * `sample-controller demo`: the zero-setup tour: an embedded API server and the controller
//!   manager; four Ats (two run once at their schedule; two are refused at admission, a blank
//!   command by the manager's webhook and a schedule that is not a time by the CRD's schema), a
//!   TDSet following its time window and a RedisCluster resized and deleted through its
//!   finalizer (see `src/demo.rs`; `--operators` chooses).
//! * `sample-controller run`: the controller manager against a real cluster (see
//!   `sample_controller_runtime::manager` for the flags).
//! * `sample-controller apiserver`: the embedded API server alone, for `kubectl` experiments.
//! * `sample-controller trace KEY`: one key's journey, live, from a running manager's `/trace`
//!   (see `src/trace.rs`).
//!
//! Exit codes: 0 on success or a clean shutdown, 1 when the work failed (an unreachable
//! cluster, a missing CRD, a demo that did not finish), 2 for a bad flag.
//!
//! The binary allocates with jemalloc (`src/jemalloc.rs`), its background thread on: the API
//! server builds and drops a tree of thousands of small maps and strings per write, and glibc's
//! malloc grew slower with the heap where jemalloc's size-classed slabs do not (figures in
//! `apimachinery::malloc`'s docs). The image's `controller-manager` keeps the C library's
//! malloc, tuned there for a small manager.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
mod demo;
mod jemalloc;
mod trace;

use demo::DemoOptions;
use sample_controller_runtime::logging;
use sample_controller_runtime::manager::{LogFormat, ManagerCommand, verbosity_level};
use trace::TraceOptions;

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
    /// `run`: the controller manager (shared with the image's `controller-manager` binary).
    #[command(flatten)]
    Manager(ManagerCommand),
    /// Zero-setup demo: embedded API server and controllers; four Ats (two run once at their
    /// schedule, two refused at admission: a blank command, a schedule that is not a time), a
    /// TDSet and a RedisCluster.
    Demo(DemoOptions),
    /// Run the embedded Kubernetes API server until SIGINT/SIGTERM.
    Apiserver(Box<embedded_cluster::command::ApiServerArgs>),
    /// Follow one key through a running manager, live: every hop from the watch event to the
    /// end of its sync (read from the manager's /trace, beside /metrics).
    Trace(TraceOptions),
}

fn main() -> ExitCode {
    // glibc's malloc is not this binary's allocator: its tuning and trimming are skipped.
    apimachinery::malloc::declare_own_allocator();
    match Cli::parse().command {
        // The manager's whole command (malloc tuning, runtime, logs, exit codes) is the
        // library's, shared with the image's `controller-manager` binary.
        Command::Manager(command) => command.main(
            "sample-controller",
            sample_operators::registry::registrations(),
        ),
        Command::Demo(opts) => {
            // The demo prints its own story on stdout; logs stay at warnings unless -v.
            let own = if opts.verbosity == 0 {
                tracing::Level::WARN
            } else {
                verbosity_level(opts.verbosity)
            };
            logging::init(
                LogFormat::Text,
                &logging::filter_directives(opts.verbosity, own),
                false,
            );
            with_runtime(|runtime| match runtime.block_on(demo::run(opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("sample-controller: demo failed: {e}");
                    ExitCode::FAILURE
                }
            })
        }
        Command::Trace(opts) => with_runtime(|runtime| match runtime.block_on(trace::run(opts)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sample-controller: trace: {e}");
                ExitCode::FAILURE
            }
        }),
        Command::Apiserver(args) => {
            logging::init(
                LogFormat::Text,
                &logging::filter_directives(0, tracing::Level::INFO),
                false,
            );
            with_runtime(
                |runtime| match runtime.block_on(embedded_cluster::command::run(*args)) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("sample-controller: error: {e}");
                        ExitCode::FAILURE
                    }
                },
            )
        }
    }
}

/// Runs `f` on a multi-threaded runtime, after installing the TLS crypto provider and
/// jemalloc's memory release for the servers (see `apimachinery::serving` and `src/jemalloc.rs`).
fn with_runtime(f: impl FnOnce(&tokio::runtime::Runtime) -> ExitCode) -> ExitCode {
    apimachinery::crypto::install_provider();
    apimachinery::serving::set_memory_release(jemalloc::release);
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(jemalloc::on_thread_park)
        .build()
    {
        Ok(runtime) => f(&runtime),
        Err(e) => {
            eprintln!("sample-controller: error: starting the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}
