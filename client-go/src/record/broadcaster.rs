//! The broadcaster: fan-out of events from recorders to watchers (log, API sink, tests).
//!
//! client-go's `eventBroadcasterImpl` on top of apimachinery's `watch.Broadcaster`
//! (`pkg/watch/mux.go`). Recorders publish; every *watcher* started on the broadcaster gets its
//! own copy of every event published after it started, in order, in its own bounded queue of
//! [`BroadcasterOptions::queue_len`] (1000) events, consumed by its own task:
//!
//! ```text
//! EventRecorder::event ──try_send──▶ [queue 1000] ──▶ logging task   (start_logging)
//!            (never blocks)     └──▶ [queue 1000] ──▶ sink dispatcher (start_recording_to_sink)
//!                                                     │ packs, by involved object
//!                                                     │ [backlog ≤ 8 MiB of PackedEvents]
//!                                                     ├▶ lane 1: correlator ─▶ POST / PATCH
//!                                                     ├▶ ...
//!                                                     └▶ lane 64: correlator ─▶ POST / PATCH
//! ```
//!
//! Invariants:
//!
//! * Publishing never blocks and never waits for a task: the recorder copies the event into each
//!   watcher's queue with `try_send`. A full queue drops the event *for that watcher* and adds
//!   one to [`EventBroadcaster::dropped_events`] (the `events_dropped_total` metric); the log
//!   line is aggregated (the 1st, 10th, 100th, ... drop, with the running total). Events are a
//!   best-effort record; a controller must never stall because the API server is too slow to
//!   take its events. The manager's sink writes through a client with a throttle bucket of its
//!   own ([`crate::client::Client::with_own_throttle`]), so events and the controllers' writes
//!   never wait for each other's tokens.
//! * Each watcher handles its events in publish order. A sink writes up to
//!   [`BroadcasterOptions::sink_lanes`] events at once, one lane per hash of the involved
//!   object: one object's events stay in order and its correlation state (counts, spam
//!   bucket, aggregation) lives in one lane, while a slow write or a retry wait for one object
//!   does not hold back the events of others. The lanes share the correlator's LRU bound.
//! * A sink's dispatcher never waits for its lanes: it packs each event
//!   ([`super::packed::PackedEvent`], one allocation of ~400 bytes instead of ~1.5 KB) into its
//!   lane's backlog, all lanes together within [`BroadcasterOptions::sink_backlog_bytes`]
//!   (8 MiB, some 20,000 events); past that, the event is dropped and counted like a full
//!   queue's. So a burst that outruns the API server waits and is written after it, while the
//!   1,000-event queue in front of the dispatcher stays nearly empty.
//! * [`EventBroadcaster::shutdown`] closes every queue: watchers finish what is queued (a sink
//!   gets one try per event, no retry waits) and their tasks end. Events published after
//!   shutdown are dropped with a log line. [`EventBroadcaster::shutdown_when`] ties this to a
//!   manager's root cancellation token. A single watcher can be stopped at once with
//!   [`WatcherHandle::stop`].
//!
//! ## Difference from client-go
//!
//! client-go has two queues in series: the broadcaster's incoming channel (1000, drop when
//! full) and a distribution goroutine that copies into each watcher's channel (1000, drop when
//! full). Here the recorder copies straight into the watchers' queues, which keeps the same
//! bound and the same drop-don't-block rule with one task fewer and no hop; it also means
//! [`EventBroadcaster::new`] needs no runtime, only the `start_*` methods do.
//!
//! client-go's sink is one goroutine writing one event at a time, and it sleeps up to 10 s
//! between retries with everything behind it waiting. At a burst of due Ats (three events
//! each) that one writer falls behind the syncs and the queue drops events
//! (`hack/bench-at.sh`: 3,923 of 20,000 at 10,000 Ats due at once). Here the sink writes in
//! lanes (64 by default; `sink_lanes: 1` is client-go's behaviour).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::correlator::{CorrelatorOptions, EventCorrelator};
use super::packed::PackedEvent;
use super::recorder::EventRecorder;
use super::sink::{DEFAULT_SLEEP_DURATION, EventSink, MAX_TRIES_PER_EVENT, record_to_sink};

/// [`BroadcasterOptions::sink_backlog_bytes`]'s default: 8 MiB.
pub const DEFAULT_SINK_BACKLOG_BYTES: usize = 8 << 20;

/// The broadcaster's numbers. [`Default`] gives client-go's.
#[derive(Clone, Debug, PartialEq)]
pub struct BroadcasterOptions {
    /// Events each watcher may have queued before new ones are dropped (default 1000).
    pub queue_len: usize,
    /// Wait between sink retries; the first wait is random in `[0, sleep_duration)` (10 s).
    pub sleep_duration: Duration,
    /// Tries per event before the sink gives it up (12).
    pub max_tries: u32,
    /// The correlator each sink gets (one correlator per sink, as in client-go; split between
    /// the sink's lanes, each lane keeping its share, see `lane_lru_size`).
    pub correlator: CorrelatorOptions,
    /// How many events a sink writes at once (default 64), each lane in order for the objects
    /// that hash to it. client-go writes one at a time, so one slow write or one 10 s retry
    /// wait holds every other event back; at a burst of due Ats (three events each) that one
    /// writer falls behind the syncs and the queue drops. `1` gives client-go's behaviour.
    /// 64, as many as the manager's workers per controller: with 8 lanes, 1,000 Ats due at one
    /// instant (3,000 events) dropped 13 events (`hack/bench-at.sh 1000`). Each lane is a
    /// task, and its writes share the client's HTTP/2 connection.
    pub sink_lanes: usize,
    /// Bytes a sink may hold in events waiting for their lane (default 8 MiB), as
    /// [`PackedEvent`]s of about 400 bytes each: some 20,000 At events. Past it, events are
    /// dropped and counted like a full queue. A burst outruns any sink while the API server's
    /// write path is busy with the burst's own work (10,000 Ats due at once record 20,000
    /// events in about 12 s, while the sink writes about 850 a second); held here, they are
    /// written once the burst is over, instead of half of them being dropped, as they were
    /// while each lane held client-go's queue of `Arc<Event>`s (1.5 KB each).
    pub sink_backlog_bytes: usize,
}

impl Default for BroadcasterOptions {
    fn default() -> Self {
        BroadcasterOptions {
            queue_len: 1000,
            sleep_duration: DEFAULT_SLEEP_DURATION,
            max_tries: MAX_TRIES_PER_EVENT,
            correlator: CorrelatorOptions::default(),
            sink_lanes: 64,
            sink_backlog_bytes: DEFAULT_SINK_BACKLOG_BYTES,
        }
    }
}

/// State shared by the broadcaster and its recorders.
pub(crate) struct Shared {
    watchers: Mutex<Vec<(u64, mpsc::Sender<Arc<Event>>)>>,
    next_id: AtomicU64,
    dropped: AtomicU64,
    stopped: AtomicBool,
    cancel: CancellationToken,
    options: BroadcasterOptions,
}

impl Shared {
    /// Copies an event into every watcher's queue without waiting.
    pub(crate) fn publish(&self, event: Event) {
        if self.stopped.load(Ordering::Acquire) {
            tracing::error!(
                reason = event.reason.as_deref().unwrap_or_default(),
                "unable to record event: the event broadcaster is shut down"
            );
            return;
        }
        let event = Arc::new(event);
        let mut watchers = match self.watchers.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        watchers.retain(|(id, tx)| match tx.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.count_drop(*id, event.reason.as_deref(), "too many queued events");
                true
            }
            // The watcher's task ended (stopped): forget it.
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }

    /// Counts one dropped event. Aggregated, never silent: every drop is counted
    /// (`events_dropped_total`), and the log says so on the 1st, 10th, 100th, ... drop with
    /// the running total, so a burst of thousands costs a handful of lines instead of one each.
    fn count_drop(&self, watcher: u64, reason: Option<&str>, why: &str) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if is_power_of_ten(dropped) {
            tracing::warn!(
                watcher,
                reason = reason.unwrap_or_default(),
                dropped_total = dropped,
                "unable to record event: {why}, dropped event (counted in events_dropped_total; logged again at the next power of ten)"
            );
        }
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

/// Fans events out from recorders to watchers. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct EventBroadcaster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EventBroadcaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBroadcaster")
            .field("dropped_events", &self.dropped_events())
            .field("stopped", &self.shared.stopped.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for EventBroadcaster {
    fn default() -> Self {
        EventBroadcaster::new()
    }
}

/// A running watcher task. Dropping the handle leaves the task running until the broadcaster
/// shuts down; [`WatcherHandle::stop`] ends it at once.
#[derive(Debug)]
pub struct WatcherHandle {
    stop: CancellationToken,
    retry: CancellationToken,
    task: JoinHandle<()>,
}

impl WatcherHandle {
    /// Stops the watcher now: a write in flight is abandoned and events still queued for it
    /// are discarded.
    pub fn stop(&self) {
        self.stop.cancel();
        self.retry.cancel();
    }

    /// Waits for the task to end (after [`WatcherHandle::stop`] or the broadcaster's
    /// [`EventBroadcaster::shutdown`], which lets it finish its queue first).
    pub async fn join(self) {
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!(error = %e, "event watcher task panicked");
        }
    }

    /// [`WatcherHandle::stop`], then [`WatcherHandle::join`].
    pub async fn shutdown(self) {
        self.stop();
        self.join().await;
    }
}

impl EventBroadcaster {
    /// A broadcaster with client-go's numbers. Needs no runtime; the `start_*` methods do.
    pub fn new() -> Self {
        EventBroadcaster::with_options(BroadcasterOptions::default())
    }

    /// A broadcaster with the given numbers.
    pub fn with_options(options: BroadcasterOptions) -> Self {
        EventBroadcaster {
            shared: Arc::new(Shared {
                watchers: Mutex::new(Vec::new()),
                next_id: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                stopped: AtomicBool::new(false),
                cancel: CancellationToken::new(),
                options,
            }),
        }
    }

    /// A recorder whose events carry `source.component = component`.
    pub fn new_recorder(&self, component: &str) -> EventRecorder {
        EventRecorder::new(component, "", self.shared.clone())
    }

    /// A recorder that also sets `source.host` (client-go's `EventSource.Host`), which kubelets
    /// set to the node name; controllers usually leave it empty.
    pub fn new_recorder_with_host(&self, component: &str, host: &str) -> EventRecorder {
        EventRecorder::new(component, host, self.shared.clone())
    }

    /// Events dropped because a watcher's queue was full (one per watcher that missed it).
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Closes every watcher queue and cancels sink retries; see the module documentation.
    pub fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.shared.cancel.cancel();
        let mut watchers = match self.shared.watchers.lock() {
            Ok(w) => w,
            Err(poisoned) => poisoned.into_inner(),
        };
        watchers.clear();
    }

    /// Shuts the broadcaster down (as [`EventBroadcaster::shutdown`]) when `token` is cancelled:
    /// client-go's `WithContext`. Starts a small task that ends at that moment or when the
    /// broadcaster is shut down some other way, whichever comes first.
    pub fn shutdown_when(&self, token: CancellationToken) {
        let b = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => b.shutdown(),
                _ = b.shared.cancel.cancelled() => {}
            }
        });
    }

    /// Calls `handler` for every event, one at a time, on a task of its own.
    pub fn start_event_watcher<F>(&self, mut handler: F) -> WatcherHandle
    where
        F: FnMut(&Event) + Send + 'static,
    {
        let (mut rx, stop, retry, _) = self.register();
        let stop_task = stop.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = next(rx.recv(), &stop_task).await {
                handler(&event);
            }
        });
        WatcherHandle { stop, retry, task }
    }

    /// Logs every event through `tracing` (target `events`): client-go's
    /// `StartStructuredLogging`, "Event occurred" with the object, kind, type, reason and
    /// message as fields.
    pub fn start_logging(&self) -> WatcherHandle {
        self.start_event_watcher(log_event)
    }

    /// Writes every event to `sink` through a correlator (aggregation, counting, spam filter)
    /// with retries; see [`super::sink`]. The writes run in [`BroadcasterOptions::sink_lanes`]
    /// lanes, each with its own correlator: an event goes to the lane its involved object hashes
    /// to, so one object's events keep their order and its correlation state lives in one place,
    /// while a slow write or a retry wait for one object never holds up the others.
    pub fn start_recording_to_sink<S: EventSink>(&self, sink: S) -> WatcherHandle {
        let options = self.shared.options.clone();
        let (mut rx, stop, retry, watcher) = self.register();
        let (stop_task, retry_task) = (stop.clone(), retry.clone());
        let sink = Arc::new(sink);
        let lanes = options.sink_lanes.max(1);
        let mut lane_options = options.correlator.clone();
        // The lanes share the correlator's memory bound between them.
        lane_options.lru_size = lane_lru_size(options.correlator.lru_size, lanes);
        // What waits for a lane, in bytes of packed events: reserved by the dispatcher, released
        // by the lane as it takes an event.
        let backlog = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::with_capacity(lanes);
        let mut workers = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let (tx, mut lane_rx) = mpsc::unbounded_channel::<PackedEvent>();
            senders.push(tx);
            let (sink, stop, retry) = (Arc::clone(&sink), stop_task.clone(), retry_task.clone());
            let backlog = Arc::clone(&backlog);
            let (correlator_options, sleep, max_tries) = (
                lane_options.clone(),
                options.sleep_duration,
                options.max_tries,
            );
            workers.push(tokio::spawn(async move {
                let mut correlator = EventCorrelator::new(correlator_options);
                while let Some(packed) = next(lane_rx.recv(), &stop).await {
                    backlog.fetch_sub(packed.size(), Ordering::Relaxed);
                    // Stopping the watcher abandons even a write in flight.
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => break,
                        // Boxed: the write's state exists only while the lane writes, and
                        // an idle lane (there are 64) holds a pointer.
                        _ = Box::pin(record_to_sink(
                            sink.as_ref(),
                            &mut correlator,
                            packed.unpack(),
                            sleep,
                            max_tries,
                            &retry,
                        )) => {}
                    }
                }
            }));
        }
        let shared = Arc::clone(&self.shared);
        let limit = options.sink_backlog_bytes;
        let task = tokio::spawn(async move {
            // The dispatcher never waits for a lane: it packs each event and hands it to its
            // lane's backlog, within the byte budget; past it, the event is dropped and counted
            // as a full queue's would be.
            while let Some(event) = next(rx.recv(), &stop_task).await {
                let lane = &senders[lane_of(&event, senders.len())];
                let event = Arc::unwrap_or_clone(event);
                let packed = PackedEvent::pack(event);
                let size = packed.size();
                let reserved = backlog
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                        (held + size <= limit).then_some(held + size)
                    })
                    .is_ok();
                if !reserved {
                    shared.count_drop(watcher, packed.reason(), "the sink's backlog is full");
                    continue;
                }
                if lane.send(packed).is_err() {
                    break;
                }
            }
            // Closing the lanes lets each finish what it holds (or stop at once if stopped).
            drop(senders);
            for w in workers {
                let _ = w.await;
            }
        });
        WatcherHandle { stop, retry, task }
    }

    /// Adds a watcher queue. Returns its receiver, its stop token, its retry-cancel token
    /// (cancelled by [`WatcherHandle::stop`] and by [`EventBroadcaster::shutdown`]) and its id
    /// (the `watcher` of drop log lines).
    fn register(
        &self,
    ) -> (
        mpsc::Receiver<Arc<Event>>,
        CancellationToken,
        CancellationToken,
        u64,
    ) {
        let (tx, rx) = mpsc::channel(self.shared.options.queue_len.max(1));
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        if !self.shared.stopped.load(Ordering::Acquire) {
            match self.shared.watchers.lock() {
                Ok(mut w) => w.push((id, tx)),
                Err(poisoned) => poisoned.into_inner().push((id, tx)),
            }
        }
        // On a stopped broadcaster `tx` is dropped here: the watcher sees nothing and ends.
        (
            rx,
            CancellationToken::new(),
            self.shared.cancel.child_token(),
            id,
        )
    }
}

/// Each lane's share of the correlator's `lru_size` entries per cache. One lane keeps them all
/// (client-go's 4,096). Several lanes split them, each share rounded down to what a hash table
/// holds at its full load: `std`'s `HashMap` fills 7/8 of a power-of-two number of slots
/// before it doubles, so 64 entries (4,096 over 64 lanes) take a 128-slot table, half of it
/// empty, where 56 fill a 64-slot one. The lanes' three caches were 2.4 MB of the manager's heap
/// at 10,000 Ats, half of it those empty slots; the lanes together keep 3,584 entries a cache.
fn lane_lru_size(lru_size: usize, lanes: usize) -> usize {
    if lanes <= 1 {
        return lru_size.max(1);
    }
    let share = (lru_size / lanes).max(1);
    if share < 8 {
        return share;
    }
    // The largest power of two whose 7/8 fits in the share.
    let mut slots = 8;
    while (slots * 2) / 8 * 7 <= share {
        slots *= 2;
    }
    slots / 8 * 7
}

/// The lane of an event: a hash of its involved object (kind, namespace, name, uid), the
/// object the correlator keys every piece of its state by.
fn lane_of(event: &Event, lanes: usize) -> usize {
    use std::hash::{Hash, Hasher};
    if lanes <= 1 {
        return 0;
    }
    let o = &event.involved_object;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&o.kind, &o.namespace, &o.name, &o.uid).hash(&mut h);
    (h.finish() % lanes as u64) as usize
}

/// The next queued item (`recv` of a watcher's queue or a lane's backlog), or `None` once the
/// queue is closed and drained or `stop` fired.
async fn next<T>(
    recv: impl std::future::Future<Output = Option<T>>,
    stop: &CancellationToken,
) -> Option<T> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        item = recv => item,
    }
}

/// One "Event occurred" line (see [`EventBroadcaster::start_logging`]): fields `object`,
/// `field_path`, `kind`, `api_version`, `type`, `reason`, `message`.
fn log_event(e: &Event) {
    let o = &e.involved_object;
    let object = match (o.namespace.as_deref(), o.name.as_deref()) {
        (Some(ns), Some(name)) if !ns.is_empty() => format!("{ns}/{name}"),
        (_, name) => name.unwrap_or_default().to_owned(),
    };
    tracing::info!(
        target: "events",
        object,
        field_path = o.field_path.as_deref().unwrap_or_default(),
        kind = o.kind.as_deref().unwrap_or_default(),
        api_version = o.api_version.as_deref().unwrap_or_default(),
        r#type = e.type_.as_deref().unwrap_or_default(),
        reason = e.reason.as_deref().unwrap_or_default(),
        message = e.message.as_deref().unwrap_or_default(),
        "Event occurred"
    );
}

#[cfg(test)]
mod tests {
    use super::lane_lru_size;

    /// Collects the field names of every event logged while it is the default subscriber.
    #[derive(Default)]
    struct FieldNames(std::sync::Mutex<Vec<String>>);

    impl tracing::Subscriber for FieldNames {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut names = self.0.lock().unwrap();
            names.extend(event.fields().map(|f| f.name().to_string()));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn a_logged_event_has_client_gos_field_names() {
        let names = std::sync::Arc::new(FieldNames::default());
        tracing::subscriber::with_default(std::sync::Arc::clone(&names), || {
            super::log_event(&super::Event {
                type_: Some("Normal".into()),
                reason: Some("Started".into()),
                ..super::Event::default()
            });
        });
        let names = names.0.lock().unwrap().clone();
        assert_eq!(
            names,
            [
                "message",
                "object",
                "field_path",
                "kind",
                "api_version",
                "type",
                "reason",
                "message"
            ]
        );
    }

    #[test]
    fn lanes_split_the_lru_bound_into_full_hash_tables() {
        assert_eq!(lane_lru_size(4096, 1), 4096, "one lane: client-go's bound");
        assert_eq!(lane_lru_size(4096, 64), 56);
        assert_eq!(lane_lru_size(4096, 8), 448);
        assert_eq!(lane_lru_size(4096, 3), 896);
        assert_eq!(lane_lru_size(100, 64), 1);
        assert_eq!(lane_lru_size(5, 64), 1);
        assert_eq!(lane_lru_size(0, 4), 1);
        for lanes in 1..=200 {
            assert!(lane_lru_size(4096, lanes) * lanes <= 4096, "{lanes}");
        }
    }

    #[test]
    fn drops_are_logged_at_powers_of_ten() {
        let logged: Vec<u64> = (1..=12_000)
            .filter(|n| super::is_power_of_ten(*n))
            .collect();
        assert_eq!(logged, vec![1, 10, 100, 1000, 10_000]);
    }
}
