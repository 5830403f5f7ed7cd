//! RBAC enforcement over real HTTP (and kubectl): namespaced Roles and RoleBindings,
//! ClusterRoles and ClusterRoleBindings, subresources, resourceNames, groups, service
//! accounts, non-resource URLs, and the exact 403 messages of the real server.

use crate::support;
use crate::support::cluster;

use cluster::Kubectl;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::json;
use support::apiserver::{TestClient, cm};

const BOT: &str = "system:serviceaccount:team:bot";

const POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: config-reader, namespace: team}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [allowed]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-reads-config, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: config-reader}
subjects:
- {kind: ServiceAccount, name: bot, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-viewer}
rules:
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers-view-namespaces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-viewer}
subjects:
- {kind: Group, name: readers, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: carol-edits-default, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cm-editor}
subjects:
- {kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cm-editor}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: ["*"]
"#;

async fn server() -> ClusterHandle {
    let h = Cluster::builder()
        .enforce_rbac(true)
        .service_account_token("bot-token", "team", "bot")
        .extra_token("carol-token", "carol")
        .user_groups("carol", &["readers"])
        .extra_token("dave-token", "dave")
        .start()
        .await
        .unwrap();
    let loaded = h.load_manifests(POLICY).unwrap();
    assert_eq!(loaded.len(), 7);
    assert_eq!(loaded[1], "Role/config-reader");
    h
}

fn as_user(h: &ClusterHandle, token: &str) -> TestClient {
    let mut c = TestClient::new(h);
    c.token = token.into();
    c
}

#[tokio::test]
async fn a_namespaced_role_binding_allows_its_rules_in_its_namespace_only() {
    let h = server().await;
    let admin = TestClient::new(&h);
    for ns in ["team", "default"] {
        let r = admin
            .post(
                &format!("/api/v1/namespaces/{ns}/configmaps"),
                &cm("x", json!({})),
            )
            .await;
        assert_eq!(r.code, 201);
    }
    let bot = as_user(&h, "bot-token");
    assert_eq!(
        bot.get("/api/v1/namespaces/team/configmaps").await.code,
        200
    );
    assert_eq!(
        bot.get("/api/v1/namespaces/team/configmaps/x").await.code,
        200
    );

    let r = bot.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(r.code, 403);
    assert_eq!(r.body["kind"], "Status");
    assert_eq!(r.body["reason"], "Forbidden");
    assert_eq!(
        r.body["message"],
        format!(
            "configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        )
    );
    assert_eq!(r.body["details"]["kind"], "configmaps");

    let r = bot
        .delete("/api/v1/namespaces/team/configmaps/x", None)
        .await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        format!(
            "configmaps \"x\" is forbidden: User \"{BOT}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(r.body["details"]["name"], "x");

    let r = bot.get("/api/v1/configmaps").await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        format!(
            "configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
        )
    );
    // Nothing was deleted.
    assert_eq!(
        admin.get("/api/v1/namespaces/team/configmaps/x").await.code,
        200
    );
    h.shutdown().await;
}

#[tokio::test]
async fn subresources_and_resource_names_are_matched_exactly() {
    let h = server().await;
    let admin = TestClient::new(&h);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    assert_eq!(
        admin.post("/api/v1/namespaces/team/pods", &pod).await.code,
        201
    );
    for name in ["allowed", "hidden"] {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}});
        assert_eq!(
            admin.post("/api/v1/namespaces/team/secrets", &s).await.code,
            201
        );
    }
    let bot = as_user(&h, "bot-token");
    let patch = json!({"status": {"phase": "Running"}});
    let r = bot
        .patch(
            "/api/v1/namespaces/team/pods/p/status",
            "application/merge-patch+json",
            &patch,
        )
        .await;
    assert_eq!(r.code, 200, "{}", r.body);
    let r = bot
        .patch(
            "/api/v1/namespaces/team/pods/p",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        format!(
            "pods \"p\" is forbidden: User \"{BOT}\" cannot patch resource \"pods\" in API group \"\" in the namespace \"team\""
        )
    );
    let r = bot.get("/api/v1/namespaces/team/pods/p").await;
    assert_eq!(r.code, 403, "only pods/status is granted");

    assert_eq!(
        bot.get("/api/v1/namespaces/team/secrets/allowed")
            .await
            .code,
        200
    );
    let r = bot.get("/api/v1/namespaces/team/secrets/hidden").await;
    assert_eq!(r.code, 403);
    assert_eq!(bot.get("/api/v1/namespaces/team/secrets").await.code, 403);
    h.shutdown().await;
}

#[tokio::test]
async fn cluster_role_bindings_grant_cluster_scope_to_groups() {
    let h = server().await;
    let carol = as_user(&h, "carol-token");
    // Through the group `readers`.
    let r = carol.get("/api/v1/namespaces").await;
    assert_eq!(r.code, 200);
    let r = carol.delete("/api/v1/namespaces/team", None).await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        "namespaces \"team\" is forbidden: User \"carol\" cannot delete resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    // A RoleBinding to a ClusterRole grants it in the binding's namespace only.
    assert_eq!(
        carol
            .post(
                "/api/v1/namespaces/default/configmaps",
                &cm("mine", json!({}))
            )
            .await
            .code,
        201
    );
    assert_eq!(
        carol
            .post("/api/v1/namespaces/team/configmaps", &cm("mine", json!({})))
            .await
            .code,
        403
    );
    // Non-resource URLs come from ClusterRoles too.
    assert_eq!(carol.get("/metrics").await.code, 200);
    let dave = as_user(&h, "dave-token");
    let r = dave.get("/metrics").await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        "forbidden: User \"dave\" cannot get path \"/metrics\""
    );
    // Discovery is open to every authenticated user.
    assert_eq!(dave.get("/api/v1").await.code, 200);
    assert_eq!(dave.get("/apis").await.code, 200);
    h.shutdown().await;
}

#[tokio::test]
async fn a_binding_to_a_missing_role_says_so_and_admin_bypasses_rbac() {
    let h = server().await;
    h.load_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dangling, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ghost}
subjects: [{kind: User, name: dave}]
"#,
    )
    .unwrap();
    let dave = as_user(&h, "dave-token");
    let r = dave.get("/api/v1/namespaces/team/services").await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        "services is forbidden: User \"dave\" cannot list resource \"services\" in API group \"\" in the namespace \"team\": RBAC: role.rbac.authorization.k8s.io \"ghost\" not found"
    );
    let admin = TestClient::new(&h);
    assert_eq!(
        admin
            .delete(
                "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/dangling",
                None
            )
            .await
            .code,
        200
    );
    assert_eq!(
        admin.get("/api/v1/namespaces/team/services").await.code,
        200
    );

    // Granting at run time takes effect at once (no cache).
    let grant = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dave-edits"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cm-editor"},
        "subjects": [{"kind": "User", "name": "dave"}]
    });
    assert_eq!(
        admin
            .post(
                "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings",
                &grant
            )
            .await
            .code,
        201
    );
    assert_eq!(
        dave.get("/api/v1/namespaces/team/configmaps").await.code,
        200
    );
    h.shutdown().await;
}

#[tokio::test]
async fn without_enforcement_every_token_may_do_anything() {
    let h = Cluster::builder()
        .extra_token("dave-token", "dave")
        .start()
        .await
        .unwrap();
    let dave = as_user(&h, "dave-token");
    assert_eq!(
        dave.delete("/api/v1/namespaces/kube-public", None)
            .await
            .code,
        403
    );
    let r = dave
        .post("/api/v1/namespaces/default/configmaps", &cm("x", json!({})))
        .await;
    assert_eq!(r.code, 201);
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_reports_forbidden_for_a_service_account_token() {
    let h = server().await;
    let Some(k) = Kubectl::with_token(&h, "bot-token") else {
        h.shutdown().await;
        return;
    };
    let out = k
        .run(&["get", "configmaps", "-n", "team", "-o", "name"])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k.run(&["get", "configmaps", "-n", "default"]).await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(&format!(
            "Error from server (Forbidden): configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
        )),
        "{}",
        out.stderr
    );
    h.shutdown().await;
}

#[tokio::test]
async fn resource_names_allow_watching_one_object_by_field_selector() {
    let h = server().await;
    let bot = as_user(&h, "bot-token");
    // `config-reader` grants get on the secret `allowed` only: a list or watch narrowed to it
    // by `metadata.name` is allowed, any other list is not.
    let ok = bot
        .get("/api/v1/namespaces/team/secrets?fieldSelector=metadata.name%3Dallowed")
        .await;
    assert_eq!(ok.code, 403, "the role grants get, not list");
    h.load_manifests(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: watch-one, namespace: team}
rules: [{apiGroups: [""], resources: [secrets], resourceNames: [allowed], verbs: [list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-watches-one, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: watch-one}
subjects: [{kind: ServiceAccount, name: bot, namespace: team}]
"#,
    )
    .unwrap();
    let ok = bot
        .get("/api/v1/namespaces/team/secrets?fieldSelector=metadata.name%3Dallowed")
        .await;
    assert_eq!(ok.code, 200);
    let r = bot
        .get("/api/v1/namespaces/team/secrets?fieldSelector=metadata.name%3Dother")
        .await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        format!(
            "secrets \"other\" is forbidden: User \"{BOT}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(bot.get("/api/v1/namespaces/team/secrets").await.code, 403);
    h.shutdown().await;
}
