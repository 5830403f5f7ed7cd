//! networking.k8s.io/v1 with the real kubectl: Ingresses (`kubectl create ingress`, a protobuf
//! body), IngressClasses and NetworkPolicies (`kubectl create -f`), their printer columns,
//! defaults, discovery, and kube's validation messages for invalid ones.

use crate::support;
use crate::support::cluster;

use cluster::{Kubectl, rows};
use serde_json::json;
use support::apiserver::*;

#[tokio::test]
async fn ingresses_classes_and_network_policies_with_kubectl() {
    let server = start().await;
    let Some(k) = Kubectl::or_skip(&server).await else {
        return;
    };
    let api = TestClient::new(&server);

    let resources = k
        .ok(&[
            "api-resources",
            "--api-group=networking.k8s.io",
            "--no-headers",
        ])
        .await;
    let listed: Vec<Vec<String>> = rows(&resources);
    assert!(
        listed.contains(&vec![
            "ingressclasses".into(),
            "networking.k8s.io/v1".into(),
            "false".into(),
            "IngressClass".into()
        ]),
        "{resources}"
    );
    assert!(
        listed.contains(&vec![
            "ingresses".into(),
            "ing".into(),
            "networking.k8s.io/v1".into(),
            "true".into(),
            "Ingress".into()
        ]),
        "{resources}"
    );
    assert!(
        listed.contains(&vec![
            "networkpolicies".into(),
            "netpol".into(),
            "networking.k8s.io/v1".into(),
            "true".into(),
            "NetworkPolicy".into()
        ]),
        "{resources}"
    );

    // `kubectl create ingress` (a protobuf body from kubectl 1.32 on).
    let out = k
        .ok(&[
            "create",
            "ingress",
            "web",
            "--class=nginx",
            "--rule=foo.com/bar*=svc1:8080,tls=my-cert",
            "--rule=bar.com/=svc2:http",
        ])
        .await;
    assert!(
        out.contains("ingress.networking.k8s.io/web created"),
        "{out}"
    );
    let stored = api
        .get("/apis/networking.k8s.io/v1/namespaces/default/ingresses/web")
        .await;
    assert_eq!(stored.code, 200, "{:?}", stored.body);
    let ing = &stored.body;
    assert_eq!(ing["metadata"]["generation"], 1);
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");
    assert_eq!(
        ing["spec"]["rules"][0]["http"]["paths"][0],
        json!({"path": "/bar", "pathType": "Prefix",
               "backend": {"service": {"name": "svc1", "port": {"number": 8080}}}})
    );
    assert_eq!(
        ing["spec"]["rules"][1]["http"]["paths"][0]["backend"]["service"]["port"],
        json!({"name": "http"})
    );
    assert_eq!(ing["spec"]["tls"][0]["secretName"], "my-cert");

    let out = k.ok(&["get", "ingress"]).await;
    let table = rows(&out);
    assert_eq!(
        table[0],
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
        "{out}"
    );
    assert_eq!(
        table[1][..5],
        ["web", "nginx", "foo.com,bar.com", "80,", "443"],
        "{out}"
    );

    // The status subresource: the main endpoint keeps it, `/status` writes it, the ADDRESS
    // column shows it.
    let mut with_status = ing.clone();
    with_status["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.7"}]}});
    let put = api
        .put(
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses/web/status",
            &with_status,
        )
        .await;
    assert_eq!(put.code, 200, "{:?}", put.body);
    let out = k.ok(&["get", "ing", "web", "--no-headers"]).await;
    assert_eq!(
        rows(&out)[0][..4],
        ["web", "nginx", "foo.com,bar.com", "10.0.0.7"],
        "{out}"
    );

    // Invalid ingresses are refused with kube's messages.
    let out = k
        .run(&["create", "ingress", "bad", "--rule=foo.com/=svc:0"])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("port name or number is required")
            || out.stderr.contains("must be between 1 and 65535"),
        "{}",
        out.stderr
    );
    let no_backend = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "empty"}, "spec": {}});
    let out = k
        .run_with_input(&["create", "-f", "-"], Some(&no_backend.to_string()))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "The Ingress \"empty\" is invalid: spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
        ),
        "{}",
        out.stderr
    );
    let no_path_type = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
    "metadata": {"name": "nopt"}, "spec": {"rules": [{"http": {"paths": [
        {"path": "foo", "backend": {"service": {"name": "svc", "port": {"number": 80}}}},
        {"path": "foo", "pathType": "Exact", "backend": {"service": {"name": "svc", "port": {"name": "http", "number": 80}}}}
    ]}}]}});
    let out = k
        .run_with_input(&["create", "-f", "-"], Some(&no_path_type.to_string()))
        .await;
    assert!(!out.ok);
    for expected in [
        "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
        "spec.rules[0].http.paths[1].path: Invalid value: \"foo\": must be an absolute path",
        "spec.rules[0].http.paths[1].backend: Invalid value: \"\": cannot set both port name & port number",
    ] {
        assert!(out.stderr.contains(expected), "{expected}\n{}", out.stderr);
    }

    // An IngressClass and a NetworkPolicy from manifests.
    let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "nginx"},
        "spec": {"controller": "k8s.io/ingress-nginx",
                 "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}});
    k.run_with_input(&["create", "-f", "-"], Some(&class.to_string()))
        .await;
    let stored = api
        .get("/apis/networking.k8s.io/v1/ingressclasses/nginx")
        .await;
    assert_eq!(stored.code, 200, "{:?}", stored.body);
    assert_eq!(stored.body["spec"]["parameters"]["scope"], "Cluster");
    let out = k.ok(&["get", "ingressclass"]).await;
    let table = rows(&out);
    assert_eq!(
        table[0],
        ["NAME", "CONTROLLER", "PARAMETERS", "AGE"],
        "{out}"
    );
    assert_eq!(
        table[1][..3],
        [
            "nginx",
            "k8s.io/ingress-nginx",
            "IngressParameters.k8s.example.com/external-lb"
        ],
        "{out}"
    );
    let no_controller = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "none"}, "spec": {}});
    let out = k
        .run_with_input(&["create", "-f", "-"], Some(&no_controller.to_string()))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("The IngressClass \"none\" is invalid: spec.controller: Required value"),
        "{}",
        out.stderr
    );

    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "db"},
        "spec": {"podSelector": {"matchLabels": {"role": "db"}},
                 "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                                        {"podSelector": {"matchLabels": {"role": "frontend"}}}],
                              "ports": [{"port": 6379}]}],
                 "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "UDP", "port": 53}]}]}});
    let out = k
        .run_with_input(&["create", "-f", "-"], Some(&policy.to_string()))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let stored = api
        .get("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/db")
        .await;
    assert_eq!(
        stored.body["spec"]["policyTypes"],
        json!(["Ingress", "Egress"])
    );
    assert_eq!(
        stored.body["spec"]["ingress"][0]["ports"][0],
        json!({"port": 6379, "protocol": "TCP"})
    );
    let out = k.ok(&["get", "networkpolicy"]).await;
    let table = rows(&out);
    assert_eq!(table[0], ["NAME", "POD-SELECTOR", "AGE"], "{out}");
    assert_eq!(table[1][..2], ["db", "role=db"], "{out}");
    let bad_types = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "bad"}, "spec": {"podSelector": {}, "policyTypes": ["Sideways"]}});
    let out = k
        .run_with_input(&["create", "-f", "-"], Some(&bad_types.to_string()))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
        ),
        "{}",
        out.stderr
    );
}
