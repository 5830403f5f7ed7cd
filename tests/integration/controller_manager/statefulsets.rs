//! The StatefulSet controller's updates: a changed template rolls the pods in reverse ordinal
//! order, one Running-and-Ready pod at a time; a `partition` keeps the ordinals below it at
//! the current revision (even when one of them is recreated); `OnDelete` rolls nothing until a
//! pod is deleted. `currentRevision`, `updateRevision`, `currentReplicas` and
//! `updatedReplicas` report it as the real controller does.

use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_apiserver::internals::store::ChangeType;
use embedded_cluster::ClusterHandle;
use serde_json::{Value, json};

const REVISION: &str = "controller-revision-hash";

fn sts(name: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 3,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "redis:7"}]}
            }
        }
    })
}

fn status(h: &ClusterHandle, name: &str) -> Value {
    get(h, "apps/statefulsets", "default", name).unwrap()["status"].clone()
}

fn pod(h: &ClusterHandle, name: &str) -> Value {
    get(h, "core/pods", "default", name).unwrap()
}

fn revision(p: &Value) -> &str {
    p["metadata"]["labels"][REVISION]
        .as_str()
        .unwrap_or_default()
}

fn running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

async fn wait_ready(h: &ClusterHandle, name: &str) {
    wait_until(h, &format!("statefulset {name} with 3 ready"), |s| {
        s.get("apps/statefulsets", "default", name)
            .is_some_and(|o| o["status"]["readyReplicas"] == 3 && o["status"]["replicas"] == 3)
    })
    .await;
}

fn change_image(h: &ClusterHandle, name: &str) {
    merge_patch(
        h,
        "apps",
        "statefulsets",
        "default",
        name,
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "redis:8"}]}}}}),
    );
}

/// Each pod whose deletion began after revision `since` (a `deletionTimestamp` or its
/// removal, whichever came first), with the revision it began at, in order.
fn deletions_since(h: &ClusterHandle, since: u64) -> Vec<(String, u64)> {
    h.store().read(|s| {
        let mut seen: Vec<(String, u64)> = vec![];
        let mut started = std::collections::HashSet::new();
        for c in s.changes_since(since).unwrap() {
            if c.storage != "core/pods" {
                continue;
            }
            let name = c.object["metadata"]["name"].as_str().unwrap().to_owned();
            let uid = c.object["metadata"]["uid"].as_str().unwrap().to_owned();
            let deleting = c.kind == ChangeType::Deleted
                || c.object["metadata"]["deletionTimestamp"].is_string();
            if deleting && started.insert(uid) {
                seen.push((name, c.rv));
            }
        }
        seen
    })
}

/// The pod `name` as it was just before revision `rv`.
fn pod_before(h: &ClusterHandle, name: &str, since: u64, rv: u64) -> Option<Value> {
    h.store().read(|s| {
        s.changes_since(since)
            .unwrap()
            .iter()
            .rev()
            .find(|c| c.storage == "core/pods" && c.rv < rv && c.object["metadata"]["name"] == name)
            .filter(|c| c.kind != ChangeType::Deleted)
            .map(|c| c.object.value().clone())
    })
}

#[tokio::test(start_paused = true)]
async fn a_template_change_rolls_the_pods_in_reverse_ordinal_order_one_ready_pod_at_a_time() {
    let h = simulated(Duration::from_millis(500)).await;
    create(
        &h,
        "apps",
        "statefulsets",
        "default",
        sts("web", json!({"type": "RollingUpdate"})),
    );
    wait_ready(&h, "web").await;
    let old = status(&h, "web")["updateRevision"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(status(&h, "web")["currentRevision"], old);
    assert_eq!(status(&h, "web")["updatedReplicas"], 3);
    let since = h.resource_version();

    change_image(&h, "web");
    wait_until(&h, "the rollout to complete", |s| {
        let st = &s.get("apps/statefulsets", "default", "web").unwrap()["status"];
        st["observedGeneration"] == 2
            && st["updateRevision"] != old.as_str()
            && st["currentRevision"] == st["updateRevision"]
            && st["updatedReplicas"] == 3
            && st["currentReplicas"] == 3
            && st["readyReplicas"] == 3
    })
    .await;
    let new = status(&h, "web")["updateRevision"]
        .as_str()
        .unwrap()
        .to_owned();

    let deletions = deletions_since(&h, since);
    let order: Vec<&str> = deletions.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["web-2", "web-1", "web-0"]);
    // Before each next pod went, the one replaced before it was back, updated, Running and Ready.
    for pair in deletions.windows(2) {
        let (replaced, (_, next_at)) = (&pair[0].0, &pair[1]);
        let before = pod_before(&h, replaced, since, *next_at)
            .unwrap_or_else(|| panic!("{replaced} was not recreated before the next deletion"));
        assert_eq!(revision(&before), new, "{replaced}");
        assert!(running_and_ready(&before), "{replaced}: {before}");
    }
    for n in ["web-0", "web-1", "web-2"] {
        let p = pod(&h, n);
        assert_eq!(revision(&p), new, "{n}");
        assert_eq!(p["spec"]["containers"][0]["image"], "redis:8", "{n}");
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_partition_keeps_the_lower_ordinals_at_the_current_revision() {
    let h = simulated(Duration::from_millis(500)).await;
    let strategy = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
    create(&h, "apps", "statefulsets", "default", sts("db", strategy));
    wait_ready(&h, "db").await;
    let old = status(&h, "db")["updateRevision"]
        .as_str()
        .unwrap()
        .to_owned();

    change_image(&h, "db");
    wait_until(&h, "db-2 updated and ready", |s| {
        let st = &s.get("apps/statefulsets", "default", "db").unwrap()["status"];
        st["updateRevision"] != old.as_str()
            && st["updatedReplicas"] == 1
            && st["readyReplicas"] == 3
    })
    .await;
    let new = status(&h, "db")["updateRevision"]
        .as_str()
        .unwrap()
        .to_owned();
    let st = status(&h, "db");
    assert_eq!(st["currentRevision"], old);
    assert_eq!(st["currentReplicas"], 2);
    assert_eq!(revision(&pod(&h, "db-2")), new);
    assert_eq!(revision(&pod(&h, "db-1")), old);
    assert_eq!(revision(&pod(&h, "db-0")), old);

    // A pod below the partition that goes is recreated at the current revision.
    let uid = pod(&h, "db-0")["metadata"]["uid"].clone();
    let mut t = target(&h, "", "v1", "pods", "default");
    t.name = Some("db-0".into());
    let opts = embedded_apiserver::internals::verbs::DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    h.store()
        .write(|s| embedded_apiserver::internals::verbs::delete_one(s, &t, &opts))
        .unwrap();
    wait_until(&h, "db-0 recreated and ready", |s| {
        s.get("core/pods", "default", "db-0")
            .is_some_and(|p| p["metadata"]["uid"] != uid && running_and_ready(p))
    })
    .await;
    let recreated = pod(&h, "db-0");
    assert_eq!(revision(&recreated), old);
    assert_eq!(recreated["spec"]["containers"][0]["image"], "redis:7");

    // Lowering the partition rolls the rest.
    merge_patch(
        &h,
        "apps",
        "statefulsets",
        "default",
        "db",
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    );
    wait_until(&h, "the rollout to complete", |s| {
        let st = &s.get("apps/statefulsets", "default", "db").unwrap()["status"];
        st["currentRevision"] == new.as_str()
            && st["updatedReplicas"] == 3
            && st["readyReplicas"] == 3
    })
    .await;
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn on_delete_rolls_nothing_until_a_pod_is_deleted() {
    let h = simulated(Duration::from_millis(500)).await;
    create(
        &h,
        "apps",
        "statefulsets",
        "default",
        sts("cache", json!({"type": "OnDelete"})),
    );
    wait_ready(&h, "cache").await;
    let old = status(&h, "cache")["updateRevision"]
        .as_str()
        .unwrap()
        .to_owned();
    let since = h.resource_version();

    change_image(&h, "cache");
    wait_until(&h, "the new update revision", |s| {
        let st = &s.get("apps/statefulsets", "default", "cache").unwrap()["status"];
        st["observedGeneration"] == 2 && st["updateRevision"] != old.as_str()
    })
    .await;
    // Ten reaction delays of virtual time: the controller has had every chance to roll.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(deletions_since(&h, since), []);
    let st = status(&h, "cache");
    assert_eq!(st["currentRevision"], old);
    assert_eq!(st["currentReplicas"], 3);
    assert!(st.get("updatedReplicas").is_none(), "{st}");
    let new = st["updateRevision"].as_str().unwrap().to_owned();

    let uid = pod(&h, "cache-1")["metadata"]["uid"].clone();
    let mut t = target(&h, "", "v1", "pods", "default");
    t.name = Some("cache-1".into());
    let opts = embedded_apiserver::internals::verbs::DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    h.store()
        .write(|s| embedded_apiserver::internals::verbs::delete_one(s, &t, &opts))
        .unwrap();
    wait_until(&h, "cache-1 recreated at the update revision", |s| {
        let st = &s.get("apps/statefulsets", "default", "cache").unwrap()["status"];
        st["updatedReplicas"] == 1 && st["currentReplicas"] == 2 && st["readyReplicas"] == 3
    })
    .await;
    let recreated = pod(&h, "cache-1");
    assert_ne!(recreated["metadata"]["uid"], uid);
    assert_eq!(revision(&recreated), new);
    assert_eq!(status(&h, "cache")["currentRevision"], old);
    h.shutdown().await;
}
