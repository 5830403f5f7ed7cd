//! # Metrics: what a controller manager tells Prometheus
//!
//! The `/metrics` endpoint every production controller serves (controller-runtime serves it on
//! `:8080`, the default here too). [`Metrics`] owns one `prometheus-client`
//! [`Registry`] and the families below; other modules get small cloneable handles
//! ([`ControllerMetrics`], [`ReflectorMetrics`], [`StoreMetrics`], [`LeaderElectionMetrics`]) or
//! register their own families (the workqueue's) through [`Metrics::with_registry`].
//! [`serve_metrics`] exposes the registry over HTTP in the Prometheus/OpenMetrics text format.
//!
//! | family | type | labels | set by |
//! |---|---|---|---|
//! | `controller_sync_total` | counter | `controller` | each `sync_handler` call |
//! | `controller_sync_errors_total` | counter | `controller` | each `sync_handler` error |
//! | `controller_sync_duration_seconds` | histogram | `controller` | each `sync_handler` call |
//! | `rest_client_requests_total` | counter | `verb`, `code` | the [`crate::client::Client`], read at scrape time |
//! | `rest_client_request_duration_seconds` | histogram (sum and count) | `verb`, `code` | the same |
//! | `rest_client_too_many_requests_total` | counter | | 429 answers |
//! | `rest_client_retries_total` | counter | | retried attempts |
//! | `reflector_lists_total` | counter | `name` | each LIST a reflector makes |
//! | `reflector_watches_total` | counter | `name` | each WATCH a reflector opens |
//! | `reflector_gone_total` | counter | `name` | each 410 Gone / expired resourceVersion |
//! | `reflector_last_event_age_seconds` | gauge | `name` | seconds since the reflector's last watch event, computed at scrape time |
//! | `store_objects` | gauge | `name` | objects in each informer's store |
//! | `events_dropped_total` | counter | | events the broadcaster dropped (full queue) |
//! | `leader_election_master_status` | gauge | `name` | 1 while this process leads that election (client-go's name) |
//! | `workqueue_*` | | `name` | the workqueue's own metrics (client-go's names) |
//!
//! A labelled family has no series until its first sample, and prometheus-client then leaves
//! it out of the exposition altogether (no `# TYPE` line either); dashboards see it from the
//! first sync, list or election on.
//!
//! `verb` is the HTTP method (`GET`, `PUT`, ...), as in client-go's `rest_client_*` families;
//! code `0` means the request got no answer. The client keeps a count and a latency sum per
//! (verb, code) rather than buckets, so `rest_client_request_duration_seconds` is exposed as a
//! histogram with only the `+Inf` bucket: rates and means work, quantiles do not.
//!
//! ## Use
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use std::time::Duration;
//! use sample_controller::metrics::{Metrics, serve_metrics};
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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
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

use crate::client::{Client, ClientMetrics};
use crate::health::{ServerHandle, serve_routes};
use crate::record::EventBroadcaster;

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

/// Per-controller `sync_handler` metrics.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl ControllerMetrics {
    /// Records one `sync_handler` call of `controller` that took `took` and failed or not.
    pub fn observe_sync(&self, controller: &str, took: Duration, failed: bool) {
        let l = labels(&[("controller", controller)]);
        self.total.get_or_create(&l).inc();
        if failed {
            self.errors.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }
}

/// Reflector metrics (lists, watches, 410s, last event time).
#[derive(Clone, Debug)]
pub struct ReflectorMetrics {
    lists: Family<Labels, Counter>,
    watches: Family<Labels, Counter>,
    gone: Family<Labels, Counter>,
    last_event: Arc<Mutex<HashMap<String, Instant>>>,
}

impl ReflectorMetrics {
    /// A LIST was made by reflector `name`.
    pub fn list(&self, name: &str) {
        self.lists.get_or_create(&labels(&[("name", name)])).inc();
    }
    /// A WATCH was opened by reflector `name`.
    pub fn watch(&self, name: &str) {
        self.watches.get_or_create(&labels(&[("name", name)])).inc();
    }
    /// Reflector `name` got 410 Gone (its resourceVersion expired).
    pub fn gone(&self, name: &str) {
        self.gone.get_or_create(&labels(&[("name", name)])).inc();
    }
    /// Reflector `name` received a watch event (or bookmark) now.
    pub fn event(&self, name: &str) {
        lock(&self.last_event).insert(name.to_owned(), Instant::now());
    }
}

/// Informer store sizes.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    objects: Family<Labels, Gauge>,
}

impl StoreMetrics {
    /// The store of informer `name` holds `count` objects.
    pub fn set_objects(&self, name: &str, count: usize) {
        self.objects
            .get_or_create(&labels(&[("name", name)]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// `leader_election_master_status{name}`.
#[derive(Clone, Debug)]
pub struct LeaderElectionMetrics {
    status: Family<Labels, Gauge>,
}

impl LeaderElectionMetrics {
    /// Sets whether this process leads election `name`.
    pub fn set_leading(&self, name: &str, leading: bool) {
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
    reflector: ReflectorMetrics,
    store: StoreMetrics,
    leader_election: LeaderElectionMetrics,
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
        let controller = ControllerMetrics {
            total: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(sync_histogram),
        };
        registry.register(
            "controller_sync",
            "Calls of sync_handler, by controller",
            controller.total.clone(),
        );
        registry.register(
            "controller_sync_errors",
            "Calls of sync_handler that returned an error, by controller",
            controller.errors.clone(),
        );
        registry.register(
            "controller_sync_duration_seconds",
            "Time spent in sync_handler, by controller",
            controller.duration.clone(),
        );
        let reflector = ReflectorMetrics {
            lists: Family::default(),
            watches: Family::default(),
            gone: Family::default(),
            last_event: Arc::default(),
        };
        registry.register(
            "reflector_lists",
            "LIST requests made by reflectors",
            reflector.lists.clone(),
        );
        registry.register(
            "reflector_watches",
            "WATCH requests opened by reflectors",
            reflector.watches.clone(),
        );
        registry.register(
            "reflector_gone",
            "410 Gone answers (expired resourceVersion) seen by reflectors",
            reflector.gone.clone(),
        );
        registry.register_collector(Box::new(LastEventAge(reflector.last_event.clone())));
        let store = StoreMetrics {
            objects: Family::default(),
        };
        registry.register(
            "store_objects",
            "Objects in each informer's store",
            store.objects.clone(),
        );
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
            reflector,
            store,
            leader_election,
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
    /// Handle for reflector metrics.
    pub fn reflector(&self) -> ReflectorMetrics {
        self.reflector.clone()
    }
    /// Handle for store sizes.
    pub fn store(&self) -> StoreMetrics {
        self.store.clone()
    }
    /// Handle for `leader_election_master_status`.
    pub fn leader_election(&self) -> LeaderElectionMetrics {
        self.leader_election.clone()
    }

    /// Exposes `client`'s request counters as the `rest_client_*` families.
    pub fn register_client(&self, client: &Client) {
        let metrics = client.metrics();
        self.with_registry(|r| r.register_collector(Box::new(RestClientCollector(metrics))));
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

#[derive(Debug)]
struct LastEventAge(Arc<Mutex<HashMap<String, Instant>>>);

impl Collector for LastEventAge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let ages: Vec<(String, f64)> = lock(&self.0)
            .iter()
            .map(|(name, at)| (name.clone(), now.duration_since(*at).as_secs_f64()))
            .collect();
        let mut metric = encoder.encode_descriptor(
            "reflector_last_event_age_seconds",
            "Seconds since each reflector last received a watch event",
            None,
            MetricType::Gauge,
        )?;
        for (name, age) in ages {
            let l = labels(&[("name", &name)]);
            ConstGauge::new(age).encode(metric.encode_family(&l)?)?;
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

#[derive(Debug)]
struct RestClientCollector(Arc<ClientMetrics>);

impl Collector for RestClientCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.0.snapshot();
        {
            let mut m = encoder.encode_descriptor(
                "rest_client_requests",
                "HTTP requests to the API server, by verb and status code (0: no answer)",
                None,
                MetricType::Counter,
            )?;
            for ((verb, code), stats) in &snap.requests {
                let code = code.to_string();
                let l = labels(&[("verb", verb), ("code", &code)]);
                ConstCounter::new(stats.count).encode(m.encode_family(&l)?)?;
            }
        }
        {
            let mut m = encoder.encode_descriptor(
                "rest_client_request_duration_seconds",
                "Time to response headers of API requests, by verb and status code",
                None,
                MetricType::Histogram,
            )?;
            for ((verb, code), stats) in &snap.requests {
                let code = code.to_string();
                let l = labels(&[("verb", verb), ("code", &code)]);
                m.encode_family(&l)?.encode_histogram::<Labels>(
                    stats.latency_sum.as_secs_f64(),
                    stats.count,
                    &[(f64::INFINITY, stats.count)],
                    None,
                )?;
            }
        }
        let tmr = ConstCounter::new(snap.too_many_requests);
        tmr.encode(encoder.encode_descriptor(
            "rest_client_too_many_requests",
            "429 Too Many Requests answers from the API server",
            None,
            tmr.metric_type(),
        )?)?;
        let retries = ConstCounter::new(snap.retries);
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
    serve_routes(addr, cancel, move |path| {
        if path != "/metrics" {
            return None;
        }
        let body = encode_registry(&registry);
        Some(
            Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
                .body(Full::new(Bytes::from(body))),
        )
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

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
