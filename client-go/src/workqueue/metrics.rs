//! Prometheus metrics for named work queues, with client-go's names, label and buckets.
//!
//! A controller's queue is the best single place to see whether it keeps up: how many keys wait
//! (`depth`), how long they wait (`queue_duration`), how long one reconcile takes
//! (`work_duration`), whether a worker is stuck (`unfinished_work`, `longest_running_processor`)
//! and how often things fail (`retries`). client-go emits these from `util/workqueue/metrics.go`
//! through the Prometheus provider in component-base; dashboards and alerts written for
//! kube-controller-manager read exactly these names, so this module keeps them:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `workqueue_depth` | gauge | +1 when an add newly marks an item dirty, −1 when a worker gets it |
//! | `workqueue_adds_total` | counter | adds that were not deduplicated |
//! | `workqueue_queue_duration_seconds` | histogram | first (not deduplicated) add → get |
//! | `workqueue_work_duration_seconds` | histogram | get → done |
//! | `workqueue_unfinished_work_seconds` | gauge | sum of the ages of the items being processed, refreshed every 500 ms |
//! | `workqueue_longest_running_processor_seconds` | gauge | the largest of those ages |
//! | `workqueue_retries_total` | counter | one per `add_after`, and one per `add_rate_limited` that is not joined to a pending backoff |
//!
//! Every series carries one label, `name`, the queue's name. Both histograms use client-go's
//! buckets, `ExponentialBuckets(10e-9, 10, 10)`: 1e-8, 1e-7, …, 1, 10 seconds.
//!
//! ## How data enters and leaves
//!
//! The caller owns the [`Registry`] (the one its `/metrics` endpoint encodes) and registers the
//! metric families once with [`QueueMetrics::new`]. Each named queue then takes its own series
//! from those families (`Queue::with_metrics(name, &metrics)` and the delaying and
//! rate-limiting variants); the queue updates them on its hot path with plain atomic
//! operations, and a small timer task owned by the queue refreshes the two "unfinished work"
//! gauges every 500 ms. Unnamed queues (`Queue::new()`) record nothing and pay nothing, as in
//! client-go, where an empty `Name` or a missing provider means no metrics.
//!
//! ## Differences from client-go
//!
//! - client-go installs the provider globally (`workqueue.SetProvider`), once per process. Here
//!   the families live in a value the caller passes in, so two registries (two tests, say) never
//!   share state and no global exists.
//! - A registry created with a prefix (`Registry::with_prefix`) prefixes these names too; pass an
//!   unprefixed registry (or the root one) to get client-go's exact names.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The label set of every work-queue series: `name=<queue name>`.
pub type QueueLabels = Vec<(String, String)>;

/// A gauge holding seconds as an `f64`.
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// The bucket boundaries client-go uses for both work-queue histograms (seconds).
pub fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(1e-8, 10.0, 10)
}

fn new_duration_histogram() -> Histogram {
    Histogram::new(duration_buckets())
}

/// The work-queue metric families, registered in a caller-supplied registry.
///
/// Cheap to clone: the families are shared handles, so every clone feeds the same series.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    work_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    unfinished_work: Family<QueueLabels, SecondsGauge>,
    longest_running: Family<QueueLabels, SecondsGauge>,
    retries: Family<QueueLabels, Counter>,
}

impl QueueMetrics {
    /// Registers the seven work-queue families in `registry` and returns the handle queues take
    /// their series from. Call it once per registry: registering twice would emit every family
    /// twice.
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = QueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(new_duration_histogram as fn() -> _),
            work_duration: Family::new_with_constructor(new_duration_histogram as fn() -> _),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            retries: Family::default(),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            metrics.depth.clone(),
        );
        // prometheus-client appends `_total` to counters: this is `workqueue_adds_total`.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            metrics.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            metrics.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by \
             work_duration. Large values indicate stuck threads. One can deduce the number of \
             stuck threads by observing the rate at which this increases.",
            metrics.unfinished_work.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            metrics.longest_running.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            metrics.retries.clone(),
        );
        metrics
    }

    /// The series of the queue called `name`. Queues with the same name share series, as in
    /// client-go.
    pub(crate) fn for_queue(&self, name: &str) -> QueueMetricHandles {
        let labels: QueueLabels = vec![("name".to_owned(), name.to_owned())];
        QueueMetricHandles {
            depth: self.depth.get_or_create_owned(&labels),
            adds: self.adds.get_or_create_owned(&labels),
            queue_duration: self.queue_duration.get_or_create_owned(&labels),
            work_duration: self.work_duration.get_or_create_owned(&labels),
            unfinished_work: self.unfinished_work.get_or_create_owned(&labels),
            longest_running: self.longest_running.get_or_create_owned(&labels),
            retries: self.retries.get_or_create_owned(&labels),
        }
    }
}

/// One queue's series, resolved once at construction so the hot path touches no family map.
#[derive(Clone, Debug)]
pub(crate) struct QueueMetricHandles {
    pub(crate) depth: Gauge,
    pub(crate) adds: Counter,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
    pub(crate) unfinished_work: SecondsGauge,
    pub(crate) longest_running: SecondsGauge,
    pub(crate) retries: Counter,
}
