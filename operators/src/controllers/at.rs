//! # The At controller (cnat's `controller.go`, with its bugs fixed)
//!
//! An [`At`] (`v1`, the storage version: see [`crate::apis::at`]) asks for one thing: run
//! `spec.run.command` once, at `spec.schedule`, in `spec.run.image`, stopped after
//! `spec.run.activeDeadlineSeconds`, its pod deleted `spec.run.ttlSecondsAfterFinished` after
//! the At went `DONE`. This file reads
//! top to bottom like the book's `controller.go`: the [`AtController`] struct, its constructor
//! that wires the shared informers to event handlers, what it hands to the shared `Run`
//! ([`sample_controller_runtime::controller::run`], through its [`Operator`] impl), `sync_handler`, and then the decision
//! itself.
//!
//! ## One At, from `kubectl apply` to `DONE`
//!
//! ```text
//! kubectl apply at.yaml ─▶ API server ─watch─▶ At informer ─on_add─▶ queue.add("ns/name")
//!                                                                       │
//!  worker: sync_handler("ns/name")  ◀──────────────────────────────────┘
//!    at  = at_lister.get("ns/name")                 (the cache, never a GET)
//!    pod = pod_lister.get("ns/name-pod")            (+ expectations: "created, not seen yet")
//!    plan(at, pod, now) ─▶ PENDING, not due: write PENDING, Ok(Some(due - now)) ─▶ forget, add_after
//!                                                        ... the timer fires at the due time
//!                       ─▶ due: write RUNNING (startTime, podName), event Started, then create the pod
//!  pod informer ─on_add/on_update─▶ queue.add(owner At's key)   (controller ownerReference)
//!    plan(at RUNNING, pod pending/running, now) ─▶ nothing new (or the pod's phase in the message)
//!    plan(at, pod Succeeded/Failed, now) ─▶ write DONE (result, exitCode, message), event
//!                                           (+ Ok(Some(ttl)) when ttlSecondsAfterFinished is set)
//!    plan(at DONE, pod finished, now ≥ completionTime + ttl) ─▶ delete the pod, event PodDeleted
//! ```
//!
//! ## The `v1` run fields
//!
//! * `spec.run.image` is the container's image (default [`crate::apis::at::DEFAULT_IMAGE`]);
//! * `spec.run.activeDeadlineSeconds` is copied to the pod's `spec.activeDeadlineSeconds`, so the
//!   kubelet enforces it: it kills the containers and ends the pod `Failed` with `status.reason:
//!   DeadlineExceeded` (message `Pod was active on the node longer than the specified deadline`,
//!   `pkg/kubelet/active_deadline.go`). Such a pod ends the At `DONE` with result
//!   `DeadlineExceeded`, a Warning `DeadlineExceeded` event and `Ready=False` with that reason;
//! * `spec.run.ttlSecondsAfterFinished`: when the At goes `DONE`, the sync asks to be called
//!   again after the TTL (`add_after`, like the TTL-after-finished controller of Jobs); that
//!   sync deletes the finished pod (only ours, with a UID precondition) and records a Normal
//!   `PodDeleted` event. The At stays `DONE` with its status: it is the record of what ran, and
//!   the pod's deletion does not make it run again. Without a TTL the pod is kept (as before).
//!
//! The decision is a pure function, [`plan`]: given the At, what the pod lister says about its
//! pod ([`PodState`]) and the current time, it returns a [`Plan`]: the pod to create, the
//! status to write (only when it changed), the events to record, and when to look again.
//! Keeping the decision pure makes every branch of the state machine testable without a
//! server, and keeps `sync_handler` a short list of side effects, in the book's order: write the
//! status, then create the pod. A crash in between leaves a `RUNNING` At without a pod, which the
//! next sync gives its pod; the pod's name is fixed, so there is never a second one (and a pod
//! created before a crash is found by the next sync: it carries this At's controller
//! ownerReference).
//!
//! ## Requests per At
//!
//! Counted by the embedded API server's request log (`tests/integration/at_requests.rs`), with
//! the pod going straight from Pending to Succeeded:
//!
//! | At | requests | which |
//! |---|---:|---|
//! | due at once | 5 | PUT status `RUNNING`, POST event `Started`, POST pod; when it finishes: PUT status `DONE`, POST event `Completed` |
//! | due later | 7 | PUT status `PENDING`; POST event `Scheduled`; then the five above |
//!
//! Zero GETs: the At and its pod are read from the informers' caches. An At that is already due
//! when first seen gets `RUNNING` and its pod, and no `PENDING` write. Every At passes through
//! `RUNNING`, however fast its command ends: a watcher (`kubectl get ats -w`) sees PENDING (when
//! it was waiting), RUNNING, DONE, as the book shows. A pod the kubelet reports `Running`
//! before it finishes costs one more status write (`pod X is Running`), which is news to the
//! user. The event POSTs go through the event sink's own throttle bucket and never delay these
//! writes ([`sample_client_go::record`]).
//!
//! ## A lagging cache never causes a second pod
//!
//! Listers lag the controller's own writes by a watch round trip. Two records bridge the gap:
//!
//! * [`Expectations`]: the pod this controller created and the pod informer has not delivered
//!   yet. While one is outstanding, "no pod in the lister" means "wait", not "create"
//!   (kube-controller-manager's `ControllerExpectations`);
//! * [`WrittenStatuses`]: the status this controller wrote and the At informer has not
//!   delivered yet. Phases only move forward, so an older phase in the cache is ignored in
//!   favour of what was written (otherwise a pod deleted just after `DONE` could look like a
//!   `RUNNING` At that lost its pod).
//!
//! ## Events (`kubectl describe at NAME`)
//!
//! | type | reason | when |
//! |---|---|---|
//! | Normal | `Scheduled` | the At is first seen waiting (or its schedule changed) |
//! | Normal | `Started` | the pod was created (or recreated after it vanished while running) |
//! | Normal | `Completed` | the command exited 0 |
//! | Warning | `Failed` | the command failed (exit code in the message) |
//! | Warning | `DeadlineExceeded` | the pod ran longer than `spec.run.activeDeadlineSeconds` |
//! | Normal | `PodDeleted` | the finished pod was deleted, `ttlSecondsAfterFinished` after `DONE` |
//! | Warning | `InvalidSpec` | the schedule does not parse, or the command is empty |
//! | Warning | `ErrResourceExists` | a pod of that name exists and is not controlled by this At |
//! | Warning | `FailedCreate` | the API server refused the pod |
//!
//! Events are recorded on transitions (when the status changes), not on every sync, so a
//! resync does not repeat them.
//!
//! ## What is fixed relative to the book (see the reference's list of cnat's bugs)
//!
//! * the command runs as `/bin/sh -c <command>` (the book split it on spaces);
//! * `restartPolicy: Never`, so a failing command ends the At as `DONE` with `result: Failed`
//!   and its exit code (the book's `OnFailure` kept a failing At `RUNNING` for ever);
//! * an unparsable schedule or an empty command is terminal until the spec changes: a Warning
//!   `InvalidSpec` event and condition, no requeue (the book retried it with backoff for ever);
//! * `PENDING` is written as soon as the At is seen, with the due time in `status.message`;
//! * a pod with the At's pod name that this At does not control is never used or taken over:
//!   Warning `ErrResourceExists` (the book read any such pod's phase as its own result). Such a
//!   pod's events do not reach the At (only a controller ownerReference routes them), so the
//!   At is looked at again on the informer's resync;
//! * `DONE` is final: a pod deleted afterwards is not recreated (the book reran the command at
//!   the next resync); a pod deleted while `RUNNING` is recreated once its deletion is seen;
//! * the pod is read from the pod lister, never with a live GET; pod deletions are watched
//!   (the book had no delete handler);
//! * a success always clears the key's failure history (the book's `AddAfter` did not);
//! * events are recorded (the book built a recorder and never used it).
//!
//! Kept from the book: the pod name `<name>-pod`, the `app: <name>` label, and a schedule in the
//! past fires at once however old (the book's example is from 2019).
//!
//! ## The pod cache holds our pods only, slim
//!
//! The book's pod informer cached every pod of the cluster. Here the pod carries
//! `app.kubernetes.io/managed-by: at-controller` besides `app: <name>`, and the manager's pod
//! informer watches only pods labelled by one of this crate's operators, as [`PodSummary`]s
//! (metadata, phase, reason, message, conditions, containers' terminated states): see
//! [`crate::slim`]. A pod of ours created before that label existed is invisible to the
//! cache, so the create answers 409 AlreadyExists: one GET finds it
//! ([`crate::slim::get_existing`]), labels it if its controller ownerReference is this At's,
//! and the sync carries on with it (a pod that is not ours gives `ErrResourceExists`, as a
//! cached one would).

use apimachinery::shrink::ShrinkAfterBurst;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::apis::conditions::{Condition, ConditionStatus, remove_condition, set_condition};
use crate::apis::{At, AtPhase, AtResult, AtSpec, AtStatus};
use crate::slim::{self, AtSummary, PodSummary};
use sample_client_go::cache::{
    Deleted, EventHandlerFns, Lister, ListerWatcherSource, ObjectMetaAccess, OwnerRef,
    SharedInformerFactory, SmallString, UidString, key_of, split_key,
};
use sample_client_go::client::{self, Api, Client, DeleteParams, PostParams, Preconditions};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::QueueKey;
use sample_controller_runtime::controller::{
    Clock, Expectations, Operator, RunError, SyncHandler, SyncStats, Workers,
};
use sample_controller_runtime::owned::{self, LABEL_MANAGED_BY, controller_ref_of, owner_handlers};

/// The recorder's source component and the field manager of every write.
pub const CONTROLLER_NAME: &str = "at-controller";

/// The At controller: informers, a queue, a recorder, and the state the sync handler needs to
/// be safe against a lagging cache. Build it with [`AtController::new`], start the factory,
/// then [`run`](sample_controller_runtime::controller::run) it (the manager does both).
pub struct AtController {
    /// Writes: pod creates and At status updates. Reads never go here.
    client: Client,
    /// The At cache, read by `sync_handler`.
    at_lister: Lister<AtSummary>,
    /// The pod cache (our pods only, slim): `<name>-pod` is looked up here, never with a live
    /// GET (except once after a create answered AlreadyExists).
    pod_lister: Lister<PodSummary>,
    /// Keys (`namespace/name` of Ats) waiting for a worker, the worker loop's counters, and
    /// the registrations of the At and pod handlers (synced once each saw its initial list).
    workers: Workers,
    /// Events for `kubectl describe at`.
    recorder: EventRecorder,
    /// Pods created and not yet seen by the pod informer.
    expectations: Arc<Expectations>,
    /// Statuses written and not yet seen by the At informer.
    written: Arc<WrittenStatuses>,
    /// Wall-clock time that follows tokio's clock.
    clock: Clock,
}

/// Why a sync failed. Every variant is retried with backoff by the worker loop.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused or failed the pod create.
    #[error("creating pod {namespace}/{pod}: {source}")]
    CreatePod {
        namespace: String,
        pod: String,
        #[source]
        source: client::Error,
    },
    /// The status write failed (a 409 Conflict means the cache was stale: retry).
    #[error("updating the status of At {key}: {source}")]
    UpdateStatus {
        key: String,
        #[source]
        source: client::Error,
    },
    /// Deleting the finished pod after `ttlSecondsAfterFinished` failed.
    #[error("deleting finished pod {namespace}/{pod}: {source}")]
    DeletePod {
        namespace: String,
        pod: String,
        #[source]
        source: client::Error,
    },
    /// The At in the cache lacks what every stored object has (a uid).
    #[error("At {key} has no metadata.uid; cannot own a pod")]
    MissingUid { key: String },
}

impl AtController {
    /// The book's `NewController`: takes the At and Pod informers from the shared factory
    /// (creating them if this is the first controller to ask) and registers the handlers that
    /// turn notifications into queue keys. Nothing runs until the factory is started. `stats`
    /// counts the worker loop's syncs (and exports them when built with metrics).
    pub fn new<S: ListerWatcherSource>(
        client: Client,
        factory: &SharedInformerFactory<S>,
        recorder: EventRecorder,
        queue: RateLimitingQueue<QueueKey>,
        clock: Clock,
        stats: SyncStats,
    ) -> Result<Arc<Self>, RunError> {
        let at_informer = factory.informer::<AtSummary>();
        let pod_informer = factory.informer::<PodSummary>();
        let expectations = Arc::new(Expectations::default());
        let written = Arc::new(WrittenStatuses::default());

        // Ats: every add and update (resyncs included) enqueues the At's key. Keys, not
        // objects, go on the queue: the worker reads the latest state from the lister, so ten
        // updates before a worker is free cost one sync. A deleted At needs no work (the
        // garbage collector removes its pod), only forgetting what we remembered about it.
        let at_handler = {
            let (q1, q2) = (queue.clone(), queue.clone());
            let (e, w_update, w_delete) = (
                Arc::clone(&expectations),
                Arc::clone(&written),
                Arc::clone(&written),
            );
            EventHandlerFns::<AtSummary>::new()
                .on_add(move |at, _initial| q1.add(key_of(at.as_ref()).into()))
                .on_update(move |_old, new| {
                    let key = key_of(new.as_ref());
                    w_update.settle(&key, &new);
                    q2.add(key.into());
                })
                .on_delete(move |gone: Deleted<AtSummary>| {
                    let key = gone.key();
                    e.forget(&key);
                    w_delete.forget(&key);
                })
        };
        let at_synced = at_informer
            .add_event_handler(at_handler)
            .map_err(RunError::informer::<Self>)?;

        // Pods: an event enqueues the pod's At, found only through a controller ownerReference
        // of kind At in our group (the book checked the kind alone). A pod add also settles
        // the expectation recorded when the pod was created. Deletions (final state or a
        // tombstone from a relist) enqueue too: a RUNNING At whose pod vanished must act.
        // The same handler every owning operator uses (`owned::owner_handlers`), so a pod whose
        // controller reference moves to another At also wakes the At it left.
        let pod_handler = owner_handlers::<At, PodSummary>(&queue, Some(Arc::clone(&expectations)));
        let pod_synced = pod_informer
            .add_event_handler(pod_handler)
            .map_err(RunError::informer::<Self>)?;

        let at_lister = at_informer.lister();
        let workers = Workers::new(queue, stats, vec![at_synced, pod_synced]).release_drained(
            &at_lister,
            &client,
            Some(Arc::clone(&expectations)),
        );
        Ok(Arc::new(AtController {
            client,
            at_lister,
            pod_lister: pod_informer.lister(),
            workers,
            recorder,
            expectations,
            written,
            clock,
        }))
    }
}

impl AtController {
    /// Records the planned events on the At.
    fn record_events(&self, at: &At, events: Vec<PlannedEvent>) {
        for event in events {
            let type_ = match event.type_ {
                PlannedEventType::Normal => EventType::Normal,
                PlannedEventType::Warning => EventType::Warning,
            };
            self.recorder.event(at, type_, event.reason, &event.message);
        }
    }

    /// Writes `status` to the At through `/status` and remembers what the server stored (see
    /// [`WrittenStatuses`]); returns the stored At. `Ok(None)`: the At was deleted meanwhile,
    /// nothing more to do.
    async fn write_status(
        &self,
        key: &str,
        at: &At,
        status: AtStatus,
    ) -> Result<Option<At>, SyncError> {
        let mut updated = at.clone();
        let old_phase = updated.phase();
        updated.status = Some(status);
        let pp = PostParams::with_field_manager(CONTROLLER_NAME);
        // Boxed: the write's state is kept apart from the sync's future (see `Api::create`).
        match Box::pin(Api::<At>::all(self.client.clone()).update_status(&pp, &updated)).await {
            Ok(stored) => {
                let phase = stored.phase();
                if phase != old_phase {
                    tracing::info!(key, from = %old_phase, to = %phase, "phase changed");
                }
                self.written.record(key, &stored);
                Ok(Some(stored))
            }
            Err(source) if source.is_not_found() => {
                tracing::debug!(key, "At deleted while syncing");
                self.written.forget(key);
                Ok(None)
            }
            Err(source) => {
                // A conflict means our copy was stale; drop what we remembered, the informer
                // will deliver the newer object and a retry reads it.
                self.written.forget(key);
                Err(SyncError::UpdateStatus {
                    key: key.to_string(),
                    source,
                })
            }
        }
    }
}

/// The book's `Run` is the shared [`sample_controller_runtime::controller::run`]: it waits for both caches (a worker must never
/// act on a partial view: "no pod in the cache" would mean "create one"), then starts the
/// workers, and returns when every worker has finished its item.
impl Operator for AtController {
    const NAME: &'static str = "at";

    fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl SyncHandler for AtController {
    type Error = SyncError;

    /// The book's `syncHandler`: reads the At and its pod from the listers, asks [`plan`] what
    /// to do, and does it: create the pod, write the status, record the events.
    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, SyncError> {
        // Deleted since it was queued (its pod goes with it), or released to the sharder: this
        // shard is done with the key, and forgets what it wrote too.
        let fetched = sample_controller_runtime::controller::object_to_sync(
            &self.at_lister,
            &self.expectations,
            key,
        );
        let Some(cached) = fetched else {
            self.written.forget(key);
            return Ok(None);
        };
        if cached.metadata.uid.is_none() {
            return Err(SyncError::MissingUid {
                key: key.to_string(),
            });
        }
        // Our own last status write wins over a cache that has not caught up with it yet.
        let at = self.written.effective(key, Arc::new(cached.to_at()));
        let (namespace, _) = split_key(key);
        let namespace = namespace.unwrap_or_default().to_string();
        let pod_name = at.pod_name();
        let pod = self
            .pod_lister
            .get_by_key(&format!("{namespace}/{pod_name}"))
            .map(|p| Box::new(p.to_pod()));
        let state = match &pod {
            Some(p) => PodState::Present(p),
            None if !self.expectations.satisfied(key) => PodState::Expected,
            None => PodState::Absent,
        };
        let mut plan = plan(&at, state, self.clock.now());

        // The status first, then the pod: a due At is written RUNNING before its pod is
        // created (the book's order), so a watcher sees RUNNING before DONE however fast the
        // command ends. See `Decision::create_pod` for why a crash in between is safe.
        let mut stored = None;
        if let Some(status) = plan.status.take() {
            match self.write_status(key, &at, status).await? {
                Some(s) => stored = Some(s),
                None => return Ok(None),
            }
            // The events of the transition just written, whatever the create does next.
            self.record_events(&at, std::mem::take(&mut plan.events));
        }

        if let Some(new_pod) = plan.create_pod.take() {
            // Expect before creating: the informer's add may beat the create's response.
            self.expectations.expect_creations(key, 1);
            let pp = PostParams {
                field_manager: Some(CONTROLLER_NAME.to_string()),
                ..PostParams::default()
            };
            let pods = Api::<Pod>::namespaced(self.client.clone(), &namespace);
            match pods.create(&pp, &new_pod).await {
                Ok(_) => tracing::info!(key, pod = %pod_name, "pod launched"),
                Err(source) if source.is_already_exists() => {
                    // Nothing will arrive for this create. A pod of that name the cache does
                    // not show: ours from before the managed-by label, or someone else's. One
                    // GET tells (and labels ours); decide again with it, from the status just
                    // written.
                    self.expectations.creation_observed(key);
                    // The rare path: its state (a GET, a PATCH, the pod) is boxed, not kept
                    // inline in every sync's future.
                    let existing = Box::pin(slim::get_existing(
                        &pods,
                        at.as_ref(),
                        &pod_name,
                        CONTROLLER_NAME,
                    ))
                    .await
                    .map(Box::new)
                    .map_err(|source| SyncError::CreatePod {
                        namespace: namespace.clone(),
                        pod: pod_name.clone(),
                        source,
                    })?;
                    // The At as just written (the cache may not show it yet).
                    let now_at = stored.unwrap_or_else(|| at.as_ref().clone());
                    let mut again =
                        self::plan(&now_at, PodState::Present(&existing), self.clock.now());
                    if let Some(status) = again.status.take()
                        && self.write_status(key, &now_at, status).await?.is_none()
                    {
                        return Ok(None);
                    }
                    plan.events.append(&mut again.events);
                    plan.requeue_after = again.requeue_after;
                }
                Err(source) => {
                    // Nothing will arrive for this create.
                    self.expectations.creation_observed(key);
                    self.recorder.event(
                        at.as_ref(),
                        EventType::Warning,
                        reason::FAILED_CREATE,
                        &format!("creating pod {pod_name}: {source}"),
                    );
                    return Err(SyncError::CreatePod {
                        namespace,
                        pod: pod_name,
                        source,
                    });
                }
            }
        }

        if let Some((pod_name, uid)) = plan.delete_pod.take() {
            let pods = Api::<Pod>::namespaced(self.client.clone(), &namespace);
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match pods.delete(&pod_name, &dp).await {
                Ok(_) => {
                    tracing::info!(key, pod = %pod_name, "finished pod deleted (ttlSecondsAfterFinished)")
                }
                // Gone already, or replaced by another pod of that name: nothing of ours to delete.
                Err(e) if e.is_not_found() || e.is_conflict() => {
                    tracing::debug!(key, pod = %pod_name, error = %e, "finished pod already gone");
                    plan.events.clear();
                }
                Err(source) => {
                    return Err(SyncError::DeletePod {
                        namespace,
                        pod: pod_name,
                        source,
                    });
                }
            }
        }

        self.record_events(&at, std::mem::take(&mut plan.events));
        Ok(plan.requeue_after)
    }

    /// Only the status write can conflict (a pod create answers 409 AlreadyExists instead).
    fn is_conflict(err: &SyncError) -> bool {
        matches!(err, SyncError::UpdateStatus { source, .. } if source.is_conflict())
    }

    /// A Warning `ReconciliationFailed` event on the object with the error (see
    /// [`sample_controller_runtime::controller::record_reconcile_error`]).
    fn on_sync_error(&self, key: &str, message: &str) {
        sample_controller_runtime::controller::record_reconcile_error(
            &self.at_lister,
            &self.recorder,
            key,
            message,
        );
    }
}

/// The statuses this controller wrote and its At informer has not delivered yet.
///
/// Phases only move forward (PENDING → RUNNING → DONE). If the cache still shows an older
/// phase than the one we wrote, acting on it could repeat work: most dangerously, a pod deleted
/// right after the At went DONE would look like "RUNNING, no pod" and be created again. So
/// the sync handler acts on the status it wrote (and its resourceVersion, so a write based on
/// it does not conflict) until the cache catches up; see [`WrittenStatuses::effective`].
#[derive(Debug, Default)]
pub struct WrittenStatuses {
    by_key: Mutex<HashMap<SmallString, Written>>,
}

/// One write's record. After a burst thousands are held at once, so it is kept small: 88 bytes
/// with the status boxed apart (a hash table has up to twice the slots of its entries, and an
/// inline `AtStatus` would make each slot 144 bytes larger), the key and resourceVersion as
/// [`SmallString`]s, the UID a [`UidString`], none of them allocated.
#[derive(Debug, Clone)]
struct Written {
    uid: Option<UidString>,
    resource_version: Option<SmallString>,
    generation: Option<i64>,
    status: Option<Box<AtStatus>>,
}

impl Written {
    /// Whether a cached At with this metadata and phase has caught up with this write (see
    /// [`WrittenStatuses::effective`]).
    fn caught_up_by(&self, cached: &impl ObjectMetaAccess, phase: AtPhase) -> bool {
        let written_phase = self
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default();
        self.uid.as_deref() != cached.uid()
            || self.resource_version.as_deref() == cached.resource_version()
            || phase_rank(phase) > phase_rank(written_phase)
            || cached.generation() > self.generation
    }
}

fn phase_rank(p: AtPhase) -> u8 {
    match p {
        AtPhase::Pending => 0,
        AtPhase::Running => 1,
        AtPhase::Done => 2,
    }
}

impl WrittenStatuses {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SmallString, Written>> {
        // Single inserts and removes only: a poisoned map is still consistent.
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the object the server returned from a status write (a `DONE` status slimmed
    /// as the cache slims it: [`slim_done_status`]).
    pub fn record(&self, key: &str, stored: &At) {
        let mut status = stored.status.clone();
        if let Some(s) = status.as_mut() {
            slim_done_status(s);
        }
        self.lock().insert(
            key.into(),
            Written {
                uid: stored.metadata.uid.as_deref().map(UidString::from),
                resource_version: stored
                    .metadata
                    .resource_version
                    .as_deref()
                    .map(SmallString::from),
                generation: stored.metadata.generation,
                status: status.map(Box::new),
            },
        );
    }

    /// Forgets `key` (deleted, or a write conflicted).
    pub fn forget(&self, key: &str) {
        let mut map = self.lock();
        map.remove(key);
        map.shrink_after_burst();
    }

    /// The At to act on: the cached one, or, while the cache is behind our last write for the
    /// same object, the cached one (its spec) with our written status and resourceVersion.
    ///
    /// resourceVersions are opaque (a client must not order them), so "behind" is judged by
    /// what can be ordered: the cache has caught up when it shows our resourceVersion, a later
    /// phase, or a later generation (a spec change made after our write). A cache showing the
    /// same phase with another resourceVersion is treated as not caught up; if it was in fact
    /// newer (someone else wrote the status), the next status write conflicts, the record is
    /// forgotten and the retry reads the cache.
    pub fn effective(&self, key: &str, cached: Arc<At>) -> Arc<At> {
        let mut map = self.lock();
        let Some(w) = map.get(key) else {
            return cached;
        };
        if w.caught_up_by(&cached.metadata, cached.phase()) {
            map.remove(key);
            map.shrink_after_burst();
            return cached;
        }
        // The sync hands over the one copy it rebuilt from the cache: edited in place, not
        // copied again (`make_mut` copies only an `At` someone else still holds).
        let mut effective = cached;
        let at = Arc::make_mut(&mut effective);
        at.status = w.status.as_deref().cloned();
        at.metadata.resource_version = w.resource_version.as_deref().map(str::to_owned);
        effective
    }

    /// Forgets the record of `key` once the informer shows `delivered` has caught up with it
    /// (the same test as [`WrittenStatuses::effective`]). The At informer's update handler
    /// calls this, so a record lives for one watch round trip, not until the next sync of its
    /// key: after a burst of 10,000 Ats that next sync comes only when the pod finishes (or
    /// never, for a `DONE` At), and the records of every At written meanwhile were held.
    pub fn settle(&self, key: &str, delivered: &AtSummary) {
        let mut map = self.lock();
        if map
            .get(key)
            .is_some_and(|w| w.caught_up_by(&delivered.metadata, delivered.phase()))
        {
            map.remove(key);
            // The records of a burst go as its statuses arrive: give their room back.
            map.shrink_after_burst();
        }
    }

    /// How many writes the cache has not caught up with.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when the cache has caught up with every write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---------------------------------------------------------------------------------------------
// The decision: a pure function from what was observed to what to do.
// ---------------------------------------------------------------------------------------------

/// The image the At's pod runs when `spec.run.image` is unset. Pinned (a `:latest` tag would
/// make every start pull).
pub const POD_IMAGE: &str = crate::apis::at::DEFAULT_IMAGE;

/// The container name inside the At's pod (the book's).
pub const POD_CONTAINER_NAME: &str = "busybox";

/// Condition type: `True` once the At has run its command successfully.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: `True` while the spec cannot be acted on.
pub const CONDITION_INVALID_SPEC: &str = "InvalidSpec";

/// Event reasons, as `kubectl describe at NAME` shows them.
pub mod reason {
    /// Normal: the At waits for its schedule.
    pub const SCHEDULED: &str = "Scheduled";
    /// Normal: the pod running the command was created (or found).
    pub const STARTED: &str = "Started";
    /// Normal: the command succeeded.
    pub const COMPLETED: &str = "Completed";
    /// Warning: the command failed.
    pub const FAILED: &str = "Failed";
    /// Warning: the pod ran longer than `spec.run.activeDeadlineSeconds` (also the `Ready`
    /// condition's reason and the kubelet's pod `status.reason`).
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// Normal: the finished pod was deleted after `spec.run.ttlSecondsAfterFinished`.
    pub const POD_DELETED: &str = "PodDeleted";
    /// Warning: the spec cannot be acted on (bad schedule, empty command).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Warning: a pod with the At's pod name exists and belongs to someone else.
    pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// Warning: creating the pod failed.
    pub const FAILED_CREATE: &str = "FailedCreate";
    /// Condition reason: the pod runs.
    pub const RUNNING: &str = "Running";
}

/// `Normal` or `Warning`, as core/v1 Events (kept apart from the recorder's type so the
/// decision logic depends on nothing but the API types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlannedEventType {
    /// Routine progress.
    Normal,
    /// Something a user should look at.
    Warning,
}

/// An event the sync should record once its writes have succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// Normal or Warning.
    pub type_: PlannedEventType,
    /// CamelCase reason (see [`reason`]).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// What the pod lister (plus the controller's expectations) says about the At's pod.
#[derive(Clone, Copy, Debug)]
pub enum PodState<'a> {
    /// No pod of that name in the lister, and none is expected.
    Absent,
    /// The lister has no pod yet, but this controller created one and its informer has not
    /// caught up: creating again would be a duplicate.
    Expected,
    /// The lister's pod of that name (controlled by this At or not).
    Present(&'a Pod),
}

/// The decision of one sync: what to create, what status to write, what to tell the user,
/// and when to look again. Produced by [`plan`], carried out by the sync handler in this order:
/// create the pod, write the status, record the events, return `requeue_after`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// A pod to create. Boxed: a `Pod` is 2,176 bytes before it allocates, and a sync's
    /// future would hold that inline for every plan, with a pod to create or not.
    pub create_pod: Option<Box<Pod>>,
    /// A finished pod to delete (`ttlSecondsAfterFinished` elapsed): its name and UID (the
    /// delete's precondition, so a newer pod of the same name is never deleted).
    pub delete_pod: Option<(String, String)>,
    /// The new status, present only when it differs from the current one.
    pub status: Option<AtStatus>,
    /// Events to record after the writes succeeded.
    pub events: Vec<PlannedEvent>,
    /// Look at this At again after this long (the schedule's due time), without an event.
    pub requeue_after: Option<Duration>,
}

/// The At state machine, as a pure function of what the controller observed:
///
/// | phase | observation | decision |
/// |---|---|---|
/// | `DONE` | no TTL, or pod absent, being deleted or not ours | nothing, ever (a deleted pod is not recreated) |
/// | `DONE` | TTL set, our finished pod present, `completionTime + ttl` in the future | requeue at that time |
/// | `DONE` | TTL set, our finished pod present, `completionTime + ttl` reached | delete the pod (UID precondition), Normal `PodDeleted` |
/// | `PENDING` | schedule unparsable or command empty | `InvalidSpec` condition + Warning event; no requeue (the next spec change enqueues it) |
/// | `PENDING` | due in the future | persist `PENDING` (+ Normal `Scheduled`), requeue exactly at the due time |
/// | `PENDING` | due now or in the past | continue below with the pod |
/// | `PENDING` | pod absent | `RUNNING` (`startTime` now, `podName`), Normal `Started`, and create `<name>-pod` (controller ownerReference, `/bin/sh -c`, `restartPolicy: Never`); the sync writes the status first |
/// | `PENDING` | pod expected (created, not yet in the lister) | wait for the pod informer |
/// | `PENDING` | our pod present, not finished | as `RUNNING` below, plus Normal `Started`; `startTime` is the pod's `creationTimestamp` |
/// | `PENDING` | our pod present, finished | `RUNNING` and Normal `Started` only, and look again at once: `DONE` in the next sync, never skipping `RUNNING` |
/// | `RUNNING` | pod absent (deleted before it finished, or never created: a crash after the `RUNNING` write) | create `<name>-pod`, Normal `Started` saying so (quietly, with no status write, when a pod of that name that is not ours was found before) |
/// | `RUNNING` | pod expected (created, not yet in the lister) | wait for the pod informer |
/// | any | pod not controlled by this At | Warning `ErrResourceExists`; the pod is left untouched |
/// | `RUNNING` | pod Succeeded / Failed | `DONE` with result (`DeadlineExceeded` when the pod's reason says so), exit code, message, completion time; requeue after the TTL if set |
/// | `RUNNING` | pod pending / running / being deleted | wait for the pod's next event |
///
/// The status in the plan is `Some` only when it differs from the At's current status, so a
/// sync that changes nothing writes nothing.
///
/// Each decision row is one step method of a private `Decision` (`invalid_spec`, `wait_until`,
/// then, once due, the pod decides: `pod_not_ours`, `finish`, `watch_pod`, `wait_for_informer`,
/// `create_pod`), so the code below reads as the table does.
pub fn plan(at: &At, pod: PodState<'_>, now: Timestamp) -> Plan {
    if at.phase() == AtPhase::Done {
        return after_done(at, pod, now);
    }
    let mut decision = Decision::new(at, now);
    let mut due_at = None;
    if decision.phase == AtPhase::Pending {
        let due = match validate_spec(&at.spec) {
            Ok(due) => due,
            Err(message) => return decision.invalid_spec(message),
        };
        remove_condition(&mut decision.status.conditions, CONDITION_INVALID_SPEC);
        if now < due {
            return decision.wait_until(due);
        }
        due_at = Some(due);
    }
    // RUNNING (or PENDING that is due now): the pod decides.
    match pod {
        PodState::Present(pod) if !is_controlled_by(pod, at) => decision.pod_not_ours(),
        PodState::Present(pod) => {
            // The pod's creation time is the server's clock: kept between the due time and
            // now by this controller's, so a skewed clock never dates the start before the
            // schedule or after the decision.
            decision.pod_created = due_at
                .zip(pod.metadata.creation_timestamp.as_ref())
                .map(|(due, created)| created.0.max(due).min(now));
            match finished(pod) {
                // RUNNING is always written before DONE: a PENDING At whose pod has already
                // finished (created before a crash cut the sync short, or by an older version
                // of this controller) goes RUNNING now, and DONE in the next sync.
                Some(_) if decision.phase == AtPhase::Pending => decision.run_on_found_pod(pod),
                Some(outcome) => decision.finish(outcome),
                None => decision.watch_pod(pod),
            }
        }
        PodState::Expected => decision.wait_for_informer(),
        PodState::Absent => decision.create_pod(),
    }
}

/// One sync's decision under construction: the At, the status it had, the status being built
/// and the plan so far. Each step method is one row group of [`plan`]'s table; it finishes the
/// decision and returns the [`Plan`], with the status in it only when it changed. Nothing here
/// performs I/O.
struct Decision<'a> {
    /// The At being decided on.
    at: &'a At,
    /// Its phase when the sync began (never `DONE`: [`plan`] stops there).
    phase: AtPhase,
    /// The status it had (an empty one when it had none).
    current: AtStatus,
    /// The status being built from `current`.
    status: AtStatus,
    /// `metadata.generation`, recorded as `observedGeneration` and in conditions.
    generation: Option<i64>,
    /// The time of the decision.
    now: Timestamp,
    /// When the At's pod was created (its `creationTimestamp`, kept between the due time and
    /// now), once the lister shows it: the At's `startTime` when it leaves `PENDING`.
    pod_created: Option<Timestamp>,
    /// The plan so far (pod to create, events, requeue).
    out: Plan,
}

impl<'a> Decision<'a> {
    /// Starts from the At's current status and an empty plan.
    fn new(at: &'a At, now: Timestamp) -> Self {
        let current = at.status.clone().unwrap_or_default();
        Decision {
            at,
            phase: at.phase(),
            status: current.clone(),
            current,
            generation: at.metadata.generation,
            now,
            pod_created: None,
            out: Plan::default(),
        }
    }

    /// Ends the decision: the plan, with the status only when it differs from the current one.
    fn done(mut self) -> Plan {
        self.out.status = changed(&self.current, self.status);
        self.out
    }

    /// True when `message` is not already the status message (the At learns something new).
    fn message_changed(&self, message: &str) -> bool {
        self.current.message.as_deref() != Some(message)
    }

    /// Sets the `Ready` condition to `status` with `reason` and `message`; true when it changed.
    fn set_ready(&mut self, status: ConditionStatus, reason: &str, message: &str) -> bool {
        set_condition(
            &mut self.status.conditions,
            Condition::new(
                CONDITION_READY,
                status,
                reason,
                message,
                self.generation,
                self.now,
            ),
        )
    }

    /// `PENDING` with a spec that cannot be acted on: the `InvalidSpec` condition, `Ready`
    /// false, and a Warning event when that is news; no requeue (a spec change enqueues it).
    fn invalid_spec(mut self, message: String) -> Plan {
        self.status.phase = Some(AtPhase::Pending);
        self.status.observed_generation = self.generation;
        self.status.message = Some(message.clone());
        let invalid = Condition::new(
            CONDITION_INVALID_SPEC,
            ConditionStatus::True,
            reason::INVALID_SPEC,
            message.as_str(),
            self.generation,
            self.now,
        );
        let mut conditions_changed = set_condition(&mut self.status.conditions, invalid);
        conditions_changed |= self.set_ready(
            ConditionStatus::False,
            reason::INVALID_SPEC,
            message.as_str(),
        );
        if conditions_changed || self.message_changed(&message) {
            self.out.events.push(PlannedEvent {
                type_: PlannedEventType::Warning,
                reason: reason::INVALID_SPEC,
                message,
            });
        }
        self.done()
    }

    /// `PENDING`, due in the future: persist `PENDING` with the due time in the message (a
    /// Normal `Scheduled` event when the At is first seen waiting or its schedule moved), and
    /// look again exactly at the due time.
    fn wait_until(mut self, due: Timestamp) -> Plan {
        let message = format!("waiting until {due} to run the command");
        self.status.phase = Some(AtPhase::Pending);
        self.status.observed_generation = self.generation;
        self.set_ready(ConditionStatus::False, reason::SCHEDULED, message.as_str());
        if self.current.phase != Some(AtPhase::Pending) || self.message_changed(&message) {
            self.out.events.push(PlannedEvent {
                type_: PlannedEventType::Normal,
                reason: reason::SCHEDULED,
                message: format!("scheduled to run {:?} at {due}", self.at.spec.run.command),
            });
        }
        self.status.message = Some(message);
        self.out.requeue_after =
            Some(Duration::try_from(self.now.duration_until(due)).unwrap_or(Duration::ZERO));
        self.done()
    }

    /// A pod of the At's pod name that this At does not control: left untouched; `Ready`
    /// false with reason `ErrResourceExists`, and a Warning event when that is news.
    fn pod_not_ours(mut self) -> Plan {
        let pod_name = self.at.pod_name();
        let message = format!("Resource {pod_name:?} already exists and is not managed by At");
        self.status.phase = Some(self.phase);
        self.status.observed_generation = self.generation;
        let cond_changed = self.set_ready(
            ConditionStatus::False,
            reason::ERR_RESOURCE_EXISTS,
            message.as_str(),
        );
        if cond_changed || self.message_changed(&message) {
            self.out.events.push(PlannedEvent {
                type_: PlannedEventType::Warning,
                reason: reason::ERR_RESOURCE_EXISTS,
                message: message.clone(),
            });
        }
        self.status.message = Some(message);
        self.done()
    }

    /// Goes `RUNNING` on the At's pod (the start time is kept once set).
    fn enter_running(&mut self) {
        enter_running(
            &mut self.status,
            &self.at.pod_name(),
            self.generation,
            self.pod_created.unwrap_or(self.now),
        );
    }

    /// `Started`, when the At goes from `PENDING` to a pod in this same sync.
    fn started_if_was_pending(&mut self) {
        if self.phase == AtPhase::Pending {
            self.out.events.push(started_event(
                &self.at.pod_name(),
                &self.at.spec.run.command,
            ));
        }
    }

    /// A `PENDING` At whose pod has already finished: `RUNNING` (with `Started`) and look again
    /// at once, so that the next sync writes `DONE`: a watcher sees every At pass through
    /// `RUNNING`, however it got its pod.
    fn run_on_found_pod(self, pod: &Pod) -> Plan {
        let mut plan = self.watch_pod(pod);
        plan.requeue_after = Some(Duration::ZERO);
        plan
    }

    /// Our pod finished: `DONE` with result, exit code, message and completion time; `Ready`
    /// true on success; a Normal `Completed` or Warning `Failed` event.
    fn finish(mut self, outcome: Outcome) -> Plan {
        self.enter_running();
        let (type_, event_reason, ready) = match outcome.result {
            AtResult::Succeeded => (
                PlannedEventType::Normal,
                reason::COMPLETED,
                ConditionStatus::True,
            ),
            AtResult::Failed => (
                PlannedEventType::Warning,
                reason::FAILED,
                ConditionStatus::False,
            ),
            AtResult::DeadlineExceeded => (
                PlannedEventType::Warning,
                reason::DEADLINE_EXCEEDED,
                ConditionStatus::False,
            ),
        };
        let cond_reason = outcome.result.as_str();
        self.status.phase = Some(AtPhase::Done);
        self.status.result = Some(outcome.result);
        self.status.exit_code = outcome.exit_code;
        self.status.completion_time = Some(truncate(self.now));
        self.status.message = Some(outcome.message.clone());
        self.set_ready(ready, cond_reason, outcome.message.as_str());
        // The TTL counts from the completion time just written.
        self.out.requeue_after = ttl_of(self.at).map(|ttl| ttl.unsigned_abs());
        self.started_if_was_pending();
        self.out.events.push(PlannedEvent {
            type_,
            reason: event_reason,
            message: outcome.message,
        });
        self.done()
    }

    /// Our pod has not finished (pending, running, or being deleted): `RUNNING` with a message
    /// saying where the pod is, and wait for its next event. The informer delivering the pod
    /// we created, still `Pending`, keeps the message written with the create (no news, no
    /// write).
    fn watch_pod(mut self, pod: &Pod) -> Plan {
        self.enter_running();
        let pod_name = self.at.pod_name();
        let pod_phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        let message = if pod.metadata.deletion_timestamp.is_some() {
            format!("pod {pod_name} is being deleted before it finished")
        } else if pod_phase == "Pending" {
            format!("pod {pod_name} created, waiting for it to run")
        } else {
            format!("pod {pod_name} is {pod_phase}")
        };
        set_running_condition(&mut self.status, &message, self.generation, self.now);
        self.status.message = Some(message);
        self.started_if_was_pending();
        self.done()
    }

    /// The pod was created and the pod informer has not delivered it yet: wait (creating again
    /// would be a duplicate). The At is `RUNNING` already ([`Decision::create_pod`] writes it
    /// before the create); a `PENDING` one (a cache behind this controller's own write) is left
    /// as it is.
    fn wait_for_informer(mut self) -> Plan {
        if self.phase == AtPhase::Pending {
            return self.out;
        }
        self.enter_running();
        self.set_created_message();
        self.done()
    }

    /// No pod and none expected: go `RUNNING` and create `<name>-pod`.
    ///
    /// The book's order: the status says `RUNNING` (with `startTime`, `podName`, and a Normal
    /// `Started` event), then the pod is created, in this same sync ([`AtController`]'s
    /// `sync_handler` writes the status before it creates the pod). So every At passes through
    /// `RUNNING` on a watch, even one whose command ends at once, and `DONE` always follows
    /// `RUNNING`. A crash between the two writes leaves a `RUNNING` At without a pod, which the
    /// next sync gives its pod (this row again); a crash after both leaves the pod, which the
    /// next sync finds (it carries this At's controller reference). The pod's name is fixed
    /// (`<name>-pod`), so however often this runs there is one pod.
    ///
    /// A `RUNNING` At whose pod is gone (deleted before it finished, or never created because
    /// the controller stopped between the status write and the create) gets the pod, and a
    /// `Started` event that says so.
    fn create_pod(mut self) -> Plan {
        self.out.create_pod = Some(Box::new(new_pod(self.at)));
        // A pod of that name that is not ours was found before (our pod cache does not show
        // it): try the create again quietly. It answers 409 and the sync looks at the pod once
        // more; the status keeps saying `ErrResourceExists` instead of flapping between
        // "created" and "exists" (each write would cause another sync).
        if self.phase == AtPhase::Running
            && ready_reason(&self.current) == Some(reason::ERR_RESOURCE_EXISTS)
        {
            return self.out;
        }
        let was_pending = self.phase == AtPhase::Pending;
        self.enter_running();
        self.set_created_message();
        let pod_name = self.at.pod_name();
        if was_pending {
            self.out
                .events
                .push(started_event(&pod_name, &self.at.spec.run.command));
        } else {
            self.out.events.push(PlannedEvent {
                type_: PlannedEventType::Normal,
                reason: reason::STARTED,
                message: format!(
                    "created pod {pod_name}: the At is RUNNING and its pod was not found (deleted before it finished, or not yet created when the controller stopped)"
                ),
            });
        }
        self.done()
    }

    /// The message and `Ready` condition of a pod created and not yet running.
    fn set_created_message(&mut self) {
        let message = format!("pod {} created, waiting for it to run", self.at.pod_name());
        set_running_condition(&mut self.status, &message, self.generation, self.now);
        self.status.message = Some(message);
    }
}

/// Checks what a sync needs from the spec: a parsable schedule and a non-empty command.
/// Returns the due time, or a message naming the field and the value.
///
/// The command's field is named where the object wrote it (`spec.run.command`, or the book's
/// `spec.command`: [`AtSpec::command_field`]).
pub fn validate_spec(spec: &AtSpec) -> Result<Timestamp, String> {
    if spec.run.command.trim().is_empty() {
        return Err(format!(
            "{}: {:?} is empty; expected a shell command line such as \"echo YAY\"",
            spec.command_field(),
            spec.run.command
        ));
    }
    spec.parse_schedule()
}

/// Forgets what no decision reads once an At is `DONE`: `status.message`, `status.conditions`
/// and `status.podName` (its most allocated parts: the `Ready` condition alone is four strings
/// and a list). Kept: phase, result, exit code, start and completion time, observed
/// generation. (The spec's counterpart is [`slim_done_spec`].)
///
/// The manager's At cache applies it ([`crate::slim::scope_owned_caches`]), and so do the
/// [`WrittenStatuses`] records: at the end of a burst every cached At is `DONE`, and these
/// parts were ~320 bytes an At, ~3 MB of the heap at 10,000 Ats. It is safe because `DONE` is
/// final: [`plan`] never writes the status of a `DONE` At (its `DONE` rows only
/// delete the finished pod), so a slim copy is never sent back to the server, and
/// the `/status` endpoint would take nothing but `.status` from it anyway. A reader of this
/// cache sees a `DONE` At without those three fields; the API server still has them.
pub fn slim_done_status(status: &mut AtStatus) {
    if status.phase == Some(AtPhase::Done) {
        status.message = None;
        status.pod_name = None;
        status.conditions = Vec::new();
    }
}

/// Forgets the parts of a `DONE` At's spec no decision reads: the schedule, the command and
/// the image (each a string). Kept: `spec.run.ttlSecondsAfterFinished`, which the `DONE` rows
/// of [`plan`] read to delete the finished pod, and `activeDeadlineSeconds` (a number).
///
/// The manager's At cache applies it to a `DONE` At alongside [`slim_done_status`]
/// ([`crate::slim::slim_at`]), for the same reasons: `DONE` is final, and [`plan`]'s
/// `DONE` rows read nothing else of the spec; an At's spec is never written by this
/// controller at all (its status writes go to `/status`, which takes only `.status`). About 70
/// bytes an At with its malloc chunks, 0.7 MB at 10,000 Ats. Call it only for a `DONE` At.
pub fn slim_done_spec(spec: &mut AtSpec) {
    spec.schedule = String::new();
    spec.run.command = String::new();
    spec.run.image = None;
}

/// `spec.run.ttlSecondsAfterFinished` as a signed duration, when set (negative values, which
/// the schema refuses, count as zero).
fn ttl_of(at: &At) -> Option<jiff::SignedDuration> {
    at.spec
        .run
        .ttl_seconds_after_finished
        .map(|s| jiff::SignedDuration::from_secs(i64::from(s.max(0))))
}

/// The `DONE` rows of [`plan`]: nothing, except deleting our finished pod once
/// `ttlSecondsAfterFinished` has passed since `completionTime` (and asking to be called again
/// then, if it has not).
fn after_done(at: &At, pod: PodState<'_>, now: Timestamp) -> Plan {
    let (Some(ttl), PodState::Present(pod)) = (ttl_of(at), pod) else {
        return Plan::default();
    };
    let Some(completed) = at.status.as_ref().and_then(|s| s.completion_time) else {
        return Plan::default();
    };
    if !is_controlled_by(pod, at)
        || pod.metadata.deletion_timestamp.is_some()
        || finished(pod).is_none()
    {
        return Plan::default();
    }
    let expires = completed.checked_add(ttl).unwrap_or(completed);
    if now < expires {
        return Plan {
            requeue_after: Duration::try_from(now.duration_until(expires)).ok(),
            ..Plan::default()
        };
    }
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    Plan {
        delete_pod: Some((
            pod_name.clone(),
            pod.metadata.uid.clone().unwrap_or_default(),
        )),
        events: vec![PlannedEvent {
            type_: PlannedEventType::Normal,
            reason: reason::POD_DELETED,
            message: format!(
                "deleted pod {pod_name}: ttlSecondsAfterFinished ({}s) passed since the At finished at {completed}",
                ttl.as_secs()
            ),
        }],
        ..Plan::default()
    }
}

/// The book's `newPodForCR`, fixed: the command runs through a shell (the book split it on
/// spaces), `restartPolicy: Never` (the book's `OnFailure` restarted a failing command in place
/// for ever, so its pod never became Failed), and the pod carries a controller ownerReference
/// so the garbage collector deletes it with its At and its events find their way back.
pub fn new_pod(at: &At) -> Pod {
    let name = at.metadata.name.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(at.pod_name()),
            namespace: at.metadata.namespace.clone(),
            labels: Some(BTreeMap::from_iter(
                [
                    ("app".to_string(), name),
                    (LABEL_MANAGED_BY.to_string(), CONTROLLER_NAME.to_string()),
                ]
                .into_iter()
                // A shard's pod cache sees the pod only with the At's shard label.
                .chain(sample_controller_runtime::sharding::shard_labels(
                    &at.metadata,
                )),
            )),
            owner_references: Some(vec![controller_ref(at)]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: POD_CONTAINER_NAME.to_string(),
                image: Some(at.spec.run.image().to_string()),
                command: Some(vec![
                    "/bin/sh".to_string(),
                    "-c".to_string(),
                    at.spec.run.command.clone(),
                ]),
                ..Container::default()
            }],
            restart_policy: Some("Never".to_string()),
            active_deadline_seconds: at.spec.run.active_deadline_seconds,
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// `metav1.NewControllerRef(at, At GVK)`: the ownerReference that makes the At the pod's
/// controller (`controller: true`; `blockOwnerDeletion: true` so a foreground deletion of the
/// At waits for its pod).
pub fn controller_ref(at: &At) -> OwnerReference {
    OwnerReference {
        api_version: <At as k8s_openapi::Resource>::API_VERSION.to_string(),
        kind: <At as k8s_openapi::Resource>::KIND.to_string(),
        name: at.metadata.name.clone().unwrap_or_default(),
        uid: at.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod's controller ownerReference if it points at an At of our API group (any version):
/// [`owned::controller_ref_of`].
pub fn at_controller_of(pod: &Pod) -> Option<OwnerRef<'_>> {
    controller_ref_of::<At>(&pod.metadata)
}

/// `metav1.IsControlledBy`: the pod's controller ownerReference carries this At's UID.
pub fn is_controlled_by(pod: &Pod, at: &At) -> bool {
    owned::is_controlled_by(&pod.metadata, at)
}

/// How a finished pod ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Succeeded or Failed.
    pub result: AtResult,
    /// The container's exit code, when the kubelet reported one.
    pub exit_code: Option<i32>,
    /// A sentence for `status.message` and the event.
    pub message: String,
}

/// The outcome of a pod in phase `Succeeded` or `Failed`; `None` while it has not finished.
pub fn finished(pod: &Pod) -> Option<Outcome> {
    let status = pod.status.as_ref()?;
    let result = match status.phase.as_deref()? {
        "Succeeded" => AtResult::Succeeded,
        // The kubelet's verdict for a pod past its `activeDeadlineSeconds`.
        "Failed" if status.reason.as_deref() == Some(reason::DEADLINE_EXCEEDED) => {
            AtResult::DeadlineExceeded
        }
        "Failed" => AtResult::Failed,
        _ => return None,
    };
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let terminated = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == POD_CONTAINER_NAME)
        .or_else(|| status.container_statuses.as_deref().and_then(|c| c.first()))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    let exit_code = match (terminated, result) {
        (Some(t), _) => Some(t.exit_code),
        (None, AtResult::Succeeded) => Some(0),
        (None, AtResult::Failed | AtResult::DeadlineExceeded) => None,
    };
    let detail = terminated
        .and_then(|t| t.reason.clone().or_else(|| t.message.clone()))
        .or_else(|| status.reason.clone())
        .or_else(|| status.message.clone());
    let message = match (result, exit_code) {
        (AtResult::Succeeded, _) => format!("pod {pod_name} succeeded: the command exited with 0"),
        (AtResult::Failed, Some(code)) => match detail {
            Some(d) => format!("pod {pod_name} failed: the command exited with {code} ({d})"),
            None => format!("pod {pod_name} failed: the command exited with {code}"),
        },
        (AtResult::Failed, None) => match detail {
            Some(d) => format!("pod {pod_name} failed: {d}"),
            None => format!("pod {pod_name} failed"),
        },
        (AtResult::DeadlineExceeded, _) => format!(
            "pod {pod_name} was stopped at its activeDeadlineSeconds: {}",
            status
                .message
                .as_deref()
                .unwrap_or("Pod was active on the node longer than the specified deadline")
        ),
    };
    Some(Outcome {
        result,
        exit_code,
        message,
    })
}

fn enter_running(status: &mut AtStatus, pod_name: &str, generation: Option<i64>, now: Timestamp) {
    status.phase = Some(AtPhase::Running);
    status.pod_name = Some(pod_name.to_string());
    status.observed_generation = generation;
    if status.start_time.is_none() {
        status.start_time = Some(truncate(now));
    }
}

fn set_running_condition(
    status: &mut AtStatus,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    set_condition(
        &mut status.conditions,
        Condition::new(
            CONDITION_READY,
            ConditionStatus::False,
            reason::RUNNING,
            message,
            generation,
            now,
        ),
    );
}

/// The reason of the `Ready` condition, if any.
fn ready_reason(status: &AtStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .map(|c| c.reason.as_str())
}

fn started_event(pod_name: &str, command: &str) -> PlannedEvent {
    PlannedEvent {
        type_: PlannedEventType::Normal,
        reason: reason::STARTED,
        message: format!("running {command:?} in pod {pod_name}"),
    }
}

/// `metav1.Time` has whole seconds on the wire; keeping the same precision in memory makes a
/// status read back from the server compare equal to the one that was written.
fn truncate(t: Timestamp) -> Timestamp {
    crate::apis::conditions::truncate_to_seconds(t)
}

fn changed(current: &AtStatus, new: AtStatus) -> Option<AtStatus> {
    (new != *current).then_some(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const NOW: &str = "2030-06-01T12:00:00Z";

    fn at(schedule: &str, command: &str, status: Option<AtStatus>) -> At {
        At {
            metadata: ObjectMeta {
                name: Some("example-at".into()),
                namespace: Some("cnat".into()),
                uid: Some("uid-at".into()),
                generation: Some(1),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: AtSpec::new(schedule, command),
            status,
        }
    }

    fn with_phase(mut a: At, now: Timestamp) -> At {
        // Runs the planner until it settles with its pod just created and seen (still
        // pending), applying its status like the server would.
        loop {
            let pod = pod_of(&a, "Pending", None);
            let p = plan(&a, PodState::Present(&pod), now);
            match p.status {
                Some(s) => a.status = Some(s),
                None => return a,
            }
        }
    }

    fn pod_of(a: &At, phase: &str, exit: Option<i32>) -> Pod {
        let mut p = new_pod(a);
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: exit.map(|code| {
                vec![ContainerStatus {
                    name: POD_CONTAINER_NAME.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pending_not_due_persists_pending_and_requeues_exactly_at_the_due_time() {
        let a = at("2030-06-01T12:00:42Z", "echo YAY", None);
        let p = plan(&a, PodState::Absent, ts(NOW));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(42)));
        assert_eq!(p.create_pod, None);
        let st = p.status.expect("PENDING is written");
        assert_eq!(st.phase, Some(AtPhase::Pending));
        assert_eq!(st.observed_generation, Some(1));
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, reason::SCHEDULED);
        assert_eq!(p.events[0].type_, PlannedEventType::Normal);

        // The same observation a moment later: nothing new to write or say, only the timer.
        let a2 = At {
            status: Some(st),
            ..a
        };
        let later = ts("2030-06-01T12:00:40.5Z");
        let p2 = plan(&a2, PodState::Absent, later);
        assert_eq!(p2.status, None);
        assert!(p2.events.is_empty());
        assert_eq!(p2.requeue_after, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn sub_second_schedules_are_exact() {
        let a = at("2030-06-01T12:00:00.250Z", "true", None);
        let p = plan(&a, PodState::Absent, ts(NOW));
        assert_eq!(p.requeue_after, Some(Duration::from_millis(250)));
    }

    #[test]
    fn due_goes_running_with_its_pod_and_running_comes_before_done() {
        let a = at(
            "2030-06-01T12:00:00Z",
            "echo YAY | tr A-Z a-z > /dev/null && exit 0",
            None,
        );
        let p = plan(&a, PodState::Absent, ts(NOW));
        assert_eq!(p.requeue_after, None);
        let pod = p.create_pod.expect("pod created");
        assert_eq!(pod.metadata.name.as_deref(), Some("example-at-pod"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("cnat"));
        let owners = pod.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "At");
        assert_eq!(owners[0].api_version, "cnat.programming-kubernetes.info/v1");
        assert_eq!(owners[0].uid, "uid-at");
        assert_eq!(owners[0].controller, Some(true));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.containers[0].command.as_deref().unwrap(),
            [
                "/bin/sh",
                "-c",
                "echo YAY | tr A-Z a-z > /dev/null && exit 0"
            ]
        );
        assert!(is_controlled_by(&pod, &a));
        // With the pod, RUNNING (the sync writes it before the create) and Started.
        let st = p.status.expect("RUNNING is written with the pod");
        assert_eq!(st.phase, Some(AtPhase::Running));
        assert_eq!(st.pod_name.as_deref(), Some("example-at-pod"));
        assert_eq!(st.start_time, Some(ts(NOW)));
        assert_eq!(
            st.message.as_deref(),
            Some("pod example-at-pod created, waiting for it to run")
        );
        let reasons: Vec<&str> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [reason::STARTED]);
        let running = At {
            status: Some(st),
            ..a.clone()
        };

        // The create's pod, not yet in the cache: wait, write nothing.
        assert_eq!(plan(&running, PodState::Expected, ts(NOW)), Plan::default());
        // Seen, still pending: nothing new.
        let seen = pod_of(&a, "Pending", None);
        let p = plan(
            &running,
            PodState::Present(&seen),
            ts("2030-06-01T12:00:03Z"),
        );
        assert_eq!(p, Plan::default());

        // Finished: DONE from RUNNING, Completed; the start time stays.
        let finished = pod_of(&a, "Succeeded", Some(0));
        let p = plan(
            &running,
            PodState::Present(&finished),
            ts("2030-06-01T12:00:03Z"),
        );
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Done));
        assert_eq!(st.result, Some(AtResult::Succeeded));
        assert_eq!(st.start_time, Some(ts(NOW)));
        let reasons: Vec<&str> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [reason::COMPLETED]);
    }

    #[test]
    fn past_schedules_fire_at_once() {
        let a = at("2019-04-12T10:12:00Z", "echo YAY", None);
        let p = plan(&a, PodState::Absent, ts(NOW));
        assert!(p.create_pod.is_some());
        assert_eq!(p.status.unwrap().phase, Some(AtPhase::Running));
    }

    #[test]
    fn running_without_pod_creates_it_unless_one_is_expected() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "true", None), ts(NOW));
        assert_eq!(a.phase(), AtPhase::Running);

        // Expected: the informer has not seen our pod yet; never create a second one.
        let p = plan(&a, PodState::Expected, ts(NOW));
        assert_eq!(p, Plan::default());

        // Absent and not expected: the pod was deleted while running, or the controller
        // stopped between the RUNNING write and the create; create it (its name is fixed, so
        // there is never a second one).
        let p = plan(&a, PodState::Absent, ts(NOW));
        assert!(p.create_pod.is_some());
        assert_eq!(p.events[0].reason, reason::STARTED);
        assert!(
            p.events[0].message.contains("its pod was not found"),
            "{:?}",
            p.events
        );
    }

    #[test]
    fn running_pod_waits_for_its_next_event() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "sleep 10", None), ts(NOW));
        let pod = pod_of(&a, "Running", None);
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        assert_eq!(p.create_pod, None);
        assert_eq!(p.requeue_after, None);
        assert!(p.events.is_empty());
        let st = p.status.expect("message says the pod runs");
        assert_eq!(st.phase, Some(AtPhase::Running));
        assert_eq!(st.message.as_deref(), Some("pod example-at-pod is Running"));
        let settled = At {
            status: Some(st),
            ..a
        };
        assert_eq!(
            plan(&settled, PodState::Present(&pod), ts(NOW)),
            Plan::default()
        );
    }

    #[test]
    fn succeeded_pod_makes_it_done() {
        let a = with_phase(
            at("2030-06-01T11:00:00Z", "echo YAY", None),
            ts("2030-06-01T11:00:00Z"),
        );
        let pod = pod_of(&a, "Succeeded", Some(0));
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Done));
        assert_eq!(st.result, Some(AtResult::Succeeded));
        assert_eq!(st.exit_code, Some(0));
        assert_eq!(st.start_time, Some(ts("2030-06-01T11:00:00Z")));
        assert_eq!(st.completion_time, Some(ts(NOW)));
        let ready =
            crate::apis::conditions::find_condition(&st.conditions, CONDITION_READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, reason::COMPLETED);
        assert_eq!(p.events[0].type_, PlannedEventType::Normal);
    }

    #[test]
    fn failed_pod_makes_it_done_with_the_exit_code() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "exit 3", None), ts(NOW));
        let pod = pod_of(&a, "Failed", Some(3));
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Done));
        assert_eq!(st.result, Some(AtResult::Failed));
        assert_eq!(st.exit_code, Some(3));
        assert_eq!(
            st.message.as_deref(),
            Some("pod example-at-pod failed: the command exited with 3 (Error)")
        );
        assert_eq!(p.events[0].type_, PlannedEventType::Warning);
        assert_eq!(p.events[0].reason, reason::FAILED);
    }

    #[test]
    fn failed_pod_without_container_status_keeps_the_pods_reason() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "true", None), ts(NOW));
        let mut pod = pod_of(&a, "Failed", None);
        pod.status.as_mut().unwrap().reason = Some("Evicted".into());
        let st = plan(&a, PodState::Present(&pod), ts(NOW)).status.unwrap();
        assert_eq!(st.exit_code, None);
        assert_eq!(
            st.message.as_deref(),
            Some("pod example-at-pod failed: Evicted")
        );
    }

    #[test]
    fn pending_due_with_a_finished_pod_goes_running_then_done() {
        // A pod that finished before its At left PENDING (created by an older version of the
        // controller, which created the pod before writing RUNNING): RUNNING first, and a
        // requeue at once, whose sync writes DONE.
        let a = at("2030-06-01T11:00:00Z", "echo YAY", None);
        let pod = pod_of(&a, "Succeeded", Some(0));
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        assert_eq!(p.create_pod, None);
        assert_eq!(p.requeue_after, Some(Duration::ZERO));
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Running));
        let reasons: Vec<_> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [reason::STARTED]);
        let running = At {
            status: Some(st),
            ..a
        };
        let p = plan(&running, PodState::Present(&pod), ts(NOW));
        assert_eq!(p.status.unwrap().phase, Some(AtPhase::Done));
        let reasons: Vec<_> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [reason::COMPLETED]);
    }

    #[test]
    fn done_does_nothing_ever() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "true", None), ts(NOW));
        let pod = pod_of(&a, "Succeeded", Some(0));
        let done = At {
            status: plan(&a, PodState::Present(&pod), ts(NOW)).status,
            ..a
        };
        assert_eq!(done.phase(), AtPhase::Done);
        for state in [
            PodState::Absent,
            PodState::Expected,
            PodState::Present(&pod),
        ] {
            assert_eq!(
                plan(&done, state, ts("2031-01-01T00:00:00Z")),
                Plan::default()
            );
        }
        // Even a spec change (new generation, now invalid) leaves a DONE At alone.
        let mut edited = done.clone();
        edited.metadata.generation = Some(2);
        edited.spec.schedule = "garbage".into();
        assert_eq!(plan(&edited, PodState::Absent, ts(NOW)), Plan::default());
    }

    #[test]
    fn foreign_pod_is_reported_and_never_taken_over() {
        let a = at("2030-06-01T11:00:00Z", "true", None);
        let mut foreign = pod_of(&a, "Succeeded", Some(0));
        foreign.metadata.owner_references = None;
        let p = plan(&a, PodState::Present(&foreign), ts(NOW));
        assert_eq!(p.create_pod, None);
        assert_eq!(p.requeue_after, None);
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Pending), "the At did not start");
        assert_eq!(st.result, None);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].type_, PlannedEventType::Warning);
        assert_eq!(p.events[0].reason, reason::ERR_RESOURCE_EXISTS);
        assert_eq!(
            p.events[0].message,
            "Resource \"example-at-pod\" already exists and is not managed by At"
        );
        // Seen again: nothing new to write, no second event.
        let again = At {
            status: Some(st),
            ..a.clone()
        };
        assert_eq!(
            plan(&again, PodState::Present(&foreign), ts(NOW)),
            Plan::default()
        );

        // A pod controlled by another At (different UID) is foreign too.
        let mut other = pod_of(&a, "Running", None);
        other.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-other".into();
        assert!(!is_controlled_by(&other, &a));
        assert_eq!(
            plan(&a, PodState::Present(&other), ts(NOW)).events[0].reason,
            reason::ERR_RESOURCE_EXISTS
        );
    }

    #[test]
    fn invalid_spec_sets_a_condition_once_and_never_requeues() {
        for (schedule, command, field) in [
            ("tomorrow", "echo hi", "spec.schedule"),
            ("", "echo hi", "spec.schedule"),
            ("2030-06-01", "echo hi", "spec.schedule"),
            ("2030-06-01T12:00:00Z", "", "spec.run.command"),
            ("2030-06-01T12:00:00Z", "   ", "spec.run.command"),
        ] {
            let a = at(schedule, command, None);
            let p = plan(&a, PodState::Absent, ts(NOW));
            assert_eq!(p.requeue_after, None, "{schedule:?} {command:?}");
            assert_eq!(p.create_pod, None);
            let st = p.status.clone().unwrap();
            assert_eq!(st.phase, Some(AtPhase::Pending));
            let cond =
                crate::apis::conditions::find_condition(&st.conditions, CONDITION_INVALID_SPEC)
                    .unwrap();
            assert_eq!(cond.status, ConditionStatus::True);
            assert!(cond.message.contains(field), "{}", cond.message);
            assert_eq!(p.events.len(), 1);
            assert_eq!(p.events[0].type_, PlannedEventType::Warning);
            assert_eq!(p.events[0].reason, reason::INVALID_SPEC);
            // The next sync (triggered by our own status write) changes nothing.
            let settled = At {
                status: Some(st),
                ..a
            };
            assert_eq!(plan(&settled, PodState::Absent, ts(NOW)), Plan::default());
        }
    }

    #[test]
    fn fixing_the_spec_clears_the_condition_and_schedules() {
        let bad = with_phase(at("tomorrow", "echo hi", None), ts(NOW));
        let mut fixed = bad.clone();
        fixed.spec.schedule = "2030-06-01T13:00:00Z".into();
        fixed.metadata.generation = Some(2);
        let p = plan(&fixed, PodState::Absent, ts(NOW));
        let st = p.status.unwrap();
        assert!(
            crate::apis::conditions::find_condition(&st.conditions, CONDITION_INVALID_SPEC)
                .is_none()
        );
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(3600)));
        assert_eq!(p.events[0].reason, reason::SCHEDULED);
    }

    #[test]
    fn rescheduling_a_pending_at_moves_the_timer() {
        let a = with_phase(at("2030-06-01T13:00:00Z", "true", None), ts(NOW));
        let mut moved = a.clone();
        moved.spec.schedule = "2030-06-01T12:30:00Z".into();
        moved.metadata.generation = Some(2);
        let p = plan(&moved, PodState::Absent, ts(NOW));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(1800)));
        assert_eq!(p.events[0].reason, reason::SCHEDULED);
        assert!(p.status.is_some());
    }

    #[test]
    fn pod_being_deleted_is_waited_for() {
        let a = with_phase(at("2030-06-01T11:00:00Z", "sleep 100", None), ts(NOW));
        let mut pod = pod_of(&a, "Running", None);
        pod.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        assert_eq!(p.create_pod, None);
        assert!(p.status.unwrap().message.unwrap().contains("being deleted"));
    }

    #[test]
    fn the_run_fields_reach_the_pod() {
        let mut a = at("2030-06-01T11:00:00Z", "sleep 100", None);
        let pod = new_pod(&a);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("busybox:1.36"));
        assert_eq!(spec.active_deadline_seconds, None);
        a.spec.run.image = Some("alpine:3.20".into());
        a.spec.run.active_deadline_seconds = Some(7);
        let spec = new_pod(&a).spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("alpine:3.20"));
        assert_eq!(spec.active_deadline_seconds, Some(7));
    }

    #[test]
    fn a_pod_past_its_deadline_ends_the_at_deadline_exceeded() {
        let mut a = at("2030-06-01T11:00:00Z", "sleep 100", None);
        a.spec.run.active_deadline_seconds = Some(1);
        let a = with_phase(a, ts(NOW));
        // As the kubelet reports it (pkg/kubelet/active_deadline.go): Failed, DeadlineExceeded.
        let mut pod = pod_of(&a, "Failed", Some(137));
        let status = pod.status.as_mut().unwrap();
        status.reason = Some("DeadlineExceeded".into());
        status.message =
            Some("Pod was active on the node longer than the specified deadline".into());
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        let st = p.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Done));
        assert_eq!(st.result, Some(AtResult::DeadlineExceeded));
        assert_eq!(
            st.message.as_deref(),
            Some(
                "pod example-at-pod was stopped at its activeDeadlineSeconds: Pod was active on the node longer than the specified deadline"
            )
        );
        let ready =
            crate::apis::conditions::find_condition(&st.conditions, CONDITION_READY).unwrap();
        assert_eq!(ready.reason, "DeadlineExceeded");
        assert_eq!(p.events[0].type_, PlannedEventType::Warning);
        assert_eq!(p.events[0].reason, reason::DEADLINE_EXCEEDED);
        // A plain failure is still Failed.
        let failed = pod_of(&a, "Failed", Some(1));
        assert_eq!(finished(&failed).unwrap().result, AtResult::Failed);
    }

    #[test]
    fn the_finished_pod_is_deleted_ttl_after_done_and_the_at_stays_done() {
        let mut a = at("2030-06-01T11:00:00Z", "true", None);
        a.spec.run.ttl_seconds_after_finished = Some(30);
        let a = with_phase(a, ts(NOW));
        let mut pod = pod_of(&a, "Succeeded", Some(0));
        pod.metadata.uid = Some("uid-pod".into());
        let p = plan(&a, PodState::Present(&pod), ts(NOW));
        // DONE is written, and the TTL timer set from the completion time.
        assert_eq!(p.requeue_after, Some(Duration::from_secs(30)));
        let done = At {
            status: p.status,
            ..a
        };
        assert_eq!(done.phase(), AtPhase::Done);
        // Early: wait for the rest of the TTL.
        let p = plan(&done, PodState::Present(&pod), ts("2030-06-01T12:00:20Z"));
        assert_eq!(p.requeue_after, Some(Duration::from_secs(10)));
        assert_eq!(p.delete_pod, None);
        // Due: delete our pod, with its UID; the status is not touched.
        let p = plan(&done, PodState::Present(&pod), ts("2030-06-01T12:00:30Z"));
        assert_eq!(
            p.delete_pod,
            Some(("example-at-pod".into(), "uid-pod".into()))
        );
        assert_eq!(p.status, None);
        assert_eq!(p.events[0].reason, reason::POD_DELETED);
        // Gone, being deleted, or not ours: nothing.
        assert_eq!(
            plan(&done, PodState::Absent, ts("2030-06-01T13:00:00Z")),
            Plan::default()
        );
        let mut deleting = pod.clone();
        deleting.metadata.deletion_timestamp = Some(Time(ts(NOW)));
        assert_eq!(
            plan(
                &done,
                PodState::Present(&deleting),
                ts("2030-06-01T13:00:00Z")
            ),
            Plan::default()
        );
        let mut foreign = pod.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(
            plan(
                &done,
                PodState::Present(&foreign),
                ts("2030-06-01T13:00:00Z")
            ),
            Plan::default()
        );
        // Without a TTL the pod is kept.
        let mut kept = done.clone();
        kept.spec.run.ttl_seconds_after_finished = None;
        assert_eq!(
            plan(&kept, PodState::Present(&pod), ts("2031-01-01T00:00:00Z")),
            Plan::default()
        );
    }

    /// The cache and the written-status records hold a `DONE` At slimmed: the slim copy must
    /// decide exactly as the whole one, in every pod state and at every time, and no decision
    /// may write its (slimmed) status back.
    #[test]
    fn a_slim_done_at_decides_as_the_whole_one_and_is_never_written_back() {
        for (pod_phase, exit) in [("Succeeded", Some(0)), ("Failed", Some(3))] {
            for ttl in [None, Some(30)] {
                let mut a = at("2030-06-01T11:00:00Z", "echo done", None);
                a.spec.run.ttl_seconds_after_finished = ttl;
                let a = with_phase(a, ts(NOW));
                let mut pod = pod_of(&a, pod_phase, exit);
                pod.metadata.uid = Some("uid-pod".into());
                let whole = At {
                    status: plan(&a, PodState::Present(&pod), ts(NOW)).status,
                    ..a
                };
                assert_eq!(whole.phase(), AtPhase::Done);
                let st = whole.status.as_ref().expect("DONE is written");
                assert!(st.message.is_some() && !st.conditions.is_empty() && st.pod_name.is_some());

                let mut slim = whole.clone();
                slim_done_status(slim.status.as_mut().expect("a status"));
                slim_done_spec(&mut slim.spec);
                assert_eq!(
                    (slim.spec.schedule.as_str(), slim.spec.run.command.as_str()),
                    ("", "")
                );
                assert_eq!(slim.spec.run.ttl_seconds_after_finished, ttl);
                let s = slim.status.as_ref().expect("a status");
                assert_eq!(
                    (&s.message, s.conditions.len(), &s.pod_name),
                    (&None, 0, &None)
                );
                assert_eq!(
                    (
                        s.phase,
                        s.result,
                        s.exit_code,
                        s.start_time,
                        s.completion_time
                    ),
                    (
                        st.phase,
                        st.result,
                        st.exit_code,
                        st.start_time,
                        st.completion_time
                    )
                );

                let mut deleting = pod.clone();
                deleting.metadata.deletion_timestamp = Some(Time(ts(NOW)));
                let mut foreign = pod.clone();
                foreign.metadata.owner_references = None;
                for now in [
                    "2030-06-01T12:00:10Z",
                    "2030-06-01T12:00:30Z",
                    "2031-01-01T00:00:00Z",
                ] {
                    for state in [
                        PodState::Present(&pod),
                        PodState::Present(&deleting),
                        PodState::Present(&foreign),
                        PodState::Expected,
                        PodState::Absent,
                    ] {
                        let p = plan(&slim, state, ts(now));
                        assert_eq!(
                            p,
                            plan(&whole, state, ts(now)),
                            "{pod_phase} ttl {ttl:?} {now}"
                        );
                        assert_eq!(p.status, None, "a DONE At's status is never written");
                    }
                }
            }
        }
        // Only DONE is slimmed: an earlier phase's message and conditions are the next write's base.
        let running = with_phase(at("2030-06-01T11:00:00Z", "true", None), ts(NOW));
        let mut status = running.status.clone().expect("RUNNING");
        slim_done_status(&mut status);
        assert_eq!(Some(status), running.status);
    }

    #[test]
    fn a_done_write_is_remembered_slim() {
        let written = WrittenStatuses::default();
        let mut stored = at("2030-06-01T11:00:00Z", "true", None);
        stored.metadata.resource_version = Some("9".into());
        stored.status = Some(AtStatus {
            phase: Some(AtPhase::Done),
            pod_name: Some("example-at-pod".into()),
            message: Some("the command exited 0".into()),
            conditions: vec![Condition {
                type_: CONDITION_READY.into(),
                status: ConditionStatus::True,
                last_transition_time: ts(NOW),
                reason: "Succeeded".into(),
                message: "the command exited 0".into(),
                observed_generation: None,
            }],
            ..AtStatus::default()
        });
        written.record("cnat/example-at", &stored);
        let cached = Arc::new(at("2030-06-01T11:00:00Z", "true", None));
        let eff = written.effective("cnat/example-at", cached);
        let mut slim = stored.status.clone().expect("a status");
        slim_done_status(&mut slim);
        assert_eq!(eff.status, Some(slim));
        assert_eq!(eff.metadata.resource_version.as_deref(), Some("9"));
    }

    #[test]
    fn a_record_is_settled_by_the_update_that_catches_up_and_only_by_that() {
        let written = WrittenStatuses::default();
        let cached = at("2030-06-01T11:00:00Z", "true", None);
        let mut stored = cached.clone();
        stored.metadata.resource_version = Some("9".into());
        stored.status = Some(AtStatus {
            phase: Some(AtPhase::Running),
            ..AtStatus::default()
        });
        written.record("cnat/example-at", &stored);
        // An update that is still behind our write (another field, same old version) keeps it.
        written.settle("cnat/example-at", &AtSummary::from_at(&cached));
        assert_eq!(written.len(), 1);
        // Another key's update does not touch it.
        written.settle("cnat/other", &AtSummary::from_at(&stored));
        assert_eq!(written.len(), 1);
        // The informer delivering our write forgets it: no record waits for the next sync.
        written.settle("cnat/example-at", &AtSummary::from_at(&stored));
        assert!(written.is_empty());
    }

    #[test]
    fn written_status_wins_until_the_cache_catches_up() {
        let written = WrittenStatuses::default();
        let cached = Arc::new(at("2030-06-01T11:00:00Z", "true", None));
        // Nothing written: the cache is used as is.
        assert!(Arc::ptr_eq(
            &written.effective("cnat/example-at", Arc::clone(&cached)),
            &cached
        ));

        let mut stored = cached.as_ref().clone();
        stored.metadata.resource_version = Some("9".into());
        stored.status = Some(AtStatus {
            phase: Some(AtPhase::Done),
            ..AtStatus::default()
        });
        written.record("cnat/example-at", &stored);

        // The cache still shows the older (PENDING, rv 7) object: act on what was written.
        let eff = written.effective("cnat/example-at", Arc::clone(&cached));
        assert_eq!(eff.phase(), AtPhase::Done);
        assert_eq!(eff.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(
            plan(&eff, PodState::Absent, ts(NOW)),
            Plan::default(),
            "no new pod"
        );

        // The same phase but an older cache (our PENDING write not seen yet, status still
        // empty there): what was written wins, with its resourceVersion.
        let written_pending = WrittenStatuses::default();
        let mut pending = cached.as_ref().clone();
        pending.metadata.resource_version = Some("8".into());
        pending.status = plan(&cached, PodState::Absent, ts(NOW)).status;
        written_pending.record("cnat/example-at", &pending);
        let eff = written_pending.effective("cnat/example-at", Arc::clone(&cached));
        assert_eq!(eff.metadata.resource_version.as_deref(), Some("8"));
        // A spec change after the write (a later generation) means the cache is newer.
        let mut edited = cached.as_ref().clone();
        edited.metadata.generation = Some(2);
        let edited = Arc::new(edited);
        assert!(Arc::ptr_eq(
            &written_pending.effective("cnat/example-at", Arc::clone(&edited)),
            &edited
        ));

        // A different object with the same name (deleted and re-created) is not confused.
        let mut other = cached.as_ref().clone();
        other.metadata.uid = Some("uid-new".into());
        let other = Arc::new(other);
        assert!(Arc::ptr_eq(
            &written.effective("cnat/example-at", Arc::clone(&other)),
            &other
        ));
        assert!(written.is_empty(), "the stale record was dropped");

        // Caught up: the cache is used again and the record dropped.
        written.record("cnat/example-at", &stored);
        let caught_up = Arc::new(stored.clone());
        assert!(Arc::ptr_eq(
            &written.effective("cnat/example-at", Arc::clone(&caught_up)),
            &caught_up
        ));
        assert!(written.is_empty());
    }

    #[test]
    fn pod_events_route_to_the_controlling_at_only() {
        let a = at("2030-06-01T11:00:00Z", "true", None);
        let pod = new_pod(&a);
        assert_eq!(
            owned::owner_key::<At>(&pod.metadata).as_deref(),
            Some("cnat/example-at")
        );
        let mut orphan = pod.clone();
        orphan.metadata.owner_references = None;
        assert_eq!(owned::owner_key::<At>(&orphan.metadata), None);
    }

    #[test]
    fn controller_of_checks_kind_and_group() {
        let a = at("2030-06-01T11:00:00Z", "true", None);
        let mut pod = new_pod(&a);
        assert!(at_controller_of(&pod).is_some());
        pod.metadata.owner_references.as_mut().unwrap()[0].api_version =
            "other.example.com/v1".into();
        assert!(
            at_controller_of(&pod).is_none(),
            "the book ignored the group"
        );
        let mut pod = new_pod(&a);
        pod.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert!(
            at_controller_of(&pod).is_none(),
            "only a controller ref counts"
        );
    }

    /// A pod whose controller reference moves from one At to another wakes both: the At it left
    /// must notice its pod is gone, the new one must adopt it (the drift the shared
    /// `owned::owner_handlers` fixed for the At controller).
    #[tokio::test]
    async fn a_moved_controller_reference_enqueues_the_old_and_the_new_at() {
        use sample_client_go::cache::ResourceEventHandler;
        let queue = RateLimitingQueue::<QueueKey>::with_default_controller_rate_limiter();
        let handlers = owner_handlers::<At, Pod>(&queue, None);
        let mut a = at("2030-01-01T00:00:00Z", "echo a", None);
        a.metadata.name = Some("a".into());
        a.metadata.uid = Some("uid-a".into());
        let mut b = at("2030-01-01T00:00:00Z", "echo b", None);
        b.metadata.name = Some("b".into());
        b.metadata.uid = Some("uid-b".into());
        let mut old = new_pod(&a);
        old.metadata.resource_version = Some("1".into());
        let mut new = old.clone();
        new.metadata.owner_references = Some(vec![controller_ref(&b)]);
        new.metadata.resource_version = Some("2".into());
        ResourceEventHandler::on_update(&handlers, Arc::new(old), Arc::new(new));
        let mut keys = vec![queue.get().await.unwrap(), queue.get().await.unwrap()];
        keys.sort();
        assert_eq!(keys, ["cnat/a", "cnat/b"]);
    }
}
