//! Sharded managers against the embedded API server: each shard holds a Lease of its own,
//! labelled for the ring, caches and reconciles only the Ats labelled for it, and labels the
//! pods it creates with the At's shard. (The sharder, which assigns and moves objects, is
//! played here by the test: it labels each At for its ring position.)

use crate::at_support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use at_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use sample_controller::apis::AtPhase;
use sample_controller::client::{Api, Client, ListParams};
use sample_controller::controllers::Clock;
use sample_controller::manager::Manager;
use sample_controller::sharding::{Ring, RingLabels, ShardConfig, object_key};
use tokio_util::sync::CancellationToken;

const RING: &str = "ats";

/// A shard of ring [`RING`] named `id`, running the At controller in a task.
async fn start_shard(server: &embedded_apiserver::ApiServerHandle, id: &str) -> RunningManager {
    let shard = ShardConfig {
        labels: RingLabels::new(RING).unwrap(),
        shard_id: id.to_string(),
        lease_namespace: NS.to_string(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let manager = Manager::new(manager_config(), manager_client(server))
        .with_clock(Clock::new())
        .with_sharding(Some(shard));
    let controllers = manager.controllers_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    let running = RunningManager {
        stop,
        controllers,
        task,
    };
    wait_until(&format!("shard {id}'s caches to sync"), || async {
        running.controllers.has_synced()
    })
    .await;
    running
}

async fn ring_leases(client: &Client) -> BTreeMap<String, String> {
    let lp = ListParams {
        label_selector: Some(RingLabels::new(RING).unwrap().lease_selector()),
        ..ListParams::default()
    };
    Api::<Lease>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|l| {
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            (l.metadata.name.unwrap_or_default(), holder)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_works_only_on_the_ats_labelled_for_it() {
    const N: usize = 60;
    let (server, client) = server().await;
    let labels = RingLabels::new(RING).unwrap();
    let a = start_shard(&server, "shard-a").await;
    let b = start_shard(&server, "shard-b").await;

    // The ring's Leases are listed by its label, each held by its shard.
    wait_until("both shard Leases", || async {
        ring_leases(&client).await.len() == 2
    })
    .await;
    assert_eq!(
        ring_leases(&client).await,
        BTreeMap::from([
            ("shard-a".to_string(), "shard-a".to_string()),
            ("shard-b".to_string(), "shard-b".to_string()),
        ])
    );

    // Label each At for its position on a ring of three; no process runs shard-c.
    let ring = Ring::new(["shard-a", "shard-b", "shard-c"]);
    let clock = Clock::new();
    let due = in_the_future(&clock, Duration::from_secs(1));
    let mut shard_of = BTreeMap::new();
    for i in 0..N {
        let name = format!("at-{i}");
        let shard = ring
            .shard_for(&object_key(Some(NS), &name))
            .unwrap()
            .to_string();
        let mut at = at(&name, &due, "echo YAY");
        at.metadata.labels = Some(BTreeMap::from([(
            labels.shard_key().to_string(),
            shard.clone(),
        )]));
        create_at(&client, &at).await;
        shard_of.insert(name, shard);
    }
    let served: BTreeSet<&String> = shard_of
        .iter()
        .filter(|(_, s)| s.as_str() != "shard-c")
        .map(|(n, _)| n)
        .collect();
    let orphans = N - served.len();
    assert!(
        orphans > 0 && !served.is_empty(),
        "the ring spreads 60 keys"
    );

    // Play the kubelet until every At of a running shard is DONE.
    wait_until_every(
        "every At of shard-a and shard-b to be DONE",
        Duration::from_millis(100),
        1_200,
        || async {
            for pod in list_pods(&client).await {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase != Some("Succeeded") {
                    finish_pod(&client, pod.metadata.name.as_deref().unwrap(), 0).await;
                }
            }
            let ats = list_ats(&client).await;
            ats.iter()
                .filter(|a| served.contains(a.metadata.name.as_ref().unwrap()))
                .all(|a| a.status.is_some() && a.phase() == AtPhase::Done)
        },
    )
    .await;

    // Exactly one pod per served At, carrying its At's shard label; none for shard-c's Ats,
    // which neither shard touched (not even a status).
    let pods = list_pods(&client).await;
    assert_eq!(
        pods.len(),
        served.len(),
        "one pod per At of a running shard"
    );
    for pod in &pods {
        let name = pod.metadata.name.as_deref().unwrap();
        let at = name.strip_suffix("-pod").expect("an At's pod");
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels.shard_key()));
        assert_eq!(
            label,
            Some(&shard_of[at]),
            "pod {name} carries its At's shard"
        );
    }
    for at in list_ats(&client).await {
        let name = at.metadata.name.as_deref().unwrap();
        if !served.contains(&name.to_string()) {
            assert!(at.status.is_none(), "{name} of shard-c was reconciled");
        }
    }
    // Both shards worked (the ring gives each of the three about a third).
    assert!(a.syncs() > 0 && b.syncs() > 0);

    a.stop().await.unwrap();
    b.stop().await.unwrap();
    // A graceful stop releases each shard's Lease (holder cleared).
    let leases = ring_leases(&client).await;
    assert!(leases.values().all(String::is_empty), "{leases:?}");
}
