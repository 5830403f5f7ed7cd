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
//! Counted by the embedded API server's request log (`tests/integration/operators/at_requests.rs`), with
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
//! ([`crate::controllers::get_existing`]), labels it if its controller ownerReference is this At's,
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
use crate::controllers::get_existing;
use crate::slim::{AtSummary, PodSummary, slim_done_status};
use sample_client_go::cache::{
    Deleted, EventHandlerFns, Lister, ListerWatcherSource, ObjectMetaAccess, OwnerRef,
    SharedInformerFactory, SmallString, UidString, key_of, split_key,
};
use sample_client_go::client::{self, Api, Client, DeleteParams, PostParams, Preconditions};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::{
    Clock, Expectations, Operator, RunError, SyncHandler, SyncStats, Workers,
};
use sample_controller_runtime::controller::{QueueKey, note};
use sample_controller_runtime::ownership::{
    self, LABEL_MANAGED_BY, controller_ref_of, owner_handlers,
};

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

mod error;
mod outcome;
mod plan;
mod pod;
#[cfg(test)]
mod tests;
mod validate;
mod written;

pub use error::SyncError;
pub use outcome::{Outcome, finished};
pub use plan::*;
pub use pod::{at_controller_of, controller_ref, is_controlled_by, new_pod};
pub use validate::validate_spec;
pub use written::WrittenStatuses;

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
        // The same handler every owning operator uses (`ownership::owner_handlers`), so a pod whose
        // controller reference moves to another At also wakes the At it left.
        let pod_handler = owner_handlers::<At, PodSummary>(&queue, Some(Arc::clone(&expectations)));
        let pod_synced = pod_informer
            .add_event_handler(pod_handler)
            .map_err(RunError::informer::<Self>)?;

        let at_lister = at_informer.lister();
        let workers = Workers::new(queue, stats, vec![at_synced, pod_synced])
            .release_drained(&at_lister, &client, Some(Arc::clone(&expectations)))
            .replay_from(&at_lister);
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
    /// Creates the At's pod (step 2 of a due At, after `RUNNING` was written). A name taken
    /// already is looked up once ([`get_existing`]): ours from before the managed-by
    /// label is adopted and decided on again; someone else's becomes a status. `Ok(None)`: the
    /// status write found the At gone, so the sync is over.
    async fn launch_pod(
        &self,
        key: &str,
        at: &Arc<At>,
        stored: Option<At>,
        namespace: &str,
        new_pod: Box<Pod>,
        plan: &mut Plan,
    ) -> Result<Option<()>, SyncError> {
        let pod_name = at.pod_name();
        let namespace = namespace.to_string();
        // Expect before creating: the informer's add may beat the create's response.
        self.expectations.expect_creations(key, 1);
        let pp = PostParams {
            field_manager: Some(CONTROLLER_NAME.to_string()),
            ..PostParams::default()
        };
        // The created pod is not read (the informer brings it): its answer is checked to be
        // JSON and not decoded.
        let pods = Api::<Pod>::namespaced(self.client.clone(), &namespace);
        match pods.create_as::<serde::de::IgnoredAny>(&pp, &new_pod).await {
            Ok(_) => tracing::info!(key, pod = %pod_name, "pod launched"),
            Err(source) if source.is_already_exists() => {
                // Nothing will arrive for this create. A pod of that name the cache does
                // not show: ours from before the managed-by label, or someone else's. One
                // GET tells (and labels ours); decide again with it, from the status just
                // written.
                self.expectations.creation_observed(key);
                // The rare path: its state (a GET, a PATCH, the pod) is boxed, not kept
                // inline in every sync's future.
                let existing =
                    Box::pin(get_existing(&pods, at.as_ref(), &pod_name, CONTROLLER_NAME))
                        .await
                        .map(Box::new)
                        .map_err(|source| SyncError::CreatePod {
                            namespace: namespace.clone(),
                            pod: pod_name.clone(),
                            source,
                        })?;
                // The At as just written (the cache may not show it yet).
                let now_at = stored.unwrap_or_else(|| at.as_ref().clone());
                let mut again = self::plan(&now_at, PodState::Present(&existing), self.clock.now());
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

        Ok(Some(()))
    }

    /// Deletes a finished pod past `ttlSecondsAfterFinished`, under a uid precondition (a pod
    /// of that name made since is not ours to delete).
    async fn delete_finished_pod(
        &self,
        key: &str,
        namespace: &str,
        pod_name: String,
        uid: String,
        plan: &mut Plan,
    ) -> Result<(), SyncError> {
        let namespace = namespace.to_string();
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

        Ok(())
    }

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
        // The answer is read for what a status write changes (`StatusAnswer`); the rest of the
        // stored At is what was sent.
        let ats = Api::<At>::all(self.client.clone());
        match Box::pin(ats.update_status_as::<StatusAnswer>(&pp, &updated)).await {
            Ok(answer) => {
                let stored = answer.onto(updated);
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

/// What the answer to a status write is read for: the object's identity and new revision and the
/// status as stored. A `PUT` of `/status` with the sent resourceVersion changes nothing else
/// (the server takes only the status from it, and a write over a newer object is a conflict), so
/// the stored At is the sent one with these (`StatusAnswer::onto`); decoding the whole answer
/// (its managedFields, spec and metadata) for that was a twentieth of the controller's CPU.
#[derive(serde::Deserialize)]
struct StatusAnswer {
    #[serde(default)]
    metadata: AnswerMeta,
    #[serde(default)]
    status: Option<AtStatus>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerMeta {
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
}

impl StatusAnswer {
    /// The stored At: `sent` with the answer's revision, generation and status.
    fn onto(self, mut sent: At) -> At {
        if self.metadata.uid.is_some() {
            sent.metadata.uid = self.metadata.uid;
        }
        sent.metadata.resource_version = self.metadata.resource_version;
        if self.metadata.generation.is_some() {
            sent.metadata.generation = self.metadata.generation;
        }
        sent.status = self.status;
        sent
    }
}

/// The plan in one line, for a trace of the At's key: the phase it is in and what the pod
/// lister said, then what it writes, creates, deletes, and when it looks again.
fn describe(at: &At, pod: PodState<'_>, plan: &Plan) -> String {
    let seen = match pod {
        PodState::Absent => "no pod".to_owned(),
        PodState::Expected => "pod created, not yet in the cache".to_owned(),
        PodState::Present(p) => format!(
            "pod {}",
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("without a phase")
        ),
    };
    let mut doing = Vec::new();
    if let Some(status) = &plan.status {
        let phase = status.phase.unwrap_or_default();
        match &status.message {
            Some(m) if phase != AtPhase::Done => doing.push(format!("write {phase} ({m})")),
            _ => doing.push(format!("write {phase}")),
        }
    }
    if let Some(p) = &plan.create_pod {
        doing.push(format!(
            "create pod {}",
            p.metadata.name.as_deref().unwrap_or_default()
        ));
    }
    if let Some((name, _)) = &plan.delete_pod {
        doing.push(format!("delete pod {name}"));
    }
    match plan.requeue_after {
        Some(d) => doing.push(format!(
            "look again in {}",
            sample_client_go::keytrace::seconds(d)
        )),
        None if doing.is_empty() => doing.push("nothing to do".to_owned()),
        None => {}
    }
    format!("plan: {} with {seen} → {}", at.phase(), doing.join(", "))
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
        // What it decided, in a trace of this key (only built when someone traces it).
        note(|| describe(&at, state, &plan));

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
            let launched = self
                .launch_pod(key, &at, stored, &namespace, new_pod, &mut plan)
                .await?;
            if launched.is_none() {
                return Ok(None);
            }
        }
        if let Some((pod_name, uid)) = plan.delete_pod.take() {
            self.delete_finished_pod(key, &namespace, pod_name, uid, &mut plan)
                .await?;
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
