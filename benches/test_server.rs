//! The embedded API server as test writers use it: a fixture started per test, often many at
//! once in one test process (`cargo bench -p benches --bench test_server`).
//!
//! Criterion measures, in process, `ApiServer::builder().start()` until the first request
//! (`GET /version` through this project's client) has its answer, with TLS (the default: a
//! fresh CA and serving certificate per server) and with plain HTTP; the server is shut down
//! after each sample. Then, once each, printed as a table:
//!
//! * the At CRD applied until `Established` and served (`crds::install`);
//! * idle memory per server: the process's RSS before and after starting 100 servers in it,
//!   each with the At CRD installed and answering, divided by 100;
//! * 100 servers in one process at once: started concurrently, every one answers;
//! * the standalone command (`sample-controller apiserver`, the release binary) from spawn
//!   until `/readyz` answers 200 (median of 10).
//!
//! docs/09 puts the figures beside envtest's and kwok's published ones.
//!
//! Two probes for measurements that do not depend on a quiet machine, chosen with
//! `TEST_SERVER_PROBE` (the criterion run and the table are then skipped):
//!
//! * `TEST_SERVER_PROBE=first-request TEST_SERVER_N=N [TEST_SERVER_TLS=0]`: starts N servers one
//!   after the other, each until its first answer, then shuts it down. Under
//!   `valgrind --tool=callgrind`, the instructions of N=11 less those of N=1, divided by 10, are
//!   one server's start and first answer, the process's one-time set-up left out.
//! * `TEST_SERVER_PROBE=crd TEST_SERVER_N=N`: N servers in turn, each started, given the At CRD
//!   and shut down (the same subtraction gives one CRD's cost).
//! * `TEST_SERVER_PROBE=idle TEST_SERVER_N=N [TEST_SERVER_TLS=0]`: starts N servers, each answering
//!   one request, drops the clients, and prints the RSS before and after and the difference per
//!   server (`/proc/self/status`, `VmRSS`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use criterion::Criterion;
use embedded_apiserver::{ApiServer, ApiServerHandle};
use sample_client_go::client::{Client, Config};
use sample_operators::apis::At;
use tokio::io::{AsyncBufReadExt, BufReader};

fn client(handle: &ApiServerHandle) -> Client {
    let config = Config::from_kubeconfig_yaml(&handle.kubeconfig_yaml(), None)
        .unwrap_or_else(|e| panic!("the server's kubeconfig: {e}"));
    Client::new(config).unwrap_or_else(|e| panic!("a client for the server: {e}"))
}

async fn start(tls: bool) -> ApiServerHandle {
    ApiServer::builder()
        .listen("127.0.0.1:0".parse().expect("an address"))
        .plain_http(!tls)
        .start()
        .await
        .unwrap_or_else(|e| panic!("starting a server: {e}"))
}

/// Start, first answer, shutdown; the time from `start()` to the answer.
async fn start_to_first_answer(tls: bool) -> Duration {
    let t0 = Instant::now();
    let handle = start(tls).await;
    let client = client(&handle);
    while client.apiserver_version().await.is_err() {
        tokio::task::yield_now().await;
    }
    let took = t0.elapsed();
    handle.shutdown().await;
    took
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn release_bin() -> PathBuf {
    std::env::var_os("SAMPLE_CONTROLLER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sample-controller")
        })
}

/// Spawn of the standalone command until `/readyz` answers 200.
async fn standalone_to_readyz(bin: &Path) -> Option<Duration> {
    let dir = tempfile::tempdir().ok()?;
    let kc = dir.path().join("kubeconfig");
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new(bin)
        .args(["apiserver", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kc)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let mut out = BufReader::new(child.stdout.take()?);
    let mut line = String::new();
    out.read_line(&mut line).await.ok()?;
    let yaml = std::fs::read_to_string(&kc).ok()?;
    let client = Client::new(Config::from_kubeconfig_yaml(&yaml, None).ok()?).ok()?;
    for _ in 0..10_000 {
        let req = http::Request::get("/readyz")
            .body(bytes::Bytes::new())
            .ok()?;
        if client.request_bytes(req).await.is_ok() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// `TEST_SERVER_PROBE=first-request`: `n` servers in turn, each started until its first answer
/// and shut down.
async fn probe_first_request(n: usize, tls: bool) {
    for _ in 0..n {
        start_to_first_answer(tls).await;
    }
    println!("{n} servers started, each answered");
}

/// `TEST_SERVER_PROBE=crd`: `n` servers in turn, each started, given the At CRD and shut down.
async fn probe_crd(n: usize, tls: bool) {
    for _ in 0..n {
        let handle = start(tls).await;
        sample_operators::apis::crds::install::<At>(&client(&handle))
            .await
            .unwrap_or_else(|e| panic!("installing the At CRD: {e}"));
        handle.shutdown().await;
    }
    println!("{n} servers started, each given the At CRD");
}

/// `TEST_SERVER_PROBE=idle`: `n` servers at once, each answering one request; the RSS they add.
async fn probe_idle(n: usize, tls: bool) {
    // One server first, so that what the process sets up once (the crypto provider, lazily
    // built tables, the runtime's threads) is not charged to the `n`.
    let warm = start(tls).await;
    let cl = client(&warm);
    cl.apiserver_version()
        .await
        .unwrap_or_else(|e| panic!("the warm-up server's answer: {e}"));
    drop(cl);
    warm.shutdown().await;
    drop(warm);
    let before = rss_kib();
    let mut servers = Vec::with_capacity(n);
    for _ in 0..n {
        let h = start(tls).await;
        let cl = client(&h);
        cl.apiserver_version()
            .await
            .unwrap_or_else(|e| panic!("a server's first answer: {e}"));
        servers.push(h);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    println!(
        "{n} idle servers (tls: {tls}): RSS {before} KiB before, {after} KiB after, {:.2} MiB per server",
        after.saturating_sub(before) as f64 / n as f64 / 1024.0
    );
    for h in &servers {
        h.shutdown().await;
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let n: usize = std::env::var("TEST_SERVER_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let tls = std::env::var("TEST_SERVER_TLS").map_or(true, |v| v != "0");
    match std::env::var("TEST_SERVER_PROBE").as_deref() {
        Ok("first-request") => return rt.block_on(probe_first_request(n, tls)),
        Ok("crd") => return rt.block_on(probe_crd(n, tls)),
        Ok("idle") => return rt.block_on(probe_idle(n, tls)),
        _ => {}
    }
    let mut c = Criterion::default().sample_size(30).configure_from_args();
    let mut group = c.benchmark_group("start_to_first_request");
    for (name, tls) in [("tls", true), ("plain_http", false)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += start_to_first_answer(tls).await;
                    }
                    total
                })
            })
        });
    }
    group.finish();

    rt.block_on(async {
        // The At CRD until Established and served.
        let handle = start(true).await;
        let cl = client(&handle);
        let t0 = Instant::now();
        sample_operators::apis::crds::install::<At>(&cl)
            .await
            .unwrap_or_else(|e| panic!("installing the At CRD: {e}"));
        let crd = t0.elapsed();
        handle.shutdown().await;

        // 100 servers at once in this process, each with the At CRD, each answering.
        let before = rss_kib();
        let t0 = Instant::now();
        let mut servers = Vec::new();
        let mut starting = tokio::task::JoinSet::new();
        for _ in 0..100 {
            starting.spawn(async {
                let h = start(true).await;
                let cl = client(&h);
                sample_operators::apis::crds::install::<At>(&cl)
                    .await
                    .unwrap_or_else(|e| panic!("installing the At CRD: {e}"));
                (h, cl)
            });
        }
        while let Some(s) = starting.join_next().await {
            servers.push(s.unwrap_or_else(|e| panic!("a server's start: {e}")));
        }
        let hundred = t0.elapsed();
        let mut answering = 0;
        for (_, cl) in &servers {
            answering += cl.apiserver_version().await.is_ok() as usize;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let per_server = (rss_kib().saturating_sub(before)) as f64 / 100.0 / 1024.0;
        for (h, _) in &servers {
            h.shutdown().await;
        }

        let bin = release_bin();
        let mut standalone = Vec::new();
        if bin.exists() {
            for _ in 0..10 {
                if let Some(d) = standalone_to_readyz(&bin).await {
                    standalone.push(d);
                }
            }
        }
        standalone.sort();
        println!("\n| the test server | figure |");
        println!("|---|---:|");
        println!("| At CRD applied to Established and served | {:.1} ms |", crd.as_secs_f64() * 1e3);
        println!("| 100 servers started at once in one process, CRD installed | {:.2} s, {answering} of 100 answering |", hundred.as_secs_f64());
        println!("| idle RSS per server (100 in one process, At CRD installed) | {per_server:.1} MiB |");
        match standalone.get(standalone.len() / 2) {
            Some(d) => println!(
                "| standalone `sample-controller apiserver` spawn to /readyz 200 (median of {}) | {:.0} ms |",
                standalone.len(),
                d.as_secs_f64() * 1e3
            ),
            None => println!(
                "| standalone command to /readyz | not measured: build {} first (cargo build --release) |",
                bin.display()
            ),
        }
    });
}
