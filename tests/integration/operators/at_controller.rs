//! The At controller end to end: an embedded API server over real HTTP, the controller
//! manager in-process, and pods finished by the test (the kubelet's part).

use crate::support;

use std::time::Duration;

use sample_client_go::client::{DeleteParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::conditions::find_condition;
use sample_operators::apis::{AtPhase, AtResult, ConditionStatus};
use sample_operators::controllers::at::{CONDITION_INVALID_SPEC, reason};
use support::at::*;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

#[tokio::test(start_paused = true)]
async fn a_year_ahead_completes_in_virtual_time_and_starts_at_the_due_instant() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;

    let schedule = in_the_future(&clock, YEAR);
    create_at(&client, &at("yearly", &schedule, "echo YAY")).await;
    let pending = wait_for_phase(&client, "yearly", AtPhase::Pending).await;
    let st = pending.status.unwrap();
    assert!(st.message.unwrap().contains(&schedule));
    wait_for_event(&client, "yearly", reason::SCHEDULED).await;

    // One second before the due time: no pod, still PENDING.
    let due = schedule.parse::<jiff::Timestamp>().unwrap();
    advance_settled(
        clock.until(due) - Duration::from_secs(1),
        Duration::from_secs(24 * 3600),
    )
    .await;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !pod_exists(&client, "yearly-pod").await,
            "pod created early"
        );
    }
    assert_eq!(phase(&client, "yearly").await, AtPhase::Pending);

    // At the due instant the pod is created and the At is RUNNING, started exactly then.
    wait_for_pod(&client, "yearly-pod").await;
    let running = wait_for_phase(&client, "yearly", AtPhase::Running).await;
    assert_eq!(running.status.unwrap().start_time, Some(due));

    finish_pod(&client, "yearly-pod", 0).await;
    let done = wait_for_phase(&client, "yearly", AtPhase::Done).await;
    let st = done.status.unwrap();
    assert_eq!(st.result, Some(AtResult::Succeeded));
    assert_eq!(st.exit_code, Some(0));
    assert!(st.completion_time.is_some());
    let ready = find_condition(&st.conditions, "Ready").unwrap();
    assert_eq!(ready.status, ConditionStatus::True);
    wait_for_event(&client, "yearly", reason::STARTED).await;
    wait_for_event(&client, "yearly", reason::COMPLETED).await;

    let log = server.request_log();
    assert_eq!(log.count("create", "pods"), 1);
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_command_ends_done_failed_with_its_exit_code() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    create_at(
        &client,
        &at("fails", &in_the_future(&clock, Duration::ZERO), "exit 3"),
    )
    .await;
    let pod = wait_for_pod(&client, "fails-pod").await;
    let spec = pod.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(
        spec.containers[0].command.as_deref().unwrap(),
        ["/bin/sh", "-c", "exit 3"]
    );
    finish_pod(&client, "fails-pod", 3).await;
    let done = wait_for_phase(&client, "fails", AtPhase::Done).await;
    let st = done.status.unwrap();
    assert_eq!(st.result, Some(AtResult::Failed));
    assert_eq!(st.exit_code, Some(3));
    let warning = wait_for_event(&client, "fails", reason::FAILED).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(warning.message.unwrap().contains("exited with 3"));
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_deleted_while_running_is_recreated_once_and_never_after_done() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    create_at(
        &client,
        &at("flaky", &in_the_future(&clock, Duration::ZERO), "sleep 60"),
    )
    .await;
    let first = wait_for_pod(&client, "flaky-pod").await;
    start_pod(&client, "flaky-pod").await;
    wait_for_phase(&client, "flaky", AtPhase::Running).await;

    pods(&client)
        .delete("flaky-pod", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the pod to be recreated", || async {
        pods(&client)
            .get_opt("flaky-pod")
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.uid != first.metadata.uid)
    })
    .await;
    let log = server.request_log();
    assert_eq!(log.count("create", "pods"), 2);
    assert_eq!(
        log.count_code("create", "pods", 409),
        0,
        "no duplicate create"
    );

    finish_pod(&client, "flaky-pod", 0).await;
    wait_for_phase(&client, "flaky", AtPhase::Done).await;

    // DONE is final: deleting the pod now changes nothing, however long we wait.
    pods(&client)
        .delete("flaky-pod", &DeleteParams::default())
        .await
        .unwrap();
    advance_settled(Duration::from_secs(3600), Duration::from_secs(300)).await;
    assert!(!pod_exists(&client, "flaky-pod").await);
    assert_eq!(log.count("create", "pods"), 2);
    assert_eq!(phase(&client, "flaky").await, AtPhase::Done);
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_spec_gets_an_event_and_a_condition_and_no_more_syncs() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    // A command of spaces passes the schema's minLength but cannot run.
    create_at(
        &client,
        &at("blank", &in_the_future(&clock, Duration::ZERO), "   "),
    )
    .await;
    let warning = wait_for_event(&client, "blank", reason::INVALID_SPEC).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(warning.message.unwrap().contains("spec.run.command"));
    let at = ats(&client).get("blank").await.unwrap();
    let st = at.status.unwrap();
    assert_eq!(st.phase, Some(AtPhase::Pending));
    let cond = find_condition(&st.conditions, CONDITION_INVALID_SPEC).unwrap();
    assert_eq!(cond.status, ConditionStatus::True);

    // Let the status write's own update event be processed, then nothing more happens.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let syncs = manager.syncs();
    let writes = server
        .request_log()
        .count_subresource("update", "ats", "status");
    advance_settled(Duration::from_secs(3 * 3600), Duration::from_secs(300)).await;
    // The only syncs in three hours are the informer's resyncs (every 10 minutes), and they
    // write nothing: no hot loop, no backoff retries.
    assert!(
        manager.syncs() - syncs <= 18,
        "{} syncs",
        manager.syncs() - syncs
    );
    assert_eq!(
        server
            .request_log()
            .count_subresource("update", "ats", "status"),
        writes
    );
    assert!(!pod_exists(&client, "blank-pod").await);

    // Fixing the spec brings it back to life.
    let mut fixed = ats(&client).get("blank").await.unwrap();
    fixed.spec.run.command = "echo fixed".into();
    ats(&client)
        .update(&PostParams::default(), &fixed)
        .await
        .unwrap();
    wait_for_pod(&client, "blank-pod").await;
    let at = wait_for_phase(&client, "blank", AtPhase::Running).await;
    assert!(find_condition(&at.status.unwrap().conditions, CONDITION_INVALID_SPEC).is_none());
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_foreign_pod_with_the_same_name_is_reported_and_left_alone() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    let foreign = k8s_openapi::api::core::v1::Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("taken-pod".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "other".into(),
                image: Some("nginx".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let foreign = pods(&client)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    create_at(
        &client,
        &at("taken", &in_the_future(&clock, Duration::ZERO), "true"),
    )
    .await;
    let warning = wait_for_event(&client, "taken", reason::ERR_RESOURCE_EXISTS).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(
        warning.message.as_deref(),
        Some("Resource \"taken-pod\" already exists and is not managed by At")
    );
    advance_settled(Duration::from_secs(60), Duration::from_secs(10)).await;
    let after = pods(&client).get("taken-pod").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, foreign.metadata.resource_version,
        "the foreign pod was not touched"
    );
    // The pod carries no managed-by label, so the pod cache does not show it: the controller's
    // create answers 409, and one GET shows the pod is someone else's. Bounded: one try for the
    // first sync and one for each sync its two status writes (RUNNING, then ErrResourceExists)
    // cause, never a loop.
    let log = server.request_log();
    assert_eq!(log.count_code("create", "pods", 201), 1, "only the test's");
    let refused = log.count_code("create", "pods", 409);
    assert!((1..=3).contains(&refused), "{refused} refused creates");
    // Every GET of a pod but the test's own (`after`) is the controller's, one per refusal.
    assert_eq!(
        log.count_where(|k| k.verb == "get" && k.resource == "pods"),
        refused + 1
    );
    assert_ne!(phase(&client, "taken").await, AtPhase::Done);
    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// `spec.run` end to end on a node that runs commands (the embedded server's process runtime,
/// which enforces `activeDeadlineSeconds` as the kubelet does): the image and deadline reach the
/// pod, a command that outlives its deadline ends the At `DONE` with `DeadlineExceeded`, and the
/// finished pod is deleted `ttlSecondsAfterFinished` after that while the At stays `DONE`.
/// Real time: the command sleeps for a minute, the deadline is one second, the TTL one second.
#[tokio::test]
async fn a_deadline_ends_the_at_deadline_exceeded_and_the_ttl_deletes_its_pod() {
    use embedded_cluster::Cluster;
    use embedded_cluster::NodeRuntime;
    sample_client_go::install_crypto_provider();
    init_tracing();
    let server = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .start()
        .await
        .unwrap();
    let client = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .unwrap();
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;

    let mut slow = at("slow", &in_the_future(&clock, Duration::ZERO), "sleep 60");
    slow.spec.run.image = Some("alpine:3.20".into());
    slow.spec.run.active_deadline_seconds = Some(1);
    slow.spec.run.ttl_seconds_after_finished = Some(1);
    create_at(&client, &slow).await;
    let pod = wait_for_pod(&client, "slow-pod").await;
    let spec = pod.spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(1));
    assert_eq!(spec.containers[0].image.as_deref(), Some("alpine:3.20"));

    let done = wait_for_phase(&client, "slow", AtPhase::Done).await;
    let st = done.status.unwrap();
    assert_eq!(st.result, Some(AtResult::DeadlineExceeded), "{st:?}");
    assert!(
        st.message
            .as_deref()
            .unwrap()
            .contains("was stopped at its activeDeadlineSeconds"),
        "{st:?}"
    );
    let ready = find_condition(&st.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "DeadlineExceeded");
    let warning = wait_for_event(&client, "slow", reason::DEADLINE_EXCEEDED).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));

    // The TTL: the pod goes, the At stays DONE with its result.
    wait_for_event(&client, "slow", reason::POD_DELETED).await;
    wait_until("slow-pod deleted", || async {
        !pod_exists(&client, "slow-pod").await
    })
    .await;
    let after = ats(&client).get("slow").await.unwrap();
    assert_eq!(after.phase(), AtPhase::Done);
    assert_eq!(
        after.status.unwrap().result,
        Some(AtResult::DeadlineExceeded)
    );
    // Deleted once, and never recreated.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pod_exists(&client, "slow-pod").await);
    assert_eq!(server.request_log().count("create", "pods"), 1);
    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// Without a deadline or TTL, a v1 At whose pod the test finishes is DONE and its pod kept;
/// with `ttlSecondsAfterFinished: 0` the finished pod is deleted at once (virtual time).
#[tokio::test(start_paused = true)]
async fn a_zero_ttl_deletes_the_finished_pod_at_once_and_no_ttl_keeps_it() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    let now = in_the_future(&clock, Duration::ZERO);
    let mut gone = at("gone", &now, "true");
    gone.spec.run.ttl_seconds_after_finished = Some(0);
    create_at(&client, &gone).await;
    create_at(&client, &at("kept", &now, "true")).await;
    wait_for_pod(&client, "gone-pod").await;
    wait_for_pod(&client, "kept-pod").await;
    finish_pod(&client, "gone-pod", 0).await;
    finish_pod(&client, "kept-pod", 0).await;
    wait_for_phase(&client, "gone", AtPhase::Done).await;
    wait_for_phase(&client, "kept", AtPhase::Done).await;
    wait_until("gone-pod deleted", || async {
        !pod_exists(&client, "gone-pod").await
    })
    .await;
    advance_settled(Duration::from_secs(3600), Duration::from_secs(60)).await;
    assert!(pod_exists(&client, "kept-pod").await);
    assert_eq!(phase(&client, "gone").await, AtPhase::Done);
    assert_eq!(server.request_log().count("delete", "pods"), 1);
    manager.stop().await.unwrap();
    server.shutdown().await;
}
