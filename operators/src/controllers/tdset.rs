//! # The TDSet controller: time-driven requeue
//!
//! A [`TDSet`] is a Deployment whose size follows the clock: "5 replicas from 9 to 17, 2 from 19
//! to midnight, 3 otherwise", in the time zone `spec.timeZone`. What it teaches is how a
//! controller acts on **time** without polling. Nothing in the cluster changes at 9:00, so no
//! watch event will come; the controller must ask the queue to bring the key back exactly then.
//! The sync handler returns `Ok(Some(d))`, the worker loop calls `forget(key)` (a success clears
//! the failure history) and `add_after(key, d)`, and the delaying queue wakes the key once, at
//! the boundary. Between boundaries the controller does
//! nothing at all (the Go original this follows polled every `intervalMint` minutes).
//!
//! ## The sync handler, step by step
//!
//! 1. **Read the TDSet from the lister.** Gone: nothing to do (the garbage collector removes
//!    the Deployment and the Service through their ownerReferences).
//! 2. **Validate the spec** ([`validate`]): the time zone must be a known IANA name, hours
//!    0–23, replica counts not negative, `intervalMint` 1–1440. A bad spec gets a Warning
//!    `InvalidSpec` event and `Degraded=True`, and is not retried: retrying cannot fix it, the
//!    next spec change brings the key back.
//! 3. **Decide the replica count for now** ([`desired_replicas`]): the hour of the current
//!    instant *in the TDSet's time zone* selects the first window containing it (a window whose
//!    end is not after its start wraps past midnight: `19 → 0` is 19:00–24:00; the Go original
//!    compared `start <= hour < end` and so never matched it); outside every window,
//!    `defaultReplica`.
//! 4. **Make the Deployment so** (create it, or put back replicas, image, port and labels:
//!    hand-scaling is corrected, spec changes roll in), and the Service when `spec.service` is
//!    set (deleted again when it is unset). Both carry a controller ownerReference and the
//!    `app.kubernetes.io/*` labels. A Deployment of that name owned by someone else is never
//!    taken over: Warning `ErrResourceExists`, `Degraded=True`. The controller records the
//!    count it asked for in the Deployment's `schedule.rs/desired-replicas` annotation, so a
//!    later sync can tell a window change (Normal `Scaled`) from a hand-scaling (Normal
//!    `DriftCorrected`) by the object alone: the TDSet's status cannot, because the cache may
//!    not have delivered the controller's own status write when the hand-scaling arrives.
//! 5. **Write the status** when it changed: `replicas`, `observedGeneration`, and the
//!    conditions `Available` (the Deployment has the replicas available), `Progressing` (it has
//!    not caught up with the last change yet) and `Degraded` (something the user must fix).
//!    The write carries the cached `resourceVersion`: a 409 Conflict means the cache has not
//!    yet delivered the controller's own previous write, and the retry (5 ms later, with
//!    backoff) reads the newer copy, exactly as in sample-controller.
//! 6. **Return the time until the next boundary** ([`next_boundary`]): the next whole hour, in
//!    the time zone, at which the selected window changes, capped by `intervalMint` when it is
//!    set. Hours are walked in *civil* time and converted back to instants, so half-hour zones
//!    (Asia/Kolkata) and DST days (a skipped or repeated hour) land on the right instant.
//!
//! Every sync of the same TDSet computes the same next boundary, and the delaying queue keeps
//! one timer per key at the earliest requested time, so however many events arrive between two
//! boundaries, exactly one wake-up happens at each boundary.

use std::sync::Arc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::apis::conditions::{Condition, ConditionStatus, set_condition};
use crate::apis::{TDSet, TDSetSpec, TDSetStatus};
use sample_client_go::cache::{
    Deleted, EventHandlerFns, Lister, ListerWatcherSource, SharedInformerFactory, key_of, split_key,
};
use sample_client_go::client::{Api, Client, DeleteParams, PostParams};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::QueueKey;
use sample_controller_runtime::controller::{
    Clock, Expectations, Operator, RunError, SyncHandler, SyncStats, Workers, object_to_sync,
};
use sample_controller_runtime::ownership::{
    SyncError, dependent_metadata, deployment_drift, is_controlled_by, owner_handlers,
    standard_labels, write_status_if_changed,
};

/// The recorder's source component and the field manager of every write.
pub const CONTROLLER_NAME: &str = "tdset-controller";

/// The name of the Deployment's only container.
pub const CONTAINER_NAME: &str = "app";

/// The annotation in which the controller records, on the Deployment, the replica count it
/// last asked for, as the Deployment controller records `deployment.kubernetes.io/desired-replicas`
/// on its ReplicaSets. A count that differs from the record was changed by someone else
/// (`DriftCorrected`); a record that differs from the window's count means the window moved
/// (`Scaled`). The record lives on the object, so it survives restarts and never lags behind
/// the controller's own write the way the TDSet's cached status can.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "schedule.rs/desired-replicas";

/// The replica count recorded in [`DESIRED_REPLICAS_ANNOTATION`], if any and readable.
fn recorded_replicas(deployment: &Deployment) -> Option<i32> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(DESIRED_REPLICAS_ANNOTATION)?
        .parse()
        .ok()
}

/// Condition types.
pub const CONDITION_AVAILABLE: &str = "Available";
/// See [`CONDITION_AVAILABLE`].
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// See [`CONDITION_AVAILABLE`].
pub const CONDITION_DEGRADED: &str = "Degraded";

/// Event and condition reasons.
pub mod reason {
    /// Normal: the Deployment was scaled to a new window's count.
    pub const SCALED: &str = "Scaled";
    /// Normal: the Deployment was created.
    pub const CREATED: &str = "Created";
    /// Normal: the Deployment had drifted (hand-scaled, edited) and was put back.
    pub const DRIFT_CORRECTED: &str = "DriftCorrected";
    /// Warning: the spec cannot be acted on.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Warning: a Deployment or Service of that name is not controlled by this TDSet.
    pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// Condition: all is well.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Condition: the Deployment has the replicas available.
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Condition: the Deployment has fewer replicas available than wanted.
    pub const REPLICAS_UNAVAILABLE: &str = "ReplicasUnavailable";
    /// Condition: the Deployment is catching up with a change.
    pub const SCALING: &str = "Scaling";
    /// Condition: the Deployment caught up.
    pub const COMPLETE: &str = "Complete";
}

// ---------------------------------------------------------------------------------------------
// The schedule: pure functions of the spec and the instant.
// ---------------------------------------------------------------------------------------------

/// Checks what the schema cannot (the time zone) and what it may not have been given the
/// chance to (objects written before the CRD had a schema). Returns the resolved time zone,
/// or a message naming the field and its value.
pub fn validate(spec: &TDSetSpec) -> Result<TimeZone, String> {
    for (i, w) in spec.scheduling_config.iter().enumerate() {
        for (field, hour) in [("startTime", w.start_time), ("endTime", w.end_time)] {
            if !(0..=23).contains(&hour) {
                return Err(format!(
                    "spec.schedulingConfig[{i}].{field}: {hour} is not an hour (0-23)"
                ));
            }
        }
        if w.replica < 0 {
            return Err(format!(
                "spec.schedulingConfig[{i}].replica: {} is negative",
                w.replica
            ));
        }
    }
    if spec.default_replica < 0 {
        return Err(format!(
            "spec.defaultReplica: {} is negative",
            spec.default_replica
        ));
    }
    if let Some(m) = spec.interval_mint
        && !(1..=1440).contains(&m)
    {
        return Err(format!("spec.intervalMint: {m} is not within 1-1440"));
    }
    match spec.time_zone.as_deref() {
        None | Some("") => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name)
            .map_err(|e| format!("spec.timeZone: {name:?} is not a known time zone ({e})")),
    }
}

/// The index of the window that decides `hour` (the first one containing it), if any.
fn window_at(spec: &TDSetSpec, hour: i32) -> Option<usize> {
    spec.scheduling_config.iter().position(|w| w.contains(hour))
}

/// The hour (0–23) of `now` in `tz`.
fn hour_in(tz: &TimeZone, now: Timestamp) -> i32 {
    i32::from(now.to_zoned(tz.clone()).hour())
}

/// The replica count for the instant `now`: the window containing its hour in `tz`, else
/// `defaultReplica`.
pub fn desired_replicas(spec: &TDSetSpec, tz: &TimeZone, now: Timestamp) -> i32 {
    spec.replicas_at_hour(hour_in(tz, now))
}

/// The first instant after `now` at which the deciding window changes (a whole hour in `tz`),
/// or `None` when it never does (no windows, or one window all day).
pub fn next_boundary(spec: &TDSetSpec, tz: &TimeZone, now: Timestamp) -> Option<Timestamp> {
    let boundary = |hour: i32| window_at(spec, hour) != window_at(spec, (hour + 23) % 24);
    if !(0..24).any(boundary) {
        return None;
    }
    let civil = now.to_zoned(tz.clone()).datetime();
    let this_hour = civil
        .with()
        .minute(0)
        .second(0)
        .subsec_nanosecond(0)
        .build()
        .ok()?;
    // Two days of civil hours cover any boundary, even across a DST change.
    for k in 1..=48i64 {
        let candidate = this_hour.checked_add(k.hours()).ok()?;
        if !boundary(i32::from(candidate.hour())) {
            continue;
        }
        let at = tz
            .to_ambiguous_zoned(candidate)
            .compatible()
            .ok()?
            .timestamp();
        if at > now {
            return Some(at);
        }
    }
    None
}

/// How long to wait before looking again: until the next boundary, capped by `intervalMint`.
pub fn requeue_after(spec: &TDSetSpec, tz: &TimeZone, now: Timestamp) -> Option<Duration> {
    let until_boundary = next_boundary(spec, tz, now)
        .map(|t| Duration::try_from(now.duration_until(t)).unwrap_or(Duration::ZERO));
    let cap = spec
        .interval_mint
        .map(|m| Duration::from_secs(60 * u64::from(m.unsigned_abs())));
    match (until_boundary, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

// ---------------------------------------------------------------------------------------------
// The controller.
// ---------------------------------------------------------------------------------------------

/// The TDSet controller. Build it with [`TDSetController::new`], start the factory, then
/// [`run`](sample_controller_runtime::controller::run) it (the manager does both).
pub struct TDSetController {
    client: Client,
    tdset_lister: Lister<TDSet>,
    deployment_lister: Lister<Deployment>,
    service_lister: Lister<Service>,
    workers: Workers,
    recorder: EventRecorder,
    expectations: Arc<Expectations>,
    clock: Clock,
}

impl TDSetController {
    /// `NewController`: TDSet adds and spec changes, and any change to a Deployment or Service
    /// a TDSet controls, enqueue the TDSet. Nothing runs until the factory is started.
    pub fn new<S: ListerWatcherSource>(
        client: Client,
        factory: &SharedInformerFactory<S>,
        recorder: EventRecorder,
        queue: RateLimitingQueue<QueueKey>,
        clock: Clock,
        stats: SyncStats,
    ) -> Result<Arc<Self>, RunError> {
        let tdset_informer = factory.informer::<TDSet>();
        let deployment_informer = factory.informer::<Deployment>();
        let service_informer = factory.informer::<Service>();
        let expectations = Arc::new(Expectations::default());

        // Only spec changes (and the start of a deletion) matter: the controller's own status
        // writes and the informer's resyncs are not work. The time-driven wake-ups come from
        // the queue, not from here.
        let tdset_handler = {
            let (q1, q2) = (queue.clone(), queue.clone());
            let e = Arc::clone(&expectations);
            EventHandlerFns::<TDSet>::new()
                .on_add(move |t, _initial| q1.add(key_of(t.as_ref()).into()))
                .on_update(move |old, new| {
                    if old.spec != new.spec
                        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                    {
                        q2.add(key_of(new.as_ref()).into());
                    }
                })
                .on_delete(move |gone: Deleted<TDSet>| e.forget(&gone.key()))
        };
        let tdset_synced = tdset_informer
            .add_event_handler(tdset_handler)
            .map_err(RunError::informer::<Self>)?;
        let deployment_synced = deployment_informer
            .add_event_handler(owner_handlers::<TDSet, Deployment>(
                &queue,
                Some(Arc::clone(&expectations)),
            ))
            .map_err(RunError::informer::<Self>)?;
        let service_synced = service_informer
            .add_event_handler(owner_handlers::<TDSet, Service>(&queue, None))
            .map_err(RunError::informer::<Self>)?;

        let tdset_lister = tdset_informer.lister();
        let workers = Workers::new(
            queue,
            stats,
            vec![tdset_synced, deployment_synced, service_synced],
        )
        .release_drained(&tdset_lister, &client, Some(Arc::clone(&expectations)))
        .replay_from(&tdset_lister);
        Ok(Arc::new(TDSetController {
            client,
            tdset_lister,
            deployment_lister: deployment_informer.lister(),
            service_lister: service_informer.lister(),
            workers,
            recorder,
            expectations,
            clock,
        }))
    }
}

/// `Run` is the shared [`sample_controller_runtime::controller::run`]: it waits for the three caches, then starts the
/// workers.
impl Operator for TDSetController {
    const NAME: &'static str = "tdset";

    fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl SyncHandler for TDSetController {
    type Error = SyncError;

    /// `syncHandler` (see the module documentation for the six steps).
    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, SyncError> {
        // 1. (none when deleted, or released to the sharder)
        let Some(tdset) = object_to_sync(&self.tdset_lister, &self.expectations, key) else {
            return Ok(None);
        };
        if tdset.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let now = self.clock.now();
        let mut status = tdset.status.clone().unwrap_or_default();
        status.observed_generation = tdset.metadata.generation;
        let pp = PostParams::with_field_manager(CONTROLLER_NAME);

        // 2.
        let tz = match validate(&tdset.spec) {
            Ok(tz) => tz,
            Err(message) => {
                self.degraded(&tdset, status, reason::INVALID_SPEC, message, now, &pp)
                    .await?;
                return Ok(None);
            }
        };

        // 3.
        let replicas = desired_replicas(&tdset.spec, &tz, now);
        let next = requeue_after(&tdset.spec, &tz, now);

        // 4.
        let (namespace, name) = split_key(key);
        let namespace = namespace.unwrap_or_default();
        let deployment = match self
            .sync_deployment(key, &tdset, replicas, status.replicas, &pp)
            .await?
        {
            DeploymentSync::Synced(deployment) => deployment,
            DeploymentSync::AwaitingCache => return Ok(next),
            DeploymentSync::NotOurs(message) => {
                return self.resource_exists(&tdset, status, message, &pp).await;
            }
        };
        if let Err(message) = self.sync_service(&tdset, namespace, name, &pp).await? {
            return self.resource_exists(&tdset, status, message, &pp).await;
        }

        // 5.
        status.replicas = replicas;
        for (type_, st, why, message) in conditions(deployment.as_deref(), name, replicas) {
            set_condition(
                &mut status.conditions,
                Condition::new(type_, st, why, message, tdset.metadata.generation, now),
            );
        }
        write_status_if_changed(&self.client, &pp, &*tdset, status).await?;

        // 6.
        Ok(next)
    }

    fn is_conflict(err: &SyncError) -> bool {
        err.is_conflict()
    }

    /// A Warning `ReconciliationFailed` event on the object with the error (see
    /// [`sample_controller_runtime::controller::record_reconcile_error`]).
    fn on_sync_error(&self, key: &str, message: &str) {
        sample_controller_runtime::controller::record_reconcile_error(
            &self.tdset_lister,
            &self.recorder,
            key,
            message,
        );
    }
}

impl TDSetController {
    /// Creates, corrects or deletes the Service. `Ok(Err(message))` reports a Service of that
    /// name that this TDSet does not control.
    async fn sync_service(
        &self,
        tdset: &TDSet,
        namespace: &str,
        name: &str,
        pp: &PostParams,
    ) -> Result<Result<(), String>, SyncError> {
        let key = key_of(tdset);
        let api = Api::<Service>::namespaced(self.client.clone(), namespace);
        let existing = self.service_lister.get_by_key(&key);
        let err = |action, e| SyncError::api::<TDSet>(&key, action, e);
        if let Some(s) = &existing
            && !is_controlled_by(&s.metadata, tdset)
        {
            if tdset.spec.service.is_some() {
                return Ok(Err(format!(
                    "Resource {name:?} already exists and is not managed by TDSet"
                )));
            }
            return Ok(Ok(()));
        }
        match (new_service(tdset), existing) {
            (None, Some(_)) => match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(err("deleting the Service", e)),
            },
            (None, None) => {}
            (Some(want), None) => match api.create(pp, &want).await {
                Ok(_) => {}
                // Created by an earlier sync the cache has not seen yet.
                Err(e) if e.is_already_exists() => {}
                Err(e) => return Err(err("creating the Service", e)),
            },
            (Some(want), Some(have)) => {
                let want_spec = want.spec.unwrap_or_default();
                let have_spec = have.spec.clone().unwrap_or_default();
                if have_spec.ports != want_spec.ports || have_spec.selector != want_spec.selector {
                    let mut fixed = have.as_ref().clone();
                    let spec = fixed.spec.get_or_insert_with(ServiceSpec::default);
                    spec.ports = want_spec.ports;
                    spec.selector = want_spec.selector;
                    api.update(pp, &fixed)
                        .await
                        .map_err(|e| err("updating the Service", e))?;
                }
            }
        }
        Ok(Ok(()))
    }

    /// A Deployment or Service of the TDSet's name that it does not control: `Degraded=True`
    /// with reason `ErrResourceExists`, and no requeue (the user must remove or rename it).
    async fn resource_exists(
        &self,
        tdset: &TDSet,
        status: TDSetStatus,
        message: String,
        pp: &PostParams,
    ) -> Result<Option<Duration>, SyncError> {
        let now = self.clock.now();
        self.degraded(tdset, status, reason::ERR_RESOURCE_EXISTS, message, now, pp)
            .await?;
        Ok(None)
    }

    /// `Degraded=True` with `why` and `message` (a Warning event when the condition changed),
    /// written as the TDSet's status; the sync then stops until the user fixes the cause.
    async fn degraded(
        &self,
        tdset: &TDSet,
        mut status: TDSetStatus,
        why: &'static str,
        message: String,
        now: Timestamp,
        pp: &PostParams,
    ) -> Result<(), SyncError> {
        let cond = Condition::new(
            CONDITION_DEGRADED,
            ConditionStatus::True,
            why,
            message.as_str(),
            tdset.metadata.generation,
            now,
        );
        if set_condition(&mut status.conditions, cond) {
            self.recorder
                .event(tdset, EventType::Warning, why, &message);
        }
        write_status_if_changed(&self.client, pp, tdset, status).await
    }
}

/// What step 4 found of the TDSet's Deployment.
enum DeploymentSync {
    /// The cached Deployment, corrected if it had drifted; `None` when it was just created
    /// (the cache has not delivered it yet, so its status is unknown).
    Synced(Option<Arc<Deployment>>),
    /// Created by an earlier sync and not in the cache yet: creating again would be a
    /// duplicate, so wait for the informer.
    AwaitingCache,
    /// A Deployment of that name that this TDSet does not control (the message says so); it
    /// is never taken over.
    NotOurs(String),
}

impl TDSetController {
    /// Step 4 for the Deployment: create it (expecting its arrival in the cache), or put back
    /// replicas, image, port and labels if it drifted, with a Normal `Created`, `Scaled` or
    /// `DriftCorrected` event. The Deployment's [`DESIRED_REPLICAS_ANNOTATION`] tells a
    /// hand-scaled Deployment from a window change; `status_replicas`, the count the status
    /// last reported, stands in for it on a Deployment that has none.
    async fn sync_deployment(
        &self,
        key: &str,
        tdset: &TDSet,
        replicas: i32,
        status_replicas: i32,
        pp: &PostParams,
    ) -> Result<DeploymentSync, SyncError> {
        let (namespace, name) = split_key(key);
        let Some(desired) = new_deployment(tdset, replicas) else {
            return Err(SyncError::missing_uid::<TDSet, Deployment>(key));
        };
        let deployments =
            Api::<Deployment>::namespaced(self.client.clone(), namespace.unwrap_or_default());
        let Some(deployment) = self.deployment_lister.get_by_key(key) else {
            if !self.expectations.satisfied(key) {
                return Ok(DeploymentSync::AwaitingCache);
            }
            self.expectations
                .expecting(key, deployments.create(pp, &desired))
                .await
                .map_err(|e| SyncError::api::<TDSet>(key, "creating the Deployment", e))?;
            self.recorder.event(
                tdset,
                EventType::Normal,
                reason::CREATED,
                &format!("created Deployment {name} with {replicas} replica(s)"),
            );
            return Ok(DeploymentSync::Synced(None));
        };
        if !is_controlled_by(&deployment.metadata, tdset) {
            return Ok(DeploymentSync::NotOurs(format!(
                "Resource {name:?} already exists and is not managed by TDSet"
            )));
        }
        let recorded = recorded_replicas(&deployment);
        let drifted = deployment_drift(&deployment, &desired);
        let template_or_count_drifted = drifted.is_some();
        let mut fixed = match drifted {
            Some(fixed) => fixed,
            // Nothing to put back, but the record is stale (the window changed to the count
            // the Deployment already had by hand): bring the record up to date, silently.
            None if recorded != Some(replicas) => deployment.as_ref().clone(),
            None => return Ok(DeploymentSync::Synced(Some(deployment))),
        };
        fixed
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                DESIRED_REPLICAS_ANNOTATION.to_string(),
                replicas.to_string(),
            );
        let was = deployment.spec.as_ref().and_then(|s| s.replicas);
        deployments
            .update(pp, &fixed)
            .await
            .map_err(|e| SyncError::api::<TDSet>(key, "updating the Deployment", e))?;
        // The record says what this controller last asked for. Asked for `replicas` already:
        // someone else changed the count. Asked for something else: the window moved. A
        // Deployment without the record (made by an older controller) falls back to the
        // status, which can lag behind the controller's own last write.
        let hand_scaled = recorded.map_or(status_replicas == replicas, |r| r == replicas);
        let event = if !template_or_count_drifted {
            None
        } else if was == Some(replicas) {
            Some((
                reason::DRIFT_CORRECTED,
                format!("Deployment {name} updated to the TDSet's template"),
            ))
        } else if hand_scaled {
            Some((
                reason::DRIFT_CORRECTED,
                format!("Deployment {name} was changed by hand; set back to {replicas}"),
            ))
        } else {
            Some((
                reason::SCALED,
                format!("scaled Deployment {name} to {replicas} replica(s)"),
            ))
        };
        if let Some((why, message)) = event {
            tracing::info!(key, replicas, "{message}");
            self.recorder.event(tdset, EventType::Normal, why, &message);
        }
        Ok(DeploymentSync::Synced(Some(deployment)))
    }
}

/// Step 5's conditions, from what the cache says of the Deployment (`None` right after its
/// creation): `Available` (it has `replicas` available), `Progressing` (it has not caught up
/// with the last change: generation observed, spec, updated, current and available replicas
/// all at `replicas`) and `Degraded=False` (a sync that gets here found nothing to fix).
fn conditions(
    deployment: Option<&Deployment>,
    name: &str,
    replicas: i32,
) -> [(&'static str, ConditionStatus, &'static str, String); 3] {
    let available = deployment
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let caught_up = deployment.is_some_and(|d| {
        let s = d.status.clone().unwrap_or_default();
        s.observed_generation >= d.metadata.generation
            && d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
            && s.updated_replicas.unwrap_or(0) == replicas
            && s.replicas.unwrap_or(0) == replicas
            && available == replicas
    });
    [
        if available >= replicas && deployment.is_some() {
            (
                CONDITION_AVAILABLE,
                ConditionStatus::True,
                reason::MINIMUM_REPLICAS_AVAILABLE,
                format!("{available} of {replicas} replica(s) available"),
            )
        } else {
            (
                CONDITION_AVAILABLE,
                ConditionStatus::False,
                reason::REPLICAS_UNAVAILABLE,
                format!("{available} of {replicas} replica(s) available"),
            )
        },
        if caught_up {
            (
                CONDITION_PROGRESSING,
                ConditionStatus::False,
                reason::COMPLETE,
                format!("Deployment {name} runs {replicas} replica(s)"),
            )
        } else {
            (
                CONDITION_PROGRESSING,
                ConditionStatus::True,
                reason::SCALING,
                format!("Deployment {name} is scaling to {replicas} replica(s)"),
            )
        },
        (
            CONDITION_DEGRADED,
            ConditionStatus::False,
            reason::AS_EXPECTED,
            String::new(),
        ),
    ]
}

/// The Deployment a TDSet wants at `replicas`: named like it, controlled by it, labelled
/// `app.kubernetes.io/{name=tdset,instance=<name>,managed-by=tdset-controller}`, one container
/// `app` with the image and port, and `replicas` recorded in [`DESIRED_REPLICAS_ANNOTATION`].
/// `None` if the TDSet has no uid.
pub fn new_deployment(tdset: &TDSet, replicas: i32) -> Option<Deployment> {
    let name = tdset.metadata.name.clone().unwrap_or_default();
    let labels = standard_labels("tdset", &name, CONTROLLER_NAME);
    let mut metadata = dependent_metadata(tdset, &name, labels.clone())?;
    metadata.annotations = Some(std::collections::BTreeMap::from([(
        DESIRED_REPLICAS_ANNOTATION.to_string(),
        replicas.to_string(),
    )]));
    Some(Deployment {
        metadata,
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER_NAME.to_string(),
                        image: Some(tdset.spec.container.image.clone()),
                        ports: Some(vec![ContainerPort {
                            container_port: tdset.spec.container.port,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// The Service a TDSet wants when `spec.service` is set: named like it, selecting its pods,
/// `spec.service.port` → the container port. `None` when no Service is wanted (or no uid).
pub fn new_service(tdset: &TDSet) -> Option<Service> {
    let port = tdset.spec.service.as_ref()?.port;
    let name = tdset.metadata.name.clone().unwrap_or_default();
    let labels = standard_labels("tdset", &name, CONTROLLER_NAME);
    Some(Service {
        metadata: dependent_metadata(tdset, &name, labels.clone())?,
        spec: Some(ServiceSpec {
            selector: Some(labels),
            ports: Some(vec![ServicePort {
                port,
                target_port: Some(IntOrString::Int(tdset.spec.container.port)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The apis' test schedule with a default of 1 replica, in `tz`.
    fn hello_world(tz: Option<&str>) -> TDSetSpec {
        TDSetSpec {
            default_replica: 1,
            time_zone: tz.map(str::to_string),
            ..crate::apis::tdset::tests::hello_world()
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn boundaries_are_window_changes_in_the_zone() {
        let spec = hello_world(None);
        let tz = validate(&spec).unwrap();
        let now = ts("2030-06-01T09:30:00Z");
        assert_eq!(desired_replicas(&spec, &tz, now), 5);
        assert_eq!(
            next_boundary(&spec, &tz, now),
            Some(ts("2030-06-01T17:00:00Z"))
        );
        // 19 → 0 wraps; midnight falls back to the default until 01:00.
        let evening = ts("2030-06-01T19:00:00Z");
        assert_eq!(desired_replicas(&spec, &tz, evening), 2);
        assert_eq!(
            next_boundary(&spec, &tz, evening),
            Some(ts("2030-06-02T00:00:00Z"))
        );
        let midnight = ts("2030-06-02T00:00:00Z");
        assert_eq!(desired_replicas(&spec, &tz, midnight), 1);
        assert_eq!(
            next_boundary(&spec, &tz, midnight),
            Some(ts("2030-06-02T01:00:00Z"))
        );
    }

    #[test]
    fn half_hour_zones_and_dst_days_land_on_the_right_instant() {
        let spec = hello_world(Some("Asia/Kolkata"));
        let tz = validate(&spec).unwrap();
        // 03:00Z is 08:30 in Kolkata: window 7–9; next boundary 09:00 IST = 03:30Z.
        let now = ts("2030-06-01T03:00:00Z");
        assert_eq!(desired_replicas(&spec, &tz, now), 3);
        assert_eq!(
            next_boundary(&spec, &tz, now),
            Some(ts("2030-06-01T03:30:00Z"))
        );

        // New York on the day DST starts (2030-03-10, 02:00 → 03:00): from 01:30 EST the next
        // boundary is 07:00 EDT = 11:00Z, six civil hours but five real ones.
        let spec = hello_world(Some("America/New_York"));
        let tz = validate(&spec).unwrap();
        let now = ts("2030-03-10T06:30:00Z");
        assert_eq!(desired_replicas(&spec, &tz, now), 2);
        assert_eq!(
            next_boundary(&spec, &tz, now),
            Some(ts("2030-03-10T11:00:00Z"))
        );
    }

    #[test]
    fn interval_caps_and_windowless_specs() {
        let mut spec = hello_world(None);
        let tz = validate(&spec).unwrap();
        let now = ts("2030-06-01T09:30:00Z");
        assert_eq!(
            requeue_after(&spec, &tz, now),
            Some(Duration::from_secs(7 * 3600 + 1800))
        );
        spec.interval_mint = Some(15);
        assert_eq!(
            requeue_after(&spec, &tz, now),
            Some(Duration::from_secs(900))
        );
        spec.interval_mint = None;
        spec.scheduling_config.clear();
        assert_eq!(requeue_after(&spec, &tz, now), None, "nothing ever changes");
    }

    #[test]
    fn invalid_specs_name_the_field_and_value() {
        let mut spec = hello_world(Some("Mars/Olympus_Mons"));
        let e = validate(&spec).unwrap_err();
        assert!(
            e.contains("spec.timeZone") && e.contains("Mars/Olympus_Mons"),
            "{e}"
        );
        spec.time_zone = None;
        spec.scheduling_config[1].end_time = 24;
        let e = validate(&spec).unwrap_err();
        assert!(e.contains("spec.schedulingConfig[1].endTime: 24"), "{e}");
        spec.scheduling_config[1].end_time = 19;
        spec.interval_mint = Some(0);
        assert!(validate(&spec).unwrap_err().contains("spec.intervalMint"));
    }
}
