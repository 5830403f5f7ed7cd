//! The manager's HTTP endpoints over real HTTP: `/metrics` parses as Prometheus text and carries
//! the families the manager promises, with client-go's `rest_client_*` labels and buckets and
//! informer counters read at scrape time; `/readyz` follows informer sync, on a leader and on a
//! standby alike (leader election gates workers, not caches); `/healthz` follows liveness.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::cache::SharedInformerFactory;
use sample_client_go::client::{Api, Client, Config, ListParams, PostParams};
use sample_client_go::leaderelection::{
    LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock,
};
use sample_client_go::record::EventBroadcaster;
use sample_client_go::workqueue::{Queue, QueueMetrics};
use sample_controller_runtime::health::{HealthState, serve_health};
use sample_controller_runtime::metrics::{Metrics, serve_metrics};
use support::record::*;
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

/// One sample line: its name, labels and value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Every sample of the exposition, labels parsed (values unescaped only as far as the tests
/// need: they contain no quotes or backslashes).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').unwrap();
                    let labels = body
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            let (k, v) = p.split_once('=').unwrap();
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            Sample {
                name,
                labels,
                value: value.parse().unwrap(),
            }
        })
        .collect()
}

/// The value of the one sample named `name` whose labels include `want`; None if there is none.
fn value(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = samples(text)
        .into_iter()
        .filter(|s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .collect();
    assert!(found.len() <= 1, "{name} {want:?} matches {found:?}");
    found.first().copied()
}

/// The `_bucket` series of histogram `name` for `want`, as (le, cumulative count) in
/// exposition order.
fn buckets(text: &str, name: &str, want: &[(&str, &str)]) -> Vec<(f64, f64)> {
    samples(text)
        .into_iter()
        .filter(|s| {
            s.name == format!("{name}_bucket")
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| {
            let le = match s.labels["le"].as_str() {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap(),
            };
            (le, s.value)
        })
        .collect()
}

/// client-go's `requestLatency` / `rateLimiterLatency` buckets, then `+Inf`.
const CLIENT_GO_BUCKETS: [f64; 13] = [
    0.005,
    0.025,
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    4.0,
    8.0,
    15.0,
    30.0,
    60.0,
    f64::INFINITY,
];

/// Checks one histogram series: client-go's bucket bounds, cumulative counts that never
/// decrease, `+Inf` equal to `_count`; returns the buckets.
fn check_histogram(text: &str, name: &str, want: &[(&str, &str)], count: f64) -> Vec<(f64, f64)> {
    let b = buckets(text, name, want);
    let bounds: Vec<f64> = b.iter().map(|(le, _)| *le).collect();
    assert_eq!(bounds, CLIENT_GO_BUCKETS, "{name} {want:?}:\n{text}");
    for w in b.windows(2) {
        assert!(w[0].1 <= w[1].1, "{name} {want:?} buckets decrease: {b:?}");
    }
    assert_eq!(b.last().unwrap().1, count, "{name} {want:?} +Inf");
    assert_eq!(
        value(text, &format!("{name}_count"), want),
        Some(count),
        "{name} {want:?} _count"
    );
    b
}

/// The cumulative count of bucket `le` in `b`.
fn at_most(b: &[(f64, f64)], le: f64) -> f64 {
    b.iter().find(|(bound, _)| *bound == le).unwrap().1
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
    // An informer over ConfigMaps (with its own client, so its LIST and WATCH do not show up
    // in the counts below), synced before the scrape.
    let factory = SharedInformerFactory::new(support::record::client(&server), Duration::ZERO)
        .with_namespace("default");
    let informer = factory.informer::<ConfigMap>();
    metrics.register_informer("configmaps", &informer);
    let informers = CancellationToken::new();
    factory.start(&informers);
    wait_synced(|| informer.has_synced()).await;
    let stats = informer.status().snapshot();
    let objects = informer.indexer().len();
    use sample_client_go::leaderelection::LeaderMetrics as _;
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
        "events_dropped_total 0",
        "leader_election_master_status{name=\"kube-system/cnat\"} 1",
        "workqueue_depth{name=\"ats\"} 1",
        "workqueue_adds_total{name=\"ats\"} 1",
    ] {
        assert!(body.contains(sample), "{sample} missing from:\n{body}");
    }
    let host = client.metrics().host().to_owned();
    let h = host.as_str();
    let get200 = [("code", "200"), ("method", "GET"), ("host", h)];
    let get404 = [("code", "404"), ("method", "GET"), ("host", h)];
    assert_eq!(
        value(&body, "rest_client_requests_total", &get200),
        Some(1.0)
    );
    assert_eq!(
        value(&body, "rest_client_requests_total", &get404),
        Some(1.0)
    );
    check_histogram(
        &body,
        "rest_client_request_duration_seconds",
        &[("verb", "GET"), ("host", h)],
        2.0,
    );
    let named = [("name", "configmaps")];
    assert_eq!(
        value(&body, "reflector_lists_total", &named),
        Some(stats.lists as f64)
    );
    assert_eq!(
        value(&body, "reflector_watches_total", &named),
        Some(stats.watches as f64)
    );
    assert!(stats.lists + stats.watches >= 1, "{stats:?}");
    assert_eq!(value(&body, "reflector_gone_total", &named), Some(0.0));
    assert_eq!(value(&body, "store_objects", &named), Some(objects as f64));
    assert_eq!(
        value(&body, "reflector_last_event_age_seconds", &named).is_some(),
        stats.last_event.is_some()
    );

    let (code, _, _) = get(handle.local_addr(), "/nope").await;
    assert_eq!(code, 404);
    handle.shutdown().await;
    queue.shut_down();
    informers.cancel();
    factory.shutdown().await;
}

/// Polls `synced` (every 10 ms, at most 30 s).
async fn wait_synced(synced: impl Fn() -> bool) {
    for _ in 0..3000 {
        if synced() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never synced");
}

async fn scrape(metrics: &Metrics) -> String {
    let cancel = CancellationToken::new();
    let handle = serve_metrics(
        "127.0.0.1:0".parse().unwrap(),
        metrics.registry(),
        cancel.clone(),
    )
    .await
    .unwrap();
    let (code, _, body) = get(handle.local_addr(), "/metrics").await;
    assert_eq!(code, 200);
    parse_exposition(&body);
    handle.shutdown().await;
    body
}

/// client-go's `rest_client_*` families after traffic of several verbs and outcomes: every
/// attempt counted by code, method and host (`<error>` for no answer), retries by code, one
/// latency observation per request in client-go's buckets with the throttle wait included, and
/// one throttle observation per attempt.
#[tokio::test]
async fn rest_client_families_have_client_go_labels_and_buckets() {
    let server = server().await;
    let mut config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    // One token at a time, one a second.
    config.qps = 1.0;
    config.burst = 1;
    let client = Client::new(config).unwrap();
    let metrics = Metrics::new();
    metrics.register_client(&client);
    metrics.register_client(&client); // counted once

    // Three requests at once take their tokens in the order they arrive: the LIST at once, the
    // GET about 1 s later, the POST about 2 s later.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("metrics-test".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let pp = PostParams::default();
    let lp = ListParams::default();
    let (list, missing, created) =
        tokio::join!(cms.list(&lp), cms.get("missing"), cms.create(&pp, &cm));
    list.unwrap();
    assert!(missing.unwrap_err().is_not_found());
    created.unwrap();

    // A server that resets every connection: one GET, retried once (a reset is retried, after
    // 1 s, as client-go does), no answer either time.
    let resetting = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = resetting.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        while let Ok((mut sock, _)) = resetting.accept().await {
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            // Linger 0: the close is an immediate RST.
            #[allow(deprecated)]
            let _ = sock.set_linger(Some(Duration::ZERO));
            drop(sock);
        }
    });
    let mut refused = Config::new(format!("http://{gone}").parse().unwrap());
    refused.qps = 0.0;
    refused.max_retries = 1;
    let refused = Client::new(refused).unwrap();
    metrics.register_client(&refused);
    assert!(
        Api::<ConfigMap>::namespaced(refused.clone(), "default")
            .get("x")
            .await
            .is_err()
    );

    let body = scrape(&metrics).await;
    let host = client.metrics().host().to_owned();
    let h = host.as_str();
    let gone_host = gone.to_string();
    let g = gone_host.as_str();
    let url: http::Uri = server.url().parse().unwrap();
    assert_eq!(h, url.authority().unwrap().as_str());

    // rest_client_requests_total{code, method, host}: every attempt.
    for (code, method, host, n) in [
        ("200", "GET", h, 1.0),
        ("404", "GET", h, 1.0),
        ("201", "POST", h, 1.0),
        ("<error>", "GET", g, 2.0),
    ] {
        assert_eq!(
            value(
                &body,
                "rest_client_requests_total",
                &[("code", code), ("method", method), ("host", host)]
            ),
            Some(n),
            "{code} {method} {host}:\n{body}"
        );
    }
    // rest_client_request_retries_total{code, verb, host}: the second attempt only.
    assert_eq!(
        value(
            &body,
            "rest_client_request_retries_total",
            &[("code", "<error>"), ("verb", "GET"), ("host", g)]
        ),
        Some(1.0)
    );
    assert_eq!(value(&body, "rest_client_retries_total", &[]), Some(1.0));

    // rest_client_request_duration_seconds{verb, host}: one per request, the throttle wait
    // included: the second GET took about 1 s, the POST about 2 s.
    let get = check_histogram(
        &body,
        "rest_client_request_duration_seconds",
        &[("verb", "GET"), ("host", h)],
        2.0,
    );
    assert!(at_most(&get, 0.5) <= 1.0, "{get:?}");
    let post = check_histogram(
        &body,
        "rest_client_request_duration_seconds",
        &[("verb", "POST"), ("host", h)],
        1.0,
    );
    assert_eq!(at_most(&post, 1.0), 0.0, "{post:?}");
    let failed = check_histogram(
        &body,
        "rest_client_request_duration_seconds",
        &[("verb", "GET"), ("host", g)],
        1.0,
    );
    assert_eq!(at_most(&failed, f64::INFINITY), 1.0);
    let sum = value(
        &body,
        "rest_client_request_duration_seconds_sum",
        &[("verb", "POST"), ("host", h)],
    )
    .unwrap();
    assert!(sum >= 1.0, "{sum}");

    // rest_client_rate_limiter_duration_seconds{verb, host}: one per throttled attempt; the
    // client without a throttle has none.
    let waits = check_histogram(
        &body,
        "rest_client_rate_limiter_duration_seconds",
        &[("verb", "GET"), ("host", h)],
        2.0,
    );
    assert!(at_most(&waits, 0.25) <= 1.0, "{waits:?}");
    let post_wait = check_histogram(
        &body,
        "rest_client_rate_limiter_duration_seconds",
        &[("verb", "POST"), ("host", h)],
        1.0,
    );
    assert_eq!(at_most(&post_wait, 1.0), 0.0, "{post_wait:?}");
    assert!(
        buckets(
            &body,
            "rest_client_rate_limiter_duration_seconds",
            &[("host", g)]
        )
        .is_empty()
    );
}

/// The informer families are read when /metrics is encoded: a scrape right after a change
/// reaches the store shows it, with no refresh period to wait for.
#[tokio::test]
async fn informer_metrics_are_current_at_every_scrape() {
    let server = server().await;
    let client = client(&server);
    let metrics = Metrics::new();
    let factory =
        SharedInformerFactory::new(client.clone(), Duration::ZERO).with_namespace("default");
    let informer = factory.informer::<ConfigMap>();
    metrics.register_informer("configmaps", &informer);
    let named = [("name", "configmaps")];

    // Registered but not started: zeros, and no event yet.
    let body = scrape(&metrics).await;
    assert_eq!(value(&body, "store_objects", &named), Some(0.0));
    assert_eq!(value(&body, "reflector_lists_total", &named), Some(0.0));
    assert_eq!(value(&body, "reflector_watches_total", &named), Some(0.0));
    assert_eq!(
        value(&body, "reflector_last_event_age_seconds", &named),
        None
    );

    let cancel = CancellationToken::new();
    factory.start(&cancel);
    wait_synced(|| informer.has_synced()).await;
    let before = informer.indexer().len();
    let body = scrape(&metrics).await;
    assert_eq!(value(&body, "store_objects", &named), Some(before as f64));
    let stats = informer.status().snapshot();
    assert!(stats.lists + stats.watches >= 1);
    assert_eq!(
        value(&body, "reflector_watches_total", &named),
        Some(stats.watches as f64)
    );

    // A new object: as soon as the watch event has reached the store, a scrape shows it.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("live-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        cms.create(&PostParams::default(), &cm).await.unwrap();
        let want = before + i + 1;
        wait_synced(|| informer.indexer().len() == want).await;
        let body = scrape(&metrics).await;
        assert_eq!(
            value(&body, "store_objects", &named),
            Some(want as f64),
            "{body}"
        );
        let age = value(&body, "reflector_last_event_age_seconds", &named)
            .expect("a watch event was received");
        assert!(age >= 0.0);
    }
    cancel.cancel();
    factory.shutdown().await;
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
    server: sample_controller_runtime::health::ServerHandle,
}

async fn replica(client: &sample_client_go::client::Client, id: &str) -> Replica {
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

/// controller-runtime's reconcile families, beside ours, with its names, labels and buckets:
/// every series of a controller exists at 0 once its workers start, then each sync counts.
#[test]
fn controller_runtime_families_have_its_names_labels_and_buckets() {
    use sample_controller_runtime::metrics::{RECONCILE_TIME_BUCKETS, ReconcileResult};
    let metrics = Metrics::new();
    let m = metrics.controller();
    m.start_controller("cnat", 2);
    let body = metrics.encode();
    for line in [
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"success\"} 0",
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"error\"} 0",
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"requeue\"} 0",
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"requeue_after\"} 0",
        "controller_runtime_reconcile_errors_total{controller=\"cnat\"} 0",
        "controller_runtime_terminal_reconcile_errors_total{controller=\"cnat\"} 0",
        "controller_runtime_reconcile_panics_total{controller=\"cnat\"} 0",
        "controller_runtime_max_concurrent_reconciles{controller=\"cnat\"} 2",
        "controller_runtime_active_workers{controller=\"cnat\"} 0",
    ] {
        assert!(body.contains(line), "missing {line}:\n{body}");
    }
    m.observe_reconcile("cnat", Duration::from_millis(120), ReconcileResult::Success);
    m.observe_reconcile(
        "cnat",
        Duration::from_millis(3),
        ReconcileResult::RequeueAfter,
    );
    m.observe_reconcile("cnat", Duration::from_millis(7), ReconcileResult::Error);
    m.observe_reconcile("cnat", Duration::from_millis(7), ReconcileResult::Panic);
    m.add_active_workers("cnat", 1);
    let body = metrics.encode();
    for line in [
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"success\"} 1",
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"requeue_after\"} 1",
        "controller_runtime_reconcile_total{controller=\"cnat\",result=\"error\"} 2",
        "controller_runtime_reconcile_errors_total{controller=\"cnat\"} 2",
        "controller_runtime_reconcile_panics_total{controller=\"cnat\"} 1",
        "controller_runtime_active_workers{controller=\"cnat\"} 1",
        "controller_runtime_reconcile_time_seconds_count{controller=\"cnat\"} 4",
        // Ours, from the same observations.
        "controller_sync_total{controller=\"cnat\"} 4",
        "controller_sync_errors_total{controller=\"cnat\"} 2",
    ] {
        assert!(body.contains(line), "missing {line}:\n{body}");
    }
    // controller-runtime's 40 buckets (plus +Inf), cumulative: 0.15 s holds the 120 ms sync
    // and the three short ones, 0.1 s only the short ones.
    let buckets: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_time_seconds_bucket"))
        .collect();
    assert_eq!(
        buckets.len(),
        RECONCILE_TIME_BUCKETS.len() + 1,
        "{buckets:#?}"
    );
    assert_eq!(RECONCILE_TIME_BUCKETS[5], 0.15);
    assert_eq!(RECONCILE_TIME_BUCKETS[39], 60.0);
    let bucket = |le: &str| {
        buckets
            .iter()
            .find(|l| l.contains(&format!("le=\"{le}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no bucket {le}: {buckets:#?}"))
            .to_string()
    };
    assert_eq!(bucket("0.1"), "3");
    assert_eq!(bucket("0.15"), "4");
}
