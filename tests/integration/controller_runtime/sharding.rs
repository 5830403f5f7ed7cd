//! Sharded managers against the embedded API server: each shard holds a Lease of its own,
//! labelled for the ring, caches and reconciles only the Ats labelled for it, and labels the
//! pods it creates with the At's shard. (The sharder, which assigns and moves objects, is
//! played here by the test: it labels each At for its ring position.)

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use sample_client_go::client::{Api, Client, ListParams};
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::{ListenersHandle, ManagerConfig};
use sample_controller_runtime::sharding::{
    Ring, RingLabels, ShardConfig, Sharder, SharderConfig, SharderElection, object_key,
};
use sample_operators::apis::AtPhase;
use sample_operators::slim::PodSummary;
use support::at::*;
use tokio_util::sync::CancellationToken;

const RING: &str = "ats";

/// A shard of ring [`RING`] named `id`, running the At controller in a task.
async fn start_shard(server: &embedded_cluster::ClusterHandle, id: &str) -> RunningManager {
    start_shard_with(server, id, Duration::from_secs(15)).await
}

/// The same with a Lease of `lease` (renew deadline 2/3 of it, retry period 1/6).
async fn start_shard_with(
    server: &embedded_cluster::ClusterHandle,
    id: &str,
    lease: Duration,
) -> RunningManager {
    start_shard_full(server, id, lease, false).await
}

/// A shard that is also a candidate for the ring's sharder when `sharder`.
async fn start_shard_full(
    server: &embedded_cluster::ClusterHandle,
    id: &str,
    lease: Duration,
    sharder: bool,
) -> RunningManager {
    start_shard_client(manager_client(server), id, lease, sharder).await
}

/// [`start_shard_full`] with the manager's client given.
async fn start_shard_client(
    client: Client,
    id: &str,
    lease: Duration,
    sharder: bool,
) -> RunningManager {
    start_shard_serving(client, id, lease, sharder, None).await
}

/// The sharder's election on the test ring, in `namespace`, with the Lease timings derived
/// from `lease` as [`shard_config`]'s are.
fn sharder_election(namespace: &str, lease: Duration) -> SharderElection {
    SharderElection {
        labels: RingLabels::new(RING).unwrap(),
        lease_namespace: namespace.to_string(),
        lease_duration: lease,
        renew_deadline: lease * 2 / 3,
        retry_period: lease / 6,
    }
}

/// A shard of the test ring in [`NS`], with the Lease timings derived from `lease` as
/// leader election's are (renew at two thirds, retry at a sixth).
fn shard_config(id: &str, lease: Duration, run_sharder: bool) -> ShardConfig {
    ShardConfig {
        labels: RingLabels::new(RING).unwrap(),
        shard_id: id.to_string(),
        lease_namespace: NS.to_string(),
        lease_duration: lease,
        renew_deadline: lease * 2 / 3,
        retry_period: lease / 6,
        run_sharder,
    }
}

/// [`start_shard_client`], serving `/metrics` on `metrics` when given.
async fn start_shard_serving(
    client: Client,
    id: &str,
    lease: Duration,
    sharder: bool,
    metrics: Option<SocketAddr>,
) -> RunningManager {
    let shard = shard_config(id, lease, sharder);
    let config = ManagerConfig {
        metrics_addr: metrics,
        ..manager_config()
    };
    let manager = sample_operators::registry::manager(config, client)
        .with_clock(Clock::new())
        .with_sharding(Some(shard));
    let running = RunningManager::spawn(manager);
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

/// `store_objects{name="<informer>"}` as a manager's `/metrics` serves it: the number of
/// objects in that informer's cache. `None` until the endpoint answers with the series.
async fn cached_objects(metrics: SocketAddr, informer: &str) -> Option<usize> {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client as HttpClient;
    let http = HttpClient::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let uri = format!("http://{metrics}/metrics").parse().ok()?;
    let resp = http.get(uri).await.ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    let text = String::from_utf8(body.to_vec()).ok()?;
    let series = format!("store_objects{{name=\"{informer}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as usize)
}

/// Port 0 on the loopback interface: the manager binds a free port, read back with
/// [`metrics_addr`].
const ANY_PORT: SocketAddr = super::manager_webhook::ANY_PORT;

/// The address a running manager's `/metrics` bound.
async fn metrics_addr(listeners: &ListenersHandle) -> SocketAddr {
    let bound = listeners.bound().await.expect("the manager is running");
    bound.metrics.expect("the manager serves /metrics")
}

/// The shard label of every At, by name.
async fn at_shards(client: &Client) -> BTreeMap<String, Option<String>> {
    let key = RingLabels::new(RING).unwrap().shard_key().to_string();
    list_ats(client)
        .await
        .into_iter()
        .map(|a| {
            let shard = a
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(&key))
                .cloned();
            (a.metadata.name.unwrap_or_default(), shard)
        })
        .collect()
}

/// Plays the kubelet: finishes every pod not finished yet.
async fn finish_pods(client: &Client) {
    for pod in list_pods(client).await {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Succeeded") {
            finish_pod(client, pod.metadata.name.as_deref().unwrap(), 0).await;
        }
    }
}

/// Every At DONE, with exactly its one pod, labelled for the At's shard.
async fn assert_all_done_once(client: &Client) {
    wait_until_every(
        "every At to be DONE",
        Duration::from_millis(100),
        1_200,
        || async {
            finish_pods(client).await;
            list_ats(client)
                .await
                .iter()
                .all(|a| a.status.is_some() && a.phase() == AtPhase::Done)
        },
    )
    .await;
    let ats = list_ats(client).await;
    let pods = list_pods(client).await;
    assert_eq!(pods.len(), ats.len(), "one pod per At");
    let names: BTreeSet<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    for at in &ats {
        assert!(
            names.contains(&at.pod_name()),
            "{} has its pod",
            at.pod_name()
        );
    }
}

fn count(shards: &BTreeMap<String, Option<String>>, id: &str) -> usize {
    shards.values().filter(|s| s.as_deref() == Some(id)).count()
}

/// 3 shards and the sharder; a fourth shard joins (live shards drain to it); then a shard
/// dies without releasing its Lease (its task aborted, as `kill -9`) and its Ats move to the
/// survivors once the Lease expires. Every At runs exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharder_assigns_rebalances_and_recovers_a_dead_shards_ats() {
    const FIRST: usize = 150;
    const SECOND: usize = 90;
    let lease = Duration::from_secs(3);
    let (server, client) = server().await;
    let labels = RingLabels::new(RING).unwrap();
    let sharder = Sharder::new(
        manager_client_with_qps(&server, 0.0, 0),
        SharderConfig {
            labels: labels.clone(),
            lease_namespace: NS.to_string(),
            sync_period: Duration::from_millis(200),
        },
    )
    .with_owner::<sample_operators::apis::At>()
    .with_owned::<PodSummary>();
    let metrics = sharder.metrics();
    let stop_sharder = CancellationToken::new();
    let sharder_task = tokio::spawn(sharder.run(stop_sharder.clone()));

    let a = start_shard_with(&server, "shard-a", lease).await;
    let b = start_shard_with(&server, "shard-b", lease).await;
    let c = start_shard_with(&server, "shard-c", lease).await;
    wait_until("three shard Leases", || async {
        ring_leases(&client).await.len() == 3
    })
    .await;

    // Unlabelled Ats: the sharder assigns each to its ring position.
    let clock = Clock::new();
    let due = in_the_future(&clock, Duration::from_secs(4));
    for i in 0..FIRST {
        create_at(&client, &at(&format!("first-{i}"), &due, "echo YAY")).await;
    }
    wait_until("every At assigned", || async {
        at_shards(&client).await.values().all(Option::is_some)
    })
    .await;
    let three = Ring::new(["shard-a", "shard-b", "shard-c"]);
    for (name, shard) in at_shards(&client).await {
        assert_eq!(
            shard.as_deref(),
            three.shard_for(&object_key(Some(NS), &name)),
            "{name} sits at its ring position"
        );
    }

    // A fourth shard joins before the Ats are due: the live shards drain to it.
    let d = start_shard_with(&server, "shard-d", lease).await;
    let four = Ring::new(["shard-a", "shard-b", "shard-c", "shard-d"]);
    wait_until("the Ats to settle on four shards", || async {
        at_shards(&client)
            .await
            .iter()
            .all(|(name, shard)| shard.as_deref() == four.shard_for(&object_key(Some(NS), name)))
    })
    .await;
    let on_d = count(&at_shards(&client).await, "shard-d");
    assert!(
        (FIRST * 15 / 100..=FIRST * 35 / 100).contains(&on_d),
        "shard-d took {on_d} of {FIRST}, about a quarter"
    );
    let drains: u64 = ["shard-a", "shard-b", "shard-c"]
        .iter()
        .map(|s| metrics.drains(RING, s))
        .sum();
    assert_eq!(drains as usize, on_d, "each moved At was drained once");
    assert_all_done_once(&client).await;
    for s in [&a, &b, &c, &d] {
        assert!(s.syncs() > 0, "every shard worked");
    }

    // More Ats, then shard-c dies holding its Lease.
    let due = in_the_future(&clock, Duration::from_secs(3));
    for i in 0..SECOND {
        create_at(&client, &at(&format!("second-{i}"), &due, "echo YAY")).await;
    }
    wait_until("the new Ats assigned", || async {
        at_shards(&client).await.values().all(Option::is_some)
    })
    .await;
    let on_c = count(&at_shards(&client).await, "shard-c");
    assert!(on_c > 0);
    c.task.abort();
    wait_until_every(
        "shard-c's Ats to move",
        Duration::from_millis(100),
        300,
        || async { count(&at_shards(&client).await, "shard-c") == 0 },
    )
    .await;
    let moved: u64 = ["shard-a", "shard-b", "shard-d"]
        .iter()
        .map(|s| metrics.movements(RING, s))
        .sum();
    assert_eq!(
        moved as usize, on_c,
        "shard-c's Ats moved directly, without a drain"
    );
    assert_all_done_once(&client).await;
    // The pods followed their Ats.
    let shards = at_shards(&client).await;
    for pod in list_pods(&client).await {
        let at = pod
            .metadata
            .name
            .as_deref()
            .unwrap()
            .strip_suffix("-pod")
            .unwrap();
        wait_until(&format!("pod of {at} to follow its At"), || async {
            let p = pods(&client)
                .get(pod.metadata.name.as_deref().unwrap())
                .await
                .unwrap();
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels.shard_key()))
                == shards[at].as_ref()
        })
        .await;
    }

    for s in [a, b, d] {
        s.stop().await.unwrap();
    }
    stop_sharder.cancel();
    sharder_task.await.unwrap();
}

/// The binary's wiring: every shard is a sharder candidate, one is elected (Lease
/// `<ring>-sharder`) and assigns the Ats created without a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shards_elect_one_sharder_which_assigns_new_ats() {
    const N: usize = 40;
    let (server, client) = server().await;
    let lease = Duration::from_secs(6);
    let a = start_shard_full(&server, "shard-a", lease, true).await;
    let b = start_shard_full(&server, "shard-b", lease, true).await;
    let clock = Clock::new();
    let due = in_the_future(&clock, Duration::from_secs(2));
    for i in 0..N {
        create_at(&client, &at(&format!("at-{i}"), &due, "echo YAY")).await;
    }
    assert_all_done_once(&client).await;
    let shards = at_shards(&client).await;
    let two = Ring::new(["shard-a", "shard-b"]);
    for (name, shard) in &shards {
        assert_eq!(shard.as_deref(), two.shard_for(&object_key(Some(NS), name)));
    }
    assert!(count(&shards, "shard-a") > 0 && count(&shards, "shard-b") > 0);
    let holder = Api::<Lease>::namespaced(client.clone(), NS)
        .get(&format!("{RING}-sharder"))
        .await
        .expect("the sharder's Lease")
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder == "shard-a" || holder == "shard-b",
        "sharder: {holder:?}"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// `--controllers=sharder` as a process of its own: three shards started with the sharder off
/// (`--shard-sharder=false`) and one manager that runs only the sharder, leader-elected on
/// `<ring>-sharder`, with no shard Lease and no operator. The sharder assigns every At, the
/// shards run each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharder_process_serves_shards_that_do_not_host_it() {
    const N: usize = 60;
    let (server, client) = server().await;
    let lease = Duration::from_secs(6);
    let mut shards = Vec::new();
    for id in ["shard-a", "shard-b", "shard-c"] {
        shards.push(start_shard_full(&server, id, lease, false).await);
    }
    let election = sharder_election(NS, lease);
    let sharder = sample_operators::registry::manager(manager_config(), manager_client(&server))
        .with_identity("the-sharder")
        .with_sharder(Some(election));
    let sharder_controllers = sharder.controllers_handle();
    let stop_sharder = CancellationToken::new();
    let sharder_task = tokio::spawn(sharder.run(stop_sharder.clone()));

    let clock = Clock::new();
    let due = in_the_future(&clock, Duration::from_secs(3));
    for i in 0..N {
        create_at(&client, &at(&format!("at-{i}"), &due, "echo YAY")).await;
    }
    assert_all_done_once(&client).await;
    let assigned = at_shards(&client).await;
    let three = Ring::new(["shard-a", "shard-b", "shard-c"]);
    for (name, shard) in &assigned {
        assert_eq!(
            shard.as_deref(),
            three.shard_for(&object_key(Some(NS), name)),
            "{name} sits at its ring position"
        );
    }
    for (id, s) in ["shard-a", "shard-b", "shard-c"].iter().zip(&shards) {
        assert!(count(&assigned, id) > 0 && s.syncs() > 0, "{id} worked");
    }
    // The sharder process holds the sharder's Lease, no shard Lease, and ran no operator.
    let holder = Api::<Lease>::namespaced(client.clone(), NS)
        .get(&format!("{RING}-sharder"))
        .await
        .expect("the sharder's Lease")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("the-sharder"));
    assert_eq!(
        ring_leases(&client).await.into_keys().collect::<Vec<_>>(),
        ["shard-a", "shard-b", "shard-c"],
        "the ring is the three shards"
    );
    assert!(sharder_controllers.controllers().is_empty());

    for s in shards {
        s.stop().await.unwrap();
    }
    stop_sharder.cancel();
    sharder_task.await.unwrap().unwrap();
}

/// The whole `/metrics` text of a manager (empty until it answers).
async fn scrape(metrics: SocketAddr) -> String {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client as HttpClient;
    let http = HttpClient::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let Ok(uri) = format!("http://{metrics}/metrics").parse() else {
        return String::new();
    };
    let Ok(resp) = http.get(uri).await else {
        return String::new();
    };
    match resp.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(_) => String::new(),
    }
}

/// `artifacts/deploy/sharded/`'s RBAC, enforced: two shards as the shards' service account
/// and a `--controllers=sharder` manager as the sharder's, their Leases in the namespace
/// `sample-controller`. Ats are assigned, run, and drained to a third shard joining, and the
/// pods follow: every call was allowed (no 403 on any process's client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharded_deploy_rbac_allows_assign_drain_and_follow_and_nothing_is_refused() {
    use embedded_cluster::Cluster;
    use sample_client_go::client::Config;
    let sharded = sample_operators::registry::known().sharded;
    const SHARD_TOKEN: &str = "shard-sa-token";
    const SHARDER_TOKEN: &str = "sharder-sa-token";
    const LEASES: &str = "sample-controller";
    const N: usize = 45;
    sample_client_go::install_crypto_provider();
    support::at::init_tracing();
    let server = Cluster::builder()
        .enforce_rbac(true)
        .service_account_token(SHARD_TOKEN, LEASES, "sample-controller")
        .service_account_token(SHARDER_TOKEN, LEASES, "sample-controller-sharder")
        .start()
        .await
        .expect("server starts");
    let client = support::at::client_for(&server);
    crate::support::operators::install_crds(&client).await;
    let root = env!("CARGO_MANIFEST_DIR");
    for file in [
        "base/namespace.yaml",
        "base/serviceaccount.yaml",
        "base/clusterrole.yaml",
        "base/clusterrolebinding.yaml",
        "base/role-leader-election.yaml",
        "sharded/shard-rbac.yaml",
        "sharded/sharder-rbac.yaml",
    ] {
        server
            .load_manifest_path(format!("{root}/artifacts/deploy/{file}"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let as_sa = |token: &str| {
        let yaml = server.kubeconfig_yaml().replace(server.token(), token);
        let mut config = Config::from_kubeconfig_yaml(&yaml, None).unwrap();
        config.qps = 0.0;
        Client::new(config).unwrap()
    };
    let lease = Duration::from_secs(6);
    let shard_config = |id: &str| ShardConfig {
        labels: RingLabels::new(RING).unwrap(),
        shard_id: id.to_string(),
        lease_namespace: LEASES.to_string(),
        lease_duration: lease,
        renew_deadline: lease * 2 / 3,
        retry_period: lease / 6,
        run_sharder: false,
    };
    let mut metrics = Vec::new();
    let start = |id: &str, addr: SocketAddr| {
        let config = ManagerConfig {
            controllers: sharded.clone(),
            metrics_addr: Some(addr),
            ..manager_config()
        };
        let manager = sample_operators::registry::manager(config, as_sa(SHARD_TOKEN))
            .with_clock(Clock::new())
            .with_sharding(Some(shard_config(id)));
        RunningManager::spawn(manager)
    };
    let mut shards = Vec::new();
    for id in ["shard-a", "shard-b"] {
        let shard = start(id, ANY_PORT);
        metrics.push(metrics_addr(&shard.listeners).await);
        shards.push(shard);
    }
    // The sharder process, over every sharded kind (--controllers=sharder).
    let sharder = sample_operators::registry::manager(
        ManagerConfig {
            controllers: sharded.clone(),
            metrics_addr: Some(ANY_PORT),
            ..manager_config()
        },
        as_sa(SHARDER_TOKEN),
    )
    .with_identity("sharder-0")
    .with_sharder(Some(sharder_election(LEASES, lease)));
    let sharder_listeners = sharder.listeners_handle();
    let stop_sharder = CancellationToken::new();
    let sharder_task = tokio::spawn(sharder.run(stop_sharder.clone()));
    metrics.push(metrics_addr(&sharder_listeners).await);

    // Due at once: the two shards run them.
    let clock = Clock::new();
    let due = in_the_future(&clock, Duration::from_secs(2));
    for i in 0..N {
        create_at(&client, &at(&format!("at-{i}"), &due, "echo YAY")).await;
    }
    assert_all_done_once(&client).await;
    // A third shard joins: the live shards release (patch) their drained Ats, the sharder
    // relabels them and their pods.
    let shard = start("shard-c", ANY_PORT);
    metrics.push(metrics_addr(&shard.listeners).await);
    shards.push(shard);
    let three = Ring::new(["shard-a", "shard-b", "shard-c"]);
    let key = RingLabels::new(RING).unwrap().shard_key().to_string();
    wait_until(
        "the Ats and their pods to settle on three shards",
        || async {
            let ats = at_shards(&client).await;
            let settled = ats.iter().all(|(name, shard)| {
                shard.as_deref() == three.shard_for(&object_key(Some(NS), name))
            });
            let pods_follow = list_pods(&client).await.iter().all(|p| {
                let at = p.metadata.name.as_deref().unwrap().trim_end_matches("-pod");
                p.metadata.labels.as_ref().and_then(|l| l.get(&key)) == ats[at].as_ref()
            });
            settled && pods_follow
        },
    )
    .await;
    assert!(count(&at_shards(&client).await, "shard-c") > 0);
    assert_all_done_once(&client).await;

    // Nothing any of the four processes asked was refused.
    for addr in &metrics {
        let text = scrape(*addr).await;
        assert!(
            text.contains("rest_client_requests_total"),
            "{addr}: {text}"
        );
        let refused: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains("code=\"403\""))
            .collect();
        assert!(refused.is_empty(), "{addr}: {refused:?}");
    }
    for s in shards {
        s.stop().await.unwrap();
    }
    stop_sharder.cancel();
    sharder_task.await.unwrap().unwrap();
}

/// 3 shards and the sharder, 150 Ats due over 1.5 s (`hack/bench-shards.sh` runs 3,000 over 30 s:
/// scale is the benchmark's, this test is about correctness). Every At is DONE with
/// exactly one pod, each shard holds about a third, and every pod carries its At's shard. Each
/// shard's caches (its `store_objects` gauges on `/metrics`) hold only its Ats and their pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_and_fifty_ats_over_a_second_and_a_half_on_three_shards() {
    const N: usize = 150;
    let (server, client) = server().await;
    let labels = RingLabels::new(RING).unwrap();
    let sharder = Sharder::new(
        manager_client_with_qps(&server, 0.0, 0),
        SharderConfig {
            labels: labels.clone(),
            lease_namespace: NS.to_string(),
            sync_period: Duration::from_millis(500),
        },
    )
    .with_owner::<sample_operators::apis::At>()
    .with_owned::<PodSummary>();
    let stop_sharder = CancellationToken::new();
    let sharder_task = tokio::spawn(sharder.run(stop_sharder.clone()));
    let lease = Duration::from_secs(15);
    let mut shards = Vec::new();
    let mut metrics = BTreeMap::new();
    for id in ["shard-a", "shard-b", "shard-c"] {
        let c = manager_client_with_qps(&server, 0.0, 0);
        let shard = start_shard_serving(c, id, lease, false, Some(ANY_PORT)).await;
        metrics.insert(id, metrics_addr(&shard.listeners).await);
        shards.push(shard);
    }
    wait_until("three shard Leases", || async {
        ring_leases(&client).await.len() == 3
    })
    .await;

    // Due one every 10 ms, from 5 s on: 150 over 1.5 s.
    let clock = Clock::new();
    let start = clock.now();
    for i in 0..N {
        let due = start + jiff::SignedDuration::from_millis(5_000 + 10 * i as i64);
        let due = jiff::Timestamp::from_second(due.as_second())
            .unwrap()
            .to_string();
        create_at(&client, &at(&format!("at-{i}"), &due, "echo YAY")).await;
    }
    wait_until_every(
        "every At to be DONE",
        Duration::from_millis(500),
        600,
        || async {
            finish_pods(&client).await;
            list_ats(&client)
                .await
                .iter()
                .all(|a| a.status.is_some() && a.phase() == AtPhase::Done)
        },
    )
    .await;
    assert_all_done_once(&client).await;
    let assigned = at_shards(&client).await;
    for id in ["shard-a", "shard-b", "shard-c"] {
        let n = count(&assigned, id);
        assert!(
            (N / 4..=N * 42 / 100).contains(&n),
            "{id} holds {n} of {N}, about a third"
        );
    }
    let pod_shards: BTreeMap<String, Option<String>> = list_pods(&client)
        .await
        .into_iter()
        .map(|p| {
            let at = p
                .metadata
                .name
                .as_deref()
                .unwrap()
                .strip_suffix("-pod")
                .unwrap()
                .to_string();
            (
                at,
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels.shard_key()))
                    .cloned(),
            )
        })
        .collect();
    assert_eq!(pod_shards, assigned, "every pod carries its At's shard");

    // Each shard's caches, as its /metrics reports them (`store_objects`), hold exactly the
    // Ats labelled for it and their pods: the three partition the N, about a third each.
    for (id, addr) in &metrics {
        let want = count(&assigned, id);
        wait_until(
            &format!("{id}'s caches to hold its {want} Ats and pods"),
            || async {
                cached_objects(*addr, "ats").await == Some(want)
                    && cached_objects(*addr, "pods").await == Some(want)
            },
        )
        .await;
        assert!(
            (N * 20 / 100..=N * 45 / 100).contains(&want),
            "{id} caches {want} of {N} Ats, not about a third"
        );
        eprintln!("{id}: store_objects ats={want} pods={want} of {N}");
    }
    let mut total = (0, 0);
    for addr in metrics.values() {
        total.0 += cached_objects(*addr, "ats").await.unwrap_or(0);
        total.1 += cached_objects(*addr, "pods").await.unwrap_or(0);
    }
    assert_eq!(
        total,
        (N, N),
        "the shards' caches partition the Ats and pods"
    );
    for s in shards {
        assert!(s.syncs() > 0);
        s.stop().await.unwrap();
    }
    stop_sharder.cancel();
    sharder_task.await.unwrap();
}

/// `/mutate-shard` on the manager's webhook server: the API server calls it on create and the
/// At is stored already labelled for its shard, from the ring the leading sharder published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_ats_are_assigned_in_admission() {
    use super::manager_webhook::{ATS, MWC, SERVICE, setup, wait_listening};
    use serde_json::json;
    let s = setup().await;
    // The sharder's webhook: CREATE of Ats, failurePolicy Ignore (the pass is the safety net),
    // trusting the CA setup() injected into the At webhooks.
    let existing = s.api.get(MWC).await;
    let injected = existing.body["items"][0]["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .expect("setup() applied a mutating configuration with a caBundle")
        .to_string();
    let (namespace, name) = SERVICE.split_once('/').unwrap();
    let mwc = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "sharder"},
        "webhooks": [{
            "name": "shard.sample-controller.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "clientConfig": {
                "service": {"namespace": namespace, "name": name, "path": "/mutate-shard"},
                "caBundle": injected,
            },
            "rules": [{
                "apiGroups": ["cnat.programming-kubernetes.info"],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": ["ats"],
            }],
        }],
    });
    let r = s.api.post(MWC, &mwc).await;
    assert_eq!(r.code, 201, "{:?}", r.body);

    let shard = shard_config("shard-a", Duration::from_secs(15), true);
    let manager = sample_operators::registry::manager(manager_config(), manager_client(&s.server))
        .with_webhook_server(Some(
            sample_controller_runtime::webhook::WebhookServerConfig {
                addr: ANY_PORT,
                cert_dir: s.certs.path().to_owned(),
            },
        ))
        .with_sharding(Some(shard));
    super::manager_webhook::follow(
        &s.webhook,
        manager.listeners_handle(),
        std::sync::Arc::default(),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    wait_listening(&s).await;

    // Until the sharder's first pass publishes the ring, Ats are stored unlabelled (and the
    // pass labels them); from then on each create comes back labelled.
    let key = RingLabels::new(RING).unwrap().shard_key().to_string();
    let mut labelled_at_create = None;
    for i in 0..200 {
        let at = json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
                        "metadata": {"name": format!("at-{i}")},
                        "spec": {"schedule": "2099-01-01T00:00:00Z", "command": "echo"}});
        let r = s.api.post(ATS, &at).await;
        assert_eq!(r.code, 201, "{:?}", r.body);
        if let Some(shard) = r.body["metadata"]["labels"][&key].as_str() {
            labelled_at_create = Some((i, shard.to_string()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (i, shard) = labelled_at_create.expect("an At labelled in admission");
    assert_eq!(shard, "shard-a", "at-{i} is on the only shard");
    // The ones created before were labelled by the pass.
    let client = support::at::client_for(&s.server);
    wait_until("every At assigned", || async {
        at_shards(&client)
            .await
            .values()
            .all(|s| s.as_deref() == Some("shard-a"))
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// One object of a `kubectl kustomize` output, by kind and name.
fn object<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} in the sharded overlay"))
}

/// The container `args` of a workload, with the downward-API variables a pod named `pod` in
/// the namespace `sample-controller` would see substituted, parsed and validated as
/// `sample-controller run` does.
fn run_flags(
    workload: &serde_json::Value,
    pod: &str,
) -> sample_controller_runtime::manager::ManagerOptions {
    use clap::Parser;
    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        options: sample_controller_runtime::manager::ManagerOptions,
    }
    let container = &workload["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(POD_NAME)", pod)
                .replace("$(POD_NAMESPACE)", "sample-controller")
        })
        .collect();
    assert_eq!(args[0], "run", "{args:?}");
    let run = Run::try_parse_from(args.iter().map(String::as_str))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    run.options
        .validate(None, &sample_operators::registry::known())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    run.options
}

/// The names of the downward-API environment variables of a workload's first container.
fn downward_env(workload: &serde_json::Value) -> BTreeMap<String, String> {
    workload["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let field = e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?;
            Some((e["name"].as_str()?.to_string(), field.to_string()))
        })
        .collect()
}

/// `artifacts/deploy/sharded/` as `kubectl kustomize` builds it (called from the deploy test
/// of `manager_webhook`): shards in a StatefulSet whose pod name is the shard id, the sharder
/// in a Deployment of its own with `--controllers=sharder`, each workload's flags valid
/// together, least-privilege RBAC for each, and `/mutate-shard` wired to the sharder with a
/// cert-manager certificate.
pub(crate) fn check_sharded_overlay(docs: &[serde_json::Value]) {
    use sample_controller_runtime::sharding::ShardMode;
    let sharded = sample_operators::registry::known().sharded;
    // No leader beside the shards.
    assert!(
        !docs
            .iter()
            .any(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "sample-controller"),
        "the base's leader Deployment is removed"
    );

    // The shards: the pod name is the shard id; the sharder runs elsewhere.
    let shards = object(docs, "StatefulSet", "sample-controller-shard");
    let env = downward_env(shards);
    assert_eq!(
        env.get("POD_NAME").map(String::as_str),
        Some("metadata.name")
    );
    assert_eq!(
        env.get("POD_NAMESPACE").map(String::as_str),
        Some("metadata.namespace")
    );
    let flags = run_flags(shards, "sample-controller-shard-1");
    let shard = flags
        .shard_config(None)
        .unwrap()
        .expect("--shard-mode=sharded");
    assert_eq!(flags.sharding.shard_mode, ShardMode::Sharded);
    assert_eq!(shard.shard_id, "sample-controller-shard-1");
    assert_eq!(shard.lease_namespace, "sample-controller");
    assert!(
        !shard.run_sharder,
        "the shards leave the sharder to its Deployment"
    );
    assert_eq!(flags.sharder_config(None).unwrap(), None);
    let shard_sa = shards["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();

    // The sharder: alone, leader-elected, on the shards' ring and Lease namespace.
    let sharder = object(docs, "Deployment", "sample-controller-sharder");
    let flags = run_flags(sharder, "sample-controller-sharder-x");
    let election = flags
        .sharder_config(None)
        .unwrap()
        .expect("--controllers=sharder");
    assert_eq!(
        flags.shard_config(None).unwrap(),
        None,
        "the sharder is no shard"
    );
    assert_eq!(election.labels, shard.labels, "one ring");
    assert_eq!(election.lease_namespace, shard.lease_namespace);
    assert_eq!(
        flags
            .validate(None, &sample_operators::registry::known())
            .unwrap()
            .controllers,
        sharded.clone(),
        "it shards every sharded kind"
    );
    assert!(
        sharder["spec"]["replicas"].as_i64().unwrap() >= 2,
        "a warm standby sharder"
    );
    let sharder_pod = &sharder["spec"]["template"];
    let sharder_sa = sharder_pod["spec"]["serviceAccountName"].as_str().unwrap();
    assert_ne!(shard_sa, sharder_sa, "one identity each");

    // RBAC: who is bound to what.
    let bound = |sa: &str| -> Vec<(String, String)> {
        docs.iter()
            .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
            .filter(|d| {
                d["subjects"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa)
            })
            .map(|d| {
                let r = &d["roleRef"];
                (
                    r["kind"].as_str().unwrap().to_string(),
                    r["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let rules = |kind: &str, name: &str| -> Vec<(String, String, Vec<String>)> {
        let mut out = Vec::new();
        for rule in object(docs, kind, name)["rules"].as_array().unwrap() {
            let verbs: Vec<String> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    let (g, r) = (g.as_str().unwrap(), r.as_str().unwrap());
                    out.push((g.to_string(), r.to_string(), verbs.clone()));
                }
            }
        }
        out
    };
    // The sharder: labels of the sharded kinds and of what they own, Leases and events in its
    // namespace, the metrics reviews; no create or delete of workloads, no get, no wildcard.
    let sharder_roles = bound(sharder_sa);
    assert_eq!(sharder_roles.len(), 2, "{sharder_roles:?}");
    for (kind, name) in &sharder_roles {
        for (group, resource, verbs) in rules(kind, name) {
            let allowed: &[&str] = match (kind.as_str(), group.as_str(), resource.as_str()) {
                ("ClusterRole", "authentication.k8s.io", "tokenreviews")
                | ("ClusterRole", "authorization.k8s.io", "subjectaccessreviews") => &["create"],
                ("ClusterRole", _, "ats" | "tdsets" | "redisclusters" | "myapps" | "foos")
                | ("ClusterRole", "", "pods" | "services")
                | ("ClusterRole", "apps", "deployments" | "statefulsets") => {
                    &["list", "watch", "patch"]
                }
                ("Role", "coordination.k8s.io", "leases") => {
                    &["get", "list", "watch", "create", "update"]
                }
                ("Role", "", "events") => &["create", "patch"],
                other => panic!("the sharder is granted {other:?} {verbs:?}"),
            };
            for v in &verbs {
                assert!(
                    allowed.contains(&v.as_str()),
                    "sharder: {v} on {group}/{resource}"
                );
            }
        }
    }
    // The shards: the leader's role and Lease Role, plus label patches.
    let shard_roles = bound(shard_sa);
    for want in [
        ("ClusterRole", "sample-controller"),
        ("Role", "sample-controller-leader-election"),
        ("ClusterRole", "sample-controller-shard"),
    ] {
        assert!(
            shard_roles.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {shard_roles:?}"
        );
    }
    for (_, resource, verbs) in rules("ClusterRole", "sample-controller-shard") {
        assert_eq!(verbs, ["patch"], "shard: {resource}");
    }
    let lease_rules = rules("Role", "sample-controller-leader-election");
    assert!(
        lease_rules
            .iter()
            .all(|(g, r, _)| g == "coordination.k8s.io" && r == "leases")
    );

    // /mutate-shard: CREATE of the sharded kinds, to the sharder's Service, Ignore on failure,
    // with the CA of the Certificate whose Secret the sharder mounts.
    let mwc = object(
        docs,
        "MutatingWebhookConfiguration",
        "sample-controller-sharder",
    );
    let hook = &mwc["webhooks"][0];
    assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-shard");
    assert_eq!(hook["failurePolicy"], "Ignore");
    let resources: BTreeSet<&str> = hook["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            assert_eq!(r["operations"], serde_json::json!(["CREATE"]));
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
        })
        .collect();
    assert_eq!(
        resources,
        BTreeSet::from(["ats", "tdsets", "redisclusters", "myapps", "foos"])
    );
    let svc_name = hook["clientConfig"]["service"]["name"].as_str().unwrap();
    let svc = object(docs, "Service", svc_name);
    let pod_labels = sharder_pod["metadata"]["labels"].as_object().unwrap();
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "the webhook Service selects the sharder"
        );
    }
    assert!(
        shards["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            != svc["spec"]["selector"]["app.kubernetes.io/component"],
        "and not the shards"
    );
    let cert_ref = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        .as_str()
        .unwrap();
    let (_, cert_name) = cert_ref.split_once('/').unwrap();
    let cert = object(docs, "Certificate", cert_name);
    assert!(
        cert["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(format!(
                "{svc_name}.sample-controller.svc"
            ))),
        "{cert}"
    );
    let secret = cert["spec"]["secretName"].as_str().unwrap();
    assert!(
        sharder_pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == secret),
        "the sharder mounts the certificate's Secret"
    );
}

/// The shard label of an object's metadata, in ring [`RING`].
fn shard_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    let key = RingLabels::new(RING).unwrap().shard_key().to_string();
    meta.labels.as_ref().and_then(|l| l.get(&key)).cloned()
}

/// A RedisCluster is sharded without restarts: its StatefulSet's pods carry no shard label in
/// their template; the sharder labels them for the RedisCluster's shard. When that shard dies
/// (its task aborted, as `kill -9`), the RedisCluster, its StatefulSet, Service and pods move
/// to the survivor, which takes over (it scales the cluster), and the pods are the same pods
/// (same UIDs, the StatefulSet's template untouched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediscluster_moves_off_a_dead_shard_without_restarting_its_pods() {
    use crate::support::operators::{api, operator_server, patch_spec, statefulset};
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use sample_client_go::client::PostParams;
    use sample_operators::apis::{RedisCluster, RedisClusterSpec};
    use sample_operators::controllers::rediscluster::LABEL_CLUSTER;
    let (server, client) = operator_server().await;
    let lease = Duration::from_secs(3);
    let kinds = sample_operators::registry::lookup("rediscluster")
        .unwrap()
        .registration()
        .shard_kinds()
        .unwrap();
    let sharder = (kinds.sharder)(Sharder::new(
        manager_client(&server),
        SharderConfig {
            labels: RingLabels::new(RING).unwrap(),
            lease_namespace: NS.to_string(),
            sync_period: Duration::from_millis(200),
        },
    ));
    let stop_sharder = CancellationToken::new();
    let sharder_task = tokio::spawn(sharder.run(stop_sharder.clone()));
    let start = |id: &str| {
        let shard = shard_config(id, lease, false);
        let config = ManagerConfig {
            controllers: vec!["rediscluster"],
            ..manager_config()
        };
        let manager = sample_operators::registry::manager(config, manager_client(&server))
            .with_clock(Clock::new())
            .with_sharding(Some(shard));
        RunningManager::spawn(manager)
    };
    let mut shards = BTreeMap::from([("shard-a", start("shard-a")), ("shard-b", start("shard-b"))]);
    wait_until("two shard Leases", || async {
        ring_leases(&client).await.len() == 2
    })
    .await;

    let cluster = RedisCluster {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("cache".to_string()),
            namespace: Some(NS.to_string()),
            ..Default::default()
        },
        spec: RedisClusterSpec {
            size: 2,
            image: None,
        },
        status: None,
    };
    api::<RedisCluster>(&client)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let first = Ring::new(["shard-a", "shard-b"])
        .shard_for(&object_key(Some(NS), "cache"))
        .unwrap()
        .to_string();
    let survivor = if first == "shard-a" {
        "shard-b"
    } else {
        "shard-a"
    };

    // Everything of the cluster on one shard, and its two nodes reported by that shard.
    let cluster_pods = || async {
        let lp = ListParams {
            label_selector: Some(format!("{LABEL_CLUSTER}=cache")),
            ..ListParams::default()
        };
        let mut pods = api::<Pod>(&client).list(&lp).await.unwrap().items;
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    };
    let on_shard = |shard: String| {
        let cluster_pods = &cluster_pods;
        let client = &client;
        async move {
            let rc = api::<RedisCluster>(client).get("cache").await.unwrap();
            let sts = api::<StatefulSet>(client).get_opt("cache").await.unwrap();
            let svc = api::<Service>(client).get_opt("cache").await.unwrap();
            let pods = cluster_pods().await;
            shard_of(&rc.metadata).as_deref() == Some(shard.as_str())
                && sts.is_some_and(|s| shard_of(&s.metadata) == Some(shard.clone()))
                && svc.is_some_and(|s| shard_of(&s.metadata) == Some(shard.clone()))
                && pods
                    .iter()
                    .all(|p| shard_of(&p.metadata) == Some(shard.clone()))
        }
    };
    let nodes = |n: usize| {
        let client = &client;
        async move {
            let rc = api::<RedisCluster>(client).get("cache").await.unwrap();
            let want: Vec<String> = (0..n).map(|i| format!("cache-{i}")).collect();
            rc.status.is_some_and(|s| s.nodes == want)
        }
    };
    wait_until(
        &format!("the cluster's two nodes, all on {first}"),
        || async {
            nodes(2).await && on_shard(first.clone()).await && cluster_pods().await.len() == 2
        },
    )
    .await;
    let uids = |pods: Vec<Pod>| -> Vec<String> {
        pods.into_iter()
            .map(|p| p.metadata.uid.unwrap_or_default())
            .collect()
    };
    let before = uids(cluster_pods().await);
    let sts = statefulset(&client, "cache").await.unwrap();
    let template_labels = sts
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .clone()
        .unwrap()
        .labels;
    assert!(
        template_labels
            .iter()
            .flatten()
            .all(|(k, _)| !k.starts_with("shard.sample-controller.dev/")),
        "no shard label in the pod template: {template_labels:?}"
    );
    let generation = sts.metadata.generation;

    // The shard dies holding its Lease: everything moves to the survivor.
    shards.remove(first.as_str()).unwrap().task.abort();
    wait_until_every(
        &format!("the cluster to move to {survivor}"),
        Duration::from_millis(100),
        300,
        || on_shard(survivor.to_string()),
    )
    .await;
    let sts = statefulset(&client, "cache").await.unwrap();
    assert_eq!(
        sts.metadata.generation, generation,
        "the StatefulSet's spec is unchanged"
    );
    assert_eq!(
        sts.spec.unwrap().template.metadata.unwrap().labels,
        template_labels,
        "its template is unchanged"
    );
    assert_eq!(
        uids(cluster_pods().await),
        before,
        "the same pods: none restarted"
    );

    // The survivor works on it: it scales the cluster and reports the three nodes.
    patch_spec::<RedisCluster>(&client, "cache", serde_json::json!({"size": 3})).await;
    wait_until("three nodes reported by the survivor", || async {
        nodes(3).await && on_shard(survivor.to_string()).await
    })
    .await;
    let after = uids(cluster_pods().await);
    assert_eq!(
        after[..2],
        before[..],
        "the first two pods are still the same pods"
    );

    for (_, s) in shards {
        s.stop().await.unwrap();
    }
    stop_sharder.cancel();
    sharder_task.await.unwrap();
}
