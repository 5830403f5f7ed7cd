//! `sample-controller apiserver` behaves like a small cluster by default (simulated node), takes
//! extra tokens from a kube-apiserver token file, preloads manifests, enforces RBAC on request,
//! and serves `/admin/faults` to the bootstrap token.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use support::apiserver::TestClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-edits, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: editor}
subjects: [{kind: ServiceAccount, name: bot, namespace: team}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: editor}
rules: [{apiGroups: [""], resources: [configmaps], verbs: ["*"]}]
"#;

/// Starts the subcommand with `args`; returns the child, its URL and its stdout lines.
async fn start(
    args: &[&str],
) -> (
    Child,
    String,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--token",
            "admin-token",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first
        .strip_prefix("API server listening at ")
        .unwrap_or_else(|| panic!("unexpected first line: {first:?}"))
        .to_owned();
    (child, url, lines)
}

fn job(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["/bin/sh", "-c", "exit 4"]}]}})
}

#[tokio::test]
async fn the_standalone_server_simulates_enforces_rbac_and_injects_faults() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "bot-token,system:serviceaccount:team:bot,1\n").unwrap();
    let manifests = dir.path().join("rbac.yaml");
    std::fs::write(&manifests, POLICY).unwrap();
    let (mut child, url, mut lines) = start(&[
        "--pod-run-time",
        "0s",
        "--enforce-rbac",
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--manifests",
        manifests.to_str().unwrap(),
    ])
    .await;
    let loaded = lines.next_line().await.unwrap().unwrap();
    assert!(loaded.starts_with("loaded 3 objects from "), "{loaded}");

    let admin = TestClient::from_parts(&url, "admin-token", None, false);
    let bot = TestClient::from_parts(&url, "bot-token", None, false);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    assert_eq!(
        bot.post("/api/v1/namespaces/team/configmaps", &cm)
            .await
            .code,
        201
    );
    let r = bot.post("/api/v1/namespaces/default/configmaps", &cm).await;
    assert_eq!(r.code, 403);
    assert_eq!(
        r.body["message"],
        "configmaps is forbidden: User \"system:serviceaccount:team:bot\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );

    // The simulated node is on by default: the pod fails with its exit code.
    let mut w = admin
        .watch("/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3Djob")
        .await;
    assert_eq!(
        admin
            .post("/api/v1/namespaces/default/pods", &job("job"))
            .await
            .code,
        201
    );
    loop {
        let e = w.next_change().await.expect("watch ended");
        if e["object"]["status"]["phase"] == "Failed" {
            let cs = &e["object"]["status"]["containerStatuses"][0];
            assert_eq!(cs["state"]["terminated"]["exitCode"], 4);
            break;
        }
    }

    let r = admin
        .post(
            "/admin/faults",
            &json!({"action": "fail", "code": 503, "verb": "get", "resource": "pods"}),
        )
        .await;
    assert_eq!(r.code, 200);
    assert_eq!(
        admin.get("/api/v1/namespaces/default/pods/job").await.code,
        503
    );
    assert_eq!(
        admin.get("/api/v1/namespaces/default/pods/job").await.code,
        200
    );
    let r = bot
        .post("/admin/faults", &json!({"action": "compact"}))
        .await;
    assert_eq!(r.code, 403);
    child.kill().await.unwrap();
}

#[tokio::test]
async fn simulate_false_leaves_pods_pending_and_bad_token_files_are_named() {
    let (mut child, url, _lines) = start(&["--simulate=false"]).await;
    let admin = TestClient::from_parts(&url, "admin-token", None, false);
    assert_eq!(
        admin
            .post("/api/v1/namespaces/default/pods", &job("idle"))
            .await
            .code,
        201
    );
    // Without the node nothing binds the pod; with it, the node would be registered.
    let nodes = admin.get("/api/v1/nodes").await;
    assert_eq!(nodes.body["items"].as_array().unwrap().len(), 0);
    let p = admin.get("/api/v1/namespaces/default/pods/idle").await;
    assert!(p.body["spec"]["nodeName"].is_null());
    child.kill().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "only-a-token\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--token-auth-file",
        ])
        .arg(&tokens)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tokens.csv") && stderr.contains("line 1"),
        "{stderr}"
    );
}
