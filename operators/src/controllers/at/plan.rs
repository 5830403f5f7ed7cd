//! The decision: a pure function from what was observed (the At, its pod, the time) to what
//! to do (a status, a pod to create or delete, events, when to look again).

use super::*;
use crate::apis::at::DEFAULT_IMAGE;
use crate::apis::conditions::truncate_to_seconds;

/// The image the At's pod runs when `spec.run.image` is unset. Pinned (a `:latest` tag would
/// make every start pull).
pub const POD_IMAGE: &str = DEFAULT_IMAGE;

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
    truncate_to_seconds(t)
}

fn changed(current: &AtStatus, new: AtStatus) -> Option<AtStatus> {
    (new != *current).then_some(new)
}
