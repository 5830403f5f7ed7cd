//! # A controller in a few lines: `For`, `Owns`, and a reconcile function
//!
//! controller-runtime's most used entry point is
//!
//! ```go
//! ctrl.NewControllerManagedBy(mgr).For(&v1.Note{}).Owns(&corev1.ConfigMap{}).Complete(r)
//! ```
//!
//! and this module is that builder. [`Builder::new`] names the controller and its kind `K` (the
//! `For`); [`Builder::owns`] adds a kind it creates (the `Owns`); [`Builder::complete`] takes
//! the [`Reconciler`] and returns the [`Registration`] the manager runs
//! ([`Manager::register`](crate::manager::Manager::register)). What the builder wires is what
//! each hand-written operator of `sample-operators` wires itself:
//!
//! ```text
//! informer of K ── add / update ──────────────▶ queue: key of the K
//! informer of O ── add / update / delete ─────▶ queue: key of the K that controls the O
//!                                                       (its controller ownerReference)
//! worker ── key ──▶ drain step (a shard releases what the sharder moves)
//!                ──▶ the K from the cache (deleted: nothing to do, the garbage collector
//!                     removes what it owned) ──▶ reconcile(k, cx)
//!                     Err → retried with backoff, and a Warning event ReconciliationFailed
//!                     Ok(Some(d)) → looked at again after d;  Ok(None) → done
//! ```
//!
//! The reconcile function gets the object and a [`Context`]: the client to write with, the
//! listers of `K` and of every owned kind (reads from the cache, never the network), an event
//! recorder named after the controller and the clock. The controller gets the same worker loop,
//! metrics (`controller_runtime_reconcile_*`, `workqueue_*{name=<controller>}`), readiness
//! (`informer:<plural>` lines), leader election and graceful shutdown as every operator.
//! For a custom resource, chain [`Registration::with_crd`] so a missing CRD is one clear error
//! at start; to run it as a shard, [`Registration::with_sharding`].
//!
//! `examples/configmap-controller` in the repository is a complete controller written this way.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sample_client_go::cache::{
    CacheObject, ClientSource, EventHandlerFns, HandlerRegistration, Lister, SharedInformerFactory,
    key_of,
};
use sample_client_go::client::Client;
use sample_client_go::record::EventRecorder;
use sample_client_go::workqueue::RateLimitingQueue;
use tokio_util::sync::CancellationToken;

use crate::controller::{
    Clock, Controller, DEFAULT_SYNC_TIMEOUT, QueueKey, RunError, SyncHandler, SyncStats, Workers,
    object_to_sync, record_reconcile_error, run_controller,
};
use crate::expectations::Expectations;
use crate::manager::{BuildContext, Registration};
use crate::ownership::owner_handlers;

/// What a [`Builder`]'s controller does with one object: controller-runtime's `Reconciler`.
pub trait Reconciler<K: CacheObject>: Send + Sync + 'static {
    /// What a failed reconcile reports (logged with the key, and recorded as a Warning event).
    type Error: Display + Send;

    /// Brings the world in line with `obj` (the cached object, never stale by more than the
    /// watch's delay). `Ok(None)`: done until the next event. `Ok(Some(d))`: look again after
    /// `d`. `Err`: retry with backoff (5 ms doubling to 1000 s).
    fn reconcile(
        &self,
        obj: Arc<K>,
        cx: &Context<K>,
    ) -> impl Future<Output = Result<Option<Duration>, Self::Error>> + Send;

    /// Whether `err` is a 409 Conflict (an expected race, logged at INFO, not ERROR). The
    /// default says no.
    fn is_conflict(_err: &Self::Error) -> bool {
        false
    }
}

/// What a reconcile works with.
pub struct Context<K: CacheObject> {
    /// The manager's client (write through it; read from the listers).
    pub client: Client,
    /// The cache of `K`.
    pub lister: Lister<K>,
    /// Records events with the controller's name as their source.
    pub recorder: EventRecorder,
    /// Wall-clock time (virtual in tests).
    pub clock: Clock,
    owned: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl<K: CacheObject> Context<K> {
    /// The cache of the owned kind `O` ([`Builder::owns`]); `None` for a kind not owned.
    pub fn owned<O: CacheObject>(&self) -> Option<&Lister<O>> {
        self.owned
            .get(&TypeId::of::<O>())
            .and_then(|l| l.downcast_ref::<Lister<O>>())
    }
}

type OwnFn = Box<
    dyn Fn(
            &SharedInformerFactory<ClientSource>,
            &RateLimitingQueue<QueueKey>,
        ) -> Result<(HandlerRegistration, TypeId, Box<dyn Any + Send + Sync>), RunError>
        + Send
        + Sync,
>;

/// `ctrl.NewControllerManagedBy(mgr).Named(name).For(&K{})`: see the module documentation.
pub struct Builder<K: CacheObject> {
    name: &'static str,
    owns: Vec<OwnFn>,
    sync_timeout: Duration,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: CacheObject> Builder<K> {
    /// A controller named `name` (its `--controllers` name, log field, metrics label, event
    /// source and queue name) for objects of kind `K`.
    pub fn new(name: &'static str) -> Self {
        Builder {
            name,
            owns: Vec::new(),
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            _kind: std::marker::PhantomData,
        }
    }

    /// The controller creates objects of kind `O` and sets itself as their controller owner
    /// ([`crate::ownership::controller_reference`]): any change to one enqueues its owner, so a
    /// ConfigMap edited or deleted by hand is put back.
    pub fn owns<O: CacheObject>(mut self) -> Self {
        let name = self.name;
        self.owns.push(Box::new(move |factory, queue| {
            let informer = factory.informer::<O>();
            let registration = informer
                .add_event_handler(owner_handlers::<K, O>(queue, None))
                .map_err(|source| RunError::Informer {
                    controller: name,
                    source,
                })?;
            let lister: Box<dyn Any + Send + Sync> = Box::new(informer.lister());
            Ok((registration, TypeId::of::<O>(), lister))
        }));
        self
    }

    /// The deadline of one reconcile ([`DEFAULT_SYNC_TIMEOUT`] unless set).
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// controller-runtime's `Complete(r)`: the [`Registration`] that builds this controller
    /// from the manager's shared machinery.
    pub fn complete<R: Reconciler<K>>(self, reconciler: R) -> Registration {
        let reconciler = Arc::new(reconciler);
        let Builder {
            name,
            owns,
            sync_timeout,
            ..
        } = self;
        Registration::new(name, move |cx: &BuildContext<'_>| {
            let built = build::<K, R>(cx, name, &owns, Arc::clone(&reconciler), sync_timeout)?;
            Ok(built as Arc<dyn Controller>)
        })
    }
}

fn build<K: CacheObject, R: Reconciler<K>>(
    cx: &BuildContext<'_>,
    name: &'static str,
    owns: &[OwnFn],
    reconciler: Arc<R>,
    sync_timeout: Duration,
) -> Result<Arc<Built<K, R>>, RunError> {
    let queue = cx.named_queue(name);
    let informer = cx.factory.informer::<K>();
    let (q1, q2) = (queue.clone(), queue.clone());
    let handler = EventHandlerFns::<K>::new()
        .on_add(move |obj, _initial| q1.add(key_of(obj.as_ref()).into()))
        .on_update(move |_old, new| q2.add(key_of(new.as_ref()).into()));
    let mut synced =
        vec![
            informer
                .add_event_handler(handler)
                .map_err(|source| RunError::Informer {
                    controller: name,
                    source,
                })?,
        ];
    let mut owned = HashMap::new();
    for own in owns {
        let (registration, type_id, lister) = own(cx.factory, &queue)?;
        synced.push(registration);
        owned.insert(type_id, lister);
    }
    let lister = informer.lister();
    let expectations = Arc::new(Expectations::default());
    let workers = Workers::new(queue, cx.stats(), synced)
        .release_drained(&lister, cx.client, Some(Arc::clone(&expectations)))
        .replay_from(&lister);
    Ok(Arc::new(Built {
        name,
        reconciler,
        cx: Context {
            client: cx.client.clone(),
            lister,
            recorder: cx.broadcaster.new_recorder(name),
            clock: cx.clock,
            owned,
        },
        workers,
        expectations,
        sync_timeout,
    }))
}

/// A controller made by a [`Builder`].
struct Built<K: CacheObject, R> {
    name: &'static str,
    reconciler: Arc<R>,
    cx: Context<K>,
    workers: Workers,
    expectations: Arc<Expectations>,
    sync_timeout: Duration,
}

impl<K: CacheObject, R: Reconciler<K>> SyncHandler for Built<K, R> {
    type Error = R::Error;

    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, R::Error> {
        let Some(obj) = object_to_sync(&self.cx.lister, &self.expectations, key) else {
            return Ok(None);
        };
        self.reconciler.reconcile(obj, &self.cx).await
    }

    fn is_conflict(err: &R::Error) -> bool {
        R::is_conflict(err)
    }

    fn on_sync_error(&self, key: &str, message: &str) {
        record_reconcile_error(&self.cx.lister, &self.cx.recorder, key, message);
    }
}

impl<K: CacheObject, R: Reconciler<K>> Controller for Built<K, R> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn has_synced(&self) -> bool {
        self.workers.has_synced()
    }

    fn run(
        self: Arc<Self>,
        workers: usize,
        stop: CancellationToken,
    ) -> futures_util::future::BoxFuture<'static, Result<(), String>> {
        let (name, timeout) = (self.name, self.sync_timeout);
        Box::pin(async move {
            run_controller(name, self, |c| &c.workers, workers, timeout, stop)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn shut_down_queue(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let queue = self.workers.queue().clone();
        Box::pin(async move { queue.shut_down_with_drain().await })
    }

    fn stats(&self) -> Arc<SyncStats> {
        Arc::clone(self.workers.stats())
    }

    fn queue(&self) -> Option<&RateLimitingQueue<QueueKey>> {
        Some(self.workers.queue())
    }

    fn hold_until_started(&self) {
        self.workers.hold_until_started();
    }
}
