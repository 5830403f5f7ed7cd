//! The registry of trace readers and the hops they receive.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::small_string::SmallString;

/// The most readers one tracer serves at once; one more is refused ([`TooManyReaders`]).
pub const MAX_READERS: usize = 16;
/// The hops a reader may fall behind by; what finds its buffer full is dropped and counted
/// ([`Subscription::lost`]), so a slow reader never slows the controller.
pub const READER_BUFFER: usize = 1024;
/// The writes whose watch echo is awaited at once; the oldest is forgotten beyond this.
pub const MAX_PENDING_ECHOES: usize = 64;
/// How long a write's echo is awaited before it is forgotten.
pub const ECHO_WAIT: Duration = Duration::from_secs(60);
/// The watch events remembered while someone reads (kind, object, resourceVersion, when), so
/// that a write whose echo came back before its own answer still finds it.
pub const RECENT_EVENTS: usize = 256;
/// How long [`Subscription::next_in_order`] holds a hop back so that hops recorded by other
/// tasks a moment later, but stamped earlier, come out before it.
pub const REORDER_WINDOW: Duration = Duration::from_millis(100);

/// Where in the machinery a hop happened: the boxes of the book's diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The reflector delivered a watch event (or a list's object, or a resync).
    Watch,
    /// The informer's store (the indexer) holds the new state.
    Store,
    /// An event handler ran and turned the notification into this key.
    Handler,
    /// The work queue: add, add_after, add_rate_limited, a timer firing, done.
    Queue,
    /// A worker took the key from the queue.
    Worker,
    /// `sync_handler` started or ended.
    Sync,
    /// What the sync handler decided, in its own words (the At's plan).
    Note,
    /// A write the sync made to the API server.
    Write,
    /// A write's own watch event came back into the cache.
    Echo,
}

impl Stage {
    /// Where the stage sits along the pipeline: hops stamped at the same moment come out in
    /// this order.
    fn rank(self) -> u8 {
        match self {
            Stage::Watch => 0,
            Stage::Store => 1,
            Stage::Echo => 2,
            Stage::Handler => 3,
            Stage::Queue => 4,
            Stage::Worker => 5,
            Stage::Sync => 6,
            Stage::Note => 7,
            Stage::Write => 8,
        }
    }

    /// The stage's name in the JSON stream and in the printed trace.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Watch => "watch",
            Stage::Store => "store",
            Stage::Handler => "handler",
            Stage::Queue => "queue",
            Stage::Worker => "worker",
            Stage::Sync => "sync",
            Stage::Note => "note",
            Stage::Write => "write",
            Stage::Echo => "echo",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of a key's journey, with the moment it happened.
#[derive(Clone, Debug)]
pub struct Hop {
    /// The tracer's sequence number: hops of one tracer are numbered in the order they were
    /// recorded.
    pub seq: u64,
    /// When (tokio's clock: paused in tests, like every timer of the controller).
    pub at: Instant,
    /// When, on the wall clock.
    pub time: jiff::Timestamp,
    /// The traced key (`namespace/name`).
    pub key: SmallString,
    /// The controller whose queue the key is in, when the hop belongs to one.
    pub controller: Option<&'static str>,
    /// Where it happened.
    pub stage: Stage,
    /// What happened, in one line.
    pub text: String,
    /// The same, as fields for programs (`resourceVersion`, `waitedMs`, `triggers`, ...).
    pub fields: Map<String, Value>,
}

impl Hop {
    /// A hop of `key` at `stage` now, saying `text`.
    pub fn new(key: &str, controller: Option<&'static str>, stage: Stage, text: String) -> Self {
        Hop {
            seq: 0,
            at: Instant::now(),
            time: jiff::Timestamp::now(),
            key: key.into(),
            controller,
            stage,
            text,
            fields: Map::new(),
        }
    }

    /// The same hop, at the earlier moment `at` (a notification stamped before its handler
    /// ran); the wall-clock time moves back with it.
    pub fn at(mut self, at: Instant) -> Self {
        let back = self.at.saturating_duration_since(at);
        self.time = self.time.checked_sub(back).unwrap_or(self.time);
        self.at = at;
        self
    }

    /// Adds a field.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// The hop as one JSON object (one line of `/trace`; see the module documentation for the
    /// fields), its time relative to `since`.
    pub fn to_json(&self, since: Instant) -> Value {
        let mut v = json!({
            "seq": self.seq,
            "time": self.time.to_string(),
            "elapsedMs": millis(self.at.saturating_duration_since(since)),
            "key": self.key.as_str(),
            "controller": self.controller,
            "stage": self.stage.as_str(),
            "text": self.text,
        });
        if let Some(obj) = v.as_object_mut() {
            for (k, f) in &self.fields {
                obj.entry(k.clone()).or_insert_with(|| f.clone());
            }
        }
        v
    }

    /// The hop as a line of `sample-controller trace`: time since `since`, controller, stage,
    /// text.
    pub fn line(&self, since: Instant) -> String {
        format!(
            "+{:>8.3}s  {:<6} {:<8} {}",
            self.at.saturating_duration_since(since).as_secs_f64(),
            self.controller.unwrap_or("-"),
            self.stage.as_str(),
            self.text
        )
    }
}

/// Milliseconds with microsecond precision, as a JSON number.
pub fn millis(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// Which hops a reader wants: those of one key, of any controller or of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFilter {
    /// The key (`namespace/name`, or `name` for a cluster-scoped object).
    pub key: SmallString,
    /// Only this controller's hops (`at`); `None`: every controller's.
    pub controller: Option<String>,
}

impl TraceFilter {
    /// Every controller's hops of `key`.
    pub fn key(key: &str) -> Self {
        TraceFilter {
            key: key.into(),
            controller: None,
        }
    }

    fn matches(&self, key: &str, controller: Option<&str>) -> bool {
        self.key == key
            && match (&self.controller, controller) {
                (Some(want), Some(c)) => want == c,
                (Some(_), None) => true,
                (None, _) => true,
            }
    }
}

/// A tracer already serves [`MAX_READERS`] readers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("already {MAX_READERS} trace readers; try again once one has left")]
pub struct TooManyReaders;

struct Reader {
    id: u64,
    filter: TraceFilter,
    tx: mpsc::Sender<Hop>,
    lost: Arc<AtomicU64>,
}

/// A write whose watch echo is awaited (see [`KeyTracer::expect_echo`]).
#[derive(Clone, Debug)]
pub struct PendingEcho {
    /// The written object's kind.
    pub kind: &'static str,
    /// The written object's `namespace/name`.
    pub object: SmallString,
    /// The resourceVersion the write produced.
    pub resource_version: SmallString,
    /// The traced key whose sync wrote it.
    pub key: SmallString,
    /// That key's controller.
    pub controller: Option<&'static str>,
    /// When the write's answer came.
    pub written: Instant,
}

/// A watch event an informer delivered while someone read (see [`RECENT_EVENTS`]).
#[derive(Clone, Debug)]
pub struct SeenEvent {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub event: &'static str,
    /// The object's kind.
    pub kind: &'static str,
    /// The object's `namespace/name`.
    pub object: SmallString,
    /// Its resourceVersion.
    pub resource_version: SmallString,
    /// When the store held it.
    pub stored: Instant,
}

struct Shared {
    readers: RwLock<Vec<Reader>>,
    /// `readers.len()`, read without the lock: the whole cost of tracing when no one reads.
    active: AtomicUsize,
    next_id: AtomicU64,
    seq: AtomicU64,
    echoes: Mutex<VecDeque<PendingEcho>>,
    /// `echoes.len()`, read without the lock on every watch event while someone reads.
    pending_echoes: AtomicUsize,
    recent: Mutex<VecDeque<SeenEvent>>,
}

/// The hop recorder of one manager: every piece of the machinery (reflector, store, handlers,
/// queue, workers, client) asks it whether anyone reads the key at hand, and only then
/// records. See the [module documentation](super).
///
/// Cheap to clone (an `Arc`); [`Default`] is a tracer no one reads yet.
#[derive(Clone)]
pub struct KeyTracer(Arc<Shared>);

impl fmt::Debug for KeyTracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyTracer")
            .field("readers", &self.readers())
            .finish_non_exhaustive()
    }
}

impl Default for KeyTracer {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl KeyTracer {
    /// A tracer with no reader.
    pub fn new() -> Self {
        KeyTracer(Arc::new(Shared {
            readers: RwLock::new(Vec::new()),
            active: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            seq: AtomicU64::new(1),
            echoes: Mutex::new(VecDeque::new()),
            pending_echoes: AtomicUsize::new(0),
            recent: Mutex::new(VecDeque::new()),
        }))
    }

    /// Whether anyone reads any key: one atomic load, the whole cost of tracing when no one
    /// does.
    pub fn is_active(&self) -> bool {
        self.0.active.load(Ordering::Relaxed) != 0
    }

    /// How many readers there are.
    pub fn readers(&self) -> usize {
        self.0.active.load(Ordering::Relaxed)
    }

    /// Whether a reader wants the hops of `key` (of `controller`). One atomic load when no one
    /// reads; a look at the (at most [`MAX_READERS`]) readers' keys otherwise.
    pub fn wants(&self, key: &str, controller: Option<&str>) -> bool {
        if !self.is_active() {
            return false;
        }
        self.0
            .readers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| r.filter.matches(key, controller))
    }

    /// Hands `hop` to every reader that wants it; a reader whose buffer is full loses it (and
    /// counts it).
    pub fn emit(&self, mut hop: Hop) {
        if !self.is_active() {
            return;
        }
        hop.seq = self.0.seq.fetch_add(1, Ordering::Relaxed);
        let readers = self.0.readers.read().unwrap_or_else(|p| p.into_inner());
        for r in readers.iter() {
            if r.filter.matches(&hop.key, hop.controller) && r.tx.try_send(hop.clone()).is_err() {
                r.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A new reader of the hops `filter` selects, from now on, until the [`Subscription`] is
    /// dropped.
    pub fn subscribe(&self, filter: TraceFilter) -> Result<Subscription, TooManyReaders> {
        let mut readers = self.0.readers.write().unwrap_or_else(|p| p.into_inner());
        if readers.len() >= MAX_READERS {
            return Err(TooManyReaders);
        }
        let (tx, rx) = mpsc::channel(READER_BUFFER);
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let lost = Arc::new(AtomicU64::new(0));
        readers.push(Reader {
            id,
            filter: filter.clone(),
            tx,
            lost: Arc::clone(&lost),
        });
        self.0.active.store(readers.len(), Ordering::Relaxed);
        Ok(Subscription {
            id,
            filter,
            rx,
            lost,
            since: Instant::now(),
            tracer: Arc::downgrade(&self.0),
            held: std::collections::BTreeMap::new(),
        })
    }

    /// A traced key's sync wrote `object` (of `kind`) and the server answered with
    /// `resource_version`: when the informer delivers that version, [`KeyTracer::take_echo`]
    /// finds this and an echo hop is recorded. Bounded ([`MAX_PENDING_ECHOES`], forgotten
    /// after [`ECHO_WAIT`]).
    pub fn expect_echo(&self, echo: PendingEcho) {
        let mut echoes = lock(&self.0.echoes);
        let now = Instant::now();
        while echoes
            .front()
            .is_some_and(|e| now.saturating_duration_since(e.written) > ECHO_WAIT)
        {
            echoes.pop_front();
        }
        if echoes.len() >= MAX_PENDING_ECHOES {
            echoes.pop_front();
        }
        echoes.push_back(echo);
        self.0.pending_echoes.store(echoes.len(), Ordering::Relaxed);
    }

    /// Whether any write's echo is awaited (one atomic load).
    pub fn awaits_echoes(&self) -> bool {
        self.0.pending_echoes.load(Ordering::Relaxed) != 0
    }

    /// The awaited write that produced `kind` `object` at `resource_version`, if any (removed).
    pub fn take_echo(
        &self,
        kind: &str,
        object: &str,
        resource_version: &str,
    ) -> Option<PendingEcho> {
        if !self.awaits_echoes() {
            return None;
        }
        let mut echoes = lock(&self.0.echoes);
        let at = echoes.iter().position(|e| {
            e.kind == kind && e.object == object && e.resource_version == resource_version
        })?;
        let found = echoes.remove(at);
        self.0.pending_echoes.store(echoes.len(), Ordering::Relaxed);
        found
    }

    /// An informer delivered `seen` while someone reads: remembered (the last
    /// [`RECENT_EVENTS`]) for a write whose answer comes after its echo.
    pub fn saw(&self, seen: SeenEvent) {
        let mut recent = lock(&self.0.recent);
        if recent.len() >= RECENT_EVENTS {
            recent.pop_front();
        }
        recent.push_back(seen);
    }

    /// The remembered watch event of `kind` `object` at `resource_version`, if one came
    /// already (removed).
    pub fn take_seen(&self, kind: &str, object: &str, resource_version: &str) -> Option<SeenEvent> {
        let mut recent = lock(&self.0.recent);
        let at = recent.iter().position(|e| {
            e.kind == kind && e.object == object && e.resource_version == resource_version
        })?;
        recent.remove(at)
    }

    fn unsubscribe(shared: &Shared, id: u64) {
        let mut readers = shared.readers.write().unwrap_or_else(|p| p.into_inner());
        readers.retain(|r| r.id != id);
        shared.active.store(readers.len(), Ordering::Relaxed);
        if readers.is_empty() {
            lock(&shared.echoes).clear();
            shared.pending_echoes.store(0, Ordering::Relaxed);
            lock(&shared.recent).clear();
        }
    }
}

/// One reader's hops, until it is dropped (then the tracer forgets the reader).
pub struct Subscription {
    id: u64,
    filter: TraceFilter,
    rx: mpsc::Receiver<Hop>,
    lost: Arc<AtomicU64>,
    since: Instant,
    tracer: Weak<Shared>,
    /// Hops held back by [`Subscription::next_in_order`], by (time, stage, sequence).
    held: std::collections::BTreeMap<(Instant, u8, u64), Hop>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("filter", &self.filter)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The next hop; `None` once the tracer is gone.
    pub async fn next(&mut self) -> Option<Hop> {
        self.rx.recv().await
    }

    /// The next hop if one is waiting.
    pub fn try_next(&mut self) -> Option<Hop> {
        self.rx.try_recv().ok()
    }

    /// The next hop in the order the hops happened. Hops are recorded by the tasks that make
    /// them (the informer's handler task, the workers, the queue's timer), and a notification's
    /// watch, store and handler hops are recorded when its handler adds the key, with the
    /// earlier moments they stand for: so each hop is held [`REORDER_WINDOW`] before it is
    /// returned, and hops are returned by time (then by their place in the pipeline, then by
    /// sequence). `None` once the tracer is gone and nothing is held.
    pub async fn next_in_order(&mut self) -> Option<Hop> {
        loop {
            let due = self
                .held
                .keys()
                .next()
                .map(|(at, _, _)| *at + REORDER_WINDOW);
            if let Some(due) = due
                && due <= Instant::now()
            {
                return self.held.pop_first().map(|(_, h)| h);
            }
            let next = match due {
                Some(due) => tokio::select! {
                    hop = self.rx.recv() => hop,
                    () = tokio::time::sleep_until(due) => continue,
                },
                None => self.rx.recv().await,
            };
            match next {
                Some(hop) => {
                    self.held.insert((hop.at, hop.stage.rank(), hop.seq), hop);
                }
                None => return self.held.pop_first().map(|(_, h)| h),
            }
        }
    }

    /// The hops this reader lost because its buffer was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// What it reads.
    pub fn filter(&self) -> &TraceFilter {
        &self.filter
    }

    /// When it started: the zero of its hops' relative times.
    pub fn since(&self) -> Instant {
        self.since
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(shared) = self.tracer.upgrade() {
            KeyTracer::unsubscribe(&shared, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readers_get_their_keys_hops_and_leave_no_trace_behind() {
        let t = KeyTracer::new();
        assert!(!t.is_active() && !t.wants("ns/a", None));
        let mut a = t.subscribe(TraceFilter::key("ns/a")).unwrap();
        let mut a_at = t
            .subscribe(TraceFilter {
                key: "ns/a".into(),
                controller: Some("at".into()),
            })
            .unwrap();
        assert!(t.wants("ns/a", Some("tdset")) && !t.wants("ns/b", None));
        t.emit(Hop::new(
            "ns/a",
            Some("tdset"),
            Stage::Queue,
            "added".into(),
        ));
        t.emit(Hop::new("ns/b", Some("at"), Stage::Queue, "added".into()));
        t.emit(Hop::new("ns/a", Some("at"), Stage::Sync, "start".into()).with("x", 1));
        assert_eq!(a.next().await.unwrap().controller, Some("tdset"));
        let h = a.next().await.unwrap();
        assert_eq!((h.stage, h.fields["x"].clone()), (Stage::Sync, json!(1)));
        assert!(a.try_next().is_none());
        assert_eq!(a_at.next().await.unwrap().stage, Stage::Sync);
        assert!(a_at.try_next().is_none(), "only the at controller's");
        drop(a);
        drop(a_at);
        assert!(!t.is_active(), "no reader, no cost");
    }

    #[tokio::test]
    async fn readers_are_bounded_and_a_slow_one_loses_hops_not_time() {
        let t = KeyTracer::new();
        let subs: Vec<_> = (0..MAX_READERS)
            .map(|_| t.subscribe(TraceFilter::key("k")).unwrap())
            .collect();
        assert_eq!(
            t.subscribe(TraceFilter::key("k")).unwrap_err(),
            TooManyReaders
        );
        drop(subs);
        let mut slow = t.subscribe(TraceFilter::key("k")).unwrap();
        for i in 0..READER_BUFFER + 10 {
            t.emit(Hop::new("k", None, Stage::Queue, format!("{i}")));
        }
        assert_eq!(slow.lost(), 10);
        assert_eq!(slow.next().await.unwrap().text, "0");
    }

    #[tokio::test(start_paused = true)]
    async fn hops_come_out_in_the_order_they_happened() {
        let t = KeyTracer::new();
        let mut r = t.subscribe(TraceFilter::key("k")).unwrap();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        // The worker's hop is recorded first; the watch hop a moment later, stamped earlier.
        t.emit(Hop::new("k", None, Stage::Worker, "get".into()));
        t.emit(Hop::new("k", None, Stage::Store, "stored".into()).at(t0));
        t.emit(Hop::new("k", None, Stage::Watch, "ADDED".into()).at(t0));
        let texts: Vec<String> = [
            r.next_in_order().await.unwrap(),
            r.next_in_order().await.unwrap(),
            r.next_in_order().await.unwrap(),
        ]
        .into_iter()
        .map(|h| h.text)
        .collect();
        assert_eq!(texts, ["ADDED", "stored", "get"]);
    }

    #[tokio::test]
    async fn an_echo_is_found_once_and_the_wait_is_bounded() {
        let t = KeyTracer::new();
        let _r = t.subscribe(TraceFilter::key("ns/a")).unwrap();
        let echo = |rv: &str| PendingEcho {
            kind: "At",
            object: "ns/a".into(),
            resource_version: rv.into(),
            key: "ns/a".into(),
            controller: Some("at"),
            written: Instant::now(),
        };
        for i in 0..MAX_PENDING_ECHOES + 1 {
            t.expect_echo(echo(&i.to_string()));
        }
        assert!(
            t.take_echo("At", "ns/a", "0").is_none(),
            "the oldest made room"
        );
        assert!(t.take_echo("At", "ns/a", "1").is_some());
        assert!(t.take_echo("At", "ns/a", "1").is_none(), "found once");
        assert!(t.take_echo("Pod", "ns/a", "2").is_none(), "kind matters");
    }
}

#[cfg(test)]
mod order_gap_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn hops_after_a_quiet_spell_still_come() {
        let t = KeyTracer::new();
        let mut r = t.subscribe(TraceFilter::key("k")).unwrap();
        t.emit(Hop::new("k", None, Stage::Queue, "one".into()));
        assert_eq!(r.next_in_order().await.unwrap().text, "one");
        let t2 = t.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            t2.emit(Hop::new("k", None, Stage::Queue, "two".into()));
        });
        assert_eq!(r.next_in_order().await.unwrap().text, "two");
    }
}
