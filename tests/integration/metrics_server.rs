//! The manager's HTTP endpoints over real HTTP: `/metrics` parses as Prometheus text and carries
//! the families the manager promises; `/readyz` follows informer sync, on a leader and on a
//! standby alike (leader election gates workers, not caches); `/healthz` follows liveness.

use crate::record_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ConfigMap;
use record_support::*;
use sample_controller::client::{Api, ListParams};
use sample_controller::health::{HealthState, serve_health};
use sample_controller::leaderelection::{
    LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock,
};
use sample_controller::metrics::{Metrics, serve_metrics};
use sample_controller::record::EventBroadcaster;
use sample_controller::workqueue::{Queue, QueueMetrics};
use tokio_util::sync::CancellationToken;

async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = client
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, ctype, String::from_utf8(body.to_vec()).unwrap())
}

/// Parses the text exposition strictly enough to catch malformed output: every line is a
/// `# HELP`/`# TYPE`/`# UNIT` comment, `# EOF` (last), or `name{labels} value`, every sample
/// belongs to a declared family, and label values are quoted. Returns the family names.
fn parse_exposition(text: &str) -> BTreeSet<String> {
    let mut families = BTreeSet::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "exposition ends with # EOF");
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let kind = parts.next().unwrap();
            let name = parts.next().expect("comment names a family");
            assert!(
                matches!(kind, "HELP" | "TYPE" | "UNIT"),
                "bad comment: {line}"
            );
            if kind == "TYPE" {
                let ty = parts.next().expect("TYPE has a type");
                assert!(
                    matches!(ty, "counter" | "gauge" | "histogram" | "info" | "unknown"),
                    "bad type: {line}"
                );
                families.insert(name.to_owned());
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value is a number: {line}"));
        let name = match series.split_once('{') {
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').expect("labels close");
                for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').expect("label is k=v");
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "label name: {line}"
                    );
                    assert!(v.starts_with('"'), "label value quoted: {line}");
                }
                name
            }
            None => series,
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "metric name: {line}"
        );
        let belongs = families.iter().any(|f| {
            name == f
                || ["_total", "_sum", "_count", "_bucket", "_info"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(f.as_str()))
        });
        assert!(belongs, "sample of an undeclared family: {line}");
    }
    families
}

#[tokio::test]
async fn metrics_endpoint_serves_every_family_as_prometheus_text() {
    let server = server().await;
    let client = client(&server);
    let metrics = Metrics::new();
    metrics.register_client(&client);
    let broadcaster = EventBroadcaster::new();
    metrics.register_event_broadcaster(&broadcaster);
    let queue_metrics = metrics.with_registry(QueueMetrics::new);
    let queue: Queue<String> = Queue::with_metrics("ats", &queue_metrics);
    queue.add("demo/example".into());

    // Some traffic for the REST client families, and something in every other family.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.list(&ListParams::default()).await.unwrap();
    assert!(cms.get("missing").await.is_err());
    metrics
        .controller()
        .observe_sync("cnat", Duration::from_millis(30), false);
    metrics
        .controller()
        .observe_sync("cnat", Duration::from_millis(3), true);
    let reflector = metrics.reflector();
    reflector.list("ats");
    reflector.watch("ats");
    reflector.gone("ats");
    reflector.event("ats");
    metrics.store().set_objects("ats", 3);
    metrics
        .leader_election()
        .set_leading("kube-system/cnat", true);

    let cancel = CancellationToken::new();
    let handle = serve_metrics(
        "127.0.0.1:0".parse().unwrap(),
        metrics.registry(),
        cancel.clone(),
    )
    .await
    .unwrap();
    let (code, ctype, body) = get(handle.local_addr(), "/metrics").await;
    assert_eq!(code, 200);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let families = parse_exposition(&body);
    for name in [
        "controller_sync",
        "controller_sync_errors",
        "controller_sync_duration_seconds",
        "rest_client_requests",
        "rest_client_request_duration_seconds",
        "rest_client_too_many_requests",
        "rest_client_retries",
        "reflector_lists",
        "reflector_watches",
        "reflector_gone",
        "reflector_last_event_age_seconds",
        "store_objects",
        "events_dropped",
        "leader_election_master_status",
        "workqueue_depth",
        "workqueue_adds",
        "workqueue_queue_duration_seconds",
    ] {
        assert!(
            families.contains(name),
            "family {name} missing from:\n{body}"
        );
    }
    for sample in [
        "controller_sync_total{controller=\"cnat\"} 2",
        "controller_sync_errors_total{controller=\"cnat\"} 1",
        "controller_sync_duration_seconds_count{controller=\"cnat\"} 2",
        "rest_client_requests_total{verb=\"GET\",code=\"200\"} 1",
        "rest_client_requests_total{verb=\"GET\",code=\"404\"} 1",
        "rest_client_request_duration_seconds_count{verb=\"GET\",code=\"404\"} 1",
        "reflector_gone_total{name=\"ats\"} 1",
        "store_objects{name=\"ats\"} 3",
        "events_dropped_total 0",
        "leader_election_master_status{name=\"kube-system/cnat\"} 1",
        "workqueue_depth{name=\"ats\"} 1",
        "workqueue_adds_total{name=\"ats\"} 1",
    ] {
        assert!(body.contains(sample), "{sample} missing from:\n{body}");
    }
    assert!(body.contains("reflector_last_event_age_seconds{name=\"ats\"} "));

    let (code, _, _) = get(handle.local_addr(), "/nope").await;
    assert_eq!(code, 404);
    handle.shutdown().await;
    queue.shut_down();
}

/// One replica of the manager: informers (simulated by a `synced` flag a readiness closure
/// reads, as `informer.has_synced()` would be), an elector on the shared Lease, and the probe
/// server.
struct Replica {
    synced: Arc<AtomicBool>,
    elector: LeaderElector<LeaseLock>,
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    server: sample_controller::health::ServerHandle,
}

async fn replica(client: &sample_controller::client::Client, id: &str) -> Replica {
    let health = HealthState::new();
    let synced = Arc::new(AtomicBool::new(false));
    let s = synced.clone();
    health.add_readiness_check("informer:ats", move || s.load(Ordering::SeqCst));
    let lock = LeaseLock::new(client.clone(), "kube-system", "cnat-controller");
    let mut config = LeaderElectionConfig::new(lock, id);
    config.retry_period = Duration::from_millis(200);
    config.renew_deadline = Duration::from_secs(1);
    config.lease_duration = Duration::from_secs(15);
    let elector = LeaderElector::new(
        config,
        LeaderCallbacks::new(
            |t: CancellationToken| async move { t.cancelled().await },
            || {},
        ),
    )
    .unwrap();
    let e = elector.clone();
    health.add_liveness_check("leader-election", move || e.check(Duration::from_secs(20)));
    let cancel = CancellationToken::new();
    let server = serve_health("127.0.0.1:0".parse().unwrap(), health, cancel.clone())
        .await
        .unwrap();
    let (e, c) = (elector.clone(), cancel.clone());
    let task = tokio::spawn(async move { e.run(c).await });
    Replica {
        synced,
        elector,
        addr: server.local_addr(),
        cancel,
        task,
        server,
    }
}

#[tokio::test]
async fn readyz_follows_sync_on_the_leader_and_on_the_standby() {
    let server = server().await;
    let client = client(&server);
    let a = replica(&client, "a").await;
    let mut polls = 0;
    while !a.elector.is_leader() {
        polls += 1;
        assert!(polls < 3000, "a never became leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = replica(&client, "b").await;
    polls = 0;
    while b.elector.get_leader() != "a" {
        polls += 1;
        assert!(polls < 3000, "b never observed a");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!b.elector.is_leader());

    for r in [&a, &b] {
        let (code, _, body) = get(r.addr, "/readyz").await;
        assert_eq!(code, 500, "not ready before sync: {body}");
        assert!(
            body.contains("[-]informer:ats failed: not synced"),
            "{body}"
        );
        assert!(body.ends_with("readyz check failed\n"), "{body}");
        // Alive all the same: liveness does not wait for caches.
        let (code, _, body) = get(r.addr, "/healthz").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("[+]leader-election ok"), "{body}");
    }
    a.synced.store(true, Ordering::SeqCst);
    b.synced.store(true, Ordering::SeqCst);
    for r in [&a, &b] {
        let (code, _, body) = get(r.addr, "/readyz").await;
        assert_eq!(code, 200, "ready after sync, leader or not: {body}");
        assert!(body.contains("[+]informer:ats ok"));
        let (code, _, _) = get(r.addr, "/livez").await;
        assert_eq!(code, 200);
    }
    for r in [a, b] {
        r.cancel.cancel();
        r.task.await.unwrap();
        r.server.join().await;
    }
}
