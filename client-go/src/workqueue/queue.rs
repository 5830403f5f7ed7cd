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
//!
//! ## Why each item is here: triggers
//!
//! Beyond client-go, the queue keeps beside each dirty item what put it there
//! ([`Triggers`]): an [`add`](Queue::add) inside an informer's event
//! handler records that notification (type, kind, object, resourceVersion; see
//! [`crate::keytrace`]), an add elsewhere records itself as direct, and
//! [`add_with`](Queue::add_with) says explicitly. Triggers collapse with the item: a second
//! add of a waiting item adds its trigger to the item's (the same notification of the same
//! object collapses into one entry with a count), and they are bounded per item. A worker takes
//! them with the item ([`get_with_triggers`](Queue::get_with_triggers)); adds that arrive
//! while the item is processing belong to its next round. Memory: one pointer per known item,
//! and one allocation per dirty item.
//!
//! With a [`KeyTracer`] attached ([`Queue::set_key_tracer`]), the
//! queue also records the hops of traced keys: the notification that led to an add (its watch
//! event, store update and handler), the add, the worker's get (how long the item waited, and
//! why), and `done`.

use super::metrics::{QueueMetricHandles, QueueMetrics};
use crate::keytrace::{
    Hop, KeyTracer, Notifying, Stage, Trigger, Triggers, current_trigger, millis, seconds,
    with_notification,
};
use apimachinery::shrink::ShrinkAfterBurst;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
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
    /// The tracer traced keys report to, once attached ([`Queue::set_key_tracer`]).
    trace: OnceLock<QueueTrace<T>>,
}

/// A queue's tracer: the controller its hops belong to, and how to read an item as a key.
pub(crate) struct QueueTrace<T> {
    pub(crate) tracer: KeyTracer,
    pub(crate) controller: &'static str,
    key: fn(&T) -> &str,
}

impl<T> QueueTrace<T> {
    /// The item as a key, when a reader traces it.
    pub(crate) fn traced<'a>(&self, item: &'a T) -> Option<&'a str> {
        if !self.tracer.is_active() {
            return None;
        }
        let key = (self.key)(item);
        self.tracer.wants(key, Some(self.controller)).then_some(key)
    }

    /// Records a hop of `key`.
    pub(crate) fn hop(&self, key: &str, stage: Stage, text: String) -> Hop {
        Hop::new(key, Some(self.controller), stage, text)
    }
}

struct State<T> {
    /// Items waiting for a worker, in arrival order. Each is dirty and not processing.
    fifo: VecDeque<T>,
    /// Every item that is dirty, processing, or both. Removed when it is neither.
    items: HashMap<T, ItemState>,
    /// How many entries of `items` are processing.
    processing: usize,
    shutting_down: bool,
    /// Adds are dropped while held (see [`Queue::hold`]).
    held: bool,
    drain: bool,
    /// What the items' [`Stamp`]s count from: the queue's creation.
    epoch: Instant,
}

/// An item's flags, metric timestamps and triggers: 32 bytes, where two `Option<Instant>`s
/// made the flags and stamps alone 40 (a burst holds one per queued key: 10,000 Ats, 16,384
/// slots of a hash table).
#[derive(Debug, Clone, Default)]
struct ItemState {
    dirty: bool,
    processing: bool,
    /// First not-deduplicated add (metrics, and traced keys).
    added_at: Option<Stamp>,
    /// When a worker got it (metrics only).
    started_at: Option<Stamp>,
    /// What put it here since it was last handed out (see the module doc).
    triggers: Triggers,
}

/// What an add did to the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Added {
    /// Queued now (it was not dirty).
    Queued,
    /// Already waiting: the add joined it.
    Collapsed,
    /// Being processed: marked dirty, queued again at `done`.
    WhileProcessing,
    /// Shut down: ignored.
    Ignored,
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
                    held: false,
                    drain: false,
                    epoch: Instant::now(),
                }),
                item_ready: Notify::new(),
                drained: Notify::new(),
                metrics,
                shut: AtomicBool::new(false),
                trace: OnceLock::new(),
            }),
        }
    }

    pub(crate) fn metric_handles(&self) -> Option<&QueueMetricHandles> {
        self.inner.metrics.as_ref()
    }

    /// Marks `item` as needing processing.
    ///
    /// Ignored after shutdown. A no-op if the item is already dirty (its triggers gain this
    /// add's). If it is being processed it is only marked dirty, and queued again when the
    /// worker calls [`done`](Self::done). The trigger is the informer notification whose
    /// handler is calling, if any (see the module doc), else [`Trigger::Direct`].
    pub fn add(&self, item: T) {
        self.add_with(item, current_trigger());
    }

    /// [`add`](Self::add), saying why.
    pub fn add_with(&self, item: T, trigger: Trigger) {
        self.add_triggers(item, Triggers::one(trigger));
    }

    pub(crate) fn add_triggers(&self, item: T, triggers: Triggers) {
        let traced = self
            .trace()
            .and_then(|t| t.traced(&item).map(|k| (t, k.to_owned())));
        let (added, depth, at) = {
            let mut st = self.inner.lock();
            let added = if st.shutting_down || st.held {
                Added::Ignored
            } else {
                self.add_locked(&mut st, item, triggers, traced.is_some())
            };
            // A traced add's moment, taken before a worker can get the item.
            let at = traced.as_ref().map(|_| Instant::now());
            (added, st.fifo.len(), at)
        };
        if added == Added::Queued {
            self.inner.item_ready.notify_one();
        }
        if let (Some((trace, key)), Some(at)) = (traced, at) {
            Self::record_add(trace, &key, added, depth, at);
        }
    }

    /// The hops of an add of a traced key: the notification that led to it (watch event, store,
    /// handler), then what the add did.
    fn record_add(trace: &QueueTrace<T>, key: &str, added: Added, depth: usize, at: Instant) {
        with_notification(|n| {
            if let Some(n) = n {
                notification_hops(trace, key, n);
            }
        });
        let text = match added {
            Added::Queued => format!("add: queued (depth {depth})"),
            Added::Collapsed => {
                format!("add: already waiting; collapsed into that add (depth {depth})")
            }
            Added::WhileProcessing => {
                "add: being processed; marked dirty, queued again at done".to_owned()
            }
            Added::Ignored => "add: ignored (shutting down)".to_owned(),
        };
        let outcome = match added {
            Added::Queued => "queued",
            Added::Collapsed => "collapsed",
            Added::WhileProcessing => "dirty",
            Added::Ignored => "ignored",
        };
        trace.tracer.emit(
            trace
                .hop(key, Stage::Queue, text)
                .with("action", "add")
                .with("outcome", outcome)
                .with("depth", depth)
                .at(at),
        );
    }

    /// Adds many items under one lock (the delaying queue's timer uses this when a batch of
    /// deadlines passes at once).
    pub(crate) fn add_batch(&self, items: impl IntoIterator<Item = (T, Triggers)>) {
        let mut pushed = 0usize;
        {
            let mut st = self.inner.lock();
            if st.shutting_down {
                return;
            }
            for (item, triggers) in items {
                let traced = self.trace().is_some_and(|t| t.traced(&item).is_some());
                if self.add_locked(&mut st, item, triggers, traced) == Added::Queued {
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

    /// What the add did (a [`Added::Queued`] item wants a worker woken). `stamp`: record
    /// when it was added even without metrics (a traced key's wait is reported).
    fn add_locked(&self, st: &mut State<T>, item: T, triggers: Triggers, stamp: bool) -> Added {
        let metrics = self.inner.metrics.as_ref();
        let epoch = st.epoch;
        match st.items.entry(item) {
            MapEntry::Occupied(mut e) => {
                let s = e.get_mut();
                s.triggers.merge(triggers);
                if s.dirty {
                    // Waiting in the FIFO, or marked to go back there at `done`.
                    return if s.processing {
                        Added::WhileProcessing
                    } else {
                        Added::Collapsed
                    };
                }
                // Known but not dirty: it is processing. Mark it; `done` will queue it.
                s.dirty = true;
                if let Some(m) = metrics {
                    m.adds.inc();
                    m.depth.inc();
                }
                if metrics.is_some() || stamp {
                    s.added_at
                        .get_or_insert_with(|| Stamp::at(epoch, Instant::now()));
                }
                Added::WhileProcessing
            }
            MapEntry::Vacant(v) => {
                let key = v.key().clone();
                let mut s = ItemState {
                    dirty: true,
                    triggers,
                    ..ItemState::default()
                };
                if let Some(m) = metrics {
                    m.adds.inc();
                    m.depth.inc();
                }
                if metrics.is_some() || stamp {
                    s.added_at = Some(Stamp::at(epoch, Instant::now()));
                }
                v.insert(s);
                st.fifo.push_back(key);
                Added::Queued
            }
        }
    }

    /// Waits for the next item and marks it processing. Returns `None` once the queue is shut
    /// down and empty.
    ///
    /// The caller must call [`done`](Self::done) with the item when it has finished with it.
    /// Cancel-safe: dropping the future before it completes loses no item.
    pub async fn get(&self) -> Option<T> {
        self.get_with_triggers().await.map(|(item, _)| item)
    }

    /// [`get`](Self::get), with what put the item here since it was last handed out.
    pub async fn get_with_triggers(&self) -> Option<(T, Triggers)> {
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
    fn try_get(&self) -> Option<Option<(T, Triggers)>> {
        let mut st = self.inner.lock();
        let Some(item) = st.fifo.pop_front() else {
            return if st.shutting_down { Some(None) } else { None };
        };
        st.fifo.shrink_after_burst();
        st.processing += 1;
        let epoch = st.epoch;
        let mut triggers = Triggers::new();
        let mut waited = None;
        if let Some(s) = st.items.get_mut(&item) {
            s.dirty = false;
            s.processing = true;
            triggers = std::mem::take(&mut s.triggers);
            let added = s.added_at.take();
            if let Some(m) = &self.inner.metrics {
                let now = Instant::now();
                m.depth.dec();
                if let Some(added) = added {
                    m.queue_duration.observe(
                        now.saturating_duration_since(added.instant(epoch))
                            .as_secs_f64(),
                    );
                }
                s.started_at = Some(Stamp::at(epoch, now));
            }
            waited = added.map(|a| Instant::now().saturating_duration_since(a.instant(epoch)));
        }
        drop(st);
        if let Some(trace) = self.trace()
            && let Some(key) = trace.traced(&item)
        {
            let waited_text = waited.map_or_else(String::new, |w| format!(" after {}", seconds(w)));
            let mut hop = trace
                .hop(
                    key,
                    Stage::Worker,
                    format!("get: a worker took it{waited_text} in the queue; why: {triggers}"),
                )
                .with("action", "get")
                .with(
                    "triggers",
                    triggers
                        .iter()
                        .map(|c| c.trigger.to_string())
                        .collect::<Vec<_>>(),
                )
                .with("adds", triggers.total());
            if let Some(w) = waited {
                hop = hop.with("waitedMs", millis(w));
            }
            trace.tracer.emit(hop);
        }
        Some(Some((item, triggers)))
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
        if let Some(trace) = self.trace()
            && let Some(key) = trace.traced(item)
        {
            let text = if requeued {
                "done: an add came while it was processed; queued again now"
            } else {
                "done"
            };
            trace.tracer.emit(
                trace
                    .hop(key, Stage::Queue, text.to_owned())
                    .with("action", "done")
                    .with("requeued", requeued),
            );
        }
        if drained {
            self.inner.drained.notify_waiters();
        }
    }

    /// Drops every add from now on, until [`release`](Self::release). For a queue no worker
    /// will drain for a while, whose owner can list what it would have been told again: the
    /// manager's controllers on a standby replica, which keep warm caches but do not keep
    /// keys (a key per object ever changed, deleted ones included, would grow without bound
    /// until the replica leads), and enqueue every cached object when they start, as
    /// controller-runtime's sources replay their informer to a controller that starts.
    /// Not in client-go's queue, which is not built before its controller starts.
    pub fn hold(&self) {
        self.inner.lock().held = true;
    }

    /// Whether adds are dropped ([`hold`](Self::hold)).
    pub fn is_held(&self) -> bool {
        self.inner.lock().held
    }

    /// Takes adds again after [`hold`](Self::hold).
    pub fn release(&self) {
        self.inner.lock().held = false;
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

    /// The tracer this queue reports traced keys' hops to, once attached.
    pub(crate) fn trace(&self) -> Option<&QueueTrace<T>> {
        self.inner.trace.get()
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

impl<T> Queue<T>
where
    T: AsRef<str> + Clone + Eq + Hash + Send + Sync + 'static,
{
    /// Reports the hops of traced keys to `tracer` as `controller`'s (see the module doc). Set
    /// once; a second call changes nothing.
    pub fn set_key_tracer(&self, tracer: KeyTracer, controller: &'static str) {
        let _ = self.inner.trace.set(QueueTrace {
            tracer,
            controller,
            key: <T as AsRef<str>>::as_ref,
        });
    }
}

/// The hops of the notification that led to an add of `key`: the watch event (or listed
/// object, or resync), the store update and the handler, each at its own time, when the
/// informer stamped them.
fn notification_hops<T>(trace: &QueueTrace<T>, key: &str, n: &Notifying) {
    let Trigger::Event {
        event,
        kind,
        object,
        resource_version,
        ..
    } = &n.trigger
    else {
        return;
    };
    let Some(times) = n.times else {
        return;
    };
    let watch = trace
        .hop(
            key,
            Stage::Watch,
            format!("{} {kind} {object} rv {resource_version}", event.as_str()),
        )
        .with("event", event.as_str())
        .with("kind", *kind)
        .with("object", object.as_str())
        .with("resourceVersion", resource_version.as_str())
        .at(times.received);
    let store = trace
        .hop(
            key,
            Stage::Store,
            format!(
                "stored {} after the event",
                seconds(times.stored.saturating_duration_since(times.received))
            ),
        )
        .with("object", object.as_str())
        .at(times.stored);
    let mapped = if object.as_str() == key {
        format!("{} → add({key})", n.handler)
    } else {
        format!(
            "{} {kind} {object} → mapped to its owner → add({key})",
            n.handler
        )
    };
    let handler = trace
        .hop(key, Stage::Handler, mapped)
        .with("handler", n.handler)
        .with("mappedToOwner", object.as_str() != key)
        .at(times.handled);
    for hop in [watch, store, handler] {
        trace.tracer.emit(hop);
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
        assert_eq!(std::mem::size_of::<ItemState>(), 32);
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
