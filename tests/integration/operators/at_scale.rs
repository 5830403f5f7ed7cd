//! The At controller under load and across restarts: no duplicate pod, ever.

use crate::support;

use std::time::Duration;

use sample_controller_runtime::controller::Clock;
use sample_operators::apis::AtPhase;
use support::at::*;

/// Creates `n` Ats named `<prefix>-<i>`, all due at `schedule`.
async fn create_many(
    client: &sample_client_go::client::Client,
    prefix: &str,
    n: usize,
    schedule: &str,
) {
    for i in 0..n {
        create_at(client, &at(&format!("{prefix}-{i}"), schedule, "echo YAY")).await;
    }
}

/// Plays the kubelet for every pod not finished yet; returns how many it finished.
async fn finish_all_pods(client: &sample_client_go::client::Client) -> usize {
    let mut n = 0;
    for pod in list_pods(client).await {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, Some("Succeeded") | Some("Failed")) {
            finish_pod(client, pod.metadata.name.as_deref().unwrap(), 0).await;
            n += 1;
        }
    }
    n
}

async fn count_done(client: &sample_client_go::client::Client) -> usize {
    list_ats(client)
        .await
        .iter()
        .filter(|a| a.phase() == AtPhase::Done)
        .count()
}

#[tokio::test(start_paused = true)]
async fn three_hundred_ats_due_at_once_make_exactly_three_hundred_pods_and_no_gets() {
    const N: usize = 300;
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(
        &manager_client_with_qps(&server, 200.0, 400),
        manager_config(),
        clock,
    )
    .await;
    let log = server.request_log();
    // From here on the manager reads only from its caches; the test observes with LISTs.
    let gets_before = log.count("get", "ats") + log.count("get", "pods");

    let due = in_the_future(&clock, Duration::from_secs(30));
    create_many(&client, "bulk", N, &due).await;
    let second = Duration::from_secs(1);
    wait_until_every("every At to be PENDING", second, 600, || async {
        list_ats(&client)
            .await
            .iter()
            .filter(|a| a.status.is_some() && a.phase() == AtPhase::Pending)
            .count()
            == N
    })
    .await;
    assert_eq!(
        log.count("create", "pods"),
        0,
        "nothing runs before it is due"
    );

    let due_at = due.parse::<jiff::Timestamp>().unwrap();
    advance_settled(clock.until(due_at), Duration::from_secs(5)).await;
    wait_until_every("a pod for every At", second, 600, || async {
        list_pods(&client).await.len() == N
    })
    .await;
    while count_done(&client).await < N {
        finish_all_pods(&client).await;
        tokio::time::sleep(second).await;
    }

    assert_eq!(
        log.count("create", "pods"),
        N as u64,
        "exactly one create per At"
    );
    assert_eq!(
        log.count_code("create", "pods", 409),
        0,
        "no create was repeated (409 AlreadyExists)"
    );
    assert_eq!(
        log.count("get", "ats") + log.count("get", "pods"),
        gets_before,
        "no GET after the informers synced"
    );
    // The controller is the only writer of At status, so a conflict could only come from
    // acting on a cache that lags its own writes.
    assert_eq!(
        log.count_code("update", "ats", 409),
        0,
        "no status write from a stale cache"
    );
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_controller_restarted_mid_flight_creates_no_duplicate_and_finishes_every_at() {
    const N: usize = 60;
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let log = server.request_log();
    // A slow first manager (5 requests per second), so the crash lands mid-flight.
    let first = start_manager(
        &manager_client_with_qps(&server, 5.0, 5),
        manager_config(),
        clock,
    )
    .await;
    create_many(
        &client,
        "restart",
        N,
        &in_the_future(&clock, Duration::ZERO),
    )
    .await;
    wait_until("some pods to exist", || async {
        log.count("create", "pods") >= 10
    })
    .await;
    let created_by_first = log.count("create", "pods");
    assert!(
        created_by_first < N as u64,
        "the crash must land mid-flight"
    );

    // Crash: the task is dropped; no graceful drain, no goodbye.
    first.task.abort();
    let _ = first.task.await;

    let second = start_manager(&manager_client(&server), manager_config(), clock).await;
    wait_until("a pod for every At", || async {
        list_pods(&client).await.len() == N
    })
    .await;
    while count_done(&client).await < N {
        finish_all_pods(&client).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(list_pods(&client).await.len(), N);
    assert_eq!(
        log.count_code("create", "pods", 201),
        N as u64,
        "one pod per At"
    );
    assert_eq!(
        log.count_code("create", "pods", 409),
        0,
        "no duplicate create"
    );
    second.stop().await.unwrap();
    server.shutdown().await;
}
