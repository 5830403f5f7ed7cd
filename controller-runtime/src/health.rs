//! # Health probes: `/healthz` (am I alive?) and `/readyz` (may I get traffic / take over?)
//!
//! The kubelet probes every container. A failing **liveness** probe restarts the container; a
//! failing **readiness** probe marks the pod not ready (no Service traffic, and a rolling update
//! waits for it). controller-runtime serves both on `:8081`, the default here too; the
//! Deployment in `artifacts/deploy` points its probes there.
//!
//! ## Liveness: is the process making progress?
//!
//! A controller can be "up" and still dead: its worker loop deadlocked, or its watch failing
//! forever. [`HealthState`] fails `/healthz` when any of these holds:
//!
//! * a **loop** registered with [`HealthState::register_loop`] has not called
//!   [`LoopHandle::tick`] within its `stall_after` (a stuck process loop);
//! * a **watch** ([`HealthState::watch_health`]) has been answered 403 Forbidden, with no
//!   progress since, for longer than [`HealthOptions::forbidden_after`] (5 min): its RBAC is
//!   wrong and the cache will never fill. A restart will not fix RBAC, but a crash-looping pod
//!   is what makes a human look;
//! * a watch has relisted [`HealthOptions::max_relists`] (10) times within
//!   [`HealthOptions::relist_window`] (10 min) with no watch event in between: it is stuck in a
//!   relist loop (say, a list that always expires) and its cache is not current;
//! * a check added with [`HealthState::add_liveness_check`] fails (the leader elector's
//!   [`check`](sample_client_go::leaderelection::LeaderElector::check): a leader whose renewals are stuck).
//!
//! ## Readiness: are the caches synced?
//!
//! `/readyz` succeeds when every readiness check ([`HealthState::add_readiness_check`], a
//! closure such as `move || informer.has_synced()`) returns true, and the API server is
//! reachable: when **every** watch has been failing (a list or watch that cannot connect, or
//! ends in an error other than 410) for longer than [`HealthOptions::unreachable_after`]
//! (30 s), the `watches` check fails and names each watch with its last error. A single failing
//! watch does not make the process unready (its own cache is stale, the others are fine);
//! a lost API server does, so a Service stops sending traffic and a standby is not chosen on the
//! strength of stale caches. Once any watch lists, opens or delivers an event again, the check
//! passes.
//!
//! A lost API server is deliberately **not** a liveness failure: restarting the process cannot
//! bring the server back, and a crash loop would only add a cold start (every cache relisted) to
//! the outage. The reflectors keep retrying with backoff, and carry on from their
//! resourceVersion when the server returns. Readiness does **not** depend
//! on leadership: a standby replica syncs its informers and is ready, so it can take over
//! without a cold start (leader election gates the workers, not the informers; see
//! [`sample_client_go::leaderelection`]).
//!
//! ## Use
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//! use sample_controller_runtime::health::{HealthState, serve_health};
//! use tokio_util::sync::CancellationToken;
//!
//! let health = HealthState::new();
//! let synced = Arc::new(AtomicBool::new(false)); // stands in for informer.has_synced()
//! let s = synced.clone();
//! health.add_readiness_check("informer:ats", move || s.load(Ordering::SeqCst));
//! let worker_loop = health.register_loop("workers", Duration::from_secs(60));
//! worker_loop.tick(); // each time round the loop
//!
//! assert!(health.is_live() && !health.is_ready());
//! synced.store(true, Ordering::SeqCst);
//! assert!(health.is_ready());
//!
//! let cancel = CancellationToken::new();
//! let server = serve_health("127.0.0.1:0".parse().unwrap(), health, cancel.clone()).await?;
//! println!("curl http://{}/readyz", server.local_addr());
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! A reflector reports through a [`WatchHealth`] from [`HealthState::watch_health`]: `forbidden()`
//! when a list or watch is answered 403, `listed()` when a list succeeds (ending a 403 streak),
//! `relisted()` on every successful list after the first, `progress()` when a watch event or
//! bookmark arrives. The manager wires this up for every informer: its
//! [`SharedInformerFactory`](sample_client_go::cache::SharedInformerFactory) is built
//! [`with_watch_health`](sample_client_go::cache::SharedInformerFactory::with_watch_health), so each
//! informer's reflector reports under the informer's resource name (`watch:ats`,
//! `watch:pods`, ...), and `/healthz` names the resource whose watch is stuck.
//!
//! ## Responses
//!
//! As the Kubernetes API server's own `/healthz?verbose`: one line per check, `[+]name ok` or
//! `[-]name failed: reason`, then `healthz check passed` (200) or `healthz check failed` (500).
//! `/livez` is an alias of `/healthz`.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use apimachinery::serving::{
    Activity, ConnectionGate, InFlight, ServingLimits, accept_connections,
};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::machinery::{ServeBody, full};

/// Default probe address, as controller-runtime's (`:8081`).
pub const DEFAULT_PROBE_ADDR: &str = "0.0.0.0:8081";

/// Thresholds of the watch liveness rules. [`Default`]: 5 min, 10 relists, 10 min.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthOptions {
    /// How long a watch may be answered 403 with no progress before liveness fails.
    pub forbidden_after: Duration,
    /// Relists within [`HealthOptions::relist_window`], with no watch event between them, that
    /// fail liveness.
    pub max_relists: usize,
    /// The window of the relist rule.
    pub relist_window: Duration,
    /// How long every watch must have been failing before `/readyz` reports the API server
    /// unreachable.
    pub unreachable_after: Duration,
}

impl Default for HealthOptions {
    fn default() -> Self {
        HealthOptions {
            forbidden_after: Duration::from_secs(300),
            max_relists: 10,
            relist_window: Duration::from_secs(600),
            unreachable_after: Duration::from_secs(30),
        }
    }
}

type ReadyFn = dyn Fn() -> bool + Send + Sync;
type LiveFn = dyn Fn() -> Result<(), String> + Send + Sync;

#[derive(Debug)]
struct LoopState {
    last_tick: Instant,
    stall_after: Duration,
}

#[derive(Debug, Default)]
struct WatchState {
    forbidden_since: Option<Instant>,
    relists: VecDeque<Instant>,
    failing_since: Option<Instant>,
    last_error: String,
}

#[derive(Default)]
struct Inner {
    options: HealthOptions,
    loops: BTreeMap<String, LoopState>,
    watches: BTreeMap<String, WatchState>,
    liveness: Vec<(String, Arc<LiveFn>)>,
    readiness: Vec<(String, Arc<ReadyFn>)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Liveness and readiness state of the process. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct HealthState {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthState")
            .field("live", &self.is_live())
            .field("ready", &self.is_ready())
            .finish()
    }
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// The check's name.
    pub name: String,
    /// `None` when it passed; the reason when it failed.
    pub failure: Option<String>,
}

/// A registered process loop; call [`LoopHandle::tick`] each time round.
#[derive(Clone)]
pub struct LoopHandle {
    name: String,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for LoopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopHandle")
            .field("name", &self.name)
            .finish()
    }
}

impl LoopHandle {
    /// The loop is alive now.
    pub fn tick(&self) {
        if let Some(l) = lock(&self.inner).loops.get_mut(&self.name) {
            l.last_tick = Instant::now();
        }
    }
}

/// What one reflector reports about its list/watch health.
#[derive(Clone)]
pub struct WatchHealth {
    name: String,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for WatchHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHealth")
            .field("name", &self.name)
            .finish()
    }
}

impl WatchHealth {
    fn with<R>(&self, f: impl FnOnce(&mut WatchState, &HealthOptions) -> R) -> R {
        let mut inner = lock(&self.inner);
        let Inner {
            options, watches, ..
        } = &mut *inner;
        f(watches.entry(self.name.clone()).or_default(), options)
    }

    /// A list or watch was answered 403 Forbidden.
    pub fn forbidden(&self) {
        self.with(|w, _| {
            w.forbidden_since.get_or_insert_with(Instant::now);
        });
    }

    /// The reflector relisted (after a 410, a failed watch, or a resync of the list).
    pub fn relisted(&self) {
        self.with(|w, o| {
            let now = Instant::now();
            w.relists.push_back(now);
            while w
                .relists
                .front()
                .is_some_and(|t| now.duration_since(*t) > o.relist_window)
            {
                w.relists.pop_front();
            }
        });
    }

    /// A list succeeded: a 403 streak is over (the reflector can read again). The relist
    /// count is kept: a reflector that lists fine but whose watches always fail still relists
    /// endlessly.
    pub fn listed(&self) {
        self.with(|w, _| {
            w.forbidden_since = None;
            w.failing_since = None;
        });
    }

    /// The watch delivered an event or bookmark: the reflector is making progress.
    pub fn progress(&self) {
        self.with(|w, _| {
            w.forbidden_since = None;
            w.failing_since = None;
            w.relists.clear();
        });
    }

    /// A list or watch failed (could not connect, or ended in an error other than 410):
    /// counts towards the readiness rule for a lost API server.
    pub fn failed(&self, error: &str) {
        self.with(|w, _| {
            w.failing_since.get_or_insert_with(Instant::now);
            w.last_error = error.chars().take(200).collect();
        });
    }

    /// A watch was opened: the API server answers again.
    pub fn reachable(&self) {
        self.with(|w, _| {
            w.failing_since = None;
        });
    }
}

/// A reflector reports to `/healthz` and `/readyz` through this (see
/// [`sample_client_go::cache::reflector`], "Health").
impl sample_client_go::cache::WatchObserver for WatchHealth {
    fn forbidden(&self) {
        WatchHealth::forbidden(self);
    }
    fn listed(&self) {
        WatchHealth::listed(self);
    }
    fn relisted(&self) {
        WatchHealth::relisted(self);
    }
    fn progress(&self) {
        WatchHealth::progress(self);
    }
    fn failed(&self, error: &str) {
        WatchHealth::failed(self, error);
    }
    fn reachable(&self) {
        WatchHealth::reachable(self);
    }
}

impl HealthState {
    /// What an informer factory hands each new informer's reflector
    /// ([`SharedInformerFactory::with_watch_health`](sample_client_go::cache::SharedInformerFactory::with_watch_health)):
    /// a [`WatchHealth`] under the informer's name.
    pub fn watch_observers(
        &self,
    ) -> impl Fn(&str) -> Arc<dyn sample_client_go::cache::WatchObserver> + Send + Sync + 'static
    {
        let state = self.clone();
        move |name| Arc::new(state.watch_health(name))
    }

    /// A state with the default thresholds and no checks (live and ready).
    pub fn new() -> Self {
        HealthState::with_options(HealthOptions::default())
    }

    /// A state with the given thresholds.
    pub fn with_options(options: HealthOptions) -> Self {
        HealthState {
            inner: Arc::new(Mutex::new(Inner {
                options,
                ..Default::default()
            })),
        }
    }

    /// Registers a loop that must tick at least every `stall_after`; it counts as having just
    /// ticked.
    pub fn register_loop(&self, name: &str, stall_after: Duration) -> LoopHandle {
        lock(&self.inner).loops.insert(
            name.to_owned(),
            LoopState {
                last_tick: Instant::now(),
                stall_after,
            },
        );
        LoopHandle {
            name: name.to_owned(),
            inner: self.inner.clone(),
        }
    }

    /// Removes a loop (it ended on purpose, e.g. at shutdown).
    pub fn unregister_loop(&self, name: &str) {
        lock(&self.inner).loops.remove(name);
    }

    /// The handle a reflector named `name` reports through.
    pub fn watch_health(&self, name: &str) -> WatchHealth {
        lock(&self.inner)
            .watches
            .entry(name.to_owned())
            .or_default();
        WatchHealth {
            name: name.to_owned(),
            inner: self.inner.clone(),
        }
    }

    /// Adds a liveness check; `Err(reason)` fails `/healthz`.
    pub fn add_liveness_check(
        &self,
        name: &str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        lock(&self.inner)
            .liveness
            .push((name.to_owned(), Arc::new(check)));
    }

    /// Adds a readiness check (`move || informer.has_synced()`); `false` fails `/readyz`.
    pub fn add_readiness_check(
        &self,
        name: &str,
        check: impl Fn() -> bool + Send + Sync + 'static,
    ) {
        lock(&self.inner)
            .readiness
            .push((name.to_owned(), Arc::new(check)));
    }

    /// Every liveness rule's outcome, in a stable order.
    pub fn liveness(&self) -> Vec<CheckResult> {
        let now = Instant::now();
        let (mut out, checks) = {
            let inner = lock(&self.inner);
            let mut out = Vec::new();
            for (name, l) in &inner.loops {
                let silent = now.duration_since(l.last_tick);
                out.push(CheckResult {
                    name: format!("loop:{name}"),
                    failure: (silent > l.stall_after).then(|| {
                        format!(
                            "no progress for {:.0?} (limit {:.0?})",
                            silent, l.stall_after
                        )
                    }),
                });
            }
            for (name, w) in &inner.watches {
                let o = &inner.options;
                let mut failure = None;
                if let Some(since) = w.forbidden_since {
                    let d = now.duration_since(since);
                    if d > o.forbidden_after {
                        failure = Some(format!("watch answered 403 Forbidden for {d:.0?}"));
                    }
                }
                let recent = w
                    .relists
                    .iter()
                    .filter(|t| now.duration_since(**t) <= o.relist_window)
                    .count();
                if failure.is_none() && recent >= o.max_relists {
                    failure = Some(format!(
                        "{recent} relists within {:.0?} without a watch event",
                        o.relist_window
                    ));
                }
                out.push(CheckResult {
                    name: format!("watch:{name}"),
                    failure,
                });
            }
            (out, inner.liveness.clone())
        };
        // User checks run without the lock held: they may take locks of their own.
        for (name, check) in checks {
            out.push(CheckResult {
                name,
                failure: check().err(),
            });
        }
        out
    }

    /// Every readiness check's outcome, in registration order, then (when any reflector
    /// reports) the `watches` check: failed when every watch has been failing for longer than
    /// [`HealthOptions::unreachable_after`].
    ///
    /// A check named `informer:<name>` that fails says why when the reflector of the watch
    /// `<name>` has reported an error: `not synced: <its last list or watch error>`, so a cache
    /// that cannot sync at all names its cause.
    pub fn readiness(&self) -> Vec<CheckResult> {
        let (checks, watches, last_errors) = {
            let inner = lock(&self.inner);
            let last_errors: BTreeMap<String, String> = inner
                .watches
                .iter()
                .filter(|(_, w)| w.failing_since.is_some() && !w.last_error.is_empty())
                .map(|(name, w)| (name.clone(), w.last_error.clone()))
                .collect();
            (
                inner.readiness.clone(),
                self.unreachable(&inner),
                last_errors,
            )
        };
        let mut out: Vec<CheckResult> = checks
            .into_iter()
            .map(|(name, check)| {
                let failure = (!check()).then(|| {
                    match name
                        .strip_prefix("informer:")
                        .and_then(|w| last_errors.get(w))
                    {
                        Some(error) => format!("not synced: {error}"),
                        None => "not synced".to_owned(),
                    }
                });
                CheckResult { failure, name }
            })
            .collect();
        out.extend(watches);
        out
    }

    fn unreachable(&self, inner: &Inner) -> Option<CheckResult> {
        if inner.watches.is_empty() {
            return None;
        }
        let now = Instant::now();
        let limit = inner.options.unreachable_after;
        let mut failing = Vec::new();
        for (name, w) in &inner.watches {
            match w.failing_since {
                Some(since) if now.duration_since(since) > limit => {
                    failing.push(format!(
                        "watch:{name} (for {:.0?}: {})",
                        now.duration_since(since),
                        w.last_error
                    ));
                }
                _ => {
                    return Some(CheckResult {
                        name: "watches".into(),
                        failure: None,
                    });
                }
            }
        }
        Some(CheckResult {
            name: "watches".into(),
            failure: Some(format!(
                "every watch failing for more than {limit:.0?}, the API server looks unreachable: {}",
                failing.join(", ")
            )),
        })
    }

    /// True when every liveness rule passes.
    pub fn is_live(&self) -> bool {
        self.liveness().iter().all(|c| c.failure.is_none())
    }

    /// True when every readiness check passes.
    pub fn is_ready(&self) -> bool {
        self.readiness().iter().all(|c| c.failure.is_none())
    }
}

fn report(kind: &str, results: &[CheckResult]) -> (StatusCode, String) {
    let mut body = String::new();
    let mut ok = true;
    for r in results {
        match &r.failure {
            None => {
                let _ = writeln!(body, "[+]{} ok", r.name);
            }
            Some(reason) => {
                ok = false;
                let _ = writeln!(body, "[-]{} failed: {reason}", r.name);
            }
        }
    }
    if ok {
        let _ = writeln!(body, "{kind} check passed");
        (StatusCode::OK, body)
    } else {
        let _ = writeln!(body, "{kind} check failed");
        (StatusCode::INTERNAL_SERVER_ERROR, body)
    }
}

/// Serves `/healthz` (and `/livez`) and `/readyz` from `health` at `addr` until `cancel`
/// fires. Binds before it returns; the accept loop runs on a task the handle owns.
pub async fn serve_health(
    addr: SocketAddr,
    health: HealthState,
    cancel: CancellationToken,
) -> std::io::Result<ServerHandle> {
    serve_health_with(addr, health, cancel, probe_serving_limits()).await
}

/// [`serve_health`] under explicit connection limits (the manager's `--max-connections`,
/// `--header-read-timeout`, `--idle-timeout`).
pub async fn serve_health_with(
    addr: SocketAddr,
    health: HealthState,
    cancel: CancellationToken,
    limits: ServingLimits,
) -> std::io::Result<ServerHandle> {
    serve_routes_with(addr, cancel, limits, move |path, _query| {
        let (status, body) = match path {
            "/healthz" | "/livez" => report("healthz", &health.liveness()),
            "/readyz" => report("readyz", &health.readiness()),
            _ => return None,
        };
        Some(
            Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(full(body)),
        )
    })
    .await
}

/// A running HTTP server (metrics or probes).
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl ServerHandle {
    /// A handle on a server task that stops when `cancel` fires.
    pub(crate) fn new(
        local_addr: SocketAddr,
        cancel: CancellationToken,
        task: JoinHandle<()>,
    ) -> Self {
        ServerHandle {
            local_addr,
            cancel,
            task,
        }
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits until the server has stopped (its token was cancelled and open connections
    /// finished their requests).
    pub async fn join(self) {
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!(error = %e, "HTTP server task panicked");
        }
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.join().await;
    }
}

/// A route's answer: `None` is 404.
pub(crate) type Routed = Option<Result<Response<ServeBody>, http::Error>>;

/// A response body that keeps its request counted as in flight until it is dropped, so a
/// streaming answer (a `/trace` stream) is never closed as idle.
pub(crate) struct InFlightBody {
    body: ServeBody,
    _in_flight: InFlight,
}

impl InFlightBody {
    pub(crate) fn new(body: ServeBody, in_flight: InFlight) -> Self {
        InFlightBody {
            body,
            _in_flight: in_flight,
        }
    }
}

impl hyper::body::Body for InFlightBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Connection limits of the metrics and probe servers: at most 1,024 connections (more are
/// closed on accept), 10 s to send the request headers, 90 s idle keep-alive, a 64 KiB read
/// buffer per connection (these servers read nothing but a request line and headers).
pub fn probe_serving_limits() -> ServingLimits {
    ServingLimits {
        max_connections: 1024,
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(90),
        http2_max_concurrent_streams: 0,
        max_buf_size: 64 * 1024,
    }
}

/// Serves one accepted HTTP/1.1 connection (plain TCP, or TLS once its handshake is done)
/// under `limits` until it ends: hyper's header-read timeout and buffer bound apply, the
/// connection is closed gracefully when `activity` says it has been idle too long (see
/// [`apimachinery::serving::Activity`]) and when `stop` fires. Shared by the probe, metrics
/// and secure-metrics servers.
pub(crate) async fn serve_http1_connection<I, S, B>(
    io: I,
    service: S,
    activity: &Activity,
    limits: &ServingLimits,
    stop: &CancellationToken,
    peer: SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192))
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut check = tokio::time::interval(limits.check_interval());
    let result = loop {
        tokio::select! {
            r = conn.as_mut() => break r,
            _ = stop.cancelled() => {
                conn.as_mut().graceful_shutdown();
                break conn.await;
            }
            _ = check.tick() => {
                if activity.expired(limits) {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn.as_mut()).await;
                    break Ok(());
                }
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
    }
}

/// A tiny HTTP/1.1 server: `GET`/`HEAD` of a path answered by `route` (`None` is 404), under
/// connection limits ([`apimachinery::serving`]; the manager's are [`probe_serving_limits`]
/// with its connection flags applied): a connection
/// beyond `max_connections` is closed at once, one that sends no request within
/// `header_read_timeout` or stays idle for `idle_timeout` is closed, and hyper's HTTP/1 header
/// timeout and buffer bound apply.
pub(crate) async fn serve_routes_with<F>(
    addr: SocketAddr,
    cancel: CancellationToken,
    limits: ServingLimits,
    route: F,
) -> std::io::Result<ServerHandle>
where
    F: Fn(&str, Option<&str>) -> Routed + Send + Sync + 'static,
{
    let limits = Arc::new(limits);
    let gate = ConnectionGate::new(limits.max_connections);
    let listener = apimachinery::serving::bind(addr)?;
    let local_addr = listener.local_addr()?;
    let route = Arc::new(route);
    let stop = cancel.child_token();
    let stop_task = stop.clone();
    let task = tokio::spawn(async move {
        let conns = TaskTracker::new();
        let name = format!("http {local_addr}");
        let stop = stop_task.cancelled();
        accept_connections(&name, &listener, &gate, stop, |stream, peer, slot| {
            let route = route.clone();
            let stop_conn = stop_task.clone();
            let limits = limits.clone();
            conns.spawn(async move {
                let _slot = slot;
                let activity = Activity::new();
                let svc_activity = activity.clone();
                let service = service_fn(move |req: Request<Incoming>| {
                    let route = route.clone();
                    let in_flight = svc_activity.begin();
                    async move {
                        let resp = answer(&req, route.as_ref());
                        Ok::<_, Infallible>(resp.map(|b| InFlightBody::new(b, in_flight)))
                    }
                });
                serve_http1_connection(stream, service, &activity, &limits, &stop_conn, peer).await;
            });
        })
        .await;
        conns.close();
        conns.wait().await;
    });
    Ok(ServerHandle {
        local_addr,
        cancel: stop,
        task,
    })
}

fn answer<F>(req: &Request<Incoming>, route: &F) -> Response<ServeBody>
where
    F: Fn(&str, Option<&str>) -> Routed,
{
    let plain = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(full(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match route(req.uri().path(), req.uri().query()) {
        Some(Ok(resp)) => resp,
        Some(Err(e)) => {
            tracing::error!(error = %e, "building a response failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
        }
        None => plain(StatusCode::NOT_FOUND, "not found\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stalled_loop_fails_liveness() {
        let h = HealthState::new();
        let l = h.register_loop("worker", Duration::from_secs(30));
        assert!(h.is_live());
        tokio::time::advance(Duration::from_secs(20)).await;
        l.tick();
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(h.is_live());
        tokio::time::advance(Duration::from_secs(11)).await;
        let failed: Vec<_> = h
            .liveness()
            .into_iter()
            .filter(|c| c.failure.is_some())
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].name, "loop:worker");
        h.unregister_loop("worker");
        assert!(h.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_stuck_on_403_fails_liveness_after_the_grace() {
        let h = HealthState::new();
        let w = h.watch_health("ats");
        w.forbidden();
        tokio::time::advance(Duration::from_secs(200)).await;
        w.forbidden();
        assert!(h.is_live(), "the streak is measured from the first 403");
        tokio::time::advance(Duration::from_secs(101)).await;
        assert!(!h.is_live());
        w.progress();
        assert!(h.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn endless_relists_fail_liveness_but_spread_out_relists_do_not() {
        let h = HealthState::new();
        let w = h.watch_health("ats");
        for _ in 0..9 {
            w.relisted();
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        assert!(h.is_live());
        w.relisted();
        assert!(!h.is_live());
        w.progress();
        assert!(h.is_live());
        // One relist an hour (a quiet resource whose resourceVersion expires) is fine.
        for _ in 0..20 {
            w.relisted();
            tokio::time::advance(Duration::from_secs(3600)).await;
        }
        assert!(h.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn a_successful_list_ends_a_403_streak_but_not_a_relist_loop() {
        let h = HealthState::new();
        let w = h.watch_health("ats");
        w.forbidden();
        tokio::time::advance(Duration::from_secs(301)).await;
        assert!(!h.is_live());
        w.listed();
        assert!(h.is_live());
        for _ in 0..10 {
            w.listed();
            w.relisted();
        }
        let failed: Vec<_> = h
            .liveness()
            .into_iter()
            .filter_map(|c| c.failure.map(|f| (c.name, f)))
            .collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].0, "watch:ats");
        assert!(failed[0].1.starts_with("10 relists within"), "{failed:?}");
        w.progress();
        assert!(h.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_api_server_fails_readiness_naming_the_watches_but_not_liveness() {
        let h = HealthState::new();
        let ats = h.watch_health("ats");
        let pods = h.watch_health("pods");
        ats.progress();
        pods.progress();
        assert!(h.is_ready());
        ats.failed("connection refused");
        tokio::time::advance(Duration::from_secs(60)).await;
        // One watch failing is not an outage.
        assert!(h.is_ready());
        pods.failed("connection refused");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(h.is_ready(), "inside the 30 s threshold");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!h.is_ready());
        let (code, body) = report("readyz", &h.readiness());
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body.contains("[-]watches failed: every watch failing for more than 30s"),
            "{body}"
        );
        assert!(
            body.contains("watch:ats (for 91s: connection refused)"),
            "{body}"
        );
        assert!(
            body.contains("watch:pods (for 31s: connection refused)"),
            "{body}"
        );
        // Liveness stays: a restart would not bring the server back.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(h.is_live());
        // Any watch answering again ends it.
        pods.reachable();
        assert!(h.is_ready());
        let (_, body) = report("readyz", &h.readiness());
        assert!(body.contains("[+]watches ok"), "{body}");
    }

    #[test]
    fn readiness_is_all_checks() {
        let h = HealthState::new();
        let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = synced.clone();
        h.add_readiness_check("informer:ats", move || {
            s.load(std::sync::atomic::Ordering::SeqCst)
        });
        h.add_readiness_check("informer:pods", || true);
        assert!(!h.is_ready());
        let (code, body) = report("readyz", &h.readiness());
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body.contains("[-]informer:ats failed: not synced\n"),
            "{body}"
        );
        assert!(body.contains("[+]informer:pods ok"));
        // A cache that cannot sync says why: its reflector's last error.
        h.watch_health("ats")
            .failed("403 (Forbidden): ats is forbidden: User \"bob\" cannot list");
        let (_, body) = report("readyz", &h.readiness());
        assert!(
            body.contains("[-]informer:ats failed: not synced: 403 (Forbidden): ats is forbidden"),
            "{body}"
        );
        synced.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(h.is_ready());
        h.add_liveness_check("leader", || Err("renewals stuck".into()));
        assert!(!h.is_live());
    }
}

#[cfg(test)]
mod connection_limit_tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn closed_by_server(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    /// A full server closes new connections at once; idle ones are closed after the header
    /// timeout; then a real request is served again.
    #[tokio::test]
    async fn idle_connections_are_bounded_and_closed() {
        let limits = ServingLimits {
            max_connections: 20,
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
            ..probe_serving_limits()
        };
        let server = serve_routes_with(
            "127.0.0.1:0".parse().unwrap(),
            CancellationToken::new(),
            limits,
            |path, _| (path == "/healthz").then(|| Response::builder().body(full("ok"))),
        )
        .await
        .unwrap();
        let addr = server.local_addr();
        let mut idle = Vec::new();
        for _ in 0..20 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Let the server accept all twenty before the next one arrives.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut extra = TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_by_server(&mut extra).await,
            "21st connection kept open"
        );
        for s in &mut idle {
            assert!(closed_by_server(s).await, "idle connection never closed");
        }
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(30), s.read_to_string(&mut answer))
            .await
            .expect("no answer")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }
}
