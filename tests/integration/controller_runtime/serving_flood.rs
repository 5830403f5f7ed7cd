//! Memory comes back after a connection flood, on both servers: `sample-controller apiserver`
//! and the manager's metrics and probe servers (`sample-controller run`), each as its own
//! process so its resident memory (`VmRSS` of `/proc/<pid>/status`) is its alone.
//!
//! Each test opens thousands of connections that send the start of a request and stop
//! (a slow-headers client: the server has to keep a connection task, a socket and a read
//! buffer for each), checks that a real request is still answered while they are all open, then
//! closes them and waits for the process's RSS to come back to within [`RETURN_BOUND`] of what
//! it was before. The regression this guards against held on to ~28 KB per connection after
//! 10,000 connections had closed (39 → 286 MB, and stayed); the bound is far below what a flood
//! this size would keep, and far above allocator noise.
//!
//! The connection-limit flags are exercised on the way: the floods are larger than the
//! metrics/probe server's default of 1,024 connections, so `--max-connections` must take
//! effect for them to be served, and `--header-read-timeout` is raised so the server does not
//! end the flood for us.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::support;

/// Connections in a flood.
const FLOOD: usize = 6_000;
/// How far above its pre-flood RSS a process may stay once the flood has closed.
const RETURN_BOUND: u64 = 40 << 20;

use crate::support::bin;

/// Resident set size of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no VmRSS for pid {pid}"))
}

/// A minimal HTTP/1.1 GET on a fresh connection: the status code, or `None`.
async fn status_of(addr: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Opens `n` connections to each address, each sending a request line and one header but never
/// the blank line that ends the headers.
async fn flood(addrs: &[String], n: usize) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n * addrs.len());
    for i in 0..n {
        for addr in addrs {
            let mut s = TcpStream::connect(addr.as_str())
                .await
                .unwrap_or_else(|e| panic!("connection {i} to {addr}: {e}"));
            // A server that already closed it is fine (the write may then fail).
            let _ = s
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: flood\r\n")
                .await;
            conns.push(s);
        }
    }
    conns
}

/// Waits (bounded) until `pid`'s RSS is at most `limit`; the last reading either way.
async fn settle_below(pid: u32, limit: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = rss(pid);
        if now <= limit || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The flood (`per_addr` connections to each address), the check that `probe` (an address and
/// a path answering 200) is served during it, and the check that memory comes back after it.
async fn flood_and_return(pid: u32, addrs: &[String], per_addr: usize, probe: (&str, &str)) {
    // Warm up: the first requests allocate what every later one reuses.
    for _ in 0..50 {
        assert_eq!(status_of(probe.0, probe.1).await, Some(200));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss(pid);
    let conns = flood(addrs, per_addr).await;
    let answered = tokio::time::timeout(Duration::from_secs(20), status_of(probe.0, probe.1))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} was not answered while {} connections were open",
                probe.1,
                conns.len()
            )
        });
    assert_eq!(answered, Some(200));
    // Let the server reach every connection before measuring the peak.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = rss(pid);
    let open = conns.len();
    drop(conns);
    let after = settle_below(pid, before + RETURN_BOUND).await;
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "RSS before {:.1} MB, with {open} connections open {:.1} MB, after they closed {:.1} MB",
        mb(before),
        mb(during),
        mb(after)
    );
    assert!(
        after <= before + RETURN_BOUND,
        "RSS stayed at {:.1} MB after {open} connections closed (before: {:.1} MB, during: {:.1} MB)",
        mb(after),
        mb(before),
        mb(during)
    );
    assert_eq!(status_of(probe.0, probe.1).await, Some(200));
}

/// Reads the child's stdout until a line starting with `prefix`; returns the rest of it.
async fn line_after(child: &mut Child, prefix: &str) -> String {
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.trim().to_owned());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .unwrap_or_else(|| panic!("the process never printed {prefix:?}"));
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_gives_memory_back_after_a_connection_flood() {
    let mut child = Command::new(bin())
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--plain-http",
            "--simulate=false",
            "--max-connections",
            "8000",
            "--header-read-timeout",
            "2m",
            "--idle-timeout",
            "2m",
            "--http2-max-streams-per-connection",
            "100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .spawn()
        .expect("sample-controller starts");
    let url = line_after(&mut child, "API server listening at ").await;
    let addr = url.trim_start_matches("http://").to_owned();
    let pid = child.id().expect("a running child");
    flood_and_return(pid, std::slice::from_ref(&addr), FLOOD, (&addr, "/readyz")).await;
    child.kill().await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managers_metrics_and_probe_servers_give_memory_back_after_a_connection_flood() {
    let (server, _client) = support::at::server().await;
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
            "--controllers=at",
            "--max-connections=4000",
            "--header-read-timeout=2m",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .spawn()
        .expect("sample-controller starts");
    // The ports it bound, from its log.
    let log = crate::support::net::ManagerLog::tap(child.stderr.take().unwrap());
    let metrics = log.metrics().await.to_string();
    let probes = log.health().await.to_string();
    let pid = child.id().expect("a running child");
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_of(&probes, "/readyz").await != Some(200) {
        assert!(Instant::now() < deadline, "/readyz never answered 200");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Half the flood on each server: 3,000 connections each, beyond the default limit of 1,024.
    let addrs = [metrics.clone(), probes.clone()];
    flood_and_return(pid, &addrs, FLOOD / 2, (&probes, "/healthz")).await;
    child.kill().await.expect("kill");
    server.shutdown().await;
}
