//! The controller manager reaches the API server only through its loopback interface, as
//! `system:kube-controller-manager`: with RBAC enforced every controller still does its work
//! (its ClusterRoleBinding grants it), and without that binding it can do nothing.

use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

const BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";
const KCM: &str = "system:kube-controller-manager";

async fn rbac_cluster(simulate: bool) -> ClusterHandle {
    Cluster::builder()
        .apiserver(|b| b.enforce_rbac(true))
        .simulate(simulate)
        .root_ca_publisher(true)
        .workload_delay(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

fn pod_template(app: &str, restart: &str, command: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
           "spec": {"restartPolicy": restart,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sh", "-c", command]}]}})
}

fn status_is(
    s: &embedded_apiserver::internals::store::State,
    storage: &str,
    name: &str,
    f: &str,
    v: i64,
) -> bool {
    s.get(storage, "default", name)
        .is_some_and(|o| o["status"][f] == v)
}

#[tokio::test(start_paused = true)]
async fn every_controller_works_with_rbac_enforced() {
    let h = rbac_cluster(true).await;

    // serviceaccount-controller and root-ca-certificate-publisher-controller.
    create(
        &h,
        "",
        "namespaces",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "team"}}),
    );
    wait_until(
        &h,
        "team's default ServiceAccount and kube-root-ca.crt",
        |s| {
            s.get("core/serviceaccounts", "team", "default").is_some()
                && s.get("core/configmaps", "team", "kube-root-ca.crt")
                    .is_some_and(|c| {
                        c["data"]["ca.crt"]
                            .as_str()
                            .is_some_and(|ca| ca.contains("CERTIFICATE"))
                    })
        },
    )
    .await;

    // garbage-collector-controller.
    let owner = create(
        &h,
        "",
        "configmaps",
        "default",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
    );
    create(
        &h,
        "",
        "configmaps",
        "default",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dep", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "owner", "uid": owner["metadata"]["uid"]}]}}),
    );
    let mut t = target(&h, "", "v1", "configmaps", "default");
    t.name = Some("owner".into());
    h.store()
        .write(|s| embedded_apiserver::internals::verbs::delete_one(s, &t, &Default::default()))
        .unwrap();
    wait_until(&h, "the dependent collected", |s| {
        s.get("core/configmaps", "default", "dep").is_none()
    })
    .await;

    // The workload controllers.
    create(
        &h,
        "batch",
        "jobs",
        "default",
        json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"template": pod_template("once", "Never", "exit 0")}}),
    );
    create(
        &h,
        "batch",
        "cronjobs",
        "default",
        json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * *",
                 "jobTemplate": {"spec": {"template": pod_template("tick", "Never", "exit 0")}}}}),
    );
    create(
        &h,
        "apps",
        "statefulsets",
        "default",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "template": pod_template("web", "Always", "sleep 3600")}}),
    );
    create(
        &h,
        "",
        "replicationcontrollers",
        "default",
        json!({"apiVersion": "v1",
        "kind": "ReplicationController", "metadata": {"name": "rc"},
        "spec": {"replicas": 2, "selector": {"app": "rc"},
                 "template": pod_template("rc", "Always", "sleep 3600")}}),
    );
    create(
        &h,
        "apps",
        "daemonsets",
        "default",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": pod_template("agent", "Always", "sleep 3600")}}),
    );
    wait_until(&h, "the Job complete", |s| {
        s.get("batch/jobs", "default", "once").is_some_and(|j| {
            j["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete"))
        })
    })
    .await;
    wait_until(&h, "the StatefulSet ready", |s| {
        status_is(s, "apps/statefulsets", "web", "readyReplicas", 2)
    })
    .await;
    wait_until(&h, "the ReplicationController ready", |s| {
        status_is(s, "core/replicationcontrollers", "rc", "readyReplicas", 2)
    })
    .await;
    wait_until(&h, "the DaemonSet ready", |s| {
        status_is(s, "apps/daemonsets", "agent", "numberReady", 1)
    })
    .await;
    // The schedule falls due at the next minute (virtual time).
    tokio::time::sleep(Duration::from_secs(61)).await;
    wait_until(&h, "the CronJob's first Job", |s| {
        s.get("batch/cronjobs", "default", "tick")
            .is_some_and(|c| c["status"]["lastScheduleTime"].is_string())
    })
    .await;
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_its_binding_the_controller_manager_is_forbidden() {
    let h = rbac_cluster(false).await;
    wait_until(&h, "default's ServiceAccount", |s| {
        s.get("core/serviceaccounts", "default", "default")
            .is_some()
    })
    .await;
    let binding = get(&h, BINDINGS, "", KCM).expect("the bootstrap binding");
    h.store().write(|s| s.delete(BINDINGS, "", KCM));

    create(
        &h,
        "",
        "namespaces",
        "",
        json!({"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "locked"}}),
    );
    // A minute of virtual time: the controller has retried its forbidden create many times.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(get(&h, "core/serviceaccounts", "locked", "default").is_none());
    assert!(get(&h, "core/configmaps", "locked", "kube-root-ca.crt").is_none());

    let mut restored = binding;
    for f in ["resourceVersion", "uid", "creationTimestamp"] {
        restored["metadata"].as_object_mut().unwrap().remove(f);
    }
    h.store().write(|s| s.create(BINDINGS, restored));
    wait_until(
        &h,
        "locked's ServiceAccount once the binding is back",
        |s| {
            s.get("core/serviceaccounts", "locked", "default").is_some()
                && s.get("core/configmaps", "locked", "kube-root-ca.crt")
                    .is_some()
        },
    )
    .await;
    h.shutdown().await;
}
