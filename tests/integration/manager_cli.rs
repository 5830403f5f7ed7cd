//! `sample-controller run` as a user runs it: the real binary, real flags, real signals.

use crate::at_support;

use std::process::Stdio;
use std::time::Duration;

use at_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The binary under test: this package's, or the one `SAMPLE_CONTROLLER_BIN` names (to test
/// a release build, or a copy when several checkouts share one target directory).
fn bin() -> String {
    std::env::var("SAMPLE_CONTROLLER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sample-controller").to_string())
}

/// Runs the binary to completion (bounded: a hang fails the test) and returns (code, stderr).
async fn run_to_end(args: &[&str]) -> (i32, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(bin()).args(args).kill_on_drop(true).output(),
    )
    .await
    .expect("the binary exits")
    .expect("the binary starts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected exactly one line, got: {stderr}");
    lines[0]
}

#[tokio::test]
async fn a_bad_flag_is_one_clear_line_and_exit_code_2() {
    let (code, stderr) = run_to_end(&["run", "--workers=0"]).await;
    assert_eq!(code, 2);
    assert_eq!(
        one_line(&stderr),
        "sample-controller: error: invalid value \"0\" for --workers: must be at least 1"
    );
    let (code, stderr) = run_to_end(&["run", "--resync-period=soon"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--resync-period"), "{stderr}");
    let (code, stderr) = run_to_end(&["run", "--controllers=at,nope"]).await;
    assert_eq!(code, 2);
    assert!(
        one_line(&stderr).contains("unknown controller \"nope\""),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_one_clear_line_and_exit_code_1() {
    // A port nothing listens on: bind one, then free it.
    let port = free_port().await;
    let master = format!("http://127.0.0.1:{port}");
    let (code, stderr) = run_to_end(&[
        "run",
        "--master",
        &master,
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ])
    .await;
    assert_eq!(code, 1);
    let line = one_line(&stderr);
    assert!(
        line.starts_with(&format!(
            "sample-controller: error: cannot reach the API server at {master}"
        )),
        "{line}"
    );
}

#[tokio::test]
async fn a_cluster_without_the_crd_says_how_to_install_it() {
    sample_controller::install_crypto_provider();
    let server = embedded_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let (code, stderr) = run_to_end(&[
        "run",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ])
    .await;
    assert_eq!(code, 1);
    let line = one_line(&stderr);
    assert!(
        line.contains("ats.cnat.programming-kubernetes.info")
            && line.contains("kubectl apply -f artifacts/crds/"),
        "{line}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn it_serves_probes_and_metrics_and_exits_0_on_sigterm() {
    let (server, client) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let (metrics_port, probe_port) = (free_port().await, free_port().await);
    let mut child = Command::new(bin())
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            &format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            &format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
            // The test server has only the At CRD installed.
            "--controllers=at",
            "--leader-elect",
            "--leader-elect-resource-namespace=default",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // Ready once the caches have synced.
    let mut ready = false;
    for _ in 0..600 {
        if let Some((200, _)) = http_get(probe_port, "/readyz").await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "/readyz never answered 200");
    let (code, body) = http_get(probe_port, "/healthz").await.unwrap();
    assert_eq!(code, 200, "{body}");
    // No --kube-api-qps given: the throttle follows the server, and says what it decided (the
    // embedded server may or may not announce priority and fairness; either is a decision).
    let (_, body) = http_get(probe_port, "/readyz?verbose").await.unwrap();
    assert!(
        body.contains("[+]client-throttle: off (server has priority and fairness) ok")
            || body
                .contains("[+]client-throttle: on (server announces no priority and fairness) ok"),
        "{body}"
    );

    // It works: an At due now gets its pod.
    create_at(&client, &at("cli", "2019-04-12T10:12:00Z", "echo YAY")).await;
    wait_for_pod(&client, "cli-pod").await;

    // The sync that created the pod is counted once it returns.
    let mut body = String::new();
    for _ in 0..600 {
        let (code, b) = http_get(metrics_port, "/metrics").await.unwrap();
        assert_eq!(code, 200);
        body = b;
        if body.contains("controller_sync_total{controller=") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for family in [
        "controller_sync_total",
        "workqueue_adds_total",
        "rest_client_requests_total",
        "leader_election_master_status",
        "reflector_watches_total",
    ] {
        assert!(body.contains(family), "/metrics lacks {family}:\n{body}");
    }

    // SIGTERM: drain, release the Lease, exit 0.
    let pid = child.id().unwrap().to_string();
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let lease =
        sample_controller::client::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            client.clone(),
            "default",
        )
        .get("sample-controller")
        .await
        .unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_eq!(holder, "", "the Lease was released on shutdown");
    server.shutdown().await;
}

async fn free_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// A minimal HTTP/1.1 GET: (status code, body), or `None` if nothing answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}
