//! What the binaries' logs look like: which crates speak at which `-v`, when there is colour,
//! and one line per event (klog's conventions, carried over to `tracing`).
//!
//! The binaries (`sample-controller`, `controller-manager`) install a `tracing_subscriber` with
//! these three decisions through [`init`]; they live here, as plain functions, so they are
//! documented and tested with the library.
//!
//! * **Verbosity** ([`filter_directives`]). klog has one `-v` for everything; its levels say what
//!   appears: 0–1 the steady-state story, 2–4 more detail and debugging, 5 tracing, 6 the
//!   requested resources, 7 HTTP headers, 8–9 request and response bodies. Here the project's
//!   own crates ([`OWN_TARGETS`]) follow [`verbosity_level`] (0 info, 1–4
//!   debug, 5+ trace), while the dependencies (hyper, h2, rustls, tower, ...) stay at info
//!   until `-v 6`, where the wire starts to matter: debug from 6, trace from 9. Without this,
//!   `-v 1` buried the controller's own lines under hundreds of HTTP/2 frame logs.
//!   `RUST_LOG`, when set, replaces these directives entirely (the subscriber's choice).
//! * **Colour** ([`use_colour`]). ANSI colour only when stderr is a terminal, and never when
//!   `NO_COLOR` is set to a non-empty value (<https://no-color.org>): a log redirected to a
//!   file or a collector holds plain text.
//! * **One line per event** ([`OneLineWriter`]). A message or a field can carry line breaks
//!   (an API server's error body, a multi-line YAML problem); a line-oriented reader would see
//!   several events, the later ones without time or level. Line breaks inside an event are
//!   written as the two characters `\n` (and `\r` as `\r`), so every event is exactly one line.

use std::ffi::OsStr;
use std::io::Write;

use crate::otlp::{SpanQueue, layer as otlp_layer};

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl LogFormat {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The `tracing` level a klog-style `-v` maps to.
pub fn verbosity_level(v: u8) -> tracing::Level {
    match v {
        0 => tracing::Level::INFO,
        1..=4 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// The `tracing` targets (crate names) of this project, which `-v` raises first.
pub const OWN_TARGETS: &[&str] = &[
    "sample_client_go",
    "sample_controller_runtime",
    "sample_operators",
    "sample_controller",
    "controller_manager",
    "embedded_apiserver",
    "apimachinery",
];

/// The dependencies' level at verbosity `v`: info below 6, debug for 6–8, trace from 9.
pub fn dependency_level(v: u8) -> tracing::Level {
    match v {
        0..=5 => tracing::Level::INFO,
        6..=8 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
}

/// `EnvFilter` directives for `-v v`: the dependencies' level as the default, and
/// `own` for each of [`OWN_TARGETS`]. The manager passes
/// [`verbosity_level`]`(v)` as `own`; the demo passes `WARN` at `-v 0`
/// (its story is on stdout), which also quiets the dependencies to warnings.
pub fn filter_directives(v: u8, own: tracing::Level) -> String {
    let deps = dependency_level(v).min(own);
    let mut s = deps.as_str().to_ascii_lowercase();
    for t in OWN_TARGETS {
        s.push(',');
        s.push_str(t);
        s.push('=');
        s.push_str(&own.as_str().to_ascii_lowercase());
    }
    s
}

/// Whether to write ANSI colour: only on a terminal, and never with a non-empty `NO_COLOR`.
pub fn use_colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The one-line form of one formatted event: inner `\n` and `\r` escaped, one final `\n`.
pub fn one_line(event: &[u8]) -> Vec<u8> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    let mut out = Vec::with_capacity(body.len() + 1);
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
    out.push(b'\n');
    out
}

/// A writer for exactly one event (`tracing_subscriber` asks its `MakeWriter` for a new
/// writer per event): collects the event and, when dropped, writes its [`one_line`] form to
/// stderr in one call, so lines of concurrent events never interleave.
#[derive(Debug, Default)]
pub struct OneLineWriter(Vec<u8>);

impl OneLineWriter {
    /// An empty writer (the `MakeWriter` closure: `|| OneLineWriter::new()`).
    pub fn new() -> OneLineWriter {
        OneLineWriter(Vec::new())
    }
}

impl Write for OneLineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for OneLineWriter {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // Nowhere to report a failed write to stderr; the event is lost, as with eprintln.
        let _ = std::io::stderr().lock().write_all(&one_line(&self.0));
    }
}

/// Installs the process's log subscriber on stderr, as text or JSON, one line per event:
/// `directives` are the `-v` level's filter ([`filter_directives`]), replaced by `RUST_LOG`
/// when that is set; colour as [`use_colour`] decides; every event through [`OneLineWriter`].
/// With `otlp`, the OTLP layer ([`crate::otlp`]) is installed beside the log layer with its
/// own filter (the `sync` and `request` spans, at any `-v`), so the logs are the same with or
/// without it. A second call (a subscriber is already set) is reported on stderr and changes
/// nothing.
pub fn init(format: LogFormat, directives: &str, otlp: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, Registry};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directives));
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(OneLineWriter::new);
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => fmt.with_target(false).with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).with_filter(filter).boxed(),
    };
    let spans = otlp.then(|| otlp_layer(SpanQueue::global().clone()));
    let result = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    if let Err(e) = result {
        eprintln!("cannot set up logging: {e}");
    }
}
