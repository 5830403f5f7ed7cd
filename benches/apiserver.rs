//! Write throughput of the embedded API server under API Priority and Fairness.
//!
//! Run with `hack/bench-apiserver.sh` (or `cargo bench -p benches --bench apiserver -- [pods] [concurrency]`,
//! defaults 20,000 pods and 64 requests in flight). `SAMPLE_CONTROLLER_BIN=path` benchmarks
//! another build of the server with the same load generator (to compare two builds run
//! alternately on a busy machine).
//!
//! The server runs as its own process (`sample-controller apiserver --plain-http
//! --simulate=false`, the release binary), so its CPU time can be read from
//! `/proc/<pid>/stat` apart from the load generator's. The load generator is a hyper HTTP/2
//! client on this process's runtime, multiplexing `concurrency` requests over four connections;
//! it authenticates as user `bench` (a token from `--token-auth-file`), which is not in
//! `system:masters`, so every request is classified and dispatched by APF (FlowSchema
//! `global-default`, 49 of the 600 default seats). Ten watches on the benchmark namespace's pods
//! stay open throughout, receiving every event.
//!
//! Phases, each over all pods: **create** (`POST` with `generateName`), **update** (`PUT` of the
//! object as created with one more label), **patch** (JSON merge patch of a label). For each:
//! requests per second (wall clock), p50 and p99 latency as the client saw it, the server's CPU
//! time per request, and the count of non-2xx answers (429s included).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

type Http = Client<HttpConnector, Full<Bytes>>;

const TOKEN: &str = "bench-token";
const NS: &str = "bench";

fn server_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which ends with ')'): utime is the 14th field overall.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let total = ticks(11) + ticks(12);
    Duration::from_millis(total * 10) // USER_HZ = 100 on Linux
}

async fn request(
    c: &Http,
    base: &str,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> Result<(u16, Bytes), String> {
    let req = hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", ct)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = c.request(req).await.map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, bytes))
}

struct PhaseResult {
    name: &'static str,
    n: usize,
    wall: Duration,
    cpu: Duration,
    latencies: Vec<Duration>,
    failures: usize,
}

impl PhaseResult {
    fn row(&mut self) -> String {
        self.latencies.sort_unstable();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 * p) as usize)
                .min(self.latencies.len().saturating_sub(1));
            self.latencies.get(i).copied().unwrap_or_default()
        };
        format!(
            "| {} | {} | {:.0}/s | {:.2} ms | {:.2} ms | {:.0} µs | {} |",
            self.name,
            self.n,
            self.n as f64 / self.wall.as_secs_f64(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            self.cpu.as_secs_f64() * 1e6 / self.n as f64,
            self.failures,
        )
    }
}

/// Runs `make(i)` for `i in 0..n` with `concurrency` in flight; returns per-request results.
async fn phase<F, Fut>(
    name: &'static str,
    n: usize,
    concurrency: usize,
    pid: u32,
    make: F,
) -> (PhaseResult, Vec<Option<Value>>)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(u16, Bytes), String>> + Send,
{
    let make = Arc::new(make);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cpu0 = server_cpu(pid);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (make, next) = (make.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return out;
                }
                let start = Instant::now();
                let r = make(i).await;
                let took = start.elapsed();
                let obj = match &r {
                    Ok((code, body)) if *code < 300 => serde_json::from_slice::<Value>(body).ok(),
                    _ => None,
                };
                out.push((i, took, r.map(|(c, _)| c).unwrap_or(0), obj));
            }
        }));
    }
    let mut latencies = Vec::with_capacity(n);
    let mut objects = vec![None; n];
    let mut failures = 0;
    for t in tasks {
        for (i, took, code, obj) in t.await.expect("load task") {
            latencies.push(took);
            if !(200..300).contains(&code) {
                failures += 1;
            }
            objects[i] = obj;
        }
    }
    let wall = t0.elapsed();
    let cpu = server_cpu(pid).saturating_sub(cpu0);
    (
        PhaseResult {
            name,
            n,
            wall,
            cpu,
            latencies,
            failures,
        },
        objects,
    )
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let pods: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let concurrency: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{TOKEN},bench,bench-uid\n")).expect("token file");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut server = start_server(&tokens, port);
    let pid = server.id();
    let base = format!("http://127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let clients: Vec<Http> = (0..4)
            .map(|_| {
                Client::builder(TokioExecutor::new())
                    .http2_only(true)
                    .build_http()
            })
            .collect();
        let admin: Http = Client::builder(TokioExecutor::new()).build_http();
        wait_and_create_namespace(&admin, &base).await;
        let watches = open_watches(&clients, &base);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut phases = write_phases(clients, &base, pods, concurrency, pid).await;
        let (_, metrics) = request(&admin, &base, "GET", "/metrics", "text/plain", vec![])
            .await
            .unwrap_or_default();
        print_report(
            pods,
            concurrency,
            &mut phases,
            &String::from_utf8_lossy(&metrics),
        );
        for w in watches {
            w.abort();
        }
    });
    let _ = server.kill();
    let _ = server.wait();
}

/// Starts the server under test: `sample-controller apiserver`, plain HTTP, no simulated
/// node, on `port`, with the benchmark's token file.
fn start_server(tokens: &std::path::Path, port: u16) -> std::process::Child {
    // SAMPLE_CONTROLLER_BIN runs another build of the server (an A/B comparison).
    // hack/bench-apiserver.sh builds the binary and sets it; run directly, the workspace's
    // release build is used.
    let bin = std::env::var("SAMPLE_CONTROLLER_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/sample-controller"
        )
        .to_string()
    });
    std::process::Command::new(&bin)
        .args(["apiserver", "--plain-http", "--simulate=false", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--token-auth-file")
        .arg(tokens)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("starting {bin}: {e} (build it with `cargo build --release`, or run hack/bench-apiserver.sh)")
        })
}

/// Waits (up to 10 s) for the server to answer `/healthz`, then creates the benchmark's
/// namespace.
async fn wait_and_create_namespace(admin: &Http, base: &str) {
    for _ in 0..200 {
        if request(admin, base, "GET", "/healthz", "text/plain", vec![])
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let (code, _) = request(
        admin,
        base,
        "POST",
        "/api/v1/namespaces",
        "application/json",
        serde_json::to_vec(&ns).unwrap_or_default(),
    )
    .await
    .expect("create namespace");
    assert!(code < 300, "namespace: {code}");
}

/// Ten watches on the benchmark namespace's pods, drained for the whole run; each task
/// returns the number of events it received.
fn open_watches(clients: &[Http], base: &str) -> Vec<tokio::task::JoinHandle<usize>> {
    let mut watches = Vec::new();
    for w in 0..10 {
        let c = clients[w % clients.len()].clone();
        let base = base.to_owned();
        watches.push(tokio::spawn(async move {
            let req = hyper::Request::builder()
                .uri(format!(
                    "{base}/api/v1/namespaces/{NS}/pods?watch=true&allowWatchBookmarks=true"
                ))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Full::new(Bytes::new()))
                .expect("watch request");
            let mut events = 0usize;
            if let Ok(resp) = c.request(req).await {
                let mut body = resp.into_body();
                while let Some(Ok(frame)) = body.frame().await {
                    if let Ok(data) = frame.into_data() {
                        events += data.iter().filter(|b| **b == b'\n').count();
                    }
                }
            }
            events
        }));
    }
    watches
}

/// The three phases over all `pods`, one after the other: create (`POST` with
/// `generateName`), update (`PUT` of each created object with one more label) and merge patch
/// (a label).
async fn write_phases(
    clients: Vec<Http>,
    base: &str,
    pods: usize,
    concurrency: usize,
    pid: u32,
) -> [PhaseResult; 3] {
    let pod = |i: usize| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": "bench-", "labels": {"app": "bench", "i": i.to_string()}},
               "spec": {"containers": [{"name": "main", "image": "nginx:1.27",
                                        "ports": [{"containerPort": 80}]}]}})
    };
    let shared = Arc::new((clients, base.to_owned()));
    let s = shared.clone();
    let (create, created) = phase("create", pods, concurrency, pid, move |i| {
        let s = s.clone();
        async move {
            let body = serde_json::to_vec(&pod(i)).unwrap_or_default();
            request(
                &s.0[i % s.0.len()],
                &s.1,
                "POST",
                &format!("/api/v1/namespaces/{NS}/pods"),
                "application/json",
                body,
            )
            .await
        }
    })
    .await;
    let created = Arc::new(created);
    let s = shared.clone();
    let objs = created.clone();
    let (update, _) = phase("update", pods, concurrency, pid, move |i| {
        let s = s.clone();
        let obj = objs[i].clone();
        async move {
            let Some(mut obj) = obj else {
                return Err("create failed".to_owned());
            };
            obj["metadata"]["labels"]["updated"] = json!("yes");
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let body = serde_json::to_vec(&obj).unwrap_or_default();
            request(
                &s.0[i % s.0.len()],
                &s.1,
                "PUT",
                &format!("/api/v1/namespaces/{NS}/pods/{name}"),
                "application/json",
                body,
            )
            .await
        }
    })
    .await;
    let s = shared.clone();
    let objs = created.clone();
    let (patch, _) = phase("merge patch", pods, concurrency, pid, move |i| {
        let s = s.clone();
        let name = objs[i]
            .as_ref()
            .and_then(|o| o["metadata"]["name"].as_str().map(str::to_owned));
        async move {
            let Some(name) = name else {
                return Err("create failed".to_owned());
            };
            let body =
                serde_json::to_vec(&json!({"metadata": {"labels": {"patched": i.to_string()}}}))
                    .unwrap_or_default();
            request(
                &s.0[i % s.0.len()],
                &s.1,
                "PATCH",
                &format!("/api/v1/namespaces/{NS}/pods/{name}"),
                "application/merge-patch+json",
                body,
            )
            .await
        }
    })
    .await;
    [create, update, patch]
}

/// Prints the phases as a Markdown table, then the server's APF counters for the benchmark's
/// FlowSchema and any rejections.
fn print_report(pods: usize, concurrency: usize, phases: &mut [PhaseResult], metrics: &str) {
    println!(
        "{pods} pods, {concurrency} requests in flight over 4 HTTP/2 connections, 10 pod watches open, APF on (user `bench`, FlowSchema global-default)\n"
    );
    println!("| phase | requests | throughput | p50 | p99 | server CPU per request | non-2xx |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for p in phases.iter_mut() {
        println!("{}", p.row());
    }
    for line in metrics.lines().filter(|l| {
        l.starts_with("apiserver_flowcontrol_dispatched_requests_total")
            && l.contains("global-default")
            || l.starts_with("apiserver_flowcontrol_rejected_requests_total")
    }) {
        println!("\n    {line}");
    }
}
