//! The delaying queue: `add_after(item, d)` puts an item on the queue once `d` has passed.
//!
//! This is client-go's `util/workqueue/delaying_queue.go`. Controllers use it for "look again
//! later": the cnat `At` controller requeues a key for the moment its schedule comes due, and the
//! rate-limiting queue builds its backoff on it.
//!
//! ## How it works
//!
//! ```text
//!  add_after(x, d) ──▶ waiting: x ↦ deadline          (one entry per distinct item)
//!                        │  ordered by (deadline, seq)
//!                        ▼
//!            timer task: sleep_until(earliest) ──▶ Queue::add(x) for every entry that is due
//! ```
//!
//! One background task per queue owns a single `tokio::time::sleep_until` aimed at the earliest
//! deadline. `add_after` inserts the entry under a mutex and wakes the task only if the new entry
//! became the earliest. When the task wakes it moves every due entry (in batches of
//! [`FIRE_BATCH`]) into the underlying [`Queue`], where the usual dedup applies: a delayed add of
//! an item that is still queued is a no-op.
//!
//! ## Invariants
//!
//! - **Coalescing:** an item waits at most once. Adding it again with an earlier deadline moves
//!   it earlier; with a later (or equal) deadline the new request is dropped. Ten `add_after`
//!   calls for one key cost one entry.
//! - A zero duration adds at once (Rust durations cannot be negative; client-go's `d <= 0`).
//! - Memory is proportional to the number of distinct waiting items: one map entry and one
//!   ordered-index entry each, removed when the item fires.
//! - All waiting goes through `tokio::time`, so a test with a paused clock can run a schedule a
//!   year ahead in a millisecond.
//!
//! ## Differences from client-go
//!
//! - client-go sends each request through a channel buffered to 1000 and keeps a min-heap plus a
//!   map in its goroutine; a burst of more than 1000 `AddAfter` calls blocks the callers. Here
//!   `add_after` updates the shared index directly under a short lock and never blocks.
//! - client-go's loop also wakes on a 10 s heartbeat as a safety net against a missed wake-up;
//!   the wake-up here is registered before the state is read (`Notify::enable`), so it cannot
//!   be missed and no heartbeat is needed.
//! - Each waiting entry remembers whether it is a failure backoff (created by
//!   `RateLimitingQueue::add_rate_limited`); the rate-limiting queue uses that to let events for
//!   a backing-off item join its pending retry (see [`super::rate_limiting`]).
//! - Each waiting entry also remembers why it waits, for the item's triggers (see
//!   [`crate::keytrace`]): a timer fires as `add_after(d) came due`, a backoff as the retry that
//!   created it, and the events that joined a backoff follow it, in order. When an earlier
//!   request replaces a waiting one, the entry says what the earlier one was; a later request
//!   that does not move the deadline adds its trigger only if it is not a plain timer (a retry
//!   or an event that joined).

use super::metrics::QueueMetrics;
use super::queue::Queue;
use crate::keytrace::{Stage, Trigger, Triggers, millis, seconds};
use apimachinery::shrink::ShrinkAfterBurst;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The most entries the timer task moves to the queue under one lock before it yields.
pub const FIRE_BATCH: usize = 1024;

/// A [`Queue`] plus `add_after`. See the [module documentation](self).
///
/// Cheap to clone: every clone is a handle to the same queue. When the last handle is dropped
/// the timer task stops.
pub struct DelayingQueue<T> {
    queue: Queue<T>,
    shared: Arc<Shared<T>>,
    _owner: Arc<TimerOwner<T>>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        DelayingQueue {
            queue: self.queue.clone(),
            shared: Arc::clone(&self.shared),
            _owner: Arc::clone(&self._owner),
        }
    }
}

impl<T> std::fmt::Debug for DelayingQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayingQueue")
            .field("queue", &self.queue)
            .field("waiting", &self.shared.lock().by_item.len())
            .finish()
    }
}

pub(crate) struct Shared<T> {
    state: Mutex<Waiting<T>>,
    /// Wakes the timer task: a new earliest deadline, or stop.
    wake: Notify,
    /// How many waiting entries are failure backoffs; read without the lock on every
    /// rate-limiting `add`, so the common case (nothing backing off) stays lock-free.
    backoffs: AtomicUsize,
}

struct Waiting<T> {
    by_item: HashMap<T, Slot>,
    by_deadline: BTreeMap<(Instant, u64), T>,
    next_seq: u64,
    stopped: bool,
}

#[derive(Debug)]
struct Slot {
    at: Instant,
    seq: u64,
    backoff: bool,
    /// The delay a timer entry was asked for (its trigger when it fires).
    after: Duration,
    /// A backoff's retry, and what joined the entry while it waited.
    joined: Triggers,
}

impl Slot {
    /// Why the item is queued when this entry fires.
    fn triggers(self) -> Triggers {
        if self.backoff {
            self.joined
        } else {
            let mut t = Triggers::one(Trigger::Timer { after: self.after });
            t.merge(self.joined);
            t
        }
    }
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Waiting<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stop(&self) {
        {
            let mut w = self.lock();
            w.stopped = true;
            w.by_item.clear();
            w.by_deadline.clear();
            self.backoffs.store(0, Ordering::Relaxed);
        }
        self.wake.notify_one();
    }
}

/// Stops the timer task when the last queue handle goes away.
struct TimerOwner<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Drop for TimerOwner<T> {
    fn drop(&mut self) {
        self.shared.stop();
    }
}

impl<T> Default for DelayingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// Same as [`DelayingQueue::new`]; panics outside a Tokio runtime.
    fn default() -> Self {
        Self::new()
    }
}

impl<T> DelayingQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed delaying queue (no metrics).
    ///
    /// # Panics
    /// If called outside a Tokio runtime: the timer task is spawned here.
    pub fn new() -> Self {
        Self::from_queue(Queue::new())
    }

    /// A delaying queue whose metrics (including `workqueue_retries_total`) are recorded under
    /// `name=<name>`.
    ///
    /// # Panics
    /// If called outside a Tokio runtime.
    pub fn with_metrics(name: &str, metrics: &QueueMetrics) -> Self {
        Self::from_queue(Queue::with_metrics(name, metrics))
    }

    fn from_queue(queue: Queue<T>) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(Waiting {
                by_item: HashMap::new(),
                by_deadline: BTreeMap::new(),
                next_seq: 0,
                stopped: false,
            }),
            wake: Notify::new(),
            backoffs: AtomicUsize::new(0),
        });
        tokio::spawn(timer_loop(Arc::clone(&shared), queue.clone()));
        DelayingQueue {
            queue,
            _owner: Arc::new(TimerOwner {
                shared: Arc::clone(&shared),
            }),
            shared,
        }
    }

    /// Adds `item` once `delay` has passed; at once if `delay` is zero. Ignored after shutdown.
    ///
    /// If the item is already waiting, the earlier deadline wins. Counts one retry in the
    /// metrics either way, as client-go does (`workqueue_retries_total` therefore counts
    /// every `add_after`, not only failures). The item's trigger when it comes due is
    /// `add_after(delay) came due`.
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.queue.shutting_down() {
            return;
        }
        if let Some(m) = self.queue.metric_handles() {
            m.retries.inc();
        }
        if let Some(trace) = self.queue.trace()
            && let Some(key) = trace.traced(&item)
        {
            trace.tracer.emit(
                trace
                    .hop(
                        key,
                        Stage::Queue,
                        format!("add_after({}): look again then", seconds(delay)),
                    )
                    .with("action", "add_after")
                    .with("afterMs", millis(delay)),
            );
        }
        if delay.is_zero() {
            self.queue.add_with(item, Trigger::Timer { after: delay });
            return;
        }
        self.insert_waiting(item, Instant::now() + delay, delay, None);
    }

    /// Puts `item` in the waiting set with deadline `at`; earliest wins. `retry`, when given,
    /// makes it a failure backoff with that trigger (see the rate-limiting queue); otherwise it
    /// is a timer asked for `after`.
    pub(crate) fn insert_waiting(
        &self,
        item: T,
        at: Instant,
        after: Duration,
        retry: Option<Trigger>,
    ) {
        let backoff = retry.is_some();
        let earliest = {
            let mut w = self.shared.lock();
            if w.stopped {
                return;
            }
            let w = &mut *w;
            match w.by_item.entry(item) {
                MapEntry::Occupied(mut e) => {
                    let slot = e.get_mut();
                    if at >= slot.at {
                        // A later request never delays an earlier one; a retry still says
                        // why the item will run (a plain timer says nothing new).
                        if let Some(r) = retry {
                            slot.joined.push(r);
                        }
                        return;
                    }
                    let Some(it) = w.by_deadline.remove(&(slot.at, slot.seq)) else {
                        return;
                    };
                    if slot.backoff != backoff {
                        if backoff {
                            self.shared.backoffs.fetch_add(1, Ordering::Relaxed);
                        } else {
                            self.shared.backoffs.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                    match retry {
                        Some(r) => {
                            // The backoff's retry comes first; what the entry was, after it.
                            let mut joined = Triggers::one(r);
                            if !slot.backoff {
                                joined.push(Trigger::Timer { after: slot.after });
                            }
                            joined.merge(std::mem::take(&mut slot.joined));
                            slot.joined = joined;
                        }
                        None => slot.after = after,
                    }
                    slot.at = at;
                    slot.backoff = backoff;
                    let key = (at, slot.seq);
                    w.by_deadline.insert(key, it);
                    w.by_deadline.first_key_value().map(|(k, _)| *k) == Some(key)
                }
                MapEntry::Vacant(v) => {
                    let seq = w.next_seq;
                    w.next_seq += 1;
                    w.by_deadline.insert((at, seq), v.key().clone());
                    v.insert(Slot {
                        at,
                        seq,
                        backoff,
                        after,
                        joined: retry.map(Triggers::one).unwrap_or_default(),
                    });
                    if backoff {
                        self.shared.backoffs.fetch_add(1, Ordering::Relaxed);
                    }
                    w.by_deadline.first_key_value().map(|(k, _)| *k) == Some((at, seq))
                }
            }
        };
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    /// If `item` is waiting out a failure backoff, `trigger` joins that entry (it will run
    /// when the backoff ends) and the deadline is returned; otherwise `None` and nothing
    /// changes.
    pub(crate) fn join_backoff(&self, item: &T, trigger: Trigger) -> Option<Instant> {
        if self.shared.backoffs.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut w = self.shared.lock();
        let slot = w.by_item.get_mut(item).filter(|s| s.backoff)?;
        slot.joined.push(trigger);
        Some(slot.at)
    }

    pub(crate) fn metric_handles(&self) -> Option<&super::metrics::QueueMetricHandles> {
        self.queue.metric_handles()
    }

    /// The underlying queue (for its tracer).
    pub(crate) fn queue(&self) -> &Queue<T> {
        &self.queue
    }

    /// Whether `item` is waiting out a failure backoff (set by `add_rate_limited`).
    pub(crate) fn is_backing_off(&self, item: &T) -> bool {
        if self.shared.backoffs.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.shared
            .lock()
            .by_item
            .get(item)
            .is_some_and(|s| s.backoff)
    }

    /// The number of distinct items waiting for their deadline.
    pub fn waiting_len(&self) -> usize {
        self.shared.lock().by_item.len()
    }

    /// The deadline `item` is waiting for, if it is waiting.
    pub fn deadline(&self, item: &T) -> Option<Instant> {
        self.shared.lock().by_item.get(item).map(|s| s.at)
    }

    /// See [`Queue::add`].
    pub fn add(&self, item: T) {
        self.queue.add(item);
    }

    /// See [`Queue::add_with`].
    pub fn add_with(&self, item: T, trigger: Trigger) {
        self.queue.add_with(item, trigger);
    }

    /// See [`Queue::get`].
    pub async fn get(&self) -> Option<T> {
        self.queue.get().await
    }

    /// See [`Queue::get_with_triggers`].
    pub async fn get_with_triggers(&self) -> Option<(T, Triggers)> {
        self.queue.get_with_triggers().await
    }

    /// See [`Queue::done`].
    pub fn done(&self, item: &T) {
        self.queue.done(item);
    }

    /// See [`Queue::len`]: waiting items are not counted.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// See [`Queue::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// See [`Queue::hold`].
    pub fn hold(&self) {
        self.queue.hold();
    }

    /// See [`Queue::is_held`].
    pub fn is_held(&self) -> bool {
        self.queue.is_held()
    }

    /// See [`Queue::release`].
    pub fn release(&self) {
        self.queue.release();
    }

    /// Shuts the queue down (see [`Queue::shut_down`]), stops the timer task and drops every item
    /// still waiting for its deadline.
    pub fn shut_down(&self) {
        self.queue.shut_down();
        self.shared.stop();
    }

    /// Like [`shut_down`](Self::shut_down), then waits for in-flight items to be done (see
    /// [`Queue::shut_down_with_drain`]).
    pub async fn shut_down_with_drain(&self) {
        self.shared.stop();
        self.queue.shut_down_with_drain().await;
    }

    /// See [`Queue::shutting_down`].
    pub fn shutting_down(&self) -> bool {
        self.queue.shutting_down()
    }

    /// See [`Queue::processing_len`].
    pub fn processing_len(&self) -> usize {
        self.queue.processing_len()
    }
}

/// The timer task: moves due entries into the queue, then sleeps until the earliest deadline or
/// a wake-up. Ends when the queue shuts down or its last handle is dropped.
async fn timer_loop<T>(shared: Arc<Shared<T>>, queue: Queue<T>)
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    let mut due: Vec<(T, Triggers)> = Vec::new();
    loop {
        let mut woken = pin!(shared.wake.notified());
        woken.as_mut().enable();
        let (next, more) = {
            let mut w = shared.lock();
            if w.stopped {
                return;
            }
            let now = Instant::now();
            while due.len() < FIRE_BATCH {
                let Some(entry) = w.by_deadline.first_entry() else {
                    break;
                };
                if entry.key().0 > now {
                    break;
                }
                let item = entry.remove();
                let triggers = match w.by_item.remove(&item) {
                    Some(slot) => {
                        if slot.backoff {
                            shared.backoffs.fetch_sub(1, Ordering::Relaxed);
                        }
                        slot.triggers()
                    }
                    None => Triggers::new(),
                };
                due.push((item, triggers));
            }
            w.by_item.shrink_after_burst();
            let next = w.by_deadline.first_key_value().map(|(k, _)| k.0);
            (next, next.is_some_and(|at| at <= now))
        };
        if !due.is_empty() {
            if let Some(trace) = queue.trace() {
                for (item, triggers) in &due {
                    if let Some(key) = trace.traced(item) {
                        trace.tracer.emit(
                            trace
                                .hop(key, Stage::Queue, format!("came due: {triggers}"))
                                .with("action", "fired"),
                        );
                    }
                }
            }
            queue.add_batch(due.drain(..));
        }
        if more {
            tokio::task::yield_now().await;
            continue;
        }
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = &mut woken => {}
                }
            }
            None => woken.await,
        }
    }
}
