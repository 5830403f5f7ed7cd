//! The `/machinery` page in a real browser: headless Chromium loads it from a running manager
//! while the book's example At goes PENDING → RUNNING → DONE, and the test reads the DOM the
//! page built (through the browser's DevTools protocol, `Runtime.evaluate`): the diagram's
//! boxes with their live counts, and the traced key's hops.
//!
//! Needs Debian's `chromium` (`hack/test-machinery-page.sh` installs it and runs this test);
//! without a Chromium on the `PATH` (`chromium`, `chromium-browser`, `google-chrome`) the test
//! prints `SKIPPED: ...` and passes.

use crate::support::at::*;

use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::ManagerConfig;

/// The first Chromium on the `PATH`.
fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_owned)
}

/// What the test reads from the page: its boxes, their counts, the hops listed, where the
/// key's token is and which box is lit, and the status line.
const STATE: &str = r##"JSON.stringify({
  boxes: [...document.querySelectorAll("g.box")].map((g) => g.id),
  counts: Object.fromEntries([...document.querySelectorAll("text.count")]
    .map((t) => [t.id.replace("count-", ""), t.textContent])),
  hops: [...document.querySelectorAll("#hops li")].map((li) => li.textContent),
  token: document.getElementById("token").getAttribute("cx"),
  active: (document.querySelector("g.box.active") || {}).id || null,
  status: document.getElementById("status").textContent,
})"##;

/// The DevTools port the browser prints on stderr (`DevTools listening on ws://...`).
async fn devtools_port(stderr: tokio::process::ChildStderr) -> u16 {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let find = async {
        while let Some(line) = lines.next_line().await.expect("the browser's stderr") {
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                return port.parse().expect("a port");
            }
        }
        panic!("the browser never said where DevTools listens");
    };
    let port = tokio::time::timeout(Duration::from_secs(60), find)
        .await
        .expect("DevTools listens within a minute");
    // The rest of its stderr is drained, so the browser never blocks writing to it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    port
}

/// The page's DevTools target, over a WebSocket: just enough of the protocol to evaluate an
/// expression in the page (`Runtime.evaluate`).
struct Page {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    next_id: u64,
}

impl Page {
    async fn open(port: u16) -> Page {
        // The page target's WebSocket path, from the DevTools HTTP endpoint.
        let list = sample_client_go::client::Client::new(sample_client_go::client::Config::new(
            format!("http://127.0.0.1:{port}").parse().unwrap(),
        ))
        .unwrap();
        let mut ws_path = None;
        for _ in 0..600 {
            let req = http::Request::get("/json/list")
                .body(bytes::Bytes::new())
                .unwrap();
            if let Ok((_, body)) = list.request_raw(req).await {
                let targets: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                ws_path = targets.as_array().into_iter().flatten().find_map(|t| {
                    (t["type"] == "page")
                        .then(|| t["webSocketDebuggerUrl"].as_str())
                        .flatten()
                        .and_then(|u| u.split_once(&format!("127.0.0.1:{port}")))
                        .map(|(_, path)| path.to_owned())
                });
            }
            if ws_path.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let path = ws_path.expect("the browser lists the page");
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "the handshake ended early"
            );
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Page {
            stream,
            buf: Vec::new(),
            next_id: 1,
        }
    }

    /// Reads the page's [`STATE`] every 100 ms until `done` says so (at most a minute);
    /// returns that state.
    async fn wait_for(
        &mut self,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut state = serde_json::Value::Null;
        for _ in 0..600 {
            state = self.eval(STATE).await;
            if done(&state) {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("gave up waiting for {what}; the page: {state}");
    }

    /// Evaluates `expression` (which returns a JSON string) in the page, parsed.
    async fn eval(&mut self, expression: &str) -> serde_json::Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = serde_json::json!({
            "id": id,
            "method": "Runtime.evaluate",
            "params": {"expression": expression, "returnByValue": true},
        })
        .to_string();
        self.stream
            .write_all(&masked_text(msg.as_bytes()))
            .await
            .unwrap();
        loop {
            let text = self.next_text().await;
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                let value = v["result"]["result"]["value"].as_str().unwrap_or("null");
                return serde_json::from_str(value).unwrap_or_default();
            }
        }
    }

    /// The next text message (frames of a fragmented one joined).
    async fn next_text(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let (fin, payload) = self.next_frame().await;
            message.extend_from_slice(&payload);
            if fin {
                return String::from_utf8_lossy(&message).into_owned();
            }
        }
    }

    async fn next_frame(&mut self) -> (bool, Vec<u8>) {
        loop {
            if self.buf.len() >= 2 {
                let fin = self.buf[0] & 0x80 != 0;
                let (len, start) = match self.buf[1] & 0x7f {
                    126 if self.buf.len() >= 4 => (
                        usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                        4,
                    ),
                    127 if self.buf.len() >= 10 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&self.buf[2..10]);
                        (usize::try_from(u64::from_be_bytes(b)).unwrap(), 10)
                    }
                    n if n < 126 => (usize::from(n), 2),
                    _ => (usize::MAX, 0),
                };
                if len != usize::MAX && self.buf.len() >= start + len {
                    let payload = self.buf[start..start + len].to_vec();
                    self.buf.drain(..start + len);
                    return (fin, payload);
                }
            }
            let mut chunk = [0u8; 16384];
            let n = tokio::time::timeout(Duration::from_secs(60), self.stream.read(&mut chunk))
                .await
                .expect("a DevTools answer within a minute")
                .unwrap();
            assert!(n > 0, "DevTools closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A masked text frame (a client's frames are masked).
fn masked_text(payload: &[u8]) -> Vec<u8> {
    let mask = [7u8, 1, 9, 3];
    let mut f = vec![0x81];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n <= usize::from(u16::MAX) => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[tokio::test]
async fn the_page_draws_the_diagram_with_live_counts_and_the_traced_keys_hops() {
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED: no Chromium on the PATH (chromium, chromium-browser, google-chrome); \
             hack/test-machinery-page.sh installs Debian's chromium and runs this test"
        );
        return;
    };
    let (server, client) = server().await;
    let config = ManagerConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..manager_config()
    };
    let manager = start_manager(&client, config, Clock::new()).await;
    let addr = manager
        .listeners
        .bound()
        .await
        .and_then(|b| b.metrics)
        .expect("the metrics server listens");

    // The browser opens the page and follows the key; the test creates the At (due in 2 s),
    // plays the kubelet for its pod, and reads the page's DOM over the DevTools protocol until
    // the DONE hop is on it.
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{addr}/machinery?key={NS}/example-at");
    let mut browser_process = tokio::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(&url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the browser starts");
    let devtools = devtools_port(browser_process.stderr.take().unwrap()).await;
    let mut page = Page::open(devtools).await;
    page.wait_for("the page to open its trace stream", |state| {
        state["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("following"))
    })
    .await;

    let due = in_the_future(&Clock::new(), Duration::from_secs(2));
    create_at(&client, &at("example-at", &due, "echo YAY")).await;
    wait_for_pod(&client, "example-at-pod").await;
    finish_pod(&client, "example-at-pod", 0).await;
    wait_for_phase(&client, "example-at", sample_operators::apis::AtPhase::Done).await;
    let state = page
        .wait_for("the DONE hop on the page", |state| {
            state["hops"].as_array().is_some_and(|h| {
                h.iter()
                    .any(|l| l.as_str().unwrap_or("").contains("write DONE"))
            })
        })
        .await;

    // The diagram: every box of the book's drawing.
    let boxes: Vec<&str> = state["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b.as_str())
        .collect();
    for id in [
        "box-apiserver",
        "box-reflector",
        "box-store",
        "box-handlers",
        "box-queue",
        "box-workers",
        "box-sync",
    ] {
        assert!(boxes.contains(&id), "{id} missing: {state}");
    }
    // Live counts, filled in from /machinery/counts.
    for (id, word) in [
        ("store", "cached"),
        ("queue", "depth"),
        ("sync", "syncs"),
        ("apiserver", "writes"),
        ("reflector", "events"),
    ] {
        let count = state["counts"][id].as_str().unwrap_or_default();
        assert!(count.contains(word), "the {id} box has no count: {state}");
    }
    // The traced key's hops, in the order they happened.
    let hops: Vec<&str> = state["hops"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h.as_str())
        .collect();
    let mut from = 0;
    for hop in [
        "watch  ADDED At default/example-at",
        "worker  get: a worker took it",
        "sync  sync_handler(default/example-at) starts",
        "note  plan: PENDING",
        "write  create Pod default/example-at-pod",
        "mapped to its owner",
        "write DONE",
    ] {
        let at = hops[from..]
            .iter()
            .position(|h| h.contains(hop))
            .unwrap_or_else(|| panic!("no hop {hop:?} after hop {from}:\n{}", hops.join("\n")));
        from += at + 1;
    }
    // The key's token moved onto a box, and that box is lit.
    assert_ne!(state["token"], "-20", "the token never moved: {state}");
    assert!(
        state["active"]
            .as_str()
            .is_some_and(|a| a.starts_with("box-")),
        "{state}"
    );

    drop(page);
    browser_process.kill().await.ok();
    manager.stop().await.unwrap();
    server.shutdown().await;
}
