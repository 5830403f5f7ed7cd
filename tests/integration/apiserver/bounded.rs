//! The embedded API server stays responsive and bounded under hostile input: `replicas` is
//! validated as the int32 it is, a StatefulSet asking for 2^31 - 1 pods does not freeze the
//! server, and a flood of distinct unrouted paths does not grow `/metrics`.

use std::time::Duration;

use embedded_cluster::Cluster;
use serde_json::{Value, json};

use crate::support::apiserver::TestClient;

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(name: &str, replicas: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx"}]}}
        }
    })
}

#[tokio::test]
async fn replicas_must_be_a_non_negative_int32() {
    let s = Cluster::builder().start().await.unwrap();
    let c = TestClient::new(&s);
    let neg = c.post(DEPLOYS, &deployment("neg", json!(-1))).await;
    assert_eq!(neg.code, 422, "{:?}", neg.body);
    assert_eq!(
        neg.body["message"],
        "Deployment.apps \"neg\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
    );
    assert_eq!(neg.body["details"]["causes"][0]["field"], "spec.replicas");
    for (bad, shown) in [
        (json!(2147483648u64), "number 2147483648"),
        (json!(1.5), "number 1.5"),
        (json!("3"), "string"),
    ] {
        let a = c.post(DEPLOYS, &deployment("bad", bad)).await;
        assert_eq!(a.code, 400, "{:?}", a.body);
        assert_eq!(
            a.body["message"],
            format!(
                "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal {shown} into Go struct field DeploymentSpec.spec.replicas of type int32"
            )
        );
    }
    let ok = c.post(DEPLOYS, &deployment("ok", json!(2147483647))).await;
    assert_eq!(ok.code, 201, "{:?}", ok.body);
    // Updates and patches are checked too, and so is /scale.
    let patched = c
        .patch(
            &format!("{DEPLOYS}/ok"),
            "application/merge-patch+json",
            &json!({"spec": {"replicas": -5}}),
        )
        .await;
    assert_eq!(patched.code, 422, "{:?}", patched.body);
    let scaled = c
        .patch(
            &format!("{DEPLOYS}/ok/scale"),
            "application/merge-patch+json",
            &json!({"spec": {"replicas": 4294967296u64}}),
        )
        .await;
    assert_eq!(scaled.code, 400, "{:?}", scaled.body);
    s.shutdown().await;
}

/// A Parallel StatefulSet of 2^31 - 1 replicas: the simulated controller creates its pods a
/// bounded batch at a time, never holding the store for work proportional to `replicas`, so the
/// server keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_of_two_billion_replicas_does_not_freeze_the_server() {
    let s = Cluster::builder().simulate(true).start().await.unwrap();
    let c = TestClient::new(&s);
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "huge"},
        "spec": {
            "replicas": 2147483647,
            "podManagementPolicy": "Parallel",
            "serviceName": "huge",
            "selector": {"matchLabels": {"app": "huge"}},
            "template": {"metadata": {"labels": {"app": "huge"}},
                         "spec": {"containers": [{"name": "main", "image": "redis:7"}]}}
        }
    });
    let created = c
        .post("/apis/apps/v1/namespaces/default/statefulsets", &sts)
        .await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    // The controller is busy creating pods; the API keeps answering meanwhile.
    let mut pods_seen = 0;
    for _ in 0..20 {
        let a = tokio::time::timeout(
            Duration::from_secs(20),
            c.get("/api/v1/namespaces/default/pods?limit=1"),
        )
        .await
        .expect("the server stopped answering while the StatefulSet scaled");
        assert_eq!(a.code, 200);
        if !a.body["items"].as_array().unwrap().is_empty() {
            pods_seen += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pods_seen > 0, "the StatefulSet never got a pod");
    s.shutdown().await;
}

/// 12,000 requests for distinct paths the server does not route (most without a token, so
/// refused before routing; some with one, for unknown groups and random namespaces): the
/// request log and `/metrics` grow by a handful of keys, not by one per path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_unrouted_paths_keep_metrics_small() {
    let s = Cluster::builder().start().await.unwrap();
    let c = std::sync::Arc::new(TestClient::with_http2(&s, true));
    const TOTAL: usize = 12_000;
    const TASKS: usize = 32;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in (t..TOTAL).step_by(TASKS) {
                let (path, with_token) = match i % 3 {
                    0 => (format!("/apis/group-{i}.example.com/v1/things"), true),
                    1 => (format!("/random/{i}/path"), false),
                    _ => (format!("/api/v1/namespaces/ns-{i}/pods/p"), false),
                };
                let resp = c.raw("GET", &path, &[], vec![], with_token).await;
                let code = resp.status().as_u16();
                assert!(code == 404 || code == 401, "{path}: {code}");
                crate::support::apiserver::read_answer(resp).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let keys = s.request_log().snapshot();
    assert!(keys.len() < 20, "request log keys: {keys:?}");
    assert_eq!(
        s.request_log()
            .count_where(|k| k.resource == embedded_apiserver::UNROUTED),
        TOTAL as u64
    );
    let metrics = c.get("/metrics").await;
    let text = metrics.body.as_str().unwrap();
    assert!(text.len() < 64 * 1024, "/metrics is {} bytes", text.len());
    s.shutdown().await;
}

async fn closed_by_server(s: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Two thousand connections that never send a byte (nor finish a TLS handshake) do not stop a
/// real request from being served, and the server closes them once the header timeout passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_block_real_requests_and_are_closed() {
    let s = Cluster::builder()
        .serving_limits(embedded_apiserver::ServingLimits {
            max_connections: 5_000,
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(2),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let addr = s.url().trim_start_matches("https://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let c = TestClient::new(&s);
    let a = tokio::time::timeout(Duration::from_secs(30), c.get("/api/v1/namespaces"))
        .await
        .expect("a real request was not served while 2,000 connections sat idle");
    assert_eq!(a.code, 200);
    for conn in &mut idle {
        assert!(
            closed_by_server(conn).await,
            "an idle connection was never closed"
        );
    }
    s.shutdown().await;
}

/// Beyond `max_connections`, the oldest connection that never sent a byte makes room for the
/// newcomer, so silent connections cannot lock clients out.
#[tokio::test]
async fn connections_beyond_the_limit_shed_the_oldest_silent_one() {
    let s = Cluster::builder()
        .plain_http(true)
        .serving_limits(embedded_apiserver::ServingLimits {
            max_connections: 10,
            header_read_timeout: Duration::from_secs(600),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let addr = s.url().trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // The server is full of connections that never sent a byte: a new client is still served
    // (Go's server has no cap at all), and the bound holds by closing the oldest silent one.
    let c = TestClient::from_parts(s.url(), s.token(), None, false);
    assert_eq!(c.get("/version").await.code, 200);
    assert!(
        closed_by_server(&mut held[0]).await,
        "the oldest silent connection is shed"
    );
    s.shutdown().await;
}
