//! The image's `controller-manager` binary as a user runs it: the same `run` command, flags and
//! exit codes as `sample-controller run` (the root package's `manager_cli` tests run that one
//! against the embedded API server; both are `sample_controller_runtime::manager::main`).

use std::time::Duration;

use tokio::process::Command;

/// Runs the binary to completion (bounded: a hang fails the test) and returns (code, stdout,
/// stderr).
async fn run_to_end(args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(env!("CARGO_BIN_EXE_controller-manager"))
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the binary exits within a minute")
    .expect("the binary starts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn one_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected exactly one line, got: {stderr}");
    lines[0]
}

#[tokio::test]
async fn run_takes_the_managers_flags() {
    let (code, stdout, _) = run_to_end(&["run", "--help"]).await;
    assert_eq!(code, 0);
    for flag in [
        "--kubeconfig",
        "--controllers",
        "--workers",
        "--leader-elect",
        "--kube-api-qps",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--log-format",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from:\n{stdout}");
    }
    // Only the manager: no demo, no API server.
    let (code, _, stderr) = run_to_end(&["demo"]).await;
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run_to_end(&["apiserver"]).await;
    assert_eq!(code, 2, "{stderr}");
}

#[tokio::test]
async fn a_bad_flag_is_one_clear_line_and_exit_code_2() {
    let (code, _, stderr) = run_to_end(&["run", "--workers=0"]).await;
    assert_eq!(code, 2);
    assert_eq!(
        one_line(&stderr),
        "controller-manager: error: invalid value \"0\" for --workers: must be at least 1"
    );
    let (code, _, stderr) = run_to_end(&["run", "--controllers=at,nope"]).await;
    assert_eq!(code, 2);
    assert!(
        one_line(&stderr).contains("unknown controller \"nope\""),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_one_clear_line_and_exit_code_1() {
    // A port nothing listens on: bound but not listening, and held for the test, so that no
    // other test process can take it meanwhile (connections to it are refused).
    let closed = tokio::net::TcpSocket::new_v4().expect("a socket");
    closed
        .bind(([127, 0, 0, 1], 0).into())
        .expect("a free port");
    let port = closed.local_addr().expect("its address").port();
    let master = format!("http://127.0.0.1:{port}");
    let (code, _, stderr) = run_to_end(&[
        "run",
        "--master",
        &master,
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ])
    .await;
    assert_eq!(code, 1, "{stderr}");
    let line = one_line(&stderr);
    assert!(
        line.starts_with(&format!(
            "controller-manager: error: cannot reach the API server at {master}"
        )),
        "{line}"
    );
}
