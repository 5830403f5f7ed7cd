//! Fault injection seen by a plain HTTP client and by kubectl: dropped watches, compaction,
//! failures with proper Status bodies (500, 503, 429 + Retry-After, 409), latency, forced
//! resourceVersion conflicts, and the `/admin/faults` endpoint.

use crate::support;
use crate::support::cluster;

use std::time::Duration;

use cluster::Kubectl;
use embedded_apiserver::faults::Fault;
use embedded_cluster::Cluster;
use serde_json::json;
use support::apiserver::{TestClient, cm};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn dropping_watches_ends_open_streams_and_new_watches_work() {
    let h = Cluster::builder().start().await.unwrap();
    let c = TestClient::new(&h);
    let mut w = c.watch(&format!("{CMS}?watch=true")).await;
    assert_eq!(c.post(CMS, &cm("a", json!({}))).await.code, 201);
    assert_eq!(w.next_change().await.unwrap()["type"], "ADDED");
    h.faults().drop_watches();
    assert!(w.next_change().await.is_none(), "the stream ends");
    let rv = h.resource_version().to_string();
    let mut w2 = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={rv}"))
        .await;
    assert_eq!(c.post(CMS, &cm("b", json!({}))).await.code, 201);
    let e = w2.next_change().await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "b");
    assert_eq!(h.request_log().fault_count("drop-watches"), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn compaction_makes_a_watch_from_an_old_revision_get_410() {
    let h = Cluster::builder().start().await.unwrap();
    let c = TestClient::new(&h);
    let old = c.post(CMS, &cm("a", json!({}))).await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(c.post(CMS, &cm("b", json!({}))).await.code, 201);
    h.faults().compact();
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={old}"))
        .await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert_eq!(h.request_log().fault_count("compact"), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn failures_answer_with_status_bodies_for_the_matching_requests_only() {
    let h = Cluster::builder().plain_http(true).start().await.unwrap();
    let c = TestClient::new(&h);
    assert_eq!(c.post(CMS, &cm("a", json!({}))).await.code, 201);
    let f = h.faults();
    f.inject(Fault::fail(500).verb("get").resource("configmaps"));
    f.inject(Fault::fail(503).verb("list").resource("configmaps"));
    f.inject(
        Fault::fail(429)
            .verb("create")
            .resource("configmaps")
            .retry_after(7),
    );
    f.inject(
        Fault::fail(409)
            .verb("delete")
            .resource("configmaps")
            .times(2),
    );

    // Other verbs and resources are untouched.
    assert_eq!(c.get("/api/v1/namespaces/default/pods").await.code, 200);

    let r = c.get(&format!("{CMS}/a")).await;
    assert_eq!(r.code, 500);
    assert_eq!(r.body["kind"], "Status");
    assert_eq!(r.body["reason"], "InternalError");
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .starts_with("Internal error occurred: ")
    );
    assert_eq!(
        c.get(&format!("{CMS}/a")).await.code,
        200,
        "one request only"
    );

    let r = c.get(CMS).await;
    assert_eq!(r.code, 503);
    assert_eq!(r.body["reason"], "ServiceUnavailable");

    let r = c.post(CMS, &cm("b", json!({}))).await;
    assert_eq!(r.code, 429);
    assert_eq!(r.body["reason"], "TooManyRequests");
    assert_eq!(r.body["details"]["retryAfterSeconds"], 7);
    assert_eq!(r.headers["retry-after"], "7");
    assert!(
        support::apiserver::TestClient::new(&h)
            .get(&format!("{CMS}/b"))
            .await
            .code
            == 404
    );

    for _ in 0..2 {
        let r = c.delete(&format!("{CMS}/a"), None).await;
        assert_eq!(r.code, 409);
        assert_eq!(r.body["reason"], "Conflict");
        assert_eq!(
            r.body["message"],
            "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
        );
    }
    assert_eq!(c.delete(&format!("{CMS}/a"), None).await.code, 200);

    let log = h.request_log();
    assert_eq!(log.fault_count("fail-500"), 1);
    assert_eq!(log.fault_count("fail-503"), 1);
    assert_eq!(log.fault_count("fail-429"), 1);
    assert_eq!(log.fault_count("fail-409"), 2);
    assert_eq!(log.count_code("delete", "configmaps", 409), 2);
    assert!(h.faults().active().is_empty());
    h.shutdown().await;
}

#[tokio::test]
async fn forced_conflicts_bump_the_object_so_a_reread_and_retry_succeeds() {
    let h = Cluster::builder().plain_http(true).start().await.unwrap();
    let c = TestClient::new(&h);
    let created = c.post(CMS, &cm("a", json!({}))).await.body;
    h.faults().conflict_next_updates("configmaps", 1);
    let mut mine = created.clone();
    mine["data"]["k"] = json!("mine");
    let r = c.put(&format!("{CMS}/a"), &mine).await;
    assert_eq!(r.code, 409);
    assert_eq!(r.body["reason"], "Conflict");
    let now = c.get(&format!("{CMS}/a")).await.body;
    assert_ne!(
        now["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"],
        "another writer touched it"
    );
    // The stale version now conflicts for real; the fresh one succeeds.
    assert_eq!(c.put(&format!("{CMS}/a"), &mine).await.code, 409);
    let mut fresh = now.clone();
    fresh["data"]["k"] = json!("mine");
    assert_eq!(c.put(&format!("{CMS}/a"), &fresh).await.code, 200);
    assert_eq!(h.request_log().fault_count("conflict"), 1);
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn latency_delays_matching_requests_in_virtual_time() {
    let h = Cluster::builder().plain_http(true).start().await.unwrap();
    let c = TestClient::new(&h);
    h.faults().inject(
        Fault::latency(Duration::from_secs(3600))
            .verb("list")
            .times(1),
    );
    let start = tokio::time::Instant::now();
    assert_eq!(c.get(CMS).await.code, 200);
    assert!(start.elapsed() >= Duration::from_secs(3600));
    let second = tokio::time::Instant::now();
    assert_eq!(c.get(CMS).await.code, 200);
    assert!(second.elapsed() < Duration::from_secs(3600));
    assert_eq!(h.request_log().fault_count("latency"), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn the_admin_endpoint_needs_the_bootstrap_token() {
    let h = Cluster::builder()
        .plain_http(true)
        .extra_token("alice-token", "alice")
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&h);
    let r = c
        .post(
            "/admin/faults",
            &json!({"action": "fail", "code": 503, "verb": "list", "resource": "configmaps", "count": 2}),
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["status"], "Success");
    let listed = c.get("/admin/faults").await;
    assert_eq!(listed.body["rules"][0]["code"], 503);
    assert_eq!(c.get(CMS).await.code, 503);
    assert_eq!(c.get(CMS).await.code, 503);
    assert_eq!(c.get(CMS).await.code, 200);

    let bad = c.post("/admin/faults", &json!({"action": "fail"})).await;
    assert_eq!(bad.code, 400);
    assert!(bad.body["message"].as_str().unwrap().contains("field code"));

    let mut alice = TestClient::new(&h);
    alice.token = "alice-token".into();
    let r = alice
        .post("/admin/faults", &json!({"action": "compact"}))
        .await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        "forbidden: User \"alice\" cannot post path \"/admin/faults\""
    );
    let r = c
        .post("/admin/faults", &json!({"action": "dropWatches"}))
        .await;
    assert_eq!(r.code, 200);
    assert_eq!(h.request_log().fault_count("drop-watches"), 1);
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_retries_429_with_retry_after_and_reports_500_and_conflicts() {
    let h = Cluster::builder().start().await.unwrap();
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    let c = TestClient::new(&h);
    assert_eq!(c.post(CMS, &cm("a", json!({}))).await.code, 201);
    h.faults().inject(
        Fault::fail(429)
            .verb("list")
            .resource("configmaps")
            .retry_after(1)
            .times(2),
    );
    let out = k.run(&["get", "configmaps", "-o", "name"]).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("configmap/a"));
    let log = h.request_log();
    assert_eq!(log.count_code("list", "configmaps", 429), 2);
    assert_eq!(log.count_code("list", "configmaps", 200), 1);

    h.faults()
        .inject(Fault::fail(500).verb("get").resource("configmaps"));
    let out = k.run(&["get", "configmap", "a"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("Internal error occurred: injected fault"),
        "{}",
        out.stderr
    );

    // `kubectl replace` sends the resourceVersion it read: a forced conflict reaches the user.
    let yaml = k.run(&["get", "configmap", "a", "-o", "yaml"]).await;
    assert!(yaml.ok, "{}", yaml.stderr);
    h.faults().conflict_next_updates("configmaps", 1);
    let out = k
        .run_with_input(&["replace", "-f", "-"], Some(&yaml.stdout))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "Operation cannot be fulfilled on configmaps \"a\": the object has been modified"
        ),
        "{}",
        out.stderr
    );
    h.shutdown().await;
}

#[tokio::test]
async fn plain_text_429_is_what_the_overload_filters_send() {
    let h = Cluster::builder().plain_http(true).start().await.unwrap();
    let c = TestClient::new(&h);
    h.faults().inject(
        Fault::fail(429)
            .verb("list")
            .resource("configmaps")
            .retry_after(3)
            .plain_text(),
    );
    let r = c.get(CMS).await;
    assert_eq!(r.code, 429);
    assert_eq!(r.headers["retry-after"], "3");
    assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        r.body,
        serde_json::Value::String("Too many requests, please try again later.\n".into())
    );
    assert_eq!(c.get(CMS).await.code, 200);
    h.shutdown().await;
}
