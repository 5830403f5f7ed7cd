//! The `sample-controller` binary.

use clap::{Parser, Subcommand};

/// The Programming Kubernetes sample-controller / cnat operator, hand-rolled the client-go way.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the embedded Kubernetes API server until SIGINT/SIGTERM.
    #[cfg(feature = "embedded")]
    Apiserver(sample_controller::apiserver::standalone::ApiServerArgs),
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    sample_controller::install_crypto_provider();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        #[cfg(feature = "embedded")]
        Some(Command::Apiserver(args)) => {
            match sample_controller::apiserver::standalone::run(args).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        None => {
            println!("sample-controller {}", env!("CARGO_PKG_VERSION"));
            std::process::ExitCode::SUCCESS
        }
    }
}
