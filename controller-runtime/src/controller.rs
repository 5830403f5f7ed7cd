//! # The worker loop every controller shares
//!
//! A controller is written the way sample-controller's `controller.go` reads: the struct, the
//! constructor that wires informers to event handlers, `run`, and `sync_handler` (the five
//! operators of `sample-operators` are such structs; [`crate::builder`] writes one for you).
//! What every controller shares lives here: the **worker loop** that turns the work queue into
//! calls of `sync_handler`, exactly as the book draws it:
//!
//! ```text
//! informer handlers ──key──▶ RateLimitingQueue ──get──▶ worker ──▶ sync_handler(key)
//!                                 ▲                                    │
//!                                 │  Err(e)       → add_rate_limited   │ (backoff 5 ms … 1000 s)
//!                                 ├─ Ok(Some(d))  → forget + add_after │ (look again at a set time)
//!                                 └─ Ok(None)     → forget             │ (done: clear failures)
//!                                      and always → done(key) ◀────────┘
//! ```
//!
//! [`process_next_work_item`] is the book's `processNextWorkItem` with its three branches, plus
//! what a production controller needs and the book leaves out:
//!
//! * **Panics are caught.** A panic inside `sync_handler` (a bug, or an unexpected object) is
//!   caught at the worker, counted in [`SyncStats::panics`], logged with the key, and the key is
//!   retried with backoff like any error. The process and the other keys carry on; client-go
//!   relies on `HandleCrash`, which by default re-panics and kills the process.
//! * **A per-sync deadline.** A sync that hangs (a request with no timeout, a deadlock) would
//!   hold its key and its worker for ever. The sync runs under `tokio::time::timeout`; past the
//!   deadline it is dropped, counted in [`SyncStats::timeouts`], and retried with backoff.
//! * **`forget` before `add_after`.** cnat's loop deferred a key with `AddAfter` without
//!   `Forget`, so earlier failures kept inflating the next backoff; here any success clears the
//!   failure history, and the deferral is a plain timer.
//!
//! Workers stop taking new work when the manager's shutdown token is cancelled; the manager
//! then calls `shut_down_with_drain` on the queue, which waits for the keys still processing.
//!
//! ## Traces
//!
//! Every sync runs inside a `tracing` span, and every request an [`Api`](sample_client_go::client::Api)
//! sends runs inside a child span of whatever span is current, so a sync's API calls nest under
//! it:
//!
//! | span | level | parent | fields |
//! |---|---|---|---|
//! | `sync` | debug | none (a root: one trace per sync) | `controller` (`at`, `tdset`, ...), `key` (`ns/name`), `result` (`success`, `requeue_after`, `error`: the `controller_runtime_reconcile_total` label), `requeue` (the key went back on the queue: after a time or rate-limited), `requeue_after_ms` (with `requeue_after`) |
//! | `request` | debug | the current span (a `sync`'s) | `verb` (HTTP method), `resource` (plural), `subresource` (`status`, `scale` or empty), `code` (the HTTP status of the final answer, retries included), `error` (when no answer came) |
//!
//! They are `debug` spans: at `-v 0` no subscriber enables them and they cost a disabled-span
//! check; from `-v 1` on the log lines written inside a sync carry its context
//! (`sync{controller="at" key="default/example-at"}:request{verb=PUT ...}`). Watches are not
//! spanned (they outlive any sync). With `--otlp-endpoint` both are exported over OTLP/HTTP
//! ([`crate::otlp`]), whatever `-v`.
//!
//! ## What an operator writes, and what it gets
//!
//! Everything around `sync_handler` is the same in every `controller.go`: `Run` waits for the
//! informer caches, then starts the workers; the manager asks each controller its name, whether
//! it has synced, and to drain its queue. Here an operator writes only what is its own:
//!
//! ```text
//! impl SyncHandler for XController   sync_handler(key): the reconcile logic (+ is_conflict)
//! impl Operator for XController      NAME, and its Workers: the queue, the counters, and the
//!                                    handler registrations that say its caches have synced
//! ```
//!
//! and receives the rest once, for all operators: [`run`] (the book's `Run`: wait for caches,
//! then [`run_workers`]), and [`Controller`], the object-safe face the manager holds as
//! `Arc<dyn Controller>`, implemented for every [`Operator`] by one blanket `impl`. A new
//! operator is therefore a struct, a constructor that wires informers to its queue, these
//! two small impls, and a [`Registration`](crate::manager::Registration) the manager runs (its
//! name, how the manager builds it, its CRD and the start-up check of that CRD);
//! `sample_operators::controllers::myapp` is the smallest complete one, and
//! [`Builder`](crate::builder::Builder) writes all of it for the common case.
//!
//! Every `sync_handler` starts the same way too, with [`object_to_sync`]: the object its key
//! names, from the operator's lister, or nothing to do (deleted since it was queued, its
//! [`Expectations`] forgotten). An object the sharder drains from this shard never reaches it:
//! the worker releases it instead ([`Workers::release_drained`]).
//!
//! Other shared pieces: [`Clock`] (wall-clock time that follows tokio's paused clock),
//! [`Expectations`] ("I created this; the lister has not seen it yet"), and [`crate::owned`]
//! (owner references, `handleObject`, drift, and the error type of the operators that own
//! objects).

pub use crate::expectations::Expectations;
/// The wall clock that follows tokio's clock (`apimachinery::clock`), re-exported for the
/// operators' schedules.
pub use apimachinery::clock::Clock;

/// A work queue's key: `namespace/name` (or `name`), as [`sample_client_go::cache::key_of`] makes it.
///
/// A [`SmallString`](sample_client_go::cache::SmallString): a key of up to 22 bytes (`default/at-1234`)
/// is kept inline, where a `String` took an allocation, and the queue holds each queued key
/// twice (its FIFO and its dirty/processing map). A burst of 10,000 Ats queues all of them at
/// once.
pub type QueueKey = sample_client_go::cache::SmallString;

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::metrics::{ControllerMetrics, ReconcileResult};
use sample_client_go::cache::{CacheObject, HandlerRegistration, InformerError, Lister};
use sample_client_go::client::{self, Client};
use sample_client_go::workqueue::RateLimitingQueue;

/// The default per-sync deadline: far above any healthy sync (a few API calls), far below
/// "stuck for ever".
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller's reconcile function for one key. `Ok(None)`: done until the next event.
/// `Ok(Some(d))`: look again after `d` (a time-driven requeue, not a failure). `Err`: retry
/// with backoff.
pub trait SyncHandler: Send + Sync + 'static {
    /// What a failed sync reports (logged with the key).
    type Error: Display + Send;

    /// Reconciles the object named by `key` (`namespace/name`).
    fn sync_handler(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Duration>, Self::Error>> + Send;

    /// Whether `err` is an optimistic-concurrency conflict (HTTP 409 on a write based on a
    /// cached copy that was already out of date). Such a sync is retried with backoff like any
    /// failure, but it is an expected race that heals itself once the informer catches up, so
    /// the worker logs it at INFO rather than ERROR. The default says no.
    fn is_conflict(_err: &Self::Error) -> bool {
        false
    }

    /// Called after `sync_handler(key)` returned an error that is not a conflict, with the
    /// error's message: records a Warning event `ReconciliationFailed` on the object, so `kubectl
    /// describe` and `kubectl get events` say why it is not converging (the operators' answer
    /// to "it just sits there"). Every operator implements it with
    /// [`record_reconcile_error`]; its recorder's correlator folds the repeats of a key that
    /// keeps failing into one event with a count and rate-limits them (client-go's spam
    /// filter: a burst of 25, then one per 5 minutes per object), so a hot failure loop does
    /// not flood the API server with events. The default records nothing.
    fn on_sync_error(&self, _key: &str, _message: &str) {}
}

/// The reason of the Warning event recorded when a sync fails: `ReconciliationFailed`, the
/// reason the operator guide's RedisCluster operator records (`r.Recorder.Event(obj,
/// corev1.EventTypeWarning, "ReconciliationFailed", err.Error())`), so that guide's
/// `kubectl describe` shows the same thing with every operator of this project.
pub const REASON_RECONCILIATION_FAILED: &str = "ReconciliationFailed";

/// What [`SyncHandler::on_sync_error`] does in every operator: looks the object up in the
/// cache by `key` and records a Warning `ReconciliationFailed` event with `message` on it. Nothing
/// when the object is gone (a failed sync of a deleted object has no one to tell).
pub fn record_reconcile_error<K>(
    lister: &sample_client_go::cache::Lister<K>,
    recorder: &sample_client_go::record::EventRecorder,
    key: &str,
    message: &str,
) where
    K: sample_client_go::cache::CacheObject,
{
    if let Some(obj) = lister.get_by_key(key) {
        recorder.event(
            obj.as_ref(),
            sample_client_go::record::EventType::Warning,
            REASON_RECONCILIATION_FAILED,
            message,
        );
    }
}

/// Counters of one controller's worker loop. Cheap to read from tests; with
/// [`SyncStats::with_metrics`] every sync is also exported as `controller_sync_*` on `/metrics`.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Where syncs are exported, if anywhere.
    metrics: Option<ControllerMetrics>,
    /// Every finished `sync_handler` call, whatever its outcome.
    pub syncs: AtomicU64,
    /// Calls that returned `Err`.
    pub errors: AtomicU64,
    /// Calls that panicked (caught, retried).
    pub panics: AtomicU64,
    /// Calls that ran past the deadline (dropped, retried).
    pub timeouts: AtomicU64,
    /// Calls that asked to be looked at again later (`Ok(Some(_))`).
    pub requeues_after: AtomicU64,
}

impl SyncStats {
    /// Counters that also feed the manager's Prometheus families.
    pub fn with_metrics(metrics: ControllerMetrics) -> Self {
        SyncStats {
            metrics: Some(metrics),
            ..SyncStats::default()
        }
    }

    fn observe(&self, controller: &str, took: Duration, result: ReconcileResult) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.observe_reconcile(controller, took, result);
        }
    }

    /// The workers of `controller` start: its `controller_runtime_*` series are created
    /// (controller-runtime's `initMetrics`) and `max_concurrent_reconciles` set to `workers`.
    pub fn start_workers(&self, controller: &str, workers: usize) {
        if let Some(m) = &self.metrics {
            m.start_controller(controller, workers);
        }
    }

    /// A snapshot of the counters: (syncs, errors, panics, timeouts, requeues_after).
    pub fn snapshot(&self) -> SyncStatsSnapshot {
        SyncStatsSnapshot {
            syncs: self.syncs.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            panics: self.panics.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            requeues_after: self.requeues_after.load(Ordering::Relaxed),
        }
    }
}

/// A point-in-time copy of [`SyncStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncStatsSnapshot {
    /// See [`SyncStats::syncs`].
    pub syncs: u64,
    /// See [`SyncStats::errors`].
    pub errors: u64,
    /// See [`SyncStats::panics`].
    pub panics: u64,
    /// See [`SyncStats::timeouts`].
    pub timeouts: u64,
    /// See [`SyncStats::requeues_after`].
    pub requeues_after: u64,
}

/// How one `sync_handler` call ended, as the worker loop saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// `Ok(None)`: forgotten.
    Synced,
    /// `Ok(Some(d))`: forgotten, then re-added after `d`.
    RequeuedAfter(Duration),
    /// `Err`: re-added with backoff. Carries the error's message.
    Failed(String),
    /// A panic: re-added with backoff. Carries the panic's message when it had one.
    Panicked(String),
    /// Past the deadline: dropped and re-added with backoff.
    TimedOut,
}

/// What the manager needs from a running controller, whatever its kind; the manager holds
/// them as `Arc<dyn Controller>`. Every [`Operator`] implements it through the blanket `impl`
/// below, so an operator never writes it by hand. (It is separate from [`Operator`] because a
/// trait with an associated error type and `async fn`s cannot be a `dyn` object: this one
/// boxes `run`'s future and turns its error into a string.)
pub trait Controller: Send + Sync + 'static {
    /// The name used by `--controllers` and in logs.
    fn name(&self) -> &'static str;
    /// True once the controller's informers have delivered their initial lists.
    fn has_synced(&self) -> bool;
    /// Waits for the caches, then runs `workers` workers until `stop` is cancelled; returns
    /// when every worker has finished its current item.
    fn run(
        self: Arc<Self>,
        workers: usize,
        stop: CancellationToken,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
    /// Shuts the controller's queue down and waits for items still being processed.
    fn shut_down_queue(&self) -> futures_util::future::BoxFuture<'static, ()>;
    /// The worker loop's counters.
    fn stats(&self) -> Arc<SyncStats>;
}

/// How often [`run`] checks whether the informers have synced (client-go's
/// `WaitForCacheSync` polls every 100 ms too).
const CACHE_SYNC_POLL: Duration = Duration::from_millis(100);

/// What the shared [`run`] drives for one controller: the queue its event handlers fill, the
/// counters of its worker loop, and the registrations of its event handlers, whose
/// `has_synced` gate the start. These are sample-controller's `workqueue` field and the
/// `foosSynced`, `deploymentsSynced` funcs its `Run` passes to `cache.WaitForCacheSync`.
///
/// An operator's constructor builds one from the queue it cloned into its handlers and the
/// registrations those handlers returned, and keeps it in its struct.
pub struct Workers {
    queue: RateLimitingQueue<QueueKey>,
    stats: Arc<SyncStats>,
    synced: Vec<HandlerRegistration>,
    drain: Option<Arc<dyn DrainGate>>,
}

impl Workers {
    /// `queue`: the controller's queue. `stats`: its counters. `synced`: one registration per
    /// event handler the controller added to an informer.
    pub fn new(
        queue: RateLimitingQueue<QueueKey>,
        stats: SyncStats,
        synced: Vec<HandlerRegistration>,
    ) -> Self {
        Workers {
            queue,
            stats: Arc::new(stats),
            synced,
            drain: None,
        }
    }

    /// Before each sync, releases the object its key names to the ring's sharder when the
    /// sharder is draining it from this shard ([`crate::sharding::drain`]), instead of syncing
    /// it: the sync is wrapped, so no operator writes this step. `lister` is the controller's
    /// cache of its own kind; `expectations`, when given, are forgotten for a released key.
    /// In leader mode no object carries a drain label and this costs one label scan per sync.
    pub fn release_drained<K: CacheObject>(
        mut self,
        lister: &Lister<K>,
        client: &Client,
        expectations: Option<Arc<Expectations>>,
    ) -> Self {
        self.drain = Some(Arc::new(ListerDrain {
            lister: lister.clone(),
            client: client.clone(),
            expectations,
        }));
        self
    }

    /// The queue the controller's event handlers fill and its workers drain.
    pub fn queue(&self) -> &RateLimitingQueue<QueueKey> {
        &self.queue
    }

    /// The worker loop's counters (and, when built with metrics, its Prometheus families).
    pub fn stats(&self) -> &Arc<SyncStats> {
        &self.stats
    }

    /// True once every handler has processed its informer's initial list (client-go:
    /// `WaitForCacheSync` over the controller's `HasSynced` funcs). Until then a lister may be
    /// missing objects that exist, and "not in the cache" would be read as "create it".
    pub fn has_synced(&self) -> bool {
        self.synced.iter().all(HandlerRegistration::has_synced)
    }
}

/// What one operator supplies beyond its [`SyncHandler`]: its name and its [`Workers`].
/// Everything else (waiting for the caches, starting the workers, the manager's
/// [`Controller`] interface) is written once, in [`run`] and the blanket
/// `impl<O: Operator> Controller for O`.
pub trait Operator: SyncHandler {
    /// The controller's name: what `--controllers` selects, the `controller` field of its log
    /// lines and the `controller` label of its `controller_sync_*` metrics.
    const NAME: &'static str;

    /// The controller's queue, counters and handler registrations.
    fn workers(&self) -> &Workers;

    /// The deadline of one `sync_handler` call; [`DEFAULT_SYNC_TIMEOUT`] unless overridden.
    fn sync_timeout(&self) -> Duration {
        DEFAULT_SYNC_TIMEOUT
    }
}

/// Step 1 of every operator's `sync_handler`, written once: the object its key names, from the
/// operator's cache; `None` when it is gone (deleted since its key was queued: what it owns goes
/// with it, through the garbage collector), and then the key's [`Expectations`] are forgotten.
/// (An object the sharder drains from this shard never reaches `sync_handler`: see
/// [`Workers::release_drained`].)
///
/// The book's controllers start the same way (`lister.Get`, then `IsNotFound` → "no longer
/// exists", return nil).
pub fn object_to_sync<K: CacheObject>(
    lister: &Lister<K>,
    expectations: &Expectations,
    key: &str,
) -> Option<Arc<K>> {
    let obj = lister.get_by_key(key);
    if obj.is_none() {
        tracing::debug!(key, kind = K::KIND, "object in work queue no longer exists");
        expectations.forget(key);
    }
    obj
}

/// Releases a draining object before its sync (see [`Workers::release_drained`]).
pub trait DrainGate: Send + Sync + 'static {
    /// `Some(write)` when the object `key` names is being drained from this shard: the write
    /// that releases it to the sharder, run instead of the sync. `None`: sync as usual.
    fn release<'a>(&'a self, key: &'a str) -> Option<BoxFuture<'a, Result<(), client::Error>>>;
}

struct ListerDrain<K: CacheObject> {
    lister: Lister<K>,
    client: Client,
    expectations: Option<Arc<Expectations>>,
}

impl<K: CacheObject> DrainGate for ListerDrain<K> {
    fn release<'a>(&'a self, key: &'a str) -> Option<BoxFuture<'a, Result<(), client::Error>>> {
        let obj = self.lister.get_by_key(key)?;
        crate::sharding::drain::release_patch(k8s_openapi::Metadata::metadata(&*obj))?;
        Some(Box::pin(async move {
            if let Some(e) = &self.expectations {
                e.forget(key);
            }
            crate::sharding::release_if_draining(&self.client, &*obj)
                .await
                .unwrap_or(Ok(()))
        }))
    }
}

/// A [`SyncHandler`] with the drain step in front ([`Workers::release_drained`]): what the
/// workers of every controller actually run.
pub struct Draining<H> {
    inner: Arc<H>,
    gate: Option<Arc<dyn DrainGate>>,
}

/// A failed sync of a [`Draining`] handler: the release's write, or the sync itself.
#[derive(Debug)]
pub enum DrainedOr<E> {
    /// Releasing a draining object failed (e.g. 409: it changed since the cache read it).
    Release(client::Error),
    /// The sync failed.
    Sync(E),
}

impl<E: Display> Display for DrainedOr<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainedOr::Release(e) => write!(f, "releasing the object to the sharder: {e}"),
            DrainedOr::Sync(e) => e.fmt(f),
        }
    }
}

impl<H: SyncHandler> SyncHandler for Draining<H> {
    type Error = DrainedOr<H::Error>;

    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, Self::Error> {
        if let Some(release) = self.gate.as_ref().and_then(|g| g.release(key)) {
            return release.await.map(|()| None).map_err(DrainedOr::Release);
        }
        self.inner.sync_handler(key).await.map_err(DrainedOr::Sync)
    }

    fn is_conflict(err: &Self::Error) -> bool {
        match err {
            DrainedOr::Release(e) => e.is_conflict(),
            DrainedOr::Sync(e) => H::is_conflict(e),
        }
    }

    fn on_sync_error(&self, key: &str, message: &str) {
        self.inner.on_sync_error(key, message);
    }
}

/// Why a controller could not be built or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Registering an event handler failed (the informer was already stopped).
    #[error("registering the {controller} controller's event handlers: {source}")]
    Informer {
        /// [`Operator::NAME`] of the controller being built.
        controller: &'static str,
        #[source]
        source: InformerError,
    },
    /// Shut down before the caches synced (client-go: "failed to wait for caches to sync").
    #[error("failed to wait for caches to sync")]
    CacheSync,
}

impl RunError {
    /// For `map_err` in an operator's constructor:
    /// `informer.add_event_handler(h).map_err(RunError::informer::<Self>)?`.
    pub fn informer<O: Operator>(source: InformerError) -> RunError {
        RunError::Informer {
            controller: O::NAME,
            source,
        }
    }
}

/// The book's `Run`, for every operator: waits until [`Workers::has_synced`] (a worker must
/// never act on a partial view of the cluster), then runs `workers` workers with
/// [`run_workers`] until `stop` is cancelled or the queue shuts down. Returns once every
/// worker has finished its current item; [`RunError::CacheSync`] if `stop` came first.
///
/// Unlike client-go's `Run` it does not shut the queue down itself: the manager does, after
/// cancelling `stop`, with a drain (see [`Controller::shut_down_queue`]).
pub async fn run<O: Operator>(
    operator: Arc<O>,
    workers: usize,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let timeout = operator.sync_timeout();
    run_controller(O::NAME, operator, O::workers, workers, timeout, stop).await
}

/// [`run`] for any handler whose [`Workers`] `workers_of` reads: what a [`Builder`](crate::builder::Builder)'s
/// controllers run, whose name is not a constant.
pub async fn run_controller<H: SyncHandler>(
    controller: &'static str,
    handler: Arc<H>,
    workers_of: fn(&H) -> &Workers,
    workers: usize,
    sync_timeout: Duration,
    stop: CancellationToken,
) -> Result<(), RunError> {
    tracing::info!(controller, "waiting for informer caches to sync");
    while !workers_of(&handler).has_synced() {
        tokio::select! {
            _ = stop.cancelled() => return Err(RunError::CacheSync),
            _ = tokio::time::sleep(CACHE_SYNC_POLL) => {}
        }
    }
    tracing::info!(controller, workers, "caches synced; starting workers");
    let w = workers_of(&handler);
    let queue = w.queue().clone();
    let stats = Arc::clone(w.stats());
    let gate = w.drain.clone();
    stats.start_workers(controller, workers);
    let handler = Arc::new(Draining {
        inner: handler,
        gate,
    });
    run_workers(
        controller,
        queue,
        handler,
        workers,
        sync_timeout,
        stats,
        stop,
    )
    .await;
    tracing::info!(controller, "workers stopped");
    Ok(())
}

/// The manager's view of any [`Operator`]: its name, its [`Workers`], [`run`] boxed, and a
/// drain of its queue.
impl<O: Operator> Controller for O {
    fn name(&self) -> &'static str {
        O::NAME
    }

    fn has_synced(&self) -> bool {
        self.workers().has_synced()
    }

    fn run(
        self: Arc<Self>,
        workers: usize,
        stop: CancellationToken,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        Box::pin(async move { run(self, workers, stop).await.map_err(|e| e.to_string()) })
    }

    fn shut_down_queue(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let queue = self.workers().queue().clone();
        Box::pin(async move { queue.shut_down_with_drain().await })
    }

    fn stats(&self) -> Arc<SyncStats> {
        Arc::clone(self.workers().stats())
    }
}

/// The book's `processNextWorkItem`: takes one key, runs `sync_handler` on it under a deadline
/// and a panic guard, and settles the key with the queue. Returns `None` once the queue is shut
/// down and empty (the worker should end), else the key and how its sync ended.
pub async fn process_next_work_item<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    sync_timeout: Duration,
    stats: &SyncStats,
) -> Option<(QueueKey, SyncOutcome)> {
    let key = queue.get().await?;
    let _active = ActiveWorker::new(controller, stats);
    let outcome = sync_one(controller, queue, handler, &key, sync_timeout, stats).await;
    // Always: the key may now be handed to a worker again (at once if an event came meanwhile).
    queue.done(&key);
    Some((key, outcome))
}

/// `controller_runtime_active_workers` + 1 while a worker holds a key (minus 1 on drop, also
/// when the worker's future is dropped mid-sync).
struct ActiveWorker<'a> {
    controller: &'static str,
    stats: &'a SyncStats,
}

impl<'a> ActiveWorker<'a> {
    fn new(controller: &'static str, stats: &'a SyncStats) -> Self {
        if let Some(m) = &stats.metrics {
            m.add_active_workers(controller, 1);
        }
        ActiveWorker { controller, stats }
    }
}

impl Drop for ActiveWorker<'_> {
    fn drop(&mut self) {
        if let Some(m) = &self.stats.metrics {
            m.add_active_workers(self.controller, -1);
        }
    }
}

async fn sync_one<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    queued: &QueueKey,
    sync_timeout: Duration,
    stats: &SyncStats,
) -> SyncOutcome {
    let key = queued.as_str();
    let started = tokio::time::Instant::now();
    // The sync's span (see the module docs, "Traces"): a root span, parent of the spans of the
    // API requests the handler makes.
    let span = tracing::debug_span!(
        "sync",
        controller,
        key,
        result = tracing::field::Empty,
        requeue = tracing::field::Empty,
        requeue_after_ms = tracing::field::Empty,
    );
    // The handler's future is boxed: a sync's state (an At handler's is 4.7 KiB) then exists
    // only while the sync runs, and an idle worker (32 per controller, most of them idle most
    // of the time) holds a pointer.
    let guarded = AssertUnwindSafe(tokio::time::timeout(
        sync_timeout,
        Box::pin(handler.sync_handler(key)),
    ))
    .catch_unwind()
    .instrument(span.clone())
    .await;
    let took = started.elapsed();
    let result = match &guarded {
        Ok(Ok(Ok(None))) => ReconcileResult::Success,
        Ok(Ok(Ok(Some(_)))) => ReconcileResult::RequeueAfter,
        Ok(Ok(Err(_))) | Ok(Err(_)) => ReconcileResult::Error,
        Err(_) => ReconcileResult::Panic,
    };
    span.record("result", result.label());
    span.record("requeue", result != ReconcileResult::Success);
    if let Ok(Ok(Ok(Some(after)))) = &guarded {
        span.record("requeue_after_ms", after.as_millis() as u64);
    }
    stats.observe(controller, took, result);
    let elapsed_ms = took.as_millis() as u64;
    match guarded {
        Ok(Ok(Ok(None))) => {
            // Success: clear the key's failure history so its next failure starts at 5 ms.
            queue.forget(queued);
            tracing::debug!(controller, key, elapsed_ms, "successfully synced");
            SyncOutcome::Synced
        }
        Ok(Ok(Ok(Some(after)))) => {
            stats.requeues_after.fetch_add(1, Ordering::Relaxed);
            queue.forget(queued);
            queue.add_after(queued.clone(), after);
            tracing::debug!(
                controller,
                key,
                elapsed_ms,
                after_ms = after.as_millis() as u64,
                "synced; looking again later"
            );
            SyncOutcome::RequeuedAfter(after)
        }
        Ok(Ok(Err(err))) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            let message = err.to_string();
            queue.add_rate_limited(queued.clone());
            let retries = queue.num_requeues(queued);
            if H::is_conflict(&err) {
                tracing::info!(
                    controller,
                    key,
                    error = %message,
                    retries,
                    "the object changed while syncing; requeuing to retry with a fresh copy"
                );
            } else {
                tracing::error!(
                    controller,
                    key,
                    error = %message,
                    retries,
                    "error syncing; requeuing for later retry"
                );
                handler.on_sync_error(key, &message);
            }
            SyncOutcome::Failed(message)
        }
        Ok(Err(_elapsed)) => {
            stats.timeouts.fetch_add(1, Ordering::Relaxed);
            queue.add_rate_limited(queued.clone());
            tracing::error!(
                controller,
                key,
                timeout_ms = sync_timeout.as_millis() as u64,
                "sync exceeded its deadline; abandoned and requeued for later retry"
            );
            SyncOutcome::TimedOut
        }
        Err(panic) => {
            stats.panics.fetch_add(1, Ordering::Relaxed);
            let message = panic_message(panic.as_ref());
            queue.add_rate_limited(queued.clone());
            tracing::error!(
                controller,
                key,
                panic = %message,
                "sync panicked; the worker carries on and the key is requeued for later retry"
            );
            SyncOutcome::Panicked(message)
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The book's `runWorker`: calls [`process_next_work_item`] until the queue shuts down or
/// `stop` is cancelled. Cancellation is checked only between items, so a sync in progress
/// always finishes (or hits its deadline) and its key is settled.
pub async fn run_worker<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    sync_timeout: Duration,
    stats: &SyncStats,
    stop: &CancellationToken,
) {
    loop {
        let key = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            key = queue.get() => key,
        };
        let Some(key) = key else { break };
        sync_one(controller, queue, handler, &key, sync_timeout, stats).await;
        queue.done(&key);
    }
    tracing::debug!(controller, "worker stopped");
}

/// Starts `workers` worker tasks on `queue` and waits until all of them have ended (the queue
/// shut down, or `stop` was cancelled and each finished its current item).
pub async fn run_workers<H: SyncHandler>(
    controller: &'static str,
    queue: RateLimitingQueue<QueueKey>,
    handler: Arc<H>,
    workers: usize,
    sync_timeout: Duration,
    stats: Arc<SyncStats>,
    stop: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let (queue, handler, stats, stop) = (
            queue.clone(),
            Arc::clone(&handler),
            Arc::clone(&stats),
            stop.clone(),
        );
        tasks.spawn(async move {
            run_worker(controller, &queue, &*handler, sync_timeout, &stats, &stop).await;
        });
    }
    tracing::info!(controller, workers, "started workers");
    while let Some(res) = tasks.join_next().await {
        if let Err(e) = res {
            // Panics inside sync_handler are caught in the loop; this is a bug in the loop.
            tracing::error!(controller, error = %e, "worker task ended abnormally");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    #[tokio::test]
    async fn object_to_sync_hands_over_a_cached_object_and_forgets_a_gone_one() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        // Never contacted: nothing here is draining, so nothing is released.
        let uri: http::Uri = "http://127.0.0.1:9".parse().unwrap();
        let client = Client::new(sample_client_go::client::Config::new(uri)).unwrap();
        let indexer = sample_client_go::cache::Indexer::new();
        indexer.insert(Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("here".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }));
        indexer.insert(draining());
        let lister = Lister::new(indexer);
        let expectations = Expectations::default();
        expectations.expect_creations("ns/here", 1);
        expectations.expect_creations("ns/gone", 1);

        let here = object_to_sync(&lister, &expectations, "ns/here");
        let here = here.expect("the cached object");
        assert_eq!(here.metadata.name.as_deref(), Some("here"));
        assert!(!expectations.satisfied("ns/here"), "kept for the sync");

        let gone = object_to_sync(&lister, &expectations, "ns/gone");
        assert!(gone.is_none());
        assert!(
            expectations.satisfied("ns/gone"),
            "forgotten with the object"
        );

        // The drain step in front of every sync: only an object carrying a drain label is
        // released instead of synced.
        let workers = Workers::new(
            RateLimitingQueue::with_default_controller_rate_limiter(),
            SyncStats::default(),
            vec![],
        )
        .release_drained(&lister, &client, None);
        let gate = workers.drain.as_ref().expect("a drain gate");
        assert!(gate.release("ns/here").is_none(), "not draining: synced");
        assert!(gate.release("ns/gone").is_none(), "not cached: synced");
        assert!(gate.release("ns/leaving").is_some(), "draining: released");
    }

    fn draining() -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("leaving".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                labels: Some(
                    [(
                        "drain.shard.sample-controller.dev/r".to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }

    /// A scripted handler: each key has a queue of behaviours, one per call.
    #[derive(Default)]
    struct Script {
        steps: Mutex<HashMap<String, Vec<Step>>>,
        calls: Mutex<Vec<String>>,
    }

    #[derive(Clone)]
    enum Step {
        Ok,
        After(Duration),
        Err,
        Panic,
        Hang,
    }

    impl Script {
        fn with(steps: &[(&str, Vec<Step>)]) -> Self {
            Script {
                steps: Mutex::new(
                    steps
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.iter().rev().cloned().collect()))
                        .collect(),
                ),
                calls: Mutex::default(),
            }
        }
    }

    impl SyncHandler for Script {
        type Error = String;
        async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, String> {
            self.calls.lock().unwrap().push(key.to_string());
            let step = self
                .steps
                .lock()
                .unwrap()
                .get_mut(key)
                .and_then(|v| v.pop())
                .unwrap_or(Step::Ok);
            match step {
                Step::Ok => Ok(None),
                Step::After(d) => Ok(Some(d)),
                Step::Err => Err(format!("{key} failed")),
                Step::Panic => panic!("boom in {key}"),
                Step::Hang => std::future::pending().await,
            }
        }
    }

    async fn next(
        q: &RateLimitingQueue<QueueKey>,
        h: &Script,
        stats: &SyncStats,
    ) -> (QueueKey, SyncOutcome) {
        process_next_work_item("test", q, h, Duration::from_secs(5), stats)
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn three_branches_and_always_done() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[(
            "ns/a",
            vec![
                Step::Err,
                Step::Err,
                Step::After(Duration::from_secs(30)),
                Step::Ok,
            ],
        )]);
        let stats = SyncStats::default();
        q.add("ns/a".into());

        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Failed("ns/a failed".into()));
        assert_eq!(q.num_requeues(&"ns/a".into()), 1);
        assert_eq!(q.processing_len(), 0, "done was called");

        let t0 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert!(matches!(o, SyncOutcome::Failed(_)));
        assert_eq!(
            t0.elapsed(),
            Duration::from_millis(5),
            "first backoff is 5 ms"
        );
        assert_eq!(q.num_requeues(&"ns/a".into()), 2);

        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::RequeuedAfter(Duration::from_secs(30)));
        assert_eq!(
            q.num_requeues(&"ns/a".into()),
            0,
            "a deferral forgets earlier failures (cnat did not)"
        );
        let t1 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(
            t1.elapsed(),
            Duration::from_secs(30),
            "requeued exactly after d"
        );
        assert_eq!(q.len() + q.waiting_len(), 0);
        assert_eq!(
            stats.snapshot(),
            SyncStatsSnapshot {
                syncs: 4,
                errors: 2,
                panics: 0,
                timeouts: 0,
                requeues_after: 1
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_is_caught_counted_and_retried_with_backoff() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[("ns/p", vec![Step::Panic, Step::Panic, Step::Ok])]);
        let stats = SyncStats::default();
        q.add("ns/p".into());
        q.add("ns/other".into());
        let (k, o) = next(&q, &h, &stats).await;
        assert_eq!(k, "ns/p");
        assert_eq!(o, SyncOutcome::Panicked("boom in ns/p".into()));
        let (k, o) = next(&q, &h, &stats).await;
        assert_eq!((k.as_str(), o), ("ns/other", SyncOutcome::Synced));
        let (_, o) = next(&q, &h, &stats).await;
        assert!(matches!(o, SyncOutcome::Panicked(_)));
        assert_eq!(q.num_requeues(&"ns/p".into()), 2);
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(stats.snapshot().panics, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_sync_hits_its_deadline() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[("ns/h", vec![Step::Hang, Step::Ok])]);
        let stats = SyncStats::default();
        q.add("ns/h".into());
        let t0 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
        assert_eq!(q.processing_len(), 0);
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(stats.snapshot().timeouts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn workers_stop_on_cancel_and_on_shutdown() {
        let q: RateLimitingQueue<QueueKey> =
            RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Arc::new(Script::default());
        let stats = Arc::new(SyncStats::default());
        let stop = CancellationToken::new();
        for i in 0..10 {
            q.add(format!("ns/{i}").into());
        }
        let run = tokio::spawn(run_workers(
            "test",
            q.clone(),
            Arc::clone(&h),
            3,
            Duration::from_secs(5),
            Arc::clone(&stats),
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(stats.snapshot().syncs, 10);
        stop.cancel();
        run.await.unwrap();
        // After cancel, new work is not taken.
        q.add("ns/late".into());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(stats.snapshot().syncs, 10);
        assert_eq!(q.len(), 1);

        // A shut-down queue also ends the workers.
        let run = tokio::spawn(run_workers(
            "test",
            q.clone(),
            Arc::clone(&h),
            2,
            Duration::from_secs(5),
            Arc::clone(&stats),
            CancellationToken::new(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        q.shut_down_with_drain().await;
        run.await.unwrap();
        assert_eq!(stats.snapshot().syncs, 11);
    }

    /// The smallest [`Operator`]: the scripted handler, gated by one ConfigMap informer.
    struct Op {
        script: Script,
        workers: Workers,
    }

    impl SyncHandler for Op {
        type Error = String;
        async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, String> {
            self.script.sync_handler(key).await
        }
    }

    impl Operator for Op {
        const NAME: &'static str = "op";
        fn workers(&self) -> &Workers {
            &self.workers
        }
    }

    /// An operator whose one handler is registered on an informer over an in-memory source
    /// holding one ConfigMap, with the key `ns/a` already queued.
    fn operator() -> (
        Arc<Op>,
        sample_client_go::cache::SharedIndexInformer<k8s_openapi::api::core::v1::ConfigMap>,
    ) {
        use k8s_openapi::api::core::v1::ConfigMap;
        use sample_client_go::cache::testing::{FakeListerWatcher, meta};
        use sample_client_go::cache::{EventHandlerFns, InformerOptions, SharedIndexInformer};
        let server = FakeListerWatcher::<ConfigMap>::new();
        server.upsert(ConfigMap {
            metadata: meta("ns", "a", &[]),
            ..ConfigMap::default()
        });
        let informer = SharedIndexInformer::new(server, InformerOptions::default());
        let registration = informer
            .add_event_handler(EventHandlerFns::<ConfigMap>::new())
            .unwrap();
        let queue = RateLimitingQueue::with_default_controller_rate_limiter();
        queue.add("ns/a".into());
        let op = Op {
            script: Script::default(),
            workers: Workers::new(queue, SyncStats::default(), vec![registration]),
        };
        (Arc::new(op), informer)
    }

    #[tokio::test(start_paused = true)]
    async fn run_never_starts_workers_before_the_caches_sync() {
        let (op, _informer_never_run) = operator();
        let stop = CancellationToken::new();
        let running = tokio::spawn(run(Arc::clone(&op), 2, stop.clone()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!Controller::has_synced(&*op));
        assert_eq!(
            op.script.calls.lock().unwrap().len(),
            0,
            "no sync on a partial view"
        );
        stop.cancel();
        let err = running.await.unwrap().unwrap_err();
        assert!(matches!(err, RunError::CacheSync));
        assert_eq!(err.to_string(), "failed to wait for caches to sync");
    }

    #[tokio::test(start_paused = true)]
    async fn run_starts_the_workers_once_synced_and_the_manager_sees_it_as_a_controller() {
        let (op, informer) = operator();
        let informer_stop = CancellationToken::new();
        let informer_task = tokio::spawn({
            let (informer, stop) = (informer.clone(), informer_stop.clone());
            async move { informer.run(stop).await }
        });
        let controller: Arc<dyn Controller> = op.clone();
        assert_eq!(controller.name(), "op");
        let stop = CancellationToken::new();
        let running = tokio::spawn(Arc::clone(&controller).run(1, stop.clone()));
        for _ in 0..1000 {
            if controller.stats().snapshot().syncs > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(controller.has_synced());
        assert_eq!(*op.script.calls.lock().unwrap(), vec!["ns/a".to_string()]);
        stop.cancel();
        assert_eq!(running.await.unwrap(), Ok(()));
        controller.shut_down_queue().await;
        assert!(op.workers().queue().shutting_down());
        informer_stop.cancel();
        informer_task.await.unwrap();
    }

    #[test]
    fn an_informer_error_names_the_controller() {
        let err = RunError::informer::<Op>(InformerError::Stopped);
        assert_eq!(
            err.to_string(),
            "registering the op controller's event handlers: \
             handler was not added to shared informer because it has stopped already"
        );
    }
}
