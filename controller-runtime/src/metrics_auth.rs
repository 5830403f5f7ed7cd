//! # Secure metrics: HTTPS, and every scrape authenticated and authorized by the API server
//!
//! `/metrics` tells whoever reads it how many objects the controller caches, how often it
//! fails and what it talks to. Served as plain HTTP on `:8080` (the default of
//! [`crate::metrics`]), anyone who can reach the pod can read it. `--metrics-secure` serves it
//! the way controller-runtime's `metricsserver.Options{SecureServing: true, FilterProvider:
//! filters.WithAuthenticationAndAuthorization}` (the kubebuilder default since v4) does:
//!
//! 1. **HTTPS.** With `--metrics-cert-dir` holding `tls.crt` and `tls.key` (a Secret mounted
//!    there, e.g. from cert-manager), those are served; without the flag, or with a directory
//!    holding neither file, a self-signed certificate for `localhost` (plus `127.0.0.1` and
//!    `::1`) is generated in memory at start, as controller-runtime does when `CertDir` is
//!    empty. Prometheus then scrapes with `insecure_skip_verify` or the Secret's CA. A directory
//!    holding only one of the two files is an error naming the missing one.
//! 2. **Authentication** ([`DelegatingAuth::authenticate`]): the request's `Authorization:
//!    Bearer <token>` is sent to the API server in a `TokenReview` (`authentication.k8s.io/v1`,
//!    `POST /apis/authentication.k8s.io/v1/tokenreviews`) through the manager's own client. No
//!    token, or a token the server does not authenticate: **401** `Unauthorized`. The
//!    TokenReview itself failing (the API server unreachable, or the manager lacking `create
//!    tokenreviews`): **500** `Authentication failed`.
//! 3. **Authorization** ([`DelegatingAuth::authorize`]): a `SubjectAccessReview`
//!    (`authorization.k8s.io/v1`) asks whether that user, with the groups, uid and extra the
//!    TokenReview gave, may do the non-resource request `verb` = the lower-cased HTTP method
//!    (`get`) on `path` = the URL path (`/metrics`). Denied: **403** `Authorization denied for
//!    user <name>`; the review failing: **500** `Authorization for user <name> failed`.
//!
//! The answers are plain text, as Go's `http.Error` writes them (`text/plain; charset=utf-8`,
//! `X-Content-Type-Options: nosniff`, the message and a newline).
//!
//! ## Caches
//!
//! Prometheus scrapes every 15–30 s with the same token, so both decisions are cached, with
//! controller-runtime's TTLs (client-go's `DelegatingAuthenticatorConfig` /
//! `DelegatingAuthorizerConfig` as it configures them):
//!
//! | decision | kept for | key |
//! |---|---|---|
//! | token → user (or "not authenticated") | 1 min, both outcomes | the token |
//! | user + verb + path → allowed | 5 min | user name, uid, groups, extra, verb, path |
//! | user + verb + path → denied | 30 s | the same |
//!
//! Each cache holds at most [`CACHE_CAPACITY`] entries: when full, expired entries go first,
//! then the one closest to expiry. Failed reviews (errors) are never cached. The cache keys
//! live in memory only; tokens are never logged.
//!
//! A failed review is retried as client-go's webhook backoff does (500 ms, ×1.5, jitter 0.2, 5
//! attempts) when it failed in transport, timed out, or was answered 429 or 5xx; any other
//! answer (403: the manager lacks the RBAC) is final at once.
//!
//! ## RBAC this needs
//!
//! The manager's ClusterRole: `create` on `tokenreviews` (`authentication.k8s.io`) and
//! `subjectaccessreviews` (`authorization.k8s.io`). A scraper (Prometheus' service account):
//! `get` on the non-resource URL `/metrics`, the `metrics-reader` ClusterRole of
//! `artifacts/deploy/rbac.yaml`.
//!
//! ## Use
//!
//! ```no_run
//! # async fn run(client: sample_client_go::client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use sample_controller_runtime::metrics::Metrics;
//! use sample_controller_runtime::metrics_auth::{DelegatingAuth, metrics_tls_config, serve_metrics_secure};
//! use tokio_util::sync::CancellationToken;
//!
//! let metrics = Metrics::new();
//! let tls = metrics_tls_config(None)?; // self-signed, in memory
//! let auth = Arc::new(DelegatingAuth::new(client));
//! let cancel = CancellationToken::new();
//! let limits = sample_controller_runtime::health::probe_serving_limits();
//! let server = serve_metrics_secure(
//!     "0.0.0.0:8443".parse()?, metrics.registry(), tls, auth, cancel.clone(), limits).await?;
//! // curl -k -H "Authorization: Bearer $TOKEN" https://<addr>/metrics
//! # server.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::hash::Hash;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use apimachinery::serving::{Activity, ConnectionGate, accept_connections};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::health::{InFlightBody, ServerHandle, serve_http1_connection};
use crate::machinery::{Machinery, ServeBody, full};
use crate::metrics::{CONTENT_TYPE, encode_registry};
use sample_client_go::client::{self, Client};

/// How long a token's review is reused (controller-runtime's `CacheTTL`), both outcomes.
pub const AUTHN_CACHE_TTL: Duration = Duration::from_secs(60);
/// How long an "allowed" is reused (controller-runtime's `AllowCacheTTL`).
pub const ALLOW_CACHE_TTL: Duration = Duration::from_secs(300);
/// How long a "denied" is reused (controller-runtime's `DenyCacheTTL`).
pub const DENY_CACHE_TTL: Duration = Duration::from_secs(30);
/// Entries per cache at most.
pub const CACHE_CAPACITY: usize = 4096;
/// The certificate file looked for in `--metrics-cert-dir` (controller-runtime's `CertName`).
pub const CERT_FILE: &str = "tls.crt";
/// The key file looked for in `--metrics-cert-dir` (controller-runtime's `KeyName`).
pub const KEY_FILE: &str = "tls.key";
/// The longest `Authorization` header value looked at; longer ones are not authenticated.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// client-go's webhook retry backoff as controller-runtime configures it.
const RETRY_INITIAL: Duration = Duration::from_millis(500);
const RETRY_FACTOR: f64 = 1.5;
const RETRY_JITTER: f64 = 0.2;
const RETRY_STEPS: u32 = 5;

/// `--metrics-secure` and `--metrics-cert-dir`, as the manager receives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecureServing {
    /// A directory holding `tls.crt` and `tls.key`; `None` (or a directory holding neither)
    /// means a self-signed certificate.
    pub cert_dir: Option<std::path::PathBuf>,
}

/// Setting up the secure metrics listener failed.
#[derive(Debug, thiserror::Error)]
pub enum SecureMetricsError {
    /// A certificate file could not be read or parsed.
    #[error("--metrics-cert-dir: {path}: {reason}")]
    CertFile {
        /// The file.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// Generating the self-signed certificate, or building the TLS configuration, failed.
    #[error("metrics TLS: {0}")]
    Tls(String),
}

/// The rustls configuration of the metrics listener: `tls.crt` / `tls.key` from `cert_dir`
/// when it holds them, else a self-signed certificate generated now (see the module docs).
/// Advertises only `http/1.1` (the listener speaks HTTP/1.1; controller-runtime's metrics
/// server turns HTTP/2 off by default too).
pub fn metrics_tls_config(
    cert_dir: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, SecureMetricsError> {
    apimachinery::crypto::install_provider();
    let loaded = match cert_dir {
        Some(dir) => load_cert_dir(dir)?,
        None => None,
    };
    let (chain, key) = match loaded {
        Some(pair) => pair,
        None => self_signed()?,
    };
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| SecureMetricsError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

type CertPair = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn load_cert_dir(dir: &Path) -> Result<Option<CertPair>, SecureMetricsError> {
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    let bad = |path: &Path, reason: String| SecureMetricsError::CertFile {
        path: path.display().to_string(),
        reason,
    };
    match (cert_path.exists(), key_path.exists()) {
        (false, false) => return Ok(None),
        (true, false) => return Err(bad(&key_path, format!("missing (beside {CERT_FILE})"))),
        (false, true) => return Err(bad(&cert_path, format!("missing (beside {KEY_FILE})"))),
        (true, true) => {}
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| bad(&cert_path, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&cert_path, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(&cert_path, "no PEM certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| bad(&key_path, format!("no usable PEM private key: {e}")))?;
    Ok(Some((chain, key)))
}

fn self_signed() -> Result<CertPair, SecureMetricsError> {
    let tls = |e: rcgen::Error| SecureMetricsError::Tls(e.to_string());
    let key = rcgen::KeyPair::generate().map_err(tls)?;
    let mut params = rcgen::CertificateParams::new(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ])
    .map_err(tls)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "sample-controller-metrics");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.self_signed(&key).map_err(tls)?;
    Ok((
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    ))
}

// ---------------------------------------------------------------------------------------------
// caches

/// A map whose entries expire, holding at most `capacity` of them.
#[derive(Debug)]
struct TtlCache<K, V> {
    capacity: usize,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    fn new(capacity: usize) -> Self {
        TtlCache {
            capacity: capacity.max(1),
            entries: HashMap::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let now = Instant::now();
        match self.entries.get(key) {
            Some((expires, v)) if *expires > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (expires, _)| *expires > now);
            if self.entries.len() >= self.capacity
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now + ttl, value));
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

// ---------------------------------------------------------------------------------------------
// authentication and authorization

/// The user a token authenticated as (the TokenReview's `status.user`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// `username`.
    pub name: String,
    /// `uid` (empty when the server gave none).
    pub uid: String,
    /// `groups`.
    pub groups: Vec<String>,
    /// `extra`, sorted by key.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a scrape may be answered, before the metrics are encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Allowed(UserInfo),
    /// 401: no token, or a token the API server does not authenticate.
    Unauthenticated,
    /// 403: authenticated, not allowed.
    Denied(UserInfo),
    /// 500: a review failed (the message says which; the cause is logged).
    Failed(String),
}

impl Decision {
    /// The HTTP status this decision answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Decision::Allowed(_) => StatusCode::OK,
            Decision::Unauthenticated => StatusCode::UNAUTHORIZED,
            Decision::Denied(_) => StatusCode::FORBIDDEN,
            Decision::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

type AuthzKey = (UserInfo, String, String);

/// Counts of the reviews actually sent (cache misses), for tests and debugging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReviewCounts {
    /// TokenReviews sent.
    pub token_reviews: u64,
    /// SubjectAccessReviews sent.
    pub access_reviews: u64,
}

/// controller-runtime's `WithAuthenticationAndAuthorization` filter: TokenReview, then
/// SubjectAccessReview, through one [`Client`], with the caches of the module docs.
#[derive(Debug)]
pub struct DelegatingAuth {
    client: Client,
    authn: Mutex<TtlCache<String, Option<UserInfo>>>,
    authz: Mutex<TtlCache<AuthzKey, bool>>,
    counts: Mutex<ReviewCounts>,
}

impl DelegatingAuth {
    /// A filter that asks the API server `client` talks to.
    pub fn new(client: Client) -> Self {
        DelegatingAuth {
            client,
            authn: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
            authz: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
            counts: Mutex::new(ReviewCounts::default()),
        }
    }

    /// How many reviews were sent so far.
    pub fn review_counts(&self) -> ReviewCounts {
        *lock(&self.counts)
    }

    /// Entries in the token and the access caches.
    pub fn cache_sizes(&self) -> (usize, usize) {
        (lock(&self.authn).len(), lock(&self.authz).len())
    }

    /// Decides a request from its `Authorization` header value, method and path.
    pub async fn decide(
        &self,
        authorization: Option<&str>,
        method: &Method,
        path: &str,
    ) -> Decision {
        let user = match self.authenticate(authorization).await {
            Ok(Some(user)) => user,
            Ok(None) => return Decision::Unauthenticated,
            Err(e) => {
                tracing::error!(error = %e, "metrics: authentication failed");
                return Decision::Failed("Authentication failed".into());
            }
        };
        let verb = method.as_str().to_ascii_lowercase();
        match self.authorize(&user, &verb, path).await {
            Ok(true) => Decision::Allowed(user),
            Ok(false) => {
                tracing::debug!(user = %user.name, %verb, path, "metrics: authorization denied");
                Decision::Denied(user)
            }
            Err(e) => {
                let msg = format!("Authorization for user {} failed", user.name);
                tracing::error!(error = %e, "metrics: {msg}");
                Decision::Failed(msg)
            }
        }
    }

    /// The user a bearer token authenticates as; `Ok(None)` without a (usable) token or when the
    /// API server does not authenticate it; `Err` when the TokenReview itself failed.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> client::Result<Option<UserInfo>> {
        let Some(token) = bearer_token(authorization) else {
            return Ok(None);
        };
        if let Some(hit) = lock(&self.authn).get(&token.to_owned()) {
            return Ok(hit);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer: TokenReview = self
            .create("/apis/authentication.k8s.io/v1/tokenreviews", &review)
            .await?;
        lock(&self.counts).token_reviews += 1;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) if u.username.as_deref().is_some_and(|n| !n.is_empty()) => {
                Some(UserInfo {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default().into_iter().collect(),
                })
            }
            _ => {
                if let Some(e) = status.error.filter(|e| !e.is_empty()) {
                    tracing::debug!(error = %e, "metrics: token not authenticated");
                }
                None
            }
        };
        lock(&self.authn).insert(token.to_owned(), user.clone(), AUTHN_CACHE_TTL);
        Ok(user)
    }

    /// Whether `user` may `verb` the non-resource `path`; `Err` when the SubjectAccessReview
    /// itself failed.
    pub async fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> client::Result<bool> {
        let key = (user.clone(), verb.to_owned(), path.to_owned());
        if let Some(hit) = lock(&self.authz).get(&key) {
            return Ok(hit);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer: SubjectAccessReview = self
            .create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                &review,
            )
            .await?;
        lock(&self.counts).access_reviews += 1;
        let status = answer.status.unwrap_or_default();
        let allowed = status.allowed && status.denied != Some(true);
        if !allowed && let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
            tracing::debug!(user = %user.name, %reason, "metrics: access review denied");
        }
        let ttl = if allowed {
            ALLOW_CACHE_TTL
        } else {
            DENY_CACHE_TTL
        };
        lock(&self.authz).insert(key, allowed, ttl);
        Ok(allowed)
    }

    /// `POST`s a review, retrying as client-go's webhook backoff does.
    async fn create<T>(&self, path: &str, review: &T) -> client::Result<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let body = serde_json::to_vec(review)
            .map_err(|e| client::Error::Other(format!("encoding the review for {path}: {e}")))?;
        let mut delay = RETRY_INITIAL;
        let mut attempt = 1;
        loop {
            let req = Request::post(path)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .body(Bytes::from(body.clone()))
                .map_err(|e| client::Error::Other(format!("building POST {path}: {e}")))?;
            match self.client.request_json::<T>(req).await {
                Ok(answer) => return Ok(answer),
                Err(e) if attempt < RETRY_STEPS && retriable(&e) => {
                    let jitter = 1.0 + RETRY_JITTER * fastrand::f64();
                    tracing::debug!(error = %e, attempt, "metrics: review failed; retrying");
                    tokio::time::sleep(delay.mul_f64(jitter)).await;
                    delay = delay.mul_f64(RETRY_FACTOR);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A review worth asking again: no answer, a timeout, 429 or 5xx.
fn retriable(e: &client::Error) -> bool {
    match e.code() {
        Some(code) => code == 429 || code >= 500,
        None => e.transport_kind().is_some() || e.is_timeout(),
    }
}

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive, as
/// client-go's bearer-token authenticator reads it); `None` for anything else, an empty token
/// or one longer than [`MAX_TOKEN_LEN`].
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let value = authorization?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && token.len() <= MAX_TOKEN_LEN)
        .then_some(token)
}

// ---------------------------------------------------------------------------------------------
// the listener

/// Go's `http.Error`: the message and a newline as plain text.
fn plain(status: StatusCode, message: &str) -> Response<ServeBody> {
    let mut r = Response::new(full(format!("{message}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        header::HeaderValue::from_static("nosniff"),
    );
    r
}

async fn answer(
    req: &Request<Incoming>,
    registry: &Mutex<Registry>,
    machinery: Option<&Machinery>,
    auth: &DelegatingAuth,
) -> Response<ServeBody> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // Every path is filtered first, as controller-runtime wraps its whole mux: an
    // unauthenticated caller learns nothing, not even which paths exist.
    let decision = auth
        .decide(authorization, req.method(), req.uri().path())
        .await;
    match decision {
        Decision::Allowed(_) => {}
        Decision::Unauthenticated => return plain(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Decision::Denied(user) => {
            return plain(
                StatusCode::FORBIDDEN,
                &format!("Authorization denied for user {}", user.name),
            );
        }
        Decision::Failed(msg) => return plain(StatusCode::INTERNAL_SERVER_ERROR, &msg),
    }
    if req.uri().path() != "/metrics" {
        if req.method() == Method::GET
            && let Some(r) = machinery.and_then(|m| m.route(req.uri().path(), req.uri().query()))
        {
            return r;
        }
        return plain(StatusCode::NOT_FOUND, "404 page not found");
    }
    let body = if req.method() == Method::HEAD {
        String::new()
    } else {
        encode_registry(registry)
    };
    let mut r = Response::new(full(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(CONTENT_TYPE),
    );
    r
}

/// Serves `registry` on `GET /metrics` over HTTPS at `addr`, every request authenticated and
/// authorized by `auth`, until `cancel` fires. Binds before it returns; the accept loop runs on
/// a task the handle owns. Connection limits are `limits` (the manager passes the serving
/// flags' values over [`crate::health::probe_serving_limits`]); the TLS handshake must finish
/// within their header timeout.
pub async fn serve_metrics_secure(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    tls: Arc<rustls::ServerConfig>,
    auth: Arc<DelegatingAuth>,
    cancel: CancellationToken,
    limits: apimachinery::serving::ServingLimits,
) -> std::io::Result<ServerHandle> {
    serve_metrics_secure_and_machinery(addr, registry, None, tls, auth, cancel, limits).await
}

/// [`serve_metrics_secure`], and with `machinery` also `/trace`, `/machinery` and
/// `/machinery/counts` ([`crate::machinery`]) behind the same authentication and
/// authorization (a reader needs `get` on the path as a non-resource URL).
pub async fn serve_metrics_secure_and_machinery(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    machinery: Option<Machinery>,
    tls: Arc<rustls::ServerConfig>,
    auth: Arc<DelegatingAuth>,
    cancel: CancellationToken,
    limits: apimachinery::serving::ServingLimits,
) -> std::io::Result<ServerHandle> {
    let limits = Arc::new(limits);
    let gate = ConnectionGate::new(limits.max_connections);
    let listener = apimachinery::serving::bind(addr)?;
    let local_addr = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let stop = cancel.child_token();
    let stop_task = stop.clone();
    let task = tokio::spawn(async move {
        let conns = TaskTracker::new();
        let name = format!("metrics https {local_addr}");
        let stop = stop_task.cancelled();
        accept_connections(&name, &listener, &gate, stop, |stream, peer, slot| {
            let (registry, auth, limits) = (registry.clone(), auth.clone(), limits.clone());
            let machinery = machinery.clone();
            let (acceptor, stop_conn) = (acceptor.clone(), stop_task.clone());
            conns.spawn(async move {
                let _slot = slot;
                let handshake =
                    tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
                let tls_stream = match handshake.await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(peer = %peer, error = %e, "metrics: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(peer = %peer, "metrics: TLS handshake timed out");
                        return;
                    }
                };
                let activity = Activity::new();
                let svc_activity = activity.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let (registry, auth) = (registry.clone(), auth.clone());
                    let machinery = machinery.clone();
                    let in_flight = svc_activity.begin();
                    async move {
                        let resp = answer(&req, &registry, machinery.as_ref(), &auth).await;
                        Ok::<_, Infallible>(resp.map(|b| InFlightBody::new(b, in_flight)))
                    }
                });
                serve_http1_connection(tls_stream, service, &activity, &limits, &stop_conn, peer)
                    .await;
            });
        })
        .await;
        conns.close();
        conns.wait().await;
    });
    Ok(ServerHandle::new(local_addr, stop, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_as_client_go_reads_them() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(None), None);
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN_LEN + 1));
        assert_eq!(bearer_token(Some(&long)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn cache_entries_expire_and_the_cache_stays_bounded() {
        let mut c: TtlCache<u32, bool> = TtlCache::new(3);
        c.insert(1, true, Duration::from_secs(10));
        c.insert(2, false, Duration::from_secs(30));
        assert_eq!(c.get(&1), Some(true));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(c.get(&1), None, "expired");
        assert_eq!(c.get(&2), Some(false));
        c.insert(3, true, Duration::from_secs(5));
        c.insert(4, true, Duration::from_secs(50));
        c.insert(5, true, Duration::from_secs(50));
        assert_eq!(c.len(), 3);
        // Full: the entry closest to expiry (3) made room for 5.
        assert_eq!(c.get(&3), None);
        assert_eq!(c.get(&2), Some(false));
        assert_eq!(c.get(&5), Some(true));
    }

    #[test]
    fn a_cert_dir_with_both_files_is_served_and_half_a_pair_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // Empty: a self-signed certificate instead.
        assert!(metrics_tls_config(Some(dir.path())).is_ok());
        let (chain, key) = self_signed().unwrap();
        let cert_pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64_lines(chain[0].as_ref())
        );
        std::fs::write(dir.path().join(CERT_FILE), &cert_pem).unwrap();
        let err = metrics_tls_config(Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tls.key") && err.contains("missing"), "{err}");
        let key_pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64_lines(key.secret_der())
        );
        std::fs::write(dir.path().join(KEY_FILE), key_pem).unwrap();
        let config = metrics_tls_config(Some(dir.path())).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
        let err = metrics_tls_config(Some(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tls.key"), "{err}");
    }

    fn base64_lines(der: &[u8]) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        b64.as_bytes()
            .chunks(64)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }
}
