//! The worker loop's counters, and how one `sync_handler` call ended.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::metrics::{ControllerMetrics, ControllerSeries, ReconcileResult};
use sample_client_go::keytrace::Triggers;

/// Counters of one controller's worker loop. Cheap to read from tests; with
/// [`SyncStats::with_metrics`] every sync is also exported as `controller_sync_*` on `/metrics`.
#[derive(Debug, Default)]
pub struct SyncStats {
    /// Where syncs are exported, if anywhere.
    pub(super) metrics: Option<ControllerMetrics>,
    /// The controller's series in `metrics`, resolved at the first observation.
    series: OnceLock<ControllerSeries>,
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

    /// Calls `f` with the series of `controller`, when exported: the kept ones of the first
    /// controller observed (a `SyncStats` serves one controller), or, should another use the
    /// same `SyncStats`, series looked up for that call alone.
    pub(super) fn with_series(&self, controller: &str, f: impl FnOnce(&ControllerSeries)) {
        let Some(m) = self.metrics.as_ref() else {
            return;
        };
        let kept = self
            .series
            .get_or_init(|| ControllerSeries::new(m.clone(), controller));
        if kept.controller() == controller {
            f(kept);
        } else {
            f(&ControllerSeries::new(m.clone(), controller));
        }
    }

    pub(super) fn observe(&self, controller: &str, took: Duration, result: ReconcileResult) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.with_series(controller, |s| s.observe_reconcile(took, result));
    }

    /// Counts why one sync of `controller` runs: each of its distinct triggers
    /// (`controller_reconcile_triggers_total{controller,trigger}`).
    pub(super) fn observe_triggers(&self, controller: &str, triggers: &Triggers) {
        self.with_series(controller, |s| {
            for t in triggers.iter() {
                s.observe_trigger(t.trigger.label());
            }
        });
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
