//! ResourceQuotas with the real kubectl: `kubectl create quota`, `status.used` kept current as
//! objects come and go (`kubectl get quota`, `kubectl describe quota`), and quota admission
//! refusing what would exceed a quota with kube's 403 messages.

use crate::support;
use crate::support::cluster;

use cluster::{Kubectl, rows};
use serde_json::{Value, json};
use support::apiserver::*;

/// `status.used` of a quota.
async fn used(api: &TestClient, ns: &str, name: &str) -> Value {
    let q = api
        .get(&format!("/api/v1/namespaces/{ns}/resourcequotas/{name}"))
        .await;
    assert_eq!(q.code, 200, "{:?}", q.body);
    q.body["status"]["used"].clone()
}

#[tokio::test]
async fn object_counts_are_kept_and_enforced() {
    let server = start().await;
    let Some(k) = Kubectl::or_skip(&server).await else {
        return;
    };
    let api = TestClient::new(&server);
    k.ok(&["create", "namespace", "qa"]).await;
    let out = k
        .ok(&[
            "-n",
            "qa",
            "create",
            "quota",
            "q1",
            "--hard=count/configmaps=2,pods=1",
        ])
        .await;
    assert!(out.contains("resourcequota/q1 created"), "{out}");
    // The namespace may hold ConfigMaps already (a root CA publisher's): count from there.
    let before = used(&api, "qa", "q1").await["count/configmaps"]
        .as_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert_eq!(used(&api, "qa", "q1").await["pods"], "0");
    for i in before..2 {
        k.ok(&["-n", "qa", "create", "configmap", &format!("c{i}")])
            .await;
    }
    assert_eq!(
        used(&api, "qa", "q1").await,
        json!({"count/configmaps": "2", "pods": "0"})
    );
    let out = k.run(&["-n", "qa", "create", "configmap", "over"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "configmaps \"over\" is forbidden: exceeded quota: q1, requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2"
        ),
        "{}",
        out.stderr
    );
    let out = k.ok(&["-n", "qa", "get", "quota"]).await;
    let table = rows(&out);
    assert_eq!(table[0], ["NAME", "AGE", "REQUEST", "LIMIT"], "{out}");
    assert_eq!(table[1][0], "q1", "{out}");
    assert_eq!(
        table[1][2..],
        ["count/configmaps:", "2/2,", "pods:", "0/1"],
        "{out}"
    );

    // Pods: the first fits, the second is refused.
    k.ok(&[
        "-n",
        "qa",
        "run",
        "p1",
        "--image=busybox",
        "--restart=Never",
    ])
    .await;
    let out = k
        .run(&[
            "-n",
            "qa",
            "run",
            "p2",
            "--image=busybox",
            "--restart=Never",
        ])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "pods \"p2\" is forbidden: exceeded quota: q1, requested: pods=1, used: pods=1, limited: pods=1"
        ),
        "{}",
        out.stderr
    );
    let out = k.ok(&["-n", "qa", "describe", "quota", "q1"]).await;
    let described = rows(&out);
    assert!(
        described.contains(&vec!["count/configmaps".into(), "2".into(), "2".into()]),
        "{out}"
    );
    assert!(
        described.contains(&vec!["pods".into(), "1".into(), "1".into()]),
        "{out}"
    );

    // Usage follows deletions: room again for a ConfigMap and a pod.
    k.ok(&["-n", "qa", "delete", "configmap", "c1"]).await;
    k.ok(&[
        "-n",
        "qa",
        "delete",
        "pod",
        "p1",
        "--grace-period=0",
        "--force",
    ])
    .await;
    // A DELETE with grace period 0 removes the pod at once, and the quota follows.
    assert_eq!(used(&api, "qa", "q1").await["pods"], "0");
    assert_eq!(used(&api, "qa", "q1").await["count/configmaps"], "1");
    k.ok(&["-n", "qa", "create", "configmap", "again"]).await;
    k.ok(&[
        "-n",
        "qa",
        "run",
        "p3",
        "--image=busybox",
        "--restart=Never",
    ])
    .await;

    // Raising the hard limit (a spec update) updates status.hard at once.
    k.ok(&[
        "-n",
        "qa",
        "patch",
        "quota",
        "q1",
        "--type=merge",
        "-p",
        r#"{"spec":{"hard":{"count/configmaps":"3"}}}"#,
    ])
    .await;
    let q = api.get("/api/v1/namespaces/qa/resourcequotas/q1").await;
    assert_eq!(q.body["status"]["hard"]["count/configmaps"], "3");
    k.ok(&["-n", "qa", "create", "configmap", "third"]).await;

    // Any resource by `count/<resource>.<group>`.
    k.ok(&[
        "-n",
        "qa",
        "create",
        "quota",
        "deploys",
        "--hard=count/deployments.apps=0",
    ])
    .await;
    let out = k
        .run(&["-n", "qa", "create", "deployment", "web", "--image=nginx"])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "deployments.apps \"web\" is forbidden: exceeded quota: deploys, requested: count/deployments.apps=1, used: count/deployments.apps=0, limited: count/deployments.apps=0"
        ),
        "{}",
        out.stderr
    );

    // Invalid quotas are refused.
    let out = k
        .run(&["-n", "qa", "create", "quota", "bad", "--hard=bananas=1"])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "spec.hard[bananas]: Invalid value: \"bananas\": must be a standard resource for quota"
        ),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn compute_quotas_sum_requests_and_need_them() {
    let server = start().await;
    let Some(k) = Kubectl::or_skip(&server).await else {
        return;
    };
    let api = TestClient::new(&server);
    k.ok(&["create", "namespace", "qb"]).await;
    k.ok(&[
        "-n",
        "qb",
        "create",
        "quota",
        "compute",
        "--hard=requests.cpu=1,requests.memory=1Gi,limits.memory=2Gi",
    ])
    .await;
    assert_eq!(
        used(&api, "qb", "compute").await,
        json!({"limits.memory": "0", "requests.cpu": "0", "requests.memory": "0"})
    );

    // A pod without requests is refused.
    let out = k
        .run(&[
            "-n",
            "qb",
            "run",
            "bare",
            "--image=busybox",
            "--restart=Never",
        ])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "pods \"bare\" is forbidden: failed quota: compute: must specify limits.memory for: bare; requests.cpu for: bare; requests.memory for: bare"
        ),
        "{}",
        out.stderr
    );

    let pod = |name: &str, cpu: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"},
                              "limits": {"memory": "512Mi"}}}]}})
        .to_string()
    };
    let out = k
        .run_with_input(&["-n", "qb", "create", "-f", "-"], Some(&pod("a", "500m")))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run_with_input(&["-n", "qb", "create", "-f", "-"], Some(&pod("b", "250m")))
        .await;
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(
        used(&api, "qb", "compute").await,
        json!({"limits.memory": "1Gi", "requests.cpu": "750m", "requests.memory": "512Mi"})
    );
    let out = k
        .run_with_input(&["-n", "qb", "create", "-f", "-"], Some(&pod("c", "300m")))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "pods \"c\" is forbidden: exceeded quota: compute, requested: requests.cpu=300m, used: requests.cpu=750m, limited: requests.cpu=1"
        ),
        "{}",
        out.stderr
    );
    let out = k
        .ok(&["-n", "qb", "get", "quota", "compute", "--no-headers"])
        .await;
    let row = &rows(&out)[0];
    assert_eq!(
        row[2..],
        [
            "requests.cpu:",
            "750m/1,",
            "requests.memory:",
            "512Mi/1Gi",
            "limits.memory:",
            "1Gi/2Gi"
        ],
        "{out}"
    );
}
