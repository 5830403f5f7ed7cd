//! The shared index informer: one reflector, one cache, many event handlers.
//!
//! A controller wants two things from the API server: a cache to read (the
//! [lister](super::lister)) and a nudge whenever something changes (event handlers, which
//! enqueue keys). [`SharedIndexInformer<K>`] provides both from a single list+watch, shared by
//! every controller in the process that asks for the same type (client-go's
//! `sharedIndexInformer`):
//!
//! ```text
//!   Reflector --add/update/delete/replace--> [processor lock] Indexer::insert / remove / replace
//!                                                              --> Processor::distribute
//!                                                                      |        |
//!                                                          unbounded buffer   unbounded buffer
//!                                                                      v        v
//!                                                               handler task  handler task
//! ```
//!
//! ## What a handler sees
//!
//! * `on_add(obj, is_initial_list)` for a key the cache did not hold. `is_initial_list` is true
//!   for objects of the first list, and for the synthetic adds a late handler receives.
//! * `on_update(old, new)` for a key it held. When `old` and `new` have the **same
//!   resourceVersion** (a periodic resync, or a relist that found the object unchanged) the
//!   update goes *only* to handlers whose resync is due; everyone else hears only real changes.
//! * `on_delete(Deleted)`: [`Deleted::Final`] from a watch event, or [`Deleted::Tombstone`]
//!   when a relist found the object gone. A DELETED event for a key the cache does not hold is
//!   dropped, so a deletion is never reported twice.
//!
//! The cache is updated **before** the handlers are told, so a worker woken by a handler reads
//! the new state (or a newer one) from the lister.
//!
//! ## Per-handler buffers
//!
//! Each handler has an unbounded queue and its own task that calls it one notification at a
//! time, in order. A slow handler delays only itself; the reflector and the other handlers go
//! on (client-go's `processorListener`). Handlers are plain synchronous functions called on a
//! tokio worker: they should do what client-go handlers do, enqueue a key, and return. A
//! handler that must block its thread (a contended lock, file I/O) has to wrap that part in
//! `tokio::task::block_in_place`, as any blocking code on a tokio worker must, or it can stall
//! other tasks queued on the same worker. A handler that panics is logged
//! and keeps receiving later notifications (client-go re-panics and kills the process).
//!
//! ## Late handlers, resync, sync state
//!
//! * A handler added **after** [`SharedIndexInformer::run`] started first receives
//!   `on_add(obj, true)` for every cached object, queued while deltas are blocked, so it misses
//!   nothing and sees nothing twice. Adding a handler to a stopped informer is an error.
//! * Resync: each handler may ask for a period (minimum 1 s). The informer checks every
//!   *resync check period* (the smallest period asked for before start, or the informer's
//!   default); at each check the handlers that are due get `on_update(obj, obj)` for every
//!   cached object. A period shorter than the check period, asked for after start, is raised
//!   to it.
//! * [`SharedIndexInformer::has_synced`] latches true once the first list is in the cache;
//!   [`HandlerRegistration::has_synced`] additionally waits until that handler has processed
//!   its initial-list adds.
//!
//! ## Transform
//!
//! [`SharedIndexInformer::set_transform`] installs a function applied to every object before
//! it is stored (not to tombstones). The default drops `metadata.managedFields`, which is often
//! half of an object's size and never useful to a controller, and gives back the spare room a
//! JSON decoder leaves in decoded lists ([`shrink_metadata_lists`]). Set it before `run`.
//! On a real server the informers of a [`SharedInformerFactory`](super::SharedInformerFactory)
//! never see the field at all: their [`ClientSource`](super::ClientSource) cuts it from the
//! text before decoding ([`crate::client::skip_managed_fields`]), so the transform's clearing is
//! then for other sources (tests, a hand-built lister-watcher).
//!
//! ## Why, and when: triggers and hops
//!
//! Each handler call runs inside [`crate::keytrace::notifying`]: for the length of that call
//! the notification (its type, the object's kind, `namespace/name`, resourceVersion, and its
//! `tracing.k8s.io/traceparent` annotation) is the thread's current one, so a work queue `add`
//! made by the handler records it as the key's trigger. The types are `ADDED`, `MODIFIED` and
//! `DELETED` for watch events (a relist's tombstone is a `DELETED` too), `initial list` for
//! the first list and the replay to a late handler, `relist` for what a later list found new
//! or changed, and `resync`.
//!
//! With a [`KeyTracer`] ([`InformerOptions::key_tracer`]), while
//! anyone reads a trace the informer stamps every notification with the moment it reached the
//! store and the moment the store held it (two clock reads: it cannot know yet which key a
//! handler will map a pod to), and it recognises the watch echo of a traced sync's own write
//! (the resourceVersion the write produced) and records how long it took to come back. With no
//! reader it does neither: one atomic load per notification.
//!
//! ## Differences from client-go
//!
//! There is no DeltaFIFO between the reflector and the cache: the reflector applies each event
//! to the indexer and distributes the notifications under one lock, which gives the event order
//! of client-go's `RealFIFO` (the default since 1.33) without a second queue. Handler queues are
//! tokio unbounded channels rather than ring buffers.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::keys::{Deleted, key_of};
use super::lister::Lister;
use super::lister_watcher::{BoxListerWatcher, ListerWatcher};
use super::reflector::{Reflector, ReflectorConfig, ReflectorStatus, ReflectorStore, rv_of};
use super::store::{Change, IndexError, Indexer};
use super::{CacheObject, ObjectMetaAccess};
use crate::keytrace::{
    EventType, KeyTracer, NotifyTimes, Notifying, SeenEvent, TRACEPARENT_ANNOTATION, Trigger,
    echo_hop, millis, notifying,
};
use crate::small_string::SmallString;

/// The smallest resync period a handler may ask for.
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);
/// How often `wait_for_cache_sync` checks.
pub const SYNC_POLL_PERIOD: Duration = Duration::from_millis(100);

/// A function applied to every object before it is cached.
pub type TransformFn<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Errors of informer configuration calls.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InformerError {
    /// The informer has stopped; nothing can be added.
    #[error("handler was not added to shared informer because it has stopped already")]
    Stopped,
    /// The call is only allowed before `run`.
    #[error("informer has already started")]
    AlreadyStarted,
    /// Adding an index failed.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// Receives notifications from an informer. Every method has an empty default.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// A new object (or, with `is_initial_list`, one from the first list / a late replay).
    fn on_add(&self, obj: Arc<K>, is_initial_list: bool) {
        let _ = (obj, is_initial_list);
    }
    /// A changed object (or a resync, where `old` and `new` have the same resourceVersion).
    fn on_update(&self, old: Arc<K>, new: Arc<K>) {
        let _ = (old, new);
    }
    /// A deleted object: final state or tombstone.
    fn on_delete(&self, obj: Deleted<K>) {
        let _ = obj;
    }
}

type AddFn<K> = Box<dyn Fn(Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(Arc<K>, Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(Deleted<K>) + Send + Sync>;

/// A handler made of closures (client-go's `ResourceEventHandlerDetailedFuncs`):
///
/// ```
/// use sample_client_go::cache::EventHandlerFns;
/// use k8s_openapi::api::core::v1::Pod;
///
/// let handler = EventHandlerFns::<Pod>::new()
///     .on_add(|pod, _initial| println!("added {:?}", pod.metadata.name))
///     .on_delete(|gone| println!("deleted {}", gone.key()));
/// # let _ = handler;
/// ```
pub struct EventHandlerFns<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for EventHandlerFns<K> {
    fn default() -> Self {
        EventHandlerFns {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> EventHandlerFns<K> {
    /// A handler that ignores everything until closures are set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the add closure.
    pub fn on_add(mut self, f: impl Fn(Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }
    /// Sets the update closure.
    pub fn on_update(mut self, f: impl Fn(Arc<K>, Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }
    /// Sets the delete closure.
    pub fn on_delete(mut self, f: impl Fn(Deleted<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for EventHandlerFns<K> {
    fn on_add(&self, obj: Arc<K>, is_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_initial_list)
        }
    }
    fn on_update(&self, old: Arc<K>, new: Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }
    fn on_delete(&self, obj: Deleted<K>) {
        if let Some(f) = &self.delete {
            f(obj)
        }
    }
}

/// Passes on only the notifications about objects `filter` accepts (client-go's
/// `FilteringResourceEventHandler`). For an update both states are tested: both pass → update;
/// only the new one → add; only the old one → delete (as a [`Deleted::Final`] of the old state,
/// the last state this handler was shown); neither → nothing. So the inner handler sees a
/// consistent history of the filtered subset.
pub struct FilteringHandler<F, H> {
    filter: F,
    handler: H,
}

impl<F, H> FilteringHandler<F, H> {
    /// Wraps `handler` behind `filter`.
    pub fn new(filter: F, handler: H) -> Self {
        FilteringHandler { filter, handler }
    }
}

impl<K, F, H> ResourceEventHandler<K> for FilteringHandler<F, H>
where
    K: CacheObject,
    F: Fn(&K) -> bool + Send + Sync + 'static,
    H: ResourceEventHandler<K>,
{
    fn on_add(&self, obj: Arc<K>, is_initial_list: bool) {
        if (self.filter)(&obj) {
            self.handler.on_add(obj, is_initial_list);
        }
    }
    fn on_update(&self, old: Arc<K>, new: Arc<K>) {
        match ((self.filter)(&old), (self.filter)(&new)) {
            (true, true) => self.handler.on_update(old, new),
            (false, true) => self.handler.on_add(new, false),
            (true, false) => self.handler.on_delete(Deleted::Final(old)),
            (false, false) => {}
        }
    }
    fn on_delete(&self, obj: Deleted<K>) {
        if (self.filter)(obj.object()) {
            self.handler.on_delete(obj);
        }
    }
}

enum Notification<K> {
    Add(Arc<K>, bool),
    Update(Arc<K>, Arc<K>),
    Delete(Deleted<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add(o, i) => Notification::Add(Arc::clone(o), *i),
            Notification::Update(a, b) => Notification::Update(Arc::clone(a), Arc::clone(b)),
            Notification::Delete(d) => Notification::Delete(d.clone()),
        }
    }
}

/// Where a notification came from: what the trigger of an add it causes says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A watch event.
    Watch,
    /// A list (the first, or a relist).
    List,
    /// A periodic resync.
    Resync,
    /// The replay of the cache to a handler added late.
    Replay,
}

/// A notification on its way to one handler: what, from where, and (while someone traces)
/// when it reached the store and when the store held it. The times are shared and behind a
/// pointer: a handler's buffer holds one `Delivery` per notification waiting, and with no one
/// tracing they are `None`, eight bytes.
struct Delivery<K> {
    notification: Notification<K>,
    origin: Origin,
    times: Stamps,
}

/// When a notification reached the store and when the store held it (while someone traces).
type Stamps = Option<Arc<(Instant, Instant)>>;

impl<K> Clone for Delivery<K> {
    fn clone(&self) -> Self {
        Delivery {
            notification: self.notification.clone(),
            origin: self.origin,
            times: self.times.clone(),
        }
    }
}

/// `namespace/name` of `meta`, inline when short.
fn object_key(meta: &impl ObjectMetaAccess) -> SmallString {
    let name = meta.name().unwrap_or_default();
    match meta.namespace().filter(|ns| !ns.is_empty()) {
        Some(ns) => SmallString::joined(ns, '/', name),
        None => SmallString::from(name),
    }
}

/// The trigger an add made while `d`'s handler runs records (see the module doc, "Why, and
/// when"), and the handler function's name.
fn trigger_of<K: CacheObject>(d: &Delivery<K>) -> (Trigger, &'static str) {
    let event = |event: EventType, obj: &K| {
        let meta = obj.metadata();
        Trigger::Event {
            event,
            kind: K::KIND,
            object: object_key(meta),
            resource_version: meta.resource_version().unwrap_or_default().into(),
            traceparent: meta.annotation(TRACEPARENT_ANNOTATION).map(Into::into),
        }
    };
    match &d.notification {
        Notification::Add(o, initial) => {
            let ty = match d.origin {
                Origin::Watch => EventType::Added,
                Origin::Replay => EventType::InitialList,
                _ if *initial => EventType::InitialList,
                _ => EventType::Relist,
            };
            (event(ty, o), "on_add")
        }
        Notification::Update(old, new) => {
            let ty = match d.origin {
                Origin::Resync => EventType::Resync,
                _ if rv_of(old.as_ref()) == rv_of(new.as_ref()) => EventType::Resync,
                Origin::List => EventType::Relist,
                _ => EventType::Modified,
            };
            (event(ty, new), "on_update")
        }
        Notification::Delete(Deleted::Final(o)) => (event(EventType::Deleted, o), "on_delete"),
        Notification::Delete(Deleted::Tombstone { last_known, .. }) => {
            (event(EventType::Deleted, last_known), "on_delete")
        }
    }
}

struct Listener<K> {
    id: u64,
    tx: mpsc::UnboundedSender<Delivery<K>>,
    rx: Option<mpsc::UnboundedReceiver<Delivery<K>>>,
    handler: Arc<dyn ResourceEventHandler<K>>,
    requested_resync: Duration,
    resync_period: Duration,
    next_resync: Instant,
    syncing: bool,
    pending_initial: Arc<AtomicUsize>,
    task: Option<JoinHandle<()>>,
}

impl<K: CacheObject> Listener<K> {
    fn send(&self, n: Delivery<K>) {
        if matches!(n.notification, Notification::Add(_, true)) {
            self.pending_initial.fetch_add(1, Ordering::SeqCst);
        }
        // The receiver lives as long as the listener task, which only ends after the sender
        // is dropped; a send can fail only during shutdown, when nobody waits for it.
        let _ = self.tx.send(n);
    }

    fn spawn(&mut self, runtime: &tokio::runtime::Handle, name: &str) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        let handler = Arc::clone(&self.handler);
        let pending = Arc::clone(&self.pending_initial);
        let (id, name) = (self.id, name.to_owned());
        self.task = Some(runtime.spawn(async move {
            while let Some(d) = rx.recv().await {
                let initial = matches!(d.notification, Notification::Add(_, true));
                let (trigger, handler_fn) = trigger_of(&d);
                let current = Notifying {
                    trigger,
                    handler: handler_fn,
                    times: d.times.as_deref().map(|&(received, stored)| NotifyTimes {
                        received,
                        stored,
                        handled: Instant::now(),
                    }),
                };
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    notifying(current, || match d.notification {
                        Notification::Add(o, i) => handler.on_add(o, i),
                        Notification::Update(a, b) => handler.on_update(a, b),
                        Notification::Delete(d) => handler.on_delete(d),
                    })
                }));
                if result.is_err() {
                    error!(informer = %name, handler = id, "event handler panicked; continuing with the next notification");
                }
                if initial {
                    pending.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }));
    }
}

struct Processor<K> {
    listeners: Vec<Listener<K>>,
    started: bool,
    stopped: bool,
    runtime: Option<tokio::runtime::Handle>,
    resync_check_period: Duration,
}

impl<K: CacheObject> Processor<K> {
    fn distribute(&self, n: Notification<K>, origin: Origin, times: Option<(Instant, Instant)>) {
        let d = Delivery {
            notification: n,
            origin,
            times: times.map(Arc::new),
        };
        for l in &self.listeners {
            l.send(d.clone());
        }
    }

    fn distribute_update(
        &self,
        old: Arc<K>,
        new: Arc<K>,
        origin: Origin,
        times: Option<(Instant, Instant)>,
    ) {
        let times = times.map(Arc::new);
        let is_sync = rv_of(old.as_ref()) == rv_of(new.as_ref());
        for l in &self.listeners {
            if !is_sync || l.syncing {
                l.send(Delivery {
                    notification: Notification::Update(Arc::clone(&old), Arc::clone(&new)),
                    origin,
                    times: times.clone(),
                });
            }
        }
    }
}

fn effective_resync(requested: Duration, check: Duration) -> Duration {
    if requested.is_zero() || check.is_zero() {
        Duration::ZERO
    } else {
        requested.max(check)
    }
}

struct Core<K> {
    name: String,
    indexer: Indexer<K>,
    processor: Mutex<Processor<K>>,
    transform: RwLock<Option<TransformFn<K>>>,
    synced: AtomicBool,
    started: AtomicBool,
    default_resync: Duration,
    next_id: AtomicU64,
    tracer: Option<KeyTracer>,
}

impl<K: CacheObject> Core<K> {
    fn processor(&self) -> MutexGuard<'_, Processor<K>> {
        self.processor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The moment a notification reaches the store, while someone traces.
    fn stamp(&self) -> Option<Instant> {
        self.tracer
            .as_ref()
            .is_some_and(KeyTracer::is_active)
            .then(Instant::now)
    }

    /// While someone reads: a watch event that is the echo of a traced sync's write is an echo
    /// hop of that sync's key; any other is remembered a while, for a write whose answer has
    /// not come back yet.
    fn echo(&self, event: EventType, obj: &K, stored: Option<Instant>) {
        let (Some(tracer), Some(stored)) = (self.tracer.as_ref(), stored) else {
            return;
        };
        let meta = obj.metadata();
        let seen = SeenEvent {
            event: event.as_str(),
            kind: K::KIND,
            object: object_key(meta),
            resource_version: meta.resource_version().unwrap_or_default().into(),
            stored,
        };
        match tracer.take_echo(K::KIND, &seen.object, &seen.resource_version) {
            Some(write) => {
                let lag = millis(stored.saturating_duration_since(write.written));
                tracer.emit(echo_hop(&write.key, write.controller, &seen, lag));
            }
            None => tracer.saw(seen),
        }
    }
}

impl<K: CacheObject> ReflectorStore<K> for Arc<Core<K>> {
    fn prepare(&self, mut obj: K) -> Arc<K> {
        let transform = self
            .transform
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(t) = transform {
            t(&mut obj);
        }
        match self.indexer.get_for(&obj) {
            Some(cached) if !rv_of(&obj).is_empty() && rv_of(cached.as_ref()) == rv_of(&obj) => {
                cached
            }
            _ => Arc::new(obj),
        }
    }

    fn replace(&self, objs: Vec<Arc<K>>, _resource_version: &str) {
        let p = self.processor();
        let received = self.stamp();
        let initial = !self.synced.load(Ordering::SeqCst);
        let changes = self.indexer.replace(objs);
        let times = received.map(|r| (r, Instant::now()));
        for change in changes {
            match change {
                Change::Added(o) => {
                    p.distribute(Notification::Add(o, initial), Origin::List, times)
                }
                Change::Updated { old, new } => p.distribute_update(old, new, Origin::List, times),
                Change::Deleted { key, last_known } => p.distribute(
                    Notification::Delete(Deleted::Tombstone { key, last_known }),
                    Origin::List,
                    times,
                ),
            }
        }
        self.synced.store(true, Ordering::SeqCst);
    }

    fn add(&self, obj: Arc<K>) {
        let received = self.stamp();
        let p = self.processor();
        let old = self.indexer.insert(Arc::clone(&obj));
        let times = received.map(|r| (r, Instant::now()));
        self.echo(
            if old.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            },
            &obj,
            times.map(|(_, stored)| stored),
        );
        match old {
            Some(old) => p.distribute_update(old, obj, Origin::Watch, times),
            None => p.distribute(
                Notification::Add(obj, !self.synced.load(Ordering::SeqCst)),
                Origin::Watch,
                times,
            ),
        }
    }

    fn update(&self, obj: Arc<K>) {
        self.add(obj)
    }

    fn delete(&self, obj: Arc<K>) {
        let received = self.stamp();
        let p = self.processor();
        if self.indexer.remove(&key_of(obj.as_ref())).is_some() {
            let times = received.map(|r| (r, Instant::now()));
            self.echo(EventType::Deleted, &obj, times.map(|(_, stored)| stored));
            p.distribute(
                Notification::Delete(Deleted::Final(obj)),
                Origin::Watch,
                times,
            );
        }
    }

    fn cached(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get(key)
    }

    fn resync_period(&self) -> Option<Duration> {
        let check = self.processor().resync_check_period;
        (!check.is_zero()).then_some(check)
    }

    fn should_resync(&self) -> bool {
        let mut p = self.processor();
        let now = Instant::now();
        let mut any = false;
        for l in &mut p.listeners {
            l.syncing = !l.resync_period.is_zero() && now >= l.next_resync;
            if l.syncing {
                any = true;
                l.next_resync = now + l.resync_period;
            }
        }
        any
    }

    fn resync(&self) {
        let p = self.processor();
        let objs = self.indexer.list();
        let times = self.stamp().map(|t| Arc::new((t, t)));
        for l in p.listeners.iter().filter(|l| l.syncing) {
            for o in &objs {
                l.send(Delivery {
                    notification: Notification::Update(Arc::clone(o), Arc::clone(o)),
                    origin: Origin::Resync,
                    times: times.clone(),
                });
            }
        }
    }
}

/// Options of a [`SharedIndexInformer`].
#[derive(Clone, Debug, Default)]
pub struct InformerOptions {
    /// Resync period of handlers added with [`SharedIndexInformer::add_event_handler`]
    /// (zero = no resync), and the initial resync check period.
    pub default_resync: Duration,
    /// How the reflector lists and watches (selectors, paging, streaming lists, backoff).
    pub reflector: ReflectorConfig,
    /// The tracer whose readers this informer stamps notifications and finds write echoes for
    /// (see the module doc, "Why, and when"); `None`: none.
    pub key_tracer: Option<KeyTracer>,
}

/// A handle on a registered handler.
#[derive(Clone)]
pub struct HandlerRegistration {
    id: u64,
    synced: Arc<dyn Fn() -> bool + Send + Sync>,
    pending_initial: Arc<AtomicUsize>,
}

impl std::fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .finish()
    }
}

impl HandlerRegistration {
    /// True when the informer has synced and this handler has processed every initial-list
    /// add queued to it.
    pub fn has_synced(&self) -> bool {
        (self.synced)() && self.pending_initial.load(Ordering::SeqCst) == 0
    }
}

/// One list+watch, one cache, many handlers (see the module doc). Cloning gives another handle
/// on the same informer.
pub struct SharedIndexInformer<K: CacheObject> {
    core: Arc<Core<K>>,
    reflector: Arc<Reflector<K, BoxListerWatcher<K>, Arc<Core<K>>>>,
}

impl<K: CacheObject> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        SharedIndexInformer {
            core: Arc::clone(&self.core),
            reflector: Arc::clone(&self.reflector),
        }
    }
}

/// The default transform: drop `metadata.managedFields` and give back the spare room of the
/// metadata's lists ([`shrink_metadata_lists`]).
pub fn drop_managed_fields<K: CacheObject>(obj: &mut K) {
    obj.metadata_mut().trim_for_cache();
}

/// Gives back the spare capacity of the metadata's lists (`ownerReferences`, `finalizers`).
///
/// A JSON decoder does not know a list's length before its end, so a decoded `Vec` grows by
/// doubling from room for four: an object with one owner reference carries room for three
/// more, about 300 bytes. Nothing writes to a cached object, so a transform can shrink what it
/// keeps. (Decoding through a `serde_json::Value` first happened to size lists exactly, at the
/// price of a tree per event; at 10,000 Ats with their pods, dropping that tree without
/// shrinking raised the manager's peak RSS from 53 to 61 MiB.)
pub fn shrink_metadata_lists(
    meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) {
    if let Some(v) = meta.owner_references.as_mut() {
        v.shrink_to_fit();
    }
    if let Some(v) = meta.finalizers.as_mut() {
        v.shrink_to_fit();
    }
}

impl<K: CacheObject> SharedIndexInformer<K> {
    /// An informer over `lw`. Nothing happens until [`Self::run`].
    pub fn new(lw: impl ListerWatcher<K>, options: InformerOptions) -> Self {
        let mut reflector_config = options.reflector;
        if reflector_config.name == ReflectorConfig::default().name {
            reflector_config.name = K::URL_PATH_SEGMENT.to_owned();
        }
        let core = Arc::new(Core {
            name: reflector_config.name.clone(),
            indexer: Indexer::new(),
            processor: Mutex::new(Processor {
                listeners: Vec::new(),
                started: false,
                stopped: false,
                runtime: None,
                resync_check_period: options.default_resync,
            }),
            transform: RwLock::new(Some(Arc::new(drop_managed_fields::<K>))),
            synced: AtomicBool::new(false),
            started: AtomicBool::new(false),
            default_resync: options.default_resync,
            next_id: AtomicU64::new(1),
            tracer: options.key_tracer,
        });
        let reflector = Arc::new(Reflector::new(
            BoxListerWatcher::new(lw),
            Arc::clone(&core),
            reflector_config,
        ));
        SharedIndexInformer { core, reflector }
    }

    /// Registers a handler with the informer's default resync period.
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<HandlerRegistration, InformerError> {
        self.add_event_handler_with_resync_period(handler, self.core.default_resync)
    }

    /// Registers a handler with its own resync period (zero = never; at least 1 s otherwise).
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler<K>,
        resync: Duration,
    ) -> Result<HandlerRegistration, InformerError> {
        let mut p = self.core.processor();
        if p.stopped {
            return Err(InformerError::Stopped);
        }
        let mut requested = resync;
        if !requested.is_zero() && requested < MINIMUM_RESYNC_PERIOD {
            warn!(informer = %self.core.name, requested_ms = requested.as_millis() as u64,
                "resync period too small; raised to the 1 s minimum");
            requested = MINIMUM_RESYNC_PERIOD;
        }
        if !requested.is_zero() && requested < p.resync_check_period {
            if p.started {
                warn!(informer = %self.core.name, "resync period smaller than the informer's check period; raised to it");
                requested = p.resync_check_period;
            } else {
                p.resync_check_period = requested;
                let check = requested;
                for l in &mut p.listeners {
                    l.resync_period = effective_resync(l.requested_resync, check);
                }
            }
        }
        let period = effective_resync(requested, p.resync_check_period);
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.core.next_id.fetch_add(1, Ordering::SeqCst);
        let pending_initial = Arc::new(AtomicUsize::new(0));
        let mut listener = Listener {
            id,
            tx,
            rx: Some(rx),
            handler: Arc::new(handler),
            requested_resync: requested,
            resync_period: period,
            next_resync: Instant::now() + period,
            syncing: false,
            pending_initial: Arc::clone(&pending_initial),
            task: None,
        };
        if p.started {
            if let Some(rt) = p.runtime.clone() {
                listener.spawn(&rt, &self.core.name);
            }
            // Holding the processor lock blocks deltas: the replay and live events cannot
            // interleave.
            for obj in self.core.indexer.list() {
                listener.send(Delivery {
                    notification: Notification::Add(obj, true),
                    origin: Origin::Replay,
                    times: None,
                });
            }
        }
        p.listeners.push(listener);
        let core = Arc::clone(&self.core);
        Ok(HandlerRegistration {
            id,
            synced: Arc::new(move || core.synced.load(Ordering::SeqCst)),
            pending_initial,
        })
    }

    /// Removes a handler; it finishes the notifications already queued to it, then stops.
    pub async fn remove_event_handler(&self, registration: &HandlerRegistration) {
        let task = {
            let mut p = self.core.processor();
            match p.listeners.iter().position(|l| l.id == registration.id) {
                Some(i) => p.listeners.remove(i).task,
                None => None,
            }
        };
        if let Some(task) = task
            && let Err(e) = task.await
        {
            warn!(informer = %self.core.name, error = %e, "handler task ended abnormally");
        }
    }

    /// Replaces the transform (before `run` only). `None` stores objects unchanged.
    pub fn set_transform(
        &self,
        transform: Option<impl Fn(&mut K) + Send + Sync + 'static>,
    ) -> Result<(), InformerError> {
        if self.core.started.load(Ordering::SeqCst) {
            return Err(InformerError::AlreadyStarted);
        }
        *self
            .core
            .transform
            .write()
            .unwrap_or_else(|e| e.into_inner()) = transform.map(|t| Arc::new(t) as TransformFn<K>);
        Ok(())
    }

    /// Adds an index to the cache (refused once the informer stopped).
    pub fn add_indexer(
        &self,
        name: impl Into<String>,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Result<(), InformerError> {
        if self.core.processor().stopped {
            return Err(InformerError::Stopped);
        }
        Ok(self.core.indexer.add_indexer(name, f)?)
    }

    /// True once the first list is in the cache (a latch).
    pub fn has_synced(&self) -> bool {
        self.core.synced.load(Ordering::SeqCst)
    }

    /// Waits until [`Self::has_synced`] or `deadline`, checking every 100 ms; returns whether
    /// it synced.
    pub async fn wait_for_cache_sync(&self, deadline: Instant) -> bool {
        wait_until(deadline, || self.has_synced()).await
    }

    /// A lister over the cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.core.indexer.clone())
    }

    /// The cache itself.
    pub fn indexer(&self) -> Indexer<K> {
        self.core.indexer.clone()
    }

    /// The reflector's counters and last synced resourceVersion.
    pub fn status(&self) -> ReflectorStatus {
        self.reflector.status()
    }

    /// The resourceVersion the cache reflects.
    pub fn last_synced_resource_version(&self) -> String {
        self.reflector.last_synced_resource_version()
    }

    /// Makes the reflector report 403s, relists and watch progress to `health` (see
    /// [`super::reflector`], "Health").
    pub fn set_watch_health(&self, health: Arc<dyn super::WatchObserver>) {
        self.reflector.set_watch_health(health);
    }

    /// Calls `handler` once for each object (and resourceVersion of it) that does not decode
    /// and is left out of this cache ([`super::reflector`], "Objects that do not decode").
    pub fn set_undecodable_handler(&self, handler: super::reflector::UndecodableHandler) {
        self.reflector.set_undecodable_handler(handler);
    }

    /// How many objects are left out of this cache now because they do not decode.
    pub fn undecodable_count(&self) -> usize {
        self.reflector.undecodable_count()
    }

    /// True once `run` has been called.
    pub fn is_started(&self) -> bool {
        self.core.started.load(Ordering::SeqCst)
    }

    /// True once `run` has returned.
    pub fn is_stopped(&self) -> bool {
        self.core.processor().stopped
    }

    /// Runs the informer until `cancel` fires: starts the handler tasks, runs the reflector,
    /// then closes every handler queue and waits for the handlers to drain. Call once.
    pub async fn run(&self, cancel: CancellationToken) {
        if self.core.started.swap(true, Ordering::SeqCst) {
            warn!(informer = %self.core.name, "informer already started; ignoring a second run");
            return;
        }
        {
            let mut p = self.core.processor();
            let rt = tokio::runtime::Handle::current();
            p.started = true;
            p.runtime = Some(rt.clone());
            for l in &mut p.listeners {
                l.spawn(&rt, &self.core.name);
            }
        }
        debug!(informer = %self.core.name, "informer started");
        self.reflector.run(cancel).await;
        let tasks: Vec<JoinHandle<()>> = {
            let mut p = self.core.processor();
            p.stopped = true;
            p.listeners.drain(..).filter_map(|l| l.task).collect()
        };
        for t in tasks {
            if let Err(e) = t.await {
                warn!(informer = %self.core.name, error = %e, "handler task ended abnormally");
            }
        }
        debug!(informer = %self.core.name, "informer stopped");
    }
}

/// Anything whose sync state can be waited for: informers and handler registrations.
pub trait HasSynced: Send + Sync {
    /// True once synced (a latch).
    fn has_synced(&self) -> bool;
}

impl<K: CacheObject> HasSynced for SharedIndexInformer<K> {
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
}

impl HasSynced for HandlerRegistration {
    fn has_synced(&self) -> bool {
        HandlerRegistration::has_synced(self)
    }
}

/// Waits until every item has synced (→ true) or `deadline` passes (→ false), checking now and
/// every 100 ms (client-go's `cache.WaitForCacheSync`). A controller passes its handler
/// registrations so that it starts workers only once its handlers have seen the initial list.
pub async fn wait_for_cache_sync(deadline: Instant, items: &[&dyn HasSynced]) -> bool {
    wait_until(deadline, || items.iter().all(|i| i.has_synced())).await
}

/// Checks `done` now and then every 100 ms until it is true (→ true) or `deadline` passes
/// (→ false).
pub async fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep((deadline - now).min(SYNC_POLL_PERIOD)).await;
    }
}
