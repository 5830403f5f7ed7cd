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
//!     <- connection error on GET: back off, resend
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
//!   The client therefore holds a token bucket: `burst` tokens (default 30) to start with, refilled
//!   at `qps` per second (default 20); each request waits for a token. Watches skip the bucket (a
//!   watch is one long request, not a flood), as in client-go; a *retried* watch does take one.
//!   `qps = 0` disables the throttle. The bucket runs on `tokio::time`, so tests with a paused clock
//!   can count requests over virtual time. The server protects itself too (priority and fairness
//!   answers `429` with `Retry-After`); the bucket is the polite half of that contract.
//! * **Retries.** client-go's rule: any request answered `429`, or `5xx` *with* a
//!   `Retry-After: <seconds>` header, is sent again after that many seconds, at most
//!   [`Config::max_retries`] (10) times. Connection errors (refused, reset, cut mid-response) on
//!   `GET` and `HEAD`, which are safe to repeat, are retried with exponential backoff (100 ms
//!   doubling, capped at 2 s). Writes are not retried on connection errors: the server may have
//!   applied them.
//! * **Timeouts.** Connect: [`Config::connect_timeout`] (30 s). A non-watch request (headers and
//!   body) is bounded by [`Config::timeout`]. Watches have no client timeout; the server ends them
//!   after their `timeoutSeconds`.
//! * **Credentials.** A bearer token (fixed, or a file re-read about every minute: kubelet rotates
//!   projected service-account tokens), basic auth, a client certificate, or an exec credential
//!   plugin (`client.authentication.k8s.io/v1` or `v1beta1`): the plugin's `ExecCredential` is
//!   cached until its `expirationTimestamp` and re-fetched after a `401`. A plugin may return a
//!   client certificate instead of a token; the connection pool is then rebuilt with it. Header
//!   values carrying secrets are marked sensitive and nothing secret is logged.
//! * **Metrics.** Every attempt is counted in [`ClientMetrics`] by method and status code with its
//!   latency, plus 429s, retries and time spent waiting on the throttle.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

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
    throttle: Option<Throttle>,
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
                throttle,
                metrics: Arc::new(ClientMetrics::default()),
            }),
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
    pub async fn request_raw(&self, req: Request<Bytes>) -> Result<(StatusCode, Bytes)> {
        let timeout = self.inner.timeout;
        let fut = async {
            let resp = self.send(req, false).await?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| Error::Transport(format!("reading response body: {e}")))?
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
    /// body unread.
    pub async fn send(&self, req: Request<Bytes>, watch: bool) -> Result<Response<Incoming>> {
        let inner = &*self.inner;
        let (parts, body) = req.into_parts();
        let uri = self.full_uri(&parts.uri)?;
        let method = parts.method.clone();
        let mut retries = 0u32;
        let mut refreshed_after_401 = false;
        let mut conn_backoff = Duration::from_millis(100);
        loop {
            if !watch || retries > 0 {
                self.throttle().await;
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
            let started = tokio::time::Instant::now();
            let result = client.request(request).await;
            let elapsed = started.elapsed();
            match result {
                Ok(resp) => {
                    let status = resp.status();
                    inner.metrics.record(&method, status.as_u16(), elapsed);
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
                        inner.metrics.retries.fetch_add(1, Ordering::Relaxed);
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
                    inner.metrics.record(&method, 0, elapsed);
                    let idempotent = method == Method::GET || method == Method::HEAD;
                    if idempotent && retries < inner.max_retries {
                        retries += 1;
                        inner.metrics.retries.fetch_add(1, Ordering::Relaxed);
                        let jitter = conn_backoff.mul_f64(fastrand::f64() * 0.1);
                        tracing::debug!(%method, path = uri.path(), error = %error_chain(&e), attempt = retries, "connection error; retrying");
                        tokio::time::sleep(conn_backoff + jitter).await;
                        conn_backoff = (conn_backoff * 2).min(Duration::from_secs(2));
                        continue;
                    }
                    return Err(Error::Transport(format!(
                        "{method} {uri}: {}",
                        error_chain(&e)
                    )));
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

    async fn throttle(&self) {
        if let Some(t) = &self.inner.throttle {
            let waited = t.acquire().await;
            if !waited.is_zero() {
                self.inner
                    .metrics
                    .throttle_wait_nanos
                    .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
                if waited > Duration::from_secs(1) {
                    tracing::info!(
                        waited_ms = waited.as_millis() as u64,
                        "waited for client-side throttling (not priority and fairness)"
                    );
                } else if waited > Duration::from_millis(50) {
                    tracing::debug!(
                        waited_ms = waited.as_millis() as u64,
                        "waited for client-side throttling (not priority and fairness)"
                    );
                }
            }
        }
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

/// governor's clock on `tokio::time`, so a paused test clock drives the bucket.
#[derive(Clone, Debug)]
struct TokioClock {
    start: tokio::time::Instant,
}

impl governor::clock::Clock for TokioClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    TokioClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

/// The client-side token bucket: `burst` requests at once, then `qps` per second.
pub struct Throttle {
    limiter: Limiter,
    clock: TokioClock,
}

impl Throttle {
    /// `None` when `qps` is not a positive number (throttling disabled). A `burst` of 0 is
    /// treated as 1.
    pub fn new(qps: f32, burst: u32) -> Option<Throttle> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        // Rates below one request a day are treated as one a day (and never overflow).
        let period = Duration::try_from_secs_f64(1.0 / f64::from(qps))
            .unwrap_or(Duration::MAX)
            .min(Duration::from_secs(86_400));
        let burst = std::num::NonZeroU32::new(burst.max(1))?;
        let quota = governor::Quota::with_period(period)?.allow_burst(burst);
        let clock = TokioClock {
            start: tokio::time::Instant::now(),
        };
        Some(Throttle {
            limiter: governor::RateLimiter::direct_with_clock(quota, clock.clone()),
            clock,
        })
    }

    /// Waits for a token; returns how long it waited.
    pub async fn acquire(&self) -> Duration {
        use governor::clock::Clock as _;
        let started = tokio::time::Instant::now();
        loop {
            match self.limiter.check() {
                Ok(()) => return started.elapsed(),
                Err(not_until) => {
                    let wait = not_until.wait_time_from(self.clock.now());
                    tokio::time::sleep(wait.max(Duration::from_micros(1))).await;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/// Request counters of one [`Client`] (client-go's `rest_client_requests_total`,
/// `rest_client_request_duration_seconds`, rate-limiter and retry metrics), read by the manager's
/// `/metrics` endpoint through [`ClientMetrics::snapshot`].
#[derive(Debug, Default)]
pub struct ClientMetrics {
    requests: Mutex<BTreeMap<(String, u16), RequestStats>>,
    too_many_requests: AtomicU64,
    retries: AtomicU64,
    throttle_wait_nanos: AtomicU64,
}

/// Count and total latency of the attempts with one method and status code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Attempts.
    pub count: u64,
    /// Sum of the time to response headers.
    pub latency_sum: Duration,
}

/// A point-in-time copy of [`ClientMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// By (HTTP method, status code); code 0 means no response (a connection error).
    pub requests: BTreeMap<(String, u16), RequestStats>,
    /// Answers with code 429.
    pub too_many_requests: u64,
    /// Attempts that were retries.
    pub retries: u64,
    /// Total time requests waited for the client-side throttle.
    pub throttle_wait: Duration,
}

impl MetricsSnapshot {
    /// Attempts with this method (any code).
    pub fn count_method(&self, method: &str) -> u64 {
        self.requests
            .iter()
            .filter(|((m, _), _)| m == method)
            .map(|(_, s)| s.count)
            .sum()
    }
    /// All attempts.
    pub fn total(&self) -> u64 {
        self.requests.values().map(|s| s.count).sum()
    }
}

impl ClientMetrics {
    fn record(&self, method: &Method, code: u16, latency: Duration) {
        if code == 429 {
            self.too_many_requests.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut m) = self.requests.lock() {
            let e = m.entry((method.as_str().to_owned(), code)).or_default();
            e.count += 1;
            e.latency_sum += latency;
        }
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            requests: self.requests.lock().map(|m| m.clone()).unwrap_or_default(),
            too_many_requests: self.too_many_requests.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            throttle_wait: Duration::from_nanos(self.throttle_wait_nanos.load(Ordering::Relaxed)),
        }
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

    #[tokio::test(start_paused = true)]
    async fn throttle_allows_burst_then_qps() {
        let t = Throttle::new(10.0, 5).unwrap();
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            assert!(t.acquire().await.is_zero());
        }
        for _ in 0..10 {
            t.acquire().await;
        }
        // 10 more at 10/s take one virtual second.
        let el = start.elapsed();
        assert!(
            el >= Duration::from_millis(990) && el <= Duration::from_millis(1010),
            "{el:?}"
        );
        assert!(Throttle::new(0.0, 10).is_none());
        assert!(Throttle::new(-1.0, 10).is_none());
        assert!(Throttle::new(f32::NAN, 10).is_none());
        assert!(Throttle::new(f32::MIN_POSITIVE, 0).is_some());
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
