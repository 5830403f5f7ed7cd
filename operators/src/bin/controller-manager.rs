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
//! Exit codes: 0 after a clean shutdown, 1 when the work failed (an unreachable cluster, a
//! missing CRD), 2 for a bad flag.

use std::process::ExitCode;

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
    Cli::parse().command.main(
        "controller-manager",
        sample_operators::registry::registrations(),
    )
}
