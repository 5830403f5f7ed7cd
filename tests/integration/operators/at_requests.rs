//! How many requests one At costs, counted by the embedded API server's request log (what the
//! `controllers::at` module documentation promises): due at once, 5 writes (create the pod,
//! status RUNNING, event Started, status DONE, event Completed); due later, 7 (status PENDING
//! and event Scheduled first). Never a GET. The test itself only lists and patches, so every
//! `get`, every pod create, every At status write and every event write in the log is the
//! controller's.

use crate::support;

use std::time::Duration;

use embedded_cluster::ClusterHandle;
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::AtPhase;
use support::at::*;

/// Polls with lists (never a GET, so that the GET count stays the controller's).
async fn wait_listed(client: &sample_client_go::client::Client, name: &str, want: AtPhase) {
    wait_until_every(
        &format!("{name} {want}"),
        Duration::from_millis(20),
        3_000,
        || async {
            list_ats(client).await.iter().any(|a| {
                a.metadata.name.as_deref() == Some(name) && a.status.is_some() && a.phase() == want
            })
        },
    )
    .await;
}

async fn wait_listed_pod(client: &sample_client_go::client::Client, name: &str) {
    wait_until_every(
        &format!("pod {name}"),
        Duration::from_millis(20),
        3_000,
        || async {
            list_pods(client)
                .await
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(name))
        },
    )
    .await;
}

async fn wait_events(client: &sample_client_go::client::Client, name: &str, n: usize) {
    wait_until_every(
        &format!("{n} events of {name}"),
        Duration::from_millis(20),
        3_000,
        || async { events_for(client, name).await.len() >= n },
    )
    .await;
}

#[derive(Debug)]
struct Counts {
    log: Vec<String>,
    gets: u64,
    pod_creates: u64,
    status_writes: u64,
    event_writes: u64,
}

fn counts(server: &ClusterHandle) -> Counts {
    let log = server.request_log();
    Counts {
        log: log
            .snapshot()
            .iter()
            .filter(|(k, _)| k.verb != "list" && k.verb != "watch")
            .map(|(k, n)| {
                format!(
                    "{} {}/{} {} x{n}",
                    k.verb, k.resource, k.subresource, k.code
                )
            })
            .collect(),
        gets: log.count_where(|k| k.verb == "get" && !k.resource.starts_with('/')),
        pod_creates: log.count("create", "pods"),
        status_writes: log.count_where(|k| {
            k.resource == "ats"
                && k.subresource == "status"
                && (k.verb == "update" || k.verb == "patch")
        }),
        event_writes: log
            .count_where(|k| k.resource == "events" && (k.verb == "create" || k.verb == "patch")),
    }
}

async fn lifecycle(delay: Option<Duration>) -> Counts {
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    let schedule = match delay {
        Some(d) => in_the_future(&clock, d),
        None => "2019-04-12T10:12:00Z".to_string(),
    };
    create_at(&client, &at("counted", &schedule, "echo YAY")).await;
    wait_listed_pod(&client, "counted-pod").await;
    wait_listed(&client, "counted", AtPhase::Running).await;
    finish_pod(&client, "counted-pod", 0).await;
    wait_listed(&client, "counted", AtPhase::Done).await;
    wait_events(&client, "counted", if delay.is_some() { 3 } else { 2 }).await;
    // Let any late write land before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = counts(&server);
    manager.stop().await.unwrap();
    // Every request of the lifecycle succeeded: no conflict or error retried behind our back.
    assert!(
        c.log.iter().all(|l| l.contains(" 20")),
        "a request failed: {:?}",
        c.log
    );
    c
}

#[tokio::test]
async fn an_at_due_at_once_costs_five_writes_and_no_get() {
    let c = lifecycle(None).await;
    assert_eq!(c.gets, 0, "zero GETs");
    assert_eq!(c.pod_creates, 1);
    assert_eq!(
        c.status_writes, 2,
        "RUNNING, DONE (no PENDING write for an At already due): {c:?}"
    );
    assert_eq!(c.event_writes, 2, "Started, Completed");
}

#[tokio::test]
async fn an_at_due_later_costs_seven_writes_and_no_get() {
    // The schedule is cut to whole seconds, so "2 s from now" could be due in just over 1 s:
    // a manager slow to see the At on a loaded machine would find it due already, write no
    // PENDING and record no Scheduled event. 5 s leaves at least 4.
    let c = lifecycle(Some(Duration::from_secs(5))).await;
    assert_eq!(c.gets, 0, "zero GETs");
    assert_eq!(c.pod_creates, 1);
    assert_eq!(c.status_writes, 3, "PENDING, RUNNING, DONE: {c:?}");
    assert_eq!(c.event_writes, 3, "Scheduled, Started, Completed");
}

/// The At's pod as an older version of the controller made it: controlled by the At, without
/// the `app.kubernetes.io/managed-by` label the pod cache now selects on.
fn unlabelled_pod_of(at: &sample_operators::apis::At) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = sample_operators::controllers::at::new_pod(at);
    if let Some(labels) = pod.metadata.labels.as_mut() {
        labels.remove(sample_controller_runtime::ownership::LABEL_MANAGED_BY);
    }
    pod
}

/// A pod of ours made before the label: invisible to the cache, so the create answers 409;
/// one GET finds it, one PATCH labels it, and the At finishes with it. No second pod, no
/// retry loop.
#[tokio::test]
async fn an_unlabelled_pod_of_ours_is_adopted_with_one_get() {
    use sample_client_go::client::PostParams;
    let (server, client) = server().await;
    let stored = create_at(&client, &at("old", "2019-04-12T10:12:00Z", "echo YAY")).await;
    pods(&client)
        .create(&PostParams::default(), &unlabelled_pod_of(&stored))
        .await
        .expect("create the old pod");
    finish_pod(&client, "old-pod", 0).await;
    let manager = start_manager(&manager_client(&server), manager_config(), Clock::new()).await;
    wait_listed(&client, "old", AtPhase::Done).await;
    wait_events(&client, "old", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.request_log();
    let (gets, conflicts, created, patched) = (
        log.count_where(|k| k.verb == "get" && k.resource == "pods"),
        log.count_code("create", "pods", 409),
        log.count_code("create", "pods", 201),
        log.count_where(|k| k.verb == "patch" && k.resource == "pods" && k.subresource.is_empty()),
    );
    manager.stop().await.unwrap();
    assert_eq!(
        (gets, conflicts, patched),
        (1, 1, 1),
        "one 409, one GET, one label PATCH"
    );
    assert_eq!(created, 1, "only the test's pod was ever created");
    let pods_now = list_pods(&client).await;
    assert_eq!(pods_now.len(), 1);
    let labels = pods_now[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("at-controller")
    );
    let done = list_ats(&client).await;
    assert_eq!(done[0].status.as_ref().and_then(|s| s.exit_code), Some(0));
}

/// A pod of the At's pod name that is not ours (no controller ownerReference) and unlabelled:
/// reported as `ErrResourceExists` as before, never taken over, and the GETs stop.
#[tokio::test]
async fn an_unlabelled_foreign_pod_is_reported_and_the_gets_stop() {
    use sample_client_go::client::PostParams;
    let (server, client) = server().await;
    let stored = create_at(&client, &at("taken", "2019-04-12T10:12:00Z", "echo YAY")).await;
    let mut foreign = unlabelled_pod_of(&stored);
    foreign.metadata.owner_references = None;
    pods(&client)
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create the foreign pod");
    let manager = start_manager(&manager_client(&server), manager_config(), Clock::new()).await;
    wait_until_every(
        "the ErrResourceExists event",
        Duration::from_millis(20),
        3_000,
        || async {
            events_for(&client, "taken")
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("ErrResourceExists"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = server.request_log();
    let gets_settled = log.count_where(|k| k.verb == "get" && k.resource == "pods");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let gets_later = log.count_where(|k| k.verb == "get" && k.resource == "pods");
    let patched = log.count_where(|k| k.verb == "patch" && k.resource == "pods");
    manager.stop().await.unwrap();
    // One sync, and one for each of its two status writes (RUNNING, then ErrResourceExists).
    assert!(
        gets_settled <= 3,
        "at most one GET per sync that tried: {gets_settled}"
    );
    assert_eq!(gets_later, gets_settled, "no loop of GETs");
    assert_eq!(patched, 0, "a foreign pod is never labelled");
    let pod = pods(&client).get("taken-pod").await.expect("the pod");
    assert!(pod.metadata.owner_references.is_none(), "never taken over");
    assert_eq!(list_pods(&client).await.len(), 1);
}
