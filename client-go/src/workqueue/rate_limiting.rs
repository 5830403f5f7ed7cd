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
//!
//! ## Triggers
//!
//! A retry's trigger is `rate-limited retry n` (n: the failures on record, `num_requeues`),
//! with the failed sync's error when the worker gives it
//! ([`add_rate_limited_because`](RateLimitingQueue::add_rate_limited_because)). An add that
//! joins a pending retry keeps its own trigger, after the retry's: the reconcile that runs when
//! the backoff ends says both (see [`crate::keytrace`]).

use super::delaying::DelayingQueue;
use super::metrics::QueueMetrics;
use super::rate_limiters::{MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter};
use crate::keytrace::{KeyTracer, Stage, Trigger, Triggers, current_trigger, seconds};
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
        self.add_with(item, current_trigger());
    }

    /// [`add`](Self::add), saying why.
    pub fn add_with(&self, item: T, trigger: Trigger) {
        match self.queue.join_backoff(&item, trigger.clone()) {
            Some(due) => {
                tracing::trace!("add joins the pending rate-limited retry");
                self.hop(&item, || {
                    format!(
                        "add: joins the pending rate-limited retry (due in {})",
                        seconds(due.saturating_duration_since(Instant::now()))
                    )
                });
            }
            None => self.queue.add_with(item, trigger),
        }
    }

    /// Records a failure of `item` with the rate limiter and adds it back after the delay the
    /// limiter returns. If the item is already waiting out a backoff, it joins that retry and
    /// the limiter is not asked again. Ignored after shutdown.
    pub fn add_rate_limited(&self, item: T) {
        self.add_rate_limited_because(item, None::<&str>);
    }

    /// [`add_rate_limited`](Self::add_rate_limited), with the failed sync's error: the retry's
    /// trigger says it (`rate-limited retry 2 after: <error>`).
    pub fn add_rate_limited_because(&self, item: T, error: Option<impl Into<Box<str>>>) {
        if self.queue.shutting_down() {
            return;
        }
        let error = error.map(Into::into);
        let pending = Trigger::Retry {
            attempt: self.limiter.num_requeues(&item),
            error: error.clone(),
        };
        if self.queue.join_backoff(&item, pending).is_some() {
            return;
        }
        let delay = self.limiter.when(&item);
        let attempt = self.limiter.num_requeues(&item);
        if let Some(m) = self.queue_metrics_retries() {
            m.inc();
        }
        self.hop(&item, || {
            format!("add_rate_limited: retry {attempt} in {}", seconds(delay))
        });
        let retry = Trigger::Retry { attempt, error };
        if delay.is_zero() {
            self.queue.add_with(item, retry);
        } else {
            self.queue
                .insert_waiting(item, Instant::now() + delay, delay, Some(retry));
        }
    }

    /// Records a queue hop of `item` when it is traced.
    fn hop(&self, item: &T, text: impl FnOnce() -> String) {
        if let Some(trace) = self.queue.queue().trace()
            && let Some(key) = trace.traced(item)
        {
            let hop = trace.hop(key, Stage::Queue, text());
            trace.tracer.emit(hop);
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

    /// The tracer attached with [`set_key_tracer`](Self::set_key_tracer), if any.
    pub fn key_tracer(&self) -> Option<&KeyTracer> {
        self.queue.queue().trace().map(|t| &t.tracer)
    }

    /// See [`Queue::get_with_triggers`](super::Queue::get_with_triggers).
    pub async fn get_with_triggers(&self) -> Option<(T, Triggers)> {
        self.queue.get_with_triggers().await
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

    /// See [`DelayingQueue::hold`].
    pub fn hold(&self) {
        self.queue.hold();
    }

    /// See [`DelayingQueue::is_held`].
    pub fn is_held(&self) -> bool {
        self.queue.is_held()
    }

    /// See [`DelayingQueue::release`].
    pub fn release(&self) {
        self.queue.release();
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

impl<T> RateLimitingQueue<T>
where
    T: AsRef<str> + Clone + Eq + Hash + Send + Sync + 'static,
{
    /// See [`Queue::set_key_tracer`](super::Queue::set_key_tracer).
    pub fn set_key_tracer(&self, tracer: KeyTracer, controller: &'static str) {
        self.queue.queue().set_key_tracer(tracer, controller);
    }
}

/// The limiter type of [`RateLimitingQueue::with_default_controller_rate_limiter`].
pub type DefaultControllerRateLimiter<T> = MaxOfRateLimiter<T>;

/// The trigger bookkeeping of the three layers together: what a worker is told about why a key
/// is in its hands.
#[cfg(test)]
mod trigger_tests {
    use super::*;
    use crate::keytrace::{
        EventType, KeyTracer, MAX_TRIGGERS_PER_KEY, Notifying, Stage, TraceFilter, notifying,
    };
    use std::time::Duration;

    type Q = RateLimitingQueue<String>;

    fn event(event: EventType, object: &str, rv: &str) -> Trigger {
        Trigger::Event {
            event,
            kind: "Pod",
            object: object.into(),
            resource_version: rv.into(),
            traceparent: None,
        }
    }

    /// An `add` made by a handler while the informer hands it `trigger`.
    fn handler_add(q: &Q, key: &str, trigger: Trigger) {
        let n = Notifying {
            trigger,
            handler: "on_update",
            times: None,
        };
        notifying(n, || q.add(key.to_owned()));
    }

    fn texts(t: &Triggers) -> Vec<String> {
        t.iter()
            .map(|c| match c.count {
                1 => c.trigger.to_string(),
                n => format!("{} (x{n})", c.trigger),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn adds_of_a_waiting_key_collapse_their_triggers_like_the_key() {
        let q = Q::with_default_controller_rate_limiter();
        for rv in ["5", "6", "7"] {
            handler_add(&q, "ns/a", event(EventType::Modified, "ns/a-pod", rv));
        }
        handler_add(&q, "ns/a", event(EventType::Added, "ns/a", "4"));
        q.add("ns/a".to_owned());
        assert_eq!(q.len(), 1, "one key");
        let (key, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(key, "ns/a");
        assert_eq!(
            texts(&why),
            [
                "MODIFIED Pod ns/a-pod rv 7 (x3)",
                "ADDED Pod ns/a rv 4",
                "added directly"
            ]
        );
        assert_eq!(why.total(), 5);
        // While it is processed, adds start the next round's triggers.
        handler_add(&q, "ns/a", event(EventType::Modified, "ns/a-pod", "8"));
        q.done(&key);
        let (_, again) = q.get_with_triggers().await.unwrap();
        assert_eq!(texts(&again), ["MODIFIED Pod ns/a-pod rv 8"]);
        q.done(&key);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_keeps_a_bounded_number_of_triggers() {
        let q = Q::with_default_controller_rate_limiter();
        for i in 0..50 {
            handler_add(
                &q,
                "ns/a",
                event(EventType::Modified, &format!("ns/p{i}"), "1"),
            );
        }
        let (_, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(why.len(), MAX_TRIGGERS_PER_KEY);
        assert_eq!(why.dropped(), 50 - MAX_TRIGGERS_PER_KEY as u32);
        assert_eq!(why.total(), 50);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_that_comes_due_while_the_key_waits_is_added_after_the_event() {
        let q = Q::with_default_controller_rate_limiter();
        q.add_after("ns/a".to_owned(), Duration::from_secs(5));
        // An event before the timer: the key is queued now, for the event.
        handler_add(&q, "ns/a", event(EventType::Modified, "ns/a", "9"));
        tokio::time::sleep(Duration::from_secs(6)).await;
        // The timer came due while the key still waited: it joins the same reconcile.
        let (_, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(
            texts(&why),
            ["MODIFIED Pod ns/a rv 9", "add_after(5.00s) came due"]
        );
        assert_eq!(q.waiting_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn events_during_a_backoff_follow_the_retry_that_brings_the_key_back() {
        let q = Q::with_default_controller_rate_limiter();
        q.add("ns/a".to_owned());
        let (key, _) = q.get_with_triggers().await.unwrap();
        q.add_rate_limited_because(key.clone(), Some("creating pod: 503"));
        q.done(&key);
        // An event while the key backs off joins the pending retry, and a second failure
        // report joins it too (the limiter is not asked again).
        handler_add(&q, "ns/a", event(EventType::Modified, "ns/a-pod", "3"));
        q.add_rate_limited(key.clone());
        assert_eq!(
            (q.len(), q.num_requeues(&key)),
            (0, 1),
            "nothing runs early"
        );
        let t0 = tokio::time::Instant::now();
        let (_, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(t0.elapsed(), Duration::from_millis(5), "the first backoff");
        assert_eq!(
            texts(&why),
            [
                "rate-limited retry 1 after: creating pod: 503 (x2)",
                "MODIFIED Pod ns/a-pod rv 3"
            ]
        );
        // The next failure is retry 2.
        q.add_rate_limited_because(key.clone(), Some("still 503"));
        q.done(&key);
        let (_, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(texts(&why), ["rate-limited retry 2 after: still 503"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_add_after_replaces_a_backoff_and_says_both() {
        let q = Q::with_default_controller_rate_limiter();
        for _ in 0..4 {
            // Four failures: the next backoff is 5 ms · 2^4 = 80 ms.
            q.add_rate_limited("ns/a".to_owned());
            let (k, _) = q.get_with_triggers().await.unwrap();
            q.done(&k);
        }
        q.add_rate_limited_because("ns/a".to_owned(), Some("boom"));
        q.add_after("ns/a".to_owned(), Duration::from_millis(10));
        let t0 = tokio::time::Instant::now();
        let (_, why) = q.get_with_triggers().await.unwrap();
        assert_eq!(
            t0.elapsed(),
            Duration::from_millis(10),
            "the earlier deadline wins"
        );
        assert_eq!(
            texts(&why),
            [
                "add_after(10.0ms) came due",
                "rate-limited retry 5 after: boom"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_traced_key_reports_its_queue_hops_and_others_cost_nothing() {
        let q = Q::with_default_controller_rate_limiter();
        let tracer = KeyTracer::new();
        q.set_key_tracer(tracer.clone(), "at");
        q.add("ns/other".to_owned());
        let mut reader = tracer.subscribe(TraceFilter::key("ns/a")).unwrap();
        q.add("ns/a".to_owned());
        q.add("ns/a".to_owned());
        q.add("ns/b".to_owned());
        let (first, _) = q.get_with_triggers().await.unwrap();
        assert_eq!(first, "ns/other");
        q.done(&first);
        let (key, _) = q.get_with_triggers().await.unwrap();
        q.add_after(key.clone(), Duration::from_secs(1));
        q.done(&key);
        let mut seen = Vec::new();
        while let Some(h) = reader.try_next() {
            assert_eq!((h.key.as_str(), h.controller), ("ns/a", Some("at")));
            seen.push((h.stage, h.text));
        }
        let stages: Vec<Stage> = seen.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            stages,
            [
                Stage::Queue,
                Stage::Queue,
                Stage::Worker,
                Stage::Queue,
                Stage::Queue
            ],
            "{seen:?}"
        );
        assert!(seen[0].1.starts_with("add: queued"), "{seen:?}");
        assert!(seen[1].1.starts_with("add: already waiting"), "{seen:?}");
        assert!(seen[2].1.contains("why: added directly (x2)"), "{seen:?}");
        assert!(seen[3].1.starts_with("add_after(1.00s)"), "{seen:?}");
        assert_eq!(seen[4].1, "done");
    }
}
