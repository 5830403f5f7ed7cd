//! The embedded API server over real HTTPS: every verb, every error shape, subresources,
//! CRDs, discovery and the request log, checked with a plain hyper client.

use crate::support;

use serde_json::{Value, json};
use support::apiserver::*;

#[tokio::test]
async fn requests_without_the_token_get_401_with_a_status() {
    let s = start().await;
    let c = TestClient::new(&s);
    let resp = c.raw("GET", "/api/v1/namespaces", &[], vec![], false).await;
    let a = read_answer(resp).await;
    assert_eq!(a.code, 401);
    assert_eq!(a.body["kind"], "Status");
    assert_eq!(a.body["reason"], "Unauthorized");
    assert_eq!(a.body["code"], 401);
    let resp = c.raw("GET", "/version", &[], vec![], false).await;
    assert_eq!(resp.status(), 200);
    s.shutdown().await;
}

#[tokio::test]
async fn create_get_update_delete_with_exact_error_shapes() {
    let s = start().await;
    let c = TestClient::new(&s);
    let created = c.post(CMS, &cm("a", json!({"app": "web"}))).await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    let uid = created.body["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(uid.len(), 36);
    assert!(created.body["metadata"]["creationTimestamp"].is_string());
    assert_eq!(created.body["metadata"]["namespace"], "default");
    let rv1: u64 = created.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let dup = c.post(CMS, &cm("a", json!({}))).await;
    assert_eq!(dup.code, 409);
    assert_eq!(
        dup.body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "configmaps \"a\" already exists", "reason": "AlreadyExists",
               "details": {"name": "a", "kind": "configmaps"}, "code": 409})
    );

    let got = c.get(&format!("{CMS}/a")).await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body["kind"], "ConfigMap");
    assert_eq!(got.body["apiVersion"], "v1");

    let mut upd = got.body.clone();
    upd["data"]["k"] = json!("v2");
    let updated = c.put(&format!("{CMS}/a"), &upd).await;
    assert_eq!(updated.code, 200);
    let rv2: u64 = updated.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    assert_eq!(updated.body["metadata"]["uid"], uid.as_str());

    // The same stale object again: 409 Conflict with the OptimisticLock message.
    let stale = c.put(&format!("{CMS}/a"), &upd).await;
    assert_eq!(stale.code, 409);
    assert_eq!(stale.body["reason"], "Conflict");
    assert_eq!(
        stale.body["message"],
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    // A no-op update keeps the resourceVersion.
    let same = c.put(&format!("{CMS}/a"), &updated.body).await;
    assert_eq!(same.code, 200);
    assert_eq!(
        same.body["metadata"]["resourceVersion"],
        updated.body["metadata"]["resourceVersion"]
    );

    // Name in body and URL must agree.
    let mut other = updated.body.clone();
    other["metadata"]["name"] = json!("b");
    let mismatch = c.put(&format!("{CMS}/a"), &other).await;
    assert_eq!(mismatch.code, 400);

    let deleted = c.delete(&format!("{CMS}/a"), None).await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "Status");
    assert_eq!(deleted.body["status"], "Success");
    assert_eq!(deleted.body["details"]["uid"], uid.as_str());

    let missing = c.get(&format!("{CMS}/a")).await;
    assert_eq!(missing.code, 404);
    assert_eq!(missing.body["message"], "configmaps \"a\" not found");
    assert_eq!(
        missing.body["details"],
        json!({"name": "a", "kind": "configmaps"})
    );
    let grouped = c
        .get("/apis/apps/v1/namespaces/default/deployments/x")
        .await;
    assert_eq!(grouped.body["message"], "deployments.apps \"x\" not found");
    assert_eq!(grouped.body["details"]["group"], "apps");
    s.shutdown().await;
}

#[tokio::test]
async fn names_namespaces_and_generate_name_follow_the_server_rules() {
    let s = start().await;
    let c = TestClient::new(&s);
    let bad = c.post(CMS, &cm("Bad_Name", json!({}))).await;
    assert_eq!(bad.code, 422);
    assert_eq!(bad.body["reason"], "Invalid");
    assert_eq!(bad.body["details"]["kind"], "ConfigMap");
    assert_eq!(bad.body["details"]["causes"][0]["field"], "metadata.name");
    assert_eq!(
        bad.body["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );
    assert!(bad.body["message"].as_str().unwrap().starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"));

    let no_ns = c
        .post("/api/v1/namespaces/nope/configmaps", &cm("a", json!({})))
        .await;
    assert_eq!(no_ns.code, 404);
    assert_eq!(no_ns.body["message"], "namespaces \"nope\" not found");

    let wrong_ns = c
        .post(
            CMS,
            &json!({"metadata": {"name": "a", "namespace": "kube-system"}}),
        )
        .await;
    assert_eq!(wrong_ns.code, 400);

    let generated = c
        .post(
            CMS,
            &json!({"metadata": {"generateName": "web-"}, "data": {}}),
        )
        .await;
    assert_eq!(generated.code, 201);
    let name = generated.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("web-") && name.len() == 9, "{name}");

    let neither = c.post(CMS, &json!({"metadata": {}})).await;
    assert_eq!(neither.code, 422);
    assert_eq!(
        neither.body["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );

    let with_rv = c
        .post(
            CMS,
            &json!({"metadata": {"name": "x", "resourceVersion": "5"}}),
        )
        .await;
    assert_eq!(with_rv.code, 500);
    s.shutdown().await;
}

#[tokio::test]
async fn unknown_urls_get_the_plain_text_404() {
    let s = start().await;
    let c = TestClient::new(&s);
    for path in [
        "/api/v1/namespaces/default/widgets",
        "/apis/nope.example.com/v1/things",
        "/apis/apps/v2",
    ] {
        let a = c.get(path).await;
        assert_eq!(a.code, 404, "{path}");
        assert_eq!(
            a.body,
            Value::String("404 page not found\n".into()),
            "{path}"
        );
    }
    let wrong_sub = c
        .get("/api/v1/namespaces/default/configmaps/x/status")
        .await;
    assert_eq!(wrong_sub.code, 404);
    s.shutdown().await;
}

#[tokio::test]
async fn leases_demand_a_resource_version_and_put_creates_them() {
    let s = start().await;
    let c = TestClient::new(&s);
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/lock";
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2024-05-01T10:00:00.123456Z"}});
    let created = c.put(path, &lease).await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(
        created.body["spec"]["renewTime"],
        "2024-05-01T10:00:00.123456Z"
    );
    assert!(created.body["metadata"].get("generation").is_none());
    let unconditional = c.put(path, &lease).await;
    assert_eq!(unconditional.code, 422);
    assert_eq!(
        unconditional.body["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    let mut next = created.body.clone();
    next["spec"]["holderIdentity"] = json!("b");
    assert_eq!(c.put(path, &next).await.code, 200);
    // A second candidate with the old copy loses.
    next["spec"]["holderIdentity"] = json!("c");
    assert_eq!(c.put(path, &next).await.code, 409);
    s.shutdown().await;
}

#[tokio::test]
async fn lists_filter_by_label_and_field_selectors() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({"app": "web", "tier": "front"})))
        .await;
    c.post(CMS, &cm("b", json!({"app": "web", "tier": "back"})))
        .await;
    c.post(CMS, &cm("c", json!({"app": "db"}))).await;
    c.post(
        "/api/v1/namespaces/kube-system/configmaps",
        &cm("d", json!({"app": "web"})),
    )
    .await;
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let l = c.get(&format!("{CMS}?labelSelector=app%3Dweb")).await;
    assert_eq!(l.code, 200);
    assert_eq!(l.body["kind"], "ConfigMapList");
    assert_eq!(names(&l.body), ["a", "b"]);
    let l = c
        .get(&format!("{CMS}?labelSelector=tier+in+(front),app!%3Ddb"))
        .await;
    assert_eq!(names(&l.body), ["a"]);
    let l = c.get(&format!("{CMS}?labelSelector=!tier")).await;
    assert_eq!(names(&l.body), ["c"]);
    let l = c
        .get(&format!("{CMS}?fieldSelector=metadata.name%3Db"))
        .await;
    assert_eq!(names(&l.body), ["b"]);
    let all = c.get("/api/v1/configmaps?labelSelector=app%3Dweb").await;
    assert_eq!(names(&all.body), ["a", "b", "d"]);
    let empty = c.get("/api/v1/namespaces/nope/configmaps").await;
    assert_eq!(empty.code, 200);
    assert_eq!(empty.body["items"], json!([]));
    let unsupported = c.get(&format!("{CMS}?fieldSelector=spec.x%3Dy")).await;
    assert_eq!(unsupported.code, 400);
    assert_eq!(
        unsupported.body["message"],
        "field label not supported: spec.x"
    );
    let bad = c.get(&format!("{CMS}?labelSelector=a%20in%20(")).await;
    assert_eq!(bad.code, 400);
    // The list's resourceVersion is the current global revision.
    assert_eq!(
        l.body["metadata"]["resourceVersion"],
        s.resource_version().to_string()
    );
    s.shutdown().await;
}

#[tokio::test]
async fn pods_and_events_support_their_extra_field_selectors() {
    let s = start().await;
    let c = TestClient::new(&s);
    let pods = "/api/v1/namespaces/default/pods";
    let p = c
        .post(pods, &json!({"metadata": {"name": "p1"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}}))
        .await;
    assert_eq!(p.code, 201);
    assert_eq!(p.body["status"]["phase"], "Pending");
    c.post(pods, &json!({"metadata": {"name": "p2"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
        .await;
    let l = c
        .get(&format!("{pods}?fieldSelector=spec.nodeName%3Dn1"))
        .await;
    assert_eq!(l.body["items"].as_array().unwrap().len(), 1);
    let l = c
        .get(&format!(
            "{pods}?fieldSelector=status.phase%3DPending,spec.nodeName!%3Dn1"
        ))
        .await;
    assert_eq!(l.body["items"][0]["metadata"]["name"], "p2");

    // An event written through events.k8s.io/v1 is read back through core/v1, and selected
    // the way kubectl describe selects it.
    let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "p1.1"}, "eventTime": "2024-05-01T10:00:00.000000Z",
        "regarding": {"kind": "Pod", "name": "p1", "namespace": "default", "uid": p.body["metadata"]["uid"]},
        "reason": "Started", "note": "started the pod", "type": "Normal", "action": "Start",
        "reportingController": "test", "reportingInstance": "test-1"});
    let created = c
        .post("/apis/events.k8s.io/v1/namespaces/default/events", &ev)
        .await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(created.body["regarding"]["name"], "p1");
    let uid = p.body["metadata"]["uid"].as_str().unwrap();
    let core = c
        .get(&format!(
            "/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DPod,involvedObject.name%3Dp1,involvedObject.namespace%3Ddefault,involvedObject.uid%3D{uid}&limit=500"
        ))
        .await;
    assert_eq!(core.code, 200);
    let item = &core.body["items"][0];
    assert_eq!(item["message"], "started the pod");
    assert_eq!(item["involvedObject"]["name"], "p1");
    assert_eq!(item["reportingComponent"], "test");
    // A typed list's items carry no kind and apiVersion (the list says them once).
    assert_eq!(item.get("apiVersion"), None);
    assert_eq!(core.body["apiVersion"], "v1");
    s.shutdown().await;
}

/// kube-apiserver's `--event-ttl`: an event goes its TTL after its last write, and a watcher of
/// events sees it DELETED; other objects stay.
#[tokio::test]
async fn events_are_deleted_their_ttl_after_their_last_write() {
    let s = embedded_cluster::Cluster::builder()
        .event_ttl(std::time::Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    let events = "/api/v1/namespaces/default/events";
    let ev = json!({"metadata": {"name": "p1.1"}, "reason": "Started", "message": "started",
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"}, "type": "Normal"});
    let created = c.post(events, &ev).await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(c.post(CMS, &cm("kept", json!({}))).await.code, 201);
    let rv = created.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap();
    let mut w = c
        .watch(&format!("{events}?watch=true&resourceVersion={rv}"))
        .await;
    let gone = w.next_change().await.expect("a watch event");
    assert_eq!(gone["type"], "DELETED");
    assert_eq!(gone["object"]["metadata"]["name"], "p1.1");
    assert_eq!(gone["object"]["message"], "started");
    assert_eq!(c.get(&format!("{events}/p1.1")).await.code, 404);
    assert_eq!(c.get(&format!("{CMS}/kept")).await.code, 200);
    // kube-apiserver's gauge of stored objects follows.
    let metrics = c.get("/metrics").await;
    let text = metrics.body.as_str().unwrap_or_default();
    assert!(
        text.contains("apiserver_storage_objects{resource=\"events\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("apiserver_storage_objects{resource=\"configmaps\"} "));
    s.shutdown().await;
}

#[tokio::test]
async fn limit_and_continue_page_through_a_consistent_snapshot() {
    let s = start().await;
    let c = TestClient::new(&s);
    for n in ["a", "b", "c", "d", "e"] {
        c.post(CMS, &cm(n, json!({}))).await;
    }
    let p1 = c.get(&format!("{CMS}?limit=2")).await;
    assert_eq!(p1.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(p1.body["metadata"]["remainingItemCount"], 3);
    let rv = p1.body["metadata"]["resourceVersion"].clone();
    let token = p1.body["metadata"]["continue"].as_str().unwrap().to_owned();
    // Changes after the first page do not show on later pages.
    c.delete(&format!("{CMS}/c"), None).await;
    c.post(CMS, &cm("bb", json!({}))).await;
    let p2 = c.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(p2.code, 200, "{:?}", p2.body);
    assert_eq!(p2.body["metadata"]["resourceVersion"], rv);
    let names: Vec<&str> = p2.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "d"]);
    let token = p2.body["metadata"]["continue"].as_str().unwrap().to_owned();
    let selected = c.get(&format!("{CMS}?limit=1&labelSelector=!nope")).await;
    assert!(selected.body["metadata"]["continue"].is_string());
    assert!(
        selected.body["metadata"]
            .get("remainingItemCount")
            .is_none(),
        "no count with a selector"
    );
    let p3 = c.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(p3.body["items"].as_array().unwrap().len(), 1);
    assert!(p3.body["metadata"].get("continue").is_none());
    // Once the snapshot's history is compacted the token is too old.
    s.compact();
    let gone = c.get(&format!("{CMS}?limit=2&continue={token}")).await;
    assert_eq!(gone.code, 410);
    assert_eq!(gone.body["reason"], "Expired");
    s.shutdown().await;
}

#[tokio::test]
async fn a_list_from_a_future_revision_waits_for_it_without_blocking_others() {
    // No ServiceAccount controller: the revisions are this test's writes alone.
    let s = embedded_cluster::Cluster::builder()
        .service_account_controller(false)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    let next = s.resource_version() + 1;
    for (query, expect_created) in [
        (
            format!("resourceVersion={next}&resourceVersionMatch=NotOlderThan"),
            "a",
        ),
        (format!("resourceVersion={}", next + 1), "b"),
    ] {
        let waiting = {
            let c = TestClient::new(&s);
            tokio::spawn(async move { c.get(&format!("{CMS}?{query}")).await })
        };
        // Other clients are served while the list waits: its wait holds no store lock.
        let other = c.get(CMS).await;
        assert_eq!(other.code, 200);
        assert!(!waiting.is_finished(), "the list waits for its revision");
        let created = c.post(CMS, &cm(expect_created, json!({}))).await;
        assert_eq!(created.code, 201);
        // The revision arrives: the list answers with it, well before the 3 s would end.
        let listed = waiting.await.unwrap();
        assert_eq!(listed.code, 200, "{:?}", listed.body);
        let names: Vec<&str> = listed.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&expect_created), "{names:?}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let s = start().await;
    let c = TestClient::new(&s);
    let a = c.post(CMS, &cm("a", json!({}))).await;
    let rv_a = a.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    c.post(CMS, &cm("b", json!({}))).await;
    let exact = c
        .get(&format!(
            "{CMS}?resourceVersion={rv_a}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(exact.code, 200);
    assert_eq!(exact.body["items"].as_array().unwrap().len(), 1);
    assert_eq!(exact.body["metadata"]["resourceVersion"], rv_a.as_str());
    let newer = c
        .get(&format!(
            "{CMS}?resourceVersion={rv_a}&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(newer.body["items"].as_array().unwrap().len(), 2);
    // Never reached: 504 after the watch cache's three-second wait.
    let asked = std::time::Instant::now();
    let future = c.get(&format!("{CMS}?resourceVersion=999999")).await;
    assert!(asked.elapsed() >= std::time::Duration::from_secs(2));
    assert_eq!(future.code, 504);
    assert_eq!(
        future.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(future.headers.get("retry-after").unwrap(), "1");
    let invalid = c.get(&format!("{CMS}?resourceVersionMatch=Exact")).await;
    assert_eq!(invalid.code, 422);
    assert_eq!(invalid.body["details"]["kind"], "ListOptions");
    let sie = c.get(&format!("{CMS}?sendInitialEvents=true")).await;
    assert_eq!(sie.code, 422);
    s.compact();
    let old = c
        .get(&format!(
            "{CMS}?resourceVersion={rv_a}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(old.code, 410);
    assert_eq!(
        old.body["message"],
        "The resourceVersion for the provided list is too old."
    );
    s.shutdown().await;
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 7}})
}

#[tokio::test]
async fn status_and_scale_subresources_split_ownership() {
    let s = start().await;
    let c = TestClient::new(&s);
    let base = "/apis/apps/v1/namespaces/default/deployments";
    let d = c.post(base, &deployment("web")).await;
    assert_eq!(d.code, 201);
    assert_eq!(d.body["metadata"]["generation"], 1);
    assert!(
        d.body.get("status").is_none(),
        "status is not set on create"
    );

    // /status writes only status, and never bumps generation.
    let mut st = d.body.clone();
    st["status"] = json!({"replicas": 1, "observedGeneration": 1});
    st["spec"]["replicas"] = json!(5);
    let after = c.put(&format!("{base}/web/status"), &st).await;
    assert_eq!(after.code, 200, "{:?}", after.body);
    assert_eq!(after.body["status"]["replicas"], 1);
    assert_eq!(after.body["spec"]["replicas"], 1);
    assert_eq!(after.body["metadata"]["generation"], 1);

    // The main endpoint ignores status and bumps generation on spec changes only.
    let mut main = after.body.clone();
    main["status"] = json!({"replicas": 99});
    main["metadata"]["labels"] = json!({"x": "y"});
    let labelled = c.put(&format!("{base}/web"), &main).await;
    assert_eq!(labelled.body["status"]["replicas"], 1);
    assert_eq!(labelled.body["metadata"]["generation"], 1);
    let mut spec = labelled.body.clone();
    spec["spec"]["replicas"] = json!(2);
    let bumped = c.put(&format!("{base}/web"), &spec).await;
    assert_eq!(bumped.body["metadata"]["generation"], 2);

    // Scale reads and writes spec.replicas.
    let scale = c.get(&format!("{base}/web/scale")).await;
    assert_eq!(scale.code, 200);
    assert_eq!(scale.body["kind"], "Scale");
    assert_eq!(scale.body["apiVersion"], "autoscaling/v1");
    assert_eq!(scale.body["spec"]["replicas"], 2);
    assert_eq!(scale.body["status"]["replicas"], 1);
    assert_eq!(scale.body["status"]["selector"], "app=web");
    let mut sc = scale.body.clone();
    sc["spec"]["replicas"] = json!(4);
    let scaled = c.put(&format!("{base}/web/scale"), &sc).await;
    assert_eq!(scaled.code, 200, "{:?}", scaled.body);
    assert_eq!(scaled.body["spec"]["replicas"], 4);
    let patched = c
        .patch(
            &format!("{base}/web/scale"),
            "application/merge-patch+json",
            &json!({"spec": {"replicas": 6}}),
        )
        .await;
    assert_eq!(patched.body["spec"]["replicas"], 6);
    let now = c.get(&format!("{base}/web")).await;
    assert_eq!(now.body["spec"]["replicas"], 6);
    assert_eq!(now.body["metadata"]["generation"], 4);
    s.shutdown().await;
}

#[tokio::test]
async fn patch_types_merge_json_strategic_and_apply() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(
        CMS,
        &json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}}),
    )
    .await;
    let m = c
        .patch(
            &format!("{CMS}/p"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"b": null, "c": "3"}}}),
        )
        .await;
    assert_eq!(m.code, 200);
    assert_eq!(m.body["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    let j = c
        .patch(
            &format!("{CMS}/p"),
            "application/json-patch+json",
            &json!([{"op": "replace", "path": "/data/x", "value": "2"}]),
        )
        .await;
    assert_eq!(j.body["data"]["x"], "2");
    let failing = c
        .patch(
            &format!("{CMS}/p"),
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/data/x", "value": "nope"}]),
        )
        .await;
    assert_eq!(failing.code, 422);
    let sm = c
        .patch(
            &format!("{CMS}/p"),
            "application/strategic-merge-patch+json; charset=utf-8",
            &json!({"data": {"y": "1"}}),
        )
        .await;
    assert_eq!(sm.body["data"], json!({"x": "2", "y": "1"}));
    let stale = c
        .patch(
            &format!("{CMS}/p"),
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": "1"}}),
        )
        .await;
    assert_eq!(stale.code, 409);
    let unknown = c.patch(&format!("{CMS}/p"), "text/plain", &json!({})).await;
    assert_eq!(unknown.code, 415);
    assert_eq!(unknown.body["reason"], "UnsupportedMediaType");
    let missing = c
        .patch(
            &format!("{CMS}/nope"),
            "application/merge-patch+json",
            &json!({}),
        )
        .await;
    assert_eq!(missing.code, 404);

    // Server-side apply creates (201), then updates (200), and needs a field manager.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k": "v"}});
    let no_manager = c
        .send(
            "PATCH",
            &format!("{CMS}/ssa"),
            &[("content-type", "application/apply-patch+yaml")],
            Some(&applied),
        )
        .await;
    assert_eq!(no_manager.code, 422);
    let created = c
        .send(
            "PATCH",
            &format!("{CMS}/ssa?fieldManager=test&force=true"),
            &[("content-type", "application/apply-patch+yaml")],
            Some(&applied),
        )
        .await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: v2\n";
    let resp = c
        .raw(
            "PATCH",
            &format!("{CMS}/ssa?fieldManager=test"),
            &[("content-type", "application/apply-patch+yaml")],
            yaml.as_bytes().to_vec(),
            true,
        )
        .await;
    let updated = read_answer(resp).await;
    assert_eq!(updated.code, 200, "{:?}", updated.body);
    assert_eq!(updated.body["data"]["k"], "v2");
    s.shutdown().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(
        CMS,
        &json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
    )
    .await;
    let list = c.get(CMS).await;
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={rv}"))
        .await;
    let del = c.delete(&format!("{CMS}/f"), Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}))).await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["kind"], "ConfigMap");
    assert!(del.body["metadata"]["deletionTimestamp"].is_string());
    let still = c.get(&format!("{CMS}/f")).await;
    assert_eq!(still.code, 200);
    // No new finalizers while deleting.
    let add = c
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": ["example.com/hold", "x/y"]}}),
        )
        .await;
    assert_eq!(add.code, 422);
    let dup = c.post(CMS, &json!({"metadata": {"name": "f"}})).await;
    assert_eq!(dup.code, 409);
    assert!(
        dup.body["message"]
            .as_str()
            .unwrap()
            .starts_with("object is being deleted: ")
    );
    let release = c
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(release.code, 200);
    assert_eq!(c.get(&format!("{CMS}/f")).await.code, 404);
    let e1 = w.next().await.unwrap();
    assert_eq!(e1["type"], "MODIFIED");
    let e2 = w.next().await.unwrap();
    assert_eq!(e2["type"], "DELETED");
    s.shutdown().await;
}

#[tokio::test]
async fn delete_options_preconditions_pods_and_collections() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({"x": "1"}))).await;
    let wrong = c
        .delete(
            &format!("{CMS}/a"),
            Some(&json!({"preconditions": {"uid": "nope"}})),
        )
        .await;
    assert_eq!(wrong.code, 409);
    assert!(
        wrong.body["message"]
            .as_str()
            .unwrap()
            .contains("the UID in the precondition (nope) does not match")
    );
    let wrong_rv = c
        .delete(
            &format!("{CMS}/a"),
            Some(&json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_eq!(wrong_rv.code, 409);
    let orphan = c
        .delete(&format!("{CMS}/a?propagationPolicy=Orphan"), None)
        .await;
    assert_eq!(orphan.code, 200);
    assert_eq!(orphan.body["metadata"]["finalizers"], json!(["orphan"]));

    // Pods answer with the deleted object.
    let pods = "/api/v1/namespaces/default/pods";
    c.post(
        pods,
        &json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    let gone = c.delete(&format!("{pods}/p"), None).await;
    assert_eq!(gone.code, 200);
    assert_eq!(gone.body["kind"], "Pod");

    for n in ["x1", "x2", "y1"] {
        let label = if n.starts_with('x') { "x" } else { "y" };
        c.post(CMS, &cm(n, json!({"group": label}))).await;
    }
    let dc = c
        .delete(&format!("{CMS}?labelSelector=group%3Dx"), None)
        .await;
    assert_eq!(dc.code, 200);
    assert_eq!(dc.body["kind"], "ConfigMapList");
    assert_eq!(dc.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(c.get(&format!("{CMS}/y1")).await.code, 200);
    assert_eq!(c.get(&format!("{CMS}/x1")).await.code, 404);
    s.shutdown().await;
}

#[tokio::test]
async fn namespaces_delete_their_content_and_immortal_ones_stay() {
    let s = start().await;
    let c = TestClient::new(&s);
    let ns = c
        .post("/api/v1/namespaces", &json!({"metadata": {"name": "cnat"}}))
        .await;
    assert_eq!(ns.code, 201);
    assert_eq!(ns.body["status"]["phase"], "Active");
    c.post("/api/v1/namespaces/cnat/configmaps", &cm("a", json!({})))
        .await;
    c.post(
        "/api/v1/namespaces/cnat/configmaps",
        &json!({"metadata": {"name": "held", "finalizers": ["x/y"]}}),
    )
    .await;
    let del = c.delete("/api/v1/namespaces/cnat", None).await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["status"]["phase"], "Terminating");
    assert_eq!(
        c.get("/api/v1/namespaces/cnat/configmaps/a").await.code,
        404
    );
    let blocked = c
        .post("/api/v1/namespaces/cnat/configmaps", &cm("b", json!({})))
        .await;
    assert_eq!(blocked.code, 403);
    assert_eq!(
        blocked.body["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    c.patch(
        "/api/v1/namespaces/cnat/configmaps/held",
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    assert_eq!(c.get("/api/v1/namespaces/cnat").await.code, 404);

    let immortal = c.delete("/api/v1/namespaces/default", None).await;
    assert_eq!(immortal.code, 403);
    assert_eq!(
        immortal.body["message"],
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn crds_serve_their_resources_at_once_with_validation_and_pruning() {
    let s = start().await;
    let c = TestClient::new(&s);
    let crd = c.install_at_crd().await;
    let conds = crd.body["status"]["conditions"].as_array().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert_eq!(crd.body["status"]["storedVersions"], json!(["v1alpha1"]));

    let disc = c
        .get("/apis/cnat.programming-kubernetes.info/v1alpha1")
        .await;
    assert_eq!(disc.code, 200);
    let names: Vec<&str> = disc.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ats", "ats/status"]);

    let mut a = at("example-at");
    a["spec"]["unknown"] = json!("dropped");
    a["status"] = json!({"phase": "DONE"});
    let created = c.post(ATS, &a).await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert!(
        created.body["spec"].get("unknown").is_none(),
        "unknown fields are pruned"
    );
    assert!(
        created.body.get("status").is_none(),
        "status is dropped on create"
    );
    assert_eq!(created.body["metadata"]["generation"], 1);

    let mut bad = at("bad");
    bad["spec"]["schedule"] = json!("tomorrow");
    bad["spec"]["command"] = json!("");
    let invalid = c.post(ATS, &bad).await;
    assert_eq!(invalid.code, 422);
    let fields: Vec<&str> = invalid.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"spec.schedule") && fields.contains(&"spec.command"),
        "{fields:?}"
    );
    assert!(
        invalid.body["message"]
            .as_str()
            .unwrap()
            .starts_with("At.cnat.programming-kubernetes.info \"bad\" is invalid")
    );

    // Custom resources need a resourceVersion on update, and refuse strategic merge patch.
    let mut no_rv = created.body.clone();
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    assert_eq!(c.put(&format!("{ATS}/example-at"), &no_rv).await.code, 422);
    let smp = c
        .patch(
            &format!("{ATS}/example-at"),
            "application/strategic-merge-patch+json",
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(smp.code, 415);

    let status = c
        .patch(
            &format!("{ATS}/example-at/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "DONE"}, "spec": {"command": "ignored"}}),
        )
        .await;
    assert_eq!(status.code, 200, "{:?}", status.body);
    assert_eq!(status.body["status"]["phase"], "DONE");
    assert_eq!(status.body["spec"]["command"], "echo YAY");
    assert_eq!(status.body["metadata"]["generation"], 1);
    let bad_status = c
        .patch(
            &format!("{ATS}/example-at/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "LATER"}}),
        )
        .await;
    assert_eq!(bad_status.code, 422);
    let spec = c
        .patch(
            &format!("{ATS}/example-at"),
            "application/merge-patch+json",
            &json!({"spec": {"command": "echo hi"}}),
        )
        .await;
    assert_eq!(spec.body["metadata"]["generation"], 2);

    let del = c.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ats.cnat.programming-kubernetes.info", None).await;
    assert_eq!(del.code, 200);
    let after = c.get(ATS).await;
    assert_eq!(after.code, 404);
    assert_eq!(after.body, Value::String("404 page not found\n".into()));
    s.shutdown().await;
}

#[tokio::test]
async fn discovery_legacy_and_aggregated() {
    let s = start().await;
    let c = TestClient::new(&s);
    let api = c.get("/api").await;
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], json!(["v1"]));
    let apis = c.get("/apis").await;
    assert_eq!(apis.body["kind"], "APIGroupList");
    assert_eq!(apis.body["apiVersion"], "v1");
    let groups: Vec<&str> = apis.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "apps",
        "coordination.k8s.io",
        "events.k8s.io",
        "apiextensions.k8s.io",
        "rbac.authorization.k8s.io",
    ] {
        assert!(groups.contains(&g), "{g}");
    }
    let core = c.get("/api/v1").await;
    assert_eq!(core.body["groupVersion"], "v1");
    let pods = core.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["namespaced"], true);

    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let agg = c.send("GET", "/apis", &[("accept", accept)], None).await;
    assert_eq!(
        agg.headers.get("content-type").unwrap(),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(agg.body["kind"], "APIGroupDiscoveryList");
    let apps = agg.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "apps")
        .unwrap();
    let deploy = apps["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "deployments")
        .unwrap();
    assert_eq!(deploy["responseKind"]["kind"], "Deployment");
    // Subresources by name, as kube-apiserver lists them: scale, then status.
    assert_eq!(deploy["subresources"][0]["subresource"], "scale");
    assert_eq!(deploy["subresources"][0]["responseKind"]["kind"], "Scale");
    assert_eq!(deploy["subresources"][1]["subresource"], "status");
    let etag = agg
        .headers
        .get("etag")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let cached = c
        .send(
            "GET",
            "/apis",
            &[("accept", accept), ("if-none-match", &etag)],
            None,
        )
        .await;
    assert_eq!(cached.code, 304);
    // A new CRD changes the document, and so its ETag.
    c.install_at_crd().await;
    let changed = c
        .send(
            "GET",
            "/apis",
            &[("accept", accept), ("if-none-match", &etag)],
            None,
        )
        .await;
    assert_eq!(changed.code, 200);
    assert!(
        changed.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == "cnat.programming-kubernetes.info")
    );
    let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let agg1 = c.send("GET", "/api", &[("accept", old)], None).await;
    assert_eq!(agg1.body["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert_eq!(agg1.body["items"][0]["metadata"]["name"], "");
    let version = c.get("/version").await;
    assert_eq!(version.body["major"], "1");
    s.shutdown().await;
}

#[tokio::test]
async fn http2_works_and_the_request_log_counts_everything() {
    let s = start().await;
    let c = TestClient::with_http2(&s, true);
    c.post(CMS, &cm("a", json!({}))).await;
    c.get(&format!("{CMS}/a")).await;
    c.get(&format!("{CMS}/missing")).await;
    c.get(CMS).await;
    c.patch(
        &format!("{CMS}/a/status"),
        "application/merge-patch+json",
        &json!({}),
    )
    .await;
    let log = s.request_log();
    assert_eq!(log.count("create", "configmaps"), 1);
    assert_eq!(log.count("get", "configmaps"), 2);
    assert_eq!(log.count_code("get", "configmaps", 404), 1);
    assert_eq!(log.count("list", "configmaps"), 1);
    assert_eq!(log.count("get", "pods"), 0);
    assert!(log.snapshot().iter().any(|(k, _)| k.namespace == "default"));
    s.shutdown().await;
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_fields_of_custom_resources() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.install_at_crd().await;
    let mut a = at("strict");
    a["spec"]["extra"] = json!(1);
    let strict = c.post(&format!("{ATS}?fieldValidation=Strict"), &a).await;
    assert_eq!(strict.code, 400);
    assert_eq!(
        strict.body["message"],
        "strict decoding error: unknown field \"spec.extra\""
    );
    let lax = c.post(&format!("{ATS}?fieldValidation=Ignore"), &a).await;
    assert_eq!(lax.code, 201);
    assert!(lax.body["spec"].get("extra").is_none());
    s.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_conflicts_name_the_owning_manager() {
    let s = start().await;
    let c = TestClient::new(&s);
    let apply = |manager: &str, value: &str, force: bool| {
        let path = format!("{CMS}/owned?fieldManager={manager}&force={force}");
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"k": value}});
        (path, body)
    };
    let (p, b) = apply("alice", "1", false);
    let first = c
        .send(
            "PATCH",
            &p,
            &[("content-type", "application/apply-patch+yaml")],
            Some(&b),
        )
        .await;
    assert_eq!(first.code, 201, "{:?}", first.body);
    assert_eq!(
        first.body["metadata"]["managedFields"][0]["manager"],
        "alice"
    );
    let (p, b) = apply("bob", "2", false);
    let conflict = c
        .send(
            "PATCH",
            &p,
            &[("content-type", "application/apply-patch+yaml")],
            Some(&b),
        )
        .await;
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.body["reason"], "Conflict");
    assert!(
        conflict.body["message"]
            .as_str()
            .unwrap()
            .starts_with("Apply failed with 1 conflict")
    );
    assert_eq!(
        conflict.body["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    let (p, b) = apply("bob", "2", true);
    let forced = c
        .send(
            "PATCH",
            &p,
            &[("content-type", "application/apply-patch+yaml")],
            Some(&b),
        )
        .await;
    assert_eq!(forced.code, 200);
    assert_eq!(forced.body["data"]["k"], "2");
    s.shutdown().await;
}

#[tokio::test]
async fn namespace_finalize_releases_a_terminating_namespace() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "held"}, "spec": {"finalizers": ["kubernetes", "example.com/wait"]}}),
    )
    .await;
    let del = c.delete("/api/v1/namespaces/held", None).await;
    assert_eq!(del.code, 200);
    let ns = c.get("/api/v1/namespaces/held").await;
    assert_eq!(ns.body["status"]["phase"], "Terminating");
    let mut fin = ns.body.clone();
    fin["spec"]["finalizers"] = json!([]);
    let done = c.put("/api/v1/namespaces/held/finalize", &fin).await;
    assert_eq!(done.code, 200, "{:?}", done.body);
    assert_eq!(c.get("/api/v1/namespaces/held").await.code, 404);
    s.shutdown().await;
}

#[tokio::test]
async fn metrics_expose_request_counts() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.get(&format!("{CMS}/nope")).await;
    let m = c.get("/metrics").await;
    assert_eq!(m.code, 200);
    let text = m.body.as_str().unwrap();
    assert!(text.contains(
        "apiserver_request_total{verb=\"get\",resource=\"configmaps\",subresource=\"\",namespace=\"default\",code=\"404\"} 1"
    ), "{text}");
    s.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_creates_are_validated_and_cluster_paths_are_read_only() {
    let s = start().await;
    let c = TestClient::new(&s);
    let bad = c
        .post(
            "/apis/events.k8s.io/v1/namespaces/default/events",
            &json!({"metadata": {"name": "e"}, "type": "Odd", "regarding": {"name": "x"}}),
        )
        .await;
    assert_eq!(bad.code, 422);
    let fields: Vec<&str> = bad.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"eventTime") && fields.contains(&"reportingController"),
        "{fields:?}"
    );
    // Core/v1 creates keep the legacy, lenient rules.
    let core = c
        .post(
            "/api/v1/namespaces/default/events",
            &json!({"metadata": {"name": "e"}, "involvedObject": {"name": "x"}, "reason": "R", "message": "m"}),
        )
        .await;
    assert_eq!(core.code, 201);
    let post_all = c.post("/api/v1/configmaps", &cm("x", json!({}))).await;
    assert_eq!(post_all.code, 405);
    assert_eq!(post_all.body["reason"], "MethodNotAllowed");
    s.shutdown().await;
}

#[tokio::test]
async fn writes_record_their_field_manager() {
    let s = start().await;
    let c = TestClient::new(&s);
    let created = c
        .post(&format!("{CMS}?fieldManager=tester"), &cm("m", json!({})))
        .await;
    let mf = &created.body["metadata"]["managedFields"][0];
    assert_eq!(mf["manager"], "tester");
    assert_eq!(mf["operation"], "Update");
    assert_eq!(mf["fieldsType"], "FieldsV1");
    let mut next = created.body.clone();
    next["data"]["other"] = json!("x");
    let updated = c
        .send(
            "PUT",
            &format!("{CMS}/m"),
            &[("user-agent", "my-controller/1.0 (linux/amd64)")],
            Some(&next),
        )
        .await;
    assert_eq!(updated.code, 200);
    let managers: Vec<&str> = updated.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert!(managers.contains(&"my-controller"), "{managers:?}");
    // Re-sending the same object is still a no-op: the revision does not move.
    let again = c
        .send(
            "PUT",
            &format!("{CMS}/m"),
            &[("user-agent", "my-controller/1.0 (linux/amd64)")],
            Some(&updated.body),
        )
        .await;
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        updated.body["metadata"]["resourceVersion"]
    );
    s.shutdown().await;
}

#[tokio::test]
async fn protobuf_bodies_are_accepted_for_built_in_kinds() {
    use prost::Message;
    // The envelope a Go client wraps an encoded object in: the magic `k8s\0`, then a
    // runtime.Unknown holding the type and the object's bytes.
    let encode_body = |api_version: &str, kind: &str, raw: Vec<u8>| {
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = b"k8s\0".to_vec();
        out.extend(unknown.encode_to_vec());
        out
    };
    let s = start().await;
    let c = TestClient::new(&s);
    let pb = "application/vnd.kubernetes.protobuf";
    let cm = k8s_pb::api::core::v1::ConfigMap {
        metadata: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("from-protobuf".into()),
            ..Default::default()
        }),
        data: [("color".to_owned(), "blue".to_owned())].into(),
        ..Default::default()
    };
    let body = encode_body("v1", "ConfigMap", cm.encode_to_vec());
    let created = read_answer(
        c.raw(
            "POST",
            CMS,
            &[
                ("content-type", pb),
                (
                    "accept",
                    "application/vnd.kubernetes.protobuf,application/json",
                ),
            ],
            body,
            true,
        )
        .await,
    )
    .await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(created.body["data"]["color"], "blue");
    assert_eq!(
        created.headers.get("content-type").unwrap(),
        "application/json",
        "answers are JSON, which the client's Accept allows"
    );
    let uid = created.body["metadata"]["uid"].as_str().unwrap().to_owned();
    let opts = k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions {
        preconditions: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::Preconditions {
            uid: Some("not-the-uid".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let del = encode_body("v1", "DeleteOptions", opts.encode_to_vec());
    let refused = read_answer(
        c.raw(
            "DELETE",
            &format!("{CMS}/from-protobuf"),
            &[("content-type", pb)],
            del,
            true,
        )
        .await,
    )
    .await;
    assert_eq!(refused.code, 409, "{:?}", refused.body);
    assert!(refused.body["message"].as_str().unwrap().contains(&uid));
    // Custom resources have no protobuf form.
    c.install_at_crd().await;
    let cr = read_answer(
        c.raw(
            "POST",
            ATS,
            &[("content-type", pb)],
            encode_body("v1", "ConfigMap", vec![]),
            true,
        )
        .await,
    )
    .await;
    assert_eq!(cr.code, 415);
    s.shutdown().await;
}

#[tokio::test]
async fn malformed_bodies_are_bad_requests() {
    let s = start().await;
    let c = TestClient::new(&s);
    let odd = c
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "odd"}, "spec": "oops"}),
        )
        .await;
    assert_eq!(odd.code, 400);
    assert!(
        odd.body["message"]
            .as_str()
            .unwrap()
            .contains("Namespace.spec")
    );
    let not_json = c
        .raw(
            "POST",
            CMS,
            &[("content-type", "application/json")],
            b"{not json".to_vec(),
            true,
        )
        .await;
    assert_eq!(not_json.status(), 400);
    let array = c.post(CMS, &json!([1, 2])).await;
    assert_eq!(array.code, 400);
    let wrong_kind = c
        .post(
            CMS,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(wrong_kind.code, 400);
    let wrong_ct = c
        .raw(
            "POST",
            CMS,
            &[("content-type", "text/plain")],
            b"x".to_vec(),
            true,
        )
        .await;
    assert_eq!(wrong_ct.status(), 415);
    // The server is still fine.
    assert_eq!(c.get(CMS).await.code, 200);
    s.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_and_the_server_stays_up() {
    // kube-apiserver's limit on a request body: 3 MiB.
    const MAX_BODY: usize = 3 * 1024 * 1024;
    let s = start().await;
    // HTTP/2, so the early answer arrives even while the client is still sending.
    let c = TestClient::with_http2(&s, true);
    let mut big = br#"{"metadata":{"name":"big"},"data":{"k":""#.to_vec();
    big.resize(MAX_BODY + 1, b'x');
    let resp = c
        .raw(
            "POST",
            CMS,
            &[("content-type", "application/json")],
            big,
            true,
        )
        .await;
    let a = read_answer(resp).await;
    assert_eq!(a.code, 413, "{:?}", a.body);
    assert_eq!(a.body["kind"], "Status");
    assert_eq!(a.body["reason"], "RequestEntityTooLarge");
    assert_eq!(
        a.body["message"],
        format!("Request entity too large: limit is {MAX_BODY}")
    );
    // Nothing was stored and the server still answers.
    assert_eq!(c.get(&format!("{CMS}/big")).await.code, 404);
    assert_eq!(c.post(CMS, &cm("small", json!({}))).await.code, 201);
    s.shutdown().await;
}

#[tokio::test]
async fn tables_follow_include_object_and_print_custom_columns() {
    let s = start().await;
    let c = TestClient::new(&s);
    let table = [(
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )];
    c.post(CMS, &cm("a", json!({}))).await;
    let meta = read_answer(c.raw("GET", CMS, &table, vec![], true).await).await;
    assert_eq!(
        meta.body["rows"][0]["object"]["kind"],
        "PartialObjectMetadata"
    );
    let full = read_answer(
        c.raw(
            "GET",
            &format!("{CMS}?includeObject=Object"),
            &table,
            vec![],
            true,
        )
        .await,
    )
    .await;
    assert_eq!(full.body["rows"][0]["object"]["kind"], "ConfigMap");
    assert_eq!(full.body["rows"][0]["object"]["data"]["k"], "v");
    let bad = read_answer(
        c.raw(
            "GET",
            &format!("{CMS}?includeObject=All"),
            &table,
            vec![],
            true,
        )
        .await,
    )
    .await;
    assert_eq!(bad.code, 400);

    c.install_at_crd().await;
    c.post(ATS, &at("example-at")).await;
    let ats = read_answer(c.raw("GET", ATS, &table, vec![], true).await).await;
    let cols: Vec<&str> = ats.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Schedule", "Command", "Phase", "Age"]);
    assert_eq!(ats.body["rows"][0]["cells"][1], "2019-04-12T10:12:00Z");
    assert_eq!(ats.body["rows"][0]["cells"][3], json!(null));
    s.shutdown().await;
}
