//! The client-side throttle that follows the server: against a hand-written server that does
//! (or does not) send API Priority and Fairness headers, the default "follow the server" client
//! drops its throttle only when the headers are there, an explicit QPS is obeyed regardless,
//! and `429` + `Retry-After` is honoured either way. Virtual time (paused Tokio clock) measures
//! the waits; nothing here depends on the machine's speed.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::transport::FLOW_CONTROL_HEADERS;
use sample_client_go::client::{Api, Client, ThrottleDecision};
use sample_controller_runtime::metrics::Metrics;
use serde_json::json;
use support::client::*;

fn pod_reply(apf: bool) -> Reply {
    let mut r = json(
        200,
        json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"1"}}),
    );
    if apf {
        for h in FLOW_CONTROL_HEADERS {
            r.headers_mut()
                .insert(h, "0c7e7f4f-5a0e-4b51-9d6e-6a4f1c7d2b10".parse().unwrap());
        }
    }
    r
}

/// A server answering every request with a pod, with or without the APF headers.
async fn server(apf: bool) -> TestServer {
    serve_http(Arc::new(move |_r: &Logged| pod_reply(apf))).await
}

/// A client as the manager builds it without `--kube-api-qps`/`--kube-api-burst`, with a
/// fallback so slow (1 QPS, burst 1) that any throttling shows as seconds of virtual time.
fn following(server: &TestServer) -> Client {
    let mut cfg = server.config();
    cfg.qps = 1.0;
    cfg.burst = 1;
    cfg.timeout = None;
    cfg.follow_server_flow_control = true;
    Client::new(cfg).unwrap()
}

fn rate_limiter_waits(client: &Client) -> u64 {
    client
        .metrics()
        .snapshot()
        .rate_limiter_latency
        .values()
        .map(|h| h.count)
        .sum()
}

#[tokio::test(start_paused = true)]
async fn with_priority_and_fairness_the_default_client_does_not_throttle_itself() {
    let server = server(true).await;
    let client = following(&server);
    assert_eq!(client.throttle_decision(), ThrottleDecision::Undecided);
    assert_eq!(
        client.detect_flow_control().await,
        ThrottleDecision::ServerFlowControl
    );
    assert_eq!(server.requests()[0].path(), "/livez/ping");
    let waits_before = rate_limiter_waits(&client);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
    let t0 = tokio::time::Instant::now();
    for _ in 0..20 {
        pods.get("a").await.unwrap();
    }
    // 20 requests at the 1 QPS fallback would need 19 s or more.
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let m = client.metrics().snapshot();
    assert_eq!(m.throttle_wait, Duration::ZERO, "{m:?}");
    assert_eq!(
        rate_limiter_waits(&client),
        waits_before,
        "no throttle wait is recorded"
    );
    assert_eq!(m.throttle, Some(ThrottleDecision::ServerFlowControl));

    let metrics = Metrics::new();
    metrics.register_client(&client);
    let text = metrics.encode();
    assert!(
        text.contains(&format!(
            "rest_client_rate_limiter_enabled{{host=\"{}\"}} 0",
            client.metrics().host()
        )),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_first_answer_decides_without_a_probe() {
    let server = server(true).await;
    let client = following(&server);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
    pods.get("a").await.unwrap();
    assert_eq!(
        client.throttle_decision(),
        ThrottleDecision::ServerFlowControl
    );
    let t0 = tokio::time::Instant::now();
    for _ in 0..10 {
        pods.get("a").await.unwrap();
    }
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn without_priority_and_fairness_the_fallback_throttle_applies() {
    let server = server(false).await;
    let client = following(&server);
    assert_eq!(
        client.detect_flow_control().await,
        ThrottleDecision::NoServerFlowControl
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
    let t0 = tokio::time::Instant::now();
    for _ in 0..4 {
        pods.get("a").await.unwrap();
    }
    // The probe took the only token: four more at 1 QPS need four seconds.
    assert!(t0.elapsed() >= Duration::from_secs(4), "{:?}", t0.elapsed());
    let metrics = Metrics::new();
    metrics.register_client(&client);
    assert!(
        metrics
            .encode()
            .contains("rest_client_rate_limiter_enabled{host="),
    );
    assert!(metrics.encode().contains("} 1\n"));
}

#[tokio::test(start_paused = true)]
async fn an_explicit_qps_is_obeyed_even_when_the_server_has_priority_and_fairness() {
    let server = server(true).await;
    let mut cfg = server.config();
    cfg.qps = 5.0;
    cfg.burst = 3;
    cfg.timeout = None;
    // follow_server_flow_control stays false: what `--kube-api-qps 5` gives.
    let client = Client::new(cfg).unwrap();
    assert_eq!(
        client.detect_flow_control().await,
        ThrottleDecision::Configured
    );
    assert!(
        server.requests().is_empty(),
        "no probe for a configured throttle"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
    let t0 = tokio::time::Instant::now();
    for _ in 0..13 {
        pods.get("a").await.unwrap();
    }
    // Burst 3, then 10 more at 5/s: at least 2 s.
    assert!(t0.elapsed() >= Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(client.throttle_decision(), ThrottleDecision::Configured);
    assert!(client.metrics().snapshot().throttle_wait >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_401_decides_nothing_and_429_retry_after_is_still_honoured() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let server = serve_http(Arc::new(move |_r: &Logged| {
        match c2.fetch_add(1, Ordering::SeqCst) {
            // Authentication runs before APF classifies: no headers, no decision.
            0 => status(401, "Unauthorized", "Unauthorized"),
            1 => {
                let mut r = status(429, "TooManyRequests", "priority level full");
                r.headers_mut().insert("Retry-After", "3".parse().unwrap());
                for h in FLOW_CONTROL_HEADERS {
                    r.headers_mut().insert(h, "u".parse().unwrap());
                }
                r
            }
            _ => pod_reply(true),
        }
    }))
    .await;
    let client = following(&server);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
    assert!(pods.get("a").await.unwrap_err().is_unauthorized());
    assert_eq!(client.throttle_decision(), ThrottleDecision::Undecided);
    let t0 = tokio::time::Instant::now();
    pods.get("a").await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(
        client.throttle_decision(),
        ThrottleDecision::ServerFlowControl
    );
    assert_eq!(client.metrics().snapshot().too_many_requests, 1);
}

#[tokio::test(start_paused = true)]
async fn a_handle_with_its_own_throttle_does_not_wait_for_the_others_tokens() {
    let server = server(false).await;
    let mut cfg = server.config();
    cfg.qps = 1.0;
    cfg.burst = 1;
    cfg.timeout = None;
    let controllers = Client::new(cfg).unwrap();
    let events = controllers.with_own_throttle();
    let busy: Api<Pod> = Api::namespaced(controllers.clone(), "ns");
    let other: Api<Pod> = Api::namespaced(events.clone(), "ns");
    let t0 = tokio::time::Instant::now();
    // The controllers' handle spends its only token and queues two more (due at 1 s and 2 s).
    busy.get("a").await.unwrap();
    let queued = tokio::spawn(async move {
        busy.get("a").await.unwrap();
        busy.get("a").await.unwrap();
    });
    tokio::task::yield_now().await;
    // The other handle still has its own token: no wait.
    other.get("a").await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    queued.await.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(2), "{:?}", t0.elapsed());
    // Same connections and counters: four requests on one set of metrics.
    assert_eq!(controllers.metrics().snapshot().total(), 4);
}
