//! The basic work queue: a FIFO with a *dirty* set and a *processing* set.
//!
//! This is client-go's `util/workqueue/queue.go` (`Typed[T]`). Producers (informer event
//! handlers) call [`Queue::add`] with a key; workers loop on [`Queue::get`], reconcile the key,
//! and call [`Queue::done`]. Three rules make that loop safe for a controller:
//!
//! 1. **Dedup.** An item that is already waiting in the queue is not queued twice: ten events
//!    for one object before a worker gets to it cause one reconcile.
//! 2. **One worker per item.** An item handed out by `get` is *processing* until `done`. If it is
//!    added again meanwhile it is only marked *dirty*; it is not queued, so no second worker can
//!    take it.
//! 3. **No lost change.** `done` on an item that became dirty while processing puts it back at
//!    the tail of the queue, so the change that arrived mid-reconcile is reconciled too.
//!
//! ```text
//!            add(x)                     get() -> x                     done(x)
//!  x not known ──▶ dirty ∧ queued ───────────▶ processing ──────────────▶ forgotten
//!                                               │   ▲
//!                                     add(x)    ▼   │ done(x): queued again
//!                                        processing ∧ dirty
//! ```
//!
//! ## Invariants
//!
//! - An item is in the FIFO at most once, and only if it is dirty and not processing.
//! - `len()` counts the FIFO only; processing items are not counted.
//! - The queue remembers an item only while it is dirty or processing: memory is proportional to
//!   the number of distinct pending items, never to the number of adds. And to the *current*
//!   number, not the largest ever: once drained to a quarter of their room, the map and the
//!   FIFO shrink ([`apimachinery::shrink`]), so the 10,000 keys of an initial list do not keep
//!   1.5 MB of empty slots for the life of the process.
//!
//! ## Shutting down
//!
//! After [`Queue::shut_down`], `add` is ignored silently, but items already queued are still
//! handed out; `get` returns `None` once the FIFO is empty. [`Queue::shut_down_with_drain`] also
//! waits until every handed-out item is `done` (calling `shut_down` meanwhile stops that wait).
//! A worker that never calls `done` makes a drain wait for ever, exactly as in client-go.
//!
//! ## Differences from client-go
//!
//! - `get` is `async` and returns `Option<T>` instead of `(item, shutdown bool)`; waiting goes
//!   through `tokio::sync::Notify` instead of a condition variable, so a blocked worker costs a
//!   parked task, not a thread.
//! - One hash map holds both sets (an entry with `dirty` and `processing` flags, plus the metric
//!   timestamps), so each operation hashes the item once.
//! - client-go's pluggable FIFO and its `Touch` hook are left out: the default FIFO ignores
//!   `Touch` anyway.

use super::metrics::{QueueMetricHandles, QueueMetrics};
use apimachinery::shrink::ShrinkAfterBurst;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the "unfinished work" gauges are refreshed (client-go: 500 ms).
pub const UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

/// A work queue of `T` (keys, usually `namespace/name`): FIFO order, dedup, and never the same
/// item on two workers at once. See the [module documentation](self).
///
/// Cheap to clone: every clone is a handle to the same queue.
pub struct Queue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Queue {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("Queue")
            .field("len", &st.fifo.len())
            .field("processing", &st.processing)
            .field("shutting_down", &st.shutting_down)
            .finish()
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Wakes a worker blocked in `get` (one per queued item; all of them on shutdown).
    item_ready: Notify,
    /// Wakes `shut_down_with_drain` when the last processing item is done, or on `shut_down`.
    drained: Notify,
    metrics: Option<QueueMetricHandles>,
    /// Mirrors `State::shutting_down` (written under the lock) for lock-free reads.
    shut: AtomicBool,
}

struct State<T> {
    /// Items waiting for a worker, in arrival order. Each is dirty and not processing.
    fifo: VecDeque<T>,
    /// Every item that is dirty, processing, or both. Removed when it is neither.
    items: HashMap<T, ItemState>,
    /// How many entries of `items` are processing.
    processing: usize,
    shutting_down: bool,
    drain: bool,
    /// What the items' [`Stamp`]s count from: the queue's creation.
    epoch: Instant,
}

/// An item's flags and metric timestamps: 24 bytes, where two `Option<Instant>`s made it 40
/// (a burst holds one per queued key: 10,000 Ats, 16,384 slots of a hash table).
#[derive(Debug, Clone, Copy, Default)]
struct ItemState {
    dirty: bool,
    processing: bool,
    /// First not-deduplicated add (metrics only).
    added_at: Option<Stamp>,
    /// When a worker got it (metrics only).
    started_at: Option<Stamp>,
}

/// An instant as nanoseconds after the queue's epoch, plus one (so `Option<Stamp>` is 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp(std::num::NonZeroU64);

impl Stamp {
    fn at(epoch: Instant, when: Instant) -> Stamp {
        let nanos = when.saturating_duration_since(epoch).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX - 1);
        Stamp(std::num::NonZeroU64::MIN.saturating_add(nanos))
    }

    fn instant(self, epoch: Instant) -> Instant {
        epoch + Duration::from_nanos(self.0.get() - 1)
    }
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // The state is updated in small steps that never panic half-way, so a poisoned lock
        // (a panic elsewhere while holding it) still guards consistent data.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<T> Default for Queue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Queue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// An unnamed queue: no metrics, no background task; usable outside a Tokio runtime.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// A queue whose metrics are recorded under `name=<name>` in `metrics`' registry.
    ///
    /// Starts a small task, owned by the queue, that refreshes the unfinished-work gauges every
    /// 500 ms until the queue shuts down or its last handle is dropped.
    ///
    /// # Panics
    /// If called outside a Tokio runtime (the refresh task needs one).
    pub fn with_metrics(name: &str, metrics: &QueueMetrics) -> Self {
        let queue = Self::build(Some(metrics.for_queue(name)));
        let weak = Arc::downgrade(&queue.inner);
        tokio::spawn(update_unfinished_work_loop(weak));
        queue
    }

    fn build(metrics: Option<QueueMetricHandles>) -> Self {
        Queue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    fifo: VecDeque::new(),
                    items: HashMap::new(),
                    processing: 0,
                    shutting_down: false,
                    drain: false,
                    epoch: Instant::now(),
                }),
                item_ready: Notify::new(),
                drained: Notify::new(),
                metrics,
                shut: AtomicBool::new(false),
            }),
        }
    }

    pub(crate) fn metric_handles(&self) -> Option<&QueueMetricHandles> {
        self.inner.metrics.as_ref()
    }

    /// Marks `item` as needing processing.
    ///
    /// Ignored after shutdown. A no-op if the item is already dirty. If it is being processed it
    /// is only marked dirty, and queued again when the worker calls [`done`](Self::done).
    pub fn add(&self, item: T) {
        let pushed = {
            let mut st = self.inner.lock();
            if st.shutting_down {
                return;
            }
            self.add_locked(&mut st, item)
        };
        if pushed {
            self.inner.item_ready.notify_one();
        }
    }

    /// Adds many items under one lock (the delaying queue's timer uses this when a batch of
    /// deadlines passes at once).
    pub(crate) fn add_batch(&self, items: impl IntoIterator<Item = T>) {
        let mut pushed = 0usize;
        {
            let mut st = self.inner.lock();
            if st.shutting_down {
                return;
            }
            for item in items {
                if self.add_locked(&mut st, item) {
                    pushed += 1;
                }
            }
        }
        // Waiters register before they look at the FIFO, so waking every registered waiter
        // once is enough for a batch; one item needs only one waiter.
        match pushed {
            0 => {}
            1 => self.inner.item_ready.notify_one(),
            _ => self.inner.item_ready.notify_waiters(),
        }
    }

    /// Returns whether the item was pushed onto the FIFO (and a worker should be woken).
    fn add_locked(&self, st: &mut State<T>, item: T) -> bool {
        let metrics = self.inner.metrics.as_ref();
        let epoch = st.epoch;
        match st.items.entry(item) {
            MapEntry::Occupied(mut e) => {
                let s = e.get_mut();
                if s.dirty {
                    return false;
                }
                // Known but not dirty: it is processing. Mark it; `done` will queue it.
                s.dirty = true;
                if let Some(m) = metrics {
                    m.adds.inc();
                    m.depth.inc();
                    s.added_at
                        .get_or_insert_with(|| Stamp::at(epoch, Instant::now()));
                }
                false
            }
            MapEntry::Vacant(v) => {
                let key = v.key().clone();
                let mut s = ItemState {
                    dirty: true,
                    ..ItemState::default()
                };
                if let Some(m) = metrics {
                    m.adds.inc();
                    m.depth.inc();
                    s.added_at = Some(Stamp::at(epoch, Instant::now()));
                }
                v.insert(s);
                st.fifo.push_back(key);
                true
            }
        }
    }

    /// Waits for the next item and marks it processing. Returns `None` once the queue is shut
    /// down and empty.
    ///
    /// The caller must call [`done`](Self::done) with the item when it has finished with it.
    /// Cancel-safe: dropping the future before it completes loses no item.
    pub async fn get(&self) -> Option<T> {
        // Fast path: an item is ready, no need to register as a waiter.
        if let Some(ready) = self.try_get() {
            return ready;
        }
        loop {
            let mut notified = pin!(self.inner.item_ready.notified());
            // Register before checking, so an `add` between the check and the await still
            // wakes this waiter.
            notified.as_mut().enable();
            if let Some(ready) = self.try_get() {
                return ready;
            }
            notified.await;
        }
    }

    /// `Some(Some(item))`: got one; `Some(None)`: shut down and empty; `None`: must wait.
    fn try_get(&self) -> Option<Option<T>> {
        let mut st = self.inner.lock();
        let Some(item) = st.fifo.pop_front() else {
            return if st.shutting_down { Some(None) } else { None };
        };
        st.fifo.shrink_after_burst();
        st.processing += 1;
        let epoch = st.epoch;
        if let Some(s) = st.items.get_mut(&item) {
            s.dirty = false;
            s.processing = true;
            if let Some(m) = &self.inner.metrics {
                let now = Instant::now();
                m.depth.dec();
                if let Some(added) = s.added_at.take() {
                    m.queue_duration.observe(
                        now.saturating_duration_since(added.instant(epoch))
                            .as_secs_f64(),
                    );
                }
                s.started_at = Some(Stamp::at(epoch, now));
            }
        }
        Some(Some(item))
    }

    /// Marks `item` as finished. If it was added again while being processed, it goes back to
    /// the tail of the queue now. Calling it for an item that is not processing does nothing.
    pub fn done(&self, item: &T) {
        let mut requeued = false;
        let mut drained = false;
        {
            let mut st = self.inner.lock();
            // Remove first: the common case (not dirty) then costs one hash lookup.
            let Some((key, mut s)) = st.items.remove_entry(item) else {
                return;
            };
            if s.processing {
                s.processing = false;
                st.processing -= 1;
                if let Some(m) = &self.inner.metrics
                    && let Some(started) = s.started_at.take()
                {
                    m.work_duration.observe(
                        Instant::now()
                            .saturating_duration_since(started.instant(st.epoch))
                            .as_secs_f64(),
                    );
                }
                if s.dirty {
                    st.fifo.push_back(key.clone());
                    requeued = true;
                }
                drained = st.processing == 0 && st.drain;
            }
            if s.dirty || s.processing {
                st.items.insert(key, s);
            } else {
                st.items.shrink_after_burst();
            }
        }
        if requeued {
            self.inner.item_ready.notify_one();
        }
        if drained {
            self.inner.drained.notify_waiters();
        }
    }

    /// The number of items waiting for a worker (processing items are not counted).
    pub fn len(&self) -> usize {
        self.inner.lock().fifo.len()
    }

    /// Whether no item is waiting for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting items. Queued items are still handed out; then `get` returns `None`.
    /// Also ends a [`shut_down_with_drain`](Self::shut_down_with_drain) that is waiting.
    pub fn shut_down(&self) {
        {
            let mut st = self.inner.lock();
            st.shutting_down = true;
            st.drain = false;
            self.inner.shut.store(true, Ordering::Release);
        }
        self.inner.item_ready.notify_waiters();
        self.inner.drained.notify_waiters();
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every handed-out item is `done`.
    ///
    /// It does not wait for items still queued to be fetched, though workers keep taking them.
    pub async fn shut_down_with_drain(&self) {
        {
            let mut st = self.inner.lock();
            st.shutting_down = true;
            st.drain = true;
            self.inner.shut.store(true, Ordering::Release);
        }
        self.inner.item_ready.notify_waiters();
        loop {
            let mut notified = pin!(self.inner.drained.notified());
            notified.as_mut().enable();
            {
                let st = self.inner.lock();
                if !st.drain || st.processing == 0 {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) (or the draining variant) has been called.
    pub fn shutting_down(&self) -> bool {
        self.inner.shut.load(Ordering::Acquire)
    }

    /// Whether nothing is queued and nothing is being processed, read in one consistent snapshot
    /// (useful to wait for a controller to settle in tests).
    pub fn is_idle(&self) -> bool {
        let st = self.inner.lock();
        st.fifo.is_empty() && st.processing == 0
    }

    /// The number of items handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        self.inner.lock().processing
    }

    /// Recomputes the unfinished-work gauges. Returns false once the queue is shut down.
    fn update_unfinished_work(&self) -> bool {
        let Some(m) = &self.inner.metrics else {
            return false;
        };
        let st = self.inner.lock();
        let now = Instant::now();
        let mut total = 0.0f64;
        let mut longest = 0.0f64;
        if st.processing > 0 {
            for s in st.items.values() {
                if let (true, Some(started)) = (s.processing, s.started_at) {
                    let age = now
                        .saturating_duration_since(started.instant(st.epoch))
                        .as_secs_f64();
                    total += age;
                    longest = longest.max(age);
                }
            }
        }
        m.unfinished_work.set(total);
        m.longest_running.set(longest);
        !st.shutting_down
    }
}

/// Refreshes a named queue's unfinished-work gauges every 500 ms. Holds only a weak reference,
/// so the queue (its owner) ends it by being dropped or shut down.
async fn update_unfinished_work_loop<T>(queue: Weak<Inner<T>>)
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    let mut ticker = tokio::time::interval(UNFINISHED_WORK_UPDATE_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once.
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(inner) = queue.upgrade() else {
            return;
        };
        if !(Queue { inner }).update_unfinished_work() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_state_is_small_and_its_stamps_keep_nanoseconds() {
        assert_eq!(std::mem::size_of::<ItemState>(), 24);
        let epoch = Instant::now();
        let later = epoch + Duration::from_nanos(1_234_567_891);
        assert_eq!(Stamp::at(epoch, later).instant(epoch), later);
        assert_eq!(Stamp::at(epoch, epoch).instant(epoch), epoch);
        // Before the epoch (impossible for a queue's own clock) counts as the epoch.
        assert_eq!(Stamp::at(later, epoch).instant(later), later);
    }

    /// The room of a burst is given back as the queue drains (see the module doc), and no
    /// item is lost on the way.
    #[tokio::test]
    async fn a_drained_queue_gives_back_the_room_of_its_burst() {
        let q: Queue<String> = Queue::new();
        for i in 0..10_000 {
            q.add(format!("default/at-{i}"));
        }
        let room = |q: &Queue<String>| {
            let st = q.inner.lock();
            (st.items.capacity(), st.fifo.capacity())
        };
        let (items_full, fifo_full) = room(&q);
        assert!(items_full >= 10_000 && fifo_full >= 10_000);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..9_990 {
            let item = q.get().await.expect("an item");
            q.done(&item);
            assert!(seen.insert(item));
        }
        assert_eq!(q.len(), 10);
        let (items_left, fifo_left) = room(&q);
        assert!(items_left < items_full / 50, "{items_left} of {items_full}");
        assert!(fifo_left < fifo_full / 50, "{fifo_left} of {fifo_full}");
        // The ten still queued come out, in order, once each.
        for i in 9_990..10_000 {
            let item = q.get().await.expect("an item");
            assert_eq!(item, format!("default/at-{i}"));
            q.done(&item);
        }
        assert!(q.is_empty());
    }
}
