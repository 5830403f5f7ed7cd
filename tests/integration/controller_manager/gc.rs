//! The garbage collector over real HTTP: Background, Foreground and Orphan propagation,
//! dangling owner references, finalizers holding a foreground deletion, namespace deletion,
//! and kubectl's `--cascade`.

use crate::support;
use crate::support::cluster;

use cluster::*;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};
use support::apiserver::TestClient;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn server() -> (ClusterHandle, TestClient) {
    let h = Cluster::builder().plain_http(true).start().await.unwrap();
    let c = TestClient::new(&h);
    (h, c)
}

fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": false, "blockOwnerDeletion": block,
    })
}

/// A ConfigMap owned by `owners`, with `finalizers`.
fn cm(name: &str, owners: Vec<Value>, finalizers: &[&str]) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    if !owners.is_empty() {
        v["metadata"]["ownerReferences"] = json!(owners);
    }
    if !finalizers.is_empty() {
        v["metadata"]["finalizers"] = json!(finalizers);
    }
    v
}

async fn make(c: &TestClient, body: Value) -> Value {
    let r = c.post(CMS, &body).await;
    assert_eq!(r.code, 201, "{}", r.body);
    r.body
}

async fn gone(h: &ClusterHandle, name: &str) {
    wait_until(h, &format!("configmap {name} gone"), |s| {
        s.get("core/configmaps", "default", name).is_none()
    })
    .await;
}

fn cm_now(h: &ClusterHandle, name: &str) -> Option<Value> {
    get(h, "core/configmaps", "default", name)
}

/// The revision at which `name` was deleted, from the store's history.
fn deleted_at(h: &ClusterHandle, name: &str) -> u64 {
    h.store().read(|s| {
        s.changes_since(1)
            .unwrap()
            .iter()
            .find(|c| {
                c.kind == embedded_apiserver::internals::store::ChangeType::Deleted
                    && c.object["metadata"]["name"] == name
            })
            .map(|c| c.rv)
            .unwrap_or_else(|| panic!("{name} was never deleted"))
    })
}

#[tokio::test]
async fn background_deletes_the_tree_and_keeps_dependents_with_other_live_owners() {
    let (h, c) = server().await;
    let owner = make(&c, cm("owner", vec![], &[])).await;
    let other = make(&c, cm("other", vec![], &[])).await;
    let child = make(&c, cm("child", vec![owner_ref(&owner, false)], &[])).await;
    make(&c, cm("grandchild", vec![owner_ref(&child, false)], &[])).await;
    make(
        &c,
        cm(
            "shared",
            vec![owner_ref(&owner, false), owner_ref(&other, false)],
            &[],
        ),
    )
    .await;

    let r = c.delete(&format!("{CMS}/owner"), None).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["kind"], "Status");
    assert!(
        cm_now(&h, "owner").is_none(),
        "background: the owner goes first"
    );
    gone(&h, "child").await;
    gone(&h, "grandchild").await;
    wait_until(&h, "shared keeps only its live owner", |s| {
        s.get("core/configmaps", "default", "shared")
            .is_some_and(|o| o["metadata"]["ownerReferences"].as_array().map(Vec::len) == Some(1))
    })
    .await;
    let shared = cm_now(&h, "shared").unwrap();
    assert_eq!(
        shared["metadata"]["ownerReferences"][0]["uid"],
        other["metadata"]["uid"]
    );
    assert!(cm_now(&h, "other").is_some());
    h.shutdown().await;
}

#[tokio::test]
async fn foreground_deletes_dependents_first_and_a_finalizer_holds_the_owner() {
    let (h, c) = server().await;
    let owner = make(&c, cm("owner", vec![], &[])).await;
    make(
        &c,
        cm(
            "blocker",
            vec![owner_ref(&owner, true)],
            &["example.com/hold"],
        ),
    )
    .await;
    make(&c, cm("free", vec![owner_ref(&owner, false)], &[])).await;
    let mid = make(&c, cm("mid", vec![owner_ref(&owner, true)], &[])).await;
    make(&c, cm("leaf", vec![owner_ref(&mid, true)], &[])).await;

    let r = c
        .delete(
            &format!("{CMS}/owner"),
            Some(&json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})),
        )
        .await;
    assert_eq!(r.code, 200);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        r.body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );

    gone(&h, "free").await;
    gone(&h, "leaf").await;
    gone(&h, "mid").await;
    wait_until(&h, "blocker marked for deletion", |s| {
        s.get("core/configmaps", "default", "blocker")
            .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    // The blocking dependent's finalizer holds it, and it holds the owner.
    let owner_now = cm_now(&h, "owner").expect("owner waits for its blocking dependent");
    assert_eq!(
        owner_now["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    // mid had dependents of its own, so it was deleted in the foreground too: leaf went first.
    assert!(deleted_at(&h, "leaf") < deleted_at(&h, "mid"));

    let r = c
        .patch(
            &format!("{CMS}/blocker"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code, 200);
    gone(&h, "blocker").await;
    gone(&h, "owner").await;
    assert!(deleted_at(&h, "blocker") < deleted_at(&h, "owner"));
    h.shutdown().await;
}

#[tokio::test]
async fn orphan_strips_the_owner_reference_and_keeps_the_dependents() {
    let (h, c) = server().await;
    let owner = make(&c, cm("owner", vec![], &[])).await;
    make(&c, cm("kept", vec![owner_ref(&owner, true)], &[])).await;
    let r = c
        .delete(&format!("{CMS}/owner?propagationPolicy=Orphan"), None)
        .await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["metadata"]["finalizers"], json!(["orphan"]));
    gone(&h, "owner").await;
    let kept = cm_now(&h, "kept").expect("orphaned dependents stay");
    assert!(kept["metadata"]["ownerReferences"].is_null(), "{kept}");
    h.shutdown().await;
}

#[tokio::test]
async fn dependents_of_missing_or_other_namespace_owners_are_collected() {
    let (h, c) = server().await;
    let ghost = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}});
    make(
        &c,
        cm("orphaned-at-birth", vec![owner_ref(&ghost, false)], &[]),
    )
    .await;
    gone(&h, "orphaned-at-birth").await;

    // A cluster-scoped dependent of a namespaced owner is an invalid reference: left alone.
    let owner = make(&c, cm("owner", vec![], &[])).await;
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "odd"}});
    ns["metadata"]["ownerReferences"] = json!([owner_ref(&owner, false)]);
    assert_eq!(c.post("/api/v1/namespaces", &ns).await.code, 201);
    assert_eq!(c.delete(&format!("{CMS}/owner"), None).await.code, 200);
    // Collecting a dependent of the same owner proves the collector has seen the deletion.
    make(&c, cm("witness", vec![owner_ref(&owner, false)], &[])).await;
    gone(&h, "witness").await;
    assert!(get(&h, "core/namespaces", "", "odd").is_some());
    h.shutdown().await;
}

#[tokio::test]
async fn events_are_ignored_so_an_event_s_owner_reference_does_not_collect_it() {
    // kube's collector ignores events (`DefaultIgnoredResources`): an event whose
    // ownerReferences name a deleted owner stays until its TTL runs out.
    let (h, c) = server().await;
    let owner = make(&c, cm("owner", vec![], &[])).await;
    for (path, body) in [
        (
            "/api/v1/namespaces/default/events",
            json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "owned-v1", "ownerReferences": [owner_ref(&owner, false)]},
                "involvedObject": {"kind": "ConfigMap", "name": "owner", "namespace": "default"},
                "reason": "Test", "message": "owned", "type": "Normal"}),
        ),
        (
            "/apis/events.k8s.io/v1/namespaces/default/events",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "owned-events-v1", "ownerReferences": [owner_ref(&owner, false)]},
                "regarding": {"kind": "ConfigMap", "name": "owner", "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "test/gc",
                "reportingInstance": "test-1", "action": "Test", "reason": "Test",
                "note": "owned", "type": "Normal"}),
        ),
    ] {
        let r = c.post(path, &body).await;
        assert_eq!(r.code, 201, "{}", r.body);
    }
    assert_eq!(c.delete(&format!("{CMS}/owner"), None).await.code, 200);
    // Collecting a configmap of the same owner proves the collector has seen the deletion.
    make(&c, cm("witness", vec![owner_ref(&owner, false)], &[])).await;
    gone(&h, "witness").await;
    for name in ["owned-v1", "owned-events-v1"] {
        assert!(
            get(&h, "core/events", "default", name).is_some(),
            "event {name} was collected"
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_removes_everything_in_it_then_the_namespace() {
    let h = Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&h);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    assert_eq!(c.post("/api/v1/namespaces", &ns).await.code, 201);
    let base = "/api/v1/namespaces/team";
    for name in ["a", "b"] {
        let r = c
            .post(&format!("{base}/configmaps"), &cm(name, vec![], &[]))
            .await;
        assert_eq!(r.code, 201);
    }
    let r = c
        .post(
            &format!("{base}/configmaps"),
            &cm("held", vec![], &["example.com/hold"]),
        )
        .await;
    assert_eq!(r.code, 201);
    let r = c
        .post(
            &format!("{base}/pods"),
            &pod("web", json!(["sleep", "infinity"]), None),
        )
        .await;
    assert_eq!(r.code, 201);
    wait_phase(&h, "team", "web", "Running").await;

    let r = c.delete("/api/v1/namespaces/team", None).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["status"]["phase"], "Terminating");
    wait_until(&h, "namespace emptied but for the held object", |s| {
        s.list("core/configmaps", Some("team")).len() == 1
            && s.list("core/pods", Some("team")).is_empty()
    })
    .await;
    let nsobj = get(&h, "core/namespaces", "", "team").expect("held by the finalizer");
    assert_eq!(nsobj["status"]["phase"], "Terminating");
    let r = c
        .patch(
            &format!("{base}/configmaps/held"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code, 200);
    wait_until(&h, "namespace gone", |s| {
        s.get("core/namespaces", "", "team").is_none()
    })
    .await;
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_cascade_flags_map_to_propagation_policies() {
    // kubectl sends its token only over HTTPS.
    let h = Cluster::builder().start().await.unwrap();
    let c = TestClient::new(&h);
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    let owner = make(&c, cm("owner", vec![], &[])).await;
    make(&c, cm("dep", vec![owner_ref(&owner, true)], &[])).await;
    let out = k
        .run(&["delete", "configmap", "owner", "--cascade=orphan"])
        .await;
    assert!(out.ok, "{}", out.stderr);
    gone(&h, "owner").await;
    assert!(cm_now(&h, "dep").unwrap()["metadata"]["ownerReferences"].is_null());

    let owner = make(&c, cm("owner2", vec![], &[])).await;
    make(&c, cm("dep2", vec![owner_ref(&owner, true)], &[])).await;
    // kubectl waits for the owner to disappear, which needs the dependents gone first.
    let out = k
        .run(&[
            "delete",
            "configmap",
            "owner2",
            "--cascade=foreground",
            "--timeout=30s",
        ])
        .await;
    assert!(out.ok, "{}", out.stderr);
    assert!(cm_now(&h, "owner2").is_none());
    assert!(cm_now(&h, "dep2").is_none());
    h.shutdown().await;
}

#[tokio::test]
async fn background_deletion_marks_a_dependent_with_a_finalizer_and_waits_for_it() {
    let (h, c) = server().await;
    let owner = make(&c, cm("owner", vec![], &[])).await;
    make(
        &c,
        cm(
            "held",
            vec![owner_ref(&owner, false)],
            &["example.com/hold"],
        ),
    )
    .await;
    assert_eq!(c.delete(&format!("{CMS}/owner"), None).await.code, 200);
    wait_until(&h, "held marked for deletion", |s| {
        s.get("core/configmaps", "default", "held")
            .is_some_and(|o| o["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    let r = c
        .patch(
            &format!("{CMS}/held"),
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code, 200);
    gone(&h, "held").await;
    h.shutdown().await;
}

#[tokio::test]
async fn a_running_pod_of_a_deleted_owner_is_stopped_and_removed() {
    let h = Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&h);
    let owner = make(&c, cm("owner", vec![], &[])).await;
    let mut p = pod("worker", json!(["sleep", "infinity"]), None);
    p["metadata"]["ownerReferences"] = json!([owner_ref(&owner, true)]);
    let r = c.post("/api/v1/namespaces/default/pods", &p).await;
    assert_eq!(r.code, 201);
    wait_phase(&h, "default", "worker", "Running").await;
    let r = c
        .delete(
            &format!("{CMS}/owner"),
            Some(&json!({"propagationPolicy": "Foreground"})),
        )
        .await;
    assert_eq!(r.code, 200);
    // The pod gets a grace period (it runs on a node); the node finishes it, then the owner goes.
    wait_until(&h, "pod and owner gone", |s| {
        s.get("core/pods", "default", "worker").is_none()
            && s.get("core/configmaps", "default", "owner").is_none()
    })
    .await;
    assert!(deleted_at(&h, "worker") < deleted_at(&h, "owner"));
    h.shutdown().await;
}

#[tokio::test]
async fn the_collector_rebuilds_its_graph_after_the_history_is_compacted() {
    let (h, c) = server().await;
    // First make sure the collector is running and following the feed.
    let warm = make(&c, cm("warm-owner", vec![], &[])).await;
    make(&c, cm("warm-dep", vec![owner_ref(&warm, false)], &[])).await;
    assert_eq!(c.delete(&format!("{CMS}/warm-owner"), None).await.code, 200);
    gone(&h, "warm-dep").await;
    // In-process writes with no await before the compaction: the collector cannot have read
    // them, so it must relist (like an informer after 410 Gone) to learn `dep` belongs to `owner`.
    let owner = create(&h, "", "configmaps", "default", cm("owner", vec![], &[]));
    create(
        &h,
        "",
        "configmaps",
        "default",
        cm("dep", vec![owner_ref(&owner, false)], &[]),
    );
    h.faults().compact();
    assert_eq!(c.delete(&format!("{CMS}/owner"), None).await.code, 200);
    gone(&h, "dep").await;
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_delete_namespace_waits_until_it_is_gone() {
    let h = Cluster::builder().simulate(true).start().await.unwrap();
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    let out = k.run(&["create", "namespace", "team"]).await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&[
            "-n",
            "team",
            "run",
            "web",
            "--image=nginx",
            "--restart=Always",
        ])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&[
            "-n",
            "team",
            "wait",
            "--for=jsonpath={.status.phase}=Running",
            "pod/web",
            "--timeout=30s",
        ])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&["delete", "namespace", "team", "--timeout=30s"])
        .await;
    assert!(out.ok, "{} {}", out.stdout, out.stderr);
    assert!(get(&h, "core/namespaces", "", "team").is_none());
    assert!(names(&h, "core/pods", "team").is_empty());
    h.shutdown().await;
}
