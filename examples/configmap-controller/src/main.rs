//! `configmap-controller run [flags]`: the Note controller under the manager's command line
//! (the same flags as `sample-controller run`: `--kubeconfig`, `--leader-elect`,
//! `--metrics-bind-address`, ...; `--help` lists them).

use std::process::ExitCode;

use clap::Parser;
use sample_controller_runtime::manager::ManagerCommand;

#[derive(Parser, Debug)]
#[command(
    name = "configmap-controller",
    about = "Keeps a ConfigMap in step with each Note"
)]
struct Cli {
    #[command(subcommand)]
    command: ManagerCommand,
}

fn main() -> ExitCode {
    Cli::parse().command.main(
        "configmap-controller",
        vec![configmap_controller::registration()],
    )
}
