//! # Exporting the `sync` and `request` spans over OTLP/HTTP JSON
//!
//! The controllers wrap every sync in a root `sync` span and every API request in a child
//! `request` span (see [`crate::controller`], "Traces"). This module sends those spans to an
//! OpenTelemetry collector (or Jaeger, Tempo, ...) when `sample-controller run
//! --otlp-endpoint URL` is given, or `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the flag wins).
//!
//! ## The pipeline
//!
//! ```text
//! tracing span (sync / request) --on_close--> OtlpLayer --push--> SpanQueue (bounded)
//! SpanQueue --take(512) every 5 s, or as soon as 512 wait--> Exporter task
//! Exporter --POST {endpoint}/v1/traces, application/json--> collector
//! ```
//!
//! * [`OtlpLayer`] is a `tracing_subscriber::Layer`. It records each span's name, a trace id
//!   (16 random bytes for a root span, inherited by its children), a span id (8 random bytes),
//!   its parent's span id, its start and end time (unix nanoseconds), its fields as
//!   attributes, and a status: error when `result=error` or `result=panic` (a sync) or
//!   `code >= 500` or an `error` field (a request), unset otherwise. When the span closes it is
//!   pushed to the [`SpanQueue`]. The layer is installed with [`span_filter`] as its own
//!   per-layer filter: only the `sync` and `request` spans reach it, at every `-v`, while the
//!   log layer keeps its own filter, so the logs do not change when export is on. A request
//!   made outside any sync (the event sink's Event POSTs, an informer's LIST) is a root span,
//!   a trace of its own.
//! * [`SpanQueue`] is bounded ([`DEFAULT_MAX_QUEUE_SIZE`]); a span that finds it full is
//!   dropped and counted (`otlp_spans_dropped_total`), so a slow or dead collector never
//!   blocks a sync nor grows memory. Spans are only queued while an exporter is attached.
//! * The [`Exporter`] is a tokio task (on the manager's runtime, using the same hyper and
//!   rustls stack as the Kubernetes client): it takes up to [`DEFAULT_MAX_EXPORT_BATCH_SIZE`]
//!   spans every [`DEFAULT_SCHEDULED_DELAY`], or at once when that many wait, and POSTs them.
//!   These are the OpenTelemetry SDK's `BatchSpanProcessor` defaults (`OTEL_BSP_MAX_QUEUE_SIZE`
//!   2048, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` 512, `OTEL_BSP_SCHEDULE_DELAY` 5000 ms) and the OTLP
//!   exporter's default timeout (`OTEL_EXPORTER_OTLP_TIMEOUT` 10 s). Exported spans are counted
//!   in `otlp_spans_exported_total`, those given up on in `otlp_spans_dropped_total`.
//! * **Retries**, as the OTLP specification says for OTLP/HTTP: only 429, 502, 503 and 504 are
//!   retryable (and a connection that failed); every other 4xx/5xx drops the batch. A
//!   `Retry-After: <seconds>` header is honoured (capped at [`MAX_RETRY_AFTER`]); otherwise
//!   the wait is an exponential backoff with jitter (1 s, 2 s, 4 s, ..., at most 5 s), for at
//!   most [`MAX_ATTEMPTS`] attempts.
//! * **Shutdown**: when the manager stops, the exporter detaches from the queue and sends
//!   what is queued, within [`SHUTDOWN_FLUSH_DEADLINE`]; what is left then is dropped.
//!
//! ## Span links
//!
//! A `sync` span links to the spans of the writes that caused it, when the objects of its
//! triggers carry a W3C `traceparent` in the `tracing.k8s.io/traceparent` annotation (KEP-5915's
//! proposal; see [`sample_client_go::keytrace::TRACEPARENT_ANNOTATION`]): the worker records
//! them in the span's `links` field (comma-separated), and this layer turns that field into the
//! span's `links` (`traceId`, `spanId`) instead of an attribute. The sync stays a root span (a
//! trace of its own, as KEP-5915 says a reconcile is), so Jaeger or Tempo shows the cause,
//! linked to the reconcile and its writes.
//!
//! ## The wire format
//!
//! The body is the official JSON encoding of `ExportTraceServiceRequest`
//! (opentelemetry-proto, "JSON Protobuf Encoding"): `resourceSpans` → `scopeSpans` → `spans`,
//! lowerCamelCase field names, trace and span ids as lowercase hex strings (not base64, an
//! OTLP exception to proto3's JSON mapping), 64-bit integers (times, `intValue`) as decimal
//! strings, enums (`kind`, `status.code`) as integers. `sync` is `SPAN_KIND_INTERNAL` (1),
//! `request` is `SPAN_KIND_CLIENT` (3). The resource carries `service.name`
//! (`sample-controller`, or `OTEL_SERVICE_NAME`); the scope is `sample_controller` and its
//! version. See [`encode_request`].
//!
//! ## Why no OpenTelemetry crate
//!
//! OTLP/HTTP with JSON bodies is a stable wire protocol, and this exporter is a few hundred
//! lines on the HTTP client the project already has. The `opentelemetry`,
//! `opentelemetry_sdk`, `opentelemetry-otlp` and `tracing-opentelemetry` crates bring a large
//! dependency tree (and build time) and a batch processor that runs the exporter on a thread
//! of its own, off the tokio runtime the hyper-based exporter needs; as everywhere else in this
//! project, the moving part is written out instead.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// `OTEL_BSP_MAX_QUEUE_SIZE`'s default: spans waiting for export beyond this are dropped.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 2048;
/// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`'s default: the most spans in one POST.
pub const DEFAULT_MAX_EXPORT_BATCH_SIZE: usize = 512;
/// `OTEL_BSP_SCHEDULE_DELAY`'s default: how often the queue is sent when it is not full.
pub const DEFAULT_SCHEDULED_DELAY: Duration = Duration::from_secs(5);
/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default: the deadline of one POST.
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times one batch is sent before it is dropped (retryable answers only).
pub const MAX_ATTEMPTS: u32 = 5;
/// The first retry's backoff; it doubles up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long a shutdown waits for the queued spans to be sent.
pub const SHUTDOWN_FLUSH_DEADLINE: Duration = Duration::from_secs(5);
/// The default `service.name` (`OTEL_SERVICE_NAME` replaces it).
pub const DEFAULT_SERVICE_NAME: &str = "sample-controller";

/// Where and how to export: `--otlp-endpoint` and `OTEL_SERVICE_NAME`, plus the batching knobs
/// (the SDK's defaults from [`OtlpConfig::new`]; tests shorten the delay).
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpConfig {
    /// The collector's base URL (`http://localhost:4318`); spans go to `{endpoint}/v1/traces`.
    pub endpoint: Uri,
    /// The resource's `service.name`.
    pub service_name: String,
    /// How often the queue is sent when it holds fewer than a batch.
    pub scheduled_delay: Duration,
    /// The most spans in one POST.
    pub max_export_batch_size: usize,
    /// The deadline of one POST.
    pub export_timeout: Duration,
}

impl OtlpConfig {
    /// The SDK's defaults for `endpoint` and `service_name`.
    pub fn new(endpoint: Uri, service_name: impl Into<String>) -> Self {
        OtlpConfig {
            endpoint,
            service_name: service_name.into(),
            scheduled_delay: DEFAULT_SCHEDULED_DELAY,
            max_export_batch_size: DEFAULT_MAX_EXPORT_BATCH_SIZE,
            export_timeout: DEFAULT_EXPORT_TIMEOUT,
        }
    }

    /// `{endpoint}/v1/traces`, as the OTLP exporter specification builds the signal URL from
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (one `/` between them, whatever the endpoint ends with).
    pub fn traces_url(&self) -> String {
        let base = self.endpoint.to_string();
        format!("{}/v1/traces", base.trim_end_matches('/'))
    }
}

/// Checks an OTLP endpoint: an `http://` or `https://` URL with a host, and no query.
pub fn parse_endpoint(s: &str) -> Result<Uri, String> {
    let uri: Uri = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("{s:?} must start with http:// or https://")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{s:?} has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("{s:?} must not have a query"));
    }
    Ok(uri)
}

/// An attribute's value (the three kinds these spans' fields have).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// `stringValue`.
    Str(String),
    /// `intValue` (written as a decimal string).
    Int(i64),
    /// `boolValue`.
    Bool(bool),
}

/// `Span.SpanKind`: what the span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// `SPAN_KIND_INTERNAL` (1): a sync.
    Internal = 1,
    /// `SPAN_KIND_CLIENT` (3): a request to the API server.
    Client = 3,
}

/// `Status.StatusCode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanStatus {
    /// `STATUS_CODE_UNSET` (0): nothing went wrong that the span knows of.
    Unset = 0,
    /// `STATUS_CODE_ERROR` (2).
    Error = 2,
}

/// One finished span, ready to encode.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedSpan {
    /// `sync` or `request`.
    pub name: String,
    /// 16 bytes, shared by every span of a trace.
    pub trace_id: [u8; 16],
    /// 8 bytes.
    pub span_id: [u8; 8],
    /// The parent's span id; `None` for a root span.
    pub parent_span_id: Option<[u8; 8]>,
    /// Internal (sync) or client (request).
    pub kind: SpanKind,
    /// Unix nanoseconds.
    pub start_unix_nano: u64,
    /// Unix nanoseconds.
    pub end_unix_nano: u64,
    /// The span's fields, in the order they were recorded.
    pub attributes: Vec<(String, AttrValue)>,
    /// Error, with a message, or unset.
    pub status: (SpanStatus, String),
    /// The spans this one links to (trace id, span id): for a `sync`, the writes that caused
    /// it, from the `traceparent` annotations of its triggers (see "Span links" above).
    pub links: Vec<([u8; 16], [u8; 8])>,
}

/// The trace id and span id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`); `None`
/// for anything else, or an all-zero id (invalid by the W3C Trace Context specification).
pub fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8])> {
    fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
        if s.len() != 2 * N {
            return None;
        }
        let mut out = [0u8; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(out)
    }
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let version: [u8; 1] = hex_bytes(version)?;
    if version[0] == 0xff || (version[0] == 0 && parts.next().is_some()) {
        return None;
    }
    let _flags: [u8; 1] = hex_bytes(flags)?;
    let trace: [u8; 16] = hex_bytes(trace)?;
    let span: [u8; 8] = hex_bytes(span)?;
    (trace != [0; 16] && span != [0; 8]).then_some((trace, span))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute_json(key: &str, value: &AttrValue) -> Value {
    let value = match value {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
    };
    json!({ "key": key, "value": value })
}

fn span_json(span: &FinishedSpan) -> Value {
    let mut v = json!({
        "traceId": hex(&span.trace_id),
        "spanId": hex(&span.span_id),
        "name": span.name,
        "kind": span.kind as i32,
        "startTimeUnixNano": span.start_unix_nano.to_string(),
        "endTimeUnixNano": span.end_unix_nano.to_string(),
        "attributes": span.attributes.iter().map(|(k, v)| attribute_json(k, v)).collect::<Vec<_>>(),
        "status": { "code": span.status.0 as i32 },
    });
    if let Some(parent) = &span.parent_span_id {
        v["parentSpanId"] = json!(hex(parent));
    }
    if !span.links.is_empty() {
        v["links"] = span
            .links
            .iter()
            .map(|(t, s)| json!({ "traceId": hex(t), "spanId": hex(s) }))
            .collect();
    }
    if !span.status.1.is_empty() {
        v["status"]["message"] = json!(span.status.1);
    }
    v
}

/// The OTLP/HTTP JSON body (`ExportTraceServiceRequest`) for `spans`: one resource
/// (`service.name`), one scope (`sample_controller`), the spans.
pub fn encode_request(service_name: &str, spans: &[FinishedSpan]) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {
                "attributes": [attribute_json("service.name", &AttrValue::Str(service_name.to_owned()))],
            },
            "scopeSpans": [{
                "scope": { "name": "sample_controller", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(span_json).collect::<Vec<_>>(),
            }],
        }],
    })
}

struct QueueInner {
    spans: Mutex<VecDeque<FinishedSpan>>,
    capacity: usize,
    batch: std::sync::atomic::AtomicUsize,
    notify: Notify,
    attached: AtomicBool,
    dropped: Counter,
    exported: Counter,
}

/// The bounded queue between [`OtlpLayer`] and the [`Exporter`]: a cheap handle to share.
#[derive(Clone)]
pub struct SpanQueue(Arc<QueueInner>);

impl std::fmt::Debug for SpanQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanQueue")
            .field("capacity", &self.0.capacity)
            .field("len", &self.len())
            .field("attached", &self.is_attached())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl SpanQueue {
    /// An empty queue holding at most `capacity` spans (at least 1).
    pub fn new(capacity: usize) -> Self {
        SpanQueue(Arc::new(QueueInner {
            spans: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            batch: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_EXPORT_BATCH_SIZE),
            notify: Notify::new(),
            attached: AtomicBool::new(false),
            dropped: Counter::default(),
            exported: Counter::default(),
        }))
    }

    /// The process's queue ([`DEFAULT_MAX_QUEUE_SIZE`]): the binary's layer and the manager's
    /// exporter meet here unless given another one.
    pub fn global() -> &'static SpanQueue {
        static GLOBAL: OnceLock<SpanQueue> = OnceLock::new();
        GLOBAL.get_or_init(|| SpanQueue::new(DEFAULT_MAX_QUEUE_SIZE))
    }

    /// Whether an exporter takes from this queue (spans are recorded only then).
    pub fn is_attached(&self) -> bool {
        self.0.attached.load(Ordering::Acquire)
    }

    /// Queues `span`, or drops and counts it when the queue is full. Never blocks.
    pub fn push(&self, span: FinishedSpan) {
        let len = {
            let mut q = lock(&self.0.spans);
            if q.len() >= self.0.capacity {
                drop(q);
                self.0.dropped.inc();
                return;
            }
            q.push_back(span);
            q.len()
        };
        if len >= self.0.batch.load(Ordering::Relaxed) {
            self.0.notify.notify_one();
        }
    }

    /// Takes up to `max` spans, oldest first.
    pub fn take(&self, max: usize) -> Vec<FinishedSpan> {
        let mut q = lock(&self.0.spans);
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// How many spans wait.
    pub fn len(&self) -> usize {
        lock(&self.0.spans).len()
    }

    /// Whether no span waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Spans dropped: the queue was full, or their batch could not be sent.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.get()
    }

    /// Spans the collector accepted.
    pub fn exported(&self) -> u64 {
        self.0.exported.get()
    }

    /// Registers `otlp_spans_exported_total` and `otlp_spans_dropped_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "otlp_spans_exported",
            "Spans sent to the OTLP endpoint and accepted",
            self.0.exported.clone(),
        );
        registry.register(
            "otlp_spans_dropped",
            "Spans dropped: the export queue was full, or the OTLP endpoint did not take them",
            self.0.dropped.clone(),
        );
    }
}

/// Whether a span goes to the exporter: the `sync` spans of [`crate::controller`] and the
/// `request` spans of [`sample_client_go::client::Api`], at any level. Use as the [`OtlpLayer`]'s
/// per-layer filter: `OtlpLayer::new(q).with_filter(filter_fn(otlp::span_filter))`.
pub fn span_filter(meta: &Metadata<'_>) -> bool {
    meta.is_span()
        && match meta.name() {
            "sync" => meta.target() == "sample_controller_runtime::controller",
            "request" => meta.target() == "sample_client_go::client::api",
            _ => false,
        }
}

/// The [`OtlpLayer`] with its [`span_filter`], ready for `registry().with(...)`.
pub fn layer<S>(queue: SpanQueue) -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    OtlpLayer::new(queue).with_filter(tracing_subscriber::filter::filter_fn(span_filter))
}

/// A span being recorded (kept in the span's extensions until it closes).
struct Building {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_span_id: Option<[u8; 8]>,
    start_unix_nano: u64,
    attributes: Vec<(String, AttrValue)>,
}

struct AttrVisitor<'a>(&'a mut Vec<(String, AttrValue)>);

impl AttrVisitor<'_> {
    fn set(&mut self, field: &Field, value: AttrValue) {
        let name = field.name();
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }
}

impl Visit for AttrVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, AttrValue::Str(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, AttrValue::Str(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, AttrValue::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(
            field,
            AttrValue::Int(i64::try_from(value).unwrap_or(i64::MAX)),
        );
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, AttrValue::Bool(value));
    }
}

fn unix_nanos_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn random_nonzero<const N: usize>() -> [u8; N] {
    loop {
        let mut b = [0u8; N];
        b.iter_mut().for_each(|x| *x = fastrand::u8(..));
        if b.iter().any(|x| *x != 0) {
            return b;
        }
    }
}

/// The status of a finished span from its attributes: error for a sync whose `result` is
/// `error` or `panic`, and for a request with `code >= 500` or an `error` (no answer).
pub fn status_of(name: &str, attributes: &[(String, AttrValue)]) -> (SpanStatus, String) {
    let get = |k: &str| attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    match name {
        "sync" => match get("result") {
            Some(AttrValue::Str(r)) if r == "error" || r == "panic" => {
                (SpanStatus::Error, format!("sync ended with {r}"))
            }
            _ => (SpanStatus::Unset, String::new()),
        },
        _ => {
            if let Some(AttrValue::Str(e)) = get("error") {
                return (SpanStatus::Error, e.clone());
            }
            match get("code") {
                Some(AttrValue::Int(c)) if *c >= 500 => (SpanStatus::Error, format!("HTTP {c}")),
                _ => (SpanStatus::Unset, String::new()),
            }
        }
    }
}

/// The `tracing` layer that turns closed spans into [`FinishedSpan`]s on a [`SpanQueue`].
/// Install it with [`span_filter`] (see [`layer`]); it records nothing while no exporter is
/// attached to its queue.
#[derive(Clone, Debug)]
pub struct OtlpLayer {
    queue: SpanQueue,
}

impl OtlpLayer {
    /// A layer feeding `queue`.
    pub fn new(queue: SpanQueue) -> Self {
        OtlpLayer { queue }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for OtlpLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !self.queue.is_attached() {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Building>()
                .map(|b| (b.trace_id, b.span_id))
        });
        let (trace_id, parent_span_id) = match parent {
            Some((t, s)) => (t, Some(s)),
            None => (random_nonzero::<16>(), None),
        };
        let mut attributes = Vec::new();
        attrs.record(&mut AttrVisitor(&mut attributes));
        span.extensions_mut().insert(Building {
            trace_id,
            span_id: random_nonzero::<8>(),
            parent_span_id,
            start_unix_nano: unix_nanos_now(),
            attributes,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(b) = ext.get_mut::<Building>() {
            values.record(&mut AttrVisitor(&mut b.attributes));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(b) = span.extensions_mut().remove::<Building>() else {
            return;
        };
        let name = span.name();
        let kind = if name == "sync" {
            SpanKind::Internal
        } else {
            SpanKind::Client
        };
        let status = status_of(name, &b.attributes);
        // The `links` field is not an attribute: it becomes the span's links.
        let mut attributes = b.attributes;
        let mut links = Vec::new();
        if let Some(at) = attributes.iter().position(|(k, _)| k == "links")
            && let (_, AttrValue::Str(list)) = attributes.remove(at)
        {
            links = list.split(',').filter_map(parse_traceparent).collect();
        }
        self.queue.push(FinishedSpan {
            name: name.to_owned(),
            trace_id: b.trace_id,
            span_id: b.span_id,
            parent_span_id: b.parent_span_id,
            kind,
            start_unix_nano: b.start_unix_nano,
            end_unix_nano: unix_nanos_now().max(b.start_unix_nano),
            attributes,
            status,
            links,
        });
    }
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// Whether the OTLP specification lets a client retry after this answer.
pub fn is_retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 502 | 503 | 504)
}

/// A `Retry-After` in seconds (the HTTP-date form falls back to the backoff), at most
/// [`MAX_RETRY_AFTER`].
pub fn retry_after(value: Option<&http::HeaderValue>) -> Option<Duration> {
    let secs: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// The backoff before attempt `attempt + 1` (attempt counts from 1): 1 s doubling to 5 s,
/// with up to 20% jitter.
pub fn backoff(attempt: u32) -> Duration {
    let base = INITIAL_BACKOFF
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    base.mul_f64(1.0 + fastrand::f64() * 0.2)
}

/// The exporter task: batches from a [`SpanQueue`] and POSTs them (see the module docs).
pub struct Exporter {
    config: OtlpConfig,
    queue: SpanQueue,
    client: HttpClient,
    url: Uri,
    /// The spans of the batch being sent (counted as dropped if a shutdown cuts it off).
    in_flight: std::sync::atomic::AtomicU64,
}

/// The running exporter: stop it with the token given to [`Exporter::spawn`], then
/// [`ExporterHandle::join`] (which waits for the final flush).
pub struct ExporterHandle(JoinHandle<()>);

impl ExporterHandle {
    /// Waits for the exporter to finish its final flush.
    pub async fn join(self) {
        if let Err(e) = self.0.await {
            tracing::warn!(error = %e, "the OTLP exporter task failed");
        }
    }
}

impl Exporter {
    /// An exporter for `config` taking from `queue`; HTTPS endpoints are verified against the
    /// system's roots (the client's rustls configuration).
    pub fn new(config: OtlpConfig, queue: SpanQueue) -> Result<Self, String> {
        let url: Uri = config
            .traces_url()
            .parse()
            .map_err(|e| format!("OTLP endpoint {}: {e}", config.endpoint))?;
        let tls = sample_client_go::client::transport::rustls_client_config(&Default::default())
            .map_err(|e| format!("OTLP exporter TLS: {e}"))?;
        // TCP_NODELAY, as Go's net package sets on every connection: a POST's headers and body
        // go out at once, not the body after the collector's delayed ACK.
        let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(90))
                .pool_timer(hyper_util::rt::TokioTimer::new())
                .build(https);
        Ok(Exporter {
            config,
            queue,
            client,
            url,
            in_flight: Default::default(),
        })
    }

    /// Attaches to the queue and runs until `stop` is cancelled, then flushes within
    /// [`SHUTDOWN_FLUSH_DEADLINE`].
    pub fn spawn(self, stop: CancellationToken) -> ExporterHandle {
        self.queue
            .0
            .batch
            .store(self.config.max_export_batch_size.max(1), Ordering::Relaxed);
        self.queue.0.attached.store(true, Ordering::Release);
        ExporterHandle(tokio::spawn(self.run(stop)))
    }

    async fn run(self, stop: CancellationToken) {
        let batch = self.config.max_export_batch_size.max(1);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.config.scheduled_delay) => {}
                _ = self.queue.0.notify.notified() => {}
            }
            self.send_queued(batch, &stop).await;
        }
        self.queue.0.attached.store(false, Ordering::Release);
        // The final flush: one attempt per batch (no retry once stopping), within the deadline.
        let flush =
            tokio::time::timeout(SHUTDOWN_FLUSH_DEADLINE, self.send_queued(batch, &stop)).await;
        let left =
            self.queue.take(usize::MAX).len() as u64 + self.in_flight.swap(0, Ordering::Relaxed);
        if flush.is_err() || left > 0 {
            self.queue.0.dropped.inc_by(left);
            tracing::warn!(
                dropped = left,
                "OTLP: spans still queued at the shutdown deadline were dropped"
            );
        }
    }

    async fn send_queued(&self, batch: usize, stop: &CancellationToken) {
        loop {
            let spans = self.queue.take(batch);
            if spans.is_empty() {
                return;
            }
            let n = spans.len() as u64;
            self.in_flight.store(n, Ordering::Relaxed);
            let sent = self.export(&spans, stop).await;
            self.in_flight.store(0, Ordering::Relaxed);
            match sent {
                Ok(()) => {
                    self.queue.0.exported.inc_by(n);
                }
                Err(e) => {
                    self.queue.0.dropped.inc_by(n);
                    tracing::warn!(spans = n, endpoint = %self.url, error = %e, "OTLP: export failed, spans dropped");
                }
            }
        }
    }

    /// One batch: POST, retried on 429/502/503/504 and connection errors, until `stop`.
    async fn export(&self, spans: &[FinishedSpan], stop: &CancellationToken) -> Result<(), String> {
        let body = Bytes::from(
            serde_json::to_vec(&encode_request(&self.config.service_name, spans))
                .map_err(|e| format!("encoding spans: {e}"))?,
        );
        let mut attempt = 0;
        loop {
            attempt += 1;
            let wait = match self.post(body.clone()).await {
                Ok((status, _)) if status.is_success() => return Ok(()),
                Ok((status, after)) if is_retryable(status) => {
                    if attempt >= MAX_ATTEMPTS || stop.is_cancelled() {
                        return Err(format!("HTTP {status} after {attempt} attempts"));
                    }
                    after.unwrap_or_else(|| backoff(attempt))
                }
                Ok((status, _)) => return Err(format!("HTTP {status} (not retryable)")),
                Err(e) => {
                    if attempt >= MAX_ATTEMPTS || stop.is_cancelled() {
                        return Err(format!("{e} after {attempt} attempts"));
                    }
                    backoff(attempt)
                }
            };
            tracing::debug!(
                attempt,
                wait_ms = wait.as_millis() as u64,
                "OTLP: retrying export"
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return Err(format!("stopping after {attempt} attempts")),
            }
        }
    }

    async fn post(&self, body: Bytes) -> Result<(StatusCode, Option<Duration>), String> {
        let req = Request::builder()
            .method(Method::POST)
            .uri(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(
                http::header::USER_AGENT,
                sample_client_go::client::config::default_user_agent(),
            )
            .body(Full::new(body))
            .map_err(|e| format!("building the request: {e}"))?;
        let answer = tokio::time::timeout(self.config.export_timeout, async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("POST {}: {e}", self.url))?;
            let status = resp.status();
            let after = retry_after(resp.headers().get(http::header::RETRY_AFTER));
            // The body (a partial-success report, or an error Status) is read, bounded, and
            // dropped: the status code decides.
            let body = http_body_util::Limited::new(resp.into_body(), 64 * 1024);
            let _ = body.collect().await;
            Ok::<_, String>((status, after))
        })
        .await;
        match answer {
            Ok(r) => r,
            Err(_) => Err(format!(
                "POST {}: no answer within {:?}",
                self.url, self.config.export_timeout
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(parent: Option<[u8; 8]>) -> FinishedSpan {
        FinishedSpan {
            name: "request".into(),
            trace_id: [0xab; 16],
            span_id: [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08],
            parent_span_id: parent,
            kind: SpanKind::Client,
            start_unix_nano: 1_700_000_000_000_000_001,
            end_unix_nano: 1_700_000_000_500_000_000,
            attributes: vec![
                ("verb".into(), AttrValue::Str("POST".into())),
                ("code".into(), AttrValue::Int(201)),
                ("requeue".into(), AttrValue::Bool(false)),
            ],
            status: (SpanStatus::Unset, String::new()),
            links: Vec::new(),
        }
    }

    #[test]
    fn a_traceparent_is_read_as_the_w3c_specification_says() {
        let (t, s) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(hex(&t), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&s), "00f067aa0ba902b7");
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "not a traceparent",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        let mut linked = span(None);
        linked.links.push((t, s));
        let v = span_json(&linked);
        assert_eq!(
            v["links"],
            json!([{"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "00f067aa0ba902b7"}])
        );
    }

    #[test]
    fn encodes_the_official_json_shape() {
        let v = encode_request("svc", &[span(Some([0xff, 0, 0, 0, 0, 0, 0, 0x10]))]);
        let rs = &v["resourceSpans"][0];
        assert_eq!(
            rs["resource"]["attributes"][0],
            json!({"key": "service.name", "value": {"stringValue": "svc"}})
        );
        assert_eq!(rs["scopeSpans"][0]["scope"]["name"], "sample_controller");
        let s = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "abababababababababababababababab");
        assert_eq!(s["spanId"], "0102030405060708");
        assert_eq!(s["parentSpanId"], "ff00000000000010");
        assert_eq!(s["name"], "request");
        assert_eq!(s["kind"], 3);
        assert_eq!(s["startTimeUnixNano"], "1700000000000000001");
        assert_eq!(s["endTimeUnixNano"], "1700000000500000000");
        assert_eq!(
            s["attributes"],
            json!([
                {"key": "verb", "value": {"stringValue": "POST"}},
                {"key": "code", "value": {"intValue": "201"}},
                {"key": "requeue", "value": {"boolValue": false}},
            ])
        );
        assert_eq!(s["status"], json!({"code": 0}));
    }

    #[test]
    fn a_root_span_has_no_parent_field_and_errors_carry_a_message() {
        let mut root = span(None);
        root.status = (SpanStatus::Error, "HTTP 503".into());
        let v = encode_request("svc", &[root]);
        let s = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert!(s.get("parentSpanId").is_none(), "{s}");
        assert_eq!(s["status"], json!({"code": 2, "message": "HTTP 503"}));
    }

    #[test]
    fn status_follows_result_and_code() {
        let a = |k: &str, v: AttrValue| vec![(k.to_owned(), v)];
        assert_eq!(
            status_of("sync", &a("result", AttrValue::Str("error".into()))).0,
            SpanStatus::Error
        );
        assert_eq!(
            status_of("sync", &a("result", AttrValue::Str("success".into()))).0,
            SpanStatus::Unset
        );
        assert_eq!(
            status_of("request", &a("code", AttrValue::Int(503))).0,
            SpanStatus::Error
        );
        assert_eq!(
            status_of("request", &a("code", AttrValue::Int(404))).0,
            SpanStatus::Unset
        );
        assert_eq!(
            status_of("request", &a("error", AttrValue::Str("refused".into()))),
            (SpanStatus::Error, "refused".into())
        );
    }

    #[test]
    fn endpoints_are_checked_and_the_traces_path_appended() {
        for (given, url) in [
            ("http://localhost:4318", "http://localhost:4318/v1/traces"),
            ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
            (
                "https://otel.example/base/",
                "https://otel.example/base/v1/traces",
            ),
        ] {
            let c = OtlpConfig::new(parse_endpoint(given).unwrap(), "s");
            assert_eq!(c.traces_url(), url);
        }
        for bad in ["localhost:4318", "ftp://x", "http://x/?a=b", "not a url"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_spec_retryable_codes_are_retried() {
        for c in [429, 502, 503, 504] {
            assert!(is_retryable(StatusCode::from_u16(c).unwrap()), "{c}");
        }
        for c in [400, 401, 404, 408, 500, 501] {
            assert!(!is_retryable(StatusCode::from_u16(c).unwrap()), "{c}");
        }
        let h = http::HeaderValue::from_static("3");
        assert_eq!(retry_after(Some(&h)), Some(Duration::from_secs(3)));
        let h = http::HeaderValue::from_static("3600");
        assert_eq!(retry_after(Some(&h)), Some(MAX_RETRY_AFTER));
        let h = http::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(retry_after(Some(&h)), None);
        assert!(backoff(1) >= INITIAL_BACKOFF && backoff(1) <= INITIAL_BACKOFF.mul_f64(1.2));
        assert!(backoff(10) <= MAX_BACKOFF.mul_f64(1.2) && backoff(10) >= MAX_BACKOFF);
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let q = SpanQueue::new(2);
        for _ in 0..5 {
            q.push(span(None));
        }
        assert_eq!(q.len(), 2);
        assert_eq!(q.dropped(), 3);
        assert_eq!(q.take(10).len(), 2);
        assert!(q.is_empty());
    }
}
