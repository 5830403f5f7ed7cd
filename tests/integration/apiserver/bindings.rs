//! Binding and eviction in discovery (issue 52): `/api/v1` lists the create-only resource
//! `bindings` and the subresources `pods/binding` (kind Binding) and `pods/eviction` (kind
//! `policy/v1` Eviction) exactly as kube-apiserver does, in the legacy and the aggregated
//! documents, and `kubectl api-resources` shows `bindings`. `POST
//! /api/v1/namespaces/NS/bindings` binds the pod the Binding names, as `pods/NAME/binding`
//! does; other methods are `405`.

use crate::support;
use crate::support::cluster;

use cluster::Kubectl;
use serde_json::{Value, json};
use support::apiserver::*;

const PODS: &str = "/api/v1/namespaces/default/pods";
const BINDINGS: &str = "/api/v1/namespaces/default/bindings";

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
}

fn binding(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
           "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
}

#[tokio::test]
async fn api_v1_lists_bindings_and_the_pod_actions_as_kube_apiserver_does() {
    let s = start().await;
    let c = TestClient::new(&s);
    let core = c.get("/api/v1").await;
    assert_eq!(core.code, 200);
    let resources = core.body["resources"].as_array().unwrap();
    let by = |n: &str| resources.iter().find(|r| r["name"] == n).cloned();
    assert_eq!(
        by("bindings"),
        Some(
            json!({"name": "bindings", "singularName": "binding", "namespaced": true,
                    "kind": "Binding", "verbs": ["create"]})
        )
    );
    assert_eq!(
        by("pods/binding"),
        Some(
            json!({"name": "pods/binding", "singularName": "", "namespaced": true,
                    "kind": "Binding", "verbs": ["create"]})
        )
    );
    assert_eq!(
        by("pods/eviction"),
        Some(
            json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                    "group": "policy", "version": "v1", "kind": "Eviction",
                    "verbs": ["create"]})
        )
    );
    assert_eq!(
        by("serviceaccounts/token"),
        Some(
            json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                    "group": "authentication.k8s.io", "version": "v1",
                    "kind": "TokenRequest", "verbs": ["create"]})
        )
    );

    // The aggregated document for /api says the same.
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let agg = c.send("GET", "/api", &[("accept", accept)], None).await;
    assert_eq!(agg.code, 200);
    assert_eq!(agg.body["kind"], "APIGroupDiscoveryList");
    let v1 = agg.body["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .clone();
    let bindings = v1.iter().find(|r| r["resource"] == "bindings").unwrap();
    assert_eq!(bindings["scope"], "Namespaced");
    assert_eq!(bindings["singularResource"], "binding");
    assert_eq!(bindings["responseKind"]["kind"], "Binding");
    assert_eq!(bindings["verbs"], json!(["create"]));
    assert!(bindings.get("subresources").is_none());
    let pods = v1.iter().find(|r| r["resource"] == "pods").unwrap();
    let subs = pods["subresources"].as_array().unwrap();
    let sub = |n: &str| {
        subs.iter()
            .find(|s| s["subresource"] == n)
            .unwrap_or_else(|| panic!("pods/{n} in {subs:?}"))
    };
    assert_eq!(sub("binding")["responseKind"]["kind"], "Binding");
    assert_eq!(sub("binding")["verbs"], json!(["create"]));
    assert_eq!(
        sub("eviction")["responseKind"],
        json!({"group": "policy", "version": "v1", "kind": "Eviction"})
    );
    assert_eq!(sub("eviction")["verbs"], json!(["create"]));

    // kubectl finds `bindings` among the core resources.
    if let Some(k) = Kubectl::new(&s) {
        let out = k
            .ok(&["api-resources", "--api-group=", "--no-headers"])
            .await;
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(
            rows.contains(&vec!["bindings", "v1", "true", "Binding"]),
            "{out}"
        );
        let wide = k
            .ok(&[
                "api-resources",
                "--api-group=",
                "--verbs=create",
                "-o",
                "name",
            ])
            .await;
        assert!(wide.lines().any(|l| l == "bindings"), "{wide}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn posting_to_bindings_binds_the_named_pod_like_pods_binding() {
    let s = start().await;
    let c = TestClient::new(&s);
    for name in ["a", "b"] {
        assert_eq!(c.post(PODS, &pod(name)).await.code, 201);
    }

    let bound = c.post(BINDINGS, &binding("a", "node-1")).await;
    assert_eq!(bound.code, 201, "{:?}", bound.body);
    assert_eq!(bound.body["kind"], "Status");
    assert_eq!(bound.body["status"], "Success");
    let a = c.get(&format!("{PODS}/a")).await.body;
    assert_eq!(a["spec"]["nodeName"], "node-1");
    let scheduled = a["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
        .unwrap();
    assert_eq!(scheduled["status"], "True");

    // The same rules as pods/NAME/binding: a bound pod is not bound again.
    let again = c.post(BINDINGS, &binding("a", "node-2")).await;
    assert_eq!(again.code, 409, "{:?}", again.body);
    assert!(
        again.body["message"]
            .as_str()
            .unwrap()
            .contains("already assigned to node \"node-1\""),
        "{:?}",
        again.body
    );
    let missing = c.post(BINDINGS, &binding("nope", "node-1")).await;
    assert_eq!(missing.code, 404);
    let nameless = c
        .post(
            BINDINGS,
            &json!({"apiVersion": "v1", "kind": "Binding", "target": {"name": "node-1"}}),
        )
        .await;
    assert_eq!(nameless.code, 400);

    // pods/NAME/binding checks that the Binding names the pod of the URL.
    let mismatch = c
        .post(&format!("{PODS}/b/binding"), &binding("a", "node-1"))
        .await;
    assert_eq!(mismatch.code, 400);
    assert_eq!(
        mismatch.body["message"],
        "name in URL does not match name in Binding object"
    );
    let b = c
        .post(&format!("{PODS}/b/binding"), &binding("b", "node-1"))
        .await;
    assert_eq!(b.code, 201, "{:?}", b.body);

    // Only create: listing or reading bindings is not allowed.
    let list = c.get(BINDINGS).await;
    assert_eq!(list.code, 405, "{:?}", list.body);
    assert_eq!(list.body["reason"], "MethodNotAllowed");
    assert_eq!(c.delete(BINDINGS, None).await.code, 405);
    s.shutdown().await;
}

#[tokio::test]
async fn kubectl_create_of_a_binding_binds_the_pod() {
    let s = start().await;
    let Some(k) = Kubectl::new(&s) else {
        s.shutdown().await;
        return;
    };
    let c = TestClient::new(&s);
    assert_eq!(c.post(PODS, &pod("web")).await.code, 201);
    let manifest = serde_json::to_string(&binding("web", "node-1")).unwrap();
    let out = k
        .run_with_input(&["create", "-n", "default", "-f", "-"], Some(&manifest))
        .await;
    assert!(out.ok, "stdout: {}\nstderr: {}", out.stdout, out.stderr);
    let web = c.get(&format!("{PODS}/web")).await.body;
    assert_eq!(web["spec"]["nodeName"], "node-1");
    s.shutdown().await;
}
