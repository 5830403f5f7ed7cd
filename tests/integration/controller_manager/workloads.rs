//! The simulated workload controllers: StatefulSets create and delete their pods
//! `<name>-<ordinal>` in order (or in parallel), Deployments in the status-only fast mode
//! follow `spec.replicas`, and kubectl's `rollout status` and `scale` work against them
//! (Deployments with real ReplicaSets: `deployments.rs`).

use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_apiserver::internals::store::ChangeType;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

fn sts(name: &str, replicas: i64, policy: Option<&str>) -> Value {
    let mut s = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "redis:7"}]}
            }
        }
    });
    if let Some(p) = policy {
        s["spec"]["podManagementPolicy"] = json!(p);
    }
    s
}

/// Pod names in order of their creation (ADDED) or deletion (DELETED) in the history.
fn pod_events(h: &ClusterHandle, kind: ChangeType) -> Vec<String> {
    h.store().read(|s| {
        s.changes_since(1)
            .unwrap()
            .iter()
            .filter(|c| c.storage == "core/pods" && c.kind == kind)
            .map(|c| c.object["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    })
}

async fn wait_sts_ready(h: &ClusterHandle, name: &str, n: i64) {
    wait_until(h, &format!("statefulset {name} with {n} ready"), |s| {
        let Some(o) = s.get("apps/statefulsets", "default", name) else {
            return false;
        };
        let st = &o["status"];
        st["replicas"] == n
            && st["availableReplicas"] == n
            && (n == 0 || st["readyReplicas"] == n)
            && s.list("core/pods", Some("default")).len() as i64 == n
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn ordered_ready_scales_up_in_order_and_down_from_the_highest_ordinal() {
    let h = simulated(Duration::from_millis(500)).await;
    let created = create(&h, "apps", "statefulsets", "default", sts("web", 3, None));
    wait_sts_ready(&h, "web", 3).await;
    assert_eq!(
        pod_events(&h, ChangeType::Added),
        ["web-0", "web-1", "web-2"]
    );
    let mut names = names(&h, "core/pods", "default");
    names.sort();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    let p = get(&h, "core/pods", "default", "web-1").unwrap();
    let owner = &p["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "StatefulSet");
    assert_eq!(owner["uid"], created["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(p["metadata"]["labels"]["app"], "web");
    assert_eq!(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"], "1");
    assert_eq!(p["spec"]["hostname"], "web-1");
    assert_eq!(p["status"]["phase"], "Running");
    let status = get(&h, "apps/statefulsets", "default", "web").unwrap()["status"].clone();
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["currentReplicas"], 3);

    scale(&h, "apps", "statefulsets", "web", 1);
    wait_sts_ready(&h, "web", 1).await;
    assert_eq!(pod_events(&h, ChangeType::Deleted), ["web-2", "web-1"]);
    assert_eq!(
        get(&h, "apps/statefulsets", "default", "web").unwrap()["status"]["observedGeneration"],
        2
    );

    // A pod that disappears comes back with the same name.
    let mut t = target(&h, "", "v1", "pods", "default");
    t.name = Some("web-0".into());
    let opts = embedded_apiserver::internals::verbs::DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    h.store()
        .write(|s| embedded_apiserver::internals::verbs::delete_one(s, &t, &opts))
        .unwrap();
    wait_until(&h, "web-0 recreated", |s| {
        s.get("core/pods", "default", "web-0")
            .is_some_and(|p| p["metadata"]["uid"] != "" && p["status"]["phase"] == "Running")
    })
    .await;
    assert_eq!(
        pod_events(&h, ChangeType::Added)
            .iter()
            .filter(|n| *n == "web-0")
            .count(),
        2
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn parallel_creates_all_pods_at_once_and_deleting_the_set_collects_them() {
    let h = simulated(Duration::from_secs(2)).await;
    create(
        &h,
        "apps",
        "statefulsets",
        "default",
        sts("db", 0, Some("Parallel")),
    );
    wait_sts_ready(&h, "db", 0).await;
    scale(&h, "apps", "statefulsets", "db", 3);
    // Nothing happens before the delay...
    tokio::time::advance(Duration::from_millis(1_900)).await;
    tokio::task::yield_now().await;
    assert!(names(&h, "core/pods", "default").is_empty());
    // ...then every pod is created in one step.
    wait_until(&h, "three pods", |s| {
        s.list("core/pods", Some("default")).len() == 3
    })
    .await;
    wait_sts_ready(&h, "db", 3).await;

    // A pod that failed is replaced under the same name.
    let failed = get(&h, "core/pods", "default", "db-1").unwrap();
    h.store().write(|s| {
        let mut p = failed.clone();
        p["status"]["phase"] = json!("Failed");
        s.update("core/pods", p)
    });
    wait_until(&h, "db-1 replaced", |s| {
        s.get("core/pods", "default", "db-1").is_some_and(|p| {
            p["metadata"]["uid"] != failed["metadata"]["uid"] && p["status"]["phase"] == "Running"
        })
    })
    .await;

    let mut t = target(&h, "apps", "v1", "statefulsets", "default");
    t.name = Some("db".into());
    h.store()
        .write(|s| embedded_apiserver::internals::verbs::delete_one(s, &t, &Default::default()))
        .unwrap();
    wait_until(&h, "pods collected", |s| {
        s.list("core/pods", Some("default")).is_empty()
    })
    .await;
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn deployment_status_follows_spec_replicas_after_the_delay_in_the_fast_mode() {
    // The fast mode (a departure from Kubernetes): status only, no ReplicaSets or pods.
    let h = Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .deployment_pods(false)
        .workload_delay(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}},
                         "spec": {"containers": [{"name": "main", "image": "nginx"}]}}
        }
    });
    create(&h, "apps", "deployments", "default", d);
    tokio::time::advance(Duration::from_millis(2_900)).await;
    tokio::task::yield_now().await;
    assert!(
        get(&h, "apps/deployments", "default", "api").unwrap()["status"]["readyReplicas"].is_null()
    );
    wait_until(&h, "deployment available", |s| {
        s.get("apps/deployments", "default", "api")
            .is_some_and(|d| d["status"]["availableReplicas"] == 2)
    })
    .await;
    let status = get(&h, "apps/deployments", "default", "api").unwrap()["status"].clone();
    assert_eq!(status["replicas"], 2);
    assert_eq!(status["updatedReplicas"], 2);
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["conditions"][0]["type"], "Available");
    assert_eq!(status["conditions"][0]["status"], "True");

    scale(&h, "apps", "deployments", "api", 0);
    wait_until(&h, "deployment scaled to zero", |s| {
        s.get("apps/deployments", "default", "api")
            .is_some_and(|d| d["status"]["observedGeneration"] == 2)
    })
    .await;
    let status = get(&h, "apps/deployments", "default", "api").unwrap()["status"].clone();
    assert!(
        status["replicas"].is_null(),
        "zero counts are omitted: {status}"
    );
    // No pods: deployments are simulated through their status only.
    assert!(names(&h, "core/pods", "default").is_empty());
    assert!(names(&h, "apps/replicasets", "default").is_empty());

    // ReplicaSets created directly get their status the same way.
    let rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "api-rs"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}},
                         "spec": {"containers": [{"name": "main", "image": "nginx"}]}}
        }
    });
    create(&h, "apps", "replicasets", "default", rs);
    wait_until(&h, "replicaset ready", |s| {
        s.get("apps/replicasets", "default", "api-rs")
            .is_some_and(|r| r["status"]["readyReplicas"] == 3 && r["status"]["replicas"] == 3)
    })
    .await;
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_rollout_status_and_scale() {
    let h = Cluster::builder()
        .simulate(true)
        .workload_delay(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    let out = k
        .run(&[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(out.ok, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("successfully rolled out"),
        "{}",
        out.stdout
    );

    // The server does not default built-in kinds; rollout status needs the strategy spelled out.
    let mut set = sts("cache", 1, None);
    set["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
    let manifest = serde_yaml_ng::to_string(&set).unwrap();
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(&manifest))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&["scale", "statefulset", "cache", "--replicas=3"])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run(&["rollout", "status", "statefulset/cache", "--timeout=30s"])
        .await;
    assert!(out.ok, "{} {}", out.stdout, out.stderr);
    let out = k
        .run(&[
            "wait",
            "--for=jsonpath={.status.phase}=Running",
            "pod/cache-2",
            "--timeout=30s",
        ])
        .await;
    assert!(out.ok, "{} {}", out.stdout, out.stderr);
    h.shutdown().await;
}

/// A ReplicationController keeps `spec.replicas` pods of its template (named `<rc>-<random>`,
/// controlled by it) and reports them in its status; scaling down deletes the surplus.
#[tokio::test]
async fn a_replication_controller_keeps_its_replicas_and_reports_them() {
    let h = simulated(Duration::ZERO).await;
    create(
        &h,
        "",
        "replicationcontrollers",
        "default",
        json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
               "spec": {"replicas": 3, "selector": {"app": "rc"},
                        "template": {"metadata": {"labels": {"app": "rc"}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    );
    wait_until(&h, "rc with 3 ready replicas", |s| {
        s.get("core/replicationcontrollers", "default", "rc")
            .is_some_and(|o| {
                o["status"]["readyReplicas"] == 3
                    && o["status"]["availableReplicas"] == 3
                    && o["status"]["replicas"] == 3
                    && o["status"]["fullyLabeledReplicas"] == 3
                    && o["status"]["observedGeneration"] == 1
            })
    })
    .await;
    let pods = controlled_pods(&h, "ReplicationController", "rc");
    assert_eq!(pods.len(), 3);
    for p in &pods {
        assert!(p["metadata"]["name"].as_str().unwrap().starts_with("rc-"));
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(p["metadata"]["labels"]["app"], "rc");
    }
    let mut rc = get(&h, "core/replicationcontrollers", "default", "rc").unwrap();
    rc["spec"]["replicas"] = json!(1);
    let t = target(&h, "", "v1", "replicationcontrollers", "default");
    let t = embedded_apiserver::internals::verbs::Target {
        name: Some("rc".into()),
        ..t
    };
    h.store()
        .write(|s| {
            embedded_apiserver::internals::verbs::update(
                s,
                &t,
                rc,
                &embedded_apiserver::internals::query::Query::parse(None),
            )
        })
        .unwrap();
    wait_until(&h, "rc scaled down to 1", |s| {
        s.get("core/replicationcontrollers", "default", "rc")
            .is_some_and(|o| o["status"]["replicas"] == 1 && o["status"]["observedGeneration"] == 2)
    })
    .await;
    assert_eq!(controlled_pods(&h, "ReplicationController", "rc").len(), 1);
    h.shutdown().await;
}

/// A DaemonSet runs one pod on the node and reports it in its status.
#[tokio::test]
async fn a_daemon_set_runs_one_pod_on_the_node() {
    let h = simulated(Duration::ZERO).await;
    create(
        &h,
        "apps",
        "daemonsets",
        "default",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
               "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}},
                                     "spec": {"containers": [{"name": "c", "image": "fluentd"}]}}}}),
    );
    wait_until(&h, "daemonset ready on its node", |s| {
        s.get("apps/daemonsets", "default", "agent")
            .is_some_and(|o| {
                let st = &o["status"];
                st["desiredNumberScheduled"] == 1
                    && st["currentNumberScheduled"] == 1
                    && st["numberReady"] == 1
                    && st["numberAvailable"] == 1
                    && st["updatedNumberScheduled"] == 1
                    && st["numberMisscheduled"] == 0
                    && st.get("numberUnavailable").is_none()
                    && st["observedGeneration"] == 1
            })
    })
    .await;
    let pods = controlled_pods(&h, "DaemonSet", "agent");
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0]["spec"]["nodeName"], "embedded-node");
    assert_eq!(pods[0]["status"]["phase"], "Running");
    h.shutdown().await;
}

fn cronjob_jobs(h: &ClusterHandle) -> Vec<Value> {
    h.store().read(|s| {
        s.list("batch/jobs", Some("default"))
            .into_iter()
            .filter(|j| j["metadata"]["ownerReferences"][0]["kind"] == "CronJob")
            .cloned()
            .collect()
    })
}

fn is_complete(j: &Value) -> bool {
    j["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete"))
}

/// A CronJob gets its defaults, creates a Job `<name>-<minutes>` from its template at each
/// schedule time (virtual time: the clock is paused and advanced a minute at a time), tracks
/// it in `status.active`, `lastScheduleTime` and `lastSuccessfulTime`, and keeps only
/// `successfulJobsHistoryLimit` finished Jobs.
#[tokio::test(start_paused = true)]
async fn a_cron_job_creates_a_job_each_minute_and_keeps_its_history_limit() {
    let h = simulated(Duration::ZERO).await;
    let created = create(
        &h,
        "batch",
        "cronjobs",
        "default",
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
               "spec": {"schedule": "* * * * *", "successfulJobsHistoryLimit": 2,
                        "jobTemplate": {"metadata": {"labels": {"app": "tick"}},
                                        "spec": {"template": {"spec": {"restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "busybox",
                                            "command": ["sh", "-c", "exit 0"]}]}}}}}}),
    );
    let spec = &created["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Allow");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["successfulJobsHistoryLimit"], 2);
    assert_eq!(spec["failedJobsHistoryLimit"], 1);
    assert!(cronjob_jobs(&h).is_empty());

    tokio::time::advance(Duration::from_secs(61)).await;
    wait_until(&h, "the first job", |s| {
        s.get("batch/cronjobs", "default", "tick").is_some_and(|c| {
            c["status"]["active"]
                .as_array()
                .is_some_and(|a| a.len() == 1)
        })
    })
    .await;
    let jobs = cronjob_jobs(&h);
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    let cj = get(&h, "batch/cronjobs", "default", "tick").unwrap();
    let scheduled: jiff::Timestamp = cj["status"]["lastScheduleTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        job["metadata"]["name"],
        format!("tick-{}", scheduled.as_second() / 60)
    );
    assert_eq!(job["metadata"]["labels"]["app"], "tick");
    assert_eq!(
        job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"],
        cj["status"]["lastScheduleTime"]
    );
    assert_eq!(cj["status"]["active"][0]["name"], job["metadata"]["name"]);

    // The Job runs to completion: no longer active, and the success is recorded.
    wait_until(&h, "the first job's success", |s| {
        s.get("batch/cronjobs", "default", "tick").is_some_and(|c| {
            c["status"].get("active").is_none() && c["status"]["lastSuccessfulTime"].is_string()
        })
    })
    .await;

    // Three more minutes: four jobs ran, the two latest successful ones are kept.
    for n in 2..=4 {
        let before = h.store().read(c_last);
        tokio::time::advance(Duration::from_secs(60)).await;
        wait_until(&h, &format!("job {n} complete"), |s| {
            let cj = s.get("batch/cronjobs", "default", "tick");
            let jobs: Vec<&Value> = s
                .list("batch/jobs", Some("default"))
                .into_iter()
                .filter(|j| j["metadata"]["ownerReferences"][0]["kind"] == "CronJob")
                .collect();
            c_last(s) != before
                && cj.is_some_and(|c| c["status"].get("active").is_none())
                && jobs.len() <= 2
                && jobs.iter().all(|j| is_complete(j))
        })
        .await;
    }
    // Every job ever created, oldest first (a minute the clock jumped over is skipped, as the
    // real controller starts only the most recent missed time).
    let mut created: Vec<String> = h.store().read(|s| {
        s.changes_since(1)
            .unwrap()
            .iter()
            .filter(|c| c.storage == "batch/jobs" && c.kind == ChangeType::Added)
            .map(|c| c.object["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    });
    assert!(created.len() >= 4, "{created:?}");
    assert_eq!(created[0], format!("tick-{}", scheduled.as_second() / 60));
    let mut names: Vec<String> = cronjob_jobs(&h)
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    created.sort();
    assert_eq!(names, created[created.len() - 2..]);
    h.shutdown().await;
}

fn c_last(s: &embedded_apiserver::internals::store::State) -> Value {
    s.get("batch/cronjobs", "default", "tick")
        .map(|c| c["status"]["lastScheduleTime"].clone())
        .unwrap_or(Value::Null)
}
