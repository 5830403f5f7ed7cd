//! Trace export: a manager run with an OTLP endpoint (`--otlp-endpoint`, here
//! `ManagerConfig::otlp`) POSTs its `sync` and `request` spans as OTLP/HTTP JSON to
//! `{endpoint}/v1/traces`. The collector is an in-test hyper server that records what it is
//! sent and can answer 503 first; a dead endpoint must not hold up any sync.

use crate::support::at::*;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::otlp::{self, OtlpConfig, SpanQueue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

/// What the receiver saw: each POST's path, content type and JSON body.
#[derive(Clone, Default)]
struct Receiver {
    posts: Arc<Mutex<Vec<(String, String, Value)>>>,
    /// Answers to give first, in order; then 200.
    script: Arc<Mutex<Vec<u16>>>,
    answered: Arc<Mutex<Vec<u16>>>,
}

impl Receiver {
    async fn start(script: Vec<u16>) -> (Receiver, String) {
        let rx = Receiver {
            script: Arc::new(Mutex::new(script)),
            ..Default::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let r = rx.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let _ = stream.set_nodelay(true);
                let r = r.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let r = r.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            let ctype = req
                                .headers()
                                .get(http::header::CONTENT_TYPE)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            let body = req.into_body().collect().await?.to_bytes();
                            let code = {
                                let mut s = r.script.lock().unwrap();
                                if s.is_empty() { 200 } else { s.remove(0) }
                            };
                            r.answered.lock().unwrap().push(code);
                            if code == 200 {
                                let json: Value =
                                    serde_json::from_slice(&body).expect("the exporter sends JSON");
                                r.posts.lock().unwrap().push((path, ctype, json));
                            }
                            Ok::<_, hyper::Error>(
                                Response::builder()
                                    .status(StatusCode::from_u16(code).unwrap())
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from_static(b"{}")))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (rx, format!("http://{addr}"))
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for (_, _, body) in self.posts.lock().unwrap().iter() {
            for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                let service = rs["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["key"] == "service.name")
                    .and_then(|a| a["value"]["stringValue"].as_str())
                    .unwrap_or("")
                    .to_owned();
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for s in ss["spans"].as_array().into_iter().flatten() {
                        out.push((service.clone(), s.clone()));
                    }
                }
            }
        }
        out
    }
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn is_pod_create(s: &Value) -> bool {
    s["name"] == "request"
        && attr(s, "verb").and_then(|v| v["stringValue"].as_str()) == Some("POST")
        && attr(s, "resource").and_then(|v| v["stringValue"].as_str()) == Some("pods")
}

struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), sample_controller_runtime::manager::ManagerError>>,
}

/// A manager exporting to `endpoint` through `queue`, the layer installed on this thread's
/// subscriber (the test runtime is single-threaded, so every span is seen).
async fn start_exporting(
    server: &embedded_cluster::ClusterHandle,
    endpoint: &str,
    queue: &SpanQueue,
) -> (Running, tracing::subscriber::DefaultGuard) {
    let subscriber = tracing_subscriber::registry().with(otlp::layer(queue.clone()));
    let guard = tracing::subscriber::set_default(subscriber);
    let mut otlp_config = OtlpConfig::new(otlp::parse_endpoint(endpoint).unwrap(), "at-otlp-test");
    otlp_config.scheduled_delay = Duration::from_millis(100);
    let config = sample_controller_runtime::manager::ManagerConfig {
        otlp: Some(otlp_config),
        ..manager_config()
    };
    let manager = sample_operators::registry::manager(config, manager_client(server))
        .with_clock(Clock::new())
        .with_span_queue(queue.clone());
    let controllers = manager.controllers_handle();
    let stop = CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    wait_until("the manager's caches to sync", || async {
        controllers.has_synced()
    })
    .await;
    (Running { stop, task }, guard)
}

#[tokio::test]
async fn a_sync_and_its_pod_create_reach_the_collector_as_parent_and_child() {
    let (rx, endpoint) = Receiver::start(vec![]).await;
    let (server, client) = server().await;
    let queue = SpanQueue::new(otlp::DEFAULT_MAX_QUEUE_SIZE);
    let (manager, _guard) = start_exporting(&server, &endpoint, &queue).await;

    let now = in_the_future(&Clock::new(), Duration::ZERO);
    create_at(&client, &at("exported", &now, "echo hi")).await;
    wait_for_pod(&client, "exported-pod").await;
    wait_until("the pod create's span at the collector", || async {
        rx.spans().iter().any(|(_, s)| is_pod_create(s))
    })
    .await;

    let posts = rx.posts.lock().unwrap().clone();
    for (path, ctype, _) in &posts {
        assert_eq!(path, "/v1/traces");
        assert_eq!(ctype, "application/json");
    }
    let spans = rx.spans();
    assert!(spans.iter().all(|(svc, _)| svc == "at-otlp-test"));
    let (_, create) = spans.iter().find(|(_, s)| is_pod_create(s)).unwrap();
    assert_eq!(attr(create, "code").unwrap()["intValue"], "201", "{create}");
    assert_eq!(create["kind"], 3);
    let parent_id = create["parentSpanId"]
        .as_str()
        .expect("the request span has a parent");
    let (_, sync) = spans
        .iter()
        .find(|(_, s)| s["spanId"] == parent_id)
        .expect("the parent span was exported too");
    assert_eq!(sync["name"], "sync");
    assert_eq!(sync["traceId"], create["traceId"]);
    assert_eq!(sync["traceId"].as_str().unwrap().len(), 32);
    assert_eq!(sync["spanId"].as_str().unwrap().len(), 16);
    assert!(
        sync.get("parentSpanId").is_none(),
        "a sync is a root: {sync}"
    );
    assert_eq!(attr(sync, "controller").unwrap()["stringValue"], "at");
    assert_eq!(
        attr(sync, "key").unwrap()["stringValue"],
        format!("{NS}/exported")
    );
    let result = attr(sync, "result").unwrap()["stringValue"]
        .as_str()
        .unwrap();
    assert!(
        ["success", "requeue_after", "error"].contains(&result),
        "{sync}"
    );
    let start: u64 = sync["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u64 = sync["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(start > 0 && start <= end, "{sync}");
    // Only the two span kinds are exported: no watch, no log line.
    assert!(
        spans
            .iter()
            .all(|(_, s)| s["name"] == "sync" || s["name"] == "request")
    );
    // Counted once the collector's 200 has been read (just after it recorded the POST).
    let received = spans.len() as u64;
    wait_until("otlp_spans_exported_total to count them", || async {
        queue.exported() >= received
    })
    .await;
    assert_eq!(queue.dropped(), 0);

    manager.stop.cancel();
    manager.task.await.unwrap().unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_collector_answering_503_then_200_still_gets_the_spans() {
    let (rx, endpoint) = Receiver::start(vec![503]).await;
    let (server, client) = server().await;
    let queue = SpanQueue::new(otlp::DEFAULT_MAX_QUEUE_SIZE);
    let (manager, _guard) = start_exporting(&server, &endpoint, &queue).await;

    let now = in_the_future(&Clock::new(), Duration::ZERO);
    create_at(&client, &at("retried", &now, "echo hi")).await;
    wait_for_pod(&client, "retried-pod").await;
    wait_until("the spans after a retry", || async {
        rx.spans().iter().any(|(_, s)| is_pod_create(s))
    })
    .await;
    let answered = rx.answered.lock().unwrap().clone();
    assert_eq!(answered.first(), Some(&503), "{answered:?}");
    assert!(answered.contains(&200), "{answered:?}");
    assert_eq!(queue.dropped(), 0, "the batch was retried, not dropped");

    manager.stop.cancel();
    manager.task.await.unwrap().unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_dead_endpoint_blocks_no_sync_and_its_spans_are_dropped_and_counted() {
    // A port nothing listens on: every POST is refused and retried with backoff.
    let closed = crate::support::net::closed_port();
    let dead = closed.local_addr().unwrap();
    let (server, client) = server().await;
    // A small queue, so it overflows while the first batch is being retried.
    let queue = SpanQueue::new(2);
    let (manager, _guard) = start_exporting(&server, &format!("http://{dead}"), &queue).await;

    let now = in_the_future(&Clock::new(), Duration::ZERO);
    for name in ["dead-a", "dead-b", "dead-c"] {
        create_at(&client, &at(name, &now, "echo hi")).await;
    }
    for name in ["dead-a", "dead-b", "dead-c"] {
        wait_for_pod(&client, &format!("{name}-pod")).await;
    }
    wait_until("spans dropped and counted", || async {
        queue.dropped() > 0
    })
    .await;
    assert_eq!(queue.exported(), 0);

    manager.stop.cancel();
    manager.task.await.unwrap().unwrap();
    server.shutdown().await;
}

/// KEP-5915's hand-off: an object written with a W3C `traceparent` in the
/// `tracing.k8s.io/traceparent` annotation makes the reconcile it causes link its `sync` span
/// to that write's span, so the cause and the reconcile (with its writes) meet in one view.
#[tokio::test]
async fn a_reconcile_links_to_the_write_that_caused_it() {
    let (rx, endpoint) = Receiver::start(vec![]).await;
    let (server, client) = server().await;
    let queue = SpanQueue::new(otlp::DEFAULT_MAX_QUEUE_SIZE);
    let (manager, _guard) = start_exporting(&server, &endpoint, &queue).await;

    let (trace_id, span_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let mut linked = at(
        "linked",
        &in_the_future(&Clock::new(), Duration::from_secs(3600)),
        "echo hi",
    );
    linked.metadata.annotations = Some(
        [(
            sample_client_go::keytrace::TRACEPARENT_ANNOTATION.to_string(),
            format!("00-{trace_id}-{span_id}-01"),
        )]
        .into(),
    );
    create_at(&client, &linked).await;
    let links = |s: &Value| s["links"].as_array().cloned().unwrap_or_default();
    wait_until("the sync span of the linked At", || async {
        rx.spans()
            .iter()
            .any(|(_, s)| s["name"] == "sync" && !links(s).is_empty())
    })
    .await;
    let spans = rx.spans();
    let (_, sync) = spans
        .iter()
        .find(|(_, s)| s["name"] == "sync" && !links(s).is_empty())
        .unwrap();
    assert_eq!(
        attr(sync, "key").unwrap()["stringValue"],
        format!("{NS}/linked")
    );
    assert_eq!(
        links(sync),
        [serde_json::json!({"traceId": trace_id, "spanId": span_id})]
    );
    assert_ne!(
        sync["traceId"], trace_id,
        "a reconcile is a trace of its own, linked"
    );
    assert!(
        attr(sync, "links").is_none(),
        "links are not an attribute: {sync}"
    );
    let why = attr(sync, "triggers").unwrap()["stringValue"]
        .as_str()
        .unwrap();
    assert!(why.starts_with("ADDED At default/linked rv "), "{why}");

    manager.stop.cancel();
    manager.task.await.unwrap().unwrap();
    server.shutdown().await;
}
