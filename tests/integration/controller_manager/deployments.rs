//! The Deployment and ReplicaSet controllers (`embedded_controller_manager::deployments`,
//! `replicasets`): ReplicaSets keep their pods `<rs>-xxxxx`; Deployments roll out through
//! ReplicaSets `<deploy>-<pod-template-hash>` with kubectl's `create deployment`, `scale`,
//! `set image`, `rollout status|history|undo|restart|pause|resume`; the fast mode keeps status
//! only.

use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

async fn server(delay: Duration) -> ClusterHandle {
    Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .workload_delay(delay)
        .start()
        .await
        .unwrap()
}

/// Live pods (not being deleted) whose controller is `kind`/`name`.
fn controlled(h: &ClusterHandle, kind: &str, name: &str) -> Vec<Value> {
    h.store().read(|s| {
        s.list("core/pods", Some("default"))
            .into_iter()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|refs| {
                            refs.iter().any(|r| {
                                r["controller"] == true && r["kind"] == kind && r["name"] == name
                            })
                        })
            })
            .cloned()
            .collect()
    })
}

fn rs(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx"}]}}
        }
    })
}

/// A ReplicaSet creates its pods `<rs>-xxxxx` from the template, controlled by it; the node
/// runs them and the status counts them; scaling down deletes the surplus; an orphan pod that
/// matches is adopted, and a replaced pod is recreated.
#[tokio::test(start_paused = true)]
async fn a_replica_set_keeps_its_pods_and_counts_them() {
    let h = server(Duration::from_millis(100)).await;
    create(&h, "apps", "replicasets", "default", rs("front", 3));
    wait_until(&h, "replicaset with 3 available pods", |s| {
        s.get("apps/replicasets", "default", "front")
            .is_some_and(|o| {
                let st = &o["status"];
                st["replicas"] == 3
                    && st["fullyLabeledReplicas"] == 3
                    && st["readyReplicas"] == 3
                    && st["availableReplicas"] == 3
                    && st["observedGeneration"] == 1
            })
    })
    .await;
    let pods = controlled(&h, "ReplicaSet", "front");
    assert_eq!(pods.len(), 3);
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let suffix = name.strip_prefix("front-").unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert_eq!(p["metadata"]["labels"]["app"], "front");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"],
            true
        );
        assert_eq!(p["spec"]["nodeName"], "embedded-node");
        assert_eq!(p["status"]["phase"], "Running");
    }

    // Scale down: two pods go.
    merge_patch(
        &h,
        "apps",
        "replicasets",
        "default",
        "front",
        json!({"spec": {"replicas": 1}}),
    );
    wait_until(&h, "replicaset scaled to 1", |s| {
        s.get("apps/replicasets", "default", "front")
            .is_some_and(|o| o["status"]["replicas"] == 1 && o["status"]["observedGeneration"] == 2)
            && s.list("core/pods", Some("default")).len() == 1
    })
    .await;

    // An orphan that matches the selector is adopted: the set then has one too many and
    // deletes one.
    let mut orphan = pod("stray", json!(["sleep", "1000"]), None);
    orphan["metadata"]["labels"] = json!({"app": "front"});
    create(&h, "", "pods", "default", orphan);
    wait_until(&h, "orphan adopted and the surplus deleted", |s| {
        s.list("core/pods", Some("default")).len() == 1
            && s.get("apps/replicasets", "default", "front")
                .is_some_and(|o| o["status"]["replicas"] == 1)
    })
    .await;

    // A deleted pod is replaced.
    let survivor = controlled(&h, "ReplicaSet", "front").remove(0);
    let name = survivor["metadata"]["name"].as_str().unwrap().to_owned();
    let mut t = target(&h, "", "v1", "pods", "default");
    t.name = Some(name.clone());
    h.store()
        .write(|s| {
            embedded_apiserver::verbs::delete_one(
                s,
                &t,
                &embedded_apiserver::verbs::DeleteOptions::default(),
            )
        })
        .unwrap();
    wait_until(&h, "a replacement pod", |s| {
        let pods = s.list("core/pods", Some("default"));
        pods.len() == 1 && pods[0]["metadata"]["name"] != name.as_str()
    })
    .await;
    h.shutdown().await;
}
