//! `sample-controller apiserver` as a process: it prints its URL, writes a kubeconfig that a
//! client can use as is (CA data and token), and stops cleanly on SIGTERM.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_apiserver_subcommand_serves_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("k.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args(["apiserver", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s).await;
        s
    });
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("API server listening at ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    assert!(url.starts_with("https://127.0.0.1:"));

    let cfg: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    let cluster = &cfg["clusters"][0]["cluster"];
    assert_eq!(cluster["server"], url.as_str());
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster["certificate-authority-data"].as_str().unwrap())
        .unwrap();
    let token = cfg["users"][0]["user"]["token"].as_str().unwrap();
    assert_eq!(cfg["current-context"], "sample-controller");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o077,
            0,
            "the kubeconfig holds a token: not world-readable"
        );
    }

    let c = support::apiserver::TestClient::from_parts(
        &url,
        token,
        Some(std::str::from_utf8(&ca).unwrap()),
        false,
    );
    let ns = c.get("/api/v1/namespaces").await;
    assert_eq!(ns.code, 200);
    let mut names: Vec<&str> = ns.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    let pid = child.id().unwrap().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains("shutting down"), "{rest}");
    // "listening" is said once (the URL line on stdout), and logs piped to a file have no colour.
    let stderr = stderr.await.unwrap();
    let all = format!("{line}{rest}{stderr}");
    assert_eq!(all.matches("listening").count(), 1, "{all}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

/// `--plain-http` on a network address would make anyone who can connect the bootstrap admin:
/// the process refuses to start (before binding anything) and says how to opt in.
#[tokio::test]
async fn plain_http_on_a_network_address_is_refused_at_start() {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(env!("CARGO_BIN_EXE_sample-controller"))
            .args(["apiserver", "--plain-http", "--listen", "0.0.0.0:0"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to serve plain HTTP on 0.0.0.0:0")
            && stderr.contains("--insecure-allow-anonymous-admin-on-network"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening"),
        "nothing was served"
    );
}
