//! The At operator on time at scale, and the client's own throughput: a benchmark, not a test.
//!
//! Run with `hack/bench-at.sh` (which builds the release `sample-controller` and
//! `controller-manager` binaries first and passes their paths in `SAMPLE_CONTROLLER_BIN` and
//! `MANAGER_BIN`), or `cargo bench -p benches --bench at -- <mode> ...`.
//!
//! ## `at N [--due now|future] [--foreign F] [--lead SECS] [-- extra run flags]`
//!
//! The API server (`sample-controller apiserver`, HTTPS with a token, simulated node, pods
//! finish at once: `--pod-run-time 0s`) and the manager (`controller-manager run --controllers
//! at --kubeconfig ...`, the image's binary, default flags otherwise) run as two processes of
//! their own, so the manager's CPU and peak RSS are read from `/proc/<pid>` apart from
//! everything else. This process seeds and observes through the project's client with its
//! throttle off.
//!
//! * `--foreign F` first creates `F` pods in namespace `foreign` that no At owns (the same pods
//!   as `../shared/bench/seed.py foreign-pods`: labels, a 200-byte annotation, one container).
//! * `--due now`: `N` Ats due five seconds ago are created, *then* the manager starts; times
//!   count from the manager's start (like `../shared/bench/at-vs-kube-rs.sh`).
//! * `--due future` (the default): the manager starts and reports ready, then `N` Ats are created
//!   all due at one whole second `--lead` seconds ahead (default `3 + N/1000`); lateness counts
//!   from that instant.
//!
//! What it reports:
//!
//! * time to all DONE (a watch on the Ats, so at ms resolution);
//! * lateness of each pod create: the wall-clock instant its `ADDED` event reached this
//!   process's pod watch, minus the schedule (or the manager's start with `--due now`):
//!   p50/p99/max. It is an upper bound of the create's own lateness by the watch delivery
//!   delay, a few ms on loopback;
//! * requests per At by verb and resource, from the server's `apiserver_request_total` before
//!   and after (this process's own creates of Ats subtracted);
//! * the manager's CPU seconds and peak RSS (`VmHWM`);
//! * events recorded (event `create` + `patch` requests at the server) and dropped (the
//!   manager's `events_dropped_total`);
//! * exactly one pod per At (counted from the watch's `ADDED` events by controller owner, so a
//!   duplicate deleted later still counts);
//! * the server-bound time: the manager's requests ÷ the server's measured pod-create rate (64
//!   concurrent creates from this process's client over one HTTP/2 connection, run after the
//!   manager stopped, against the same server with all its objects).
//!
//! ## `client [R]`
//!
//! The client's requests/s against a fresh embedded API server (same process layout, HTTPS,
//! HTTP/2): `R` (default 20,000) cheap `GET`s of one pod, and `R` pod creates, each at 8, 64
//! and 256 requests in flight, over one `Client` (one HTTP/2 connection, every request a stream
//! on it) and over a pool of four `Client`s (four connections, requests spread round-robin).
//! `hack/bench-at.sh` then runs `curl --http2 --parallel` against the same kind of server for
//! comparison.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::{
    Api, Client, Config, ConfigOptions, PostParams, WatchEvent, WatchParams,
};
use sample_operators::apis::at::{At, AtPhase};
use serde_json::json;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The repository's root (benchmarks run in their package's directory, `benches/`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin() -> PathBuf {
    std::env::var_os("SAMPLE_CONTROLLER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/sample-controller"))
}

/// The manager's binary: `MANAGER_BIN` (`hack/bench-at.sh` passes the image's
/// `controller-manager`), else the same binary as the server's (`sample-controller run`).
fn manager_bin() -> PathBuf {
    std::env::var_os("MANAGER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(bin)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// utime + stime of `pid`, from `/proc/<pid>/stat`.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Peak resident set size of `pid` in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Starts `sample-controller apiserver` and returns it with a client for it (throttle off).
async fn start_apiserver(dir: &Path) -> BoxResult<(Proc, Client, PathBuf)> {
    let kc = dir.join("kubeconfig");
    let log = std::fs::File::create(dir.join("apiserver.log"))?;
    let child = Command::new(bin())
        .args(["apiserver", "--listen"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--kubeconfig-out")
        .arg(&kc)
        .args(["--pod-run-time", "0s"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin().display()))?;
    let proc = Proc(child);
    for _ in 0..200 {
        if std::fs::metadata(&kc).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = client_for(&kc)?;
    for _ in 0..100 {
        if client.apiserver_version().await.is_ok() {
            return Ok((proc, client, kc));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the API server did not answer within 5 s".into())
}

fn client_for(kc: &Path) -> BoxResult<Client> {
    let mut config = Config::infer(&ConfigOptions {
        kubeconfig: Some(kc.to_path_buf()),
        ..ConfigOptions::default()
    })?;
    config.qps = -1.0;
    config.follow_server_flow_control = false;
    Ok(Client::new(config)?)
}

/// `apiserver_request_total` by (verb, resource[/subresource]).
async fn server_requests(client: &Client) -> BoxResult<BTreeMap<(String, String), u64>> {
    let req = http::Request::get("/metrics").body(Bytes::new())?;
    let body = client.request_bytes(req).await?;
    let text = String::from_utf8_lossy(&body);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, res, sub) = (label("verb"), label("resource"), label("subresource"));
        let res = if sub.is_empty() {
            res
        } else {
            format!("{res}/{sub}")
        };
        let n: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry((verb, res)).or_default() += n as u64;
    }
    Ok(out)
}

/// One value of a Prometheus text exposition (sum over label sets of the family `name`).
fn prom_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn at_object(i: usize, schedule: &str) -> BoxResult<At> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
        "metadata": {"name": format!("b{i}"), "namespace": "default"},
        "spec": {"schedule": schedule, "run": {"command": format!("echo {i}")}},
    }))?)
}

fn foreign_pod(i: usize) -> BoxResult<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}"), "namespace": "foreign",
            "labels": {"app": "web", "pod-template-hash": "5d4f8c7b9"},
            "annotations": {"example.com/owner": "someone-else", "example.com/build": "x".repeat(200)}},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "web", "image": "nginx:1.27",
            "ports": [{"containerPort": 80}], "env": [{"name": "MODE", "value": "production"}]}]},
    }))?)
}

/// Creates `objs` through `api`, `concurrency` at a time; the number that failed.
async fn create_all<K>(api: &Api<K>, objs: Vec<K>, concurrency: usize) -> usize
where
    K: k8s_openapi::Resource + serde::Serialize + serde::de::DeserializeOwned + Clone,
    K: std::fmt::Debug + Send + Sync + 'static,
{
    let pp = PostParams::default();
    stream::iter(objs)
        .map(|o| {
            let (api, pp) = (api.clone(), &pp);
            async move { api.create(pp, &o).await.is_err() as usize }
        })
        .buffer_unordered(concurrency)
        .fold(0, |a, b| async move { a + b })
        .await
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64)).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

#[derive(Default)]
struct Seen {
    /// Pod ADDED arrival (wall clock) per owning At name, every one of them.
    pods: HashMap<String, Vec<SystemTime>>,
    done: usize,
    done_at: Option<Instant>,
}

async fn run_at(
    n: usize,
    future: bool,
    foreign: usize,
    lead: Option<f64>,
    extra: Vec<String>,
) -> BoxResult<()> {
    let dir = tempfile::Builder::new().prefix("bench-at-").tempdir()?;
    let dir = dir.keep();
    let (server, client, kc) = start_apiserver(&dir).await?;
    let ats = apply_crds(&client, &kc).await?;
    if foreign > 0 {
        seed_foreign_pods(&client, foreign).await?;
    }

    // Observers: pods and Ats in `default`, from now on.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pod_task = watch_pods(&client, seen.clone()).await?;
    let due_now = SystemTime::now() - Duration::from_secs(5);
    if !future {
        let t = Instant::now();
        let objs = (1..=n)
            .map(|i| at_object(i, &rfc3339(due_now)))
            .collect::<BoxResult<Vec<_>>>()?;
        let failed = create_all(&ats, objs, 64).await;
        println!(
            "seeded {n} Ats due now in {:.1}s ({failed} failed)",
            t.elapsed().as_secs_f64()
        );
    }
    let at_task = watch_ats(&ats, seen.clone()).await?;

    let before = server_requests(&client).await?;
    let manager = Manager::start(&dir, &kc, &extra)?;
    let schedule = if future {
        seed_future_ats(&ats, n, lead, &manager, &dir).await?
    } else {
        manager.started_wall
    };
    wait_all_done(&seen, n, manager.pid(), &dir).await?;
    // Let the last events reach the server before counting.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cpu_s = cpu(manager.pid()).as_secs_f64();
    let rss_kib = peak_rss_kib(manager.pid());
    let manager_metrics = curl_text(&format!(
        "http://127.0.0.1:{}/metrics",
        manager.metrics_port
    ))
    .await;
    let after = server_requests(&client).await?;
    let started = manager.started;
    drop(manager);
    pod_task.abort();
    at_task.abort();

    let s = std::mem::take(&mut *seen.lock().unwrap());
    let wall = s
        .done_at
        .map(|d| d.duration_since(started).as_secs_f64())
        .unwrap_or(f64::NAN);
    let report = Report {
        n,
        future,
        foreign,
        extra: &extra,
        done: s.done,
        wall,
        pods: PodsSeen::of(&s, schedule),
        cpu_s,
        rss_kib,
        manager_metrics,
        requests: request_diff(&before, &after, future, n),
    };
    let total = report.print();

    // The server's rate, measured now that the manager is gone.
    let rate = server_create_rate(&client, 5000.min(n.max(2000)), 64).await?;
    let bound = total as f64 / rate;
    println!(
        "server-bound:    {total} requests / {rate:.0} pod creates/s (64 in flight, one connection) = {bound:.2}s; wall/bound = {:.1}x",
        wall / bound
    );
    println!("logs: {}", dir.display());
    drop(server);
    Ok(())
}

/// Applies the project's CRDs with `kubectl` and waits (up to 5 s) until Ats are served;
/// returns the Ats of `default`.
async fn apply_crds(client: &Client, kc: &Path) -> BoxResult<Api<At>> {
    let st = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .args(["apply", "-f"])
        .arg(workspace().join("artifacts/crds/"))
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        return Err("kubectl apply -f artifacts/crds/ failed".into());
    }
    // Let the CRDs be served.
    let ats: Api<At> = Api::namespaced(client.clone(), "default");
    for _ in 0..100 {
        if ats.list(&Default::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(ats)
}

/// `--foreign F`: creates the namespace `foreign` and `F` pods in it that no At owns.
async fn seed_foreign_pods(client: &Client, foreign: usize) -> BoxResult<()> {
    let t = Instant::now();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "foreign"}}))?,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "foreign");
    let objs = (1..=foreign)
        .map(foreign_pod)
        .collect::<BoxResult<Vec<_>>>()?;
    let failed = create_all(&pods, objs, 64).await;
    println!(
        "seeded {foreign} foreign pods in {:.1}s ({failed} failed)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Watches the pods of `default` from now on, and notes when each one's `ADDED` event
/// arrives, under the name of the At that owns it ("" for none).
async fn watch_pods(
    client: &Client,
    seen: Arc<Mutex<Seen>>,
) -> BoxResult<tokio::task::JoinHandle<()>> {
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = pod_api
        .list(&Default::default())
        .await?
        .metadata
        .resource_version;
    let mut pod_watch = pod_api
        .watch(&WatchParams {
            resource_version: rv,
            ..Default::default()
        })
        .await?;
    Ok(tokio::spawn(async move {
        while let Some(ev) = pod_watch.next().await {
            if let Ok(WatchEvent::Added(p)) = ev {
                let now = SystemTime::now();
                let owner = p
                    .metadata
                    .owner_references
                    .unwrap_or_default()
                    .into_iter()
                    .find(|o| o.controller == Some(true) && o.kind == "At")
                    .map(|o| o.name)
                    .unwrap_or_default();
                seen.lock()
                    .unwrap()
                    .pods
                    .entry(owner)
                    .or_default()
                    .push(now);
            }
        }
    }))
}

/// Watches the Ats from now on, and counts each one that turns DONE (and when the last did).
async fn watch_ats(
    ats: &Api<At>,
    seen: Arc<Mutex<Seen>>,
) -> BoxResult<tokio::task::JoinHandle<()>> {
    let rv = ats
        .list(&Default::default())
        .await?
        .metadata
        .resource_version;
    let mut at_watch = ats
        .watch(&WatchParams {
            resource_version: rv,
            ..Default::default()
        })
        .await?;
    Ok(tokio::spawn(async move {
        let mut phase: HashMap<String, bool> = HashMap::new();
        while let Some(ev) = at_watch.next().await {
            if let Ok(WatchEvent::Added(a) | WatchEvent::Modified(a)) = ev {
                let done = a.status.as_ref().and_then(|s| s.phase) == Some(AtPhase::Done);
                let name = a.metadata.name.unwrap_or_default();
                let was = phase.insert(name, done).unwrap_or(false);
                if done && !was {
                    let mut s = seen.lock().unwrap();
                    s.done += 1;
                    s.done_at = Some(Instant::now());
                }
            }
        }
    }))
}

/// The manager process under test (killed when dropped), its ports and when it started.
struct Manager {
    proc: Proc,
    metrics_port: u16,
    health_port: u16,
    /// When it was spawned: the times count from here.
    started: Instant,
    started_wall: SystemTime,
}

impl Manager {
    /// Starts `controller-manager run --controllers at` (plus the `extra` flags) on the
    /// kubeconfig, its metrics and probes on free local ports, its log in `dir`.
    fn start(dir: &Path, kc: &Path, extra: &[String]) -> BoxResult<Manager> {
        let metrics_port = free_port();
        let health_port = free_port();
        let mlog = std::fs::File::create(dir.join("manager.log"))?;
        let started = Instant::now();
        let started_wall = SystemTime::now();
        let proc = Proc(
            Command::new(manager_bin())
                .arg("run")
                .arg("--kubeconfig")
                .arg(kc)
                .args(["--controllers", "at"])
                .arg("--metrics-bind-address")
                .arg(format!("127.0.0.1:{metrics_port}"))
                .arg("--health-probe-bind-address")
                .arg(format!("127.0.0.1:{health_port}"))
                .args(extra)
                .stdout(Stdio::null())
                .stderr(mlog)
                .spawn()?,
        );
        Ok(Manager {
            proc,
            metrics_port,
            health_port,
            started,
            started_wall,
        })
    }

    fn pid(&self) -> u32 {
        self.proc.0.id()
    }
}

/// `--due future`: waits for the manager to be ready (caches synced, up to 30 s), then creates
/// the `n` Ats all due at one whole second `lead` seconds ahead; returns that instant.
async fn seed_future_ats(
    ats: &Api<At>,
    n: usize,
    lead: Option<f64>,
    manager: &Manager,
    dir: &Path,
) -> BoxResult<SystemTime> {
    let ready_url = format!("http://127.0.0.1:{}/readyz", manager.health_port);
    let mut ready = false;
    for _ in 0..600 {
        if curl_ok(&ready_url).await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !ready {
        return Err(format!(
            "manager not ready after 30 s (log: {})",
            dir.join("manager.log").display()
        )
        .into());
    }
    let lead = lead.unwrap_or(3.0 + n as f64 / 1000.0);
    let at = SystemTime::now() + Duration::from_secs_f64(lead);
    // A whole second, as the schedule's format has no fraction.
    let secs = at.duration_since(SystemTime::UNIX_EPOCH)?.as_secs() + 1;
    let schedule = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    let t = Instant::now();
    let objs = (1..=n)
        .map(|i| at_object(i, &rfc3339(schedule)))
        .collect::<BoxResult<Vec<_>>>()?;
    let failed = create_all(ats, objs, 64).await;
    let margin = schedule
        .duration_since(SystemTime::now())
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    println!(
        "seeded {n} Ats due at {} in {:.2}s ({failed} failed); {margin:.2}s to spare before the schedule",
        rfc3339(schedule),
        t.elapsed().as_secs_f64()
    );
    Ok(schedule)
}

/// Waits until `n` Ats are DONE (or 15 minutes passed); an error if the manager exits first.
async fn wait_all_done(seen: &Mutex<Seen>, n: usize, pid: u32, dir: &Path) -> BoxResult<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let done = seen.lock().unwrap().done;
        if done >= n || Instant::now() > deadline {
            return Ok(());
        }
        if manager_exited(pid) {
            return Err(format!(
                "the manager exited (log: {})",
                dir.join("manager.log").display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the pod watch saw, per At.
struct PodsSeen {
    /// Each At's first pod: how late its `ADDED` event arrived after `schedule`, in ms, sorted.
    late: Vec<f64>,
    /// Ats with a pod.
    owners: usize,
    /// Ats with more than one pod.
    dup: usize,
    /// Pods no At owns.
    unowned: usize,
}

impl PodsSeen {
    fn of(s: &Seen, schedule: SystemTime) -> Self {
        let mut late: Vec<f64> = s
            .pods
            .iter()
            .filter(|(owner, _)| !owner.is_empty())
            .filter_map(|(_, v)| v.iter().min())
            .map(|t| match t.duration_since(schedule) {
                Ok(d) => d.as_secs_f64() * 1000.0,
                Err(e) => -(e.duration().as_secs_f64() * 1000.0),
            })
            .collect();
        late.sort_by(f64::total_cmp);
        let owners = s.pods.iter().filter(|(o, _)| !o.is_empty()).count();
        let dup = s
            .pods
            .iter()
            .filter(|(o, v)| !o.is_empty() && v.len() > 1)
            .count();
        let unowned = s.pods.get("").map_or(0, Vec::len);
        PodsSeen {
            late,
            owners,
            dup,
            unowned,
        }
    }
}

/// The server's requests during the run, by (verb, resource): `after - before`, without this
/// process's own creates of the Ats (with `--due future` they are made during the run).
fn request_diff(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    future: bool,
    n: usize,
) -> BTreeMap<(String, String), u64> {
    let mut diff: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (k, v) in after {
        let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
        if d > 0 {
            diff.insert(k.clone(), d);
        }
    }
    if future {
        // This process's own creates of the Ats.
        if let Some(c) = diff.get_mut(&("create".to_owned(), "ats".to_owned())) {
            *c = c.saturating_sub(n as u64);
        }
    }
    diff.retain(|_, v| *v > 0);
    diff
}

/// What an `at` run measured, printed as its report.
struct Report<'a> {
    n: usize,
    future: bool,
    foreign: usize,
    extra: &'a [String],
    /// Ats seen DONE.
    done: usize,
    /// Seconds from the manager's start to the last DONE.
    wall: f64,
    pods: PodsSeen,
    cpu_s: f64,
    rss_kib: u64,
    /// The manager's `/metrics` at the end.
    manager_metrics: String,
    /// The server's requests during the run ([`request_diff`]).
    requests: BTreeMap<(String, String), u64>,
}

impl Report<'_> {
    /// Prints the report; returns the number of requests the run made at the server.
    fn print(&self) -> u64 {
        let Report { n, future, .. } = *self;
        let diff = &self.requests;
        let total: u64 = diff.values().sum();
        let events: u64 = diff
            .iter()
            .filter(|((verb, r), _)| r == "events" && (verb == "create" || verb == "patch"))
            .map(|(_, v)| v)
            .sum();
        let dropped = prom_sum(&self.manager_metrics, "events_dropped_total");
        let throttle_wait = prom_sum(
            &self.manager_metrics,
            "rest_client_rate_limiter_duration_seconds_sum",
        );
        println!(
            "\n== {n} Ats due {} (foreign pods: {}; manager flags: {}) ==",
            if future {
                "at one future instant"
            } else {
                "at once"
            },
            self.foreign,
            if self.extra.is_empty() {
                "defaults".to_owned()
            } else {
                self.extra.join(" ")
            }
        );
        println!(
            "all DONE:        {}/{n} after {:.2}s (from the manager's start)",
            self.done, self.wall
        );
        let PodsSeen {
            late,
            owners,
            dup,
            unowned,
        } = &self.pods;
        println!(
            "pod create lateness (ms after {}): p50 {:.0}  p99 {:.0}  max {:.0}  (n={})",
            if future {
                "the schedule"
            } else {
                "the manager's start"
            },
            percentile(late, 50.0),
            percentile(late, 99.0),
            late.last().copied().unwrap_or(f64::NAN),
            late.len()
        );
        println!(
            "one pod per At:  {} (Ats with a pod {owners}/{n}, with more than one {dup}, unowned pods {unowned})",
            if *owners == n && *dup == 0 {
                "yes"
            } else {
                "NO"
            }
        );
        println!(
            "manager:         cpu {:.2}s  peak RSS {:.1} MiB  throttle wait {throttle_wait:.2}s",
            self.cpu_s,
            self.rss_kib as f64 / 1024.0
        );
        println!(
            "events:          recorded {events} ({:.2}/At)  dropped {dropped}",
            events as f64 / n as f64
        );
        let per_at: Vec<String> = diff
            .iter()
            .filter(|(_, v)| **v as f64 / n as f64 >= 0.01)
            .map(|((verb, r), v)| format!("{verb} {r} {:.2}", *v as f64 / n as f64))
            .collect();
        println!(
            "requests per At: {:.2} in all: {}",
            total as f64 / n as f64,
            per_at.join(", ")
        );
        total
    }
}
fn manager_exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// A plain-HTTP GET of a local endpoint with a throwaway hyper client.
async fn curl_text(url: &str) -> String {
    let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let Ok(uri) = url.parse::<http::Uri>() else {
        return String::new();
    };
    match c.get(uri).await {
        Ok(r) => {
            use http_body_util::BodyExt;
            r.into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default()
        }
        Err(_) => String::new(),
    }
}

async fn curl_ok(url: &str) -> bool {
    let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    c.get(uri).await.is_ok_and(|r| r.status().is_success())
}

fn bench_pod(i: usize) -> BoxResult<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("r-{i}"), "labels": {"app": "rate"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))?)
}

/// Pod creates per second from `client` at `concurrency` in flight, in namespace `rate`.
async fn server_create_rate(client: &Client, n: usize, concurrency: usize) -> BoxResult<f64> {
    let ns = format!("rate-{}", fastrand::u32(..));
    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let objs = (0..n).map(bench_pod).collect::<BoxResult<Vec<_>>>()?;
    let t = Instant::now();
    let failed = create_all(&pods, objs, concurrency).await;
    let secs = t.elapsed().as_secs_f64();
    if failed > 0 {
        println!("  ({failed} of {n} rate-probe creates failed)");
    }
    Ok((n - failed) as f64 / secs)
}

/// `n` requests from `clients` (round-robin), `concurrency` in flight; requests per second.
async fn load(
    clients: &[Client],
    n: usize,
    concurrency: usize,
    kind: &str,
    ns: &str,
) -> BoxResult<(f64, usize)> {
    let t = Instant::now();
    let failed = stream::iter(0..n)
        .map(|i| {
            let c = clients[i % clients.len()].clone();
            let kind = kind.to_owned();
            let ns = ns.to_owned();
            async move {
                let pods: Api<Pod> = Api::namespaced(c, &ns);
                let r = if kind == "get" {
                    pods.get("p0").await.map(|_| ())
                } else {
                    match bench_pod(i) {
                        Ok(p) => pods.create(&PostParams::default(), &p).await.map(|_| ()),
                        Err(_) => Ok(()),
                    }
                };
                r.is_err() as usize
            }
        })
        .buffer_unordered(concurrency)
        .fold(0, |a, b| async move { a + b })
        .await;
    Ok(((n - failed) as f64 / t.elapsed().as_secs_f64(), failed))
}

async fn run_client(n: usize) -> BoxResult<()> {
    let dir = tempfile::Builder::new().prefix("bench-client-").tempdir()?;
    let (server, client, kc) = start_apiserver(dir.path()).await?;
    let spid = server.0.id();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut p0 = bench_pod(0)?;
    p0.metadata.name = Some("p0".into());
    pods.create(&PostParams::default(), &p0).await?;
    let pool: Vec<Client> = (0..4).map(|_| client_for(&kc)).collect::<BoxResult<_>>()?;
    println!(
        "| requests | in flight | connections | requests/s | server CPU per request | failed |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut round = 0;
    for kind in ["get", "create"] {
        for c in [8usize, 64, 256] {
            for (label, clients) in [("1", std::slice::from_ref(&client)), ("4", &pool[..])] {
                round += 1;
                let ns = format!("load-{round}");
                if kind == "create" {
                    let nsapi: Api<k8s_openapi::api::core::v1::Namespace> =
                        Api::all(client.clone());
                    nsapi
                        .create(
                            &PostParams::default(),
                            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
                        )
                        .await?;
                }
                let ns = if kind == "get" {
                    "default".to_owned()
                } else {
                    ns
                };
                let cpu0 = cpu(spid);
                let (rate, failed) = load(clients, n, c, kind, &ns).await?;
                let per = (cpu(spid) - cpu0).as_secs_f64() * 1e6 / n as f64;
                println!("| {kind} pod | {c} | {label} | {rate:.0} | {per:.0} µs | {failed} |");
            }
        }
    }
    drop(server);
    Ok(())
}

fn main() -> BoxResult<()> {
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let extra = match args.iter().position(|a| a == "--") {
        Some(i) => {
            let e = args.split_off(i);
            e[1..].to_vec()
        }
        None => Vec::new(),
    };
    let mode = if args.is_empty() {
        "at".to_owned()
    } else {
        args.remove(0)
    };
    let mut n = None;
    let mut due = "future".to_owned();
    let mut foreign = 0;
    let mut lead = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--due" => due = val("--due")?,
            "--foreign" => {
                foreign = val("--foreign")?
                    .parse()
                    .map_err(|e| format!("--foreign: {e}"))?
            }
            "--lead" => lead = Some(val("--lead")?.parse().map_err(|e| format!("--lead: {e}"))?),
            v => {
                n = Some(
                    v.parse::<usize>()
                        .map_err(|e| format!("argument {v:?}: {e}"))?,
                )
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match mode.as_str() {
            "at" => match due.as_str() {
                "now" => run_at(n.unwrap_or(1000), false, foreign, lead, extra).await,
                "future" => run_at(n.unwrap_or(1000), true, foreign, lead, extra).await,
                other => Err(format!("--due {other:?}: expected now or future").into()),
            },
            "client" => run_client(n.unwrap_or(20_000)).await,
            other => Err(format!("mode {other:?}: expected at or client").into()),
        }
    })
}
