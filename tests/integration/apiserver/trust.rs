//! What the embedded API server refuses, as a real one does: invalid metadata and specs (422
//! with field causes), unknown and duplicate fields under `fieldValidation`, bad `dryRun` and
//! `fieldValidation` values, unusable Content-Types (415), and RBAC privilege escalation
//! (a user cannot grant, bind or impersonate its way to rights it does not hold).

use crate::support;

use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};
use support::apiserver::TestClient;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const CRBS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const CRS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";

fn causes(body: &Value) -> Vec<(String, String)> {
    body["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_owned(),
                        c["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn invalid_metadata_and_specs_are_422_with_the_real_causes() {
    let h = support::apiserver::start().await;
    let c = TestClient::new(&h);
    let long = "a".repeat(64);
    let a = c
        .post(
            CMS,
            &json!({"metadata": {"name": "x", "labels": {"app": long}}}),
        )
        .await;
    assert_eq!(a.code, 422, "{:?}", a.body);
    assert_eq!(a.body["reason"], "Invalid");
    assert_eq!(
        causes(&a.body),
        vec![(
            "metadata.labels".to_owned(),
            format!("Invalid value: \"{long}\": must be no more than 63 characters")
        )]
    );
    let a = c
        .post(
            CMS,
            &json!({"metadata": {"name": "x", "labels": {"a b/c?": "v"}}}),
        )
        .await;
    assert_eq!(a.code, 422);
    assert!(
        a.body["message"]
            .as_str()
            .unwrap()
            .starts_with("ConfigMap \"x\" is invalid: [metadata.labels: Invalid value: \"a b/c?\": prefix part a lowercase RFC 1123 subdomain"),
        "{}",
        a.body["message"]
    );
    let a = c
        .post(
            CMS,
            &json!({"metadata": {"name": "x", "annotations": {"big": "x".repeat(300 * 1024)}}}),
        )
        .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        causes(&a.body),
        vec![(
            "metadata.annotations".to_owned(),
            "Too long: may not be more than 262144 bytes".to_owned()
        )]
    );
    let a = c
        .post(
            PODS,
            &json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
        )
        .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.body["message"],
        "Pod \"p\" is invalid: spec.containers: Required value"
    );
    let a = c
        .post(
            PODS,
            &json!({"metadata": {"name": "p"}, "spec": {"terminationGracePeriodSeconds": -5,
                    "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.body["message"],
        "Pod \"p\" is invalid: spec.terminationGracePeriodSeconds: Invalid value: -5: must be greater than or equal to 0"
    );
    // Nothing invalid was stored.
    assert_eq!(c.get(CMS).await.body["items"], json!([]));
    assert_eq!(c.get(PODS).await.body["items"], json!([]));
}

fn deployment(extra_spec: Value) -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
    if let (Some(s), Some(extra)) = (d["spec"].as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    d
}

#[tokio::test]
async fn field_validation_dry_run_and_content_types() {
    let h = support::apiserver::start().await;
    let c = TestClient::new(&h);
    let with_foo = deployment(json!({"foo": 1}));

    let a = c
        .post(&format!("{DEPLOYS}?fieldValidation=Strict"), &with_foo)
        .await;
    assert_eq!(a.code, 400, "{:?}", a.body);
    assert_eq!(
        a.body["message"],
        "strict decoding error: unknown field \"spec.foo\""
    );
    let dup = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":1,"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}"#;
    let resp = c
        .raw(
            "POST",
            &format!("{DEPLOYS}?fieldValidation=Strict"),
            &[("content-type", "application/json")],
            dup.to_vec(),
            true,
        )
        .await;
    let a = support::apiserver::read_answer(resp).await;
    assert_eq!(a.code, 400);
    assert_eq!(
        a.body["message"],
        "strict decoding error: duplicate field \"replicas\""
    );
    let a = c
        .post(&format!("{DEPLOYS}?fieldValidation=bogus"), &with_foo)
        .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.body["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"bogus\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );
    let a = c.post(&format!("{DEPLOYS}?dryRun=Bogus"), &with_foo).await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.body["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"Bogus\"]: supported values: \"All\""
    );
    assert_eq!(
        c.get(DEPLOYS).await.body["items"],
        json!([]),
        "nothing written"
    );
    let a = c
        .post(&format!("{DEPLOYS}?dryRun=All"), &deployment(json!({})))
        .await;
    assert_eq!(a.code, 201);
    assert_eq!(a.body["metadata"]["name"], "web");
    assert_eq!(
        c.get(DEPLOYS).await.body["items"],
        json!([]),
        "dry run writes nothing"
    );

    // Warn (the default): stored without the field, one Warning header per field.
    let a = c.post(DEPLOYS, &with_foo).await;
    assert_eq!(a.code, 201);
    let warnings: Vec<&str> = a
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(warnings, vec![r#"299 - "unknown field \"spec.foo\"""#]);
    assert!(a.body["spec"].get("foo").is_none());
    // Ignore: dropped silently.
    let mut again = with_foo.clone();
    again["metadata"]["name"] = json!("web2");
    let a = c
        .post(&format!("{DEPLOYS}?fieldValidation=Ignore"), &again)
        .await;
    assert_eq!(a.code, 201);
    assert!(a.headers.get("warning").is_none());

    // A Content-Type nothing decodes is 415; none at all reads as JSON, as on the real server.
    let body = serde_json::to_vec(&json!({"metadata": {"name": "cm"}})).unwrap();
    let resp = c
        .raw(
            "POST",
            CMS,
            &[("content-type", "text/garbage")],
            body.clone(),
            true,
        )
        .await;
    assert_eq!(resp.status().as_u16(), 415);
    let resp = c.raw("POST", CMS, &[], body, true).await;
    assert_eq!(resp.status().as_u16(), 201);
}

const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: secret-reader}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: rbac-writer}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterrolebindings, clusterroles]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: mallory-writes-rbac}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rbac-writer}
subjects:
- {kind: User, name: mallory, apiGroup: rbac.authorization.k8s.io}
"#;

async fn rbac_server() -> ClusterHandle {
    let h = Cluster::builder()
        .enforce_rbac(true)
        .extra_token("mallory-token", "mallory")
        .start()
        .await
        .unwrap();
    h.load_manifests(POLICY).unwrap();
    h
}

fn binding(name: &str, role: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": {"name": name},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]})
}

const HELD: &str = "user \"mallory\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:";

#[tokio::test]
async fn the_escalation_sequence_is_refused_step_by_step() {
    let h = rbac_server().await;
    let admin = TestClient::new(&h);
    let mallory = TestClient::from_parts(h.url(), "mallory-token", h.ca_pem(), false);

    // 1. Holding only `create` on bindings, binding oneself to secret-reader is refused.
    let a = mallory.post(CRBS, &binding("mine", "secret-reader")).await;
    assert_eq!(a.code, 403, "{:?}", a.body);
    assert_eq!(
        a.body["message"],
        format!(
            "clusterrolebindings.rbac.authorization.k8s.io \"mine\" is forbidden: {HELD}\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}}"
        )
    );
    assert_eq!(
        mallory.get("/api/v1/namespaces/default/secrets").await.code,
        403
    );

    // 2. A ClusterRole granting everything is refused.
    let all = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let a = mallory.post(CRS, &all).await;
    assert_eq!(a.code, 403);
    assert_eq!(
        a.body["message"],
        format!(
            "clusterroles.rbac.authorization.k8s.io \"everything\" is forbidden: {HELD}\n{{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}}"
        )
    );
    // Nor may it aggregate roles, whose rules are not known yet.
    let agg = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "aggregate"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}, "rules": []});
    let a = mallory.post(CRS, &agg).await;
    assert_eq!(a.code, 403);
    assert_eq!(
        a.body["message"],
        "clusterroles.rbac.authorization.k8s.io \"aggregate\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );
    // A role it does hold it may create.
    let own = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "binding-creator"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]}]});
    assert_eq!(mallory.post(CRS, &own).await.code, 201);

    // 3. Impersonating the admin is refused.
    let resp = mallory
        .raw(
            "GET",
            "/api/v1/namespaces/default/secrets",
            &[("impersonate-user", "admin")],
            vec![],
            true,
        )
        .await;
    assert_eq!(resp.status().as_u16(), 403);
    // And an access review reports the same: mallory cannot read secrets.
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "default"}}});
    let a = mallory
        .post(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            &review,
        )
        .await;
    assert_eq!(a.code, 201);
    assert_eq!(a.body["status"]["allowed"], false);

    // The admin (system:masters) may create the everything role; mallory still may not bind it.
    assert_eq!(admin.post(CRS, &all).await.code, 201);
    assert_eq!(
        mallory.post(CRBS, &binding("all", "everything")).await.code,
        403
    );
    // With `bind` on secret-reader, binding it is allowed without holding its rules.
    let binder = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bind-secret-reader"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "resourceNames": ["secret-reader"], "verbs": ["bind"]}]});
    assert_eq!(admin.post(CRS, &binder).await.code, 201);
    assert_eq!(
        admin
            .post(CRBS, &binding("mallory-binds", "bind-secret-reader"))
            .await
            .code,
        201
    );
    assert_eq!(
        mallory
            .post(CRBS, &binding("mine", "secret-reader"))
            .await
            .code,
        201
    );
    assert_eq!(
        mallory.get("/api/v1/namespaces/default/secrets").await.code,
        200
    );
    // ... but `bind` on one role is not `bind` on another.
    assert_eq!(
        mallory.post(CRBS, &binding("all", "everything")).await.code,
        403
    );
}

/// The same sequence through the real kubectl (skipped without kubectl): `create
/// clusterrolebinding`, `create clusterrole`, `--as admin`, each refused with the server's text;
/// and kubectl's own server-side validation (`--validate=strict`) meeting the server's.
#[tokio::test]
async fn kubectl_sees_the_refusals() {
    use crate::support::cluster::Kubectl;
    let h = rbac_server().await;
    let Some(k) = Kubectl::with_token(&h, "mallory-token") else {
        return;
    };
    let out = k
        .run(&[
            "create",
            "clusterrolebinding",
            "mine",
            "--clusterrole=secret-reader",
            "--user=mallory",
        ])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(&format!(
            "clusterrolebindings.rbac.authorization.k8s.io \"mine\" is forbidden: {HELD}"
        )) && out
            .stderr
            .contains("{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"),
        "{}",
        out.stderr
    );
    let out = k
        .run(&[
            "create",
            "clusterrole",
            "everything",
            "--verb=*",
            "--resource=*.*",
        ])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "clusterroles.rbac.authorization.k8s.io \"everything\" is forbidden: user \"mallory\""
        ),
        "{}",
        out.stderr
    );
    let out = k.run(&["get", "secrets", "--as", "admin"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("Forbidden") || out.stderr.contains("forbidden"),
        "{}",
        out.stderr
    );

    let admin = Kubectl::new(&h).unwrap();
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels:\n    app: \"-nope\"\ndata: {}\nfoo: 1\n";
    let out = admin
        .run_with_input(&["create", "-f", "-"], Some(bad))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains("unknown field \"foo\""),
        "strict validation first: {}",
        out.stderr
    );
    let bad = bad.replace("foo: 1\n", "");
    let out = admin
        .run_with_input(&["create", "-f", "-"], Some(&bad))
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr
            .contains("ConfigMap \"bad\" is invalid: metadata.labels: Invalid value: \"-nope\""),
        "{}",
        out.stderr
    );
}
