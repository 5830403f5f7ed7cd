//! # `sample-controller trace`: one key's journey, live, from a running manager
//!
//! Reads the manager's `/trace` stream (JSON lines, served beside `/metrics`; see
//! `sample_controller_runtime::machinery`) for one key and prints one line per hop, with its
//! time relative to the first hop printed:
//!
//! ```text
//! +   0.000s  at     watch    ADDED At default/example-at rv 612
//! +   0.000s  at     store    stored 9µs after the event
//! +   0.000s  at     handler  on_add → add(default/example-at)
//! +   0.000s  at     queue    add: queued (depth 1)
//! ```
//!
//! `-o json` prints the stream's lines as they come (the hello line, the hops, heartbeats and
//! lost counts). The reader stops when the manager ends the stream, after `--for`, or on
//! Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use apimachinery::duration::parse as parse_go_duration;
use clap::{Args, ValueEnum};
use sample_controller_runtime::machinery::{TraceReader, TraceReaderError, TraceReaderOptions};
use serde_json::Value;

/// Flags of `sample-controller trace`.
#[derive(Args, Clone, Debug)]
pub struct TraceOptions {
    /// The key to follow: NAMESPACE/NAME, or NAME in --namespace (the work queue's key).
    #[arg(value_name = "KEY")]
    pub key: String,

    /// The namespace of a KEY given as NAME.
    #[arg(short = 'n', long, default_value = "default", value_name = "NAMESPACE")]
    pub namespace: String,

    /// The manager's metrics server (its --metrics-bind-address), http or https.
    #[arg(long, default_value = "http://127.0.0.1:8080", value_name = "URL")]
    pub address: String,

    /// Only this controller's hops (at, tdset, ...); default: every controller's.
    #[arg(long, value_name = "NAME")]
    pub controller: Option<String>,

    /// text: one line per hop; json: the stream's JSON lines as they come.
    #[arg(short = 'o', long, value_enum, default_value_t = TraceOutput::Text)]
    pub output: TraceOutput,

    /// Stop after this long (Go duration: 30s, 2m); default: until the stream ends or Ctrl-C.
    #[arg(long = "for", value_parser = parse_go_duration, value_name = "DURATION")]
    pub for_: Option<Duration>,

    /// A bearer token, for a manager run with --metrics-secure (or SAMPLE_CONTROLLER_TRACE_TOKEN).
    #[arg(long, env = "SAMPLE_CONTROLLER_TRACE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// A file holding the bearer token (a service account's token, for instance).
    #[arg(long, value_name = "PATH", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,

    /// The CA bundle (PEM) that signed the metrics server's certificate.
    #[arg(long, value_name = "PATH")]
    pub certificate_authority: Option<PathBuf>,

    /// Do not verify the metrics server's certificate (--metrics-secure's self-signed one).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

/// `-o`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TraceOutput {
    /// One line per hop.
    #[default]
    Text,
    /// The stream's JSON lines.
    Json,
}

impl TraceOptions {
    /// The work queue key: `namespace/name`.
    pub fn queue_key(&self) -> String {
        if self.key.contains('/') {
            self.key.clone()
        } else {
            format!("{}/{}", self.namespace, self.key)
        }
    }
}

/// Runs `sample-controller trace`: follows the key until the stream ends or `--for` elapses.
pub async fn run(opts: TraceOptions) -> Result<(), TraceReaderError> {
    let token = match (&opts.token, &opts.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(path)) => Some(std::fs::read_to_string(path).map_err(|e| {
            TraceReaderError::Invalid(format!("reading --token-file {}: {e}", path.display()))
        })?),
        (None, None) => None,
    };
    let options = TraceReaderOptions {
        token,
        certificate_authority: opts.certificate_authority.clone(),
        insecure_skip_tls_verify: opts.insecure_skip_tls_verify,
    };
    let key = opts.queue_key();
    let follow = async {
        let mut reader =
            TraceReader::open(&opts.address, &key, opts.controller.as_deref(), &options).await?;
        let mut first: Option<f64> = None;
        while let Some(line) = reader.next().await? {
            match opts.output {
                TraceOutput::Json => println!("{line}"),
                TraceOutput::Text => {
                    if let Some(text) = text_line(&line, &mut first) {
                        println!("{text}");
                    }
                }
            }
        }
        Ok::<_, TraceReaderError>(())
    };
    match opts.for_ {
        Some(d) => tokio::time::timeout(d, follow).await.unwrap_or(Ok(())),
        None => follow.await,
    }
}

/// One stream line as `sample-controller trace` prints it; `None` for a heartbeat. `first`:
/// the elapsed time of the first hop printed, the zero of the printed times.
pub fn text_line(line: &Value, first: &mut Option<f64>) -> Option<String> {
    let stage = line["stage"].as_str().unwrap_or_default();
    let text = line["text"].as_str().unwrap_or_default();
    match stage {
        "heartbeat" => None,
        "subscribed" | "lost" => Some(format!("# {text}")),
        _ => {
            let elapsed = line["elapsedMs"].as_f64().unwrap_or_default();
            let zero = *first.get_or_insert(elapsed);
            Some(format!(
                "+{:>8.3}s  {:<6} {:<8} {text}",
                (elapsed - zero) / 1000.0,
                line["controller"].as_str().unwrap_or("-"),
                stage
            ))
        }
    }
}
