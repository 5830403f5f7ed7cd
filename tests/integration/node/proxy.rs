//! The node proxy, `/api/v1/nodes/NAME/proxy/PATH`: the API server hands the request to the
//! node's kubelet, which answers `/healthz` and `/pods` (and `/configz`); RBAC checks
//! `nodes/proxy` with the verb of the HTTP method, as kube-apiserver does.

use crate::support::cluster;

use cluster::*;
use embedded_cluster::node::NODE_NAME;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

async fn server() -> ClusterHandle {
    Cluster::builder()
        .simulate(true)
        .enforce_rbac(true)
        .extra_token("reader-token", "reader")
        .start()
        .await
        .unwrap()
}

fn proxy(path: &str) -> String {
    format!("/api/v1/nodes/{NODE_NAME}/proxy/{path}")
}

#[tokio::test]
async fn kubectl_reads_the_kubelets_healthz_pods_and_configz_through_the_node_proxy() {
    let h = server().await;
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    create(
        &h,
        "",
        "pods",
        "default",
        pod("web", json!(["sleep", "3600"]), None),
    );
    wait_phase(&h, "default", "web", "Running").await;

    assert_eq!(k.ok(&["get", "--raw", &proxy("healthz")]).await, "ok");

    let list: Value = serde_json::from_str(&k.ok(&["get", "--raw", &proxy("pods")]).await).unwrap();
    assert_eq!(list["kind"], "PodList");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["metadata"]["name"], "web");
    assert_eq!(items[0]["spec"]["nodeName"], NODE_NAME);
    assert_eq!(items[0]["status"]["phase"], "Running");

    let config: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", &proxy("configz")]).await).unwrap();
    assert_eq!(config["kubeletconfig"]["kind"], "KubeletConfiguration");
    assert_eq!(config["kubeletconfig"]["maxPods"], 110);

    // A path the kubelet does not serve, and a node that does not exist.
    let out = k.run(&["get", "--raw", &proxy("nothing-here")]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("NotFound") || out.stderr.contains("404"),
        "{}",
        out.stderr
    );
    let out = k
        .run(&["get", "--raw", "/api/v1/nodes/no-such-node/proxy/healthz"])
        .await;
    assert!(!out.ok);
    assert!(out.stderr.contains("not found"), "{}", out.stderr);
    h.shutdown().await;
}

#[tokio::test]
async fn the_node_proxy_needs_get_or_create_on_nodes_proxy_by_the_http_method() {
    let h = server().await;
    let Some(reader) = Kubectl::with_token(&h, "reader-token") else {
        return;
    };
    wait_until(&h, "the node registered", |s| {
        s.get("core/nodes", "", NODE_NAME).is_some()
    })
    .await;
    let out = reader.run(&["get", "--raw", &proxy("healthz")]).await;
    assert!(!out.ok);
    assert!(out.stderr.contains("forbidden"), "{}", out.stderr);
    assert!(out.stderr.contains("nodes/proxy"), "{}", out.stderr);

    h.load_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-proxy-get}
rules: [{apiGroups: [""], resources: ["nodes/proxy"], verbs: ["get"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: node-proxy-get}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-proxy-get}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: reader}]
"#,
    )
    .unwrap();
    assert_eq!(reader.ok(&["get", "--raw", &proxy("healthz")]).await, "ok");
    // POST is `create` on nodes/proxy, which `get` does not grant.
    let out = reader
        .run_with_input(
            &["create", "--raw", &proxy("healthz"), "-f", "-"],
            Some("{}"),
        )
        .await;
    assert!(!out.ok);
    assert!(out.stderr.contains("forbidden"), "{}", out.stderr);
    assert!(out.stderr.contains("create"), "{}", out.stderr);
    h.shutdown().await;
}
