//! The reflector: keeps a local store equal to the server's collection, for ever.
//!
//! A reflector owns one [`ListerWatcher`] and one [`ReflectorStore`] and runs this loop until
//! it is cancelled (client-go's `Reflector.Run` / `ListAndWatch`):
//!
//! ```text
//!            +--------------------------------------------------------------+
//!            v                                                              |
//!  [sync: streaming list (watch ?sendInitialEvents=true) or paged LIST]     |
//!            |  store.replace(objects, rv)                                  |
//!            v                                                              |
//!  [watch from the last resourceVersion] --events--> store.add/update/delete|
//!      | clean close, connection reset  -> watch again at once, no relist   |
//!      | 429 / connection refused       -> wait one backoff step, watch     |
//!      | 410 Gone, other errors         -> end the cycle -------------------+ (after backoff)
//! ```
//!
//! ## The rules, with the numbers
//!
//! * **Which resourceVersion a list asks for.** The first list asks for `"0"` (whatever the
//!   server's watch cache holds, cheap); a relist asks for the last RV seen (not older than what
//!   we had); if a list fails with 410 Expired or "too large resource version", the RV is marked
//!   unavailable and the list is retried *at once* with `""` (a consistent read from storage).
//! * **Paging.** Lists are paged by 500 (`limit=500`, then `continue=<token>` with the RV
//!   cleared), except a relist at a specific RV, which asks for everything at once so the
//!   server's watch cache can answer it; if the first `"0"` list came back in pages (no watch
//!   cache), every later list keeps pages. If a continuation page expires, one unpaged list at
//!   the original RV replaces the partial result. An explicit [`ReflectorConfig::page_size`]
//!   always wins.
//! * **Watching.** `allowWatchBookmarks=true` and `timeoutSeconds` drawn uniformly from
//!   [300, 600) s so that thousands of clients do not reconnect in step. Every event (bookmarks
//!   included) advances the last-synced RV, so a new watch resumes exactly where the old one
//!   stopped. A watch that started at `""`/`"0"` receives synthetic ADDED events in no RV order;
//!   those do not advance the RV until a MODIFIED, DELETED or BOOKMARK is seen.
//! * **Ending a watch.** A clean close or a connection error mid-stream re-opens the watch at
//!   once from the last RV: no relist, no delay. A watch that closed within 1 s with no events
//!   is a "very short watch" and is treated as an error. 410 Gone ends the cycle and the next
//!   list (after one backoff step) is a relist at the last RV. 429 waits one backoff step and
//!   watches again. Anything else (500, decode errors) ends the cycle: backoff, relist.
//! * **Opening a watch.** Connection refused or 429 → wait one backoff step and try again from
//!   the same RV without relisting (the API server is probably restarting). Other errors end
//!   the cycle.
//! * **Backoff.** 800 ms, doubling, jitter 1.0 (each delay uniform in `[d, 2d)`), capped at
//!   30 s (so later delays are in `[30, 60)` s), shared by the run loop and the watch retries.
//!   Whenever a delay is asked for more than 2 min after the last reset, the sequence starts
//!   again at 800 ms (client-go 1.36's `DelayWithReset`).
//! * **Streaming lists** (KEP-3157, [`ReflectorConfig::streaming_list`], on by default as in
//!   client-go 1.35+). The sync step becomes a single watch with `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan`: the server sends every object as ADDED, then a
//!   BOOKMARK annotated `k8s.io/initial-events-end: "true"` carrying the snapshot RV; the
//!   reflector replaces the store and keeps using the *same* stream for live events. No list
//!   response is ever held in memory. While waiting for the end bookmark a warning is logged
//!   every 10 s. Connection refused and 429 back off and retry; 410 / too-large retry at once
//!   from `""`; any other error (a server that rejects the parameter, a stream that closes
//!   early) falls back to a normal paged LIST for this cycle.
//! * **Resync.** If the store asks for it ([`ReflectorStore::resync_period`]), a timer runs
//!   during the watch phase; when it fires and [`ReflectorStore::should_resync`] says so, the
//!   reflector calls [`ReflectorStore::resync`].
//!
//! ## Observability
//!
//! [`Reflector::status`] returns a [`ReflectorStatus`] handle that stays valid while the
//! reflector runs: the last synced RV and counters of lists, watches, streaming lists, 410s
//! and errors, and the time of the last event.
//!
//! ## Health
//!
//! Given a [`WatchObserver`] ([`Reflector::set_watch_health`]; the informer factory gives one
//! to every informer it creates when it has [`WatchObservers`], as controller-runtime's health
//! checks and client-go's metrics providers hook in), the reflector reports what a `/healthz`
//! needs to tell a stuck watch from a quiet one:
//!
//! * a list-and-watch cycle that ended with **403 Forbidden** (on the list, the streaming
//!   list's fallback or the watch) → [`WatchObserver::forbidden`];
//! * a LIST that was **stored** → [`WatchObserver::listed`] (the 403 streak is over), and, for
//!   every list after the first, [`WatchObserver::relisted`];
//! * a **watch event or bookmark** after the sync, or a streaming list that reached its end
//!   bookmark (it is a watch, and it works) → [`WatchObserver::progress`]: both the 403 streak
//!   and the relist count end.
//! * a cycle that ended in any error but 410, or a watch or streaming list refused a connection
//!   → [`WatchObserver::failed`]; a watch opened → [`WatchObserver::reachable`]. When every
//!   reflector has been failing for a while, `/readyz` reports the API server unreachable.
//!
//! A successful list alone does not clear the relist count: a reflector whose every watch is
//! answered 410 lists fine and never watches, which is exactly the loop the relist rule is for.
//!
//! ## Differences from client-go
//!
//! The store interface is typed and takes `Arc<K>`; [`ReflectorStore::prepare`] (transform and
//! de-duplication against the cache) runs as each object arrives, page by page, so a relist
//! holds the changed objects and one page rather than a second copy of the whole collection
//! (see [`super`] on memory). The internal-error retry window (`MaxInternalErrorRetryDuration`)
//! is not implemented because it is off by default in client-go. "Connection refused" is
//! the transport error kind [`Error::is_connection_refused`], which the transport reads off the
//! `io::Error` it got, as client-go's `utilnet.IsConnectionRefused` reads the `syscall` errno.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::Metadata;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::ObjectMetaAccess;
use super::keys::key_of;
use super::lister_watcher::ListerWatcher;
use super::store::Indexer;
use crate::client::{
    Error, ListParams, Result, UndecodableObject, WatchEvent, WatchParams, WatchStream,
};

/// Default page size of the list pager.
pub const DEFAULT_PAGE_SIZE: u32 = 500;
/// Shortest watch timeout; the timeout is drawn from `[min, 2*min)`.
pub const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch that closes quicker than this with no events is an error.
pub const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// How often a streaming list that has not reached its end bookmark logs a warning.
pub const INITIAL_EVENTS_WARNING_PERIOD: Duration = Duration::from_secs(10);

/// Where a reflector writes. The informer implements it (store + handlers); so does a bare
/// [`Indexer`] for code that only wants a synced cache.
pub trait ReflectorStore<K>: Send + Sync + 'static {
    /// Turns a decoded object into what is stored: runs the transform and may return the cached
    /// `Arc` when the cache already holds this key at this resourceVersion (so unchanged objects
    /// are not stored twice).
    fn prepare(&self, obj: K) -> Arc<K>;
    /// The result of a list (or streaming list) at `resource_version`: the store must hold
    /// exactly these objects afterwards.
    fn replace(&self, objs: Vec<Arc<K>>, resource_version: &str);
    /// A watch ADDED event.
    fn add(&self, obj: Arc<K>);
    /// A watch MODIFIED event.
    fn update(&self, obj: Arc<K>);
    /// A watch DELETED event with the object's final state.
    fn delete(&self, obj: Arc<K>);
    /// How often the reflector should ask [`Self::should_resync`]; `None` = never.
    fn resync_period(&self) -> Option<Duration> {
        None
    }
    /// Whether a resync is due now (the informer asks its handlers).
    fn should_resync(&self) -> bool {
        true
    }
    /// Re-deliver the cached objects (the informer's periodic resync).
    fn resync(&self) {}
    /// The cached object under `key`, if any: the reflector removes it when the server's newer
    /// version of it does not decode (see the module doc, "Objects that do not decode").
    fn cached(&self, key: &str) -> Option<Arc<K>> {
        let _ = key;
        None
    }
}

/// The resourceVersion of an object ("" when missing).
pub(crate) fn rv_of<K: Metadata<Ty: ObjectMetaAccess>>(obj: &K) -> &str {
    obj.metadata().resource_version().unwrap_or_default()
}

impl<K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static> ReflectorStore<K> for Indexer<K> {
    fn prepare(&self, obj: K) -> Arc<K> {
        match self.get_for(&obj) {
            Some(cached) if !rv_of(&obj).is_empty() && rv_of(cached.as_ref()) == rv_of(&obj) => {
                cached
            }
            _ => Arc::new(obj),
        }
    }
    fn replace(&self, objs: Vec<Arc<K>>, _resource_version: &str) {
        Indexer::replace(self, objs);
    }
    fn add(&self, obj: Arc<K>) {
        self.insert(obj);
    }
    fn update(&self, obj: Arc<K>) {
        self.insert(obj);
    }
    fn delete(&self, obj: Arc<K>) {
        self.remove(&key_of(obj.as_ref()));
    }
    fn cached(&self, key: &str) -> Option<Arc<K>> {
        self.get(key)
    }
}

/// Backoff parameters (client-go's defaults in [`Default`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First delay (800 ms).
    pub initial: Duration,
    /// Multiplier per step (2.0).
    pub factor: f64,
    /// Largest base delay (30 s).
    pub cap: Duration,
    /// Each delay is uniform in `[d, d * (1 + jitter))` (1.0).
    pub jitter: f64,
    /// Start over at `initial` when more than this has passed since the last reset (2 min).
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(800),
            factor: 2.0,
            cap: Duration::from_secs(30),
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// Exponential backoff with jitter, a cap, and a periodic reset (apimachinery's
/// `wait.Backoff` driven by `DelayWithReset`).
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    duration: Duration,
    steps: u32,
    last_reset: Instant,
}

impl Backoff {
    /// A fresh backoff; the reset clock starts now.
    pub fn new(config: BackoffConfig) -> Self {
        let steps = Self::initial_steps(&config);
        Backoff {
            duration: config.initial,
            steps,
            last_reset: Instant::now(),
            config,
        }
    }

    fn initial_steps(c: &BackoffConfig) -> u32 {
        // ceil(cap / initial): 38 with the defaults.
        let initial = c.initial.as_secs_f64().max(f64::MIN_POSITIVE);
        (c.cap.as_secs_f64() / initial).ceil() as u32
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if now.duration_since(self.last_reset) > self.config.reset_after {
            self.duration = self.config.initial;
            self.steps = Self::initial_steps(&self.config);
            self.last_reset = now;
        }
        let base = self.duration;
        if self.steps > 0 {
            self.steps -= 1;
            let next = base.mul_f64(self.config.factor);
            if next > self.config.cap {
                self.duration = self.config.cap;
                self.steps = 0;
            } else {
                self.duration = next;
            }
        }
        base + base.mul_f64(self.config.jitter * fastrand::f64())
    }
}

/// The objects of a streaming list's initial events, before its end bookmark: the last state
/// of each key, in arrival order, and the objects that did not decode.
struct InitialEvents<K> {
    objs: Vec<Arc<K>>,
    positions: HashMap<String, usize>,
    left_out: Vec<UndecodableObject>,
}

impl<K> Default for InitialEvents<K> {
    fn default() -> Self {
        InitialEvents {
            objs: Vec::new(),
            positions: HashMap::new(),
            left_out: Vec::new(),
        }
    }
}

impl<K: Metadata<Ty: ObjectMetaAccess>> InitialEvents<K> {
    /// ADDED or MODIFIED: the object's latest state.
    fn upsert(&mut self, obj: Arc<K>) {
        let key = key_of(obj.as_ref());
        match self.positions.get(&key) {
            Some(&i) => self.objs[i] = obj,
            None => {
                self.positions.insert(key, self.objs.len());
                self.objs.push(obj);
            }
        }
    }

    /// DELETED (or no longer decodable): out of the list.
    fn remove(&mut self, key: &str) {
        if let Some(i) = self.positions.remove(key) {
            self.objs.swap_remove(i);
            if let Some(moved) = self.objs.get(i) {
                self.positions.insert(key_of(moved.as_ref()), i);
            }
        }
    }
}

/// What a reflector tells about its list and watch, for health checks (see the module doc,
/// "Health"). Every method has an empty default; controller-runtime's probes implement it
/// (`sample_controller_runtime::health::WatchHealth`), as client-go's metrics providers plug
/// into its reflector and work queue.
pub trait WatchObserver: Send + Sync + 'static {
    /// A list-and-watch cycle ended with 403 Forbidden.
    fn forbidden(&self) {}
    /// A LIST was stored.
    fn listed(&self) {}
    /// A LIST after the first was stored.
    fn relisted(&self) {}
    /// A watch event or bookmark arrived (or a streaming list reached its end).
    fn progress(&self) {}
    /// A cycle ended in an error other than 410 Gone, or a watch was refused a connection.
    fn failed(&self, _error: &str) {}
    /// A watch opened.
    fn reachable(&self) {}
}

/// Hands each new informer its [`WatchObserver`], given the informer's name (the resource
/// plural: `"ats"`, `"pods"`); see [`SharedInformerFactory::with_watch_health`](super::SharedInformerFactory::with_watch_health).
pub type WatchObservers = Arc<dyn Fn(&str) -> Arc<dyn WatchObserver> + Send + Sync>;

/// How a reflector lists and watches.
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    /// A name for logs (the resource, e.g. `"pods"`).
    pub name: String,
    /// `labelSelector` for list and watch.
    pub label_selector: Option<String>,
    /// `fieldSelector` for list and watch.
    pub field_selector: Option<String>,
    /// Page size; `None` = client-go's choice (see the module doc).
    pub page_size: Option<u32>,
    /// Try a streaming list (`sendInitialEvents=true`) before falling back to LIST.
    pub streaming_list: bool,
    /// Minimum watch timeout; honoured only when larger than 5 min, as in client-go.
    pub min_watch_timeout: Duration,
    /// Backoff parameters.
    pub backoff: BackoffConfig,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        ReflectorConfig {
            name: "objects".to_owned(),
            label_selector: None,
            field_selector: None,
            page_size: None,
            streaming_list: true,
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            backoff: BackoffConfig::default(),
        }
    }
}

/// Counters and the last synced resourceVersion of one reflector.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReflectorStats {
    /// The resourceVersion the store reflects (last list, bookmark or event).
    pub last_synced_resource_version: String,
    /// LIST requests sent (pages count once per list; continuation pages do not add).
    pub lists: u64,
    /// WATCH requests sent (streaming lists included).
    pub watches: u64,
    /// Streaming lists that reached their end bookmark.
    pub streaming_lists: u64,
    /// Streaming lists given up in favour of a LIST.
    pub streaming_list_fallbacks: u64,
    /// 410 Gone / Expired answers (lists and watches).
    pub expired: u64,
    /// Cycles that ended with an error (410s included).
    pub errors: u64,
    /// Watch events received (bookmarks included; what a list brings is not counted).
    pub events: u64,
    /// When the last watch event (bookmarks included) arrived.
    pub last_event: Option<Instant>,
    /// True once the first list or streaming list has been stored.
    pub synced: bool,
    /// Objects that did not decode, each counted once per resourceVersion.
    pub undecodable: u64,
    /// Objects left out of the store now because they do not decode.
    pub left_out: u64,
}

/// A shared, cheap-to-clone view of a reflector's [`ReflectorStats`].
#[derive(Clone, Debug, Default)]
pub struct ReflectorStatus(Arc<Mutex<ReflectorStats>>);

impl ReflectorStatus {
    fn with<T>(&self, f: impl FnOnce(&mut ReflectorStats) -> T) -> T {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }
    /// A snapshot of the counters.
    pub fn snapshot(&self) -> ReflectorStats {
        self.with(|s| s.clone())
    }
    /// The resourceVersion the store reflects (client-go's `LastSyncResourceVersion`).
    pub fn last_synced_resource_version(&self) -> String {
        self.with(|s| s.last_synced_resource_version.clone())
    }
}

/// Lists and watches one collection into a store (see the module doc).
pub struct Reflector<K, LW, S = Indexer<K>> {
    lw: LW,
    store: S,
    config: ReflectorConfig,
    status: ReflectorStatus,
    health: Mutex<Option<Arc<dyn WatchObserver>>>,
    on_undecodable: Mutex<Option<UndecodableHandler>>,
    /// The objects left out because they do not decode: key → the resourceVersion reported.
    undecodable: Mutex<HashMap<String, String>>,
    running: AtomicBool,
    _k: std::marker::PhantomData<fn() -> K>,
}

/// Called once per object and resourceVersion that does not decode (the reflector's name, and
/// the object): the manager counts it in a metric and records a Warning event on the object.
pub type UndecodableHandler = Arc<dyn Fn(&str, &UndecodableObject) + Send + Sync>;

/// At most this many undecodable objects are remembered (to report each once per
/// resourceVersion); past it, each is still left out and logged, possibly more than once.
pub const MAX_REMEMBERED_UNDECODABLE: usize = 10_000;

/// State carried from one list-and-watch cycle to the next.
struct Cycle {
    backoff: Backoff,
    last_sync_rv: String,
    rv_unavailable: bool,
    paginated_result: bool,
    populated_logged: bool,
    listed_before: bool,
}

enum WatchEnd {
    Cancelled,
    Closed { events: usize, started: Instant },
    Failed(Error),
}

/// True when the server refused the TCP connection (client-go's `utilnet.IsConnectionRefused`):
/// the kind [`TransportKind::ConnectionRefused`](crate::client::error::TransportKind), which
/// the transport takes from the `io::Error` underneath, never from message text.
pub fn is_connection_refused(e: &Error) -> bool {
    e.is_connection_refused()
}

/// True for 410 Expired/Gone (client-go's `isExpiredError`).
pub fn is_expired(e: &Error) -> bool {
    e.is_gone()
}

/// True for "too large resource version" (a `ResourceVersionTooLarge` cause, or a 504 whose
/// message says so, as 1.17–1.18 servers answered).
pub fn is_too_large_resource_version(e: &Error) -> bool {
    let Some(status) = e.as_status() else {
        return false;
    };
    let causes = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .into_iter()
        .flatten();
    let mut cause_says = false;
    for c in causes {
        if c.reason.as_deref() == Some("ResourceVersionTooLarge") {
            return true;
        }
        if c.message
            .as_deref()
            .is_some_and(|m| m.contains("Too large resource version"))
        {
            cause_says = true;
        }
    }
    e.is_server_timeout()
        && (cause_says
            || status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("Too large resource version")))
}

fn none_if_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

impl<K, LW, S> Reflector<K, LW, S>
where
    K: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
    LW: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// A reflector that will fill `store` from `lw`.
    pub fn new(lw: LW, store: S, config: ReflectorConfig) -> Self {
        Reflector {
            lw,
            store,
            config,
            status: ReflectorStatus::default(),
            health: Mutex::new(None),
            on_undecodable: Mutex::new(None),
            undecodable: Mutex::new(HashMap::new()),
            running: AtomicBool::new(false),
            _k: std::marker::PhantomData,
        }
    }

    /// A handle on the counters, valid while and after the reflector runs.
    pub fn status(&self) -> ReflectorStatus {
        self.status.clone()
    }

    /// The resourceVersion the store reflects.
    pub fn last_synced_resource_version(&self) -> String {
        self.status.last_synced_resource_version()
    }

    /// Reports this reflector's list/watch health to `health` from now on (see the module
    /// doc, "Health"); replaces an earlier observer.
    pub fn set_watch_health(&self, health: Arc<dyn WatchObserver>) {
        *self.health.lock().unwrap_or_else(|e| e.into_inner()) = Some(health);
    }

    /// Calls `handler` once for each object (and resourceVersion of it) that does not decode,
    /// from now on; replaces an earlier handler.
    pub fn set_undecodable_handler(&self, handler: UndecodableHandler) {
        *self
            .on_undecodable
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(handler);
    }

    /// How many objects are left out of the store now because they do not decode.
    pub fn undecodable_count(&self) -> usize {
        self.undecodable_count_locked()
    }

    fn undecodable_count_locked(&self) -> usize {
        self.undecodable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn update_left_out(&self) {
        let n = u64::try_from(self.undecodable_count_locked()).unwrap_or(u64::MAX);
        self.status.with(|s| s.left_out = n);
    }

    /// An object that does not decode: left out of the store (its cached older version is
    /// removed, with a delete notification), and reported once per resourceVersion: a log line
    /// naming kind, key, resourceVersion and serde's message (which names the field), and the
    /// handler (metric, event).
    fn left_out(&self, u: &UndecodableObject) {
        let key = u.key();
        if let Some(old) = self.store.cached(&key) {
            self.store.delete(old);
        }
        let rv = u.resource_version.clone().unwrap_or_default();
        let new = {
            let mut seen = self.undecodable.lock().unwrap_or_else(|e| e.into_inner());
            match seen.get(&key) {
                Some(reported) if *reported == rv => false,
                _ => {
                    if seen.len() < MAX_REMEMBERED_UNDECODABLE || seen.contains_key(&key) {
                        seen.insert(key.clone(), rv.clone());
                    }
                    true
                }
            }
        };
        self.status.with(|s| {
            s.left_out = u64::try_from(self.undecodable_count_locked()).unwrap_or(u64::MAX);
            if new {
                s.undecodable += 1;
            }
        });
        if !new {
            return;
        }
        warn!(reflector = %self.config.name, kind = %u.kind, object = %key, resource_version = %rv,
            error = %u.error, "object does not decode; left out of the cache, every other object syncs");
        let handler = self
            .on_undecodable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(h) = handler {
            h(&self.config.name, u);
        }
    }

    /// `obj` decoded (or is gone): it is no longer left out.
    fn decoded(&self, obj: &K) {
        let mut seen = self.undecodable.lock().unwrap_or_else(|e| e.into_inner());
        if seen.is_empty() {
            return;
        }
        let key = key_of(obj);
        if seen.remove(&key).is_some() {
            drop(seen);
            self.update_left_out();
            debug!(reflector = %self.config.name, object = %key, "object decodes again");
        }
    }

    /// An object that did not decode was deleted: out of the store, and forgotten.
    fn deleted_undecodable(&self, u: &UndecodableObject) {
        let key = u.key();
        if let Some(old) = self.store.cached(&key) {
            self.store.delete(old);
        }
        self.undecodable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.update_left_out();
    }

    /// A list replaced the store: only the objects it left out are still left out.
    fn relisted_undecodable(&self, left_out: &[UndecodableObject]) {
        let mut seen = self.undecodable.lock().unwrap_or_else(|e| e.into_inner());
        if seen.is_empty() {
            return;
        }
        let now: std::collections::HashSet<String> = left_out.iter().map(|u| u.key()).collect();
        seen.retain(|k, _| now.contains(k));
        drop(seen);
        self.update_left_out();
    }

    fn report(&self, f: impl FnOnce(&dyn WatchObserver)) {
        if let Some(h) = self
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            f(&**h);
        }
    }

    /// A list (or streaming list) was stored: it ends a 403 streak, and every list after the
    /// first is a relist.
    fn report_listed(&self, cycle: &mut Cycle) {
        let relist = std::mem::replace(&mut cycle.listed_before, true);
        self.report(|h| {
            h.listed();
            if relist {
                h.relisted();
            }
        });
    }

    /// The store this reflector writes to.
    pub fn store(&self) -> &S {
        &self.store
    }

    fn watch_timeout(&self) -> u32 {
        let min = self.config.min_watch_timeout.max(DEFAULT_MIN_WATCH_TIMEOUT);
        let min = min.as_secs().max(1);
        u32::try_from(fastrand::u64(min..2 * min)).unwrap_or(u32::MAX)
    }

    fn set_rv(&self, cycle: &mut Cycle, rv: &str) {
        if rv.is_empty() || rv == cycle.last_sync_rv {
            return;
        }
        cycle.last_sync_rv = rv.to_owned();
        self.status
            .with(|s| s.last_synced_resource_version = rv.to_owned());
    }

    /// Runs list-and-watch cycles until `cancel` fires. Call it once; a second concurrent or
    /// later call logs a warning and returns.
    pub async fn run(&self, cancel: CancellationToken) {
        if self.running.swap(true, Ordering::SeqCst) {
            warn!(reflector = %self.config.name, "reflector already ran; ignoring a second run");
            return;
        }
        let mut cycle = Cycle {
            backoff: Backoff::new(self.config.backoff.clone()),
            last_sync_rv: String::new(),
            rv_unavailable: false,
            paginated_result: false,
            populated_logged: false,
            listed_before: false,
        };
        loop {
            if cancel.is_cancelled() {
                break;
            }
            if let Err(e) = self.list_and_watch(&mut cycle, &cancel).await {
                self.status.with(|s| s.errors += 1);
                if e.is_forbidden() {
                    self.report(|h| h.forbidden());
                }
                if !is_expired(&e) {
                    self.report(|h| h.failed(&e.to_string()));
                }
                if is_expired(&e) {
                    debug!(reflector = %self.config.name, error = %e, "watch expired; relisting");
                } else {
                    warn!(reflector = %self.config.name, error = %e, "list and watch failed");
                }
            }
            if cancel.is_cancelled() {
                break;
            }
            let delay = cycle.backoff.next_delay();
            debug!(reflector = %self.config.name, delay_ms = delay.as_millis() as u64, "backing off before the next list and watch");
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        debug!(reflector = %self.config.name, "reflector stopped");
    }

    async fn list_and_watch(&self, cycle: &mut Cycle, cancel: &CancellationToken) -> Result<()> {
        let mut stream = None;
        if self.config.streaming_list {
            match self.streaming_list(cycle, cancel).await {
                Ok(Some(s)) => stream = Some(s),
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.status.with(|s| s.streaming_list_fallbacks += 1);
                    warn!(reflector = %self.config.name, error = %e,
                        "the streaming list failed; falling back to LIST and WATCH");
                }
            }
        }
        if stream.is_none() {
            self.list(cycle).await?;
        }
        self.mark_populated(cycle);
        self.watch_loop(cycle, cancel, stream).await
    }

    fn mark_populated(&self, cycle: &mut Cycle) {
        self.status.with(|s| s.synced = true);
        if !cycle.populated_logged {
            cycle.populated_logged = true;
            info!(reflector = %self.config.name, resource_version = %cycle.last_sync_rv, "caches populated");
        }
    }

    fn relist_rv(&self, cycle: &Cycle) -> String {
        if cycle.rv_unavailable {
            String::new()
        } else if cycle.last_sync_rv.is_empty() {
            "0".to_owned()
        } else {
            cycle.last_sync_rv.clone()
        }
    }

    /// LIST phase: relist at the right RV, retry at "" once if it expired.
    async fn list(&self, cycle: &mut Cycle) -> Result<()> {
        let rv = self.relist_rv(cycle);
        match self.list_at(cycle, &rv).await {
            Err(e) if is_expired(&e) || is_too_large_resource_version(&e) => {
                if is_expired(&e) {
                    self.status.with(|s| s.expired += 1);
                }
                debug!(reflector = %self.config.name, resource_version = %rv, error = %e,
                    "list resourceVersion unavailable; listing from storage");
                cycle.rv_unavailable = true;
                self.list_at(cycle, "").await
            }
            other => other,
        }
        .map_err(|e| {
            // Say which list failed, keeping the kind (a refused connection stays one).
            let name = &self.config.name;
            match e {
                Error::Api(_) | Error::Http { .. } => e,
                Error::Transport(mut t) => {
                    t.context = format!("failed to list {name}: {}", t.context);
                    Error::Transport(t)
                }
                Error::Timeout(m) => Error::Timeout(format!("failed to list {name}: {m}")),
                Error::Decode { what, source } => Error::Decode {
                    what: format!("{what} (listing {name})"),
                    source,
                },
                other => Error::Other(format!("failed to list {name}: {other}")),
            }
        })
    }

    async fn list_at(&self, cycle: &mut Cycle, rv: &str) -> Result<()> {
        self.status.with(|s| s.lists += 1);
        let limit = match self.config.page_size {
            Some(n) if n > 0 => Some(n),
            Some(_) => None,
            None if cycle.paginated_result => Some(DEFAULT_PAGE_SIZE),
            None if !rv.is_empty() && rv != "0" => None,
            None => Some(DEFAULT_PAGE_SIZE),
        };
        let first = ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit,
            continue_token: None,
            resource_version: none_if_empty(rv),
            resource_version_match: None,
        };
        let mut params = first.clone();
        let mut objs: Vec<Arc<K>> = Vec::new();
        let mut left_out: Vec<UndecodableObject> = Vec::new();
        let mut list_rv: Option<String> = None;
        let mut paginated = false;
        loop {
            let page = match self.lw.list(&params).await {
                Ok(p) => p,
                Err(e) if params.continue_token.is_some() && is_expired(&e) => {
                    // The pager's FullListIfExpired: one unpaged list at the original RV.
                    debug!(reflector = %self.config.name, "continuation page expired; listing without paging");
                    objs.clear();
                    let full = self
                        .lw
                        .list(&ListParams {
                            limit: None,
                            ..first.clone()
                        })
                        .await?;
                    list_rv = Some(full.metadata.resource_version.unwrap_or_default());
                    objs.extend(full.items.into_iter().map(|o| self.store.prepare(o)));
                    left_out = full.undecodable;
                    break;
                }
                Err(e) => return Err(e),
            };
            if list_rv.is_none() {
                list_rv = Some(page.metadata.resource_version.clone().unwrap_or_default());
            }
            // Transform and de-duplicate page by page: only changed objects are kept twice.
            objs.extend(page.items.into_iter().map(|o| self.store.prepare(o)));
            left_out.extend(page.undecodable);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => {
                    paginated = true;
                    params.continue_token = Some(token);
                    params.resource_version = None;
                    params.resource_version_match = None;
                }
                None => break,
            }
        }
        if rv == "0" && paginated {
            cycle.paginated_result = true;
        }
        cycle.rv_unavailable = false;
        let list_rv = list_rv.unwrap_or_default();
        let count = objs.len();
        self.store.replace(objs, &list_rv);
        self.relisted_undecodable(&left_out);
        for u in &left_out {
            self.left_out(u);
        }
        cycle.last_sync_rv = String::new();
        self.set_rv(cycle, &list_rv);
        self.report_listed(cycle);
        debug!(reflector = %self.config.name, resource_version = %list_rv, count, "list stored");
        Ok(())
    }

    fn watch_params(&self, rv: &str, send_initial_events: bool) -> WatchParams {
        WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            resource_version: if send_initial_events {
                Some(rv.to_owned())
            } else {
                none_if_empty(rv)
            },
            allow_watch_bookmarks: true,
            timeout_seconds: Some(self.watch_timeout()),
            send_initial_events,
        }
    }

    async fn sleep_or_cancel(&self, d: Duration, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// The streaming-list sync step. `Ok(None)` = cancelled; `Err` = fall back to LIST.
    async fn streaming_list(
        &self,
        cycle: &mut Cycle,
        cancel: &CancellationToken,
    ) -> Result<Option<WatchStream<K>>> {
        'attempt: loop {
            if cancel.is_cancelled() {
                return Ok(None);
            }
            let rv = if cycle.rv_unavailable {
                String::new()
            } else {
                cycle.last_sync_rv.clone()
            };
            self.status.with(|s| s.watches += 1);
            let mut stream = match self.lw.watch(&self.watch_params(&rv, true)).await {
                Ok(s) => s,
                Err(e) if is_connection_refused(&e) || e.is_too_many_requests() => {
                    if is_connection_refused(&e) {
                        self.report(|h| h.failed(&e.to_string()));
                    }
                    let d = cycle.backoff.next_delay();
                    debug!(reflector = %self.config.name, error = %e, "streaming list not possible yet; backing off");
                    if !self.sleep_or_cancel(d, cancel).await {
                        return Ok(None);
                    }
                    continue;
                }
                Err(e) if is_expired(&e) || is_too_large_resource_version(&e) => {
                    if is_expired(&e) {
                        self.status.with(|s| s.expired += 1);
                    }
                    if rv.is_empty() {
                        return Err(e);
                    }
                    cycle.rv_unavailable = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut initial = InitialEvents::default();
            let mut warn_tick = tokio::time::interval_at(
                Instant::now() + INITIAL_EVENTS_WARNING_PERIOD,
                INITIAL_EVENTS_WARNING_PERIOD,
            );
            loop {
                let item = tokio::select! {
                    _ = cancel.cancelled() => return Ok(None),
                    _ = warn_tick.tick() => {
                        warn!(reflector = %self.config.name, received = initial.objs.len(),
                            "still waiting for the bookmark that ends the initial events of a streaming list");
                        continue;
                    }
                    item = stream.next() => item,
                };
                warn_tick.reset();
                let event = match item {
                    None => {
                        return Err(Error::Other(format!(
                            "the streaming list of {} closed before its initial-events-end bookmark",
                            self.config.name
                        )));
                    }
                    Some(Err(e)) => Err(e),
                    Some(Ok(WatchEvent::Error(status))) => Err(Error::from_status(status)),
                    Some(Ok(ev)) => Ok(ev),
                };
                self.status.with(|s| s.last_event = Some(Instant::now()));
                match event {
                    Err(e) if (is_expired(&e) || is_too_large_resource_version(&e)) => {
                        if is_expired(&e) {
                            self.status.with(|s| s.expired += 1);
                        }
                        if rv.is_empty() {
                            return Err(e);
                        }
                        cycle.rv_unavailable = true;
                        continue 'attempt;
                    }
                    Err(Error::UndecodableObject { event, object }) => {
                        initial.remove(&object.key());
                        if event != "DELETED" {
                            initial.left_out.push(*object);
                        }
                    }
                    Err(e) => return Err(e),
                    Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                        initial.upsert(self.store.prepare(o));
                    }
                    Ok(WatchEvent::Deleted(o)) => initial.remove(&key_of(&o)),
                    Ok(WatchEvent::Bookmark(b)) if b.initial_events_end => {
                        self.store_streaming_list(cycle, initial, &b.resource_version);
                        return Ok(Some(stream));
                    }
                    Ok(WatchEvent::Bookmark(_)) => {}
                    Ok(WatchEvent::Error(_)) => {}
                }
            }
        }
    }

    /// A streaming list reached its initial-events-end bookmark at `rv`: its objects replace
    /// the store, as a LIST's would.
    fn store_streaming_list(&self, cycle: &mut Cycle, initial: InitialEvents<K>, rv: &str) {
        let InitialEvents {
            objs,
            positions,
            mut left_out,
        } = initial;
        let count = objs.len();
        self.store.replace(objs, rv);
        // An object that decoded after it did not (or the other way round) counts as its last
        // state.
        left_out.retain(|u| !positions.contains_key(&u.key()));
        self.relisted_undecodable(&left_out);
        for u in &left_out {
            self.left_out(u);
        }
        cycle.rv_unavailable = false;
        cycle.last_sync_rv = String::new();
        self.set_rv(cycle, rv);
        self.status.with(|s| s.streaming_lists += 1);
        // The sync came over a watch that reached its end bookmark: the watch works, which is
        // progress, not a relist.
        cycle.listed_before = true;
        self.report(|h| h.progress());
        debug!(reflector = %self.config.name, resource_version = %rv, count, "streaming list stored");
    }

    /// WATCH phase: watch, re-watch, until something ends the cycle.
    async fn watch_loop(
        &self,
        cycle: &mut Cycle,
        cancel: &CancellationToken,
        mut initial: Option<WatchStream<K>>,
    ) -> Result<()> {
        let resync_period = self
            .store
            .resync_period()
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::MAX);
        let mut resync = tokio::time::interval_at(
            Instant::now()
                .checked_add(resync_period)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600)),
            resync_period.min(Duration::from_secs(365 * 24 * 3600)),
        );
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let started = Instant::now();
            let (stream, synthetic_adds) = match initial.take() {
                Some(s) => (s, false),
                None => {
                    let rv = cycle.last_sync_rv.clone();
                    self.status.with(|s| s.watches += 1);
                    match self.lw.watch(&self.watch_params(&rv, false)).await {
                        Ok(s) => {
                            self.report(|h| h.reachable());
                            (s, rv.is_empty() || rv == "0")
                        }
                        Err(e) if is_connection_refused(&e) || e.is_too_many_requests() => {
                            if is_connection_refused(&e) {
                                self.report(|h| h.failed(&e.to_string()));
                            }
                            let d = cycle.backoff.next_delay();
                            debug!(reflector = %self.config.name, error = %e,
                                delay_ms = d.as_millis() as u64, "watch could not be opened; retrying without relist");
                            if !self.sleep_or_cancel(d, cancel).await {
                                return Ok(());
                            }
                            continue;
                        }
                        Err(e) => {
                            if is_expired(&e) {
                                self.status.with(|s| s.expired += 1);
                            }
                            return Err(e);
                        }
                    }
                }
            };
            match self
                .handle_watch(cycle, cancel, stream, synthetic_adds, &mut resync, started)
                .await
            {
                WatchEnd::Cancelled => return Ok(()),
                WatchEnd::Closed { events, started } => {
                    if events == 0 && started.elapsed() < VERY_SHORT_WATCH {
                        return Err(Error::Other(format!(
                            "very short watch of {}: unexpected watch close - watch lasted less than a second and no items received",
                            self.config.name
                        )));
                    }
                    debug!(reflector = %self.config.name, resource_version = %cycle.last_sync_rv, events,
                        "watch closed; watching again");
                }
                WatchEnd::Failed(e) if is_expired(&e) => {
                    self.status.with(|s| s.expired += 1);
                    return Err(e);
                }
                WatchEnd::Failed(e) if e.is_too_many_requests() => {
                    let d = cycle.backoff.next_delay();
                    if !self.sleep_or_cancel(d, cancel).await {
                        return Ok(());
                    }
                }
                WatchEnd::Failed(e) => return Err(e),
            }
        }
    }

    async fn handle_watch(
        &self,
        cycle: &mut Cycle,
        cancel: &CancellationToken,
        mut stream: WatchStream<K>,
        synthetic_adds: bool,
        resync: &mut tokio::time::Interval,
        started: Instant,
    ) -> WatchEnd {
        let mut events = 0usize;
        let mut seen_non_add = !synthetic_adds;
        loop {
            let item = tokio::select! {
                biased;
                _ = cancel.cancelled() => return WatchEnd::Cancelled,
                _ = resync.tick() => {
                    if self.store.should_resync() {
                        self.store.resync();
                    }
                    continue;
                }
                item = stream.next() => item,
            };
            let event = match item {
                None => return WatchEnd::Closed { events, started },
                // A connection that breaks mid-stream is a close, as client-go's stream watcher
                // treats unexpected EOF: resume from the last RV.
                Some(Err(e @ (Error::Transport(_) | Error::Timeout(_)))) => {
                    debug!(reflector = %self.config.name, error = %e, "watch connection ended");
                    return WatchEnd::Closed { events, started };
                }
                // One object that does not decode: left out, and the watch goes on.
                Some(Err(Error::UndecodableObject { event, object })) => {
                    events += 1;
                    self.report(|h| h.progress());
                    if event == "DELETED" {
                        self.deleted_undecodable(&object);
                    } else {
                        self.left_out(&object);
                    }
                    continue;
                }
                Some(Err(e)) => return WatchEnd::Failed(e),
                Some(Ok(ev)) => ev,
            };
            events += 1;
            self.status.with(|s| {
                s.events += 1;
                s.last_event = Some(Instant::now());
            });
            if !matches!(event, WatchEvent::Error(_)) {
                self.report(|h| h.progress());
            }
            match event {
                WatchEvent::Added(o) => {
                    let rv = rv_of(&o).to_owned();
                    self.decoded(&o);
                    self.store.add(self.store.prepare(o));
                    if seen_non_add {
                        self.set_rv(cycle, &rv);
                    }
                }
                WatchEvent::Modified(o) => {
                    seen_non_add = true;
                    let rv = rv_of(&o).to_owned();
                    self.decoded(&o);
                    self.store.update(self.store.prepare(o));
                    self.set_rv(cycle, &rv);
                }
                WatchEvent::Deleted(o) => {
                    seen_non_add = true;
                    let rv = rv_of(&o).to_owned();
                    self.decoded(&o);
                    self.store.delete(self.store.prepare(o));
                    self.set_rv(cycle, &rv);
                }
                WatchEvent::Bookmark(b) => {
                    seen_non_add = true;
                    self.set_rv(cycle, &b.resource_version);
                }
                WatchEvent::Error(status) => return WatchEnd::Failed(Error::from_status(status)),
            }
        }
    }
}
