//! `sample-controller run` as a user runs it: the real binary, real flags, real signals.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use crate::support::net::{ManagerLog, closed_port};
use support::at::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The binary under test: this package's, or the one `SAMPLE_CONTROLLER_BIN` names (to test
/// a release build, or a copy when several checkouts share one target directory).
use crate::support::bin;

/// Runs the binary to completion (bounded: a hang fails the test) and returns (code, stderr).
async fn run_to_end(args: &[&str]) -> (i32, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(bin())
            .args(args)
            .env_remove("RUST_LOG")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the binary exits")
    .expect("the binary starts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `run --kubeconfig <server's> <extra>` without listeners, to its end: exit code and stderr.
async fn run_against(server: &embedded_cluster::ClusterHandle, extra: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let mut args = vec![
        "run",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ];
    args.extend_from_slice(extra);
    run_to_end(&args).await
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
    // The sharder runs alone: it is no shard.
    let (code, stderr) =
        run_to_end(&["run", "--controllers=sharder", "--shard-mode=sharded"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        one_line(&stderr).contains("drop --shard-mode=sharded"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_one_clear_line_and_exit_code_1() {
    // A port nothing listens on: bound, not listening, and held for the test.
    let closed = closed_port();
    let port = closed.local_addr().unwrap().port();
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
    assert!(line.contains("refused"), "{line}");

    // With the client's debug logs on, every retry would say so: connection refused is not
    // retried (client-go retries only a reset or lost connection), so the one request fails once.
    let (code, stderr) = run_to_end(&[
        "run",
        "--master",
        &master,
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
        "-v",
        "4",
    ])
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains("retrying"), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sample-controller: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
}

#[tokio::test]
async fn a_cluster_without_the_crd_says_how_to_install_it() {
    sample_client_go::install_crypto_provider();
    let server = embedded_cluster::Cluster::builder().start().await.unwrap();
    let (code, stderr) = run_against(&server, &[]).await;
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
    let mut child = Command::new(bin())
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
            // The test server has only the At CRD installed.
            "--controllers=at",
            "--leader-elect",
            "--leader-elect-resource-namespace=default",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    // The ports it bound, from its log.
    let log = ManagerLog::tap(child.stderr.take().unwrap());
    let (metrics_port, probe_port) = (log.metrics().await.port(), log.health().await.port());

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
        // controller-runtime's families, for its dashboards.
        "controller_runtime_reconcile_total{controller=\"at\",result=\"success\"}",
        "controller_runtime_reconcile_time_seconds_bucket",
        "controller_runtime_max_concurrent_reconciles{controller=\"at\"} 32",
        "controller_runtime_active_workers{controller=\"at\"}",
        "controller_runtime_terminal_reconcile_errors_total{controller=\"at\"} 0",
    ] {
        assert!(body.contains(family), "/metrics lacks {family}:\n{body}");
    }
    // The Grafana dashboard in artifacts/ asks only for families this manager serves.
    for family in dashboard_metric_names() {
        assert!(
            body.contains(&format!("\n{family}")),
            "the dashboard uses {family}, which /metrics lacks:\n{body}"
        );
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
    let stderr = log.text().await;
    assert_eq!(status.code(), Some(0), "{stderr}");
    let lease =
        sample_client_go::client::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
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

#[test]
fn verbosity_maps_klog_levels_to_our_crates_before_the_dependencies() {
    use sample_controller_runtime::logging::{dependency_level, filter_directives};
    use tracing::Level;
    assert_eq!(dependency_level(1), Level::INFO);
    assert_eq!(dependency_level(5), Level::INFO);
    assert_eq!(dependency_level(6), Level::DEBUG);
    assert_eq!(dependency_level(9), Level::TRACE);
    let v1 = filter_directives(1, Level::DEBUG);
    assert!(v1.starts_with("info,"), "{v1}");
    assert!(v1.contains("sample_client_go=debug"), "{v1}");
    assert!(v1.contains("sample_controller_runtime=debug"), "{v1}");
    assert!(v1.contains("sample_operators=debug"), "{v1}");
    assert!(v1.contains("embedded_apiserver=debug"), "{v1}");
    assert!(filter_directives(6, Level::TRACE).starts_with("debug,"));
    // The demo's quiet default: warnings only, for every crate.
    assert!(filter_directives(0, Level::WARN).starts_with("warn,"));
}

#[test]
fn colour_only_on_a_terminal_without_no_color_and_events_are_one_line() {
    use sample_controller_runtime::logging::{one_line, use_colour};
    use std::ffi::OsStr;
    assert!(use_colour(true, None));
    assert!(!use_colour(false, None));
    assert!(!use_colour(true, Some(OsStr::new("1"))));
    assert!(use_colour(true, Some(OsStr::new(""))), "empty NO_COLOR");
    assert_eq!(one_line(b"a\nb\r\nc\n"), b"a\\nb\\r\\nc\n".to_vec());
    assert_eq!(one_line(b"plain"), b"plain\n".to_vec());
}

/// An embedded API server without the CRDs (the manager talks to it, logs, and exits 1 saying
/// how to install them) and a kubeconfig for it.
async fn crd_less_cluster() -> (embedded_cluster::ClusterHandle, tempfile::TempDir, String) {
    sample_client_go::install_crypto_provider();
    let server = embedded_cluster::Cluster::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let path = kubeconfig.to_str().unwrap().to_owned();
    (server, dir, path)
}

/// Runs `run --log-format json -v <v>` against a cluster with the At CRD until its caches have
/// synced (start-up's requests are done), stops it with SIGTERM and returns its stderr.
async fn json_logs_at(v: &str) -> String {
    let (server, _client) = server().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let mut child = Command::new(bin())
        .args([
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--metrics-bind-address=0",
            "--health-probe-bind-address=127.0.0.1:0",
            "--controllers=at",
            "--log-format",
            "json",
            "-v",
            v,
        ])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let log = ManagerLog::tap(child.stderr.take().unwrap());
    let probe_port = log.health().await.port();
    let mut ready = false;
    for _ in 0..600 {
        if let Some((200, _)) = http_get(probe_port, "/readyz").await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "/readyz never answered 200");
    let pid = child.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap()
            .success()
    );
    tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    let stderr = log.text().await;
    server.shutdown().await;
    stderr
}

fn targets(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|j| j["target"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn dependency_debug_logs_appear_only_from_v6_and_never_in_colour_off_a_terminal() {
    let v4 = json_logs_at("4").await;
    let own = targets(&v4);
    assert!(
        !own.is_empty(),
        "-v 4 shows the manager's debug lines: {v4}"
    );
    assert!(
        own.iter()
            .all(|t| sample_controller_runtime::logging::OWN_TARGETS
                .iter()
                .any(|o| t.starts_with(o))),
        "-v 4 shows only our crates: {own:?}"
    );
    let v6 = json_logs_at("6").await;
    let all = targets(&v6);
    assert!(
        all.iter().any(|t| t.starts_with("hyper")),
        "-v 6 shows the HTTP stack's debug lines: {all:?}"
    );
    assert!(!v4.contains('\u{1b}') && !v6.contains('\u{1b}'), "{v6}");
}

#[tokio::test]
async fn on_a_terminal_logs_are_coloured_unless_no_color_is_set() {
    // `script` gives the binary a pseudo-terminal for stderr.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: `script` (util-linux) is not installed");
        return;
    }
    // Against a cluster without the CRDs the manager exits after its first requests; at -v 6
    // the HTTP stack has logged its debug lines by then.
    let (_server, _dir, kubeconfig) = crd_less_cluster().await;
    let cmd = format!(
        "{} run --kubeconfig {kubeconfig} --metrics-bind-address=0 --health-probe-bind-address=0 -v 6",
        bin()
    );
    let on_tty = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).kill_on_drop(true);
        c.env_remove("NO_COLOR").env_remove("RUST_LOG");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        async move {
            let out = tokio::time::timeout(Duration::from_secs(60), c.output())
                .await
                .expect("the binary exits")
                .expect("script starts");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let coloured = on_tty(None).await;
    assert!(coloured.contains("DEBUG"), "{coloured}");
    assert!(coloured.contains('\u{1b}'), "{coloured}");
    let plain = on_tty(Some("1")).await;
    assert!(plain.contains("DEBUG"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "{plain}");
}

/// The metric names the PromQL of `artifacts/grafana/sample-controller-dashboard.json` uses.
fn dashboard_metric_names() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/artifacts/grafana/sample-controller-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if [
                    "controller_",
                    "workqueue_",
                    "rest_client_",
                    "leader_election_",
                ]
                .iter()
                .any(|p| word.starts_with(p))
                {
                    names.insert(word.to_string());
                }
            }
        }
    }
    assert!(names.len() >= 8, "{names:?}");
    names.into_iter().collect()
}
