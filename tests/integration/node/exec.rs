//! `kubectl exec`, `kubectl attach` and port-forward against `sample-controller apiserver
//! --node-runtime process`: the server as a process (port 0, plain HTTP), driven by kubectl
//! 1.33 (WebSocket `v5.channel.k8s.io`) and by a small WebSocket client in this file (the
//! `v4.channel.k8s.io` protocol the Python client speaks, and hostile frames).
//!
//! Every wait has a generous timeout that only prevents a hang; no test asserts a duration.

use crate::support::{self, cluster::kubectl_bin};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

/// A running `sample-controller apiserver --node-runtime process --plain-http`.
struct Server {
    _child: support::StopOnDrop,
    addr: String,
    dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
            .args([
                "apiserver",
                "--listen",
                "127.0.0.1:0",
                "--plain-http",
                "--node-runtime",
                "process",
                "--kubeconfig-out",
            ])
            .arg(&kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .env_remove("RUST_LOG")
            // The pods' directories go under the test's own temporary directory, so they
            // go with it even if the server had to be killed (SIGKILL) when the test ended.
            .env("TMPDIR", dir.path())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line))
            .await
            .expect("the server printed no URL")
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("API server listening at ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        // Keep reading stdout so the server never blocks on it.
        tokio::spawn(async move {
            let mut sink = String::new();
            let _ = stdout.read_to_string(&mut sink).await;
        });
        let addr = url.trim_start_matches("http://").to_owned();
        Server {
            _child: support::StopOnDrop(child),
            addr,
            dir,
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// kubectl 1.33 (else the one on the PATH) with this server's kubeconfig; `None` (after
    /// saying so) when kubectl is not installed.
    fn kubectl(&self) -> Option<KubectlCmd> {
        let bin = kubectl_bin(Some("1.33")).or_else(|| kubectl_bin(None));
        let Some(bin) = bin else {
            eprintln!("SKIPPED: kubectl not found (looked for kubectl.1.33 and kubectl on PATH)");
            return None;
        };
        Some(KubectlCmd {
            bin,
            kubeconfig: self.kubeconfig(),
            home: self.dir.path().to_owned(),
        })
    }

    /// One HTTP/1.1 request with a JSON body; the status code and the body as JSON.
    async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        http_request(&self.addr, method, path, body).await
    }

    async fn create(&self, path: &str, obj: Value) {
        let (code, body) = self.request("POST", path, Some(&obj)).await;
        assert_eq!(code, 201, "{body}");
    }

    /// Waits until `pod` has every container running.
    async fn wait_running(&self, pod: &str) -> Value {
        let path = format!("/api/v1/namespaces/default/pods/{pod}");
        for _ in 0..600 {
            let (_, p) = self.request("GET", &path, None).await;
            let statuses = p["status"]["containerStatuses"].as_array().cloned();
            if let Some(s) = statuses
                && !s.is_empty()
                && s.iter().all(|c| c["state"]["running"].is_object())
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("pod {pod} never had all its containers running");
    }

    /// The log of a container (polls until `pred` holds).
    async fn log_until(&self, pod: &str, container: &str, pred: impl Fn(&str) -> bool) -> String {
        let path = format!("/api/v1/namespaces/default/pods/{pod}/log?container={container}");
        for _ in 0..600 {
            let mut s = TcpStream::connect(&self.addr).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = vec![];
            let _ = s.read_to_end(&mut out).await;
            let text = String::from_utf8_lossy(&out).into_owned();
            let body = text
                .split_once("\r\n\r\n")
                .map(|x| x.1.to_owned())
                .unwrap_or_default();
            if pred(&body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the log of {pod}/{container} never matched");
    }
}

/// One HTTP/1.1 request with a JSON body to `addr` (plain HTTP, so as the server's admin);
/// the status code and the body as JSON.
async fn http_request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = vec![];
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
    // Bodies here are small and not chunked in practice; take the JSON part.
    let json = body
        .find('{')
        .and_then(|i| serde_json::from_str(body[i..].trim_end_matches(['\r', '\n', '0'])).ok())
        .unwrap_or(Value::Null);
    (code, json)
}

struct KubectlCmd {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl KubectlCmd {
    async fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.home)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = stdin {
            let mut si = child.stdin.take().unwrap();
            si.write_all(input).await.unwrap();
            drop(si);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl ran for more than 60 s")
            .unwrap();
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

fn pod(name: &str, containers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": containers}})
}

const PODS: &str = "/api/v1/namespaces/default/pods";

/// The stdin line a test's exec reads (`read go`) before it prints anything.
///
/// client-go's WebSocket executor (kubectl ≥ 1.30) starts its reading goroutine before the
/// goroutine beside it has registered the session's streams, and drops a message for a
/// stream it has not registered yet (`Unknown stream id 1, discarding message`,
/// `tools/remotecommand/websocket.go`). A real cluster's output comes tens of milliseconds
/// after the upgrade (the API server's SPDY round trips to the kubelet, the runtime's exec),
/// which hides that race; the process node runs the command at once, and on a loaded machine
/// the client's first stdout message can beat its stream. The client sends stdin only after
/// registering every stream, so a command that prints after reading a line is never cut.
const GATE: &[u8] = b"go\n";

#[tokio::test]
async fn kubectl_exec_runs_commands_with_the_containers_environment_and_exit_code() {
    let server = Server::start().await;
    let Some(k) = server.kubectl() else {
        return;
    };
    server
        .create(
            PODS,
            pod(
                "shell",
                json!([{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                        "env": [{"name": "GREETING", "value": "hello"}]}]),
            ),
        )
        .await;
    server.wait_running("shell").await;

    // Each command below that prints reads a line of stdin first: see [`GATE`].
    let r = k
        .run(
            &[
                "exec",
                "-i",
                "shell",
                "--",
                "sh",
                "-c",
                "read go; echo out $GREETING; echo err >&2; exit 3",
            ],
            Some(GATE),
        )
        .await;
    assert_eq!(r.code, Some(3), "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "out hello\n");
    assert!(r.stderr.contains("err\n"), "{}", r.stderr);
    assert!(
        r.stderr.contains("command terminated with exit code 3"),
        "{}",
        r.stderr
    );

    // stdin piped in, to the end (the v5 close signal ends the command's input).
    let r = k
        .run(
            &["exec", "-i", "shell", "--", "sh", "-c", "cat; echo done"],
            Some(b"line one\nline two\n"),
        )
        .await;
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "line one\nline two\ndone\n");

    // The errors kubectl shows: an unknown container.
    let r = k
        .run(&["exec", "shell", "-c", "nope", "--", "true"], None)
        .await;
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr
            .contains("container nope is not valid for pod shell"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn kubectl_attach_writes_to_a_stdin_container_and_reads_its_output() {
    let server = Server::start().await;
    let Some(k) = server.kubectl() else {
        return;
    };
    server
        .create(
            PODS,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "echo"},
                   "spec": {"restartPolicy": "Never", "containers": [{
                       "name": "cat", "image": "busybox", "command": ["cat"],
                       "stdin": true, "stdinOnce": true}]}}),
        )
        .await;
    server.wait_running("echo").await;
    let r = k
        .run(
            &["attach", "-i", "echo", "-c", "cat"],
            Some(b"attached input\n"),
        )
        .await;
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "attached input\n");
    // stdinOnce: the end of the input closed the container's stdin, so `cat` ended.
    let path = format!("{PODS}/echo");
    for _ in 0..600 {
        let (_, p) = server.request("GET", &path, None).await;
        if p["status"]["phase"] == "Succeeded" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the attached cat never ended");
}

#[tokio::test]
async fn commands_read_configmap_and_secret_volumes_at_their_mount_paths() {
    let server = Server::start().await;
    server
        .create(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                   "data": {"key": "config-value", "other": "x"}}),
        )
        .await;
    server
        .create(
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
                   "data": {"token": "c2VjcmV0LXZhbHVl"}}),
        )
        .await;
    server
        .create(
            PODS,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vol"},
            "spec": {
                "volumes": [
                    {"name": "config", "configMap": {"name": "cfg",
                        "items": [{"key": "key", "path": "key"}]}},
                    {"name": "creds", "secret": {"secretName": "sec", "defaultMode": 256}}
                ],
                "containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["sh", "-c", "cat /etc/config/key; echo; sleep 600"],
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/config"},
                        {"name": "creds", "mountPath": "/var/run/creds"}
                    ]}]}}),
        )
        .await;
    server.wait_running("vol").await;
    // The container's own command read the file.
    server
        .log_until("vol", "main", |l| l.contains("config-value"))
        .await;
    let Some(k) = server.kubectl() else {
        return;
    };
    let r = k
        .run(
            &[
                "exec",
                "-i",
                "vol",
                "--",
                "sh",
                "-c",
                "read go; cat /var/run/creds/token; ls /etc/config",
            ],
            Some(GATE),
        )
        .await;
    assert_eq!(r.code, Some(0), "stderr: {}", r.stderr);
    // Only the listed item is there; the Secret's value is decoded.
    assert_eq!(r.stdout, "secret-valuekey\n", "stderr: {}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// A small WebSocket client.

/// A WebSocket connection to the server (the handshake done).
struct Ws {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// Opens a WebSocket to `path` offering `protocols`; the answer's status line and headers,
/// and the connection when the answer was `101`.
async fn ws_connect(addr: &str, path: &str, protocols: &str) -> (String, Option<Ws>) {
    ws_connect_as(addr, path, protocols, None).await
}

/// [`ws_connect`] with a bearer token.
async fn ws_connect_as(
    addr: &str,
    path: &str,
    protocols: &str,
    token: Option<&str>,
) -> (String, Option<Ws>) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         {auth}Sec-WebSocket-Protocol: {protocols}\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![];
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "connection closed during the handshake");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    if head.starts_with("HTTP/1.1 101") {
        (
            head,
            Some(Ws {
                stream,
                buf: vec![],
            }),
        )
    } else {
        (head, None)
    }
}

impl Ws {
    async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// A masked binary frame.
    async fn send_binary(&mut self, payload: &[u8]) {
        self.send_raw(&masked(0x82, payload)).await;
    }

    /// The next frame: opcode and payload; `None` when the connection ended.
    async fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let op = self.buf[0] & 0x0f;
                let (len, start) = match self.buf[1] & 0x7f {
                    126 if self.buf.len() >= 4 => (
                        usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                        4,
                    ),
                    127 if self.buf.len() >= 10 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&self.buf[2..10]);
                        (u64::from_be_bytes(b) as usize, 10)
                    }
                    n if n < 126 => (usize::from(n), 2),
                    _ => (usize::MAX, 0),
                };
                if len != usize::MAX && self.buf.len() >= start + len {
                    let payload = self.buf[start..start + len].to_vec();
                    self.buf.drain(..start + len);
                    return Some((op, payload));
                }
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(60), self.stream.read(&mut chunk))
                .await
                .expect("no frame within 60 s")
                .ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    let mut f = vec![first];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

fn exec_path(pod: &str, query: &str) -> String {
    format!("{PODS}/{pod}/exec?{query}")
}

/// Starts a pod running `sleep 600` and waits for it.
async fn sleeper(server: &Server, name: &str) {
    server
        .create(
            PODS,
            pod(
                name,
                json!([{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]),
            ),
        )
        .await;
    server.wait_running(name).await;
}

#[tokio::test]
async fn exec_over_the_v4_channel_protocol_ends_with_a_status() {
    let server = Server::start().await;
    sleeper(&server, "v4").await;
    let path = exec_path(
        "v4",
        "command=sh&command=-c&command=echo%20hi%3B%20echo%20oops%20%3E%262%3B%20exit%207&stdout=true&stderr=true",
    );
    let (head, ws) = ws_connect(&server.addr, &path, "v4.channel.k8s.io").await;
    assert!(
        head.contains("Sec-WebSocket-Protocol: v4.channel.k8s.io")
            || head
                .to_ascii_lowercase()
                .contains("sec-websocket-protocol: v4.channel.k8s.io"),
        "{head}"
    );
    let mut ws = ws.unwrap();
    let (mut stdout, mut stderr, mut status) = (vec![], vec![], None);
    while let Some((op, payload)) = ws.next().await {
        match (op, payload.first()) {
            (2, Some(1)) => stdout.extend_from_slice(&payload[1..]),
            (2, Some(2)) => stderr.extend_from_slice(&payload[1..]),
            (2, Some(3)) => status = Some(serde_json::from_slice::<Value>(&payload[1..]).unwrap()),
            (8, _) => break,
            _ => {}
        }
    }
    assert_eq!(stdout, b"hi\n");
    assert_eq!(stderr, b"oops\n");
    let status = status.expect("no Status on the error channel");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "7");
}

#[tokio::test]
async fn port_forward_over_websocket_channels_reaches_the_pods_port() {
    let server = Server::start().await;
    // A one-shot echo server on a port the pod picks and reports in its log.
    let Ok(out) = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
    else {
        eprintln!("SKIPPED: python3 not found; the pod's server needs it");
        return;
    };
    let python = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let script = "import socket\n\
                  s = socket.socket()\n\
                  s.bind(('127.0.0.1', 0))\n\
                  s.listen(1)\n\
                  print('port', s.getsockname()[1], flush=True)\n\
                  c, _ = s.accept()\n\
                  d = c.recv(100)\n\
                  c.sendall(b'echo:' + d)\n\
                  c.close()\n";
    server
        .create(
            PODS,
            pod(
                "web",
                json!([{"name": "main", "image": "python", "command": [python, "-c", script]}]),
            ),
        )
        .await;
    let log = server
        .log_until("web", "main", |l| l.contains("port "))
        .await;
    // (The body is chunked: the line sits between chunk sizes.)
    let port: u16 = log
        .split("port ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {log:?}"));
    let (head, ws) = ws_connect(
        &server.addr,
        &format!("{PODS}/web/portforward?ports={port}"),
        "v4.channel.k8s.io",
    )
    .await;
    let mut ws = ws.unwrap_or_else(|| panic!("{head}"));
    // The first message of each channel is the port, little-endian.
    let mut firsts = vec![];
    for _ in 0..2 {
        let (op, payload) = ws.next().await.unwrap();
        assert_eq!(op, 2);
        firsts.push(payload);
    }
    let le = port.to_le_bytes();
    assert_eq!(firsts, vec![vec![0, le[0], le[1]], vec![1, le[0], le[1]]]);
    ws.send_binary(b"\x00ping").await;
    let mut got = vec![];
    while let Some((op, payload)) = ws.next().await {
        if op == 2 && payload.first() == Some(&0) {
            got.extend_from_slice(&payload[1..]);
        }
        if op == 8 {
            break;
        }
    }
    assert_eq!(got, b"echo:ping");
}

#[tokio::test]
async fn bad_requests_get_the_real_servers_answers() {
    let server = Server::start().await;
    sleeper(&server, "target").await;
    // No such pod.
    let (head, _) = ws_connect(
        &server.addr,
        &exec_path("ghost", "command=true&stdout=1"),
        "v4.channel.k8s.io",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // An unknown subprotocol: refused before the upgrade.
    let (head, ws) = ws_connect(
        &server.addr,
        &exec_path("target", "command=true&stdout=1"),
        "v9.channel.k8s.io",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(ws.is_none());
    // No streams at all.
    let (head, _) = ws_connect(
        &server.addr,
        &exec_path("target", "command=true"),
        "v4.channel.k8s.io",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // Not an upgrade.
    let (code, status) = server
        .request("POST", &exec_path("target", "command=true&stdout=1"), None)
        .await;
    assert_eq!(code, 400);
    assert_eq!(status["message"], "Upgrade request required");
}

/// Reads frames until a close; its code.
async fn close_code(ws: &mut Ws) -> Option<u16> {
    while let Some((op, payload)) = ws.next().await {
        if op == 8 {
            return (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
        }
    }
    None
}

#[tokio::test]
async fn malformed_and_oversized_frames_close_the_connection() {
    let server = Server::start().await;
    sleeper(&server, "target").await;
    let path = exec_path("target", "command=cat&stdin=1&stdout=1");
    // An unmasked frame: protocol error.
    let (_, ws) = ws_connect(&server.addr, &path, "v4.channel.k8s.io").await;
    let mut ws = ws.unwrap();
    ws.send_raw(&[0x82, 0x02, 0x00, b'x']).await;
    assert_eq!(close_code(&mut ws).await, Some(1002));
    // A frame that declares more than the server accepts: refused from its header alone.
    let (_, ws) = ws_connect(&server.addr, &path, "v4.channel.k8s.io").await;
    let mut ws = ws.unwrap();
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 40).to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    ws.send_raw(&header).await;
    assert_eq!(close_code(&mut ws).await, Some(1009));
}

#[tokio::test]
async fn a_client_that_vanishes_mid_exec_leaves_no_process_behind() {
    let server = Server::start().await;
    sleeper(&server, "target").await;
    let path = exec_path(
        "target",
        "command=sh&command=-c&command=echo%20%24%24%3B%20exec%20sleep%20600&stdout=1",
    );
    let (_, ws) = ws_connect(&server.addr, &path, "v4.channel.k8s.io").await;
    let mut ws = ws.unwrap();
    let mut pid_text = vec![];
    while !pid_text.ends_with(b"\n") {
        let (op, payload) = ws.next().await.expect("the exec ended early");
        if op == 2 && payload.first() == Some(&1) {
            pid_text.extend_from_slice(&payload[1..]);
        }
    }
    let pid: u32 = String::from_utf8_lossy(&pid_text).trim().parse().unwrap();
    let proc_dir = format!("/proc/{pid}");
    assert!(Path::new(&proc_dir).exists());
    drop(ws);
    for _ in 0..600 {
        if !Path::new(&proc_dir).exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("process {pid} outlived its client");
}

#[tokio::test]
async fn a_websocket_exec_needs_create_on_pods_exec_and_a_process_node() {
    use embedded_cluster::Cluster;
    use embedded_cluster::NodeRuntime;

    // The simulated node runs nothing: a clear refusal, before any upgrade.
    let sim = Cluster::builder()
        .simulate(true)
        .plain_http(true)
        .start()
        .await
        .unwrap();
    let addr = sim.url().trim_start_matches("http://").to_owned();
    let (code, _) = http_request(
        &addr,
        "POST",
        PODS,
        Some(&pod(
            "p",
            json!([{"name": "main", "image": "busybox", "command": ["sleep", "60"]}]),
        )),
    )
    .await;
    assert_eq!(code, 201);
    for _ in 0..600 {
        let (_, p) = http_request(&addr, "GET", &format!("{PODS}/p"), None).await;
        if p["spec"]["nodeName"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (head, _) = ws_connect(
        &addr,
        &exec_path("p", "command=true&stdout=1"),
        "v5.channel.k8s.io",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");

    // RBAC: `get` on pods/exec is not enough for a WebSocket exec; `create` is needed too.
    let h = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .plain_http(true)
        .enforce_rbac(true)
        .extra_token("reader-token", "reader")
        .start()
        .await
        .unwrap();
    let addr = h.url().trim_start_matches("http://").to_owned();
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    let role = |verbs: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "exec"},
               "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": verbs}]})
    };
    let (code, body) = http_request(
        &addr,
        "POST",
        &format!("{rbac}/roles"),
        Some(&role(json!(["get"]))),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "exec"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
        "subjects": [{"kind": "User", "name": "reader", "apiGroup": "rbac.authorization.k8s.io"}]});
    let (code, body) = http_request(
        &addr,
        "POST",
        &format!("{rbac}/rolebindings"),
        Some(&binding),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let path = exec_path("anything", "command=true&stdout=1");
    let (head, _) = ws_connect_as(&addr, &path, "v5.channel.k8s.io", Some("reader-token")).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    // With `create` too, the request gets past authorization (to the missing pod's 404).
    let (code, body) = http_request(
        &addr,
        "PUT",
        &format!("{rbac}/roles/exec"),
        Some(&role(json!(["get", "create"]))),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (head, _) = ws_connect_as(&addr, &path, "v5.channel.k8s.io", Some("reader-token")).await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}
