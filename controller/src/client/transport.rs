//! The transport: one pooled HTTP client per [`Config`], with authentication, a client-side
//! throttle, retries and request metrics (client-go's `rest.RESTClient`, `transport` and
//! `util/flowcontrol`).
//!
//! ## How a request travels
//!
//! ```text
//! Api<K> --http::Request<Bytes>--> Client::send
//!     throttle (not for watches) -> auth header -> hyper pool -> TLS (rustls) -> API server
//!     <- 429/5xx with Retry-After: sleep, take a new token, resend (at most 10 times)
//!     <- 401 and refreshable credentials: refresh once, resend
//!     <- reset / probable EOF / GOAWAY on GET: wait 1 s, resend (same budget of 10)
//! ```
//!
//! * **Connections.** One `hyper_util` pooled client per [`Client`], shared by every clone and
//!   every `Api<K>`. TLS is rustls (ring provider, TLS 1.2 minimum) and offers ALPN `h2` and
//!   `http/1.1`: against a real API server all requests, watches included, multiplex over one
//!   HTTP/2 connection, as with client-go. `proxy-url` tunnels every connection through an HTTP
//!   `CONNECT` proxy (plain-http destinations too). Unlike client-go, the `HTTPS_PROXY` /
//!   `NO_PROXY` environment variables are not consulted: set `proxy-url` in the kubeconfig.
//! * **QPS and burst.** The API server is shared by every controller in the cluster, and a
//!   controller bug (a hot reconcile loop) must not turn into a flood that starves everyone else.
//!   The client therefore can hold a token bucket ([`Throttle`]): `burst` tokens to start with,
//!   refilled at `qps` per second; each request waits for a token. Watches skip the bucket (a
//!   watch is one long request, not a flood), as in client-go; a *retried* watch does take one.
//!   `qps <= 0` (client-go writes `-1`) disables the throttle.
//! * **Following the server (API Priority and Fairness).** The client-side bucket predates the
//!   server protecting itself. Since API Priority and Fairness (APF, beta in 1.20, GA in 1.29)
//!   the server queues and sheds load per flow and answers `429` + `Retry-After` when a priority
//!   level is full; a fixed client-side QPS on top of it only makes a controller slow on an idle
//!   cluster (kubernetes/kubernetes#111880 asks client-go to turn its limiter off when APF is
//!   on). controller-runtime disabled its client-side limiter by default (PR #3119, on SIG API
//!   Machinery's advice); Flux and cert-manager detect APF from the response headers
//!   `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID` (which every
//!   request classified by APF carries, exempt ones included) and drop their limiter when they
//!   are present. cert-manager#9158 is the trap to avoid: a QPS the user *set* must still win.
//!   Hence [`Config::follow_server_flow_control`]: when set (the manager sets it when neither
//!   `--kube-api-qps` nor `--kube-api-burst` is given), `qps`/`burst` are only a fallback. The
//!   first answer the client gets (the manager asks `GET /livez/ping` at start,
//!   [`Client::detect_flow_control`]) decides once, for the life of the client: APF headers
//!   present → no client-side throttle; absent → the fallback bucket (a `401`, answered before
//!   APF classifies a request, decides nothing). Until then the fallback bucket applies. The
//!   decision ([`ThrottleDecision`]) is logged once by the manager, kept in [`ClientMetrics`] and exposed as
//!   the `rest_client_rate_limiter_enabled` gauge and on `/readyz?verbose`. With the throttle
//!   off no wait is recorded in `rest_client_rate_limiter_duration_seconds` (client-go records
//!   none without a limiter either); `429` + `Retry-After` keeps being honoured (below).
//! * **Fair waiting.** Like client-go's limiter (`golang.org/x/time/rate`'s `Wait`), a request
//!   first *reserves* a token, which fixes its slot at once, and then sleeps until that slot.
//!   Waiters are therefore served in the order they arrived, one every `1/qps` after the burst,
//!   and a task hammering the client in a loop cannot overtake a request that queued before its
//!   next call. A request abandoned while it waits (its future dropped, say by a timeout)
//!   cancels its reservation: its token goes back unless later reservations are already queued
//!   behind it, in which case they keep their slots and the abandoned slot passes unused, as
//!   x/time/rate does on context cancellation. The first wait happens before the request
//!   timeout starts (client-go's order), so a long queue does not turn into timeouts of requests
//!   that were never sent. The bucket runs on `tokio::time`, so tests with a paused clock see
//!   exact schedules.
//! * **Retries.** client-go's rule (`rest/request.go`, `rest/with_retry.go`): any request
//!   answered `429`, or `5xx` *with* a `Retry-After: <seconds>` header, is sent again after that
//!   many seconds, at most [`Config::max_retries`] (10) times; a `429`/`5xx` without the header
//!   (or with a value that is not whole seconds) is returned at once. A request that got *no*
//!   answer is retried only when it is a `GET` and the failure says an established connection
//!   went away: connection reset (`ECONNRESET`, aborted, broken pipe), a probable EOF (the
//!   server closed the connection before or in the middle of the response) or a lost HTTP/2
//!   connection (`GOAWAY`). client-go turns those into a synthetic `500` with `Retry-After: 1`,
//!   so they wait **1 s** and share the same budget of 10. A watch (also a `GET`) is retried on
//!   a probable EOF or a timeout (`Watch`'s own predicate). Everything else is returned on the
//!   first failure: in particular **connection refused** (nothing listens: resending will not
//!   help, and the caller, such as the reflector's backoff or the manager's start-up check,
//!   decides what to do), TLS and DNS errors, and every failure of a write (the server may
//!   have applied it). The classification is `retryable_failure` below.
//! * **Timeouts.** Connect: [`Config::connect_timeout`] (30 s). A non-watch request (headers and
//!   body, retries included) is bounded by [`Config::timeout`], counted from the moment its first
//!   throttle token is granted. Watches have no client timeout; the server ends them after their
//!   `timeoutSeconds`.
//! * **Credentials.** A bearer token (fixed, or a file re-read about every minute: kubelet rotates
//!   projected service-account tokens), basic auth, a client certificate, or an exec credential
//!   plugin (`client.authentication.k8s.io/v1` or `v1beta1`): the plugin's `ExecCredential` is
//!   cached until its `expirationTimestamp` and re-fetched after a `401`. A plugin may return a
//!   client certificate instead of a token; the connection pool is then rebuilt with it. Header
//!   values carrying secrets are marked sensitive and nothing secret is logged.
//! * **Metrics.** [`ClientMetrics`] keeps what client-go's `rest_client_*` metrics count: every
//!   attempt by method and status code, retries by method and code, a latency histogram of whole
//!   requests (throttle wait, retries and body included) and one of throttle waits, both by
//!   method with client-go's buckets ([`LATENCY_BUCKETS`]), plus the 429 count. The manager's
//!   `/metrics` endpoint reads them at scrape time (see [`crate::metrics`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use apimachinery::token_bucket::TokenBucket;
use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde::de::DeserializeOwned;

use super::config::{Auth, Config, ExecConfig, InteractiveMode, Secret, TlsConfig};
use super::watch::{DEFAULT_MAX_LINE, WatchStream, decode_stream};
use super::{Error, Result};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type HyperClient =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<Connector>, Full<Bytes>>;

/// How often a token file is re-read (client-go: a 1 minute cache with 10 s leeway).
pub const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(50);

// ---------------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------------

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
    pub async fn request_raw(&self, req: Request<Bytes>) -> Result<(StatusCode, Bytes)> {
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
        Ok(decode_stream(body, DEFAULT_MAX_LINE))
    }

    /// The core loop: throttle, authenticate, send, retry. Returns the final response with its
    /// body unread. A watch (`watch = true`) skips the throttle on its first attempt.
    pub async fn send(&self, req: Request<Bytes>, watch: bool) -> Result<Response<Incoming>> {
        self.send_attempts(req, watch, false).await
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

/// The response headers API Priority and Fairness sets on every request it classifies
/// (`k8s.io/api/flowcontrol/v1` `ResponseHeaderMatchedFlowSchemaUID` /
/// `ResponseHeaderMatchedPriorityLevelConfigurationUID`).
pub const FLOW_CONTROL_HEADERS: [&str; 2] = [
    "X-Kubernetes-PF-FlowSchema-UID",
    "X-Kubernetes-PF-PriorityLevel-UID",
];

/// True when `resp` carries either APF header.
fn has_flow_control_headers<B>(resp: &Response<B>) -> bool {
    FLOW_CONTROL_HEADERS
        .iter()
        .any(|h| resp.headers().contains_key(*h))
}

/// What the client-side throttle does, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleDecision {
    /// `qps`/`burst` were given: the bucket applies whatever the server does.
    Configured,
    /// `qps <= 0` was given: no client-side throttle.
    Disabled,
    /// Following the server, no answer yet: the fallback bucket applies for now.
    Undecided,
    /// Following the server, which announces priority and fairness: no client-side throttle.
    ServerFlowControl,
    /// Following the server, which does not announce priority and fairness: the fallback
    /// bucket applies.
    NoServerFlowControl,
}

impl ThrottleDecision {
    /// True when requests wait for the client-side bucket.
    pub fn throttles(self) -> bool {
        matches!(
            self,
            ThrottleDecision::Configured
                | ThrottleDecision::Undecided
                | ThrottleDecision::NoServerFlowControl
        )
    }

    /// A short human-readable form (`on (configured)`, `off (server has priority and
    /// fairness)`, ...), as shown on `/readyz?verbose`.
    pub fn describe(self) -> &'static str {
        match self {
            ThrottleDecision::Configured => "on (--kube-api-qps/--kube-api-burst given)",
            ThrottleDecision::Disabled => "off (qps <= 0 given)",
            ThrottleDecision::Undecided => "on until the server answers",
            ThrottleDecision::ServerFlowControl => "off (server has priority and fairness)",
            ThrottleDecision::NoServerFlowControl => {
                "on (server announces no priority and fairness)"
            }
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            ThrottleDecision::Configured => 0,
            ThrottleDecision::Disabled => 1,
            ThrottleDecision::Undecided => 2,
            ThrottleDecision::ServerFlowControl => 3,
            ThrottleDecision::NoServerFlowControl => 4,
        }
    }

    fn from_u8(v: u8) -> ThrottleDecision {
        match v {
            0 => ThrottleDecision::Configured,
            1 => ThrottleDecision::Disabled,
            3 => ThrottleDecision::ServerFlowControl,
            4 => ThrottleDecision::NoServerFlowControl,
            _ => ThrottleDecision::Undecided,
        }
    }
}

/// The delay a 429, or a 5xx carrying `Retry-After: <seconds>`, asks for.
fn retry_after<B>(resp: &Response<B>) -> Option<Duration> {
    let status = resp.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let secs: u64 = resp
        .headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

/// The wait before resending a `GET` whose connection was lost: client-go's synthetic
/// `Retry-After: 1`.
const CONNECTION_LOST_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Whether a request that got no answer may be sent again (the caller checks that it is a
/// `GET`). client-go's predicates: for ordinary requests `net.IsConnectionReset(err) ||
/// net.IsProbableEOF(err) || net.IsHTTP2ConnectionLost(err)`; for watches
/// `net.IsProbableEOF(err) || net.IsTimeout(err)`. Walks the error's source chain:
///
/// * `io::ErrorKind::ConnectionReset`, `ConnectionAborted`, `BrokenPipe` ("connection reset by
///   peer", "broken connection"), `UnexpectedEof`: reset or probable EOF.
/// * hyper's "connection closed before message completed" (incomplete message) and a request
///   cancelled because its connection went away: probable EOF.
/// * h2's `GOAWAY` from the server: probable EOF ("http2: server sent GOAWAY").
/// * `io::ErrorKind::TimedOut` and hyper timeouts: only for watches.
///
/// Connection refused, DNS and TLS failures match none of these and are not retried.
pub(crate) fn retryable_failure(e: &(dyn std::error::Error + 'static), watch: bool) -> bool {
    use std::io::ErrorKind;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            match io.kind() {
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof => return true,
                ErrorKind::TimedOut => return watch,
                ErrorKind::ConnectionRefused => return false,
                _ => {}
            }
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
            if h.is_timeout() {
                return watch;
            }
        }
        if let Some(h2) = c.downcast_ref::<h2::Error>()
            && h2.is_go_away()
            && h2.is_remote()
        {
            return true;
        }
        cur = c.source();
    }
    false
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Connections and TLS
// ---------------------------------------------------------------------------------------------

/// Dials the server directly or through an HTTP CONNECT proxy.
#[derive(Clone)]
pub struct Connector(ConnectorKind);

#[derive(Clone)]
enum ConnectorKind {
    Direct(HttpConnector),
    Proxied(Tunnel<HttpConnector>),
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.0 {
            ConnectorKind::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            ConnectorKind::Proxied(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match &mut self.0 {
            ConnectorKind::Direct(c) => {
                let f = c.call(dst);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
            ConnectorKind::Proxied(t) => {
                let f = t.call(dst);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
        }
    }
}

fn build_http_client(
    https: bool,
    tls: &TlsConfig,
    proxy: Option<&Uri>,
    connect_timeout: Duration,
) -> Result<HyperClient> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(30)));
    http.set_nodelay(true);
    let connector = match proxy {
        None => Connector(ConnectorKind::Direct(http)),
        Some(p) => {
            let mut tunnel = Tunnel::new(p.clone(), http);
            if let Some(auth) = proxy_authorization(p)? {
                tunnel = tunnel.with_auth(auth);
            }
            Connector(ConnectorKind::Proxied(tunnel))
        }
    };
    // A plain-http server never does TLS: skip loading the system roots for it.
    let rustls_config = if https {
        rustls_client_config(tls)?
    } else {
        crate::install_crypto_provider();
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config(format!("TLS versions: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls_config)
        .https_or_http();
    let builder = match tls.server_name.as_deref() {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
                Error::Config(format!("tls-server-name {name:?} is not a valid name: {e}"))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_all_versions().wrap_connector(connector);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(Duration::from_secs(30))
            .build(https),
    )
}

fn proxy_authorization(proxy: &Uri) -> Result<Option<HeaderValue>> {
    let Some(auth) = proxy.authority() else {
        return Ok(None);
    };
    let Some((userinfo, _)) = auth.as_str().rsplit_once('@') else {
        return Ok(None);
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(userinfo);
    let mut v = HeaderValue::from_str(&format!("Basic {encoded}"))
        .map_err(|e| Error::Config(format!("proxy-url credentials: {e}")))?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// Builds the rustls configuration: TLS 1.2 and 1.3, the CA bundle (or the system roots), an
/// optional client certificate, or no verification at all when asked to.
pub fn rustls_client_config(tls: &TlsConfig) -> Result<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    crate::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config(format!("TLS versions: {e}")))?;
    let builder = if tls.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.ca_pem {
            Some(pem) => {
                let mut n = 0;
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| {
                        Error::Config(format!("certificate-authority: bad PEM: {e}"))
                    })?;
                    roots.add(cert).map_err(|e| {
                        Error::Config(format!("certificate-authority: unusable certificate: {e}"))
                    })?;
                    n += 1;
                }
                if n == 0 {
                    return Err(Error::Config(
                        "certificate-authority: no PEM certificate found".into(),
                    ));
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for e in &native.errors {
                    tracing::debug!(error = %e, "loading a system CA certificate failed");
                }
                let (added, _ignored) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    tracing::warn!(
                        "no system CA certificates found; TLS connections will fail unless a CA is configured"
                    );
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&tls.client_cert_pem, &tls.client_key_pem) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Config(format!("client-certificate: bad PEM: {e}")))?;
            if chain.is_empty() {
                return Err(Error::Config(
                    "client-certificate: no PEM certificate found".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|e| {
                Error::Config(format!(
                    "client-key: no usable PEM private key (RSA, EC or PKCS#8): {e}"
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Config(format!("client certificate and key: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(Error::Config(
                "client certificate and key must be given together".into(),
            ));
        }
    };
    Ok(config)
}

/// `insecure-skip-tls-verify`: accepts any certificate, but still checks the handshake
/// signatures so the connection is at least to whoever holds the presented key.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

// ---------------------------------------------------------------------------------------------
// Throttle
// ---------------------------------------------------------------------------------------------

/// The client-side token bucket: `burst` requests at once, then `qps` per second, handed out in
/// arrival order.
///
/// This is client-go's `flowcontrol.NewTokenBucketRateLimiter`, which is a
/// `golang.org/x/time/rate.Limiter`; the arithmetic is the workspace's one x/time/rate bucket,
/// [`apimachinery::token_bucket::TokenBucket`], behind a lock:
///
/// * The bucket starts full (`burst` tokens) and refills continuously at `qps` tokens a second,
///   never above `burst`.
/// * [`Throttle::reserve`] always takes a token *now*, even one that only exists in the future:
///   the [`Reservation`] records when its token will exist (its *time to act*). The next
///   caller's token is one `1/qps` later still. Each caller's slot is therefore fixed the moment
///   it arrives, and a caller that arrives later can never be served before one that arrived
///   earlier, however often it asks (x/time/rate's `Wait` does the same: reserve, then sleep
///   until the slot).
/// * Dropping a [`Reservation`] before its time to act cancels it (x/time/rate's
///   `Reservation.Cancel`, which `Wait` calls when its context is cancelled): the token goes back
///   into the bucket unless later reservations were already stacked on top of it. In that case
///   their slots stay where they are, so the cancelled slot simply passes unused. Either way
///   nothing is lost for good: the bucket is a function of time and refills to `burst` once no
///   one is waiting.
///
/// Times come from `tokio::time`, so a test with a paused clock sees exact schedules. Rates
/// below one request a day are raised to one a day.
pub struct Throttle {
    qps: f64,
    burst: f64,
    state: Mutex<TokenBucket>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

impl Throttle {
    /// `None` when `qps` is not a positive number (throttling disabled). A `burst` of 0 is
    /// treated as 1; rates below one request a day are treated as one a day.
    pub fn new(qps: f32, burst: u32) -> Option<Throttle> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let bucket = TokenBucket::new(f64::from(qps), burst, tokio::time::Instant::now());
        Some(Throttle {
            qps: bucket.rate(),
            burst: bucket.burst(),
            state: Mutex::new(bucket),
        })
    }

    /// Takes one token, possibly one that only exists in the future, and returns the
    /// reservation saying when it may be used. Dropping the reservation before then gives the
    /// token back where possible (see the type's documentation).
    pub fn reserve(&self) -> Reservation<'_> {
        let time_to_act = lock_bucket(&self.state).reserve(tokio::time::Instant::now());
        Reservation {
            throttle: self,
            time_to_act,
            acted: false,
        }
    }

    /// Waits for a token (reserve, then sleep until the reserved slot); returns how long it
    /// waited. Dropping the future while it waits cancels the reservation.
    pub async fn acquire(&self) -> Duration {
        let started = tokio::time::Instant::now();
        self.reserve().wait().await;
        started.elapsed()
    }

    /// x/time/rate's `Reservation.CancelAt`.
    fn cancel(&self, time_to_act: tokio::time::Instant, now: tokio::time::Instant) {
        lock_bucket(&self.state).cancel(time_to_act, now);
    }
}

fn lock_bucket(m: &Mutex<TokenBucket>) -> std::sync::MutexGuard<'_, TokenBucket> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One token taken from a [`Throttle`], usable from [`Reservation::time_to_act`] on.
///
/// Dropped before [`Reservation::wait`] completes, it is cancelled (the token is returned when
/// no later reservation depends on it).
#[must_use = "dropping a reservation cancels it"]
pub struct Reservation<'a> {
    throttle: &'a Throttle,
    time_to_act: tokio::time::Instant,
    acted: bool,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("time_to_act", &self.time_to_act)
            .field("acted", &self.acted)
            .finish()
    }
}

impl Reservation<'_> {
    /// When the reserved token exists.
    pub fn time_to_act(&self) -> tokio::time::Instant {
        self.time_to_act
    }

    /// How long from now until [`Reservation::time_to_act`] (zero if it has passed).
    pub fn delay(&self) -> Duration {
        self.time_to_act
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Sleeps until the reserved slot and uses the token.
    pub async fn wait(mut self) {
        if self.time_to_act > tokio::time::Instant::now() {
            tokio::time::sleep_until(self.time_to_act).await;
        }
        self.acted = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.acted {
            self.throttle
                .cancel(self.time_to_act, tokio::time::Instant::now());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/// Upper bounds, in seconds, of the latency histograms (`rest_client_request_duration_seconds`
/// and `rest_client_rate_limiter_duration_seconds`): client-go's buckets. A `+Inf` bucket
/// follows the last.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// A latency histogram over [`LATENCY_BUCKETS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Observations per bucket, *not* cumulative: `counts[i]` holds those above
    /// `LATENCY_BUCKETS[i - 1]` and at most `LATENCY_BUCKETS[i]`; the last entry holds those
    /// above 60 s.
    pub counts: [u64; LATENCY_BUCKETS.len() + 1],
    /// Sum of the observations.
    pub sum: Duration,
    /// Number of observations.
    pub count: u64,
}

impl LatencyHistogram {
    /// Adds one observation (Prometheus buckets are inclusive: 5 ms lands in `le="0.005"`).
    pub fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i] += 1;
        self.sum = self.sum.saturating_add(d);
        self.count += 1;
    }

    /// Observations of at most `le` seconds: the value of the `le` bucket in the exposition
    /// (`f64::INFINITY` for `+Inf`, which is every observation).
    pub fn cumulative(&self, le: f64) -> u64 {
        self.buckets()
            .iter()
            .take_while(|(upper, _)| *upper <= le)
            .map(|(_, n)| n)
            .sum()
    }

    /// `(upper bound, observations in that bucket alone)` pairs ending with `+Inf`: the shape
    /// prometheus-client's histogram encoder takes.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

/// Request counters of one [`Client`], in the shape of client-go's `rest_client_*` metrics, read
/// by the manager's `/metrics` endpoint through [`ClientMetrics::snapshot`].
///
/// What is counted where, as in client-go's `rest.Request`:
///
/// * every attempt, retries and watches included, by method and status code
///   (`rest_client_requests_total`); code 0 means the attempt got no answer (client-go's
///   `<error>`);
/// * every attempt after the first of one request, by method and code
///   (`rest_client_request_retries_total`);
/// * each whole request made through [`Client::request_raw`] (and the helpers built on it), from
///   its call to its last body byte, throttle waits and retries included
///   (`rest_client_request_duration_seconds`). Watches and bare [`Client::send`] calls are not
///   timed, as client-go times neither `Watch` nor `Stream`;
/// * each wait for the throttle, zero waits included (`rest_client_rate_limiter_duration_seconds`).
#[derive(Debug)]
pub struct ClientMetrics {
    host: String,
    state: Mutex<MetricsSnapshot>,
    /// The [`ThrottleDecision`], as `to_u8`; atomic because every request reads it.
    throttle: AtomicU8,
}

/// A point-in-time copy of [`ClientMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// The server's `host[:port]`, as written in its URL (client-go's `host` label).
    pub host: String,
    /// Attempts by (HTTP method, status code); code 0 means no response (a connection error).
    pub requests: BTreeMap<(String, u16), u64>,
    /// Attempts that were retries, by (HTTP method, status code).
    pub retries_by_code: BTreeMap<(String, u16), u64>,
    /// Whole-request latency by HTTP method.
    pub request_latency: BTreeMap<String, LatencyHistogram>,
    /// Time spent waiting for the throttle, by HTTP method.
    pub rate_limiter_latency: BTreeMap<String, LatencyHistogram>,
    /// Answers with code 429.
    pub too_many_requests: u64,
    /// Attempts that were retries (the sum of `retries_by_code`).
    pub retries: u64,
    /// Total time requests waited for the client-side throttle.
    pub throttle_wait: Duration,
    /// What the client-side throttle does (`rest_client_rate_limiter_enabled`).
    pub throttle: Option<ThrottleDecision>,
}

impl MetricsSnapshot {
    /// Attempts with this method (any code).
    pub fn count_method(&self, method: &str) -> u64 {
        self.requests
            .iter()
            .filter(|((m, _), _)| m == method)
            .map(|(_, n)| n)
            .sum()
    }
    /// All attempts.
    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }
}

impl ClientMetrics {
    /// Empty counters for a client of the server at `host` (`host[:port]`).
    pub fn new(host: impl Into<String>) -> ClientMetrics {
        let host = host.into();
        ClientMetrics {
            state: Mutex::new(MetricsSnapshot {
                host: host.clone(),
                ..MetricsSnapshot::default()
            }),
            host,
            throttle: AtomicU8::new(ThrottleDecision::Configured.to_u8()),
        }
    }

    /// The client's current [`ThrottleDecision`].
    pub fn throttle_decision(&self) -> ThrottleDecision {
        ThrottleDecision::from_u8(self.throttle.load(Ordering::Acquire))
    }

    pub(crate) fn set_throttle_decision(&self, d: ThrottleDecision) {
        self.throttle.store(d.to_u8(), Ordering::Release);
    }

    /// Moves `Undecided` to `d`; false when another answer decided first.
    pub(crate) fn settle_throttle_decision(&self, d: ThrottleDecision) -> bool {
        self.throttle
            .compare_exchange(
                ThrottleDecision::Undecided.to_u8(),
                d.to_u8(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The `host` label of this client's series.
    pub fn host(&self) -> &str {
        &self.host
    }

    fn with<T>(&self, f: impl FnOnce(&mut MetricsSnapshot) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// Counts one attempt answered `code` (0: no answer); `retry` when it was not the first
    /// attempt of its request.
    pub(crate) fn record_attempt(&self, method: &Method, code: u16, retry: bool) {
        self.with(|s| {
            let key = (method.as_str().to_owned(), code);
            if code == 429 {
                s.too_many_requests += 1;
            }
            if retry {
                s.retries += 1;
                *s.retries_by_code.entry(key.clone()).or_default() += 1;
            }
            *s.requests.entry(key).or_default() += 1;
        });
    }

    /// Records one whole request that took `took`.
    pub(crate) fn observe_request(&self, method: &Method, took: Duration) {
        self.with(|s| {
            s.request_latency
                .entry(method.as_str().to_owned())
                .or_default()
                .observe(took);
        });
    }

    /// Records one wait for the throttle (zero when a token was there).
    pub(crate) fn observe_throttle(&self, method: &Method, waited: Duration) {
        self.with(|s| {
            s.throttle_wait = s.throttle_wait.saturating_add(waited);
            s.rate_limiter_latency
                .entry(method.as_str().to_owned())
                .or_default()
                .observe(waited);
        });
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut snap = self.with(|s| s.clone());
        snap.throttle = Some(self.throttle_decision());
        snap
    }
}

/// Times one whole request for `rest_client_request_duration_seconds`; records on drop, so a
/// request that fails, times out or is abandoned by its caller is timed too (client-go records
/// in a `defer`).
struct RequestTimer<'a> {
    metrics: &'a ClientMetrics,
    method: Method,
    started: tokio::time::Instant,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .observe_request(&self.method, self.started.elapsed());
    }
}

/// client-go's `host` label: the `host[:port]` of the server URL (no user info).
fn host_label(server: &Uri) -> String {
    match server.authority() {
        Some(a) => a
            .as_str()
            .rsplit_once('@')
            .map_or(a.as_str(), |(_, host)| host)
            .to_owned(),
        None => "none".to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------------------------

/// What one request carries: an `Authorization` header and/or a client identity.
#[derive(Default)]
struct Credential {
    header: Option<HeaderValue>,
    identity: Option<(Vec<u8>, Secret)>,
}

enum AuthProvider {
    None,
    Static(HeaderValue),
    TokenFile(TokenFile),
    Exec(ExecProvider),
}

impl AuthProvider {
    fn new(config: &Config) -> Result<AuthProvider> {
        Ok(match &config.auth {
            Auth::None => AuthProvider::None,
            Auth::Bearer { token, file: None } => match token {
                Some(t) => AuthProvider::Static(bearer(t.expose()).ok_or_else(|| {
                    Error::Config("token: contains characters not allowed in a header".into())
                })?),
                None => AuthProvider::None,
            },
            Auth::Bearer {
                token,
                file: Some(path),
            } => AuthProvider::TokenFile(TokenFile {
                path: path.clone(),
                cached: tokio::sync::Mutex::new(
                    token
                        .as_ref()
                        .filter(|t| !t.expose().is_empty())
                        .map(|t| (t.clone(), tokio::time::Instant::now())),
                ),
            }),
            Auth::Basic { username, password } => {
                let raw = format!("{username}:{}", password.expose());
                let enc = base64::engine::general_purpose::STANDARD.encode(raw);
                let mut v = HeaderValue::from_str(&format!("Basic {enc}"))
                    .map_err(|e| Error::Config(format!("basic auth header: {e}")))?;
                v.set_sensitive(true);
                AuthProvider::Static(v)
            }
            Auth::Exec(exec) => AuthProvider::Exec(ExecProvider {
                config: exec.clone(),
                cluster: exec_cluster_info(config),
                cached: tokio::sync::Mutex::new(None),
            }),
        })
    }

    async fn credential(&self) -> Result<Credential> {
        match self {
            AuthProvider::None => Ok(Credential::default()),
            AuthProvider::Static(h) => Ok(Credential {
                header: Some(h.clone()),
                identity: None,
            }),
            AuthProvider::TokenFile(f) => {
                let header = match f.token().await? {
                    Some(t) => Some(bearer(t.expose()).ok_or_else(|| {
                        Error::Config(format!(
                            "token file {}: contains characters not allowed in a header",
                            f.path.display()
                        ))
                    })?),
                    None => None,
                };
                Ok(Credential {
                    header,
                    identity: None,
                })
            }
            AuthProvider::Exec(e) => e.credential().await,
        }
    }

    /// After a 401: drop cached credentials if they can be refreshed; true if they were.
    fn invalidate(&self) -> bool {
        match self {
            AuthProvider::Exec(e) => match e.cached.try_lock() {
                Ok(mut c) => {
                    *c = None;
                    true
                }
                Err(_) => true,
            },
            AuthProvider::TokenFile(f) => match f.cached.try_lock() {
                Ok(mut c) => {
                    *c = None;
                    true
                }
                Err(_) => true,
            },
            _ => false,
        }
    }
}

fn bearer(token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// A token file, re-read when the cached copy is older than [`TOKEN_FILE_REFRESH`].
struct TokenFile {
    path: std::path::PathBuf,
    cached: tokio::sync::Mutex<Option<(Secret, tokio::time::Instant)>>,
}

impl TokenFile {
    async fn token(&self) -> Result<Option<Secret>> {
        let mut cached = self.cached.lock().await;
        if let Some((t, at)) = &*cached
            && at.elapsed() < TOKEN_FILE_REFRESH
        {
            return Ok(Some(t.clone()));
        }
        match tokio::fs::read_to_string(&self.path).await {
            Ok(s) => {
                let t = Secret::new(s.trim());
                *cached = Some((t.clone(), tokio::time::Instant::now()));
                Ok(Some(t))
            }
            Err(e) => match &mut *cached {
                Some((t, at)) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot re-read token file; using the previous token");
                    *at = tokio::time::Instant::now();
                    Ok(Some(t.clone()))
                }
                None => Err(Error::Config(format!(
                    "reading token file {}: {e}",
                    self.path.display()
                ))),
            },
        }
    }
}

/// Runs an exec credential plugin and caches its answer until it expires.
struct ExecProvider {
    config: ExecConfig,
    cluster: serde_json::Value,
    cached: tokio::sync::Mutex<Option<ExecCredential>>,
}

#[derive(Clone)]
struct ExecCredential {
    token: Option<Secret>,
    identity: Option<(Vec<u8>, Secret)>,
    expires: Option<jiff::Timestamp>,
}

fn exec_cluster_info(config: &Config) -> serde_json::Value {
    let mut c = serde_json::json!({ "server": config.server.to_string() });
    if let Some(name) = &config.tls.server_name {
        c["tls-server-name"] = name.clone().into();
    }
    if config.tls.insecure_skip_tls_verify {
        c["insecure-skip-tls-verify"] = true.into();
    }
    if let Some(ca) = &config.tls.ca_pem {
        c["certificate-authority-data"] =
            base64::engine::general_purpose::STANDARD.encode(ca).into();
    }
    if let Some(p) = &config.proxy_url {
        c["proxy-url"] = p.to_string().into();
    }
    c
}

/// Longest plugin stderr kept in an error.
const STDERR_EXCERPT: usize = 4096;

impl ExecProvider {
    async fn credential(&self) -> Result<Credential> {
        let mut cached = self.cached.lock().await;
        let fresh = cached
            .as_ref()
            .is_some_and(|c| c.expires.is_none_or(|exp| jiff::Timestamp::now() < exp));
        if !fresh {
            *cached = Some(self.run().await?);
        }
        let c = cached
            .as_ref()
            .cloned()
            .ok_or_else(|| Error::Other("exec plugin produced no credential".into()))?;
        let header = match &c.token {
            Some(t) => Some(bearer(t.expose()).ok_or_else(|| {
                Error::Config(format!(
                    "exec plugin {}: token contains characters not allowed in a header",
                    self.config.command
                ))
            })?),
            None => None,
        };
        Ok(Credential {
            header,
            identity: c.identity,
        })
    }

    async fn run(&self) -> Result<ExecCredential> {
        use std::io::IsTerminal as _;
        use std::process::Stdio;
        let cfg = &self.config;
        let cmd_name = &cfg.command;
        let stdin_tty = std::io::stdin().is_terminal();
        let interactive = match cfg.interactive_mode {
            InteractiveMode::Never => false,
            InteractiveMode::IfAvailable => stdin_tty,
            InteractiveMode::Always => {
                if !stdin_tty {
                    return Err(Error::Config(format!(
                        "exec plugin {cmd_name}: interactiveMode is Always but stdin is not a terminal"
                    )));
                }
                true
            }
        };
        let mut spec = serde_json::json!({ "interactive": interactive });
        if cfg.provide_cluster_info {
            spec["cluster"] = self.cluster.clone();
        }
        let info = serde_json::json!({
            "apiVersion": cfg.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        });
        let mut command = tokio::process::Command::new(cmd_name);
        command
            .args(&cfg.args)
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if interactive {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true);
        for (k, v) in &cfg.env {
            command.env(k, v.expose());
        }
        tracing::debug!(command = %cmd_name, "running exec credential plugin");
        let output = command.output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                let hint = cfg
                    .install_hint
                    .as_deref()
                    .map(|h| format!("\n\n{h}"))
                    .unwrap_or_default();
                Error::Config(format!(
                    "exec plugin: executable {cmd_name} not found{hint}"
                ))
            } else {
                Error::Config(format!("exec plugin {cmd_name}: cannot run: {e}"))
            }
        })?;
        let stderr = excerpt(&output.stderr);
        if !output.status.success() {
            return Err(Error::Config(format!(
                "exec plugin {cmd_name} failed ({}): {stderr}",
                output.status
            )));
        }
        if !stderr.is_empty() {
            tracing::debug!(command = %cmd_name, stderr = %stderr, "exec plugin wrote to stderr");
        }
        parse_exec_credential(&output.stdout, &cfg.api_version, cmd_name)
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let cut = bytes.len().min(STDERR_EXCERPT);
    let mut s = String::from_utf8_lossy(&bytes[..cut]).trim().to_owned();
    if bytes.len() > cut {
        s.push_str("...");
    }
    s
}

/// Parses the `ExecCredential` a plugin printed (never logs it: it holds the secret).
fn parse_exec_credential(stdout: &[u8], api_version: &str, cmd: &str) -> Result<ExecCredential> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        api_version: Option<String>,
        kind: Option<String>,
        status: Option<Status>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        token: Option<String>,
        client_certificate_data: Option<String>,
        client_key_data: Option<String>,
        expiration_timestamp: Option<String>,
    }
    let out: Out = serde_json::from_slice(stdout).map_err(|e| {
        Error::Config(format!(
            "exec plugin {cmd}: output is not an ExecCredential: {e}"
        ))
    })?;
    if out.kind.as_deref() != Some("ExecCredential") {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: output kind {:?}, expected \"ExecCredential\"",
            out.kind.unwrap_or_default()
        )));
    }
    if out.api_version.as_deref() != Some(api_version) {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: output apiVersion {:?} does not match the configured {api_version:?}",
            out.api_version.unwrap_or_default()
        )));
    }
    let status = out
        .status
        .ok_or_else(|| Error::Config(format!("exec plugin {cmd}: ExecCredential has no status")))?;
    let token = status.token.filter(|t| !t.is_empty()).map(Secret::new);
    let identity = match (status.client_certificate_data, status.client_key_data) {
        (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => {
            Some((c.into_bytes(), Secret::new(k)))
        }
        (None, None) => None,
        (Some(c), Some(k)) if c.is_empty() && k.is_empty() => None,
        _ => {
            return Err(Error::Config(format!(
                "exec plugin {cmd}: clientCertificateData and clientKeyData must be given together"
            )));
        }
    };
    if token.is_none() && identity.is_none() {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: ExecCredential status has neither a token nor a client certificate"
        )));
    }
    let expires = match status.expiration_timestamp.filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<jiff::Timestamp>().map_err(|e| {
            Error::Config(format!(
                "exec plugin {cmd}: status.expirationTimestamp {s:?}: {e}"
            ))
        })?),
        None => None,
    };
    Ok(ExecCredential {
        token,
        identity,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Mutex as StdMutex;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_allows_burst_then_qps() {
        let t = Throttle::new(10.0, 5).unwrap();
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            assert!(t.acquire().await.is_zero());
        }
        for _ in 0..10 {
            assert_eq!(ms(t.acquire().await), 100);
        }
        // 10 more at 10/s take exactly one virtual second.
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert!(Throttle::new(0.0, 10).is_none());
        assert!(Throttle::new(-1.0, 10).is_none());
        assert!(Throttle::new(f32::NAN, 10).is_none());
        assert!(Throttle::new(f32::INFINITY, 10).is_none());
        // Burst 0 acts as 1; a rate below one a day acts as one a day (no overflow).
        let slow = Throttle::new(f32::MIN_POSITIVE, 0).unwrap();
        assert!(slow.reserve().delay().is_zero());
        let _first = slow.reserve();
        assert_eq!(slow.reserve().delay(), Duration::from_secs(86_400));
    }

    /// burst 10, 5 qps (client-go's defaults), 30 callers queued one after another: the first
    /// ten pass at once, then one every 200 ms, in the order they arrived.
    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_get_the_burst_then_one_slot_each_in_arrival_order() {
        let t = Arc::new(Throttle::new(5.0, 10).unwrap());
        let start = tokio::time::Instant::now();
        let admitted = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..30u32 {
            let (t, admitted) = (t.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                t.acquire().await;
                admitted.lock().unwrap().push((i, ms(start.elapsed())));
            }));
            // Let caller i take its place in the queue before caller i+1 arrives.
            tokio::task::yield_now().await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let admitted = admitted.lock().unwrap().clone();
        let expected: Vec<(u32, u128)> = (0..30u32)
            .map(|i| (i, if i < 10 { 0 } else { 200 * u128::from(i - 9) }))
            .collect();
        assert_eq!(admitted, expected);
    }

    /// A task calling in a tight loop holds at most one reservation at a time; a caller that
    /// arrives between two of its calls is served at the next free slot, not after the loop.
    #[tokio::test(start_paused = true)]
    async fn a_tight_loop_cannot_overtake_a_caller_that_queued_first() {
        let t = Arc::new(Throttle::new(5.0, 1).unwrap());
        let start = tokio::time::Instant::now();
        let log = Arc::new(StdMutex::new(Vec::new()));
        let hog = {
            let (t, log) = (t.clone(), log.clone());
            tokio::spawn(async move {
                for _ in 0..6 {
                    t.acquire().await;
                    log.lock().unwrap().push(("hog", ms(start.elapsed())));
                }
            })
        };
        let victim = {
            let (t, log) = (t.clone(), log.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                t.acquire().await;
                log.lock().unwrap().push(("victim", ms(start.elapsed())));
            })
        };
        hog.await.unwrap();
        victim.await.unwrap();
        // The hog reserved 400 ms at 200 ms; the victim arrived at 300 ms and got the next slot,
        // 600 ms; the hog's following call (made at 400 ms) waits for 800 ms.
        assert_eq!(
            *log.lock().unwrap(),
            vec![
                ("hog", 0),
                ("hog", 200),
                ("hog", 400),
                ("victim", 600),
                ("hog", 800),
                ("hog", 1000),
                ("hog", 1200),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_wait_does_not_keep_its_slot() {
        let t = Throttle::new(5.0, 10).unwrap();
        let start = tokio::time::Instant::now();
        let at = |r: &Reservation<'_>| ms(r.time_to_act() - start);
        for _ in 0..10 {
            assert!(t.acquire().await.is_zero());
        }

        // The newest reservation, abandoned (here by a timeout), gives its token back: the next
        // caller gets the 200 ms slot instead of 400 ms.
        let abandoned = tokio::time::timeout(Duration::from_millis(100), t.acquire()).await;
        assert!(abandoned.is_err());
        assert_eq!(ms(t.acquire().await), 100);
        assert_eq!(ms(start.elapsed()), 200);

        // A reservation with others queued behind it cannot give its token back without letting
        // a newcomer jump the queue: the others keep their slots and its slot passes unused.
        let c = t.reserve();
        let d = t.reserve();
        let e = t.reserve();
        assert_eq!((at(&c), at(&d), at(&e)), (400, 600, 800));
        drop(d);
        let f = t.reserve();
        assert_eq!((at(&e), at(&f)), (800, 1000));
        c.wait().await;
        e.wait().await;
        f.wait().await;
        assert_eq!(ms(start.elapsed()), 1000);

        // Nothing is lost for good: once the queue has drained and the bucket refilled
        // (burst / qps = 2 s), the full burst is there again.
        tokio::time::advance(Duration::from_secs(2)).await;
        for _ in 0..10 {
            assert!(t.acquire().await.is_zero());
        }
        assert_eq!(ms(t.acquire().await), 200);
    }

    #[test]
    fn latency_buckets_are_client_gos_and_inclusive() {
        assert_eq!(
            LATENCY_BUCKETS,
            [
                0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0
            ]
        );
        let mut h = LatencyHistogram::default();
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_micros(5001));
        h.observe(Duration::from_secs(60));
        h.observe(Duration::from_secs(61));
        assert_eq!(h.count, 4);
        assert_eq!(h.sum, Duration::from_micros(121_010_001));
        assert_eq!(h.cumulative(0.005), 1);
        assert_eq!(h.cumulative(0.025), 2);
        assert_eq!(h.cumulative(30.0), 2);
        assert_eq!(h.cumulative(60.0), 3);
        assert_eq!(h.cumulative(f64::INFINITY), 4);
        let b = h.buckets();
        assert_eq!(b.len(), 13);
        assert_eq!(b[12], (f64::INFINITY, 1));
    }

    #[test]
    fn host_label_is_host_and_port_without_user_info() {
        let h = |s: &str| host_label(&s.parse().unwrap());
        assert_eq!(h("https://10.0.0.1:6443"), "10.0.0.1:6443");
        assert_eq!(h("https://admin:pw@10.0.0.1:6443/prefix"), "10.0.0.1:6443");
        assert_eq!(
            h("https://kubernetes.default.svc"),
            "kubernetes.default.svc"
        );
        assert_eq!(h("https://[::1]:6443"), "[::1]:6443");
    }

    mod fairness {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// Callers arriving at arbitrary times: each is admitted no earlier than it
            /// arrived, never before a caller that arrived earlier, and never faster than the
            /// bucket allows (at most `burst + qps·t` admissions in any window of length t).
            #[test]
            fn admission_follows_arrival_and_the_rate(
                qps in prop::sample::select(vec![1.0f32, 2.0, 4.0, 5.0, 10.0, 20.0]),
                burst in 1u32..6,
                mut arrivals_ms in prop::collection::vec(0u64..3000, 1..40),
            ) {
                arrivals_ms.sort_unstable();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .unwrap();
                let admitted: Vec<(u64, Duration)> = rt.block_on(async {
                    let t = Arc::new(Throttle::new(qps, burst).unwrap());
                    let start = tokio::time::Instant::now();
                    let mut tasks = Vec::new();
                    for &a in &arrivals_ms {
                        let t = t.clone();
                        tasks.push(tokio::spawn(async move {
                            tokio::time::sleep_until(start + Duration::from_millis(a)).await;
                            t.acquire().await;
                            (a, start.elapsed())
                        }));
                        tokio::task::yield_now().await;
                    }
                    let mut out = Vec::new();
                    for task in tasks {
                        out.push(task.await.unwrap());
                    }
                    out
                });
                let period = 1.0 / f64::from(qps);
                for (i, &(a, at)) in admitted.iter().enumerate() {
                    prop_assert!(at >= Duration::from_millis(a));
                    for &(b, bt) in &admitted[i + 1..] {
                        prop_assert!(a == b || at <= bt, "arrived at {a} ms, admitted after one that arrived at {b} ms");
                    }
                }
                // Any burst + 1 consecutive admissions span at least one refill period, give or
                // take Tokio's timer, which wakes a sleeper up to 1 ms after its deadline.
                let mut times: Vec<Duration> = admitted.iter().map(|(_, at)| *at).collect();
                times.sort_unstable();
                for w in times.windows(burst as usize + 1) {
                    let gap = (w[burst as usize] - w[0]).as_secs_f64();
                    prop_assert!(gap + 0.001 >= period, "{} admissions within {gap}s", burst + 1);
                }
            }
        }
    }

    #[test]
    fn exec_credential_parsing() {
        let ok = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        let c = parse_exec_credential(ok, "client.authentication.k8s.io/v1", "p").unwrap();
        assert_eq!(c.token.unwrap().expose(), "t");
        assert!(c.expires.is_some());
        let e = parse_exec_credential(ok, "client.authentication.k8s.io/v1beta1", "p")
            .err()
            .unwrap();
        assert!(e.to_string().contains("does not match"));
        let half =
            br#"{"apiVersion":"v","kind":"ExecCredential","status":{"clientCertificateData":"x"}}"#;
        assert!(parse_exec_credential(half, "v", "p").is_err());
        assert!(parse_exec_credential(b"garbage", "v", "p").is_err());
    }

    #[test]
    fn retry_after_only_for_429_and_5xx() {
        let r = |code: u16, h: Option<&str>| {
            let mut b = Response::builder().status(code);
            if let Some(h) = h {
                b = b.header(RETRY_AFTER, h);
            }
            retry_after(&b.body(()).unwrap())
        };
        assert_eq!(r(429, Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(r(503, Some("1")), Some(Duration::from_secs(1)));
        assert_eq!(r(503, None), None);
        assert_eq!(r(429, Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(r(404, Some("1")), None);
    }
}
