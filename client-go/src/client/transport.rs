//! The transport: one pooled HTTP client per [`Config`] that authenticates, throttles, retries
//! and counts every request (client-go's `rest.RESTClient` and `rest.Request`).
//!
//! This file holds [`Client`] and the loop every request goes through; each stage it calls
//! lives in a file of its own beside it:
//!
//! ```text
//! Api<K> --http::Request<Bytes>--> Client::send
//!     throttle (not for watches) -> auth header -> hyper pool -> TLS (rustls) -> API server
//!     <- 429/5xx with Retry-After: sleep, take a new token, resend (at most 10 times)
//!     <- 401 and refreshable credentials: refresh once, resend
//!     <- reset / probable EOF / GOAWAY on GET: wait 1 s, resend (same budget of 10)
//! ```
//!
//! * [`super::throttle`]: the client-side QPS/burst bucket, and whether it applies at all
//!   (following the server's API Priority and Fairness);
//! * [`super::auth`]: where the `Authorization` header (or an exec plugin's client certificate)
//!   comes from;
//! * [`super::connect`]: the hyper connection pool, rustls, the `CONNECT` proxy;
//! * [`super::retry`]: which answers and failures are sent again, and after how long;
//! * [`super::request_metrics`]: what client-go's `rest_client_*` metrics count.
//!
//! * **Timeouts.** Connect: [`Config::connect_timeout`] (30 s). A non-watch request (headers and
//!   body, retries included) is bounded by [`Config::timeout`], counted from the moment its first
//!   throttle token is granted. Watches have no client timeout; the server ends them after their
//!   `timeoutSeconds`.
//! * **Clones.** A [`Client`] is an `Arc`: every clone and every `Api<K>` built from it share
//!   the connection pool, the credentials, the metrics and the throttle (unless
//!   [`Client::with_own_throttle`] gave a handle a bucket of its own).
//! * **Futures that stay small.** An `async fn`'s future holds, inline, the state of every
//!   future it awaits; a request's (the attempts loop, the throttle's wait, the timeout, the
//!   body being read) is about 4 KiB, and every caller up the chain used to carry it: an
//!   `Api::create` future was 5.3 KiB, an At sync's 19.5 KiB, and each of a controller's 32
//!   workers and a sink's 64 event lanes held one whole, idle or not. [`Client::request_raw`]
//!   and [`Client::send`] therefore box their state (one allocation per request, next to the
//!   request's own headers and body), and so do the worker loop (the sync handler's future)
//!   and the event lanes (the write): what is idle holds a pointer. `Api::create` is now
//!   1.3 KiB, and an At sync 4.7 KiB (its plan's pod boxed too: a `Pod` is 2,176 bytes
//!   inline). See docs/13-performance.md.
//!
//! The types that used to be defined here ([`Throttle`], [`ThrottleDecision`],
//! [`ClientMetrics`], [`rustls_client_config`], ...) are re-exported, so
//! `client::transport::X` paths keep working.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde::de::DeserializeOwned;

use super::auth::AuthProvider;
use super::config::{Config, Secret, TlsConfig};
use super::connect::{HyperClient, build_http_client};
use super::error::error_chain;
use super::request_metrics::{RequestTimer, host_label};
use super::retry::{CONNECTION_LOST_RETRY_AFTER, retry_after, retryable_failure};
use super::throttle::has_flow_control_headers;
use super::watch::{DEFAULT_MAX_LINE, WatchDecoder, WatchStream, decode_stream_with};
use super::{Error, Result};

pub use super::auth::TOKEN_FILE_REFRESH;
pub use super::connect::{Connector, rustls_client_config};
pub use super::request_metrics::{
    ClientMetrics, LATENCY_BUCKETS, LatencyHistogram, MetricsSnapshot,
};
pub use super::throttle::{FLOW_CONTROL_HEADERS, Throttle, ThrottleDecision, TokioClock};

/// A handle to one API server: cheap to clone (an `Arc` inside), safe to share between tasks.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The configured bucket (`None`: `qps <= 0`); with `follow_server`, only used while the
    /// decision in `metrics` says it applies. Clones share it; [`Client::with_own_throttle`]
    /// gives a handle a bucket of its own.
    throttle: Option<Arc<Throttle>>,
}

struct Inner {
    base: Uri,
    default_namespace: String,
    tls: TlsConfig,
    proxy_url: Option<Uri>,
    connect_timeout: Duration,
    timeout: Option<Duration>,
    max_retries: u32,
    user_agent: HeaderValue,
    http: RwLock<HttpState>,
    auth: AuthProvider,
    /// [`Config::follow_server_flow_control`].
    follow_server: bool,
    metrics: Arc<ClientMetrics>,
}

struct HttpState {
    /// The client certificate from an exec plugin the pool was built with, if any.
    exec_identity: Option<Vec<u8>>,
    client: HyperClient,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.base)
            .field("default_namespace", &self.inner.default_namespace)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds the connection pool, TLS configuration, throttle and credential source for
    /// `config`. No connection is opened yet.
    ///
    /// Errors: unusable TLS material (a CA or client certificate that does not parse, a key that
    /// does not match), a CA together with `insecure_skip_tls_verify`, a bad user agent.
    pub fn new(config: Config) -> Result<Client> {
        if config.tls.insecure_skip_tls_verify && config.tls.ca_pem.is_some() {
            return Err(Error::Config(
                "specifying a root certificates file with the insecure flag is not allowed".into(),
            ));
        }
        if config.tls.insecure_skip_tls_verify && config.is_https() {
            tracing::warn!(server = %config.server, "insecure-skip-tls-verify is set: the server's certificate is not verified");
        }
        let user_agent = HeaderValue::from_str(&config.user_agent)
            .map_err(|e| Error::Config(format!("user agent {:?}: {e}", config.user_agent)))?;
        let client = build_http_client(
            config.is_https(),
            &config.tls,
            config.proxy_url.as_ref(),
            config.connect_timeout,
        )?;
        let throttle = Throttle::new(config.qps, config.burst);
        let auth = AuthProvider::new(&config)?;
        let metrics = Arc::new(ClientMetrics::new(host_label(&config.server)));
        let decision = match (&throttle, config.follow_server_flow_control) {
            (Some(_), true) => ThrottleDecision::Undecided,
            (Some(_), false) => ThrottleDecision::Configured,
            (None, _) => ThrottleDecision::Disabled,
        };
        metrics.set_throttle_decision(decision);
        Ok(Client {
            inner: Arc::new(Inner {
                base: config.server,
                default_namespace: config.default_namespace,
                tls: config.tls,
                proxy_url: config.proxy_url,
                connect_timeout: config.connect_timeout,
                timeout: config.timeout,
                max_retries: config.max_retries,
                user_agent,
                http: RwLock::new(HttpState {
                    exec_identity: None,
                    client,
                }),
                auth,
                follow_server: config.follow_server_flow_control && throttle.is_some(),
                metrics,
            }),
            throttle: throttle.map(Arc::new),
        })
    }

    /// A client for the configuration found by the loading rules ([`Config::infer`] with no
    /// flags). The file reading runs on the blocking pool.
    pub async fn try_default() -> Result<Client> {
        let config =
            tokio::task::spawn_blocking(|| Config::infer(&super::config::ConfigOptions::default()))
                .await
                .map_err(|e| Error::Other(format!("loading configuration: {e}")))??;
        Client::new(config)
    }

    /// The namespace of `Api::default_namespaced`.
    pub fn default_namespace(&self) -> &str {
        &self.inner.default_namespace
    }

    /// The server's base URL.
    pub fn server(&self) -> &Uri {
        &self.inner.base
    }

    /// Request counters and latencies of this client (shared by all clones).
    pub fn metrics(&self) -> Arc<ClientMetrics> {
        self.inner.metrics.clone()
    }

    /// Sends a request whose URI is a path and query (`/api/v1/namespaces/x/pods?limit=5`) and
    /// returns the body of a 2xx answer; any other answer becomes an [`Error`] (a decoded
    /// `metav1.Status` when the body is one).
    pub async fn request_bytes(&self, req: Request<Bytes>) -> Result<Bytes> {
        let (status, body) = self.request_raw(req).await?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(Error::from_response(status.as_u16(), &body))
        }
    }

    /// `GET /version`: the server's build information (what `kubectl version` prints); a cheap
    /// way to check that the server is reachable and the credentials work.
    pub async fn apiserver_version(&self) -> Result<k8s_openapi::apimachinery::pkg::version::Info> {
        let req = Request::get("/version")
            .body(Bytes::new())
            .map_err(|e| Error::Other(format!("building GET /version: {e}")))?;
        self.request_json(req).await
    }

    /// Like [`Client::request_bytes`], but returns the status code and body of *any* answer
    /// (after retries); only transport failures are errors.
    ///
    /// As in client-go, the first wait for the throttle comes before the request timeout starts:
    /// a request queued behind others does not time out before it is even sent.
    ///
    /// The request's state (the attempts loop, the throttle's wait, the timeout, the body being
    /// read: about 4 KiB) lives in one allocation made per call, not inline in the caller's
    /// future: a caller that is idle (a worker waiting for a key, an event lane waiting for an
    /// event) or that awaits several requests one after the other then holds only a pointer.
    /// See the module doc, "Futures that stay small".
    pub async fn request_raw(&self, req: Request<Bytes>) -> Result<(StatusCode, Bytes)> {
        Box::pin(self.request_raw_inline(req)).await
    }

    /// [`Client::request_raw`], its state inline.
    async fn request_raw_inline(&self, req: Request<Bytes>) -> Result<(StatusCode, Bytes)> {
        let method = req.method().clone();
        let _timer = RequestTimer {
            metrics: &self.inner.metrics,
            method: method.clone(),
            started: tokio::time::Instant::now(),
        };
        self.throttle(&method, req.uri().path()).await;
        let timeout = self.inner.timeout;
        let fut = async {
            let resp = self.send_attempts(req, false, true).await?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Error::transport("reading response body", &e))?
                .to_bytes();
            Ok((status, body))
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, fut)
                .await
                .map_err(|_| Error::Timeout(format!("no complete answer within {t:?}")))?,
            None => fut.await,
        }
    }

    /// Sends a request and decodes a 2xx JSON answer as `T`.
    pub async fn request_json<T: DeserializeOwned>(&self, req: Request<Bytes>) -> Result<T> {
        let what = format!("response to {} {}", req.method(), req.uri().path());
        let body = self.request_bytes(req).await?;
        serde_json::from_slice(&body).map_err(|source| Error::Decode { what, source })
    }

    /// Opens a watch: no throttle, no client timeout, and the 200 body decoded line by line as
    /// [`super::WatchEvent`]s. A non-2xx answer is an error (410 → `is_gone`).
    pub async fn request_stream<K>(&self, req: Request<Bytes>) -> Result<WatchStream<K>>
    where
        K: DeserializeOwned + Send + 'static,
    {
        self.request_stream_with(req, WatchDecoder::with_max_line(DEFAULT_MAX_LINE))
            .await
    }

    /// [`Client::request_stream`], decoding with `decoder`.
    pub async fn request_stream_with<K>(
        &self,
        req: Request<Bytes>,
        decoder: WatchDecoder<K>,
    ) -> Result<WatchStream<K>>
    where
        K: DeserializeOwned + Send + 'static,
    {
        let resp = self.send(req, true).await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(Error::from_response(status.as_u16(), &body));
        }
        let body = http_body_util::BodyDataStream::new(resp.into_body());
        Ok(decode_stream_with(body, decoder))
    }

    /// The core loop: throttle, authenticate, send, retry. Returns the final response with its
    /// body unread. A watch (`watch = true`) skips the throttle on its first attempt.
    /// Its state lives in one allocation, as [`Client::request_raw`]'s does.
    pub async fn send(&self, req: Request<Bytes>, watch: bool) -> Result<Response<Incoming>> {
        Box::pin(self.send_attempts(req, watch, false)).await
    }

    /// [`Client::send`]; `first_throttled` says the caller already waited for the first
    /// attempt's token.
    async fn send_attempts(
        &self,
        req: Request<Bytes>,
        watch: bool,
        first_throttled: bool,
    ) -> Result<Response<Incoming>> {
        let inner = &*self.inner;
        let (parts, body) = req.into_parts();
        let uri = self.full_uri(&parts.uri)?;
        let method = parts.method.clone();
        let mut attempts = 0u32;
        let mut retries = 0u32;
        let mut refreshed_after_401 = false;
        loop {
            let first = attempts == 0;
            attempts += 1;
            if retries > 0 || !(watch || (first && first_throttled)) {
                self.throttle(&method, uri.path()).await;
            }
            let mut builder = Request::builder().method(method.clone()).uri(uri.clone());
            if let Some(h) = builder.headers_mut() {
                *h = parts.headers.clone();
                h.entry(USER_AGENT).or_insert(inner.user_agent.clone());
                h.entry(ACCEPT)
                    .or_insert(HeaderValue::from_static("application/json, */*"));
                if !body.is_empty() {
                    h.entry(CONTENT_TYPE)
                        .or_insert(HeaderValue::from_static("application/json"));
                }
            }
            let mut request = builder
                .body(Full::new(body.clone()))
                .map_err(|e| Error::Other(format!("building request {method} {uri}: {e}")))?;
            let cred = inner.auth.credential().await?;
            if let Some(h) = cred.header
                && !request.headers().contains_key(AUTHORIZATION)
            {
                request.headers_mut().insert(AUTHORIZATION, h);
            }
            let client = self.http_client(cred.identity)?;
            let result = client.request(request).await;
            match result {
                Ok(resp) => {
                    let status = resp.status();
                    inner
                        .metrics
                        .record_attempt(&method, status.as_u16(), retries > 0);
                    if inner.follow_server {
                        self.note_flow_control(&resp);
                    }
                    if status == StatusCode::UNAUTHORIZED
                        && !refreshed_after_401
                        && inner.auth.invalidate()
                    {
                        tracing::info!(%method, path = uri.path(), "401 Unauthorized; refreshing credentials and retrying once");
                        refreshed_after_401 = true;
                        continue;
                    }
                    if let Some(delay) = retry_after(&resp)
                        && retries < inner.max_retries
                    {
                        retries += 1;
                        tracing::info!(
                            %method,
                            path = uri.path(),
                            code = status.as_u16(),
                            retry_after_seconds = delay.as_secs(),
                            attempt = retries,
                            "server asked to retry later"
                        );
                        drop(resp);
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return Ok(resp);
                }
                Err(e) => {
                    inner.metrics.record_attempt(&method, 0, retries > 0);
                    if method == Method::GET
                        && retryable_failure(&e, watch)
                        && retries < inner.max_retries
                    {
                        retries += 1;
                        tracing::debug!(
                            %method,
                            path = uri.path(),
                            error = %error_chain(&e),
                            attempt = retries,
                            "connection lost; retrying in 1s"
                        );
                        tokio::time::sleep(CONNECTION_LOST_RETRY_AFTER).await;
                        continue;
                    }
                    return Err(Error::transport(format!("{method} {uri}"), &e));
                }
            }
        }
    }

    fn full_uri(&self, path: &Uri) -> Result<Uri> {
        let base = &self.inner.base;
        let prefix = base.path().trim_end_matches('/');
        let pq = path.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut parts = http::uri::Parts::default();
        parts.scheme = base.scheme().cloned();
        parts.authority = base.authority().cloned();
        parts.path_and_query = Some(
            format!("{prefix}{pq}")
                .parse()
                .map_err(|e| Error::Other(format!("request path {pq:?}: {e}")))?,
        );
        Uri::from_parts(parts).map_err(|e| Error::Other(format!("request path {pq:?}: {e}")))
    }

    /// Waits for a throttle token (if there is a throttle) and records the wait.
    async fn throttle(&self, method: &Method, path: &str) {
        if self.inner.follow_server && !self.inner.metrics.throttle_decision().throttles() {
            return;
        }
        if let Some(t) = &self.throttle {
            let waited = t.acquire().await;
            self.inner.metrics.observe_throttle(method, waited);
            if waited > Duration::from_secs(1) {
                tracing::info!(
                    %method,
                    path,
                    waited_ms = waited.as_millis() as u64,
                    "waited for client-side throttling (not priority and fairness)"
                );
            } else if waited > Duration::from_millis(50) {
                tracing::debug!(
                    %method,
                    path,
                    waited_ms = waited.as_millis() as u64,
                    "waited for client-side throttling (not priority and fairness)"
                );
            }
        }
    }

    /// While following the server and undecided: settles the throttle decision from one
    /// answer's headers (see the module documentation). Only the first caller's decision counts.
    fn note_flow_control<B>(&self, resp: &Response<B>) {
        let metrics = &self.inner.metrics;
        if metrics.throttle_decision() != ThrottleDecision::Undecided
            || resp.status() == StatusCode::UNAUTHORIZED
        {
            return;
        }
        let decision = if has_flow_control_headers(resp) {
            ThrottleDecision::ServerFlowControl
        } else {
            ThrottleDecision::NoServerFlowControl
        };
        if metrics.settle_throttle_decision(decision) {
            // Debug only: the manager logs the decision once at start (`Manager::run`), and a
            // library user may log `throttle_decision()` as they see fit.
            tracing::debug!(server = %self.inner.base, decision = decision.describe(), "client-side throttle decided from the server's answer");
        }
    }

    /// The same client (connections, credentials, metrics, throttle decision) with a
    /// client-side bucket of its own, of the same `qps`/`burst`: requests through the returned
    /// handle (and its clones) neither wait for nor use up this handle's tokens. What client-go
    /// gets by building a second clientset from the same `rest.Config` (each `RESTClient` has
    /// its own limiter); the manager gives the event sink one, so that events never take the
    /// controllers' budget.
    pub fn with_own_throttle(&self) -> Client {
        Client {
            inner: self.inner.clone(),
            throttle: self
                .throttle
                .as_ref()
                .and_then(|t| Throttle::new(t.qps as f32, t.burst as u32).map(Arc::new)),
        }
    }

    /// What the client-side throttle does now ([`ThrottleDecision`]).
    pub fn throttle_decision(&self) -> ThrottleDecision {
        self.inner.metrics.throttle_decision()
    }

    /// When following the server and not decided yet, asks `GET /livez/ping` (cheap, and
    /// classified by APF like any request) so that the decision is made now rather than on the
    /// first real request; returns the decision. A transport error leaves it undecided (the
    /// next answer decides); any status code is an answer.
    pub async fn detect_flow_control(&self) -> ThrottleDecision {
        if self.throttle_decision() == ThrottleDecision::Undecided {
            match Request::get("/livez/ping").body(Bytes::new()) {
                Ok(req) => {
                    if let Err(e) = self.request_raw(req).await {
                        tracing::debug!(error = %e, "priority and fairness probe got no answer; the next answer decides");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "building the priority and fairness probe"),
            }
        }
        self.throttle_decision()
    }

    /// The pooled client, rebuilt when an exec plugin hands out a different client certificate
    /// (the old pool's connections close when its last request finishes).
    fn http_client(&self, identity: Option<(Vec<u8>, Secret)>) -> Result<HyperClient> {
        let inner = &*self.inner;
        {
            let state = inner
                .http
                .read()
                .map_err(|_| Error::Other("connection pool lock poisoned".into()))?;
            if identity.as_ref().map(|i| &i.0) == state.exec_identity.as_ref() {
                return Ok(state.client.clone());
            }
        }
        let Some((cert, key)) = identity else {
            let state = inner
                .http
                .read()
                .map_err(|_| Error::Other("connection pool lock poisoned".into()))?;
            return Ok(state.client.clone());
        };
        let mut tls = inner.tls.clone();
        tls.client_cert_pem = Some(cert.clone());
        tls.client_key_pem = Some(key);
        let client =
            build_http_client(true, &tls, inner.proxy_url.as_ref(), inner.connect_timeout)?;
        let mut state = inner
            .http
            .write()
            .map_err(|_| Error::Other("connection pool lock poisoned".into()))?;
        tracing::info!(
            "exec plugin supplied a new client certificate; rebuilding the connection pool"
        );
        state.exec_identity = Some(cert);
        state.client = client.clone();
        Ok(client)
    }
}
