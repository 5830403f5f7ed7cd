//! The simulated node: a pretend kubelet (and scheduler) that runs pods without containers.
//!
//! ## What a kubelet does in a real cluster
//!
//! A pod object is only a wish. The **scheduler** picks a node for it and writes the choice into
//! `spec.nodeName` (a *binding*). The **kubelet** on that node watches for pods bound to it,
//! pulls images, starts the containers through the container runtime, and reports what happens
//! in the pod's `status`: `phase` (`Pending` → `Running` → `Succeeded` or `Failed`), `startTime`,
//! `hostIP`/`podIP`, the conditions (`PodScheduled`, `Initialized`, `ContainersReady`, `Ready`,
//! ...) and one `containerStatuses` entry per container whose `state` is `waiting`, `running`
//! (with `startedAt`) or `terminated` (with `exitCode`, `reason` `Completed` or `Error`,
//! `startedAt`, `finishedAt`). What happens when a container exits depends on the pod's
//! `restartPolicy`: `Never` lets the pod end; `OnFailure` restarts a failed container (with an
//! exponential back-off, the `CrashLoopBackOff` you see in `kubectl get pods`) and lets the pod
//! end once every container succeeded; `Always` restarts every container forever. The kubelet
//! also finishes graceful deletion: a deleted pod on a node keeps its `deletionTimestamp` until
//! the kubelet has stopped its containers and deletes it for good with grace period 0.
//!
//! ## What the simulation keeps
//!
//! The background task started by [`spawn`] (on the server's tracker, stopped at shutdown)
//! follows the pods through the API as `system:node:embedded-node` ([`crate::client`]: a pod
//! informer, status writes through `pods/NAME/status` redone on conflict) and, for every pod:
//!
//! * **binds** a pod without `spec.nodeName` to the node [`NODE_NAME`] (`embedded-node`, which
//!   it registers as a `Ready` Node object of a fixed size, [`crate::machine`]) through
//!   `pods/NAME/binding`, the scheduler's write (the pod stays `Pending`, now with
//!   `PodScheduled=True`);
//! * **starts** it at once: `Running`, `startTime`, `hostIP`, `podIP`, every condition `True`,
//!   every container `running` and `ready`;
//! * **ends** it after the run time (`ClusterBuilder::pod_run_time` (crate `embedded-cluster`), default 1 s,
//!   zero allowed) according to each container's command ([`exit_code_of`]): a `/bin/sh -c`
//!   (or `sh -c`, `bash -c`) script that is exactly `exit N` exits with `N`, a script `false`
//!   (or a bare `false` command) with 1, anything else with 0. Then, by `restartPolicy`:
//!   - `Never`: the pod ends `Succeeded` when every container exited 0, else `Failed`; the
//!     containers are `terminated` with their exit codes and reasons;
//!   - `OnFailure`: every container that exited 0 stays `terminated`/`Completed`; a failed one
//!     gets `restartCount + 1`, its exit in `lastState`, and waits in `CrashLoopBackOff` for the
//!     kubelet's back-off (10 s, doubling, at most 5 min) before it runs again; the pod stays
//!     `Running` and ends `Succeeded` once all containers succeeded;
//!   - `Always`, or no `restartPolicy` (Kubernetes defaults it to `Always`): **long-running**.
//!     A container whose command fails (`exit N`, `false`) crash-loops as under `OnFailure`;
//!     every other container runs on, so the pod stays `Running` (and `Ready`, unless a
//!     container crash-loops) until deleted. This is how the pods of Deployments and
//!     StatefulSets behave. (A real kubelet would also restart a container that exits 0; the
//!     simulation cannot tell a finished `echo` from a server, so it treats success as
//!     "still serving".)
//! * **finishes deletion** of a pod on its node: a pod with a `deletionTimestamp` is deleted with
//!   grace period 0 at once, even while the node is paused (its finalizers, if any, still hold
//!   it until they are removed).
//!
//! [`NodeControl::pause`] freezes the clock of every pod: pods are still bound and started, but
//! none ends (or restarts) until [`NodeControl::resume`], so a test can hold a pod in `Running`
//! for as long as it wants. On resume, pods whose run time elapsed while paused end at once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use embedded_apiserver::ApiServer;
//! use embedded_apiserver::loopback::Resource;
//! use embedded_node::Node;
//! use serde_json::json;
//!
//! let server = ApiServer::builder().start().await?;
//! Node::builder().pod_run_time(Duration::ZERO).start(&server);
//! let admin = server.loopback("admin", &["system:masters"], "example");
//! let pods = Resource::core("pods");
//! let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "once"},
//!     "spec": {"restartPolicy": "Never",
//!              "containers": [{"name": "c", "image": "busybox",
//!                              "command": ["/bin/sh", "-c", "exit 3"]}]}});
//! let created = admin.create(&pods, "default", pod).await?;
//! // Watch the pod until the node has finished it.
//! let since: u64 = created["metadata"]["resourceVersion"].as_str().unwrap_or("0").parse()?;
//! let mut watch = admin.watch(&pods, Some("default"), since)?;
//! let pod = 'done: loop {
//!     for ev in watch.next().await? {
//!         if ev.object["status"]["phase"] == "Failed" {
//!             break 'done ev.object.to_value();
//!         }
//!     }
//! };
//! assert_eq!(pod["spec"]["nodeName"], "embedded-node");
//! assert_eq!(pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3);
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## What it leaves out
//!
//! No images, processes, probes, resources, volumes, init-container ordering (init containers
//! are reported `terminated`/`Completed` when the pod starts; ephemeral containers added to a
//! running pod, the API server's `ephemeral_containers` strategy, are reported `running` and stay so), evictions,
//! node pressure or pod networking beyond made-up addresses. No Events are emitted (a real
//! scheduler and kubelet report `Scheduled`, `Pulled`, `Created`, `Started`, `BackOff`; the
//! process runtime, [`crate::runtime`], does). Each container's log ([`super::logs`], what
//! `kubectl logs` reads) holds what the simulation decided for it, not a command's output:
//! for that, run the process runtime. Pods bound to another node are left alone. The one node
//! is always `Ready`.
//!
//! Timestamps come from the server's [`VirtualClock`], so with a paused tokio clock `finishedAt`
//! is exactly `startedAt` plus the run time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::VirtualClock;
use super::client::{Key, NodeApi, PodInformer, meta_str};
use super::logs::LogStore;
use super::machine;

/// The name of the simulated node.
pub const NODE_NAME: &str = "embedded-node";

/// The node's `InternalIP` and every pod's `hostIP`.
pub const HOST_IP: &str = "10.0.0.10";

/// Pauses and resumes the simulated node (see the module docs). Cheap to clone.
#[derive(Clone, Debug)]
pub struct NodeControl {
    paused: Arc<watch::Sender<bool>>,
}

impl Default for NodeControl {
    fn default() -> Self {
        NodeControl {
            paused: Arc::new(watch::channel(false).0),
        }
    }
}

impl NodeControl {
    /// Holds every pod where it is: pods are still bound and started, but none ends.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Lets pods end again; those whose run time elapsed while paused end at once.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Whether the node is paused.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }
}

/// Settings of the simulated node.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// How long a one-shot container runs before it exits.
    pub run_time: Duration,
    /// Source of the timestamps written into pod status.
    pub clock: VirtualClock,
    /// Where each container's log goes (what the node decided, one line per decision).
    pub logs: Arc<LogStore>,
}

/// Starts the simulated node on `tracker`; it stops when `shutdown` is cancelled.
pub fn spawn(
    api: NodeApi,
    config: KubeletConfig,
    control: NodeControl,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(run(api, config, control, shutdown));
}

/// The exit code the simulated container `c` (a `core/v1` Container) ends with.
///
/// The command is `command` followed by `args`. A shell invocation (`sh`, `/bin/sh`, `bash`,
/// `/bin/bash` followed by `-c`) is judged by its script — the remaining words joined by
/// spaces, so `["/bin/sh", "-c", "exit", "3"]` counts as `exit 3` too — which exits with `N` if
/// it is exactly `exit N` (taken modulo 256 like a shell does) and with 1 if it is exactly
/// `false`. A bare `false` or `/bin/false` command exits with 1. Everything else exits with 0.
pub fn exit_code_of(c: &Value) -> i32 {
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|f| c[*f].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match words.as_slice() {
        [shell, "-c", script @ ..] if matches!(*shell, "sh" | "/bin/sh" | "bash" | "/bin/bash") => {
            script_exit_code(&script.join(" "))
        }
        ["false" | "/bin/false"] => 1,
        _ => 0,
    }
}

fn script_exit_code(script: &str) -> i32 {
    let script = script.trim();
    if script == "false" {
        return 1;
    }
    let mut parts = script.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some("exit"), Some(n), None) => n
            .parse::<i64>()
            .map(|n| n.rem_euclid(256) as i32)
            .unwrap_or(0),
        _ => 0,
    }
}

/// What `restartPolicy` makes of an exited container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Restart {
    Never,
    OnFailure,
    Always,
}

pub(crate) fn restart_policy(pod: &Value) -> Restart {
    match pod["spec"]["restartPolicy"].as_str() {
        Some("Never") => Restart::Never,
        Some("OnFailure") => Restart::OnFailure,
        _ => Restart::Always,
    }
}

/// Whether the pod's containers ever exit in the simulation: always for `Never` and
/// `OnFailure`; for `Always`, only when some container's command fails (it then crash-loops).
fn ever_exits(pod: &Value) -> bool {
    restart_policy(pod) != Restart::Always
        || containers(pod, "containers")
            .iter()
            .any(|c| exit_code_of(c) != 0)
}

/// The kubelet's crash-loop back-off: 10 s, doubling per restart, at most 5 minutes.
pub(crate) fn back_off(restarts: u32) -> Duration {
    let secs = 10u64.saturating_mul(1u64 << restarts.saturating_sub(1).min(5));
    Duration::from_secs(secs.min(300))
}

/// What [`Kubelet::sync`] reads of a pod, taken from the informer's copy.
struct Seen {
    uid: String,
    node: String,
    deleting: bool,
    phase: String,
    /// Whether the pod has ephemeral containers.
    ephemeral: bool,
    /// How a running pod the node does not track yet is adopted: its stage, when it next
    /// changes, and its restarts so far (read for a running pod only).
    adopted: Option<(Stage, Option<Instant>, u32)>,
}

impl Seen {
    fn of(pod: &Value, run_time: Duration) -> Seen {
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        Seen {
            uid: meta_str(pod, "uid").to_owned(),
            node: pod["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            deleting: !meta_str(pod, "deletionTimestamp").is_empty(),
            phase: phase.to_owned(),
            ephemeral: pod["spec"]["ephemeralContainers"].is_array(),
            adopted: (phase == "Running").then(|| adoption(pod, run_time)),
        }
    }
}

/// The track of a running pod the node adopts: crash-looping when a container waits, else
/// running (and due to exit after the run time if it ever exits).
fn adoption(pod: &Value, run_time: Duration) -> (Stage, Option<Instant>, u32) {
    let statuses = pod["status"]["containerStatuses"].as_array();
    let statuses = statuses.map(Vec::as_slice).unwrap_or_default();
    let restarts = statuses
        .iter()
        .filter_map(|s| s["restartCount"].as_u64())
        .max()
        .unwrap_or(0);
    let restarts = u32::try_from(restarts).unwrap_or(u32::MAX);
    let backing_off = statuses.iter().any(|s| s["state"]["waiting"].is_object());
    if backing_off {
        (
            Stage::BackOff,
            Some(Instant::now() + back_off(restarts)),
            restarts,
        )
    } else {
        let due = ever_exits(pod).then(|| Instant::now() + run_time);
        (Stage::Running, due, restarts)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Containers run; at `due` the one-shot ones exit.
    Running,
    /// Failed containers wait in CrashLoopBackOff; at `due` they run again.
    BackOff,
}

#[derive(Debug)]
struct Track {
    uid: String,
    stage: Stage,
    /// When the stage ends; `None` for long-running pods.
    due: Option<Instant>,
    restarts: u32,
}

struct Kubelet {
    api: NodeApi,
    pods: PodInformer,
    config: KubeletConfig,
    tracks: HashMap<Key, Track>,
    next_ip: u32,
}

async fn run(
    api: NodeApi,
    config: KubeletConfig,
    control: NodeControl,
    shutdown: CancellationToken,
) {
    let mut paused_rx = control.paused.subscribe();
    let mut k = Kubelet {
        pods: PodInformer::new(api.clone()),
        api,
        config,
        tracks: HashMap::new(),
        next_ip: 0,
    };
    register_node_as(
        &k.api,
        &k.now(),
        "simulated://1.0",
        &machine::simulated_capacity(),
    )
    .await;
    tracing::debug!(node = NODE_NAME, "simulated node started");
    loop {
        if !*paused_rx.borrow_and_update() {
            k.fire_due().await;
        }
        let deadline = if *paused_rx.borrow() {
            None
        } else {
            k.next_deadline()
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            keys = k.pods.next() => match keys {
                Some(keys) => {
                    // Only the pods of this batch can have left (see `LogStore::forget_gone`).
                    k.forget_gone_logs(&keys);
                    for key in &keys {
                        k.sync(key).await;
                    }
                    k.forget_gone_logs(&keys);
                }
                None => break,
            },
            r = paused_rx.changed() => {
                if r.is_err() {
                    // `control` keeps the sender alive, so this cannot happen; stop cleanly anyway.
                    break;
                }
            }
            _ = sleep_until_opt(deadline) => {}
        }
    }
    tracing::debug!(node = NODE_NAME, "simulated node stopped");
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl Kubelet {
    /// Forgets the logs of the pods of `keys` the node no longer holds.
    fn forget_gone_logs(&self, keys: &[Key]) {
        let pods = &self.pods;
        self.config
            .logs
            .forget_gone(keys, |key| pods.uid_of(key), pods.len(), || pods.alive());
    }

    fn now(&self) -> String {
        self.config.clock.now_time()
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.tracks.values().filter_map(|t| t.due).min()
    }

    fn alloc_ip(&mut self) -> String {
        let n = self.next_ip;
        self.next_ip = self.next_ip.wrapping_add(1);
        format!("10.244.{}.{}", (n / 250) % 256, n % 250 + 2)
    }

    /// Writes the status of pod `key` through the API (see [`NodeApi::update_pod_status`]),
    /// starting from the informer's copy, and keeps the answer in the informer.
    async fn update_status<R>(
        &mut self,
        key: &Key,
        uid: &str,
        change: impl FnMut(&mut Value) -> Option<R>,
    ) -> Option<R> {
        let cached = self.pods.current(key, uid);
        let (r, written) = self.api.update_pod_status(key, uid, cached, change).await?;
        self.pods.observe(written);
        Some(r)
    }

    /// Brings one pod in line with what the node should be doing with it.
    async fn sync(&mut self, key: &Key) {
        let Some(pod) = self.pods.get(key) else {
            self.tracks.remove(key);
            self.config.logs.remove(&key.0, &key.1);
            return;
        };
        // What the decision needs, read from the informer's copy without copying the pod.
        let seen = Seen::of(pod, self.config.run_time);
        let uid = seen.uid;
        if self.tracks.get(key).is_some_and(|t| t.uid != uid) {
            self.tracks.remove(key);
        }
        let node = seen.node.as_str();
        if !node.is_empty() && node != NODE_NAME {
            self.tracks.remove(key);
            return;
        }
        if seen.deleting {
            self.tracks.remove(key);
            if node == NODE_NAME {
                self.api.finish_deletion(key, &uid).await;
            }
            return;
        }
        match seen.phase.as_str() {
            "Succeeded" | "Failed" => {
                self.tracks.remove(key);
            }
            "Running" if node == NODE_NAME => {
                // Adopt a pod that was already running (a relist, or a test that seeded it).
                if !self.tracks.contains_key(key)
                    && let Some((stage, due, restarts)) = seen.adopted
                {
                    self.tracks.insert(
                        key.clone(),
                        Track {
                            uid: uid.clone(),
                            stage,
                            due,
                            restarts,
                        },
                    );
                }
                if seen.ephemeral {
                    self.report_ephemeral(key, &uid).await;
                }
            }
            _ if self.tracks.get(key).is_some_and(|t| t.uid == uid) => {
                // Started already; the informer has not seen the node's own write yet.
            }
            _ => self.start(key, &uid, node.is_empty()).await,
        }
    }

    /// Ephemeral containers added to a running pod (the API server's `ephemeral_containers` strategy) are reported
    /// `running` at once (the simulation runs nothing, and they never end on their own).
    async fn report_ephemeral(&mut self, key: &Key, uid: &str) {
        let now = self.now();
        self.update_status(key, uid, |pod| {
            add_ephemeral_statuses(pod, &now).then_some(())
        })
        .await;
    }

    /// Binds (if needed, the scheduler's part) and starts a pod: `Running`, every container
    /// `running` and ready.
    async fn start(&mut self, key: &Key, uid: &str, unbound: bool) {
        if unbound && !self.api.bind(key, uid).await {
            return;
        }
        let now = self.now();
        let ip = self.alloc_ip();
        // After a binding the informer's copy is stale: read the pod again.
        let cached = (!unbound).then(|| self.pods.current(key, uid)).flatten();
        let started = self
            .api
            .update_pod_status(key, uid, cached, |pod| {
                let bound = pod["spec"]["nodeName"] == NODE_NAME;
                let phase = pod["status"]["phase"].as_str().unwrap_or_default();
                if !bound
                    || !meta_str(pod, "deletionTimestamp").is_empty()
                    || matches!(phase, "Running" | "Succeeded" | "Failed")
                {
                    return None;
                }
                let running: Vec<Value> = containers(pod, "containers")
                    .iter()
                    .map(|c| container_status(c, true, 0, json!({"running": {"startedAt": now}})))
                    .collect();
                let inits: Vec<Value> = containers(pod, "initContainers")
                    .iter()
                    .map(|c| {
                        container_status(
                            c,
                            false,
                            0,
                            json!({"terminated": {"exitCode": 0, "reason": "Completed",
                                                  "startedAt": now, "finishedAt": now}}),
                        )
                    })
                    .collect();
                with_status(pod, |status| {
                    status.insert("phase".into(), json!("Running"));
                    status.insert("hostIP".into(), json!(HOST_IP));
                    status.insert("hostIPs".into(), json!([{"ip": HOST_IP}]));
                    status.insert("podIP".into(), json!(ip));
                    status.insert("podIPs".into(), json!([{"ip": ip}]));
                    status.insert("startTime".into(), json!(now));
                    status.insert("qosClass".into(), json!("BestEffort"));
                    status.insert(
                        "conditions".into(),
                        json!([
                            condition("PodReadyToStartContainers", "True", &now),
                            condition("Initialized", "True", &now),
                            condition("Ready", "True", &now),
                            condition("ContainersReady", "True", &now),
                            condition("PodScheduled", "True", &now),
                        ]),
                    );
                    status.insert("containerStatuses".into(), json!(running));
                    if !inits.is_empty() {
                        status.insert("initContainerStatuses".into(), json!(inits));
                    }
                });
                Some((ever_exits(pod), containers(pod, "containers")))
            })
            .await;
        let Some(((exits, specs), written)) = started else {
            return;
        };
        let one_shot = restart_policy(&written) != Restart::Always;
        self.pods.observe(written);
        for c in &specs {
            self.log_start(key, uid, c, one_shot);
        }
        tracing::debug!(namespace = %key.0, pod = %key.1, node = NODE_NAME, "pod started");
        let due = exits.then(|| Instant::now() + self.config.run_time);
        self.tracks.insert(
            key.clone(),
            Track {
                uid: uid.to_owned(),
                stage: Stage::Running,
                due,
                restarts: 0,
            },
        );
    }

    /// Ends or restarts the containers of every pod whose stage is over.
    async fn fire_due(&mut self) {
        let now = Instant::now();
        let due: Vec<Key> = self
            .tracks
            .iter()
            .filter(|(_, t)| t.due.is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(track) = self.tracks.remove(&key) else {
                continue;
            };
            match track.stage {
                Stage::Running => self.containers_exit(&key, track).await,
                Stage::BackOff => self.containers_restart(&key, track).await,
            }
        }
    }

    /// The run time is over: one-shot containers exit with their command's exit code.
    async fn containers_exit(&mut self, key: &Key, track: Track) {
        let now = self.now();
        let outcome = self
            .update_status(key, &track.uid, |pod| {
                let policy = restart_policy(pod);
                let specs = containers(pod, "containers");
                let old_statuses = pod["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut any_failed = false;
                let mut all_ok = true;
                let mut statuses = vec![];
                let mut exits = vec![];
                for c in &specs {
                    let name = c["name"].as_str().unwrap_or_default();
                    let old = old_statuses
                        .iter()
                        .find(|s| s["name"] == name)
                        .cloned()
                        .unwrap_or_else(|| container_status(c, false, 0, json!({})));
                    let restarts = old["restartCount"].as_u64().unwrap_or(0);
                    let Some(started_at) = old["state"]["running"]["startedAt"].as_str() else {
                        // Already terminated (a container that succeeded under OnFailure).
                        statuses.push(old);
                        continue;
                    };
                    let code = exit_code_of(c);
                    if code == 0 && policy == Restart::Always {
                        // Under Always only a failing command ends; the others run on.
                        statuses.push(old);
                        continue;
                    }
                    exits.push((name.to_owned(), code));
                    let terminated = json!({
                        "exitCode": code,
                        "reason": if code == 0 { "Completed" } else { "Error" },
                        "startedAt": started_at,
                        "finishedAt": now,
                        "containerID": old["containerID"],
                    });
                    let mut s = old.clone();
                    s["ready"] = json!(false);
                    s["started"] = json!(false);
                    if code != 0 && policy != Restart::Never {
                        any_failed = true;
                        all_ok = false;
                        s["restartCount"] = json!(restarts + 1);
                        s["lastState"] = json!({"terminated": terminated});
                        s["state"] = json!({"waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": format!(
                                "back-off {}s restarting failed container={name} pod={}_{}({})",
                                back_off(track.restarts + 1).as_secs(), key.1, key.0, track.uid
                            ),
                        }});
                    } else {
                        if code != 0 {
                            all_ok = false;
                        }
                        s["state"] = json!({"terminated": terminated});
                    }
                    statuses.push(s);
                }
                let phase = after_exit(pod, statuses, any_failed, all_ok, policy, &now);
                Some((phase, exits))
            })
            .await;
        let Some((phase, exits)) = outcome else {
            return;
        };
        for (name, code) in exits {
            self.log_exit(key, &track.uid, &name, code);
        }
        if phase == "Running" {
            tracing::debug!(namespace = %key.0, pod = %key.1, "container failed; backing off");
            let restarts = track.restarts + 1;
            self.tracks.insert(
                key.clone(),
                Track {
                    stage: Stage::BackOff,
                    due: Some(Instant::now() + back_off(restarts)),
                    restarts,
                    ..track
                },
            );
        } else {
            tracing::debug!(namespace = %key.0, pod = %key.1, phase, "pod finished");
        }
    }

    /// Ends a container's log with the line the simulated node writes when it exits.
    fn log_exit(&self, key: &Key, uid: &str, name: &str, code: i32) {
        if let Some(buf) = self.config.logs.get(&key.0, &key.1, uid, name, false) {
            buf.append_text(
                self.config.clock.now(),
                &format!("simulated node: the container exited with code {code}\n"),
            );
            buf.close();
        }
    }

    /// The crash-loop back-off is over: failed containers run again.
    async fn containers_restart(&mut self, key: &Key, track: Track) {
        let now = self.now();
        let restarted = self
            .update_status(key, &track.uid, |pod| {
                let mut statuses = pod["status"]["containerStatuses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let specs = containers(pod, "containers");
                let mut restarted = vec![];
                for s in statuses.iter_mut() {
                    if s["state"]["waiting"].is_object() {
                        if let Some(c) = specs.iter().find(|c| c["name"] == s["name"]) {
                            restarted.push(c.clone());
                        }
                        s["state"] = json!({"running": {"startedAt": now}});
                        s["ready"] = json!(true);
                        s["started"] = json!(true);
                    }
                }
                let all_ready = statuses.iter().all(|s| s["ready"] == true);
                with_status(pod, |status| {
                    status.insert("containerStatuses".into(), json!(statuses));
                    if all_ready {
                        set_condition(status, "Ready", "True", "", "", &now);
                        set_condition(status, "ContainersReady", "True", "", "", &now);
                    }
                });
                Some((restarted, restart_policy(pod) != Restart::Always))
            })
            .await;
        if let Some((restarted, one_shot)) = restarted {
            for c in &restarted {
                self.log_start(key, &track.uid, c, one_shot);
            }
            self.tracks.insert(
                key.clone(),
                Track {
                    stage: Stage::Running,
                    due: Some(Instant::now() + self.config.run_time),
                    ..track
                },
            );
        }
    }

    /// Starts a log instance for container `c` and writes what the simulation decided for it
    /// (`one_shot`: the pod's containers are not restarted when they succeed).
    fn log_start(&self, key: &Key, uid: &str, c: &Value, one_shot: bool) {
        let name = c["name"].as_str().unwrap_or_default();
        let buf = self.config.logs.start_instance(&key.0, &key.1, uid, name);
        let words: Vec<&str> = ["command", "args"]
            .iter()
            .filter_map(|f| c[*f].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let code = exit_code_of(c);
        let what = if code != 0 || one_shot {
            format!("it exits with code {code} after {:?}", self.config.run_time)
        } else {
            "it runs until the pod is deleted".to_owned()
        };
        buf.append_text(
            self.config.clock.now(),
            &format!("simulated node: the command {words:?} is not run; {what}\n"),
        );
    }
}

/// The Node object [`NODE_NAME`] a kubelet registers: labels, `Ready` and no pressure,
/// `capacity` (and the same `allocatable`: nothing is reserved for the system), addresses,
/// and `runtime` as its container runtime.
pub(crate) fn node_object(now: &str, runtime: &str, capacity: &Value) -> Value {
    let ready = |ty: &str, status: &str, reason: &str, msg: &str| {
        json!({"type": ty, "status": status, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/control-plane": ""
            }
        },
        "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                ready("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ready("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ready("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ready("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": NODE_NAME}
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
            "nodeInfo": {
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                "containerRuntimeVersion": runtime, "operatingSystem": "linux",
                "architecture": "amd64", "osImage": "embedded simulated node",
                "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""
            }
        }
    })
}

/// The kubelet's port as the Node reports it (`status.daemonEndpoints`); the embedded node
/// listens on no port: the API server reaches it in process.
pub(crate) const KUBELET_PORT: u16 = 10250;

/// Registers the Node object [`NODE_NAME`] through the API (kept if it exists) with `runtime`
/// as its container runtime and `capacity` as its size.
pub(crate) async fn register_node_as(api: &NodeApi, now: &str, runtime: &str, capacity: &Value) {
    api.register_node(node_object(now, runtime, capacity)).await;
}

pub(crate) fn containers(pod: &Value, field: &str) -> Vec<Value> {
    pod["spec"][field].as_array().cloned().unwrap_or_default()
}

/// The pod's side of its containers exiting: its phase (Running while containers still run or
/// restart, else Succeeded when all exited 0, else Failed) and its readiness conditions, now
/// false. Takes the containers' new statuses and returns the phase.
fn after_exit(
    pod: &mut Value,
    statuses: Vec<Value>,
    any_failed: bool,
    all_ok: bool,
    policy: Restart,
    now: &str,
) -> &'static str {
    let ended = !any_failed && policy != Restart::Always;
    let phase = match (ended, all_ok) {
        (false, _) => "Running",
        (true, true) => "Succeeded",
        (true, false) => "Failed",
    };
    let unready: Vec<&str> = statuses
        .iter()
        .filter(|s| s["ready"] != true)
        .filter_map(|s| s["name"].as_str())
        .collect();
    let (reason, message) = if phase == "Succeeded" {
        ("PodCompleted", String::new())
    } else {
        (
            "ContainersNotReady",
            format!("containers with unready status: [{}]", unready.join(" ")),
        )
    };
    with_status(pod, |status| {
        status.insert("phase".into(), json!(phase));
        status.insert("containerStatuses".into(), json!(statuses));
        set_condition(status, "Ready", "False", reason, &message, now);
        set_condition(status, "ContainersReady", "False", reason, &message, now);
        if ended {
            set_condition(status, "PodReadyToStartContainers", "False", "", "", now);
        }
    });
    phase
}

/// Runs `f` on the pod's `status` map (created if missing).
pub(crate) fn with_status(pod: &mut Value, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let mut status = match pod.get_mut("status").map(Value::take) {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    f(&mut status);
    pod["status"] = Value::Object(status);
}

pub(crate) fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| char::from_digit(fastrand::u32(..16), 16).unwrap_or('0'))
        .collect()
}

/// Adds a `running` entry to `status.ephemeralContainerStatuses` for each ephemeral container
/// that has none; `true` when something was added. Ephemeral containers are never `ready`
/// (they have no probes and do not count for the pod's readiness).
pub(crate) fn add_ephemeral_statuses(pod: &mut Value, now: &str) -> bool {
    let mut statuses = pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut added = false;
    for c in containers(pod, "ephemeralContainers") {
        if statuses.iter().any(|s| s["name"] == c["name"]) {
            continue;
        }
        let mut s = container_status(&c, false, 0, json!({"running": {"startedAt": now}}));
        s["started"] = json!(true);
        statuses.push(s);
        added = true;
    }
    if added {
        with_status(pod, |status| {
            status.insert("ephemeralContainerStatuses".into(), json!(statuses));
        });
    }
    added
}

pub(crate) fn container_status(c: &Value, ready: bool, restarts: u64, state: Value) -> Value {
    let image = c["image"].as_str().unwrap_or_default();
    let mut s = json!({
        "name": c["name"],
        "image": image,
        "imageID": format!("{image}@sha256:{}", random_hex(64)),
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": state,
        "lastState": {},
    });
    if state_is_started(&s["state"]) {
        s["containerID"] = json!(format!("containerd://{}", random_hex(64)));
    }
    s
}

fn state_is_started(state: &Value) -> bool {
    state["running"].is_object() || state["terminated"].is_object()
}

/// A pod condition as the kubelet sets it. Its `lastProbeTime` (a zero time, which the kubelet
/// sends as `null`) is left out: the server drops a `null` field of a built-in kind anyway, and
/// a status body without `null` takes the server's cheaper path for unknown fields
/// (`registry::validation::check_unknown_fields`).
pub(crate) fn condition(ty: &str, status: &str, now: &str) -> Value {
    json!({"type": ty, "status": status, "lastTransitionTime": now})
}

pub(crate) fn set_condition(
    status: &mut serde_json::Map<String, Value>,
    ty: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    let mut conds = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut c = condition(ty, value, now);
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    match conds.iter_mut().find(|x| x["type"] == ty) {
        Some(existing) if existing["status"] == value => {
            c["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            *existing = c;
        }
        Some(existing) => *existing = c,
        None => conds.push(c),
    }
    status.insert("conditions".into(), json!(conds));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(command: Value, args: Value) -> Value {
        json!({"name": "c", "image": "busybox", "command": command, "args": args})
    }

    #[test]
    fn shell_exit_scripts_decide_the_exit_code() {
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "exit 3"]), json!(null))),
            3
        );
        assert_eq!(
            exit_code_of(&c(json!(["sh", "-c"]), json!(["exit 42"]))),
            42
        );
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "exit", "7"]), json!(null))),
            7
        );
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", " false "]), json!(null))),
            1
        );
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "exit 0"]), json!(null))),
            0
        );
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "exit 257"]), json!(null))),
            1
        );
        assert_eq!(exit_code_of(&c(json!(["false"]), json!(null))), 1);
    }

    #[test]
    fn anything_else_succeeds() {
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "echo hi; exit 3"]), json!(null))),
            0
        );
        assert_eq!(exit_code_of(&c(json!(["echo", "exit 3"]), json!(null))), 0);
        assert_eq!(exit_code_of(&c(json!(null), json!(null))), 0);
        assert_eq!(
            exit_code_of(&c(json!(["/bin/sh", "-c", "exit x"]), json!(null))),
            0
        );
    }

    #[test]
    fn crash_loop_back_off_doubles_up_to_five_minutes() {
        assert_eq!(back_off(1), Duration::from_secs(10));
        assert_eq!(back_off(2), Duration::from_secs(20));
        assert_eq!(back_off(5), Duration::from_secs(160));
        assert_eq!(back_off(6), Duration::from_secs(300));
        assert_eq!(back_off(60), Duration::from_secs(300));
    }

    #[test]
    fn restart_policy_defaults_to_always() {
        assert_eq!(restart_policy(&json!({"spec": {}})), Restart::Always);
        assert_eq!(
            restart_policy(&json!({"spec": {"restartPolicy": "Never"}})),
            Restart::Never
        );
    }
}
