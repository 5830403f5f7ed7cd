//! What an operator writes and what it hands over to the shared worker loop: the
//! [`SyncHandler`] contract, the [`Operator`] trait with its [`Workers`], the first step of every
//! `sync_handler` ([`object_to_sync`]), and [`Controller`], the face the manager holds.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::drain_gate::{DrainGate, ListerDrain};
use super::stats::SyncStats;
use crate::expectations::Expectations;
use sample_client_go::cache::{
    CacheObject, HandlerRegistration, InformerError, Lister, SmallString, key_of,
};
use sample_client_go::client::Client;
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;

/// A work queue's key: `namespace/name` (or `name`), as [`sample_client_go::cache::key_of`] makes it.
///
/// A [`SmallString`](sample_client_go::cache::SmallString): a key of up to 22 bytes (`default/at-1234`)
/// is kept inline, where a `String` took an allocation, and the queue holds each queued key
/// twice (its FIFO and its dirty/processing map). A burst of 10,000 Ats queues all of them at
/// once.
pub type QueueKey = SmallString;

/// The default per-sync deadline: far above any healthy sync (a few API calls), far below
/// "stuck for ever".
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// A controller's reconcile function for one key. `Ok(None)`: done until the next event.
/// `Ok(Some(d))`: look again after `d` (a time-driven requeue, not a failure). `Err`: retry
/// with backoff.
pub trait SyncHandler: Send + Sync + 'static {
    /// What a failed sync reports (logged with the key).
    type Error: Display + Send;

    /// Reconciles the object named by `key` (`namespace/name`).
    fn sync_handler(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Duration>, Self::Error>> + Send;

    /// Whether `err` is an optimistic-concurrency conflict (HTTP 409 on a write based on a
    /// cached copy that was already out of date). Such a sync is retried with backoff like any
    /// failure, but it is an expected race that heals itself once the informer catches up, so
    /// the worker logs it at INFO rather than ERROR. The default says no.
    fn is_conflict(_err: &Self::Error) -> bool {
        false
    }

    /// Called after `sync_handler(key)` returned an error that is not a conflict, with the
    /// error's message: records a Warning event `ReconciliationFailed` on the object, so `kubectl
    /// describe` and `kubectl get events` say why it is not converging (the operators' answer
    /// to "it just sits there"). Every operator implements it with
    /// [`record_reconcile_error`]; its recorder's correlator folds the repeats of a key that
    /// keeps failing into one event with a count and rate-limits them (client-go's spam
    /// filter: a burst of 25, then one per 5 minutes per object), so a hot failure loop does
    /// not flood the API server with events. The default records nothing.
    fn on_sync_error(&self, _key: &str, _message: &str) {}
}

/// The reason of the Warning event recorded when a sync fails: `ReconciliationFailed`, the
/// reason the operator guide's RedisCluster operator records (`r.Recorder.Event(obj,
/// corev1.EventTypeWarning, "ReconciliationFailed", err.Error())`), so that guide's
/// `kubectl describe` shows the same thing with every operator of this project.
pub const REASON_RECONCILIATION_FAILED: &str = "ReconciliationFailed";

/// What [`SyncHandler::on_sync_error`] does in every operator: looks the object up in the
/// cache by `key` and records a Warning `ReconciliationFailed` event with `message` on it. Nothing
/// when the object is gone (a failed sync of a deleted object has no one to tell).
pub fn record_reconcile_error<K: CacheObject>(
    lister: &Lister<K>,
    recorder: &EventRecorder,
    key: &str,
    message: &str,
) {
    if let Some(obj) = lister.get_by_key(key) {
        recorder.event(
            obj.as_ref(),
            EventType::Warning,
            REASON_RECONCILIATION_FAILED,
            message,
        );
    }
}

/// What the manager needs from a running controller, whatever its kind; the manager holds
/// them as `Arc<dyn Controller>`. Every [`Operator`] implements it through the blanket `impl`
/// below, so an operator never writes it by hand. (It is separate from [`Operator`] because a
/// trait with an associated error type and `async fn`s cannot be a `dyn` object: this one
/// boxes `run`'s future and turns its error into a string.)
pub trait Controller: Send + Sync + 'static {
    /// The name used by `--controllers` and in logs.
    fn name(&self) -> &'static str;
    /// True once the controller's informers have delivered their initial lists.
    fn has_synced(&self) -> bool;
    /// Waits for the caches, then runs `workers` workers until `stop` is cancelled; returns
    /// when every worker has finished its current item.
    fn run(
        self: Arc<Self>,
        workers: usize,
        stop: CancellationToken,
    ) -> BoxFuture<'static, Result<(), String>>;
    /// Shuts the controller's queue down and waits for items still being processed.
    fn shut_down_queue(&self) -> BoxFuture<'static, ()>;
    /// The worker loop's counters.
    fn stats(&self) -> Arc<SyncStats>;
    /// The controller's work queue, for counts (`/machinery/counts`); `None` when it has none
    /// to show.
    fn queue(&self) -> Option<&RateLimitingQueue<QueueKey>> {
        None
    }
    /// Keeps no keys until the workers start ([`Workers::hold_until_started`]); the manager
    /// calls it on a replica that may wait for a Lease.
    fn hold_until_started(&self) {}
}

/// What the shared [`run`](super::run) drives for one controller: the queue its event handlers fill, the
/// counters of its worker loop, and the registrations of its event handlers, whose
/// `has_synced` gate the start. These are sample-controller's `workqueue` field and the
/// `foosSynced`, `deploymentsSynced` funcs its `Run` passes to `cache.WaitForCacheSync`.
///
/// An operator's constructor builds one from the queue it cloned into its handlers and the
/// registrations those handlers returned, and keeps it in its struct.
pub struct Workers {
    queue: RateLimitingQueue<QueueKey>,
    stats: Arc<SyncStats>,
    synced: Vec<HandlerRegistration>,
    pub(super) drain: Option<Arc<dyn DrainGate>>,
    /// The keys of every cached object of the controller's kind ([`Workers::replay_from`]).
    pub(super) replay: Option<ReplayKeys>,
}

/// Lists the keys of a controller's cached objects.
pub(super) type ReplayKeys = Arc<dyn Fn() -> Vec<QueueKey> + Send + Sync>;

impl Workers {
    /// `queue`: the controller's queue. `stats`: its counters. `synced`: one registration per
    /// event handler the controller added to an informer.
    pub fn new(
        queue: RateLimitingQueue<QueueKey>,
        stats: SyncStats,
        synced: Vec<HandlerRegistration>,
    ) -> Self {
        Workers {
            queue,
            stats: Arc::new(stats),
            synced,
            drain: None,
            replay: None,
        }
    }

    /// What the controller enqueues when its workers start after its queue was held
    /// ([`RateLimitingQueue::hold`]): every object of `lister`, its own kind, once. The
    /// manager holds the queues of a replica that may have to wait for a Lease (leader
    /// election, sharding), so a standby keeps warm caches and empty queues instead of a key
    /// per object changed while it waited, deleted ones included, which would grow without
    /// bound until it leads. This is how controller-runtime starts a controller: its sources
    /// are attached when it starts, under leadership, and the informer replays what it holds
    /// as adds. Events of owned objects need no replay: their owners are among the objects
    /// enqueued.
    pub fn replay_from<K: CacheObject>(mut self, lister: &Lister<K>) -> Self {
        let lister = lister.clone();
        self.replay = Some(Arc::new(move || {
            lister
                .list(&Default::default())
                .iter()
                .map(|o| QueueKey::from(key_of(o.as_ref()).as_str()))
                .collect()
        }));
        self
    }

    /// Before each sync, releases the object its key names to the ring's sharder when the
    /// sharder is draining it from this shard ([`crate::sharding::drain`]), instead of syncing
    /// it: the sync is wrapped, so no operator writes this step. `lister` is the controller's
    /// cache of its own kind; `expectations`, when given, are forgotten for a released key.
    /// In leader mode no object carries a drain label and this costs one label scan per sync.
    pub fn release_drained<K: CacheObject>(
        mut self,
        lister: &Lister<K>,
        client: &Client,
        expectations: Option<Arc<Expectations>>,
    ) -> Self {
        self.drain = Some(Arc::new(ListerDrain {
            lister: lister.clone(),
            client: client.clone(),
            expectations,
        }));
        self
    }

    /// Holds the queue ([`RateLimitingQueue::hold`]) until the workers start, if the controller
    /// can replay its objects then ([`Workers::replay_from`]); otherwise does nothing, since a
    /// dropped add could not be recovered.
    pub fn hold_until_started(&self) {
        if self.replay.is_some() {
            self.queue.hold();
        }
    }

    /// The queue the controller's event handlers fill and its workers drain.
    pub fn queue(&self) -> &RateLimitingQueue<QueueKey> {
        &self.queue
    }

    /// The worker loop's counters (and, when built with metrics, its Prometheus families).
    pub fn stats(&self) -> &Arc<SyncStats> {
        &self.stats
    }

    /// True once every handler has processed its informer's initial list (client-go:
    /// `WaitForCacheSync` over the controller's `HasSynced` funcs). Until then a lister may be
    /// missing objects that exist, and "not in the cache" would be read as "create it".
    pub fn has_synced(&self) -> bool {
        self.synced.iter().all(HandlerRegistration::has_synced)
    }
}

/// What one operator supplies beyond its [`SyncHandler`]: its name and its [`Workers`].
/// Everything else (waiting for the caches, starting the workers, the manager's
/// [`Controller`] interface) is written once, in [`run`](super::run) and the blanket
/// `impl<O: Operator> Controller for O`.
pub trait Operator: SyncHandler {
    /// The controller's name: what `--controllers` selects, the `controller` field of its log
    /// lines and the `controller` label of its `controller_sync_*` metrics.
    const NAME: &'static str;

    /// The controller's queue, counters and handler registrations.
    fn workers(&self) -> &Workers;

    /// The deadline of one `sync_handler` call; [`DEFAULT_SYNC_TIMEOUT`] unless overridden.
    fn sync_timeout(&self) -> Duration {
        DEFAULT_SYNC_TIMEOUT
    }
}

/// Step 1 of every operator's `sync_handler`, written once: the object its key names, from the
/// operator's cache; `None` when it is gone (deleted since its key was queued: what it owns goes
/// with it, through the garbage collector), and then the key's [`Expectations`] are forgotten.
/// (An object the sharder drains from this shard never reaches `sync_handler`: see
/// [`Workers::release_drained`].)
///
/// The book's controllers start the same way (`lister.Get`, then `IsNotFound` → "no longer
/// exists", return nil).
pub fn object_to_sync<K: CacheObject>(
    lister: &Lister<K>,
    expectations: &Expectations,
    key: &str,
) -> Option<Arc<K>> {
    let obj = lister.get_by_key(key);
    if obj.is_none() {
        tracing::debug!(key, kind = K::KIND, "object in work queue no longer exists");
        expectations.forget(key);
    }
    obj
}

/// Why a controller could not be built or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Registering an event handler failed (the informer was already stopped).
    #[error("registering the {controller} controller's event handlers: {source}")]
    Informer {
        /// [`Operator::NAME`] of the controller being built.
        controller: &'static str,
        #[source]
        source: InformerError,
    },
    /// Shut down before the caches synced (client-go: "failed to wait for caches to sync").
    #[error("failed to wait for caches to sync")]
    CacheSync,
}

impl RunError {
    /// For `map_err` in an operator's constructor:
    /// `informer.add_event_handler(h).map_err(RunError::informer::<Self>)?`.
    pub fn informer<O: Operator>(source: InformerError) -> RunError {
        RunError::Informer {
            controller: O::NAME,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn object_to_sync_hands_over_a_cached_object_and_forgets_a_gone_one() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        // Never contacted: nothing here is draining, so nothing is released.
        let uri: http::Uri = "http://127.0.0.1:9".parse().unwrap();
        let client = Client::new(sample_client_go::client::Config::new(uri)).unwrap();
        let indexer = sample_client_go::cache::Indexer::new();
        indexer.insert(Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("here".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }));
        indexer.insert(draining());
        let lister = Lister::new(indexer);
        let expectations = Expectations::default();
        expectations.expect_creations("ns/here", 1);
        expectations.expect_creations("ns/gone", 1);

        let here = object_to_sync(&lister, &expectations, "ns/here");
        let here = here.expect("the cached object");
        assert_eq!(here.metadata.name.as_deref(), Some("here"));
        assert!(!expectations.satisfied("ns/here"), "kept for the sync");

        let gone = object_to_sync(&lister, &expectations, "ns/gone");
        assert!(gone.is_none());
        assert!(
            expectations.satisfied("ns/gone"),
            "forgotten with the object"
        );

        // The drain step in front of every sync: only an object carrying a drain label is
        // released instead of synced.
        let workers = Workers::new(
            RateLimitingQueue::with_default_controller_rate_limiter(),
            SyncStats::default(),
            vec![],
        )
        .release_drained(&lister, &client, None);
        let gate = workers.drain.as_ref().expect("a drain gate");
        assert!(gate.release("ns/here").is_none(), "not draining: synced");
        assert!(gate.release("ns/gone").is_none(), "not cached: synced");
        assert!(gate.release("ns/leaving").is_some(), "draining: released");
    }

    fn draining() -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("leaving".into()),
                namespace: Some("ns".into()),
                resource_version: Some("7".into()),
                labels: Some(
                    [(
                        "drain.shard.sample-controller.dev/r".to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
    }
}
