//! # The manager's webhook server (admission and conversion), controller-runtime style
//!
//! An admission webhook is an HTTPS endpoint the API server calls on every matching write,
//! before anything is stored (see the embedded server's `admission` module for the caller's
//! side); a conversion webhook is one it calls to change an object's API version. This module
//! is the callee: the manager's `pkg/webhook` of controller-runtime.
//!
//! ```text
//! kube-apiserver ──POST AdmissionReview──> :9443 (TLS, tls.crt/tls.key from --webhook-cert-dir)
//!                                           ├─ /validate-at → at::validate → allowed / denied + causes
//!                                           ├─ /mutate-at   → at::default  → allowed + JSONPatch
//!                                           └─ /mutate-shard → shard::assign → allowed + the shard label
//!                <──AdmissionReview{response}──
//! kube-apiserver ──POST ConversionReview─> :9443
//!                                           └─ /convert     → convert::answer → convertedObjects
//!                <──ConversionReview{response}──
//! ```
//!
//! * **Listener** (`--webhook-bind-address`, default `:9443`, `0` turns it off): HTTPS only,
//!   HTTP/1.1 (controller-runtime turns HTTP/2 off by default since CVE-2023-44487), at most
//!   1,024 connections, 10 s for the TLS handshake and the request headers.
//! * **Certificate** (`--webhook-cert-dir`, default `/tmp/k8s-webhook-server/serving-certs`,
//!   files `tls.crt` and `tls.key`): read at start, and re-read whenever either file's
//!   modification time or size changes, checked at every TLS handshake ([`CertWatcher`]). So a
//!   certificate rotated on disk (cert-manager renewing the Secret a pod mounts) is served to the
//!   very next connection, without a restart; a half-written pair that does not load keeps the
//!   previous certificate in service (logged). controller-runtime's `certwatcher` does the same
//!   with fsnotify plus a 10 s poll.
//! * **Requests**: `POST` with `Content-Type: application/json`, at most [`MAX_REQUEST_BYTES`]
//!   (controller-runtime's 7 MiB); anything else is answered with an `AdmissionReview` whose
//!   response is a 400 error, as controller-runtime's `admission.Webhook` does, or with 404 /
//!   405 / 413 over HTTP when no review can be answered at all. The answer names the same
//!   AdmissionReview version as the request (`v1` or `v1beta1`) and echoes its `uid`.
//! * **Metrics** (controller-runtime's names, label `webhook` = the path):
//!   `controller_runtime_webhook_requests_total{webhook,code}` (the HTTP status code of the
//!   answer), `controller_runtime_webhook_latency_seconds{webhook}` (Prometheus' default
//!   buckets), `controller_runtime_webhook_requests_in_flight{webhook}`.
//!
//! The routes come from the controllers registered with the manager
//! ([`Registration::with_webhook`](crate::manager::Registration::with_webhook): the At's
//! handlers and conversion endpoint are `sample_operators::webhooks`), plus the sharder's
//! (assignment on create) in [`shard`]; all share the listener, certificate, limits
//! and metrics above (label `webhook="/convert"` for conversions, whose `code` is 200, or 400
//! for a body that is not a ConversionReview).

pub mod shard;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use apimachinery::serving::{ConnectionGate, accept_connections};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::health::ServerHandle;

/// The largest admission request read (controller-runtime's `maxRequestSize`, 7 MiB).
pub const MAX_REQUEST_BYTES: usize = 7 * 1024 * 1024;

/// The default of `--webhook-cert-dir` (controller-runtime's).
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// The default of `--webhook-bind-address`.
pub const DEFAULT_BIND_ADDRESS: &str = ":9443";

/// Where and with which certificate the webhook server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookServerConfig {
    /// `--webhook-bind-address`.
    pub addr: SocketAddr,
    /// `--webhook-cert-dir`: `tls.crt` (the chain, leaf first) and `tls.key` (PKCS#8, PKCS#1
    /// or SEC1 PEM).
    pub cert_dir: PathBuf,
}

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The certificate pair could not be loaded.
    #[error("webhook certificate in {dir}: {message}")]
    Certificate {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The address could not be bound.
    #[error("binding the webhook server on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

// ---------------------------------------------------------------------------------------------
// The certificate, reloaded when its files change.

/// A file's identity for change detection: modification time and length.
type Stamp = (Option<SystemTime>, u64);

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .map(|m| (m.modified().ok(), m.len()))
        .unwrap_or((None, 0))
}

/// Serves the certificate in `tls.crt` / `tls.key`, reloading it when either file changes
/// (checked at each TLS handshake: two `stat` calls).
#[derive(Debug)]
pub struct CertWatcher {
    dir: PathBuf,
    current: Mutex<(Stamp, Stamp, Arc<CertifiedKey>)>,
}

impl CertWatcher {
    /// Loads the pair from `dir`; fails if it cannot be used.
    pub fn new(dir: &Path) -> Result<Self, WebhookError> {
        let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let stamps = (stamp(&crt), stamp(&key));
        let certified = load_pair(&crt, &key).map_err(|message| WebhookError::Certificate {
            dir: dir.to_owned(),
            message,
        })?;
        Ok(CertWatcher {
            dir: dir.to_owned(),
            current: Mutex::new((stamps.0, stamps.1, Arc::new(certified))),
        })
    }

    /// The certificate to serve now, reloaded first if the files changed.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        let (crt, key) = (self.dir.join("tls.crt"), self.dir.join("tls.key"));
        let (sc, sk) = (stamp(&crt), stamp(&key));
        let mut cur = self.current.lock().ok()?;
        if cur.0 != sc || cur.1 != sk {
            match load_pair(&crt, &key) {
                Ok(c) => {
                    tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded");
                    *cur = (sc, sk, Arc::new(c));
                }
                // Keep serving the old one; a rotation in progress may be half written. The
                // stamps are not updated, so the next handshake tries again.
                Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e,
                    "webhook certificate changed but cannot be loaded; serving the previous one"),
            }
        }
        Some(cur.2.clone())
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

fn load_pair(crt: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(crt)
        .map_err(|e| format!("{}: {e}", crt.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", crt.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", crt.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| format!("unusable private key: {e}"))?;
    let certified = CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("tls.key does not belong to tls.crt: {e}"))?;
    Ok(certified)
}

// ---------------------------------------------------------------------------------------------
// Metrics.

type Labels = Vec<(String, String)>;

/// Prometheus' default histogram buckets (`prometheus.DefBuckets`), which controller-runtime's
/// webhook latency histogram uses.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// controller-runtime's webhook metrics.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    total: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    in_flight: Family<Labels, Gauge>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        WebhookMetrics {
            total: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
        }
    }
}

impl WebhookMetrics {
    /// Registers the three families.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code.",
            self.total.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            self.latency.clone(),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            self.in_flight.clone(),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Admission reviews.

/// What a handler decides.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Allowed, with JSON patch operations (empty: unchanged) and warnings.
    Allow {
        /// RFC 6902 operations against the request's object.
        patch: Vec<Value>,
        /// `response.warnings`.
        warnings: Vec<String>,
    },
    /// Denied, with the `metav1.Status` the API server passes on.
    Deny(Value),
}

impl Decision {
    /// Allowed as is.
    pub fn allow() -> Self {
        Decision::Allow {
            patch: vec![],
            warnings: vec![],
        }
    }
}

/// An admission endpoint: a path and the function deciding its reviews' `request`s.
pub type Handler = fn(&Value) -> Decision;

/// A conversion endpoint: answers one ConversionReview body, given its `Content-Type`.
pub type ConvertHandler = fn(Option<&str>, &[u8]) -> ConvertAnswer;
/// The result of one review, before it is written to the wire.
#[derive(Debug, PartialEq)]
pub enum ConvertAnswer {
    /// A ConversionReview with a response (success or failure): HTTP 200.
    Review(Value),
    /// No review can be answered: HTTP 400 with this text.
    BadRequest(String),
}

impl ConvertAnswer {
    /// The HTTP status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            ConvertAnswer::Review(_) => StatusCode::OK,
            ConvertAnswer::BadRequest(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// What a path serves.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// AdmissionReviews, decided by the handler.
    Admission(Handler),
    /// ConversionReviews, answered by the handler.
    Conversion(ConvertHandler),
}

/// The routes this crate serves itself: `/mutate-shard` ([`shard::assign`]). The manager adds
/// the routes of its registered controllers
/// ([`Registration::with_webhook`](crate::manager::Registration::with_webhook)).
pub const BUILTIN_ROUTES: &[(&str, Route)] =
    &[("/mutate-shard", Route::Admission(shard::assign as Handler))];

/// The paths a webhook server serves, with their handlers.
pub type Routes = Arc<Vec<(&'static str, Route)>>;

/// An `AdmissionReview` answer for `request` with `decision`, in the request's version.
pub fn review_response(version: &str, uid: &str, decision: Decision) -> Value {
    let mut response = json!({"uid": uid});
    match decision {
        Decision::Allow { patch, warnings } => {
            response["allowed"] = json!(true);
            if !patch.is_empty() {
                use base64::Engine;
                let text = Value::Array(patch).to_string();
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
            }
            if !warnings.is_empty() {
                response["warnings"] = json!(warnings);
            }
        }
        Decision::Deny(status) => {
            response["allowed"] = json!(false);
            response["status"] = status;
        }
    }
    json!({"apiVersion": version, "kind": "AdmissionReview", "response": response})
}

/// controller-runtime's `admission.Errored(400, err)`: a review that is refused because the
/// request itself is malformed.
fn errored(version: &str, uid: &str, message: String) -> Value {
    review_response(
        version,
        uid,
        Decision::Deny(json!({"code": 400, "message": message, "status": "Failure"})),
    )
}

/// Answers one HTTP request (a review) with `handler`: the HTTP status and body.
pub fn answer(handler: Handler, content_type: Option<&str>, body: &[u8]) -> (StatusCode, Value) {
    const V1: &str = "admission.k8s.io/v1";
    if content_type.map(|c| c.split(';').next().unwrap_or_default().trim())
        != Some("application/json")
    {
        return (
            StatusCode::OK,
            errored(
                V1,
                "",
                format!(
                    "contentType={}, expected application/json",
                    content_type.unwrap_or_default()
                ),
            ),
        );
    }
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::OK,
                errored(V1, "", format!("couldn't decode the AdmissionReview: {e}")),
            );
        }
    };
    let version = match review["apiVersion"].as_str() {
        Some(v @ ("admission.k8s.io/v1" | "admission.k8s.io/v1beta1")) => v.to_owned(),
        other => {
            return (
                StatusCode::OK,
                errored(
                    V1,
                    "",
                    format!("unsupported AdmissionReview apiVersion {other:?}"),
                ),
            );
        }
    };
    let request = &review["request"];
    let Some(uid) = request["uid"].as_str() else {
        return (
            StatusCode::OK,
            errored(&version, "", "got an empty AdmissionRequest".into()),
        );
    };
    (
        StatusCode::OK,
        review_response(&version, uid, handler(request)),
    )
}

// ---------------------------------------------------------------------------------------------
// The server.

/// Starts the webhook server: binds `config.addr`, loads the certificate, and serves
/// `routes` until `cancel` fires.
pub async fn serve(
    config: &WebhookServerConfig,
    routes: Routes,
    metrics: WebhookMetrics,
    cancel: CancellationToken,
) -> Result<ServerHandle, WebhookError> {
    apimachinery::crypto::install_provider();
    let watcher = Arc::new(CertWatcher::new(&config.cert_dir)?);
    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(watcher);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener =
        apimachinery::serving::bind(config.addr).map_err(|source| WebhookError::Bind {
            addr: config.addr,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| WebhookError::Bind {
        addr: config.addr,
        source,
    })?;
    let stop = cancel.clone();
    let task = tokio::spawn(async move {
        let gate = ConnectionGate::new(1024);
        let tracker = tokio_util::task::TaskTracker::new();
        let accepting = stop.cancelled();
        accept_connections("webhook", &listener, &gate, accepting, |tcp, _, slot| {
            let (acceptor, metrics, stop) = (acceptor.clone(), metrics.clone(), stop.clone());
            let routes = Arc::clone(&routes);
            tracker.spawn(async move {
                let _slot = slot;
                serve_connection(tcp, acceptor, routes, metrics, stop).await;
            });
        })
        .await;
        tracker.close();
        tracker.wait().await;
    });
    Ok(ServerHandle::new(local_addr, cancel, task))
}

/// One accepted connection: the TLS handshake (10 s at most), then HTTP/1.1 until the client
/// closes or `stop` fires (then a graceful shutdown of up to 5 s).
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    routes: Routes,
    metrics: WebhookMetrics,
    stop: CancellationToken,
) {
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "webhook server: TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let svc = hyper::service::service_fn(move |req| {
        let (metrics, routes) = (metrics.clone(), Arc::clone(&routes));
        async move { Ok::<_, std::convert::Infallible>(handle(req, &routes, &metrics).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let conn = builder.serve_connection(TokioIo::new(tls), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    routes: &[(&'static str, Route)],
    metrics: &WebhookMetrics,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let Some((_, route)) = routes.iter().find(|(p, _)| *p == path) else {
        return plain(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    let webhook: Labels = vec![("webhook".into(), path.clone())];
    let in_flight = metrics.in_flight.get_or_create(&webhook).clone();
    in_flight.inc();
    let started = Instant::now();
    let (status, body) = if req.method() != http::Method::POST {
        (StatusCode::METHOD_NOT_ALLOWED, None)
    } else {
        let content_type = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
            .collect()
            .await
        {
            Ok(b) => match route {
                Route::Admission(handler) => {
                    let (s, v) = answer(*handler, content_type.as_deref(), &b.to_bytes());
                    (s, Some(Ok(v)))
                }
                Route::Conversion(convert) => {
                    match convert(content_type.as_deref(), &b.to_bytes()) {
                        ConvertAnswer::Review(v) => (StatusCode::OK, Some(Ok(v))),
                        ConvertAnswer::BadRequest(text) => {
                            (StatusCode::BAD_REQUEST, Some(Err(text)))
                        }
                    }
                }
            },
            Err(_) => (StatusCode::PAYLOAD_TOO_LARGE, None),
        }
    };
    metrics
        .latency
        .get_or_create(&webhook)
        .observe(started.elapsed().as_secs_f64());
    let mut labels = webhook.clone();
    labels.push(("code".into(), status.as_u16().to_string()));
    metrics.total.get_or_create(&labels).inc();
    in_flight.dec();
    match body {
        Some(Err(text)) => plain(status, &format!("{text}\n")),
        Some(Ok(v)) => Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(v.to_string())))
            .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "")),
        None if status == StatusCode::PAYLOAD_TOO_LARGE => plain(
            status,
            &format!("request body larger than {MAX_REQUEST_BYTES} bytes\n"),
        ),
        None => plain(status, "only POST is served\n"),
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
    *r.status_mut() = status;
    r
}
