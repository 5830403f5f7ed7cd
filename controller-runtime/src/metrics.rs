//! # Metrics: what a controller manager tells Prometheus
//!
//! The `/metrics` endpoint every production controller serves (controller-runtime serves it on
//! `:8080`, the default here too). [`Metrics`] owns one `prometheus-client`
//! [`Registry`] and the families below; other modules get small cloneable handles
//! ([`ControllerMetrics`], [`LeaderElectionMetrics`]), hand over something to be read at scrape
//! time ([`Metrics::register_client`], [`Metrics::register_informer`],
//! [`Metrics::register_event_broadcaster`]) or register their own families (the workqueue's)
//! through [`Metrics::with_registry`]. [`serve_metrics`] exposes the registry over HTTP in the
//! Prometheus/OpenMetrics text format; [`crate::metrics_auth`] serves it over HTTPS with every
//! scrape authenticated and authorized by the API server (`--metrics-secure`).
//!
//! | family | type | labels | set by |
//! |---|---|---|---|
//! | `controller_sync_total` | counter | `controller` | each `sync_handler` call |
//! | `controller_sync_errors_total` | counter | `controller` | each `sync_handler` error |
//! | `controller_sync_duration_seconds` | histogram | `controller` | each `sync_handler` call |
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` | each sync: `success`, `requeue_after`, `error` (`requeue` exists, at 0: a sync here either succeeds, asks for a time, or fails) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` | each sync that failed (error, timeout or panic) |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | `controller` | stays 0: no terminal errors here |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` | each sync that panicked |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` | each sync, controller-runtime's 40 buckets ([`RECONCILE_TIME_BUCKETS`]) |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` | the worker count, set when the workers start |
//! | `controller_runtime_active_workers` | gauge | `controller` | workers inside a sync right now |
//! | `rest_client_requests_total` | counter | `code`, `method`, `host` | every attempt the [`sample_client_go::client::Client`] makes, retries and watches included; `code="<error>"` when no answer came |
//! | `rest_client_request_retries_total` | counter | `code`, `verb`, `host` | every attempt after the first of one request |
//! | `rest_client_request_duration_seconds` | histogram | `verb`, `host` | each whole request: throttle wait, retries and response body included; watches are not timed |
//! | `rest_client_rate_limiter_duration_seconds` | histogram | `verb`, `host` | each wait for the client-side throttle |
//! | `rest_client_rate_limiter_enabled` | gauge | `host` | 1 while the client-side throttle applies, 0 when it is off (configured off, or the server announces priority and fairness); this crate's own |
//! | `rest_client_too_many_requests_total` | counter | | 429 answers |
//! | `rest_client_retries_total` | counter | | retried attempts (the sum of `rest_client_request_retries_total`) |
//! | `reflector_lists_total` | counter | `name` | each LIST a reflector makes |
//! | `reflector_watches_total` | counter | `name` | each WATCH a reflector opens |
//! | `reflector_gone_total` | counter | `name` | each 410 Gone / expired resourceVersion |
//! | `reflector_last_event_age_seconds` | gauge | `name` | seconds since the reflector's last watch event |
//! | `reflector_undecodable_objects_total` | counter | `name` | each object (once per resourceVersion) that did not decode as the informer's type and was left out |
//! | `store_objects` | gauge | `name` | objects in each informer's store |
//! | `store_undecodable_objects` | gauge | `name` | objects left out of each informer's store now because they do not decode |
//! | `events_dropped_total` | counter | | events the broadcaster dropped (full queue) |
//! | `leader_election_master_status` | gauge | `name` | 1 while this process leads that election (client-go's name) |
//! | `workqueue_*` | | `name` | the workqueue's own metrics (client-go's names) |
//! | `process_resident_memory_bytes`, `process_virtual_memory_bytes` | gauge | | this process's RSS and virtual size (Linux, `/proc/self/stat`) |
//! | `process_open_fds`, `process_max_fds` | gauge | | open file descriptors and their limit (`/proc/self/fd`, `/proc/self/limits`) |
//! | `process_cpu_seconds_total` | counter | | user + system CPU time |
//! | `process_start_time_seconds` | gauge | | start time, seconds since the Unix epoch |
//! | `process_threads` | gauge | | OS threads (`/proc/self/status`) |
//! | `tokio_alive_tasks` | gauge | | tasks alive on the manager's Tokio runtime (what `go_goroutines` is to a Go controller) |
//!
//! The `process_*` families are the ones Prometheus' process collector writes, which
//! controller-runtime registers for every manager (client_golang's
//! `collectors.NewProcessCollector`), so a leak of memory, file descriptors, threads or tasks
//! shows on the dashboards every operator already has. They are read from `/proc` at scrape
//! time; where there is no `/proc` they are left out.
//!
//! The `controller_runtime_*` families are controller-runtime's
//! (`pkg/internal/controller/metrics/metrics.go`): same names, help texts, labels and buckets,
//! and like controller-runtime the manager creates every series of a controller at 0 when its
//! workers start, so dashboards and alerts written for kubebuilder operators work unchanged.
//!
//! The labelled families the registry itself holds (`controller_sync_*`,
//! `leader_election_master_status`) have no series until their first sample, and
//! prometheus-client then leaves them out of the exposition altogether (no `# TYPE` line
//! either); dashboards see them from the first sync or election on. The families read at scrape
//! time are described below.
//!
//! ## The `rest_client_*` families are client-go's
//!
//! Names, labels and buckets follow client-go's `rest` package as exposed by
//! `k8s.io/component-base/metrics/prometheus/restclient`, so dashboards written for any Go
//! controller work unchanged:
//!
//! * `verb` and `method` both hold the HTTP method (`GET`, `PUT`, ...): client-go names the label
//!   `method` on `rest_client_requests_total` and `verb` everywhere else.
//! * `host` is the API server's `host[:port]` as written in the configuration's URL.
//! * The histograms use client-go's buckets: 5 ms, 25 ms, 100 ms, 250 ms, 500 ms, 1 s, 2 s, 4 s,
//!   8 s, 15 s, 30 s, 60 s ([`sample_client_go::client::transport::LATENCY_BUCKETS`]).
//! * `rest_client_request_duration_seconds` times a whole request, once, from the call to the
//!   last byte of the answer (client-go's `Request.request`), whatever the outcome; the time per
//!   attempt is not exposed. Watches are not timed (client-go's `Watch` is not either).
//! * `rest_client_too_many_requests_total` and `rest_client_retries_total` are this crate's own
//!   unlabelled totals, kept for existing dashboards.
//!
//! client-go's request and response size histograms, DNS latency and exec-plugin metrics are not
//! implemented.
//!
//! ## Read at scrape time
//!
//! The client, the informers and the event broadcaster keep their own counters; nothing copies
//! them into the registry. Collectors registered here read them while `/metrics` is being
//! encoded, so a scrape always shows the value of that instant: a watch event that arrived a
//! millisecond before the scrape is in it. These families appear as soon as their source is
//! registered (an informer not started yet shows zeros), except
//! `reflector_last_event_age_seconds`, which has a series per informer from its first watch
//! event on. Manager code registers its informers after starting them
//! ([`Metrics::register_informer`], or [`Metrics::register_reflector`] with what
//! [`SharedInformerFactory::informers`](sample_client_go::cache::SharedInformerFactory::informers)
//! reports); the manager registers every informer its enabled controllers created, under the
//! resource plural (`ats`, `pods`, `tdsets`, `deployments`, ...), and no other.
//!
//! ## Use
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use std::time::Duration;
//! use sample_controller_runtime::metrics::{Metrics, serve_metrics};
//! use tokio_util::sync::CancellationToken;
//!
//! let metrics = Metrics::new();
//! // A worker records each sync_handler call:
//! metrics.controller().observe_sync("cnat", Duration::from_millis(12), false);
//! assert!(metrics.encode().contains("controller_sync_total{controller=\"cnat\"} 1"));
//!
//! let cancel = CancellationToken::new();
//! let server = serve_metrics("127.0.0.1:0".parse().unwrap(), metrics.registry(), cancel.clone()).await?;
//! println!("curl http://{}/metrics", server.local_addr());
//! cancel.cancel();
//! server.join().await;
//! # Ok(())
//! # }
//! ```
//!
//! The registry sits behind a mutex because families are registered from several places while
//! the server may already be encoding; encoding takes the lock for the duration of one scrape.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use http::{Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::health::{ServerHandle, probe_serving_limits, serve_routes_with};
use crate::machinery::{Machinery, full};
use sample_client_go::cache::{CacheObject, ReflectorStats, ReflectorStatus, SharedIndexInformer};
use sample_client_go::client::transport::LatencyHistogram;
use sample_client_go::client::{Client, ClientMetrics};
use sample_client_go::record::EventBroadcaster;

/// Default metrics address, as controller-runtime's (`:8080`).
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:8080";

/// The content type of the exposition (OpenMetrics text, which Prometheus reads natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets of `controller_sync_duration_seconds` (seconds; controller-runtime's reconcile
/// buckets, coarser at the top).
pub const SYNC_DURATION_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn sync_histogram() -> Histogram {
    Histogram::new(SYNC_DURATION_BUCKETS)
}

/// Buckets of `controller_runtime_reconcile_time_seconds`: controller-runtime's, exactly
/// (`pkg/internal/controller/metrics/metrics.go`), so its dashboards' quantiles line up.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS)
}

/// How one sync ended, as controller-runtime's `result` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// `Ok(None)`: `success`.
    Success,
    /// `Ok(Some(d))`: `requeue_after`.
    RequeueAfter,
    /// An error, a timeout: `error`.
    Error,
    /// A panic: `error`, and counted in `controller_runtime_reconcile_panics_total`.
    Panic,
}

impl ReconcileResult {
    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Error | ReconcileResult::Panic => "error",
        }
    }
}

/// Per-controller `sync_handler` metrics: this crate's `controller_sync_*` and
/// controller-runtime's `controller_runtime_*` families, fed by the same observations.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    cr_total: Family<Labels, Counter>,
    cr_errors: Family<Labels, Counter>,
    cr_terminal_errors: Family<Labels, Counter>,
    cr_panics: Family<Labels, Counter>,
    cr_time: Family<Labels, Histogram, fn() -> Histogram>,
    cr_max_concurrent: Family<Labels, Gauge>,
    cr_active_workers: Family<Labels, Gauge>,
    triggers: Family<Labels, Counter>,
}

impl ControllerMetrics {
    fn new() -> Self {
        ControllerMetrics {
            total: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(sync_histogram),
            cr_total: Family::default(),
            cr_errors: Family::default(),
            cr_terminal_errors: Family::default(),
            cr_panics: Family::default(),
            cr_time: Family::new_with_constructor(reconcile_histogram),
            cr_max_concurrent: Family::default(),
            cr_active_workers: Family::default(),
            triggers: Family::default(),
        }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_sync",
            "Calls of sync_handler, by controller",
            self.total.clone(),
        );
        registry.register(
            "controller_sync_errors",
            "Calls of sync_handler that returned an error, by controller",
            self.errors.clone(),
        );
        registry.register(
            "controller_sync_duration_seconds",
            "Time spent in sync_handler, by controller",
            self.duration.clone(),
        );
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.cr_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.cr_errors.clone(),
        );
        registry.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            self.cr_terminal_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            self.cr_panics.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.cr_time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            self.cr_max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.cr_active_workers.clone(),
        );
        registry.register(
            "controller_reconcile_triggers",
            "Why reconciles ran: each distinct trigger of a reconcile (an informer event by type, a timer, a retry, a direct add), by controller",
            self.triggers.clone(),
        );
    }

    /// One reconcile of `controller` started for a trigger labelled `trigger`
    /// (`controller_reconcile_triggers_total{controller,trigger}`; see
    /// [`sample_client_go::keytrace::Trigger::label`]).
    pub fn observe_trigger(&self, controller: &str, trigger: &str) {
        self.triggers
            .get_or_create(&labels(&[("controller", controller), ("trigger", trigger)]))
            .inc();
    }

    /// Records one `sync_handler` call of `controller` that took `took` and failed or not
    /// (`controller_sync_*` only; see [`ControllerMetrics::observe_reconcile`]).
    pub fn observe_sync(&self, controller: &str, took: Duration, failed: bool) {
        let l = labels(&[("controller", controller)]);
        self.total.get_or_create(&l).inc();
        if failed {
            self.errors.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }

    /// Records one sync in both family sets: `controller_sync_*` and controller-runtime's
    /// `controller_runtime_reconcile_total{controller,result}`, `_errors_total`,
    /// `_panics_total` and `_time_seconds` (observed for every outcome, as controller-runtime
    /// does).
    pub fn observe_reconcile(&self, controller: &str, took: Duration, result: ReconcileResult) {
        let failed = matches!(result, ReconcileResult::Error | ReconcileResult::Panic);
        self.observe_sync(controller, took, failed);
        let l = labels(&[("controller", controller)]);
        self.cr_total
            .get_or_create(&labels(&[
                ("controller", controller),
                ("result", result.label()),
            ]))
            .inc();
        if failed {
            self.cr_errors.get_or_create(&l).inc();
        }
        if result == ReconcileResult::Panic {
            self.cr_panics.get_or_create(&l).inc();
        }
        self.cr_time.get_or_create(&l).observe(took.as_secs_f64());
    }

    /// What controller-runtime's `initMetrics` does when a controller starts: every
    /// `controller_runtime_*` series of `controller` exists (at 0) from the start, and
    /// `controller_runtime_max_concurrent_reconciles` is its worker count. (This crate has no
    /// terminal errors, which controller-runtime's reconcilers signal with
    /// `reconcile.TerminalError`: that counter stays 0.)
    pub fn start_controller(&self, controller: &str, workers: usize) {
        let l = labels(&[("controller", controller)]);
        // `get_or_create` creates the series at 0; the guard it returns is dropped at once.
        for result in ["success", "error", "requeue", "requeue_after"] {
            drop(
                self.cr_total
                    .get_or_create(&labels(&[("controller", controller), ("result", result)])),
            );
        }
        drop(self.cr_errors.get_or_create(&l));
        drop(self.cr_terminal_errors.get_or_create(&l));
        drop(self.cr_panics.get_or_create(&l));
        drop(self.cr_active_workers.get_or_create(&l));
        self.cr_max_concurrent
            .get_or_create(&l)
            .set(i64::try_from(workers).unwrap_or(i64::MAX));
    }

    /// `controller_runtime_active_workers{controller}` += `delta` (1 when a worker takes a key,
    /// -1 when it is done with it).
    pub fn add_active_workers(&self, controller: &str, delta: i64) {
        self.cr_active_workers
            .get_or_create(&labels(&[("controller", controller)]))
            .inc_by(delta);
    }
}

/// The series of one controller, each found in its family the first time it is touched and
/// kept: a worker's observations then cost an atomic add or a histogram bucket, not a label set
/// built and hashed per call (measured: 69 allocations per At in the At benchmark's manager
/// before). A series appears on `/metrics` when [`ControllerMetrics`]'s own method would have
/// created it, no earlier. [`SyncStats`](crate::controller::SyncStats) holds one per controller.
#[derive(Debug)]
pub struct ControllerSeries {
    metrics: ControllerMetrics,
    controller: String,
    total: OnceLock<Counter>,
    errors: OnceLock<Counter>,
    duration: OnceLock<Histogram>,
    /// `controller_runtime_reconcile_total` by result: success, requeue_after, error.
    cr_total: [OnceLock<Counter>; 3],
    cr_errors: OnceLock<Counter>,
    cr_panics: OnceLock<Counter>,
    cr_time: OnceLock<Histogram>,
    active_workers: OnceLock<Gauge>,
    /// `controller_reconcile_triggers_total` by [`TRIGGER_LABELS`] index.
    triggers: [OnceLock<Counter>; TRIGGER_LABELS.len()],
}

/// Every value of the `trigger` label ([`sample_client_go::keytrace::Trigger::label`]).
const TRIGGER_LABELS: [&str; 9] = [
    "added",
    "modified",
    "deleted",
    "resync",
    "initial_list",
    "relist",
    "timer",
    "retry",
    "direct",
];

impl ControllerSeries {
    /// The series of `controller` in `metrics`' families.
    pub fn new(metrics: ControllerMetrics, controller: &str) -> Self {
        ControllerSeries {
            metrics,
            controller: controller.to_owned(),
            total: OnceLock::new(),
            errors: OnceLock::new(),
            duration: OnceLock::new(),
            cr_total: Default::default(),
            cr_errors: OnceLock::new(),
            cr_panics: OnceLock::new(),
            cr_time: OnceLock::new(),
            active_workers: OnceLock::new(),
            triggers: Default::default(),
        }
    }

    /// The controller these series belong to.
    pub fn controller(&self) -> &str {
        &self.controller
    }

    fn of<M: Clone, C: prometheus_client::metrics::family::MetricConstructor<M>>(
        cell: &OnceLock<M>,
        family: &Family<Labels, M, C>,
        labels: impl FnOnce() -> Labels,
    ) -> M {
        cell.get_or_init(|| family.get_or_create(&labels()).clone())
            .clone()
    }

    fn mine(&self) -> Labels {
        labels(&[("controller", &self.controller)])
    }

    /// As [`ControllerMetrics::observe_reconcile`].
    pub fn observe_reconcile(&self, took: Duration, result: ReconcileResult) {
        let m = &self.metrics;
        let failed = matches!(result, ReconcileResult::Error | ReconcileResult::Panic);
        let secs = took.as_secs_f64();
        Self::of(&self.total, &m.total, || self.mine()).inc();
        if failed {
            Self::of(&self.errors, &m.errors, || self.mine()).inc();
        }
        Self::of(&self.duration, &m.duration, || self.mine()).observe(secs);
        let i = match result {
            ReconcileResult::Success => 0,
            ReconcileResult::RequeueAfter => 1,
            ReconcileResult::Error | ReconcileResult::Panic => 2,
        };
        Self::of(&self.cr_total[i], &m.cr_total, || {
            labels(&[("controller", &self.controller), ("result", result.label())])
        })
        .inc();
        if failed {
            Self::of(&self.cr_errors, &m.cr_errors, || self.mine()).inc();
        }
        if result == ReconcileResult::Panic {
            Self::of(&self.cr_panics, &m.cr_panics, || self.mine()).inc();
        }
        Self::of(&self.cr_time, &m.cr_time, || self.mine()).observe(secs);
    }

    /// As [`ControllerMetrics::observe_trigger`].
    pub fn observe_trigger(&self, trigger: &str) {
        match TRIGGER_LABELS.iter().position(|l| *l == trigger) {
            Some(i) => {
                Self::of(&self.triggers[i], &self.metrics.triggers, || {
                    labels(&[("controller", &self.controller), ("trigger", trigger)])
                })
                .inc();
            }
            None => self.metrics.observe_trigger(&self.controller, trigger),
        }
    }

    /// As [`ControllerMetrics::add_active_workers`].
    pub fn add_active_workers(&self, delta: i64) {
        Self::of(
            &self.active_workers,
            &self.metrics.cr_active_workers,
            || self.mine(),
        )
        .inc_by(delta);
    }
}

/// `leader_election_master_status{name}`.
#[derive(Clone, Debug)]
pub struct LeaderElectionMetrics {
    status: Family<Labels, Gauge>,
}

impl sample_client_go::leaderelection::LeaderMetrics for LeaderElectionMetrics {
    /// Sets whether this process leads election `name`.
    fn set_leading(&self, name: &str, leading: bool) {
        self.status
            .get_or_create(&labels(&[("name", name)]))
            .set(i64::from(leading));
    }
}

/// The manager's metrics: a registry and the families in the module documentation.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    controller: ControllerMetrics,
    leader_election: LeaderElectionMetrics,
    clients: RestClients,
    caches: Caches,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Metrics {
    /// A registry with every family registered (and no samples until something records).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let controller = ControllerMetrics::new();
        controller.register(&mut registry);
        let caches = Caches::default();
        registry.register_collector(Box::new(caches.clone()));
        let clients = RestClients::default();
        registry.register_collector(Box::new(clients.clone()));
        registry.register_collector(Box::new(ProcessCollector));
        let leader_election = LeaderElectionMetrics {
            status: Family::default(),
        };
        registry.register(
            "leader_election_master_status",
            "1 while this process is the leader of the named election, 0 otherwise",
            leader_election.status.clone(),
        );
        Metrics {
            registry: Arc::new(Mutex::new(registry)),
            controller,
            leader_election,
            clients,
            caches,
        }
    }

    /// The shared registry (what [`serve_metrics`] encodes).
    pub fn registry(&self) -> Arc<Mutex<Registry>> {
        self.registry.clone()
    }

    /// Runs `f` with the registry locked, to register further families:
    /// `metrics.with_registry(|r| queue_metrics.register(r))`.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut lock(&self.registry))
    }

    /// Handle for `sync_handler` metrics.
    pub fn controller(&self) -> ControllerMetrics {
        self.controller.clone()
    }
    /// Handle for `leader_election_master_status`.
    pub fn leader_election(&self) -> LeaderElectionMetrics {
        self.leader_election.clone()
    }

    /// Exposes `client`'s request counters as the `rest_client_*` families, read at scrape
    /// time. Several clients may be registered (their series differ by `host`, or add up when
    /// they talk to the same server); registering the same client twice counts it once.
    pub fn register_client(&self, client: &Client) {
        let metrics = client.metrics();
        let mut clients = lock(&self.clients.0);
        if !clients.iter().any(|c| Arc::ptr_eq(c, &metrics)) {
            clients.push(metrics);
        }
    }

    /// Exposes `informer`'s reflector counters and store size under `name` (the `name` label of
    /// the `reflector_*` and `store_objects` families), read at scrape time. A second
    /// registration under the same name replaces the first.
    pub fn register_informer<K: CacheObject>(&self, name: &str, informer: &SharedIndexInformer<K>) {
        let indexer = informer.indexer();
        self.register_reflector(name, informer.status(), move || indexer.len());
    }

    /// Like [`Metrics::register_informer`], for a reflector outside a shared informer: its
    /// `status` and a function returning the size of the store it fills.
    pub fn register_reflector(
        &self,
        name: &str,
        status: ReflectorStatus,
        store_len: impl Fn() -> usize + Send + Sync + 'static,
    ) {
        let source = CacheSource {
            name: name.to_owned(),
            status,
            store_len: Box::new(store_len),
        };
        let mut caches = lock(&self.caches.0);
        caches.retain(|c| c.name != name);
        caches.push(source);
    }

    /// Exposes `broadcaster`'s dropped-event count as `events_dropped_total`.
    pub fn register_event_broadcaster(&self, broadcaster: &EventBroadcaster) {
        let b = broadcaster.clone();
        self.with_registry(|r| r.register_collector(Box::new(EventDrops(b))));
    }

    /// The registry in the text exposition format.
    pub fn encode(&self) -> String {
        encode_registry(&self.registry)
    }
}

/// Encodes a shared registry as OpenMetrics text (ending in `# EOF`).
pub fn encode_registry(registry: &Mutex<Registry>) -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &lock(registry)) {
        tracing::error!(error = %e, "encoding metrics failed");
        out.clear();
        let _ = writeln!(out, "# EOF");
    }
    out
}

/// Reads one counter of a reflector.
type ReadCounter = fn(&ReflectorStats) -> u64;

/// One informer (or bare reflector) whose counters a scrape reads.
struct CacheSource {
    name: String,
    status: ReflectorStatus,
    store_len: Box<dyn Fn() -> usize + Send + Sync>,
}

/// The registered informers; encodes the `reflector_*` and `store_objects` families.
#[derive(Clone, Default)]
struct Caches(Arc<Mutex<Vec<CacheSource>>>);

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = lock(&self.0).iter().map(|c| c.name.clone()).collect();
        f.debug_tuple("Caches").field(&names).finish()
    }
}

impl Collector for Caches {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        // Read everything first, so no informer lock is held while encoding.
        let mut rows: Vec<(Labels, ReflectorStats, usize)> = lock(&self.0)
            .iter()
            .map(|c| {
                (
                    labels(&[("name", &c.name)]),
                    c.status.snapshot(),
                    (c.store_len)(),
                )
            })
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let counters: [(&str, &str, ReadCounter); 5] = [
            (
                "reflector_lists",
                "LIST requests made by reflectors (a streaming list is a WATCH: reflector_watches)",
                |s| s.lists,
            ),
            (
                "reflector_watches",
                "WATCH requests opened by reflectors, streaming lists included",
                |s| s.watches,
            ),
            (
                "reflector_watch_events",
                "Watch events received by reflectors, bookmarks included",
                |s| s.events,
            ),
            (
                "reflector_gone",
                "410 Gone answers (expired resourceVersion) seen by reflectors",
                |s| s.expired,
            ),
            (
                "reflector_undecodable_objects",
                "Objects that did not decode as the informer's type, each counted once per resourceVersion",
                |s| s.undecodable,
            ),
        ];
        for (name, help, read) in counters {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (l, stats, _) in &rows {
                ConstCounter::new(read(stats)).encode(m.encode_family(l)?)?;
            }
        }
        if rows.iter().any(|(_, s, _)| s.last_event.is_some()) {
            let mut m = encoder.encode_descriptor(
                "reflector_last_event_age_seconds",
                "Seconds since each reflector last received a watch event",
                None,
                MetricType::Gauge,
            )?;
            for (l, stats, _) in &rows {
                if let Some(at) = stats.last_event {
                    let age = now.saturating_duration_since(at).as_secs_f64();
                    ConstGauge::new(age).encode(m.encode_family(l)?)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "store_objects",
            "Objects in each informer's store",
            None,
            MetricType::Gauge,
        )?;
        for (l, _, len) in &rows {
            ConstGauge::new(i64::try_from(*len).unwrap_or(i64::MAX)).encode(m.encode_family(l)?)?;
        }
        let mut m = encoder.encode_descriptor(
            "store_undecodable_objects",
            "Objects left out of each informer's store because they do not decode",
            None,
            MetricType::Gauge,
        )?;
        for (l, stats, _) in &rows {
            ConstGauge::new(i64::try_from(stats.left_out).unwrap_or(i64::MAX))
                .encode(m.encode_family(l)?)?;
        }
        Ok(())
    }
}

/// Prometheus' process collector (client_golang's `NewProcessCollector`) plus the Tokio
/// runtime's live task count, read from `/proc/self` at scrape time.
#[derive(Debug)]
struct ProcessCollector;

/// One reading of this process's resources (Linux `/proc/self`).
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (`None`: unlimited or unknown).
    pub max_fds: Option<u64>,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// OS threads.
    pub threads: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`, 100 on every Linux
/// platform Rust targets).
const USER_HZ: f64 = 100.0;
/// Page size for `/proc/<pid>/stat`'s `rss` (4 KiB on the platforms this runs on; the RSS is
/// taken from `status`'s `VmRSS` in kB when present, which needs no page size).
const PAGE_SIZE: u64 = 4096;

impl ProcessStats {
    /// Reads `/proc/self`; `None` where there is no `/proc` (not Linux) or it is unreadable.
    pub fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Some(ProcessStats::parse(
            &stat, &status, &limits, &uptime, open_fds,
        ))
    }

    /// The reading from the texts of `/proc/self/{stat,status,limits}` and `/proc/uptime`;
    /// fields that do not parse read 0.
    fn parse(stat: &str, status: &str, limits: &str, uptime: &str, open_fds: u64) -> ProcessStats {
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state): field n is f[n - 3].
        let num = |n: usize| {
            f.get(n - 3)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let kb = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        let max_fds = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok());
        // Start time: boot time + starttime ticks; boot time = now - uptime.
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
            - uptime
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        ProcessStats {
            resident_bytes: kb("VmRSS:").map_or(num(24) * PAGE_SIZE, |k| k * 1024),
            virtual_bytes: num(23),
            open_fds,
            max_fds,
            cpu_seconds: (num(14) + num(15)) as f64 / USER_HZ,
            start_time_seconds: boot + num(22) as f64 / USER_HZ,
            threads: kb("Threads:").unwrap_or_else(|| num(20)),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        if let Some(p) = ProcessStats::read() {
            let gauges: [(&str, &str, Option<u64>); 5] = [
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    Some(p.resident_bytes),
                ),
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    Some(p.virtual_bytes),
                ),
                (
                    "process_open_fds",
                    "Number of open file descriptors.",
                    Some(p.open_fds),
                ),
                (
                    "process_max_fds",
                    "Maximum number of open file descriptors.",
                    p.max_fds,
                ),
                (
                    "process_threads",
                    "Number of OS threads in the process.",
                    Some(p.threads),
                ),
            ];
            for (name, help, value) in gauges {
                let Some(value) = value else { continue };
                let g = ConstGauge::new(to_i64(value));
                g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
            let cpu = ConstCounter::new(p.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
            let start = ConstGauge::new(p.start_time_seconds);
            start.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                None,
                start.metric_type(),
            )?)?;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let tasks = ConstGauge::new(to_i64(handle.metrics().num_alive_tasks() as u64));
            tasks.encode(encoder.encode_descriptor(
                "tokio_alive_tasks",
                "Tasks alive on the Tokio runtime that serves this scrape.",
                None,
                tasks.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct EventDrops(EventBroadcaster);

impl Collector for EventDrops {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = ConstCounter::new(self.0.dropped_events());
        let m = encoder.encode_descriptor(
            "events_dropped",
            "Events dropped because the event pipeline's queue was full",
            None,
            c.metric_type(),
        )?;
        c.encode(m)
    }
}

/// The registered clients; encodes the `rest_client_*` families.
#[derive(Clone, Debug, Default)]
struct RestClients(Arc<Mutex<Vec<Arc<ClientMetrics>>>>);

/// client-go's `code` label: the status code, or `<error>` when no answer came.
fn code_label(code: u16) -> String {
    if code == 0 {
        "<error>".to_owned()
    } else {
        code.to_string()
    }
}

/// All registered clients' counters, summed per label set.
#[derive(Default)]
struct RestTotals {
    /// (code, method, host) → attempts.
    requests: BTreeMap<(String, String, String), u64>,
    /// (code, verb, host) → retried attempts.
    retries_by_code: BTreeMap<(String, String, String), u64>,
    /// (verb, host) → latency.
    request_latency: BTreeMap<(String, String), LatencyHistogram>,
    rate_limiter_latency: BTreeMap<(String, String), LatencyHistogram>,
    too_many_requests: u64,
    retries: u64,
    /// host → whether the throttle applies (any registered client of that host).
    throttle_enabled: BTreeMap<String, bool>,
}

fn merge(into: &mut LatencyHistogram, h: &LatencyHistogram) {
    for (a, b) in into.counts.iter_mut().zip(h.counts.iter()) {
        *a += b;
    }
    into.sum = into.sum.saturating_add(h.sum);
    into.count += h.count;
}

impl RestTotals {
    fn of(clients: &[Arc<ClientMetrics>]) -> RestTotals {
        let mut t = RestTotals::default();
        for c in clients {
            let s = c.snapshot();
            for ((method, code), n) in &s.requests {
                *t.requests
                    .entry((code_label(*code), method.clone(), s.host.clone()))
                    .or_default() += n;
            }
            for ((verb, code), n) in &s.retries_by_code {
                *t.retries_by_code
                    .entry((code_label(*code), verb.clone(), s.host.clone()))
                    .or_default() += n;
            }
            for (verb, h) in &s.request_latency {
                merge(
                    t.request_latency
                        .entry((verb.clone(), s.host.clone()))
                        .or_default(),
                    h,
                );
            }
            for (verb, h) in &s.rate_limiter_latency {
                merge(
                    t.rate_limiter_latency
                        .entry((verb.clone(), s.host.clone()))
                        .or_default(),
                    h,
                );
            }
            t.too_many_requests += s.too_many_requests;
            t.retries += s.retries;
            let on = s.throttle.is_some_and(|d| d.throttles());
            *t.throttle_enabled.entry(s.host.clone()).or_default() |= on;
        }
        t
    }
}

fn encode_latency(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &BTreeMap<(String, String), LatencyHistogram>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for ((verb, host), h) in series {
        let l = labels(&[("verb", verb), ("host", host)]);
        m.encode_family(&l)?.encode_histogram::<Labels>(
            h.sum.as_secs_f64(),
            h.count,
            &h.buckets(),
            None,
        )?;
    }
    Ok(())
}

impl Collector for RestClients {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let clients: Vec<Arc<ClientMetrics>> = lock(&self.0).clone();
        if clients.is_empty() {
            return Ok(());
        }
        let t = RestTotals::of(&clients);
        {
            let mut m = encoder.encode_descriptor(
                "rest_client_requests",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                None,
                MetricType::Counter,
            )?;
            for ((code, method, host), n) in &t.requests {
                let l = labels(&[("code", code), ("method", method), ("host", host)]);
                ConstCounter::new(*n).encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "rest_client_request_retries",
                "Number of request retries, partitioned by status code, verb, and host.",
                None,
                MetricType::Counter,
            )?;
            for ((code, verb, host), n) in &t.retries_by_code {
                let l = labels(&[("code", code), ("verb", verb), ("host", host)]);
                ConstCounter::new(*n).encode(m.encode_family(&l)?)?;
            }
        }
        encode_latency(
            &mut encoder,
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            &t.request_latency,
        )?;
        encode_latency(
            &mut encoder,
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            &t.rate_limiter_latency,
        )?;
        {
            let mut m = encoder.encode_descriptor(
                "rest_client_rate_limiter_enabled",
                "1 while the client-side rate limiter applies to requests, 0 when it is off.",
                None,
                MetricType::Gauge,
            )?;
            for (host, on) in &t.throttle_enabled {
                let l = labels(&[("host", host)]);
                ConstGauge::new(i64::from(*on)).encode(m.encode_family(&l)?)?;
            }
        }
        let tmr = ConstCounter::new(t.too_many_requests);
        tmr.encode(encoder.encode_descriptor(
            "rest_client_too_many_requests",
            "429 Too Many Requests answers from the API server",
            None,
            tmr.metric_type(),
        )?)?;
        let retries = ConstCounter::new(t.retries);
        retries.encode(encoder.encode_descriptor(
            "rest_client_retries",
            "API requests that were retries of an earlier attempt",
            None,
            retries.metric_type(),
        )?)?;
        Ok(())
    }
}

/// A bind address flag that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag} {value:?}: expected \"0\" (off), \":<port>\" or \"<host>:<port>\"")]
pub struct BindAddressError {
    /// The flag's name (`--metrics-bind-address`, `--health-probe-bind-address`).
    pub flag: String,
    /// The value given.
    pub value: String,
}

/// Parses a bind-address flag the way controller-runtime reads `--metrics-bind-address` and
/// `--health-probe-bind-address`: `"0"` turns the server off (`None`), `":8080"` listens on
/// every interface, `"127.0.0.1:8080"` or `"[::1]:8080"` on one.
pub fn parse_bind_address(flag: &str, value: &str) -> Result<Option<SocketAddr>, BindAddressError> {
    let err = || BindAddressError {
        flag: flag.to_owned(),
        value: value.to_owned(),
    };
    let v = value.trim();
    if v == "0" {
        return Ok(None);
    }
    let full = if v.starts_with(':') {
        format!("0.0.0.0{v}")
    } else {
        v.to_owned()
    };
    full.parse::<SocketAddr>().map(Some).map_err(|_| err())
}

/// Serves `registry` on `GET /metrics` at `addr` until `cancel` fires. Binds before it returns
/// (so port 0 works; see [`ServerHandle::local_addr`]); the accept loop runs on a task the
/// handle owns.
pub async fn serve_metrics(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    cancel: CancellationToken,
) -> std::io::Result<ServerHandle> {
    serve_metrics_with(addr, registry, cancel, probe_serving_limits()).await
}

/// [`serve_metrics`] under explicit connection limits (the manager's `--max-connections`,
/// `--header-read-timeout`, `--idle-timeout`).
pub async fn serve_metrics_with(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    cancel: CancellationToken,
    limits: apimachinery::serving::ServingLimits,
) -> std::io::Result<ServerHandle> {
    serve_metrics_and_machinery(addr, registry, None, cancel, limits).await
}

/// [`serve_metrics_with`], and with `machinery` also `/trace`, `/machinery` and
/// `/machinery/counts` (see [`crate::machinery`]): what the manager serves.
pub async fn serve_metrics_and_machinery(
    addr: SocketAddr,
    registry: Arc<Mutex<Registry>>,
    machinery: Option<Machinery>,
    cancel: CancellationToken,
    limits: apimachinery::serving::ServingLimits,
) -> std::io::Result<ServerHandle> {
    serve_routes_with(addr, cancel, limits, move |path, query| {
        if path != "/metrics" {
            return machinery.as_ref()?.route(path, query).map(Ok);
        }
        let body = encode_registry(&registry);
        Some(
            Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
                .body(full(body)),
        )
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample_client_go::leaderelection::LeaderMetrics;

    #[test]
    fn process_stats_read_proc_texts_as_the_process_collector_does() {
        // A command name with spaces and a parenthesis, as /proc allows.
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 7 0 \
                    12345 104857600 5120 18446744073709551615";
        let status = "Name:\tcmd\nVmRSS:\t   20480 kB\nThreads:\t9\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        let p = ProcessStats::parse(stat, status, limits, "1000.00 3000.00", 17);
        assert_eq!(p.resident_bytes, 20480 * 1024);
        assert_eq!(p.virtual_bytes, 104_857_600);
        assert_eq!(p.open_fds, 17);
        assert_eq!(p.max_fds, Some(1024));
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.threads, 9);
        // Without `status`, the RSS comes from stat's pages and the threads from its field 20.
        let p = ProcessStats::parse(stat, "", "", "", 3);
        assert_eq!(p.resident_bytes, 5120 * 4096);
        assert_eq!(p.threads, 7);
        assert_eq!(p.max_fds, None);
        // Garbage reads as zeros, not a panic.
        assert_eq!(ProcessStats::parse("garbage", "x", "y", "z", 0).open_fds, 0);
    }

    #[tokio::test]
    async fn a_scrape_shows_the_process_and_its_tasks() {
        let text = Metrics::new().encode();
        if std::path::Path::new("/proc/self/stat").exists() {
            let fds = text
                .lines()
                .find_map(|l| l.strip_prefix("process_open_fds "))
                .and_then(|v| v.parse::<u64>().ok());
            assert!(fds.is_some_and(|n| n > 0), "{text}");
            assert!(text.contains("process_resident_memory_bytes "), "{text}");
            assert!(text.contains("process_cpu_seconds_total "), "{text}");
        }
        // This test itself runs as a task.
        let tasks = text
            .lines()
            .find_map(|l| l.strip_prefix("tokio_alive_tasks "))
            .and_then(|v| v.parse::<u64>().ok());
        assert!(tasks.is_some(), "{text}");
    }

    /// A controller's kept series export exactly what the per-call lookups export: the same
    /// lines with the same values, and no series before its first observation.
    #[test]
    fn kept_series_export_what_per_call_lookups_export() {
        let (kept, looked_up) = (Metrics::new(), Metrics::new());
        // The controller families' samples, sorted (a family lists its series in hash order;
        // the process collector's samples differ between calls).
        let samples = |m: &Metrics| {
            let mut lines: Vec<String> = m
                .encode()
                .lines()
                .filter(|l| l.starts_with("controller"))
                .map(str::to_owned)
                .collect();
            lines.sort();
            lines.join("\n")
        };
        let series = ControllerSeries::new(kept.controller(), "at");
        let direct = looked_up.controller();
        series.observe_trigger("added");
        direct.observe_trigger("at", "added");
        assert_eq!(samples(&kept), samples(&looked_up));
        assert!(!samples(&kept).contains("controller_sync_errors_total{"));
        assert!(!samples(&kept).contains("trigger=\"timer\""));
        for (ms, result) in [
            (3, ReconcileResult::Success),
            (7, ReconcileResult::RequeueAfter),
            (9, ReconcileResult::Error),
            (11, ReconcileResult::Panic),
            (5, ReconcileResult::Success),
        ] {
            series.observe_reconcile(Duration::from_millis(ms), result);
            direct.observe_reconcile("at", Duration::from_millis(ms), result);
        }
        series.observe_trigger("timer");
        direct.observe_trigger("at", "timer");
        series.observe_trigger("something-new");
        direct.observe_trigger("at", "something-new");
        series.add_active_workers(2);
        series.add_active_workers(-1);
        direct.add_active_workers("at", 1);
        let text = samples(&kept);
        assert_eq!(text, samples(&looked_up));
        for line in [
            "controller_sync_total{controller=\"at\"} 5",
            "controller_sync_errors_total{controller=\"at\"} 2",
            "controller_runtime_reconcile_total{controller=\"at\",result=\"success\"} 2",
            "controller_runtime_reconcile_total{controller=\"at\",result=\"error\"} 2",
            "controller_runtime_reconcile_panics_total{controller=\"at\"} 1",
            "controller_runtime_active_workers{controller=\"at\"} 1",
            "controller_reconcile_triggers_total{controller=\"at\",trigger=\"something-new\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn bind_addresses_as_controller_runtime_reads_them() {
        let f = "--metrics-bind-address";
        assert_eq!(parse_bind_address(f, "0"), Ok(None));
        assert_eq!(
            parse_bind_address(f, ":8080"),
            Ok(Some("0.0.0.0:8080".parse().unwrap()))
        );
        assert_eq!(
            parse_bind_address(f, "127.0.0.1:9090"),
            Ok(Some("127.0.0.1:9090".parse().unwrap()))
        );
        assert_eq!(
            parse_bind_address(f, "[::1]:8081"),
            Ok(Some("[::1]:8081".parse().unwrap()))
        );
        let e = parse_bind_address(f, "localhost:http").unwrap_err();
        assert!(e.to_string().contains("--metrics-bind-address"));
        assert!(e.to_string().contains("localhost:http"));
        assert!(parse_bind_address(f, ":99999").is_err());
    }

    fn test_client(url: &str) -> Client {
        Client::new(sample_client_go::client::Config::new(url.parse().unwrap())).unwrap()
    }

    #[test]
    fn rest_client_families_have_client_go_names_labels_and_buckets() {
        use http::Method;
        let m = Metrics::new();
        assert!(
            !m.encode().contains("rest_client"),
            "no client, no families"
        );
        let client = test_client("http://10.0.0.1:6443");
        let cm = client.metrics();
        for ms in [3, 5, 6, 700] {
            cm.observe_request(&Method::GET, Duration::from_millis(ms));
        }
        cm.observe_request(&Method::GET, Duration::from_secs(90));
        cm.observe_request(&Method::PUT, Duration::from_millis(30));
        cm.observe_throttle(&Method::GET, Duration::ZERO);
        cm.observe_throttle(&Method::GET, Duration::from_millis(200));
        cm.record_attempt(&Method::GET, 200, false);
        cm.record_attempt(&Method::GET, 0, false);
        cm.record_attempt(&Method::GET, 0, true);
        cm.record_attempt(&Method::GET, 429, false);
        m.register_client(&client);
        // The same server through a second client: its series add up with the first's.
        let other = test_client("http://10.0.0.1:6443");
        other.metrics().record_attempt(&Method::GET, 200, false);
        m.register_client(&other);
        let text = m.encode();
        let h = "host=\"10.0.0.1:6443\"";
        let bucket = |le: &str, n: u64| {
            format!(
                "rest_client_request_duration_seconds_bucket{{le=\"{le}\",verb=\"GET\",{h}}} {n}\n"
            )
        };
        let mut expected = vec![
            bucket("0.005", 2),
            bucket("0.025", 3),
            bucket("0.1", 3),
            bucket("0.25", 3),
            bucket("0.5", 3),
            bucket("1.0", 4),
        ];
        for le in ["2.0", "4.0", "8.0", "15.0", "30.0", "60.0"] {
            expected.push(bucket(le, 4));
        }
        expected.push(bucket("+Inf", 5));
        expected.extend([
            format!("rest_client_request_duration_seconds_count{{verb=\"GET\",{h}}} 5\n"),
            format!("rest_client_request_duration_seconds_sum{{verb=\"PUT\",{h}}} 0.03\n"),
            format!("rest_client_request_duration_seconds_bucket{{le=\"0.025\",verb=\"PUT\",{h}}} 0\n"),
            format!("rest_client_request_duration_seconds_bucket{{le=\"0.1\",verb=\"PUT\",{h}}} 1\n"),
            format!("rest_client_rate_limiter_duration_seconds_bucket{{le=\"0.005\",verb=\"GET\",{h}}} 1\n"),
            format!("rest_client_rate_limiter_duration_seconds_bucket{{le=\"0.25\",verb=\"GET\",{h}}} 2\n"),
            format!("rest_client_requests_total{{code=\"200\",method=\"GET\",{h}}} 2\n"),
            format!("rest_client_requests_total{{code=\"<error>\",method=\"GET\",{h}}} 2\n"),
            format!("rest_client_requests_total{{code=\"429\",method=\"GET\",{h}}} 1\n"),
            format!("rest_client_request_retries_total{{code=\"<error>\",verb=\"GET\",{h}}} 1\n"),
            "rest_client_too_many_requests_total 1\n".to_owned(),
            "rest_client_retries_total 1\n".to_owned(),
            "# TYPE rest_client_request_duration_seconds histogram\n".to_owned(),
            "# TYPE rest_client_requests counter\n".to_owned(),
        ]);
        for line in expected {
            assert!(text.contains(&line), "{line:?} missing from:\n{text}");
        }
        // Each family once, however many clients.
        assert_eq!(
            text.matches("# TYPE rest_client_requests counter").count(),
            1
        );
        // Registering a client twice does not double its counts.
        m.register_client(&client);
        let rest = |t: &str| -> String {
            t.lines()
                .filter(|l| l.contains("rest_client"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(rest(&m.encode()), rest(&text));
    }

    #[test]
    fn labelled_families_appear_with_their_first_sample() {
        let m = Metrics::new();
        let text = m.encode();
        assert!(!text.contains("controller_sync"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        m.leader_election().set_leading("kube-system/cnat", false);
        let text = m.encode();
        assert!(
            text.contains("# TYPE leader_election_master_status gauge"),
            "{text}"
        );
        assert!(text.contains("leader_election_master_status{name=\"kube-system/cnat\"} 0"));
    }
}
