//! The Deployment and ReplicaSet controllers (`embedded_controller_manager::deployments`,
//! `replicasets`): ReplicaSets keep their pods `<rs>-xxxxx`; Deployments roll out through
//! ReplicaSets `<deploy>-<pod-template-hash>` with kubectl's `create deployment`, `scale`,
//! `set image`, `rollout status|history|undo|restart|pause|resume`; the fast mode keeps status
//! only.

use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_cluster::{Cluster, ClusterHandle, NodeRuntime};
use serde_json::{Value, json};

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
    let h = simulated(Duration::from_millis(100)).await;
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
    let pods = controlled_pods(&h, "ReplicaSet", "front");
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
    scale(&h, "apps", "replicasets", "front", 1);
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
    let survivor = controlled_pods(&h, "ReplicaSet", "front").remove(0);
    let name = survivor["metadata"]["name"].as_str().unwrap().to_owned();
    let mut t = target(&h, "", "v1", "pods", "default");
    t.name = Some(name.clone());
    h.store()
        .write(|s| {
            embedded_apiserver::internals::verbs::delete_one(
                s,
                &t,
                &embedded_apiserver::internals::verbs::DeleteOptions::default(),
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

fn rolled_out(s: &embedded_apiserver::internals::store::State, name: &str, n: i64) -> bool {
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
    let h = simulated(Duration::from_millis(100)).await;
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
    let pods = controlled_pods(&h, "ReplicaSet", rs_name);
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
    scale(&h, "apps", "deployments", "api", 5);
    wait_until(&h, "scaled to 5", |s| rolled_out(s, "api", 5)).await;
    let rss = replicasets_of(&h, "api");
    assert_eq!(rss.len(), 1);
    assert_eq!(rss[0]["spec"]["replicas"], 5);
    assert_eq!(
        rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"],
        "5"
    );
    assert_eq!(controlled_pods(&h, "ReplicaSet", rs_name).len(), 5);

    // Scaled to zero: no pods, counts omitted.
    scale(&h, "apps", "deployments", "api", 0);
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

/// The store's revision now (where a replay of the history starts).
fn revision_now(h: &ClusterHandle) -> u64 {
    h.store().resource_version()
}

/// Replays the ReplicaSet changes of Deployment `name` since `from` and checks, after every
/// one, that the ReplicaSets want at most `replicas + surge` pods and report at least
/// `replicas - unavailable` available; answers the most pods wanted at once.
fn check_rollout_bounds(
    h: &ClusterHandle,
    name: &str,
    from: u64,
    replicas: i64,
    surge: i64,
    unavailable: i64,
) -> i64 {
    let prefix = format!("{name}-");
    let changes = h.store().read(|s| s.changes_since(from).unwrap());
    let mut state: std::collections::BTreeMap<String, Value> = Default::default();
    for rs in replicasets_of(h, name) {
        // Start from the state before `from`: the oldest version the replay shows is rebuilt
        // from the first change's `prev` below; ReplicaSets untouched since then are current.
        state.insert(rs["metadata"]["name"].as_str().unwrap().to_owned(), rs);
    }
    for c in changes.iter().filter(|c| c.storage == "apps/replicasets") {
        if let Some(prev) = &c.prev {
            let n = prev["metadata"]["name"].as_str().unwrap().to_owned();
            state.entry(n).or_insert_with(|| prev.value().clone());
        }
    }
    // Rewind: for every ReplicaSet changed since `from`, its state before the first change.
    let mut first_seen = std::collections::BTreeSet::new();
    for c in changes.iter().filter(|c| c.storage == "apps/replicasets") {
        let n = c.object["metadata"]["name"].as_str().unwrap().to_owned();
        if first_seen.insert(n.clone()) {
            match &c.prev {
                Some(prev) => state.insert(n, prev.value().clone()),
                None => state.remove(&n),
            };
        }
    }
    let mut most = 0;
    let mut trace = String::new();
    for c in changes.iter().filter(|c| c.storage == "apps/replicasets") {
        let n = c.object["metadata"]["name"].as_str().unwrap().to_owned();
        if !n.starts_with(&prefix) {
            continue;
        }
        match c.kind {
            embedded_apiserver::internals::store::ChangeType::Deleted => state.remove(&n),
            _ => state.insert(n.clone(), c.object.value().clone()),
        };
        let wanted: i64 = state
            .values()
            .map(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(0))
            .sum();
        let available: i64 = state
            .values()
            .map(|rs| rs["status"]["availableReplicas"].as_i64().unwrap_or(0))
            .sum();
        trace.push_str(&format!(
            "\n{} {:?} {n}: spec {} status {}",
            c.rv, c.kind, c.object["spec"]["replicas"], c.object["status"]
        ));
        assert!(
            wanted <= replicas + surge,
            "{wanted} pods wanted at revision {}: more than {replicas} + {surge}{trace}",
            c.rv
        );
        assert!(
            available >= replicas - unavailable,
            "{available} available at revision {}: fewer than {replicas} - {unavailable}",
            c.rv
        );
        most = most.max(wanted);
    }
    most
}

/// A new template rolls out through a new ReplicaSet: at every step the ReplicaSets want at
/// most `replicas + maxSurge` pods and keep `replicas - maxUnavailable` available (percentages
/// rounded as kube rounds them: surge up, unavailability down); the old ReplicaSet ends at
/// zero and stays as history.
#[tokio::test(start_paused = true)]
async fn a_rolling_update_respects_max_surge_and_max_unavailable() {
    let h = simulated(Duration::from_millis(100)).await;
    // Default strategy, 5 replicas: maxSurge 25% → 2, maxUnavailable 25% → 1.
    create(
        &h,
        "apps",
        "deployments",
        "default",
        deployment("web", 5, "nginx:1"),
    );
    wait_until(&h, "first rollout", |s| rolled_out(s, "web", 5)).await;
    let from = revision_now(&h);
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}}}),
    );
    wait_until(&h, "second rollout", |s| rolled_out(s, "web", 5)).await;
    let most = check_rollout_bounds(&h, "web", from, 5, 2, 1);
    assert_eq!(most, 7, "the surge is used");
    let rss = replicasets_of(&h, "web");
    assert_eq!(rss.len(), 2);
    assert_eq!(rss[0]["spec"]["replicas"], 0);
    assert_eq!(rss[1]["spec"]["replicas"], 5);
    assert_eq!(
        rss[1]["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
    assert_eq!(
        rss[1]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    let new_rs = rss[1]["metadata"]["name"].as_str().unwrap();
    assert_eq!(controlled_pods(&h, "ReplicaSet", new_rs).len(), 5);
    assert_eq!(
        h.store()
            .read(|s| s.list("core/pods", Some("default")).len()),
        5
    );

    // Integers: no surge, one unavailable at a time.
    let from = revision_now(&h);
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "web",
        json!({"spec": {
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {"spec": {"containers": [{"name": "main", "image": "nginx:3"}]}}}}),
    );
    wait_until(&h, "third rollout", |s| rolled_out(s, "web", 5)).await;
    assert_eq!(check_rollout_bounds(&h, "web", from, 5, 0, 1), 5);
    assert_eq!(replicasets_of(&h, "web").len(), 3);
    h.shutdown().await;
}

/// Pod changes of kind `kind` (ADDED, DELETED) since `from`, as `(revision, pod-template-hash)`.
fn pod_changes(
    h: &ClusterHandle,
    from: u64,
    kind: embedded_apiserver::internals::store::ChangeType,
) -> Vec<(u64, String)> {
    h.store().read(|s| {
        s.changes_since(from)
            .unwrap()
            .iter()
            .filter(|c| c.storage == "core/pods" && c.kind == kind)
            .map(|c| {
                (
                    c.rv,
                    c.object["metadata"]["labels"]["pod-template-hash"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    })
}

/// `Recreate` deletes every old pod before the first new one is created.
#[tokio::test(start_paused = true)]
async fn recreate_deletes_the_old_pods_before_creating_new_ones() {
    let h = simulated(Duration::from_millis(100)).await;
    let mut d = deployment("db", 3, "postgres:15");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    create(&h, "apps", "deployments", "default", d);
    wait_until(&h, "first rollout", |s| rolled_out(s, "db", 3)).await;
    let old_hash = replicasets_of(&h, "db")[0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let from = revision_now(&h);
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "db",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "postgres:16"}]}}}}),
    );
    wait_until(&h, "second rollout", |s| rolled_out(s, "db", 3)).await;
    use embedded_apiserver::internals::store::ChangeType;
    let deleted = pod_changes(&h, from, ChangeType::Deleted);
    let added = pod_changes(&h, from, ChangeType::Added);
    assert_eq!(deleted.len(), 3);
    assert!(deleted.iter().all(|(_, hash)| *hash == old_hash));
    assert_eq!(added.len(), 3);
    assert!(added.iter().all(|(_, hash)| *hash != old_hash));
    let last_deleted = deleted.iter().map(|(rv, _)| *rv).max().unwrap();
    let first_added = added.iter().map(|(rv, _)| *rv).min().unwrap();
    assert!(
        last_deleted < first_added,
        "old pods gone ({last_deleted}) before new ones ({first_added})"
    );
    h.shutdown().await;
}

/// A paused Deployment does not roll a new template out (it is marked `DeploymentPaused`),
/// and rolls it once resumed.
#[tokio::test(start_paused = true)]
async fn a_paused_deployment_does_not_roll() {
    let h = simulated(Duration::from_millis(100)).await;
    create(
        &h,
        "apps",
        "deployments",
        "default",
        deployment("web", 2, "nginx:1"),
    );
    wait_until(&h, "first rollout", |s| rolled_out(s, "web", 2)).await;
    let pods_before: Vec<Value> = controlled_pods(
        &h,
        "ReplicaSet",
        replicasets_of(&h, "web")[0]["metadata"]["name"]
            .as_str()
            .unwrap(),
    );
    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "web",
        json!({"spec": {"paused": true,
                        "template": {"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}}}),
    );
    wait_until(&h, "the paused spec observed", |s| {
        s.get("apps/deployments", "default", "web")
            .is_some_and(|d| {
                d["status"]["observedGeneration"] == d["metadata"]["generation"]
                    && d["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c["type"] == "Progressing"
                                && c["reason"] == "DeploymentPaused"
                                && c["status"] == "Unknown"
                        })
                    })
            })
    })
    .await;
    // Let the controllers run a while longer: still one ReplicaSet and the same pods.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(replicasets_of(&h, "web").len(), 1);
    let d = get(&h, "apps/deployments", "default", "web").unwrap();
    assert!(
        d["status"].get("updatedReplicas").is_none(),
        "{}",
        d["status"]
    );
    let names = |pods: &[Value]| {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        n.sort();
        n
    };
    let rs0 = replicasets_of(&h, "web")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        names(&controlled_pods(&h, "ReplicaSet", &rs0)),
        names(&pods_before)
    );

    merge_patch(
        &h,
        "apps",
        "deployments",
        "default",
        "web",
        json!({"spec": {"paused": false}}),
    );
    wait_until(&h, "rolled out once resumed", |s| rolled_out(s, "web", 2)).await;
    let rss = replicasets_of(&h, "web");
    assert_eq!(rss.len(), 2);
    assert_eq!(
        rss[1]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:2"
    );
    h.shutdown().await;
}

/// Old ReplicaSets without replicas beyond `revisionHistoryLimit` are deleted, lowest
/// revision first.
#[tokio::test(start_paused = true)]
async fn revision_history_limit_prunes_old_replica_sets() {
    let h = simulated(Duration::from_millis(100)).await;
    let mut d = deployment("web", 1, "nginx:1");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    create(&h, "apps", "deployments", "default", d);
    wait_until(&h, "first rollout", |s| rolled_out(s, "web", 1)).await;
    for v in 2..=4 {
        merge_patch(
            &h,
            "apps",
            "deployments",
            "default",
            "web",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": format!("nginx:{v}")}]}}}}),
        );
        wait_until(&h, &format!("rollout {v}"), |s| rolled_out(s, "web", 1)).await;
    }
    wait_until(&h, "two ReplicaSets left", |s| {
        s.list("apps/replicasets", Some("default")).len() == 2
    })
    .await;
    let revisions: Vec<String> = replicasets_of(&h, "web")
        .iter()
        .map(|rs| {
            rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(revisions, ["3", "4"]);
    h.shutdown().await;
}

/// A rollout whose pods never become available (ready, but not for `minReadySeconds`)
/// exceeds its progress deadline: `Progressing=False`, `ProgressDeadlineExceeded`, and
/// `Available=False` below the minimum.
#[tokio::test(start_paused = true)]
async fn a_stuck_rollout_exceeds_its_progress_deadline() {
    let h = simulated(Duration::from_millis(100)).await;
    let mut d = deployment("crash", 2, "nginx");
    d["spec"]["progressDeadlineSeconds"] = json!(5);
    d["spec"]["minReadySeconds"] = json!(3600);
    create(&h, "apps", "deployments", "default", d);
    wait_until(&h, "deadline exceeded", |s| {
        s.get("apps/deployments", "default", "crash")
            .is_some_and(|d| {
                d["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Progressing"
                            && c["status"] == "False"
                            && c["reason"] == "ProgressDeadlineExceeded"
                    })
                })
            })
    })
    .await;
    let d = get(&h, "apps/deployments", "default", "crash").unwrap();
    let st = &d["status"];
    assert_eq!(st["replicas"], 2);
    assert_eq!(st["updatedReplicas"], 2);
    assert_eq!(st["readyReplicas"], 2);
    assert!(st.get("availableReplicas").is_none(), "{st}");
    assert_eq!(st["unavailableReplicas"], 2);
    let available = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Available")
        .unwrap();
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], "MinimumReplicasUnavailable");
    h.shutdown().await;
}

/// ReplicaSets of `app=web` as kubectl lists them: `(name, revision, spec.replicas, image)`,
/// by revision.
async fn kubectl_replicasets(k: &Kubectl) -> Vec<(String, i64, i64, String)> {
    let list = k.json(&["get", "replicasets", "-l", "app=web"]).await;
    let mut out: Vec<(String, i64, i64, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rs| {
            (
                rs["metadata"]["name"].as_str().unwrap().to_owned(),
                rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
                rs["spec"]["replicas"].as_i64().unwrap(),
                rs["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    out.sort_by_key(|r| r.1);
    out
}

async fn rollout_status(k: &Kubectl) {
    let out = k
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
}

/// The whole kubectl workflow against real ReplicaSets and pods: `create deployment`, `rollout
/// status`, `scale`, `set image` (within the surge and unavailability bounds), `rollout
/// history`, `rollout undo`, `rollout restart`, and `delete` (the garbage collector takes the
/// ReplicaSets and pods), with either node runtime: the simulated one, and the process
/// runtime, where every pod is a `sleep 3600` process the ReplicaSets' scaling starts and ends.
async fn kubectl_rollout_workflow(runtime: NodeRuntime) {
    let h = Cluster::builder()
        .simulate(true)
        .node_runtime(runtime)
        .workload_delay(Duration::from_millis(20))
        .start()
        .await
        .unwrap();
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=busybox",
        "--replicas=3",
        "--",
        "sleep",
        "3600",
    ])
    .await;
    rollout_status(&k).await;
    let rss = kubectl_replicasets(&k).await;
    assert_eq!(rss.len(), 1, "{rss:?}");
    let (first_rs, _, _, _) = rss[0].clone();
    let rs = k.json(&["get", "replicaset", &first_rs]).await;
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(first_rs, format!("web-{hash}"));
    let pods = k.json(&["get", "pods", "-l", "app=web"]).await;
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 3);
    for p in pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let suffix = name.strip_prefix(&format!("{first_rs}-")).unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            first_rs.as_str()
        );
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        if runtime == NodeRuntime::Process {
            // The pod is a process of this machine running the container's command.
            let id = p["status"]["containerStatuses"][0]["containerID"]
                .as_str()
                .unwrap_or_default();
            let pid = id.strip_prefix("process://").unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            assert_eq!(cmdline, b"sleep\x003600\x00", "pod {name}: container {id}");
        }
    }

    // Scale to 5 (25% each: surge 2, unavailable 1), then a new image.
    k.ok(&["scale", "deployment", "web", "--replicas=5"]).await;
    rollout_status(&k).await;
    let from = revision_now(&h);
    k.ok(&["set", "image", "deployment/web", "busybox=busybox:1.37"])
        .await;
    rollout_status(&k).await;
    check_rollout_bounds(&h, "web", from, 5, 2, 1);
    k.ok(&[
        "annotate",
        "deployment/web",
        "kubernetes.io/change-cause=busybox 1.37",
    ])
    .await;
    let rss = kubectl_replicasets(&k).await;
    assert_eq!(rss.len(), 2, "{rss:?}");
    assert_eq!((rss[0].1, rss[0].2), (1, 0));
    assert_eq!(
        (rss[1].1, rss[1].2, rss[1].3.as_str()),
        (2, 5, "busybox:1.37")
    );

    // History: both revisions; the change cause reaches the new ReplicaSet.
    let mut history = String::new();
    for _ in 0..500 {
        history = k.ok(&["rollout", "history", "deployment/web"]).await;
        if history.contains("busybox 1.37") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<i64>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    assert!(history.contains("busybox 1.37"), "{history}");
    let rev1 = k
        .ok(&["rollout", "history", "deployment/web", "--revision=1"])
        .await;
    assert!(
        rev1.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Image:", "busybox"]),
        "{rev1}"
    );

    // Undo: back to the first template, through the first ReplicaSet (now revision 3).
    k.ok(&["rollout", "undo", "deployment/web"]).await;
    rollout_status(&k).await;
    let rss = kubectl_replicasets(&k).await;
    assert_eq!(rss.len(), 2, "{rss:?}");
    assert_eq!(rss[1].0, first_rs, "{rss:?}");
    assert_eq!((rss[1].1, rss[1].2, rss[1].3.as_str()), (3, 5, "busybox"));
    assert_eq!(rss[0].2, 0);
    let d = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox"
    );
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let rs = k.json(&["get", "replicaset", &first_rs]).await;
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"],
        "1"
    );

    // Restart: a template annotation, so a new ReplicaSet.
    k.ok(&["rollout", "restart", "deployment/web"]).await;
    rollout_status(&k).await;
    let rss = kubectl_replicasets(&k).await;
    assert_eq!(rss.len(), 3, "{rss:?}");
    assert_eq!((rss[2].1, rss[2].2), (4, 5));
    let rs = k.json(&["get", "replicaset", &rss[2].0]).await;
    assert!(
        rs["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .is_string()
    );
    let pods = k.json(&["get", "pods", "-l", "app=web"]).await;
    let live: Vec<&Value> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert_eq!(live.len(), 5);
    assert!(
        live.iter()
            .all(|p| p["metadata"]["ownerReferences"][0]["name"] == rss[2].0.as_str())
    );

    // Deleting the Deployment takes its ReplicaSets and pods with it.
    k.ok(&["delete", "deployment", "web"]).await;
    wait_until(&h, "replicasets and pods collected", |s| {
        s.list("apps/replicasets", Some("default")).is_empty()
            && s.list("core/pods", Some("default")).is_empty()
    })
    .await;
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_rolls_deployments_out_back_and_again() {
    kubectl_rollout_workflow(NodeRuntime::Simulated).await;
}

#[tokio::test]
async fn kubectl_rolls_deployments_out_back_and_again_as_processes() {
    kubectl_rollout_workflow(NodeRuntime::Process).await;
}
