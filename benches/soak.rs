//! # Soak: hours of churn and faults, sampled (`hack/soak.sh DURATION`)
//!
//! *Programming Kubernetes*, chapter 7, asks every controller for soak tests "from several
//! hours to days, with the goal of unveiling any leaking of resources, like files or main
//! memory". This driver runs the release binaries as separate processes, one embedded API
//! server (`sample-controller apiserver --data-dir`) and two managers leader-electing one
//! another (`controller-manager run --leader-elect`, every operator), and for `DURATION`:
//!
//! * **churn**: `--rate` Ats a second (default 10), each due at once and deleted 5 s after it
//!   went DONE (the count follows the schedule: the creates the server could not take while it
//!   was down are made when it is back, so a run creates `rate` × `DURATION` Ats); every 15 s one step of a cycle that creates, scales and deletes a RedisCluster
//!   and a TDSet and creates, updates and deletes a MyApp;
//! * **faults** on a schedule, each written to `faults.csv`: the API server `kill -9`'d and
//!   restarted from its data directory (`--kill-every`, default 2 min; the managers' watches
//!   and connections break and their kubeconfig keeps working, the server's identity being in
//!   the data directory), every open watch dropped (`--drop-every`, 30 s), the watch history
//!   compacted under the reconnecting reflectors so that they get 410 and relist
//!   (`--compact-every`, 5 min), an admission webhook down for a while (`--webhook-down-every`,
//!   7 min, for `--webhook-down-for`, 20 s: a fail-closed `ValidatingWebhookConfiguration` for pod
//!   creates whose endpoint does not answer, so the server refuses the managers' pod creates
//!   with kube's `failed calling webhook` 500 until it is removed while Ats keep coming; the
//!   controllers retry with back-off and every At must still go DONE within its deadline), and the
//!   leading manager stopped with SIGTERM and restarted, handing the Lease to the other
//!   (`--handover-every`, 10 min); a manager that exits on its own (a leader that could not
//!   renew its Lease in time exits so that the standby takes over) is started again 5 s later,
//!   as the kubelet restarts a pod's container, and counted;
//! * **samples** every `--sample-every` (5 s) into `samples.csv`, for the server and each
//!   manager: RSS and anonymous memory (`RssAnon`, the heap's share of the RSS), open fds and
//!   threads from `/proc`; from the managers' `/metrics`, the Tokio tasks alive, the work
//!   queues' depth and the informer caches' objects; from the server's, the watch history's
//!   bytes and the objects it stores (`apiserver_storage_objects`, in the `cache_objects`
//!   column);
//! * **events' TTL**: the server keeps events `--event-ttl` (default 10 min) after their last
//!   write, as kube-apiserver's `--event-ttl` (whose default is an hour) does. Every At leaves
//!   two events (20 a second at the default rate); with kube's hour they would only start to
//!   go as a one-hour run ends, so the run would end on the climb rather than the level the
//!   server keeps from then on. Ten minutes shows that level within the hour; pass
//!   `--event-ttl 1h` for kube's default (the server then holds about 72,000 events, some
//!   80 MiB, at the end of an hour);
//! * **checks**, all the time: every At DONE within `--deadline` (60 s) of its creation, one
//!   pod per At, and at the end, after the churn stops, nothing left behind (no At, no pod of
//!   an At, no StatefulSet or Deployment of a deleted operator object) and every queue empty.
//!
//! It prints a summary (growth of each resource after warm-up, the checks) and exits non-zero
//! when a check failed; `hack/soak-plot.py` draws `samples.csv` with the faults marked.
//!
//! ```text
//! hack/soak.sh 1h                       # the book's soak, one hour
//! hack/soak.sh 10m --rate 5 --out .local/soak
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::{Api, Client, Config, ConfigOptions, DeleteParams, PostParams};
use sample_operators::apis::at::{At, AtPhase};
use serde_json::json;

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin() -> PathBuf {
    std::env::var_os("SAMPLE_CONTROLLER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/sample-controller"))
}

fn manager_bin() -> PathBuf {
    std::env::var_os("MANAGER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(bin)
}

fn free_port() -> BoxResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The driver's options (see the module doc).
#[derive(Clone, Debug)]
struct Opts {
    duration: Duration,
    rate: f64,
    deadline: Duration,
    kill_every: Duration,
    drop_every: Duration,
    compact_every: Duration,
    webhook_down_every: Duration,
    webhook_down_for: Duration,
    handover_every: Duration,
    sample_every: Duration,
    event_ttl: Duration,
    out: Option<PathBuf>,
}

/// `90s`, `10m`, `1h`, `1h30m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(n) = s.parse::<u64>() {
        return Ok(Duration::from_secs(n));
    }
    let mut total = 0u64;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num
            .parse()
            .map_err(|_| format!("{s:?}: a number must come before {c:?}"))?;
        num.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(format!("{s:?}: unknown unit {c:?} (use s, m or h)")),
        };
    }
    if !num.is_empty() {
        return Err(format!("{s:?}: a unit (s, m or h) must follow {num}"));
    }
    Ok(Duration::from_secs(total))
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        duration: Duration::from_secs(600),
        rate: 10.0,
        deadline: Duration::from_secs(60),
        kill_every: Duration::from_secs(120),
        drop_every: Duration::from_secs(30),
        compact_every: Duration::from_secs(300),
        webhook_down_every: Duration::from_secs(420),
        webhook_down_for: Duration::from_secs(20),
        handover_every: Duration::from_secs(600),
        sample_every: Duration::from_secs(5),
        event_ttl: Duration::from_secs(600),
        out: None,
    };
    let mut it = args.iter().filter(|a| *a != "--bench");
    let mut positional = false;
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--rate" => o.rate = val()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--deadline" => o.deadline = parse_duration(&val()?)?,
            "--kill-every" => o.kill_every = parse_duration(&val()?)?,
            "--drop-every" => o.drop_every = parse_duration(&val()?)?,
            "--compact-every" => o.compact_every = parse_duration(&val()?)?,
            "--webhook-down-every" => o.webhook_down_every = parse_duration(&val()?)?,
            "--webhook-down-for" => o.webhook_down_for = parse_duration(&val()?)?,
            "--handover-every" => o.handover_every = parse_duration(&val()?)?,
            "--sample-every" => o.sample_every = parse_duration(&val()?)?,
            "--event-ttl" => o.event_ttl = parse_duration(&val()?)?,
            "--out" => o.out = Some(PathBuf::from(val()?)),
            s if !s.starts_with("--") && !positional => {
                o.duration = parse_duration(s)?;
                positional = true;
            }
            s => return Err(format!("unknown argument {s:?}")),
        }
    }
    if !(o.rate > 0.0 && o.rate <= 1000.0) {
        return Err(format!("--rate {} must be in (0, 1000]", o.rate));
    }
    Ok(o)
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `/proc/<pid>` figures of one process.
#[derive(Clone, Copy, Debug, Default)]
struct ProcStats {
    rss_kib: u64,
    anon_kib: u64,
    fds: u64,
    threads: u64,
}

fn proc_stats(pid: u32) -> ProcStats {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    ProcStats {
        rss_kib: kb("VmRSS:"),
        anon_kib: kb("RssAnon:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64),
        threads: kb("Threads:"),
    }
}

/// The sum over label sets of the family `name` in a Prometheus text exposition.
fn prom_sum(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for l in text.lines() {
        if l.strip_prefix(name)
            .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
            && let Some(v) = l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// A plain-HTTP GET of a local endpoint (the managers' `/metrics`); empty on any error.
async fn http_get(url: &str) -> String {
    let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let Ok(uri) = url.parse::<http::Uri>() else {
        return String::new();
    };
    let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(5), c.get(uri)).await else {
        return String::new();
    };
    use http_body_util::BodyExt;
    r.into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default()
}

/// The API server: one data directory and port across restarts.
struct Server {
    proc: Option<Proc>,
    port: u16,
    dir: PathBuf,
    kubeconfig: PathBuf,
    starts: u32,
    event_ttl: Duration,
}

impl Server {
    fn spawn(&mut self) -> BoxResult<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("apiserver.log"))?;
        let child = Command::new(bin())
            .args(["apiserver", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--kubeconfig-out")
            .arg(&self.kubeconfig)
            .args(["--pod-run-time", "0s"])
            .arg("--event-ttl")
            .arg(format!("{}s", self.event_ttl.as_secs()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin().display()))?;
        self.proc = Some(Proc(child));
        self.starts += 1;
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.0.id())
    }

    /// `kill -9`, then a restart from the same data directory on the same port.
    fn kill_and_restart(&mut self) -> BoxResult<()> {
        drop(self.proc.take());
        self.spawn()
    }
}

/// One manager process (`controller-manager run --leader-elect`, every operator).
struct Manager {
    name: &'static str,
    proc: Option<Proc>,
    metrics_port: u16,
    health_port: u16,
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Manager {
    fn spawn(&mut self) -> BoxResult<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", self.name)))?;
        let child = Command::new(manager_bin())
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--controllers", "at,tdset,rediscluster,myapp"])
            .args(["--leader-elect", "--leader-elect-lease-duration", "6s"])
            .args(["--leader-elect-renew-deadline", "4s"])
            .args(["--leader-elect-retry-period", "1s"])
            .arg("--metrics-bind-address")
            .arg(format!("127.0.0.1:{}", self.metrics_port))
            .arg("--health-probe-bind-address")
            .arg(format!("127.0.0.1:{}", self.health_port))
            .args(["--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", manager_bin().display()))?;
        self.proc = Some(Proc(child));
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.0.id())
    }

    /// The exit status of a manager that ended on its own (a leader that could not renew its
    /// Lease exits so that a standby takes over, as client-go's leader election asks), reaped.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.proc.as_mut()?.0.try_wait().ok()??;
        self.proc = None;
        Some(status)
    }

    async fn metrics(&self) -> String {
        if self.proc.is_none() {
            return String::new();
        }
        http_get(&format!("http://127.0.0.1:{}/metrics", self.metrics_port)).await
    }

    /// SIGTERM (a graceful stop: the manager releases its Lease), waiting up to 30 s.
    fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &p.0.id().to_string()])
                .status();
            for _ in 0..300 {
                if matches!(p.0.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(p);
        }
    }
}

/// What the checks know of one At.
#[derive(Debug)]
struct AtRec {
    created: Instant,
    done: Option<Instant>,
    deleted: bool,
    late: bool,
    pods: HashSet<String>,
}

/// Everything the checks have seen.
#[derive(Default)]
struct Book {
    ats: BTreeMap<String, AtRec>,
    created: u64,
    create_errors: u64,
    done: u64,
    deleted: u64,
    violations: Vec<String>,
}

fn lock(b: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    b.lock().unwrap_or_else(|p| p.into_inner())
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

fn rfc3339(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(kc)
        .args(["--request-timeout", "10s"])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("kubectl: {e}"))?;
    if let (Some(input), Some(mut w)) = (stdin, child.stdin.take()) {
        let _ = w.write_all(input.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `POST /admin/faults` (the embedded server's fault injection).
async fn fault(client: &Client, body: serde_json::Value) -> BoxResult<()> {
    let req = http::Request::post("/admin/faults")
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))?;
    client.request_bytes(req).await?;
    Ok(())
}

/// The name of the fail-closed webhook the `webhook-down` fault registers.
const DOWN_WEBHOOK: &str = "soak-webhook-down";

/// Registers a fail-closed validating webhook for pod creates whose endpoint is a
/// port nothing listens on (bound, read and released here): an admission webhook that is
/// down. Returns the port.
async fn webhook_down(client: &Client) -> BoxResult<u16> {
    let port = free_port()?;
    let rule = |group: &str, resource: &str| {
        json!({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
               "resources": [resource], "scope": "Namespaced"})
    };
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": DOWN_WEBHOOK},
        "webhooks": [{
            "name": "down.soak.programming-kubernetes.info",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
            "rules": [rule("", "pods")],
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
        }],
    });
    let req = http::Request::post(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    )
    .header("content-type", "application/json")
    .body(Bytes::from(body.to_string()))?;
    client.request_bytes(req).await?;
    Ok(port)
}

/// Removes the webhook of [`webhook_down`] (a 404 counts as removed).
async fn webhook_up(client: &Client) -> BoxResult<()> {
    let req = http::Request::delete(format!(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{DOWN_WEBHOOK}"
    ))
    .body(Bytes::new())?;
    match client.request_bytes(req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The operator churn: one step of this cycle every 15 s (kubectl, as a user would).
const OPERATOR_STEPS: [&str; 8] = [
    "apply-rediscluster",
    "apply-myapp",
    "apply-tdset",
    "scale-rediscluster",
    "update-myapp",
    "scale-tdset",
    "delete-rediscluster-tdset",
    "delete-myapp",
];

fn operator_step(kc: &Path, step: &str) -> Result<(), String> {
    let rc = |size: u32| {
        json!({"apiVersion": "cache.example.com/v1", "kind": "RedisCluster",
            "metadata": {"name": "soak-rc", "namespace": "default"}, "spec": {"size": size}})
    };
    let myapp = |image: &str, replicas: u32| {
        json!({"apiVersion": "example.com/v1", "kind": "MyApp",
            "metadata": {"name": "soak-myapp", "namespace": "default"},
            "spec": {"replicas": replicas, "image": image}})
    };
    let tdset = |default: u32| {
        json!({"apiVersion": "schedule.rs/v1", "kind": "TDSet",
            "metadata": {"name": "soak-tdset", "namespace": "default"},
            "spec": {"container": {"image": "crccheck/hello-world", "port": 8000},
                "schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 5}],
                "defaultReplica": default}})
    };
    let apply = |v: serde_json::Value| kubectl(kc, &["apply", "-f", "-"], Some(&v.to_string()));
    match step {
        "apply-rediscluster" => apply(rc(3)),
        "apply-myapp" => apply(myapp("nginx:1.27", 2)),
        "apply-tdset" => apply(tdset(2)),
        "scale-rediscluster" => apply(rc(5)),
        "update-myapp" => apply(myapp("nginx:1.28", 3)),
        "scale-tdset" => apply(tdset(4)),
        "delete-rediscluster-tdset" => kubectl(
            kc,
            &[
                "delete",
                "redisclusters/soak-rc",
                "tdsets/soak-tdset",
                "--wait=false",
            ],
            None,
        ),
        "delete-myapp" => kubectl(kc, &["delete", "myapps/soak-myapp", "--wait=false"], None),
        other => Err(format!("unknown step {other}")),
    }
    .map(|_| ())
}

/// One poll of the Ats and their pods: records DONE, deletes Ats 5 s after DONE, checks the
/// deadline and one pod per At.
async fn poll(client: &Client, book: &Mutex<Book>, deadline: Duration) -> BoxResult<()> {
    let ats: Api<At> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let at_list = ats.list(&Default::default()).await?;
    let pod_list = pods.list(&Default::default()).await?;
    let mut uid_to_at = HashMap::new();
    let now = Instant::now();
    let mut to_delete = Vec::new();
    {
        let mut b = lock(book);
        for at in &at_list.items {
            let (Some(name), Some(uid)) = (&at.metadata.name, &at.metadata.uid) else {
                continue;
            };
            uid_to_at.insert(uid.clone(), name.clone());
            let done = at
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|p| p == AtPhase::Done);
            let Some(rec) = b.ats.get_mut(name) else {
                continue;
            };
            if done && rec.done.is_none() {
                rec.done = Some(now);
                b.done += 1;
            }
        }
        let mut newly_late = Vec::new();
        for (name, rec) in b.ats.iter_mut() {
            if rec.done.is_none() && !rec.late && now.duration_since(rec.created) > deadline {
                rec.late = true;
                newly_late.push(name.clone());
            }
            if !rec.deleted
                && rec
                    .done
                    .is_some_and(|d| now.duration_since(d) >= Duration::from_secs(5))
            {
                to_delete.push(name.clone());
            }
        }
        for name in newly_late {
            b.violations.push(format!(
                "At {name} not DONE within {deadline:?} of its creation"
            ));
        }
        for pod in &pod_list.items {
            let Some(pod_name) = &pod.metadata.name else {
                continue;
            };
            for owner in pod.metadata.owner_references.iter().flatten() {
                if owner.kind != "At" {
                    continue;
                }
                let at = uid_to_at
                    .get(&owner.uid)
                    .cloned()
                    .unwrap_or_else(|| owner.name.clone());
                if let Some(rec) = b.ats.get_mut(&at) {
                    rec.pods.insert(pod_name.clone());
                    if rec.pods.len() == 2 {
                        let pods: Vec<_> = rec.pods.iter().cloned().collect();
                        b.violations
                            .push(format!("At {at} has more than one pod: {pods:?}"));
                    }
                }
            }
        }
    }
    for name in to_delete {
        match ats.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("NotFound") || e.to_string().contains("404") => {}
            Err(_) => continue,
        }
        let mut b = lock(book);
        if let Some(rec) = b.ats.get_mut(&name) {
            rec.deleted = true;
        }
        b.deleted += 1;
    }
    Ok(())
}

/// One column of the summary table: its name and how to read it from a sample.
type Figure = (&'static str, fn(&Sample) -> Option<f64>);

/// One row of `samples.csv` per process.
#[derive(Debug, Default)]
struct Sample {
    t: f64,
    process: &'static str,
    stats: ProcStats,
    tasks: Option<f64>,
    queue_depth: Option<f64>,
    cache_objects: Option<f64>,
    history_bytes: Option<f64>,
}

fn csv_opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v}")).unwrap_or_default()
}

const CSV_HEADER: &str = "t_seconds,process,rss_kib,anon_kib,fds,threads,tokio_tasks,queue_depth,cache_objects,history_bytes";

impl Sample {
    fn csv(&self) -> String {
        format!(
            "{:.1},{},{},{},{},{},{},{},{},{}",
            self.t,
            self.process,
            self.stats.rss_kib,
            self.stats.anon_kib,
            self.stats.fds,
            self.stats.threads,
            csv_opt(self.tasks),
            csv_opt(self.queue_depth),
            csv_opt(self.cache_objects),
            csv_opt(self.history_bytes)
        )
    }
}

struct Run {
    opts: Opts,
    dir: PathBuf,
    server: Server,
    managers: [Manager; 2],
    client: Client,
    book: Arc<Mutex<Book>>,
    t0: Instant,
    samples: std::fs::File,
    faults: std::fs::File,
    rows: Vec<Sample>,
    /// Managers that exited on their own (a lost Lease) and were started again.
    manager_exits: u32,
    /// The server's history bound (`apiserver_storage_history_limit_bytes`), once read.
    history_limit: Option<f64>,
}

impl Run {
    fn t(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn fault_row(&mut self, what: &str, detail: &str) {
        let line = format!("{:.1},{what},{detail}", self.t());
        let _ = writeln!(self.faults, "{line}");
        eprintln!("[{:>7.1}s] fault: {what} {detail}", self.t());
    }

    async fn sample(&mut self) {
        let t = self.t();
        let mut rows = Vec::new();
        if let Some(pid) = self.server.pid() {
            let req = http::Request::get("/metrics").body(Bytes::new());
            let text = match req {
                Ok(req) => match tokio::time::timeout(
                    Duration::from_secs(5),
                    self.client.request_bytes(req),
                )
                .await
                {
                    Ok(Ok(b)) => String::from_utf8_lossy(&b).into_owned(),
                    _ => String::new(),
                },
                Err(_) => String::new(),
            };
            if let Some(limit) = prom_sum(&text, "apiserver_storage_history_limit_bytes") {
                self.history_limit = Some(limit);
            }
            rows.push(Sample {
                t,
                process: "apiserver",
                stats: proc_stats(pid),
                history_bytes: prom_sum(&text, "apiserver_storage_history_bytes"),
                cache_objects: prom_sum(&text, "apiserver_storage_objects"),
                ..Sample::default()
            });
        }
        for m in &self.managers {
            let Some(pid) = m.pid() else { continue };
            let text = m.metrics().await;
            rows.push(Sample {
                t,
                process: m.name,
                stats: proc_stats(pid),
                tasks: prom_sum(&text, "tokio_alive_tasks"),
                queue_depth: prom_sum(&text, "workqueue_depth"),
                cache_objects: prom_sum(&text, "store_objects"),
                ..Sample::default()
            });
        }
        for r in &rows {
            let _ = writeln!(self.samples, "{}", r.csv());
        }
        self.rows.extend(rows);
    }

    /// The manager that holds the Lease now (by its `leader_election_master_status`).
    async fn leader(&self) -> Option<usize> {
        for (i, m) in self.managers.iter().enumerate() {
            if prom_sum(&m.metrics().await, "leader_election_master_status").unwrap_or(0.0) >= 1.0 {
                return Some(i);
            }
        }
        None
    }
}

async fn wait_ready(client: &Client, kc: &Path, what: &str) -> BoxResult<()> {
    for _ in 0..300 {
        if std::fs::metadata(kc).is_ok_and(|m| m.len() > 0)
            && client.apiserver_version().await.is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{what}: the API server did not answer within 30 s").into())
}

async fn run(opts: Opts) -> BoxResult<bool> {
    let dir = match &opts.out {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => tempfile::Builder::new().prefix("soak-").tempdir()?.keep(),
    };
    eprintln!(
        "soak: {:?} at {} Ats/s, output in {}",
        opts.duration,
        opts.rate,
        dir.display()
    );
    let kubeconfig = dir.join("kubeconfig");
    let mut server = Server {
        proc: None,
        port: free_port()?,
        dir: dir.clone(),
        kubeconfig: kubeconfig.clone(),
        starts: 0,
        event_ttl: opts.event_ttl,
    };
    server.spawn()?;
    for _ in 0..300 {
        if std::fs::metadata(&kubeconfig).is_ok_and(|m| m.len() > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = client_for(&kubeconfig)?;
    wait_ready(&client, &kubeconfig, "start").await?;
    kubectl(
        &kubeconfig,
        &[
            "apply",
            "-f",
            &workspace().join("artifacts/crds/").to_string_lossy(),
        ],
        None,
    )?;
    let mk = |name| -> BoxResult<Manager> {
        Ok(Manager {
            name,
            proc: None,
            metrics_port: free_port()?,
            health_port: free_port()?,
            dir: dir.clone(),
            kubeconfig: kubeconfig.clone(),
        })
    };
    let mut managers = [mk("manager-a")?, mk("manager-b")?];
    for m in &mut managers {
        m.spawn()?;
    }
    let mut samples = std::fs::File::create(dir.join("samples.csv"))?;
    writeln!(samples, "{CSV_HEADER}")?;
    let mut faults = std::fs::File::create(dir.join("faults.csv"))?;
    writeln!(faults, "t_seconds,fault,detail")?;
    let mut r = Run {
        opts: opts.clone(),
        dir: dir.clone(),
        server,
        managers,
        client: client.clone(),
        book: Arc::new(Mutex::new(Book::default())),
        t0: Instant::now(),
        samples,
        faults,
        manager_exits: 0,
        history_limit: None,
        rows: Vec::new(),
    };

    // The At creator: its own task, so that a slow request never delays the schedule.
    let stop_creating = tokio_util::sync::CancellationToken::new();
    let creator = {
        let (client, book, stop, rate) = (
            client.clone(),
            r.book.clone(),
            stop_creating.clone(),
            opts.rate,
        );
        tokio::spawn(async move {
            let ats: Api<At> = Api::namespaced(client, "default");
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0u64;
            let start = Instant::now();
            'ticks: loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                // The schedule, not the ticks, sets the count: after the server was down (or
                // slow), the Ats it should have had by now are created at once, as a client
                // keeping its rate would, so a run creates `rate` × its duration.
                let due = (start.elapsed().as_secs_f64() * rate) as u64 + 1;
                while i < due && !stop.is_cancelled() {
                    let name = format!("soak-{i}");
                    let at: At = match serde_json::from_value(json!({
                        "apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"schedule": rfc3339(SystemTime::now()), "run": {"command": "echo soak"}},
                    })) {
                        Ok(at) => at,
                        Err(e) => {
                            lock(&book)
                                .violations
                                .push(format!("building At {name}: {e}"));
                            break 'ticks;
                        }
                    };
                    let created = Instant::now();
                    let res = tokio::time::timeout(
                        Duration::from_secs(10),
                        ats.create(&PostParams::default(), &at),
                    )
                    .await;
                    let mut b = lock(&book);
                    match res {
                        Ok(Ok(_)) => {}
                        // A create whose answer was lost (the server was killed or slow past the
                        // timeout after storing it): the At is there, so it counts as created.
                        Ok(Err(e)) if e.code() == Some(409) => b.create_errors += 1,
                        // The server is down, restarting or refusing: the same name next tick.
                        _ => {
                            b.create_errors += 1;
                            continue 'ticks;
                        }
                    }
                    b.created += 1;
                    b.ats.insert(
                        name,
                        AtRec {
                            created,
                            done: None,
                            deleted: false,
                            late: false,
                            pods: HashSet::new(),
                        },
                    );
                    i += 1;
                }
            }
        })
    };

    let every = |d: Duration| Instant::now() + d;
    let mut next_kill = every(opts.kill_every);
    let mut next_drop = every(opts.drop_every);
    let mut next_compact = every(opts.compact_every);
    let mut next_webhook_down = every(opts.webhook_down_every);
    let mut webhook_up_at: Option<Instant> = None;
    let mut next_handover = every(opts.handover_every);
    let mut next_sample = Instant::now();
    let mut next_step = every(Duration::from_secs(5));
    let mut step = 0usize;
    let mut restart_manager: Option<(usize, Instant)> = None;
    let mut crash_restarts: Vec<(usize, Instant)> = Vec::new();
    let end = Instant::now() + opts.duration;
    let mut last_report = Instant::now();
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            r.sample().await;
            next_sample = now + opts.sample_every;
        }
        if now >= next_kill {
            r.server.kill_and_restart()?;
            let starts = r.server.starts;
            r.fault_row("apiserver-kill", &format!("start {starts}"));
            wait_ready(&client, &kubeconfig, "restart").await?;
            next_kill = now + opts.kill_every;
        }
        if now >= next_drop {
            let res = fault(&client, json!({"action": "dropWatches"})).await;
            r.fault_row("drop-watches", if res.is_ok() { "" } else { "not applied" });
            next_drop = now + opts.drop_every;
        }
        if now >= next_compact {
            let res = fault(&client, json!({"action": "compact"})).await;
            r.fault_row("compact", if res.is_ok() { "" } else { "not applied" });
            next_compact = now + opts.compact_every;
        }
        if now >= next_webhook_down && webhook_up_at.is_none() {
            let res = webhook_down(&client).await;
            let detail = match &res {
                Ok(port) => format!("endpoint 127.0.0.1:{port} not answering"),
                Err(e) => format!("not applied: {e}"),
            };
            r.fault_row("webhook-down", &detail);
            if res.is_ok() {
                webhook_up_at = Some(now + opts.webhook_down_for);
            }
            next_webhook_down = now + opts.webhook_down_every;
        }
        if let Some(at) = webhook_up_at
            && now >= at
        {
            // Retried on the next turn while the server is restarting.
            match webhook_up(&client).await {
                Ok(()) => {
                    r.fault_row("webhook-up", "");
                    webhook_up_at = None;
                }
                Err(e) => eprintln!("[{:>7.1}s] removing the down webhook: {e}", r.t()),
            }
        }
        // A manager that exited on its own is started again 5 s later, as the kubelet
        // restarts a pod's container.
        for i in 0..r.managers.len() {
            if restart_manager.is_some_and(|(j, _)| j == i) {
                continue;
            }
            if let Some(status) = r.managers[i].exited() {
                let name = r.managers[i].name;
                r.manager_exits += 1;
                r.fault_row(
                    "manager-exited",
                    &format!("{name} {status}; restarted in 5 s"),
                );
                crash_restarts.push((i, now + Duration::from_secs(5)));
            }
        }
        let mut k = 0;
        while k < crash_restarts.len() {
            if now >= crash_restarts[k].1 {
                let (i, _) = crash_restarts.remove(k);
                r.managers[i].spawn()?;
            } else {
                k += 1;
            }
        }
        if now >= next_handover && restart_manager.is_none() {
            if let Some(i) = r.leader().await {
                r.managers[i].stop();
                let name = r.managers[i].name;
                r.fault_row("leader-handover", &format!("{name} stopped"));
                restart_manager = Some((i, now + Duration::from_secs(10)));
            }
            next_handover = now + opts.handover_every;
        }
        if let Some((i, at)) = restart_manager
            && now >= at
        {
            r.managers[i].spawn()?;
            restart_manager = None;
        }
        if now >= next_step {
            let s = OPERATOR_STEPS[step % OPERATOR_STEPS.len()];
            if let Err(e) = operator_step(&kubeconfig, s) {
                eprintln!("[{:>7.1}s] operator step {s}: {e}", r.t());
            }
            step += 1;
            next_step = now + Duration::from_secs(15);
        }
        let _ = poll(&client, &r.book, opts.deadline).await;
        if last_report.elapsed() >= Duration::from_secs(60) {
            let b = lock(&r.book);
            eprintln!(
                "[{:>7.1}s] created {} (failed attempts {}) done {} deleted {} violations {}",
                r.t(),
                b.created,
                b.create_errors,
                b.done,
                b.deleted,
                b.violations.len()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The end: no more churn; everything created must finish and be cleaned up.
    stop_creating.cancel();
    let _ = creator.await;
    if let Some((i, _)) = restart_manager.take() {
        r.managers[i].spawn()?;
    }
    for (i, _) in crash_restarts.drain(..) {
        r.managers[i].spawn()?;
    }
    if webhook_up_at.is_some() {
        for _ in 0..20 {
            if webhook_up(&client).await.is_ok() {
                r.fault_row("webhook-up", "at the end");
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let _ = operator_step(&kubeconfig, "delete-rediscluster-tdset");
    let _ = operator_step(&kubeconfig, "delete-myapp");
    let drain_until = Instant::now() + Duration::from_secs(120);
    loop {
        let _ = poll(&client, &r.book, opts.deadline).await;
        let pending = lock(&r.book).ats.values().filter(|a| !a.deleted).count();
        if pending == 0 || Instant::now() > drain_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Leftovers: give the garbage collector and the queues time to settle, then look.
    let mut leftovers = String::new();
    for _ in 0..60 {
        leftovers = kubectl(
            &kubeconfig,
            &[
                "get",
                "ats,statefulsets,deployments,pods",
                "-n",
                "default",
                "-o",
                "name",
            ],
            None,
        )
        .unwrap_or_else(|e| e);
        let depth = match r.leader().await {
            Some(i) => prom_sum(&r.managers[i].metrics().await, "workqueue_depth").unwrap_or(0.0),
            None => 1.0,
        };
        if leftovers.trim().is_empty() && depth == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    r.sample().await;
    let ok = report(&mut r, &leftovers).await;
    for m in &mut r.managers {
        m.stop();
    }
    drop(r.server.proc.take());
    Ok(ok)
}

/// Prints the figures and the checks; true when every check held.
async fn report(r: &mut Run, leftovers: &str) -> bool {
    let mut b = lock(&r.book);
    let never_done = b.ats.values().filter(|a| a.done.is_none()).count();
    if never_done > 0 {
        b.violations
            .push(format!("{never_done} Ats never went DONE"));
    }
    if !leftovers.trim().is_empty() {
        b.violations.push(format!(
            "left behind after the churn stopped: {}",
            leftovers.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    let without_pod = b
        .ats
        .values()
        .filter(|a| a.done.is_some() && a.pods.is_empty())
        .count();
    println!(
        "\n## Soak: {:?}, {} Ats/s, in {}",
        r.opts.duration,
        r.opts.rate,
        r.dir.display()
    );
    println!(
        "Ats created {} (create attempts refused or failed: {}), DONE {}, deleted {}; DONE before a poll saw their pod: {}",
        b.created, b.create_errors, b.done, b.deleted, without_pod
    );
    println!(
        "API server starts: {}; managers that exited on their own (a Lease not renewed in time) and were restarted: {}",
        r.server.starts, r.manager_exits
    );
    // Growth after warm-up: the first sample past 10 % of the run (at least 60 s) against the
    // last, and the range in between.
    let warm = (r.opts.duration.as_secs_f64() * 0.1).max(60.0);
    println!("\n| process | figure | after warm-up | at the end | min | max |");
    println!("|---|---|---:|---:|---:|---:|");
    for process in ["apiserver", "manager-a", "manager-b"] {
        let rows: Vec<&Sample> = r
            .rows
            .iter()
            .filter(|s| s.process == process && s.t >= warm)
            .collect();
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            continue;
        };
        let figures: [Figure; 6] = [
            ("RSS MiB", |s| Some(s.stats.rss_kib as f64 / 1024.0)),
            ("anon MiB", |s| Some(s.stats.anon_kib as f64 / 1024.0)),
            ("fds", |s| Some(s.stats.fds as f64)),
            ("threads", |s| Some(s.stats.threads as f64)),
            ("tokio tasks", |s| s.tasks),
            ("history MiB", |s| s.history_bytes.map(|b| b / 1048576.0)),
        ];
        for (name, f) in figures {
            let vals: Vec<f64> = rows.iter().filter_map(|s| f(s)).collect();
            if vals.is_empty() {
                continue;
            }
            let min = vals.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            println!(
                "| {process} | {name} | {:.1} | {:.1} | {min:.1} | {max:.1} |",
                f(first).unwrap_or(f64::NAN),
                f(last).unwrap_or(f64::NAN)
            );
        }
    }
    let server_rss_max = r
        .rows
        .iter()
        .filter(|s| s.process == "apiserver")
        .map(|s| s.stats.rss_kib as f64 / 1024.0)
        .fold(0.0, f64::max);
    if let Some(limit) = r.history_limit {
        let limit = limit / 1048576.0;
        println!(
            "\nAPI server RSS at most {server_rss_max:.1} MiB, {} its history bound ({limit:.0} MiB, --history-max-bytes)",
            if server_rss_max <= limit {
                "within"
            } else {
                "above"
            }
        );
    }
    if b.violations.is_empty() {
        println!(
            "\nchecks: every At DONE within {:?}, one pod per At, nothing left behind, queues empty",
            r.opts.deadline
        );
        true
    } else {
        println!("\nchecks FAILED ({}):", b.violations.len());
        for v in b.violations.iter().take(50) {
            println!("  {v}");
        }
        false
    }
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "soak: {e}\nusage: hack/soak.sh DURATION [--rate N] [--deadline D] [--kill-every D] [--drop-every D] [--compact-every D] [--webhook-down-every D] [--webhook-down-for D] [--handover-every D] [--sample-every D] [--event-ttl D] [--out DIR]"
            );
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ok = rt.block_on(run(opts))?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
