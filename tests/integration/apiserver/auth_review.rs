//! `kubectl auth can-i` against the embedded API server: access reviews
//! (`authorization.k8s.io/v1` SelfSubjectAccessReview, SelfSubjectRulesReview,
//! SubjectAccessReview, LocalSubjectAccessReview) answered by its RBAC authorizer, and
//! impersonation (`--as`), over plain HTTP requests and with the real kubectl (skipped with a
//! message where kubectl is not installed).

use crate::support;
use crate::support::cluster;

use cluster::{Kubectl, kubectl_bin};
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};
use support::apiserver::{Answer, TestClient};

const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSRR: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const SAR: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const CNAT: &str = "cnat.programming-kubernetes.info";
const ATS: &str = "ats.cnat.programming-kubernetes.info";
const SA: &str = "system:serviceaccount:cnat:cnat";

const POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: cnat}
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: at-reader}
rules:
- apiGroups: [cnat.programming-kubernetes.info]
  resources: [ats]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-reads-ats}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: at-reader}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: at-writer, namespace: cnat}
rules:
- apiGroups: [cnat.programming-kubernetes.info]
  resources: [ats, ats/status]
  verbs: [create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: controller-writes-ats, namespace: cnat}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: at-writer}
subjects:
- {kind: ServiceAccount, name: cnat}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-ghost, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ghost}
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reviewer}
rules:
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: auditors-review}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reviewer}
subjects:
- {kind: Group, name: auditors, apiGroup: rbac.authorization.k8s.io}
"#;

async fn server(enforce: bool) -> ClusterHandle {
    let h = Cluster::builder()
        .enforce_rbac(enforce)
        .extra_token("alice-token", "alice")
        .extra_token("dora-token", "dora")
        .user_groups("dora", &["auditors"])
        .service_account_token("cnat-token", "cnat", "cnat")
        .start()
        .await
        .unwrap();
    let admin = TestClient::new(&h);
    admin.install_at_crd().await;
    h.load_manifests(POLICY).unwrap();
    h
}

fn client(h: &ClusterHandle, token: &str) -> TestClient {
    TestClient::from_parts(h.url(), token, h.ca_pem(), false)
}

fn ssar(ns: &str, verb: &str, group: &str, resource: &str) -> Value {
    json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
           "metadata": {"creationTimestamp": null},
           "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": group,
                                           "resource": resource}},
           "status": {"allowed": false}})
}

fn non_resource(verb: &str, path: &str) -> Value {
    json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
           "spec": {"nonResourceAttributes": {"verb": verb, "path": path}}})
}

async fn ask(c: &TestClient, review: &Value) -> Value {
    let a = c.post(SSAR, review).await;
    assert_eq!(a.code, 201, "{:?}", a.body);
    a.body["status"].clone()
}

async fn ask_as(c: &TestClient, user: &str, review: &Value) -> Answer {
    let body = serde_json::to_vec(review).unwrap();
    let resp = c
        .raw(
            "POST",
            SSAR,
            &[
                ("content-type", "application/json"),
                ("impersonate-user", user),
            ],
            body,
            true,
        )
        .await;
    support::apiserver::read_answer(resp).await
}

#[tokio::test]
async fn self_subject_access_reviews_answer_with_the_rbac_decision_and_reason() {
    let h = server(true).await;
    let alice = client(&h, "alice-token");
    let sa = client(&h, "cnat-token");
    let admin = TestClient::new(&h);

    let a = alice
        .post(SSAR, &ssar("default", "list", CNAT, "ats"))
        .await;
    assert_eq!(a.code, 201);
    assert_eq!(a.body["kind"], "SelfSubjectAccessReview");
    assert_eq!(a.body["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(a.body["metadata"], json!({"creationTimestamp": null}));
    assert_eq!(
        a.body["spec"]["resourceAttributes"]["resource"], "ats",
        "the spec is echoed"
    );
    assert_eq!(
        a.body["status"],
        json!({"allowed": true,
               "reason": "RBAC: allowed by ClusterRoleBinding \"alice-reads-ats\" of ClusterRole \"at-reader\" to User \"alice\""})
    );
    // Denied: RBAC never says "denied", it just does not allow.
    assert_eq!(
        ask(&alice, &ssar("default", "delete", CNAT, "ats")).await,
        json!({"allowed": false})
    );
    // A binding whose role is missing is the reason of a denial.
    assert_eq!(
        ask(&alice, &ssar("team", "list", "", "configmaps")).await,
        json!({"allowed": false,
               "reason": "RBAC: role.rbac.authorization.k8s.io \"ghost\" not found"})
    );
    // The service account: allowed in its namespace by the RoleBinding, not elsewhere.
    assert_eq!(
        ask(&sa, &ssar("cnat", "create", CNAT, "ats")).await,
        json!({"allowed": true,
               "reason": "RBAC: allowed by RoleBinding \"controller-writes-ats/cnat\" of Role \"at-writer\" to ServiceAccount \"cnat/cnat\""})
    );
    assert_eq!(
        ask(&sa, &ssar("default", "create", CNAT, "ats")).await["allowed"],
        false
    );
    // A subresource is asked for by name.
    let mut status = ssar("cnat", "update", CNAT, "ats");
    status["spec"]["resourceAttributes"]["subresource"] = json!("status");
    assert_eq!(ask(&sa, &status).await["allowed"], true);
    // system:masters: allowed by the privileged-group authorizer, with no reason.
    assert_eq!(
        ask(&admin, &ssar("", "delete", "", "nodes")).await,
        json!({"allowed": true})
    );
    // Non-resource URLs: the built-in discovery binding, and what nobody granted.
    assert_eq!(
        ask(&alice, &non_resource("get", "/apis/apps/v1")).await,
        json!({"allowed": true,
               "reason": "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""})
    );
    assert_eq!(
        ask(&alice, &non_resource("post", "/apis/apps/v1")).await["allowed"],
        false
    );
    assert_eq!(
        ask(&alice, &non_resource("get", "/metrics")).await["allowed"],
        false
    );
    h.shutdown().await;
}

#[tokio::test]
async fn reviews_agree_with_what_the_server_then_does() {
    let h = server(true).await;
    let alice = client(&h, "alice-token");
    let ats = "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/default/ats";
    for (verb, method) in [
        ("list", "GET"),
        ("create", "POST"),
        ("deletecollection", "DELETE"),
    ] {
        let allowed = ask(&alice, &ssar("default", verb, CNAT, "ats")).await["allowed"]
            .as_bool()
            .unwrap();
        let body = (method == "POST").then(|| support::apiserver::at("x"));
        let done = alice.send(method, ats, &[], body.as_ref()).await;
        assert_eq!(
            done.code != 403,
            allowed,
            "{verb}: review said {allowed}, request got {}",
            done.code
        );
    }
    h.shutdown().await;
}

#[tokio::test]
async fn rules_reviews_list_the_users_rules() {
    let h = server(true).await;
    let alice = client(&h, "alice-token");
    let a = alice
        .post(
            SSRR,
            &json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
                    "spec": {"namespace": "team"}}),
        )
        .await;
    assert_eq!(a.code, 201, "{:?}", a.body);
    let st = &a.body["status"];
    assert_eq!(st["incomplete"], false);
    let rules = st["resourceRules"].as_array().unwrap();
    assert!(rules.contains(&json!({"verbs": ["get", "list", "watch"],
                                   "apiGroups": [CNAT], "resources": ["ats"]})));
    assert!(rules.contains(&json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                                   "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]})));
    assert!(
        !rules.iter().any(|r| r["verbs"] == json!(["*"])),
        "alice has no wildcard: {rules:?}"
    );
    assert!(st["nonResourceRules"].as_array().unwrap().iter().any(|r| {
        r["nonResourceURLs"]
            .as_array()
            .unwrap()
            .contains(&json!("/apis/*"))
    }));
    assert_eq!(
        st["evaluationError"],
        "role.rbac.authorization.k8s.io \"ghost\" not found"
    );
    // The service account sees its Role only in its namespace.
    let sa = client(&h, "cnat-token");
    let in_cnat = sa.post(SSRR, &json!({"spec": {"namespace": "cnat"}})).await;
    let in_default = sa
        .post(SSRR, &json!({"spec": {"namespace": "default"}}))
        .await;
    let writer = json!({"verbs": ["create", "update", "patch"], "apiGroups": [CNAT],
                        "resources": ["ats", "ats/status"]});
    assert!(
        in_cnat.body["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .contains(&writer)
    );
    assert!(
        !in_default.body["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .contains(&writer)
    );
    let no_ns = sa.post(SSRR, &json!({"spec": {}})).await;
    assert_eq!(no_ns.code, 400);
    assert_eq!(no_ns.body["message"], "no namespace on request");
    h.shutdown().await;
}

#[tokio::test]
async fn subject_access_reviews_need_permission_and_name_their_subject() {
    let h = server(true).await;
    let alice = client(&h, "alice-token");
    let dora = client(&h, "dora-token");
    let review = |user: Value, groups: Value| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups,
                        "resourceAttributes": {"namespace": "default", "verb": "list",
                                               "group": CNAT, "resource": "ats"}}})
    };
    // alice may not ask about others.
    let denied = alice.post(SAR, &review(json!("alice"), json!([]))).await;
    assert_eq!(denied.code, 403);
    assert_eq!(
        denied.body["message"],
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"alice\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
    );
    // dora (group auditors) may.
    let yes = dora.post(SAR, &review(json!("alice"), json!([]))).await;
    assert_eq!(yes.code, 201, "{:?}", yes.body);
    assert_eq!(yes.body["status"]["allowed"], true);
    let no = dora.post(SAR, &review(json!("bob"), json!([]))).await;
    assert_eq!(no.body["status"], json!({"allowed": false}));
    // Groups are taken as given: system:masters allows, no system:authenticated is added.
    let masters = dora
        .post(SAR, &review(json!("bob"), json!(["system:masters"])))
        .await;
    assert_eq!(masters.body["status"]["allowed"], true);
    let mut ssar_rights = review(json!("bob"), json!([]));
    ssar_rights["spec"]["resourceAttributes"] = json!({"verb": "create",
        "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"});
    assert_eq!(
        dora.post(SAR, &ssar_rights).await.body["status"]["allowed"],
        false
    );
    // Validation, with the real messages.
    let nobody = dora.post(SAR, &review(json!(""), json!([]))).await;
    assert_eq!(nobody.code, 422);
    assert_eq!(
        nobody.body["message"],
        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    // A local review is answered inside its namespace, which must match the URL's.
    let local = "/apis/authorization.k8s.io/v1/namespaces/cnat/localsubjectaccessreviews";
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
        "spec": {"user": SA, "resourceAttributes": {"namespace": "cnat", "verb": "create",
                 "group": CNAT, "resource": "ats"}}});
    let admin = TestClient::new(&h);
    let l = admin.post(local, &body).await;
    assert_eq!(l.code, 201, "{:?}", l.body);
    assert_eq!(l.body["metadata"]["namespace"], "cnat");
    assert_eq!(l.body["status"]["allowed"], true);
    let mut elsewhere = body.clone();
    elsewhere["spec"]["resourceAttributes"]["namespace"] = json!("default");
    let bad = admin.post(local, &elsewhere).await;
    assert_eq!(bad.code, 422);
    assert_eq!(
        bad.body["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"default\": must match metadata.namespace"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn malformed_reviews_get_the_real_validation_errors() {
    let h = server(true).await;
    let alice = client(&h, "alice-token");
    let both = alice
        .post(
            SSAR,
            &json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"},
                             "nonResourceAttributes": {"verb": "get", "path": "/x"}}}),
        )
        .await;
    assert_eq!(both.code, 422);
    assert_eq!(
        both.body["message"],
        "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.nonResourceAttributes: Invalid value: authorization.NonResourceAttributes{Path:\"/x\", Verb:\"get\"}: cannot be specified in combination with resourceAttributes"
    );
    let neither = alice.post(SSAR, &json!({"spec": {}})).await;
    assert_eq!(neither.code, 422);
    assert_eq!(
        neither.body["message"],
        "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
    );
    let named = alice
        .post(
            SSAR,
            &json!({"metadata": {"name": "x"}, "spec": {"nonResourceAttributes": {"verb": "get", "path": "/"}}}),
        )
        .await;
    assert_eq!(named.code, 422);
    assert!(
        named.body["message"]
            .as_str()
            .unwrap()
            .ends_with("must be empty"),
        "{:?}",
        named.body
    );
    let wrong_kind = alice
        .post(SSAR, &json!({"kind": "SubjectAccessReview", "spec": {}}))
        .await;
    assert_eq!(wrong_kind.code, 400);
    // Create-only: nothing to get, list or delete; no object names.
    let get = alice.get(SSAR).await;
    assert_eq!(get.code, 405);
    assert_eq!(get.body["reason"], "MethodNotAllowed");
    let named_url = alice.get(&format!("{SSAR}/x")).await;
    assert_eq!(named_url.code, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn impersonation_answers_for_the_impersonated_user_if_allowed() {
    let h = server(true).await;
    let admin = TestClient::new(&h);
    // The bootstrap user may impersonate: the review is answered for alice.
    let as_alice = ask_as(&admin, "alice", &ssar("default", "list", CNAT, "ats")).await;
    assert_eq!(as_alice.code, 201);
    assert_eq!(as_alice.body["status"]["allowed"], true);
    let as_alice = ask_as(&admin, "alice", &ssar("default", "delete", CNAT, "ats")).await;
    assert_eq!(as_alice.body["status"]["allowed"], false);
    // A service account by its user name gets its groups and bindings.
    let as_sa = ask_as(&admin, SA, &ssar("cnat", "create", CNAT, "ats")).await;
    assert_eq!(as_sa.body["status"]["allowed"], true);
    // Impersonating admin by name does not make one a master.
    let as_admin = ask_as(&admin, "admin", &ssar("", "delete", "", "nodes")).await;
    assert_eq!(as_admin.body["status"]["allowed"], false);
    // Real requests act as the impersonated user too.
    let resp = admin
        .raw(
            "DELETE",
            "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/default/ats/x",
            &[("impersonate-user", "alice")],
            vec![],
            true,
        )
        .await;
    let denied = support::apiserver::read_answer(resp).await;
    assert_eq!(denied.code, 403);
    assert!(
        denied.body["message"]
            .as_str()
            .unwrap()
            .contains("User \"alice\" cannot delete resource \"ats\""),
        "{:?}",
        denied.body
    );
    // alice may not impersonate.
    let alice = client(&h, "alice-token");
    let refused = ask_as(&alice, "bob", &ssar("default", "list", "", "pods")).await;
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.body["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    let refused_sa = ask_as(&alice, SA, &ssar("default", "list", "", "pods")).await;
    assert_eq!(
        refused_sa.body["message"],
        "serviceaccounts \"cnat\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"cnat\""
    );
    // Groups without a user.
    let resp = admin
        .raw(
            "GET",
            "/api/v1/namespaces",
            &[("impersonate-group", "devs")],
            vec![],
            true,
        )
        .await;
    let groups_only = support::apiserver::read_answer(resp).await;
    assert_eq!(groups_only.code, 500);
    h.shutdown().await;
}

#[tokio::test]
async fn without_rbac_enforcement_everything_is_allowed() {
    let h = server(false).await;
    let alice = client(&h, "alice-token");
    assert_eq!(
        ask(&alice, &ssar("default", "delete", "", "nodes")).await,
        json!({"allowed": true})
    );
    assert_eq!(
        ask(&alice, &non_resource("get", "/metrics")).await,
        json!({"allowed": true})
    );
    let rules = alice
        .post(SSRR, &json!({"spec": {"namespace": "default"}}))
        .await;
    assert_eq!(
        rules.body["status"],
        json!({"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
               "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
               "incomplete": false})
    );
    // Anyone may impersonate anyone.
    let as_bob = ask_as(&alice, "bob", &ssar("default", "list", "", "pods")).await;
    assert_eq!(as_bob.code, 201);
    h.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// kubectl

/// `kubectl <args>` → (exit code, stdout, stderr).
async fn kubectl(k: &Kubectl, args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), k.command(args).output())
        .await
        .expect("kubectl ran for more than 60 s")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn can_i_scenario(version: Option<&str>) {
    let Some(bin) = kubectl_bin(version) else {
        eprintln!(
            "SKIPPED: kubectl {} not found (looked on PATH and beside the binary it resolves to)",
            version.unwrap_or("(default)")
        );
        return;
    };
    let h = server(true).await;
    let k = Kubectl::with_bin(bin, &h);

    // --as: answered for alice. Allowed → "yes", exit 0; denied → "no", exit 1.
    let (code, out, err) = kubectl(&k, &["auth", "can-i", "list", ATS, "--as=alice"]).await;
    assert_eq!((code, out.as_str()), (0, "yes\n"), "stderr: {err}");
    let (code, out, _) = kubectl(&k, &["auth", "can-i", "delete", ATS, "--as=alice"]).await;
    assert_eq!((code, out.as_str()), (1, "no\n"));
    // A missing role is printed as the reason.
    let (code, out, _) = kubectl(
        &k,
        &[
            "auth",
            "can-i",
            "get",
            "configmaps",
            "-n",
            "team",
            "--as=alice",
        ],
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (
            1,
            "no - RBAC: role.rbac.authorization.k8s.io \"ghost\" not found\n"
        )
    );
    // As the service account, by impersonation and by its own token.
    let (code, out, _) = kubectl(
        &k,
        &[
            "auth",
            "can-i",
            "create",
            ATS,
            "-n",
            "cnat",
            &format!("--as={SA}"),
        ],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "yes\n"));
    let mut sa_config = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(
        &mut sa_config,
        h.kubeconfig_yaml_for_token("cnat-token").as_bytes(),
    )
    .unwrap();
    let sa_path = sa_config.path().to_str().unwrap().to_owned();
    let (code, out, _) = kubectl(
        &k,
        &[
            "--kubeconfig",
            &sa_path,
            "auth",
            "can-i",
            "create",
            ATS,
            "-n",
            "cnat",
        ],
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "yes\n"));
    let (code, out, _) = kubectl(
        &k,
        &[
            "--kubeconfig",
            &sa_path,
            "auth",
            "can-i",
            "create",
            ATS,
            "-n",
            "default",
        ],
    )
    .await;
    assert_eq!((code, out.as_str()), (1, "no\n"));
    // The service account may not impersonate: kubectl reports the server's 403.
    let (code, _, err) = kubectl(
        &k,
        &[
            "--kubeconfig",
            &sa_path,
            "auth",
            "can-i",
            "list",
            ATS,
            "--as=alice",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot impersonate resource \"users\""),
        "{err}"
    );
    // --list prints alice's rules.
    let (code, out, err) = kubectl(&k, &["auth", "can-i", "--list", "--as=alice"]).await;
    assert_eq!(code, 0, "{err}");
    let header = out.lines().next().unwrap_or_default();
    for column in ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"] {
        assert!(header.contains(column), "{out}");
    }
    let at_line = out
        .lines()
        .find(|l| l.starts_with(ATS))
        .unwrap_or_else(|| panic!("no ats line in:\n{out}"));
    assert!(at_line.ends_with("[get list watch]"), "{at_line}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("selfsubjectaccessreviews.authorization.k8s.io")),
        "{out}"
    );
    assert!(!out.contains("*.*"), "alice has no wildcard:\n{out}");
    // The bootstrap user has cluster-admin's wildcard.
    let (_, out, _) = kubectl(&k, &["auth", "can-i", "--list"]).await;
    assert!(out.lines().any(|l| l.starts_with("*.*")), "{out}");
    h.shutdown().await;

    // Without enforcement everything is allowed, for anyone.
    let open = server(false).await;
    let k = Kubectl::with_bin(kubectl_bin(version).unwrap(), &open);
    let (code, out, _) = kubectl(&k, &["auth", "can-i", "delete", "nodes", "--as=alice"]).await;
    assert_eq!((code, out.as_str()), (0, "yes\n"));
    open.shutdown().await;
}

#[tokio::test]
async fn kubectl_auth_can_i() {
    can_i_scenario(None).await;
}

#[tokio::test]
async fn kubectl_1_28_auth_can_i() {
    can_i_scenario(Some("1.28")).await;
}

/// `kubectl auth whoami` (a `SelfSubjectReview`) prints the user the request authenticated as:
/// a token's user with its groups, an impersonated user (`--as`, `--as-group`), and a client
/// certificate's subject in its organizations. RBAC is enforced: every authenticated user may
/// ask (`system:basic-user`).
#[tokio::test]
async fn kubectl_auth_whoami_names_the_token_the_impersonated_and_the_certificate_user() {
    let h = server(true).await;
    // Over HTTP first: the review's shape.
    let dora = client(&h, "dora-token");
    let answer = dora
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.body["status"]["userInfo"],
        json!({"username": "dora", "groups": ["auditors", "system:authenticated"]})
    );
    let Some(k) = Kubectl::with_token(&h, "alice-token") else {
        return;
    };
    let (code, out, err) = kubectl(&k, &["auth", "whoami"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("alice"), "{out}");
    assert!(out.contains("[system:authenticated]"), "{out}");
    let Some(admin) = Kubectl::new(&h) else {
        return;
    };
    let (code, out, err) = kubectl(
        &admin,
        &[
            "auth",
            "whoami",
            "--as",
            "bob",
            "--as-group",
            "team-a",
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let review: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "bob");
    assert_eq!(
        review["status"]["userInfo"]["groups"],
        json!(["team-a", "system:authenticated"])
    );
    let yaml = h
        .kubeconfig_yaml_for_client_cert("carol", Some("ops"))
        .expect("HTTPS")
        .unwrap();
    std::fs::write(admin.home().join("cert-kubeconfig"), yaml).unwrap();
    let cert_kubeconfig = admin.home().join("cert-kubeconfig");
    let (code, out, err) = kubectl(
        &admin,
        &[
            "--kubeconfig",
            cert_kubeconfig.to_str().unwrap(),
            "auth",
            "whoami",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("carol"), "{out}");
    assert!(out.contains("ops"), "{out}");
    h.shutdown().await;
}
