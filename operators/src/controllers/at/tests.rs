use super::*;
use crate::slim::slim_done_spec;
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
    let ready = crate::apis::conditions::find_condition(&st.conditions, CONDITION_READY).unwrap();
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
        let cond = crate::apis::conditions::find_condition(&st.conditions, CONDITION_INVALID_SPEC)
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
        crate::apis::conditions::find_condition(&st.conditions, CONDITION_INVALID_SPEC).is_none()
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
    status.message = Some("Pod was active on the node longer than the specified deadline".into());
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
    let ready = crate::apis::conditions::find_condition(&st.conditions, CONDITION_READY).unwrap();
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
        ownership::owner_key::<At>(&pod.metadata).as_deref(),
        Some("cnat/example-at")
    );
    let mut orphan = pod.clone();
    orphan.metadata.owner_references = None;
    assert_eq!(ownership::owner_key::<At>(&orphan.metadata), None);
}

#[test]
fn controller_of_checks_kind_and_group() {
    let a = at("2030-06-01T11:00:00Z", "true", None);
    let mut pod = new_pod(&a);
    assert!(at_controller_of(&pod).is_some());
    pod.metadata.owner_references.as_mut().unwrap()[0].api_version = "other.example.com/v1".into();
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
/// `ownership::owner_handlers` fixed for the At controller).
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
