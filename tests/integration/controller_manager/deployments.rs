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

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": image}]}}
        }
    })
}

/// ReplicaSets the Deployment `name` controls, oldest first.
fn replicasets_of(h: &ClusterHandle, name: &str) -> Vec<Value> {
    let uid = get(h, "apps/deployments", "default", name)
        .map(|d| d["metadata"]["uid"].clone())
        .unwrap_or_default();
    let mut rss: Vec<Value> = h.store().read(|s| {
        s.list("apps/replicasets", Some("default"))
            .into_iter()
            .filter(|rs| {
                rs["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| {
                        refs.iter()
                            .any(|r| r["uid"] == uid && r["controller"] == true)
                    })
            })
            .cloned()
            .collect()
    });
    rss.sort_by_key(|rs| {
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
            .as_str()
            .and_then(|r| r.parse::<i64>().ok())
    });
    rss
}

fn rolled_out(s: &embedded_apiserver::store::State, name: &str, n: i64) -> bool {
    s.get("apps/deployments", "default", name).is_some_and(|d| {
        let st = &d["status"];
        st["observedGeneration"] == d["metadata"]["generation"]
            && st["updatedReplicas"] == n
            && st["replicas"] == n
            && st["availableReplicas"] == n
            && st["readyReplicas"] == n
            && st.get("unavailableReplicas").is_none()
    })
}

/// A Deployment makes one ReplicaSet `<deploy>-<pod-template-hash>` (the hash a label of it,
/// its selector and its template; revision, desired and max annotations), whose pods run; the
/// status and conditions count them; scaling goes through the ReplicaSet.
#[tokio::test(start_paused = true)]
async fn a_deployment_rolls_out_through_one_replica_set() {
    let h = server(Duration::from_millis(100)).await;
    create(
        &h,
        "apps",
        "deployments",
        "default",
        deployment("api", 3, "nginx:1"),
    );
    wait_until(&h, "deployment rolled out", |s| rolled_out(s, "api", 3)).await;
    let rss = replicasets_of(&h, "api");
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(rs["metadata"]["name"], format!("api-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"],
        hash
    );
    let a = &rs["metadata"]["annotations"];
    assert_eq!(a["deployment.kubernetes.io/revision"], "1");
    assert_eq!(a["deployment.kubernetes.io/desired-replicas"], "3");
    assert_eq!(a["deployment.kubernetes.io/max-replicas"], "4");
    let rs_name = rs["metadata"]["name"].as_str().unwrap();
    let pods = controlled(&h, "ReplicaSet", rs_name);
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(p["status"]["phase"], "Running");
    }
    let d = get(&h, "apps/deployments", "default", "api").unwrap();
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let conds = d["status"]["conditions"].as_array().unwrap();
    let cond = |ty: &str| conds.iter().find(|c| c["type"] == ty).unwrap().clone();
    assert_eq!(cond("Available")["status"], "True");
    assert_eq!(cond("Available")["reason"], "MinimumReplicasAvailable");
    assert_eq!(cond("Progressing")["status"], "True");
    assert_eq!(cond("Progressing")["reason"], "NewReplicaSetAvailable");

    // Scaling changes the ReplicaSet, not the revision.
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "api",
        json!({"spec": {"replicas": 5}}),
    );
    wait_until(&h, "scaled to 5", |s| rolled_out(s, "api", 5)).await;
    let rss = replicasets_of(&h, "api");
    assert_eq!(rss.len(), 1);
    assert_eq!(rss[0]["spec"]["replicas"], 5);
    assert_eq!(
        rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"],
        "5"
    );
    assert_eq!(controlled(&h, "ReplicaSet", rs_name).len(), 5);

    // Scaled to zero: no pods, counts omitted.
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "api",
        json!({"spec": {"replicas": 0}}),
    );
    wait_until(&h, "scaled to 0", |s| {
        s.get("apps/deployments", "default", "api")
            .is_some_and(|d| {
                d["status"]["observedGeneration"] == 3 && d["status"].get("replicas").is_none()
            })
            && s.list("core/pods", Some("default")).is_empty()
    })
    .await;
    h.shutdown().await;
}
