//! The real manager's probes and metrics against the embedded API server: `/healthz` fails,
//! naming the resource, when one informer's watch is stuck on 403 (RBAC revoked) or relists
//! endlessly (every watch answered 410), and recovers when the cause goes away; `/readyz` is
//! not ready while RBAC denies the informers' lists and ready once they sync, on the leader and
//! on a standby; `/metrics` has reflector series for exactly the informers the enabled
//! controllers use.

use crate::support;
use crate::support::at::*;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use embedded_apiserver::faults::Fault;
use embedded_cluster::{Cluster, ClusterHandle};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::ClusterRole;
use sample_client_go::client::{Api, Client, Config, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::{
    BoundAddrs, LeaderElectionConfig, ListenersHandle, ManagerConfig, ManagerError,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// `(status, body)` of a GET, or `None` when nothing answers yet.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = client
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .ok()?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    Some((code, String::from_utf8(body.to_vec()).unwrap()))
}

/// Port 0 on the loopback interface: the manager binds a free port, read back with
/// [`Running::bound`].
const ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Polls `path` (every second of tokio time, for at most `secs` seconds) until `want` holds;
/// returns the last body.
async fn wait_for_probe(
    addr: SocketAddr,
    path: &str,
    secs: u32,
    want: impl Fn(u16, &str) -> bool,
) -> String {
    let mut last = None;
    for _ in 0..secs {
        if let Some((code, body)) = get(addr, path).await {
            if want(code, &body) {
                return body;
            }
            last = Some((code, body));
        }
        advance_settled(Duration::from_secs(1), Duration::from_secs(1)).await;
    }
    panic!("{path} on {addr} never reached the expected state; last answer: {last:?}");
}

struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
    listeners: ListenersHandle,
}

impl Running {
    /// The addresses its servers bound.
    async fn bound(&self) -> BoundAddrs {
        self.listeners
            .bound()
            .await
            .expect("the manager is running")
    }

    /// Where its probes listen.
    async fn health(&self) -> SocketAddr {
        self.bound().await.health.expect("probes are served")
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn spawn_manager(client: &Client, config: ManagerConfig, identity: &str) -> Running {
    let manager = sample_operators::registry::manager(config, client.clone())
        .with_clock(Clock::new())
        .with_identity(identity);
    let listeners = manager.listeners_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    Running {
        stop,
        task,
        listeners,
    }
}

/// An RBAC-enforcing server with the At CRD and `artifacts/deploy/` loaded (all of it, or all
/// but the ClusterRoleBinding), an admin client, and a client authenticating as the
/// controller's service account.
async fn rbac_server(with_binding: bool) -> (ClusterHandle, Client, Client) {
    init_tracing();
    sample_client_go::install_crypto_provider();
    let server = Cluster::builder()
        .enforce_rbac(true)
        .service_account_token("controller-token", "sample-controller", "sample-controller")
        .start()
        .await
        .unwrap();
    let admin = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&admin)
        .await
        .unwrap();
    let mut files = vec![
        "artifacts/deploy/base/namespace.yaml",
        "artifacts/deploy/base/serviceaccount.yaml",
        "artifacts/deploy/base/clusterrole.yaml",
        "artifacts/deploy/base/role-leader-election.yaml",
    ];
    if with_binding {
        files.push("artifacts/deploy/base/clusterrolebinding.yaml");
    }
    for file in files {
        server
            .load_manifests(&std::fs::read_to_string(file).unwrap())
            .unwrap();
    }
    let config =
        Config::from_kubeconfig_yaml(&server.kubeconfig_yaml_for_token("controller-token"), None)
            .unwrap();
    let controller = Client::new(config).unwrap();
    (server, admin, controller)
}

fn probes_config(health: SocketAddr) -> ManagerConfig {
    ManagerConfig {
        health_addr: Some(health),
        serving: sample_controller_runtime::health::probe_serving_limits(),
        ..manager_config()
    }
}

#[tokio::test(start_paused = true)]
async fn healthz_fails_naming_the_resource_whose_watch_rbac_denies_and_recovers() {
    let _ticker = Ticker::start();
    let (server, admin, controller) = rbac_server(true).await;
    let manager = spawn_manager(&controller, probes_config(ANY_PORT), "a");
    let addr = manager.health().await;
    wait_for_probe(addr, "/readyz", 120, |c, _| c == 200).await;
    let body = wait_for_probe(addr, "/healthz", 5, |c, _| c == 200).await;
    assert!(body.contains("[+]watch:ats ok"), "{body}");
    assert!(body.contains("[+]watch:pods ok"), "{body}");

    // Revoke list and watch of ats (get stays), and end the open watches: the reflector's next
    // watch and every list after it are answered 403.
    let roles = Api::<ClusterRole>::all(admin.clone());
    let original = roles.get("sample-controller").await.unwrap();
    let mut revoked = original.clone();
    let rules = revoked.rules.as_mut().unwrap();
    let ats_rule = rules
        .iter_mut()
        .find(|r| r.resources.as_deref() == Some(&["ats".to_owned()][..]))
        .unwrap();
    ats_rule.verbs = vec!["get".into()];
    roles
        .update(&PostParams::default(), &revoked)
        .await
        .unwrap();
    server.faults().drop_watches();

    // Still alive inside the 5-minute grace: RBAC may be being rolled out.
    advance_settled(Duration::from_secs(120), Duration::from_secs(5)).await;
    let (code, body) = get(addr, "/healthz").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        server
            .request_log()
            .count_where(|k| k.code == 403 && k.resource == "ats")
            > 0
    );

    let body = wait_for_probe(addr, "/healthz", 400, |c, _| c == 500).await;
    assert!(
        body.contains("[-]watch:ats failed: watch answered 403 Forbidden for"),
        "{body}"
    );
    assert!(
        body.contains("[+]watch:pods ok"),
        "only ats is stuck: {body}"
    );
    assert!(body.ends_with("healthz check failed\n"), "{body}");

    // Restore the rule: the next list succeeds and liveness recovers.
    let current = roles.get("sample-controller").await.unwrap();
    let mut restored = original.clone();
    restored.metadata.resource_version = current.metadata.resource_version;
    roles
        .update(&PostParams::default(), &restored)
        .await
        .unwrap();
    let body = wait_for_probe(addr, "/healthz", 120, |c, _| c == 200).await;
    assert!(body.contains("[+]watch:ats ok"), "{body}");

    manager.stop().await;
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn healthz_fails_when_every_watch_is_gone_and_the_informer_relists_endlessly() {
    let _ticker = Ticker::start();
    let (server, client) = support::at::server().await;
    let manager = spawn_manager(&manager_client(&server), probes_config(ANY_PORT), "a");
    let addr = manager.health().await;
    wait_for_probe(addr, "/readyz", 120, |c, _| c == 200).await;

    // Every watch of ats is answered 410 from now on; lists still work, so the reflector lists,
    // fails to watch, backs off and lists again, for ever.
    server.faults().inject(Fault {
        count: None,
        ..Fault::fail(410).verb("watch").resource("ats")
    });
    server.faults().drop_watches();
    let body = wait_for_probe(addr, "/healthz", 600, |c, _| c == 500).await;
    assert!(
        body.contains("[-]watch:ats failed: 10 relists within"),
        "{body}"
    );
    assert!(body.contains("[+]watch:pods ok"), "{body}");

    // The fault clears: the next watch works and its first event ends the streak.
    server.faults().clear();
    let schedule = in_the_future(&Clock::new(), Duration::from_secs(3600));
    create_at(&client, &at("wake", &schedule, "true")).await;
    let body = wait_for_probe(addr, "/healthz", 120, |c, _| c == 200).await;
    assert!(body.contains("[+]watch:ats ok"), "{body}");

    manager.stop().await;
    server.shutdown().await;
}

fn elected(health: SocketAddr) -> ManagerConfig {
    ManagerConfig {
        leader_election: Some(LeaderElectionConfig {
            lease_name: "sample-controller".into(),
            lease_namespace: "sample-controller".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
        ..probes_config(health)
    }
}

#[tokio::test(start_paused = true)]
async fn readyz_waits_for_the_caches_on_the_leader_and_on_the_standby() {
    let _ticker = Ticker::start();
    // No ClusterRoleBinding yet: the manager may hold its Lease but may not list anything.
    let (server, admin, controller) = rbac_server(false).await;
    let a = spawn_manager(&controller, elected(ANY_PORT), "replica-a");
    let addr_a = a.health().await;
    let leases = Api::<Lease>::namespaced(admin.clone(), "sample-controller");
    wait_until("replica-a to lead", || async {
        leases
            .get("sample-controller")
            .await
            .ok()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
            == Some("replica-a".to_owned())
    })
    .await;
    let b = spawn_manager(&controller, elected(ANY_PORT), "replica-b");
    let addr_b = b.health().await;

    for addr in [addr_a, addr_b] {
        let body = wait_for_probe(addr, "/readyz", 30, |c, _| c == 500).await;
        assert!(
            body.contains("[-]informer:ats failed: not synced"),
            "{body}"
        );
        assert!(
            body.contains("[-]informer:pods failed: not synced"),
            "{body}"
        );
        // Alive all the same: a fresh 403 is inside the grace, and caches are not liveness.
        let (code, body) = get(addr, "/healthz").await.unwrap();
        assert_eq!(code, 200, "{body}");
    }
    assert!(
        server
            .request_log()
            .count_where(|k| k.code == 403 && k.verb == "list")
            > 0
    );

    // Grant the ClusterRole: both replicas' informers sync (after at most one backoff step).
    server
        .load_manifests(
            &std::fs::read_to_string("artifacts/deploy/base/clusterrolebinding.yaml").unwrap(),
        )
        .unwrap();
    for addr in [addr_a, addr_b] {
        let body = wait_for_probe(addr, "/readyz", 120, |c, _| c == 200).await;
        assert!(body.contains("[+]informer:ats ok"), "{body}");
        assert!(body.contains("[+]informers-synced ok"), "{body}");
    }
    // replica-b is ready without ever having led.
    let holder = leases
        .get("sample-controller")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("replica-a"));

    b.stop().await;
    a.stop().await;
    server.shutdown().await;
}

/// The `name` labels of the `reflector_lists` series in a scrape.
fn reflector_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("reflector_lists_total{"))
        .filter_map(|l| {
            let rest = l.split_once("name=\"")?.1;
            Some(rest.split_once('"')?.0.to_owned())
        })
        .collect();
    names.sort();
    names
}

#[tokio::test(start_paused = true)]
async fn metrics_cover_exactly_the_informers_of_the_enabled_controllers() {
    let _ticker = Ticker::start();
    let (server, _client) = support::operators::operator_server().await;

    let all = spawn_manager(
        &manager_client(&server),
        ManagerConfig {
            controllers: sample_operators::registry::NAMES.to_vec(),
            metrics_addr: Some(ANY_PORT),
            ..manager_config()
        },
        "all",
    );
    let metrics = all.bound().await.metrics.expect("metrics are served");
    let mut text = String::new();
    for _ in 0..120 {
        if let Some((200, body)) = get(metrics, "/metrics").await {
            text = body;
            if reflector_names(&text).len() >= 9 {
                break;
            }
        }
        advance_settled(Duration::from_secs(1), Duration::from_secs(1)).await;
    }
    let want = [
        "ats",
        "deployments",
        "foos",
        "myapps",
        "pods",
        "redisclusters",
        "services",
        "statefulsets",
        "tdsets",
    ];
    assert_eq!(reflector_names(&text), want, "{text}");
    for name in want {
        assert!(
            text.contains(&format!("store_objects{{name=\"{name}\"}}")),
            "{name}: {text}"
        );
    }
    // Every informer has really listed: the counters are live, not placeholders.
    let lists_of = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("reflector_lists_total{{name=\"{name}\"}} ")))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    };
    wait_until("every informer to list", || async {
        let Some((_, t)) = get(metrics, "/metrics").await else {
            return false;
        };
        want.iter()
            .all(|n| lists_of(&t, n) + watches_of(&t, n) >= 1.0)
    })
    .await;
    all.stop().await;

    let tdset = spawn_manager(
        &manager_client(&server),
        ManagerConfig {
            controllers: vec!["tdset"],
            metrics_addr: Some(ANY_PORT),
            ..manager_config()
        },
        "tdset",
    );
    let metrics = tdset.bound().await.metrics.expect("metrics are served");
    let mut names = Vec::new();
    for _ in 0..120 {
        if let Some((200, body)) = get(metrics, "/metrics").await {
            names = reflector_names(&body);
            if !names.is_empty() {
                assert!(
                    !body.contains("name=\"ats\""),
                    "no At informer with --controllers=tdset: {body}"
                );
                break;
            }
        }
        advance_settled(Duration::from_secs(1), Duration::from_secs(1)).await;
    }
    assert!(names.contains(&"tdsets".to_owned()), "{names:?}");
    assert!(!names.contains(&"ats".to_owned()), "{names:?}");
    assert!(!names.contains(&"redisclusters".to_owned()), "{names:?}");
    tdset.stop().await;
    server.shutdown().await;
}

fn watches_of(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("reflector_watches_total{{name=\"{name}\"}} ")))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}
