//! The rate-limiting queue: the queue controllers use.
//!
//! This is client-go's `util/workqueue/rate_limiting_queue.go`: a [`DelayingQueue`] plus a
//! [`RateLimiter`]. A worker's loop ends every item in one of three ways:
//!
//! ```text
//! sync_handler(key) ── Err ───────────▶ add_rate_limited(key)  retry after the limiter's backoff
//!                   ── Ok(Some(d)) ───▶ forget(key),           success: clear the failure history,
//!                                       add_after(key, d)      then look again at a set time
//!                   ── Ok(None) ──────▶ forget(key)            success: clear the failure history
//!                 and always ─────────▶ done(key)
//! ```
//!
//! - [`add_rate_limited`](RateLimitingQueue::add_rate_limited) = `add_after(item,
//!   limiter.when(item))`: the limiter records a failure and says how long to wait.
//! - [`forget`](RateLimitingQueue::forget) clears the limiter's history for the item. It does not
//!   remove the item from the queue.
//! - [`num_requeues`](RateLimitingQueue::num_requeues) reports the failures on record, for "give
//!   up after N retries" policies.
//!
//! ## Beyond client-go: events join a pending retry
//!
//! In client-go an item waiting out its backoff and a plain `Add` of the same item are
//! independent. An informer event (or a resync, or a watch of a dependent object) that arrives
//! during the backoff queues the item at once, so it is retried early; if it fails again,
//! `AddRateLimited` records another failure. Under a steady trickle of such triggers the failure
//! count grows with the number of *triggers*, not of scheduled retries, so the delay grows
//! faster than the intended `base · 2^n` per retry and soon sits at the cap, while the item is
//! hammered at the trigger rate in between (kubernetes/kubernetes issues 132805 and 112325).
//!
//! Here, while an item waits out a failure backoff (an entry created by `add_rate_limited`):
//!
//! - [`add`](RateLimitingQueue::add) of that item **joins the pending retry**: it is not queued
//!   now, it runs when the backoff ends (a single reconcile sees the latest state then);
//! - a further [`add_rate_limited`](RateLimitingQueue::add_rate_limited) also joins it, without
//!   asking the limiter, so the failure count is not inflated;
//! - [`add_after`](RateLimitingQueue::add_after) keeps client-go's earliest-deadline-wins rule:
//!   a caller that asks for an earlier time explicitly gets it, and the entry stops being a
//!   backoff.
//!
//! The price: a change that would fix the failure (a corrected spec, a deletion) also waits for
//! the backoff to end, up to the limiter's cap. A caller that knows an event must run at once
//! can say so with `add_after(key, Duration::ZERO)`, which queues the item now; the pending
//! retry still fires later (and is deduplicated if the item is still queued by then).
//!
//! An add that arrives while the item is *being processed* is still recorded as usual (the
//! worker may have read stale state), so a failing reconcile followed by `add_rate_limited` can
//! run once more at once if an event came in during it; that run's failure joins the pending
//! backoff instead of adding to it.

use super::delaying::DelayingQueue;
use super::metrics::QueueMetrics;
use super::rate_limiters::{MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A delaying queue with per-item backoff. See the [module documentation](self).
///
/// Cheap to clone: every clone is a handle to the same queue.
pub struct RateLimitingQueue<T> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        RateLimitingQueue {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T> std::fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitingQueue")
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl<T> RateLimitingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed queue using `limiter`.
    ///
    /// # Panics
    /// If called outside a Tokio runtime (the delaying queue's timer task is spawned here).
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        RateLimitingQueue {
            queue: DelayingQueue::new(),
            limiter: Arc::new(limiter),
        }
    }

    /// A queue using `limiter` whose metrics are recorded under `name=<name>`.
    ///
    /// # Panics
    /// If called outside a Tokio runtime.
    pub fn with_metrics(
        name: &str,
        limiter: impl RateLimiter<T> + 'static,
        metrics: &QueueMetrics,
    ) -> Self {
        RateLimitingQueue {
            queue: DelayingQueue::with_metrics(name, metrics),
            limiter: Arc::new(limiter),
        }
    }

    /// An unnamed queue with [`default_controller_rate_limiter`].
    ///
    /// # Panics
    /// If called outside a Tokio runtime.
    pub fn with_default_controller_rate_limiter() -> Self {
        Self::new(default_controller_rate_limiter::<T>())
    }

    /// A named queue with [`default_controller_rate_limiter`], wired to `metrics`.
    ///
    /// # Panics
    /// If called outside a Tokio runtime.
    pub fn named_with_default_controller_rate_limiter(name: &str, metrics: &QueueMetrics) -> Self {
        Self::with_metrics(name, default_controller_rate_limiter::<T>(), metrics)
    }

    /// Marks `item` as needing processing, unless it is waiting out a failure backoff: then the
    /// request joins that pending retry (see the module documentation). Otherwise exactly
    /// [`Queue::add`](super::Queue::add).
    pub fn add(&self, item: T) {
        if self.queue.is_backing_off(&item) {
            tracing::trace!("add joins the pending rate-limited retry");
            return;
        }
        self.queue.add(item);
    }

    /// Records a failure of `item` with the rate limiter and adds it back after the delay the
    /// limiter returns. If the item is already waiting out a backoff, it joins that retry and
    /// the limiter is not asked again. Ignored after shutdown.
    pub fn add_rate_limited(&self, item: T) {
        if self.queue.shutting_down() {
            return;
        }
        if self.queue.is_backing_off(&item) {
            return;
        }
        let delay = self.limiter.when(&item);
        if let Some(m) = self.queue_metrics_retries() {
            m.inc();
        }
        if delay.is_zero() {
            self.queue.add(item);
        } else {
            self.queue
                .insert_waiting(item, Instant::now() + delay, true);
        }
    }

    fn queue_metrics_retries(&self) -> Option<&prometheus_client::metrics::counter::Counter> {
        self.queue.metric_handles().map(|m| &m.retries)
    }

    /// Clears `item`'s failure history in the limiter. The item stays wherever it is.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many failures of `item` the limiter has on record.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// See [`DelayingQueue::add_after`].
    pub fn add_after(&self, item: T, delay: Duration) {
        self.queue.add_after(item, delay);
    }

    /// Whether `item` is waiting out a failure backoff from [`add_rate_limited`](Self::add_rate_limited).
    pub fn is_backing_off(&self, item: &T) -> bool {
        self.queue.is_backing_off(item)
    }

    /// See [`DelayingQueue::deadline`].
    pub fn deadline(&self, item: &T) -> Option<Instant> {
        self.queue.deadline(item)
    }

    /// See [`DelayingQueue::waiting_len`].
    pub fn waiting_len(&self) -> usize {
        self.queue.waiting_len()
    }

    /// See [`Queue::get`](super::Queue::get).
    pub async fn get(&self) -> Option<T> {
        self.queue.get().await
    }

    /// See [`Queue::done`](super::Queue::done).
    pub fn done(&self, item: &T) {
        self.queue.done(item);
    }

    /// See [`Queue::len`](super::Queue::len): waiting items are not counted.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// See [`Queue::is_empty`](super::Queue::is_empty).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// See [`DelayingQueue::shut_down`].
    pub fn shut_down(&self) {
        self.queue.shut_down();
    }

    /// See [`DelayingQueue::shut_down_with_drain`].
    pub async fn shut_down_with_drain(&self) {
        self.queue.shut_down_with_drain().await;
    }

    /// See [`Queue::shutting_down`](super::Queue::shutting_down).
    pub fn shutting_down(&self) -> bool {
        self.queue.shutting_down()
    }

    /// See [`Queue::processing_len`](super::Queue::processing_len).
    pub fn processing_len(&self) -> usize {
        self.queue.processing_len()
    }
}

/// The limiter type of [`RateLimitingQueue::with_default_controller_rate_limiter`].
pub type DefaultControllerRateLimiter<T> = MaxOfRateLimiter<T>;
