//! `kubectl exec`, `attach` and `port-forward` over SPDY/3.1 against the standalone server
//! (`sample-controller apiserver --node-runtime process`): kubectl 1.28 speaks nothing but SPDY
//! for all three; kubectl 1.33's port-forward runs SPDY inside a WebSocket
//! (`SPDY/3.1+portforward.k8s.io`).
//!
//! The `own_client` tests speak SPDY with this crate's own framer to the in-process server, so
//! the handshake and an exec are checked even where no kubectl is installed. A missing kubectl
//! version (or `python3`, which the port-forward pods run) skips its test with a message. Every wait has a generous timeout that only prevents a hang; no test asserts a
//! duration.

use crate::support::{self, cluster::kubectl_bin};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// The standalone server, its kubeconfig, killed when dropped.
struct Server {
    _child: support::StopOnDrop,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    home: PathBuf,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--node-runtime",
            "process",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        // Pods' volume directories go under the test's own directory: a server killed with
        // SIGKILL (when SIGTERM did not end it) cannot remove them itself.
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the server printed its URL within 60 s")
        .unwrap()
        .unwrap();
    assert!(first.starts_with("API server listening at "), "{first}");
    // Keep reading its output so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Server {
        _child: support::StopOnDrop(child),
        _dir: dir,
        kubeconfig,
        home,
    }
}

/// What one kubectl run left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Server {
    fn kubectl(&self, bin: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.join("cache"))
            .args(args)
            .env("HOME", &self.home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, bin: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut cmd = self.kubectl(bin, args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            let input = input.to_vec();
            // Written from a task: kubectl may print while it reads.
            tokio::spawn(async move {
                let _ = pipe.write_all(&input).await;
            });
        }
        let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} ran for more than 90 s"))
            .unwrap();
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, bin: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
        let run = self.run(bin, args, stdin).await;
        assert_eq!(
            run.code,
            Some(0),
            "kubectl {args:?}\nstdout: {}\nstderr: {}",
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    /// Creates a pod from JSON and waits until it runs.
    async fn pod(&self, bin: &Path, manifest: serde_json::Value) {
        let name = manifest["metadata"]["name"].as_str().unwrap().to_owned();
        let text = manifest.to_string();
        self.ok(bin, &["apply", "-f", "-"], Some(text.as_bytes()))
            .await;
        for _ in 0..600 {
            let phase = self
                .ok(
                    bin,
                    &["get", "pod", &name, "-o", "jsonpath={.status.phase}"],
                    None,
                )
                .await;
            if phase == "Running" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("pod {name} did not reach Running");
    }

    /// Waits until the pod's log has a first line, and returns it.
    async fn first_log_line(&self, bin: &Path, pod: &str) -> String {
        for _ in 0..600 {
            let log = self.ok(bin, &["logs", pod], None).await;
            if let Some(line) = log.lines().next() {
                return line.trim().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("pod {pod} logged nothing");
    }
}

fn kubectl(version: &str) -> Option<PathBuf> {
    let found = kubectl_bin(Some(version));
    if found.is_none() {
        eprintln!(
            "SKIPPED: kubectl.{version} not found beside the kubectl on PATH; this test needs it"
        );
    }
    found
}

fn pod(name: &str, command: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox", "command": command}]}
    })
}

#[tokio::test]
async fn kubectl_1_28_exec_over_spdy_gives_stdout_stderr_and_the_exit_code() {
    let Some(bin) = kubectl("1.28") else { return };
    let s = server().await;
    s.pod(&bin, pod("sleeper", &["sleep", "3600"])).await;

    let run = s
        .run(
            &bin,
            &[
                "exec",
                "sleeper",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            None,
        )
        .await;
    assert_eq!(run.stdout, "out\n", "stderr: {}", run.stderr);
    assert!(run.stderr.starts_with("err\n"), "{}", run.stderr);
    assert!(
        run.stderr.contains("command terminated with exit code 3"),
        "{}",
        run.stderr
    );
    assert_eq!(run.code, Some(3));

    // A clean exit, and more output than one SPDY window (kubectl sends no WINDOW_UPDATE).
    let out = s
        .ok(
            &bin,
            &[
                "exec",
                "sleeper",
                "--",
                "sh",
                "-c",
                "head -c 300000 /dev/zero | tr '\\0' x",
            ],
            None,
        )
        .await;
    assert_eq!(out.len(), 300_000);
    assert!(out.bytes().all(|b| b == b'x'));
}

#[tokio::test]
async fn kubectl_1_28_exec_i_pipes_stdin_through_spdy() {
    let Some(bin) = kubectl("1.28") else { return };
    let s = server().await;
    s.pod(&bin, pod("sleeper", &["sleep", "3600"])).await;

    let out = s
        .ok(
            &bin,
            &["exec", "-i", "sleeper", "--", "cat"],
            Some(b"hello\nthrough spdy\n"),
        )
        .await;
    assert_eq!(out, "hello\nthrough spdy\n");

    // More input than a window, into a process that reads it all.
    let big = vec![b'y'; 400_000];
    let out = s
        .ok(
            &bin,
            &["exec", "-i", "sleeper", "--", "wc", "-c"],
            Some(&big),
        )
        .await;
    assert_eq!(out.trim(), "400000");
}

#[tokio::test]
async fn kubectl_1_28_attach_i_talks_to_a_containers_stdin() {
    let Some(bin) = kubectl("1.28") else { return };
    let s = server().await;
    let mut manifest = pod(
        "talker",
        &["sh", "-c", "while read line; do echo \"heard $line\"; done"],
    );
    manifest["spec"]["containers"][0]["stdin"] = true.into();
    manifest["spec"]["containers"][0]["stdinOnce"] = true.into();
    s.pod(&bin, manifest).await;

    let out = s
        .ok(&bin, &["attach", "-i", "talker"], Some(b"one\ntwo\n"))
        .await;
    assert!(out.contains("heard one\nheard two\n"), "{out}");
}

/// A pod whose process serves HTTP on a port it picks itself and logs the number.
const HTTP_SERVER: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from the pod, path " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

fn python3() -> bool {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: python3 not found; the port-forward pod runs an HTTP server in it");
    }
    found
}

/// Port-forwards to a pod's HTTP server and sends requests through. With `tunnel`, kubectl's
/// log (`-v=6`) must show that its WebSocket tunnel was taken, not the fallback to SPDY.
async fn port_forward_reaches_the_pod(version: &str, tunnel: bool) {
    let Some(bin) = kubectl(version) else { return };
    if !python3() {
        return;
    }
    let s = server().await;
    s.pod(&bin, pod("web", &["python3", "-c", HTTP_SERVER]))
        .await;
    let port = s.first_log_line(&bin, "web").await;
    let port: u16 = port.parse().unwrap_or_else(|_| panic!("port {port:?}"));

    let target = format!(":{port}");
    let mut args = vec!["port-forward", "--address", "127.0.0.1", "pod/web", &target];
    if tunnel {
        args.push("-v=6");
    }
    let mut forward = s.kubectl(&bin, &args).spawn().unwrap();
    let mut stderr = forward.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut lines = BufReader::new(forward.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("kubectl printed where it forwards within 60 s")
        .unwrap()
        .expect("a line");
    let local = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|rest| rest.strip_suffix(&format!(" -> {port}")))
        .unwrap_or_else(|| panic!("unexpected line {line:?}"));
    let local: u16 = local.parse().unwrap();

    // Several connections, one after another: each is a new pair of SPDY streams.
    for path in ["/first", "/second", "/third"] {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local))
            .await
            .unwrap();
        conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(60), conn.read_to_string(&mut answer))
            .await
            .expect("an answer within 60 s")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
        assert!(
            answer.ends_with(&format!("hello from the pod, path {path}\n")),
            "{answer}"
        );
    }
    forward.kill().await.unwrap();
    let log = log.await.unwrap();
    if tunnel {
        assert!(
            log.contains("Before WebSocket Upgrade Connection"),
            "kubectl did not try the tunnel:\n{log}"
        );
        assert!(
            !log.contains("fallback to secondary dialer"),
            "kubectl fell back to SPDY without the tunnel:\n{log}"
        );
    }
}

#[tokio::test]
async fn kubectl_1_28_port_forward_over_spdy_reaches_the_pods_port() {
    port_forward_reaches_the_pod("1.28", false).await;
}

#[tokio::test]
async fn kubectl_1_33_port_forward_over_the_websocket_tunnel_reaches_the_pods_port() {
    port_forward_reaches_the_pod("1.33", true).await;
}

// ---------------------------------------------------------------------------------------------
// Without kubectl: this crate's own SPDY framer as the client, on the in-process server.

mod own_client {
    use crate::support::cluster;

    use bytes::{Bytes, BytesMut};
    use embedded_cluster::NodeRuntime;
    use embedded_cluster::node::spdy::{Frame, FrameEncoder, FrameReader};
    use embedded_cluster::{Cluster, ClusterHandle};
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn running_sleeper() -> ClusterHandle {
        let h = Cluster::builder()
            .simulate(true)
            .node_runtime(NodeRuntime::Process)
            .plain_http(true)
            .start()
            .await
            .unwrap();
        cluster::create(
            &h,
            "",
            "pods",
            "default",
            cluster::pod("sleeper", json!(["sleep", "3600"]), Some("Never")),
        );
        cluster::wait_phase(&h, "default", "sleeper", "Running").await;
        h
    }

    /// Sends an upgrade request; returns the status line with the headers, and the connection.
    async fn upgrade(h: &ClusterHandle, path: &str, protocols: &[&str]) -> (String, TcpStream) {
        let addr = h.url().trim_start_matches("http://").to_owned();
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n"
        );
        for p in protocols {
            request.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
        }
        request.push_str("\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        // Byte by byte up to the blank line: what follows is the upgraded protocol.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(conn.read(&mut byte).await.unwrap(), 1, "{head:?}");
            head.push(byte[0]);
        }
        (String::from_utf8(head).unwrap().to_ascii_lowercase(), conn)
    }

    #[tokio::test]
    async fn the_handshake_refuses_missing_and_unknown_protocols_as_the_kubelet() {
        let h = running_sleeper().await;
        let path = "/api/v1/namespaces/default/pods/sleeper/exec?command=true&stdout=true";
        let (head, _) = upgrade(&h, path, &[]).await;
        assert!(head.starts_with("http/1.1 400"), "{head}");
        let (head, _) = upgrade(&h, path, &["v5.channel.k8s.io"]).await;
        assert!(head.starts_with("http/1.1 403"), "{head}");
        for p in ["v4", "v3", "v2"] {
            let want = format!("x-accepted-stream-protocol-versions: {p}.channel.k8s.io\r\n");
            assert!(head.contains(&want), "{head}");
        }
    }

    /// What an exec over SPDY sent back: stdout, the error stream, and the order of events.
    struct Outcome {
        stdout: Vec<u8>,
        status: serde_json::Value,
        events: Vec<String>,
    }

    /// Runs an exec with the query `query`: opens `streams` (id, streamType) as kubectl does
    /// (closing its half of the error stream at once), then sends `then`, and reads until the
    /// server closes the connection.
    async fn exec(
        h: &ClusterHandle,
        query: &str,
        streams: &[(u32, &str)],
        then: Vec<Frame>,
    ) -> Outcome {
        let path = format!("/api/v1/namespaces/default/pods/sleeper/exec?{query}");
        let (head, conn) = upgrade(h, &path, &["v4.channel.k8s.io", "v3.channel.k8s.io"]).await;
        assert!(head.starts_with("http/1.1 101"), "{head}");
        assert!(head.contains("upgrade: spdy/3.1\r\n"), "{head}");
        assert!(
            head.contains("x-stream-protocol-version: v4.channel.k8s.io\r\n"),
            "{head}"
        );
        let (read, mut write) = tokio::io::split(conn);
        let mut frames = FrameReader::new(read);
        let mut encoder = FrameEncoder::new();
        let mut out = BytesMut::new();
        let mut sends: Vec<Frame> = streams
            .iter()
            .map(|(id, kind)| Frame::SynStream {
                stream_id: *id,
                associated_to: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers: vec![("streamtype".into(), (*kind).into())],
            })
            .collect();
        sends.push(Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new(),
        });
        sends.extend(then);
        for frame in &sends {
            encoder.encode(frame, &mut out).unwrap();
        }
        write.write_all(&out).await.unwrap();

        let mut stdout = Vec::new();
        let mut status = Vec::new();
        let mut events = Vec::new();
        let read_all = async {
            while let Some(frame) = frames.read_frame().await.unwrap() {
                match frame {
                    Frame::SynReply { stream_id, .. } => events.push(format!("reply {stream_id}")),
                    Frame::Data {
                        stream_id: 3,
                        data,
                        fin,
                    } => {
                        stdout.extend_from_slice(&data);
                        if fin {
                            events.push("stdout end".into());
                        }
                    }
                    Frame::Data {
                        stream_id: 1,
                        data,
                        fin,
                    } => {
                        status.extend_from_slice(&data);
                        if fin {
                            events.push("error end".into());
                        }
                    }
                    Frame::Data {
                        stream_id,
                        fin: true,
                        ..
                    } => events.push(format!("end {stream_id}")),
                    Frame::GoAway { status, .. } => events.push(format!("goaway {status}")),
                    other => panic!("unexpected {other:?}"),
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), read_all)
            .await
            .expect("the exec ended within 60 s");
        Outcome {
            stdout,
            status: serde_json::from_slice(&status).unwrap(),
            events,
        }
    }

    #[tokio::test]
    async fn an_exec_over_spdy_sends_output_then_the_v4_status_then_goaway() {
        let h = running_sleeper().await;
        let query = "command=sh&command=-c&command=echo%20hi%3B%20exit%207&stdout=true";
        let o = exec(&h, query, &[(1, "error"), (3, "stdout")], vec![]).await;
        assert_eq!(o.stdout, b"hi\n");
        assert_eq!(o.status["reason"], "NonZeroExitCode");
        assert_eq!(o.status["details"]["causes"][0]["message"], "7");
        assert_eq!(
            o.events,
            ["reply 1", "reply 3", "stdout end", "error end", "goaway 0"]
        );
    }

    #[tokio::test]
    async fn a_tty_exec_waits_for_the_resize_stream_and_takes_its_events() {
        // With tty=true, v4 expects a `resize` stream too (stdin, stdout and resize here).
        let h = running_sleeper().await;
        let query = "command=head&command=-n1&stdin=true&stdout=true&tty=true";
        let streams = [(1, "error"), (3, "stdout"), (5, "resize"), (7, "stdin")];
        let then = vec![
            Frame::Data {
                stream_id: 5,
                fin: false,
                data: Bytes::from_static(br#"{"Width":80,"Height":24}"#),
            },
            Frame::Data {
                stream_id: 7,
                fin: true,
                data: Bytes::from_static(b"typed\n"),
            },
        ];
        let o = exec(&h, query, &streams, then).await;
        assert_eq!(o.status["status"], "Success", "{:?}", o.status);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("typed"),
            "{:?}",
            o.stdout
        );
        assert_eq!(o.events[..4], ["reply 1", "reply 3", "reply 5", "reply 7"]);
        assert!(
            o.events
                .ends_with(&["error end".to_string(), "goaway 0".to_string()])
        );
    }
}
