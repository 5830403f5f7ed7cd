//! Two managers with `--leader-elect` on one Lease: only the leader's workers run; when the
//! leader dies, the standby takes over and finishes the work.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use sample_client_go::client::Api;
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::{LeaderElectionConfig, ManagerConfig};
use sample_operators::apis::AtPhase;
use support::at::*;

fn elected() -> ManagerConfig {
    ManagerConfig {
        leader_election: Some(LeaderElectionConfig {
            lease_name: "sample-controller".into(),
            lease_namespace: NS.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
        ..manager_config()
    }
}

fn start(client: sample_client_go::client::Client, identity: &str, clock: Clock) -> RunningManager {
    let manager = sample_operators::registry::manager(elected(), client)
        .with_clock(clock)
        .with_identity(identity);
    RunningManager::spawn(manager)
}

async fn holder(client: &sample_client_go::client::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get_opt("sample-controller")
        .await
        .unwrap()
        .and_then(|l| l.spec.and_then(|s| s.holder_identity))
        .filter(|h| !h.is_empty())
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_works_and_the_standby_takes_over_when_it_dies() {
    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let a = start(manager_client(&server), "manager-a", clock);
    wait_until("manager-a to lead", || async {
        holder(&client).await.as_deref() == Some("manager-a")
    })
    .await;
    let b = start(manager_client(&server), "manager-b", clock);
    wait_until("both caches to sync", || async {
        a.controllers.has_synced() && b.controllers.has_synced()
    })
    .await;

    create_at(
        &client,
        &at("first", &in_the_future(&clock, Duration::ZERO), "true"),
    )
    .await;
    wait_for_pod(&client, "first-pod").await;
    finish_pod(&client, "first-pod", 0).await;
    wait_for_phase(&client, "first", AtPhase::Done).await;
    assert!(a.syncs() > 0, "the leader synced");
    assert_eq!(
        b.syncs(),
        0,
        "the standby never ran a sync, so it never wrote"
    );
    // Churn the standby sees in its warm caches but keeps no keys for: Ats created and deleted
    // while it waits would otherwise stay in its queue until it leads (one per object ever
    // changed, without bound).
    for i in 0..20 {
        let name = format!("churn-{i}");
        create_at(&client, &at(&name, "2099-01-01T00:00:00Z", "true")).await;
        ats(&client)
            .delete(&name, &Default::default())
            .await
            .unwrap();
    }
    wait_until("the standby's cache to see the churn", || async {
        b.controllers.has_synced() && a.syncs() > 20
    })
    .await;
    let waiting: usize = b
        .controllers
        .controllers()
        .iter()
        .filter_map(|c| c.queue().map(|q| q.len()))
        .sum();
    assert_eq!(waiting, 0, "a standby's queues hold no keys");

    // The leader dies without a goodbye: its Lease is not released and must expire.
    a.task.abort();
    let _ = a.task.await;
    create_at(
        &client,
        &at("second", &in_the_future(&clock, Duration::ZERO), "true"),
    )
    .await;
    wait_until("manager-b to take over", || async {
        holder(&client).await.as_deref() == Some("manager-b")
    })
    .await;
    wait_for_pod(&client, "second-pod").await;
    finish_pod(&client, "second-pod", 0).await;
    wait_for_phase(&client, "second", AtPhase::Done).await;
    assert!(b.syncs() > 0, "the new leader works");
    assert_eq!(server.request_log().count_code("create", "pods", 201), 2);

    // A graceful stop releases the Lease at once (holder "").
    b.stop().await.unwrap();
    assert_eq!(holder(&client).await, None);
    server.shutdown().await;
}
