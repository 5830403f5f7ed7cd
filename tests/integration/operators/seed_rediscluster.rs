//! Seed 000, the RedisCluster operator guide, verified as the guide verifies it: its
//! `example-rediscluster` (size 3) applied with kubectl, then the guide's own commands
//! ("Verifying Operator Functionality"), each checked for what the guide says it shows:
//!
//! ```text
//! kubectl apply -f rediscluster.yaml
//! kubectl get rediscluster example-rediscluster -o yaml
//! kubectl get statefulsets,svc -l control-plane=redis-operator
//! kubectl patch rediscluster example-rediscluster -p '{"spec":{"size":5}}' --type=merge
//! kubectl get statefulset example-rediscluster
//! kubectl describe rediscluster example-rediscluster      (an error: Warning ReconciliationFailed)
//! kubectl delete rediscluster example-rediscluster        (the finalizer cleans up first)
//! ```
//!
//! and the operator Deployment's resources (cpu 100m / memory 30Mi, requested and limited).

use crate::support::seeds::{Walkthrough, row, row_of};

use embedded_apiserver::faults::Fault;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use sample_client_go::client::{Api, Client, ListParams};
use sample_controller_runtime::controller::{Clock, REASON_RECONCILIATION_FAILED};
use sample_operators::apis::RedisCluster;
use sample_operators::controllers::rediscluster::{LABEL_CLUSTER, reason};

const NAME: &str = "example-rediscluster";
const NS: &str = "default";

/// The StatefulSet has `n` replicas, all ready, and the RedisCluster reports the `n` nodes.
async fn converged(client: &Client, n: i32) -> bool {
    let sts = Api::<StatefulSet>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get StatefulSet");
    let sts_ready = sts.is_some_and(|s| {
        s.spec.as_ref().and_then(|s| s.replicas) == Some(n)
            && s.status.as_ref().and_then(|s| s.ready_replicas) == Some(n)
    });
    let cluster = Api::<RedisCluster>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get RedisCluster");
    let want: Vec<String> = (0..n).map(|i| format!("{NAME}-{i}")).collect();
    sts_ready
        && cluster
            .and_then(|c| c.status)
            .is_some_and(|s| s.nodes == want)
}

async fn cluster_pods(client: &Client) -> usize {
    let params = ListParams {
        label_selector: Some(format!("{LABEL_CLUSTER}={NAME}")),
        ..ListParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), NS)
        .list(&params)
        .await
        .expect("list pods")
        .items
        .len()
}

#[tokio::test]
async fn the_guide_s_verification_commands_show_what_the_guide_says() {
    let Some(w) = Walkthrough::start("seed 000 (RedisCluster)").await else {
        return;
    };
    let manager = w.manager("rediscluster", Clock::new()).await;
    let client = w.client.clone();

    // Deploy a Custom Resource.
    let out = w
        .kubectl(&["apply", "-f", "artifacts/examples/rediscluster.yaml"])
        .await;
    assert!(
        out.contains("rediscluster.cache.example.com/example-rediscluster created"),
        "{out}"
    );
    w.wait("3 Redis nodes ready", || converged(&client, 3))
        .await;

    // Check Custom Resource Status.
    let yaml = w
        .kubectl(&["get", "rediscluster", NAME, "-o", "yaml"])
        .await;
    for line in [
        "name: example-rediscluster",
        "size: 3",
        "- example-rediscluster-0",
        "- example-rediscluster-2",
        "readyReplicas: 3",
        "cache.example.com/finalizer",
    ] {
        assert!(yaml.contains(line), "missing {line:?} in:\n{yaml}");
    }

    // Check Created Resources: the StatefulSet and the Service, by the guide's label.
    let out = w
        .kubectl(&[
            "get",
            "statefulsets,svc",
            "-l",
            "control-plane=redis-operator",
        ])
        .await;
    let sts = row_of(&out, "statefulset.apps/example-rediscluster")
        .unwrap_or_else(|| panic!("no StatefulSet in:\n{out}"));
    assert_eq!(sts[1], "3/3", "{out}");
    let svc = row_of(&out, "service/example-rediscluster")
        .unwrap_or_else(|| panic!("no Service in:\n{out}"));
    assert_eq!(svc[1], "ClusterIP", "{out}");
    assert_eq!(svc[2], "None", "headless: {out}");
    assert!(svc[4].starts_with("6379/"), "{out}");
    assert_eq!(
        out.lines().count(),
        5,
        "two headers, two rows, a blank line:\n{out}"
    );

    // Check Resource Scaling.
    let out = w
        .kubectl(&[
            "patch",
            "rediscluster",
            NAME,
            "-p",
            r#"{"spec":{"size":5}}"#,
            "--type=merge",
        ])
        .await;
    assert!(out.contains("patched"), "{out}");
    w.wait("5 Redis nodes ready", || converged(&client, 5))
        .await;
    let out = w.kubectl(&["get", "statefulset", NAME]).await;
    assert_eq!(row(&out)[..2], [NAME, "5/5"], "{out}");
    let scaled = w.event(NS, NAME, reason::SCALED).await;
    assert_eq!(scaled.type_.as_deref(), Some("Normal"));

    // Check Error Handling: writes of StatefulSets fail (as they would for an operator whose
    // RBAC was misconfigured), the scaling to 4 cannot be done, and `describe` says why.
    w.server.faults().inject(Fault {
        count: None,
        ..Fault::fail(500).verb("update").resource("statefulsets")
    });
    w.kubectl(&[
        "patch",
        "rediscluster",
        NAME,
        "-p",
        r#"{"spec":{"size":4}}"#,
        "--type=merge",
    ])
    .await;
    let failed = w.event(NS, NAME, REASON_RECONCILIATION_FAILED).await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.involved_object.kind.as_deref(), Some("RedisCluster"));
    let message = failed.message.unwrap_or_default();
    assert!(message.contains("updating the StatefulSet"), "{message}");
    let out = w.kubectl(&["describe", "rediscluster", NAME]).await;
    let events = out
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section in:\n{out}"));
    let warning = events
        .lines()
        .find(|l| l.contains("ReconciliationFailed"))
        .unwrap_or_else(|| panic!("no ReconciliationFailed event in:\n{out}"));
    assert!(
        warning.trim_start().starts_with("Warning") && warning.contains("rediscluster-controller"),
        "{warning}"
    );
    for normal in ["Created", "Scaled"] {
        assert!(events.contains(normal), "no {normal} event in:\n{out}");
    }
    // The operator recovers once the cause is gone.
    w.server.faults().clear();
    w.wait("4 Redis nodes ready", || converged(&client, 4))
        .await;

    // Check Cleanup: kubectl waits for the finalizer, which deletes the StatefulSet, the
    // Service and every pod before letting the object go.
    let out = w.kubectl(&["delete", "rediscluster", NAME]).await;
    assert!(
        out.contains(r#"rediscluster.cache.example.com "example-rediscluster" deleted"#),
        "{out}"
    );
    let gone = Api::<RedisCluster>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get RedisCluster");
    assert!(gone.is_none(), "kubectl delete waited for the finalizer");
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), NS)
            .get_opt(NAME)
            .await
            .expect("get StatefulSet")
            .is_none()
    );
    assert!(
        Api::<Service>::namespaced(client.clone(), NS)
            .get_opt(NAME)
            .await
            .expect("get Service")
            .is_none()
    );
    assert_eq!(cluster_pods(&client).await, 0);
    let out = w
        .kubectl_all(&[
            "get",
            "statefulsets,svc",
            "-l",
            "control-plane=redis-operator",
        ])
        .await;
    assert!(out.contains("No resources found"), "{out}");
    let cleaned = w.event(NS, NAME, reason::CLEANED_UP).await;
    assert_eq!(cleaned.type_.as_deref(), Some("Normal"));

    manager.stop().await.expect("the manager stops cleanly");
    w.shutdown().await;
}

/// The guide's operator Deployment requests and limits cpu 100m and memory 30Mi; so does this
/// project's (`artifacts/deploy/base/deployment.yaml`).
#[test]
fn the_operator_deployment_requests_and_limits_the_guide_s_resources() {
    let path = crate::support::cluster::repo().join("artifacts/deploy/base/deployment.yaml");
    let text = std::fs::read_to_string(&path).expect("the deployment manifest");
    let deployment: Deployment = serde_yaml_ng::from_str(&text).expect("a Deployment");
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .expect("a pod template");
    let resources = pod.containers[0].resources.clone().expect("resources");
    for (what, list) in [
        ("requests", resources.requests),
        ("limits", resources.limits),
    ] {
        let list = list.unwrap_or_else(|| panic!("no {what}"));
        let get = |k: &str| list.get(k).map(|q| q.0.as_str());
        assert_eq!(get("cpu"), Some("100m"), "{what}");
        assert_eq!(get("memory"), Some("30Mi"), "{what}");
    }
}
