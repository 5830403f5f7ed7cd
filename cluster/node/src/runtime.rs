//! The process runtime: a node whose containers are real child processes of the server.
//!
//! ## Why
//!
//! The simulated node ([`crate::kubelet`]) decides a pod's outcome from its command's text and
//! never runs anything, so nothing a pod prints exists. With
//! `ClusterBuilder::node_runtime` (crate `embedded-cluster`)`(`[`NodeRuntime::Process`]`)` (standalone:
//! `sample-controller apiserver --node-runtime process`) the node really runs each container's
//! command on the host, captures its output into the pod's log ([`super::logs`], served at
//! `GET .../pods/NAME/log`, what `kubectl logs` reads) and reports the real exit code.
//!
//! ## What it mirrors
//!
//! The kubelet's pod workers (`pkg/kubelet/pod_workers.go`, `kuberuntime_manager.go`), with
//! the scheduler's binding in front:
//!
//! * **binding**: a pod without `spec.nodeName` is bound to [`NODE_NAME`] through
//!   `pods/NAME/binding` (`PodScheduled=True`) and a `Scheduled` event is recorded
//!   (`Successfully assigned ns/pod to embedded-node`, from `default-scheduler`); once bound
//!   it is `Pending` with its containers `waiting` in `ContainerCreating` until they start;
//! * **the API**: everything the node reads and writes goes through the API as
//!   `system:node:embedded-node` ([`crate::client`]): the pods by informer, each container's
//!   report as a `pods/NAME/status` write (the pod's containers report concurrently, so a
//!   write that meets `409 Conflict` reads the pod again and is redone), events, the
//!   ConfigMaps and Secrets of volumes. The Node it registers reports this machine's CPUs and
//!   memory ([`crate::machine`]);
//! * **starting**: each container of `spec.containers` starts at once (init containers are
//!   reported `Completed` without running). For each run the node records `Pulled` (the image
//!   is **not** pulled: the event and the container status's `imageID` say so), `Created` and
//!   `Started`; the status is `running` with `startedAt` and `containerID: process://<pid>`;
//! * **the process**: `command` followed by `args`. Without `command` the image's entrypoint
//!   would run; the node knows one only for an image mapped to a host binary
//!   (`--image-binary IMAGE=PATH`, [`super::env`]), which then runs followed by `args`. For
//!   other images `args` alone is the command, and a container with neither runs nothing: in
//!   a pod whose `restartPolicy` is `Never` or `OnFailure` (a Job's) it exits 0 at once, as a
//!   shell image's default `sh` does without input, and in an `Always` pod it is reported
//!   running with nothing behind it until stopped, as the simulated node decides. The
//!   environment is clean: `PATH`, `HOME=/`, `HOSTNAME=<pod name>`, `POD_ROOT` (the pod's
//!   directory, [`super::volumes`]), `KUBERNETES_SERVICE_HOST`/`_PORT` (the API server), the
//!   ServiceAccount's `KUBECONFIG` ([`super::serviceaccount`]) and the container's `env` with
//!   `fieldRef`s resolved and `$(VAR)` references expanded, as in `command` and `args`
//!   ([`super::env`]); the process runs in `workingDir` when that directory exists on the host
//!   (else the server's directory); stdin is closed (a pipe, for attach, when the container
//!   has `stdin: true`), stdout and stderr go to the container's log, line by line with the
//!   time each line was read;
//! * **exit**: `state.terminated` with `exitCode` (128 + the signal number for a process ended
//!   by a signal, as a container runtime reports it), `reason` `Completed` (0) or `Error`,
//!   `startedAt`, `finishedAt`. A command that cannot be started (not found, not executable)
//!   ends with exit code 128 and reason `StartError`, and a Warning `Failed` event;
//! * **restartPolicy**: `Never`: the pod ends `Succeeded` when every container exited 0, else
//!   `Failed`. `OnFailure`: a failed container restarts, `Always`: every container restarts;
//!   as in the kubelet, the first restart is immediate and each later one waits the crash-loop
//!   back-off (10 s, doubling, at most 5 min), with a Warning `BackOff` event and `waiting:
//!   CrashLoopBackOff` meanwhile. The exit goes to `lastState`, `restartCount` counts the
//!   restarts, and the previous run's output stays readable with `previous=true`;
//! * **ephemeral containers** added to a running pod (the API server's `ephemeral_containers` strategy) start as they
//!   appear, run once (never restarted), are reported in `status.ephemeralContainerStatuses`
//!   (never ready, no say in the pod's phase), and are killed when the pod's containers end;
//! * **activeDeadlineSeconds**: counted from the pod's `startTime`; when it passes, the
//!   containers are killed and the pod ends `Failed` with `reason: DeadlineExceeded`, message
//!   `Pod was active on the node longer than the specified deadline`, and a Warning
//!   `DeadlineExceeded` event;
//! * **deletion**: a pod deleted with a grace period keeps its `deletionTimestamp` while the
//!   node records `Killing` (`Stopping container c`) for each running container, sends its
//!   process group SIGTERM, waits up to `deletionGracePeriodSeconds`, then sends SIGKILL. Only
//!   once every process has been reaped is the object deleted (grace period 0), so a client
//!   that sees the pod gone knows its processes are gone.
//!
//! ## Safety: this runs commands from API objects on the host
//!
//! Anyone who may create a pod may run any command as the server's user. So:
//!
//! * the runtime is **opt-in**: [`NodeRuntime::Simulated`] is the default everywhere;
//! * the server **refuses to start** with the process runtime on an address that is not
//!   loopback unless RBAC is enforced (`StartError::UnsafeRuntime` of `embedded-cluster`), so only users
//!   the RBAC rules allow to create pods can run commands;
//! * every child runs in **its own process group** (`process_group(0)`), so a signal reaches
//!   everything the command started (a shell and its children), and processes **never outlive
//!   the server**: shutting the server down kills every group (SIGKILL) and waits until each
//!   child has been reaped; a child whose handle is dropped (the server dropped without
//!   shutdown) is killed by tokio's `kill_on_drop`. Only a server killed with SIGKILL itself
//!   can leave children behind (preventing that needs `prctl(PR_SET_PDEATHSIG)`, unsafe code
//!   this crate does not contain);
//! * at most [`ProcessConfig::max_pods`] pods run processes at once (default
//!   [`DEFAULT_MAX_PODS`], `--node-runtime-max-pods`); further pods wait `Pending` in
//!   `ContainerCreating` for a free slot (a pod without any command runs nothing and needs
//!   no slot);
//! * [`ProcessConfig::timeout`] (`--node-runtime-timeout`) caps how long any pod may run: it
//!   acts as an `activeDeadlineSeconds` for every pod (the smaller of the two wins);
//! * the output kept per container is bounded ([`super::logs`]).
//!
//! Signals are sent with the system's `kill` program (`kill -TERM -- -<pgid>`): sending them
//! directly would need `libc` and unsafe code, which the workspace forbids in library crates.
//!
//! ## What it leaves out
//!
//! Images, isolation (no namespaces, cgroups, users, filesystems: the command runs as the
//! server's user, on the host), resources, probes, volumes other than `configMap`, `secret`
//! and `emptyDir` (those are directories on the host, found through rewritten paths:
//! [`super::volumes`]), init-container ordering, pod networking (the addresses are made up,
//! as in the simulation; a pod's ports are the host's, see [`super::remotecommand::process_exec`],
//! so two pods serving the same port collide), `valueFrom` other than `fieldRef`, `envFrom`,
//! and the node pause of the simulated node ([`super::kubelet::NodeControl`] has no effect).
//!
//! ## Exec, attach and port-forward
//!
//! The node registers each running container in its [`NodeHandle`] (the container's spec,
//! its stdin pipe when it has `stdin: true`, its live output), which
//! [`super::remotecommand`] and [`super::remotecommand::process_exec`] use for `kubectl exec`, `attach` and
//! `port-forward`. An exec'd process follows the same rules as a container's: its own
//! process group, killed (and reaped) when its client goes or the server shuts down, and at
//! most [`DEFAULT_MAX_SESSIONS`] sessions at once.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::VirtualClock;
use super::client::{Key, NodeApi, PodInformer, meta_str};
use super::env::ImageBinaries;
use super::kubelet::{
    self, HOST_IP, NODE_NAME, Restart, back_off, container_status, containers, restart_policy,
    set_condition, with_status,
};
use super::logs::{LineSplitter, LogBuffer, LogStore};
use super::machine;
use super::serviceaccount::{self, ApiServerAddress};

/// Default limit of pods running at once under the process runtime.
pub const DEFAULT_MAX_PODS: usize = 16;

/// The `PATH` children get (a container image's usual one).
const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long the output readers may drain a pipe after the process ended (a grandchild that
/// escaped the group could keep it open forever).
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Which node runs the pods when the server simulates a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeRuntime {
    /// Decide each pod's outcome from its command's text; run nothing (the simulated kubelet).
    #[default]
    Simulated,
    /// Run each container's command as a child process of the server.
    ///
    /// **Safety**: anyone who may create a pod may then run any command as the server's user.
    /// So this runtime is opt-in; `embedded-cluster` refuses to start it on an address that
    /// is not loopback unless RBAC is enforced; every child runs in its own process group,
    /// killed (SIGKILL) and reaped when the server shuts down; at most
    /// [`NodeBuilder::max_pods`](crate::NodeBuilder::max_pods) pods run processes at once,
    /// [`NodeBuilder::timeout`](crate::NodeBuilder::timeout) caps how long any pod may run,
    /// and the output kept per container is bounded.
    Process,
}

/// Settings of the process runtime.
#[derive(Clone, Debug)]
pub struct ProcessConfig {
    /// Source of the timestamps written into pod status and events.
    pub clock: VirtualClock,
    /// Pods that may run at once.
    pub max_pods: usize,
    /// Longest any pod may run (an `activeDeadlineSeconds` for every pod).
    pub timeout: Option<Duration>,
    /// Where the containers' output goes.
    pub logs: Arc<LogStore>,
    /// The host binary standing for each known image's entrypoint ([`super::env`]).
    pub image_binaries: ImageBinaries,
    /// The API server as the pods reach it (`KUBERNETES_SERVICE_HOST`/`_PORT`, the
    /// ServiceAccount's kubeconfig: [`super::serviceaccount`]).
    pub api_server: ApiServerAddress,
}

/// Starts the process node on `tracker`; it (and every child process) stops when `shutdown`
/// is cancelled, and the tracker waits until every child has been reaped. `handle` is where
/// the node registers its running containers, for exec, attach and port-forward
/// ([`super::remotecommand`]); make it with [`NodeHandle::new`] on the same token and tracker.
pub fn spawn(
    api: NodeApi,
    config: ProcessConfig,
    handle: NodeHandle,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    let node = Node {
        pods: PodInformer::new(api.clone()),
        ctx: Arc::new(Ctx {
            api,
            slots: Arc::new(Semaphore::new(config.max_pods.max(1))),
            config,
            handle,
        }),
        workers: HashMap::new(),
        next_ip: 0,
        shutdown,
        tracker: tracker.clone(),
    };
    tracker.spawn(node.run());
}

/// What every pod worker shares.
struct Ctx {
    api: NodeApi,
    config: ProcessConfig,
    slots: Arc<Semaphore>,
    handle: NodeHandle,
}

/// Default limit of exec, attach and port-forward sessions open at once on the process node.
pub const DEFAULT_MAX_SESSIONS: usize = 32;

/// Chunks of live output (each at most 8 KiB) an attached client may lag behind, per stream,
/// before it misses the oldest.
const ATTACH_BACKLOG: usize = 64;

/// The process node as exec, attach and port-forward see it ([`super::remotecommand`]): the
/// containers running now, the bound on open sessions, and the node's shutdown token and task
/// tracker, under which every session and every exec'd process runs (so none outlives the
/// server).
#[derive(Clone)]
pub struct NodeHandle {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    running: Mutex<HashMap<ContainerKey, Arc<RunningContainer>>>,
    sessions: Arc<Semaphore>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

/// `(namespace, pod, container)`.
type ContainerKey = (String, String, String);

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle").finish_non_exhaustive()
    }
}

impl NodeHandle {
    /// A handle for a node stopped by `shutdown`, whose sessions run on `tracker`, allowing
    /// `max_sessions` (at least 1) open at once.
    pub fn new(shutdown: CancellationToken, tracker: TaskTracker, max_sessions: usize) -> Self {
        NodeHandle {
            inner: Arc::new(NodeInner {
                running: Mutex::new(HashMap::new()),
                sessions: Arc::new(Semaphore::new(max_sessions.max(1))),
                shutdown,
                tracker,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ContainerKey, Arc<RunningContainer>>> {
        self.inner.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The running instance of a container of the pod with `uid`, if it runs now.
    pub(crate) fn running(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> Option<Arc<RunningContainer>> {
        let key = (namespace.to_owned(), pod.to_owned(), container.to_owned());
        self.lock().get(&key).filter(|r| r.uid == uid).cloned()
    }

    /// A session slot, or `None` when [`DEFAULT_MAX_SESSIONS`] (or the configured bound)
    /// sessions are open.
    pub(crate) fn session_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.inner.sessions.clone().try_acquire_owned().ok()
    }

    /// Cancelled when the server shuts down.
    pub(crate) fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The tracker the server waits on at shutdown.
    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.inner.tracker
    }

    fn register(&self, key: ContainerKey, running: Arc<RunningContainer>) {
        self.lock().insert(key, running);
    }

    fn unregister(&self, key: &ContainerKey, running: &Arc<RunningContainer>) {
        let mut map = self.lock();
        if map.get(key).is_some_and(|r| Arc::ptr_eq(r, running)) {
            map.remove(key);
        }
    }
}

/// One running instance of a container, as exec and attach reach it.
pub(crate) struct RunningContainer {
    /// The pod's uid (a pod of the same name made later is another pod).
    pub(crate) uid: String,
    /// The container's spec (`env`, `workingDir`, `stdin`, `stdinOnce`, ...).
    pub(crate) spec: Value,
    /// Where its volume mounts are on the host ([`super::volumes`]).
    pub(crate) mounts: Arc<super::volumes::Mounts>,
    /// The process's stdin, when the container has `stdin: true`; `None` once closed.
    pub(crate) stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    /// Live stdout chunks, for attach.
    pub(crate) stdout: tokio::sync::broadcast::Sender<bytes::Bytes>,
    /// Live stderr chunks, for attach.
    pub(crate) stderr: tokio::sync::broadcast::Sender<bytes::Bytes>,
    /// Cancelled when the process has exited.
    pub(crate) ended: CancellationToken,
}

impl Ctx {
    fn now(&self) -> String {
        self.config.clock.now_time()
    }
}

/// Why a pod's containers are being stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The pod was deleted with this grace period: stop, then delete the object.
    Delete(Duration),
    /// The object is gone (or replaced): stop at once.
    Gone,
}

struct Worker {
    uid: String,
    stop: watch::Sender<Option<Stop>>,
    /// The pod's `spec.ephemeralContainers`, for the worker to start the ones added.
    ephemeral: watch::Sender<Vec<Value>>,
    handle: JoinHandle<()>,
}

struct Node {
    ctx: Arc<Ctx>,
    pods: PodInformer,
    workers: HashMap<Key, Worker>,
    next_ip: u32,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Node {
    /// Forgets the logs of the pods of `keys` the node no longer holds.
    fn forget_gone_logs(&self, keys: &[Key]) {
        let pods = &self.pods;
        self.ctx
            .config
            .logs
            .forget_gone(keys, |key| pods.uid_of(key), pods.len(), || pods.alive());
    }

    async fn run(mut self) {
        kubelet::register_node_as(
            &self.ctx.api,
            &self.ctx.now(),
            "process://1.0",
            &machine::process_capacity(),
        )
        .await;
        tracing::debug!(node = NODE_NAME, "process node started");
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                keys = self.pods.next() => match keys {
                    Some(keys) => {
                        // Only the pods of this batch can have left (see `LogStore::forget_gone`).
                        self.forget_gone_logs(&keys);
                        for key in &keys {
                            self.sync(key).await;
                        }
                        self.forget_gone_logs(&keys);
                    }
                    None => break,
                },
            }
        }
        // Every worker sees the same cancellation and kills its processes; the tracker
        // waits for them.
        tracing::debug!(node = NODE_NAME, "process node stopped");
    }

    fn alloc_ip(&mut self) -> String {
        let n = self.next_ip;
        self.next_ip = self.next_ip.wrapping_add(1);
        format!("10.244.{}.{}", (n / 250) % 256, n % 250 + 2)
    }

    /// Brings one pod in line with what the node should be doing with it.
    async fn sync(&mut self, key: &Key) {
        let Some(pod) = self.pods.get(key).cloned() else {
            if let Some(w) = self.workers.remove(key) {
                w.stop.send_replace(Some(Stop::Gone));
            }
            self.ctx.config.logs.remove(&key.0, &key.1);
            return;
        };
        let uid = meta_str(&pod, "uid").to_owned();
        if self.workers.get(key).is_some_and(|w| w.uid != uid)
            && let Some(w) = self.workers.remove(key)
        {
            w.stop.send_replace(Some(Stop::Gone));
        }
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        if !node.is_empty() && node != NODE_NAME {
            return;
        }
        let deleting = !meta_str(&pod, "deletionTimestamp").is_empty();
        if deleting {
            if node.is_empty() {
                return;
            }
            match self.workers.get(key) {
                Some(w) if !w.handle.is_finished() => {
                    let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                        .as_u64()
                        .unwrap_or(0);
                    w.stop
                        .send_replace(Some(Stop::Delete(Duration::from_secs(grace))));
                }
                _ => self.ctx.api.finish_deletion(key, &uid).await,
            }
            return;
        }
        if node.is_empty() {
            self.bind(key, &uid).await;
            return; // the binding's own change brings the pod back here
        }
        if let Some(w) = self.workers.get(key) {
            let now = containers(&pod, "ephemeralContainers");
            w.ephemeral.send_if_modified(|known| {
                let changed = *known != now;
                if changed {
                    *known = now;
                }
                changed
            });
        }
        if matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        ) || self.workers.contains_key(key)
        {
            return;
        }
        let ip = self.alloc_ip();
        let (stop, stop_rx) = watch::channel(None);
        let (ephemeral, ephemeral_rx) = watch::channel(containers(&pod, "ephemeralContainers"));
        let handle = self.tracker.spawn(run_pod(
            self.ctx.clone(),
            key.clone(),
            uid.clone(),
            ip,
            Signals {
                stop: stop_rx,
                ephemeral: ephemeral_rx,
            },
            self.shutdown.clone(),
        ));
        self.workers.insert(
            key.clone(),
            Worker {
                uid,
                stop,
                ephemeral,
                handle,
            },
        );
    }

    /// The scheduler's part: bind to this node (`pods/NAME/binding`), then a `Scheduled`
    /// event.
    async fn bind(&mut self, key: &Key, uid: &str) {
        if !self.ctx.api.bind(key, uid).await {
            return;
        }
        let Some(pod) = self.ctx.api.pod(key, uid).await else {
            return;
        };
        let event = event_of(
            &self.ctx.now(),
            &pod,
            None,
            "default-scheduler",
            "Normal",
            "Scheduled",
            &format!("Successfully assigned {}/{} to {NODE_NAME}", key.0, key.1),
        );
        self.ctx.api.create_event(&key.0, event).await;
    }
}

/// A core/v1 Event about `pod` (and the container at `field_path`, if any).
fn event_of(
    now: &str,
    pod: &Value,
    container: Option<&str>,
    component: &str,
    ty: &str,
    reason: &str,
    message: &str,
) -> Value {
    let ns = meta_str(pod, "namespace").to_owned();
    let name = meta_str(pod, "name").to_owned();
    let mut involved = json!({
        "kind": "Pod", "namespace": ns, "name": name, "apiVersion": "v1",
        "uid": meta_str(pod, "uid"), "resourceVersion": meta_str(pod, "resourceVersion"),
    });
    if let Some(c) = container {
        let list = if containers(pod, "ephemeralContainers")
            .iter()
            .any(|e| e["name"] == c)
        {
            "ephemeralContainers"
        } else {
            "containers"
        };
        involved["fieldPath"] = json!(format!("spec.{list}{{{c}}}"));
    }
    let mut source = json!({"component": component});
    if component == "kubelet" {
        source["host"] = json!(NODE_NAME);
    }
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {
            "name": format!("{name}.{}", kubelet::random_hex(16)),
            "namespace": ns,
        },
        "involvedObject": involved,
        "reason": reason, "message": message, "type": ty,
        "source": source,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component,
        "reportingInstance": if component == "kubelet" { NODE_NAME } else { "" },
        "eventTime": null,
    })
}

/// Records a kubelet event about the pod `key` (with `uid`) if it still exists.
async fn event(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    container: Option<&str>,
    ty: &str,
    reason: &str,
    message: &str,
) {
    let Some(pod) = ctx.api.pod(key, uid).await else {
        return;
    };
    let event = event_of(&ctx.now(), &pod, container, "kubelet", ty, reason, message);
    ctx.api.create_event(&key.0, event).await;
}

/// A pod's stop request, shared by its container tasks: cancelled `kill`, and the grace period
/// to give the processes before SIGKILL.
#[derive(Clone)]
struct Kill {
    token: CancellationToken,
    grace: Arc<Mutex<Duration>>,
}

impl Kill {
    fn fire(&self, grace: Duration) {
        *self.grace.lock().unwrap_or_else(|p| p.into_inner()) = grace;
        self.token.cancel();
    }

    fn grace(&self) -> Duration {
        *self.grace.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The effective deadline of a pod: `activeDeadlineSeconds`, capped by the runtime's timeout.
fn deadline_of(pod: &Value, cap: Option<Duration>) -> Option<Duration> {
    let own = pod["spec"]["activeDeadlineSeconds"]
        .as_u64()
        .map(Duration::from_secs);
    match (own, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a pod worker hears from the node: a stop, and the pod's ephemeral containers.
struct Signals {
    stop: watch::Receiver<Option<Stop>>,
    ephemeral: watch::Receiver<Vec<Value>>,
}

/// One pod's life on the node, from a free slot to its end (or its deletion): wait for a slot,
/// mark the pod started, run its containers until they end or something stops them, then
/// write what ended it and finish a deletion that raced with its end.
async fn run_pod(
    ctx: Arc<Ctx>,
    key: Key,
    uid: String,
    ip: String,
    mut signals: Signals,
    shutdown: CancellationToken,
) {
    let Some(permit) = wait_for_slot(&ctx, &key, &uid, &mut signals.stop, &shutdown).await else {
        return;
    };
    let Some(pod) = start_pod(&ctx, &key, &uid, &ip).await else {
        // Deleted before it started: nothing runs, so the deletion can finish.
        ctx.api.finish_deletion(&key, &uid).await;
        return;
    };
    let Some((dir, account)) =
        mount_volumes(&ctx, &key, &uid, &pod, &mut signals.stop, &shutdown).await
    else {
        return;
    };
    let mut base_env = ctx.config.api_server.service_env();
    base_env.extend(account.as_ref().map(serviceaccount::Mounted::env));
    let setting = PodSetting {
        dir: &dir,
        account: account.as_ref(),
        env: base_env,
    };
    let renew = async {
        match &account {
            Some(a) => a.keep_fresh(&ctx.api).await,
            None => std::future::pending().await,
        }
    };
    let ended = tokio::select! {
        ended = run_containers(&ctx, &key, &uid, &pod, &setting, &mut signals, &shutdown) => ended,
        never = renew => match never {},
    };
    drop(permit);
    // The processes are done: the pod's directory goes.
    drop(dir);
    match ended {
        Some(Ended::Deadline) => fail_past_deadline(&ctx, &key, &uid).await,
        Some(Ended::Shutdown | Ended::Gone) => return,
        Some(Ended::Delete) | None => {}
    }
    // A deletion that raced with the pod's own end is finished here.
    let deleting = ctx
        .api
        .pod(&key, &uid)
        .await
        .is_some_and(|p| !meta_str(&p, "deletionTimestamp").is_empty());
    if deleting {
        ctx.api.finish_deletion(&key, &uid).await;
    }
}

/// Sets up the pod's directory and volumes ([`super::volumes`]) and its ServiceAccount's files
/// ([`super::serviceaccount`]). While an object or key is missing, or the token cannot be had,
/// the pod stays `ContainerCreating` with a Warning `FailedMount` event (recorded again only
/// when the message changes), retried every [`MOUNT_RETRY`]. `None` when the pod must not
/// start after all (stopped or the server shuts down; a deletion is finished here).
async fn mount_volumes(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    pod: &Value,
    stop: &mut watch::Receiver<Option<Stop>>,
    shutdown: &CancellationToken,
) -> Option<(super::volumes::PodDir, Option<serviceaccount::Mounted>)> {
    let mut last_error = String::new();
    loop {
        let attempt = match super::volumes::fetch_sources(&ctx.api, pod).await {
            Ok(sources) => {
                let p = pod.clone();
                tokio::task::spawn_blocking(move || super::volumes::set_up(&sources, &p)).await
            }
            Err(e) => Ok(Err(e)),
        };
        let attempt = match attempt {
            Ok(Ok(dir)) => {
                match serviceaccount::mount(&ctx.api, pod, dir.root(), &ctx.config.api_server).await
                {
                    Ok(serviceaccount::Mount::Mounted(a)) => Ok(Ok((dir, Some(a)))),
                    Ok(serviceaccount::Mount::None) => Ok(Ok((dir, None))),
                    Ok(serviceaccount::Mount::Missing(message)) => {
                        event(ctx, key, uid, None, "Warning", "FailedMount", &message).await;
                        Ok(Ok((dir, None)))
                    }
                    Err(e) => Ok(Err(e)),
                }
            }
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(e),
        };
        match attempt {
            Ok(Ok(mounted)) => return Some(mounted),
            Ok(Err(super::volumes::MountError(message))) => {
                if message != last_error {
                    event(ctx, key, uid, None, "Warning", "FailedMount", &message).await;
                    last_error = message;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "setting up a pod's volumes panicked");
                return None;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(MOUNT_RETRY) => {}
            () = shutdown.cancelled() => return None,
            s = stopped(stop) => {
                if let Some(Stop::Delete(_)) = s {
                    ctx.api.finish_deletion(key, uid).await;
                }
                return None;
            }
        }
    }
}

/// How often the node retries setting up volumes whose object or key is missing.
const MOUNT_RETRY: Duration = Duration::from_secs(2);

/// What every container of a running pod is started with: the pod's directory, its mounted
/// ServiceAccount, and the variables the node puts before the container's own `env`.
struct PodSetting<'a> {
    dir: &'a super::volumes::PodDir,
    account: Option<&'a serviceaccount::Mounted>,
    env: Vec<(String, String)>,
}

impl PodSetting<'_> {
    /// Container `c` as it runs ([`super::env::resolve`]: environment, expanded command line,
    /// the image's binary) and where its mounts are on the host.
    fn container(&self, ctx: &Ctx, pod: &Value, c: &Value) -> (Value, Arc<super::volumes::Mounts>) {
        let mut mounts = super::volumes::Mounts::of(self.dir, pod, c);
        if let Some(a) = self.account {
            mounts = mounts.with_mount(serviceaccount::SERVICE_ACCOUNT_DIR, &a.dir);
        }
        let c = super::env::resolve(pod, c, &self.env, &ctx.config.image_binaries);
        (c, Arc::new(mounts))
    }
}

/// Why the node stopped a pod's containers before they ended on their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// `activeDeadlineSeconds` (or the runtime's timeout) passed.
    Deadline,
    /// The pod was deleted: its containers got the grace period.
    Delete,
    /// The object is gone or replaced: killed at once.
    Gone,
    /// The server shuts down: killed at once.
    Shutdown,
}

/// Waits for a slot on the node (only pods that run a process need one). `None` when the pod
/// must not start: the server shuts down, or a stop came first (there is nothing to kill; a
/// deletion is finished here). `Some(None)` for a pod that needs no slot.
async fn wait_for_slot(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    stop: &mut watch::Receiver<Option<Stop>>,
    shutdown: &CancellationToken,
) -> Option<Option<tokio::sync::OwnedSemaphorePermit>> {
    let needs_slot = ctx.api.pod(key, uid).await.is_some_and(|p| {
        containers(&p, "containers").iter().any(|c| {
            !argv_of(c).is_empty()
                || c["image"]
                    .as_str()
                    .is_some_and(|i| ctx.config.image_binaries.contains_key(i))
        })
    });
    let slot = async {
        if needs_slot {
            ctx.slots.clone().acquire_owned().await.ok().map(Some)
        } else {
            Some(None)
        }
    };
    tokio::select! {
        p = slot => p,
        _ = shutdown.cancelled() => None,
        s = stopped(stop) => {
            if let Some(Stop::Delete(_)) = s {
                ctx.api.finish_deletion(key, uid).await;
            }
            None
        }
    }
}

/// Marks the pod started, as the kubelet does once it has a sandbox: `Pending` with every
/// container `ContainerCreating`, init containers `Completed`, the node's and the pod's IPs,
/// `startTime`, and the `PodScheduled`, `PodReadyToStartContainers` and `Initialized`
/// conditions. Returns the stored pod, or `None` when it is gone or being deleted.
async fn start_pod(ctx: &Ctx, key: &Key, uid: &str, ip: &str) -> Option<Value> {
    let now = ctx.now();
    let started = ctx.api.update_pod_status(key, uid, None, |pod| {
        if !meta_str(pod, "deletionTimestamp").is_empty() {
            return None;
        }
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
        let waiting: Vec<Value> = containers(pod, "containers")
            .iter()
            .map(|c| {
                container_status(
                    c,
                    false,
                    0,
                    json!({"waiting": {"reason": "ContainerCreating"}}),
                )
            })
            .collect();
        with_status(pod, |status| {
            status.insert("phase".into(), json!("Pending"));
            status.insert("containerStatuses".into(), json!(waiting));
            set_condition(status, "PodScheduled", "True", "", "", &now);
            status.insert("hostIP".into(), json!(HOST_IP));
            status.insert("hostIPs".into(), json!([{"ip": HOST_IP}]));
            status.insert("podIP".into(), json!(ip));
            status.insert("podIPs".into(), json!([{"ip": ip}]));
            status.insert("startTime".into(), json!(now));
            status.insert("qosClass".into(), json!("BestEffort"));
            set_condition(status, "PodReadyToStartContainers", "True", "", "", &now);
            set_condition(status, "Initialized", "True", "", "", &now);
            if !inits.is_empty() {
                status.insert("initContainerStatuses".into(), json!(inits));
            }
        });
        Some(())
    });
    started.await.map(|((), pod)| pod)
}

/// Runs the pod's containers (one task each, under its restart policy) until every one has
/// ended for good. The first of the deadline, a stop or a shutdown stops them (a deadline also
/// records a Warning `DeadlineExceeded` event); which one it was is returned, `None` when the
/// containers ended on their own.
///
/// Ephemeral containers added meanwhile (the API server's `ephemeral_containers` strategy) are started as they appear, each
/// once (the kubelet never restarts them); they end with the pod's containers, being killed if
/// still running then, and never decide the pod's phase.
async fn run_containers(
    ctx: &Arc<Ctx>,
    key: &Key,
    uid: &str,
    pod: &Value,
    setting: &PodSetting<'_>,
    signals: &mut Signals,
    shutdown: &CancellationToken,
) -> Option<Ended> {
    let kill = Kill {
        token: shutdown.child_token(),
        grace: Arc::new(Mutex::new(Duration::ZERO)),
    };
    let ephemeral_kill = Kill {
        token: kill.token.child_token(),
        grace: kill.grace.clone(),
    };
    let mut ephemeral_tasks = tokio::task::JoinSet::new();
    let mut ephemeral_started = std::collections::HashSet::new();
    let mut ephemeral_open = true;
    let stop = &mut signals.stop;
    let policy = restart_policy(pod);
    let mut tasks = tokio::task::JoinSet::new();
    for c in containers(pod, "containers") {
        let (c, mounts) = setting.container(ctx, pod, &c);
        tasks.spawn(run_container(
            ctx.clone(),
            key.clone(),
            uid.to_owned(),
            c,
            mounts,
            policy,
            kill.clone(),
        ));
    }
    let deadline = deadline_of(pod, ctx.config.timeout).map(|d| Instant::now() + d);
    let mut why: Option<Ended> = None;
    loop {
        if why.is_none() {
            let added: Vec<Value> = signals
                .ephemeral
                .borrow_and_update()
                .iter()
                .filter(|c| {
                    c["name"]
                        .as_str()
                        .is_some_and(|n| !ephemeral_started.contains(n))
                })
                .cloned()
                .collect();
            for c in added {
                ephemeral_started.insert(c["name"].as_str().unwrap_or_default().to_owned());
                let (c, mounts) = setting.container(ctx, pod, &c);
                ephemeral_tasks.spawn(run_container(
                    ctx.clone(),
                    key.clone(),
                    uid.to_owned(),
                    c,
                    mounts,
                    Restart::Never,
                    ephemeral_kill.clone(),
                ));
            }
        }
        tokio::select! {
            r = tasks.join_next() => {
                if r.is_none() {
                    break; // every container has ended for good
                }
            }
            Some(_) = ephemeral_tasks.join_next(), if !ephemeral_tasks.is_empty() => {}
            r = signals.ephemeral.changed(), if ephemeral_open && why.is_none() => {
                // The node dropped the worker's sender: the pod is gone, a stop follows.
                ephemeral_open = r.is_ok();
            }
            _ = sleep_until_opt(deadline), if why.is_none() => {
                why = Some(Ended::Deadline);
                event(ctx, key, uid, None, "Warning", "DeadlineExceeded",
                      "Pod was active on the node longer than the specified deadline").await;
                let grace = grace_of(ctx, key, uid).await;
                stop_containers(ctx, key, uid, &kill, grace).await;
            }
            s = stopped(stop), if why.is_none() => {
                match s {
                    Some(Stop::Delete(grace)) => {
                        why = Some(Ended::Delete);
                        stop_containers(ctx, key, uid, &kill, grace).await;
                    }
                    _ => {
                        why = Some(Ended::Gone);
                        kill.fire(Duration::ZERO);
                    }
                }
            }
            _ = shutdown.cancelled(), if why.is_none() => {
                why = Some(Ended::Shutdown);
                kill.fire(Duration::ZERO);
            }
        }
    }
    // The pod's containers are done: ephemeral ones still running go with them.
    ephemeral_kill.fire(ephemeral_kill.grace());
    while ephemeral_tasks.join_next().await.is_some() {}
    why
}

/// The kubelet's verdict on a pod past its deadline: `Failed` with reason `DeadlineExceeded`,
/// not ready.
async fn fail_past_deadline(ctx: &Ctx, key: &Key, uid: &str) {
    let now = ctx.now();
    let failed = ctx.api.update_pod_status(key, uid, None, |pod| {
        with_status(pod, |status| {
            status.insert("phase".into(), json!("Failed"));
            status.insert("reason".into(), json!("DeadlineExceeded"));
            status.insert(
                "message".into(),
                json!("Pod was active on the node longer than the specified deadline"),
            );
            set_condition(status, "Ready", "False", "PodFailed", "", &now);
            set_condition(status, "ContainersReady", "False", "PodFailed", "", &now);
            set_condition(status, "PodReadyToStartContainers", "False", "", "", &now);
        });
        Some(())
    });
    failed.await;
}

/// The grace period a pod's containers get when the node stops them on its own.
async fn grace_of(ctx: &Ctx, key: &Key, uid: &str) -> Duration {
    let secs = ctx
        .api
        .pod(key, uid)
        .await
        .and_then(|p| p["spec"]["terminationGracePeriodSeconds"].as_u64())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// `Killing` events for every running container, then the kill.
async fn stop_containers(ctx: &Ctx, key: &Key, uid: &str, kill: &Kill, grace: Duration) {
    let running: Vec<String> = ctx
        .api
        .pod(key, uid)
        .await
        .and_then(|p| p["status"]["containerStatuses"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|s| s["state"]["running"].is_object())
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect();
    for c in &running {
        event(
            ctx,
            key,
            uid,
            Some(c),
            "Normal",
            "Killing",
            &format!("Stopping container {c}"),
        )
        .await;
    }
    kill.fire(grace);
}

/// Waits for a stop request (`None` when the node dropped the sender without one).
async fn stopped(stop: &mut watch::Receiver<Option<Stop>>) -> Option<Stop> {
    stop.wait_for(Option::is_some).await.ok().and_then(|g| *g)
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The argv of a container: `command` + `args` (or `args` alone).
fn argv_of(c: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .filter_map(|f| c[*f].as_array())
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// How one run of a container ended.
struct Exit {
    code: i32,
    reason: &'static str,
    message: Option<String>,
    started_at: String,
}

/// One container: run, record the exit, restart per `policy` with back-off, until it ends for
/// good or `kill` fires.
async fn run_container(
    ctx: Arc<Ctx>,
    key: Key,
    uid: String,
    c: Value,
    mounts: Arc<super::volumes::Mounts>,
    policy: Restart,
    kill: Kill,
) {
    let name = c["name"].as_str().unwrap_or_default().to_owned();
    let image = c["image"].as_str().unwrap_or_default().to_owned();
    let argv = argv_of(&c);
    let pulled = match ctx.config.image_binaries.get(&image) {
        Some(bin) => format!(
            "Container image \"{image}\" not pulled: the process runtime runs {} for it on the host",
            bin.display()
        ),
        None => format!(
            "Container image \"{image}\" not pulled: the process runtime runs the command on the host"
        ),
    };
    let mut restarts: u32 = 0;
    loop {
        let buf = ctx.config.logs.start_instance(&key.0, &key.1, &uid, &name);
        event(&ctx, &key, &uid, Some(&name), "Normal", "Pulled", &pulled).await;
        if argv.is_empty() {
            // Nothing to run without the image's entrypoint. A pod that is not restarted takes
            // it to exit 0 at once (a shell image's `sh` with no input: `alpine`, `busybox`);
            // one that is restarted, to serve until stopped (as the simulated node decides).
            let now = ctx.now();
            let one_shot = policy != Restart::Always;
            buf.append_text(
                ctx.config.clock.now(),
                if one_shot {
                    "process runtime: the container has no command; its image's entrypoint cannot run without the image, so it exits 0 at once\n"
                } else {
                    "process runtime: the container has no command; its image's entrypoint cannot run without the image, so nothing runs\n"
                },
            );
            set_running(&ctx, &key, &uid, &name, &now, "process://none").await;
            // Nothing runs, but the container is running as far as exec is concerned: a
            // command exec'd in it gets its environment.
            let running = Arc::new(RunningContainer {
                uid: uid.clone(),
                spec: c.clone(),
                mounts: mounts.clone(),
                stdin: tokio::sync::Mutex::new(None),
                stdout: tokio::sync::broadcast::channel(1).0,
                stderr: tokio::sync::broadcast::channel(1).0,
                ended: CancellationToken::new(),
            });
            let registered = (key.0.clone(), key.1.clone(), name.clone());
            ctx.handle.register(registered.clone(), running.clone());
            event(
                &ctx,
                &key,
                &uid,
                Some(&name),
                "Normal",
                "Created",
                &format!("Created container: {name}"),
            )
            .await;
            event(
                &ctx,
                &key,
                &uid,
                Some(&name),
                "Normal",
                "Started",
                &format!("Started container {name}"),
            )
            .await;
            if one_shot {
                buf.close();
                let exit = Exit {
                    code: 0,
                    reason: "Completed",
                    message: None,
                    started_at: now,
                };
                set_terminated(&ctx, &key, &uid, &name, &exit, policy, false).await;
                return;
            }
            kill.token.cancelled().await;
            ctx.handle.unregister(&registered, &running);
            running.ended.cancel();
            buf.close();
            let exit = Exit {
                code: 137,
                reason: "Error",
                message: None,
                started_at: now,
            };
            set_terminated(&ctx, &key, &uid, &name, &exit, policy, true).await;
            return;
        }
        let exit = run_once(&ctx, &key, &uid, &name, &c, &mounts, &argv, &buf, &kill).await;
        buf.close();
        let killed = kill.token.is_cancelled();
        let restart = !killed
            && match policy {
                Restart::Never => false,
                Restart::OnFailure => exit.code != 0,
                Restart::Always => true,
            };
        if !restart {
            set_terminated(&ctx, &key, &uid, &name, &exit, policy, killed).await;
            return;
        }
        let delay = restart_delay(restarts + 1);
        set_back_off(&ctx, &key, &uid, &name, &exit, delay).await;
        if !delay.is_zero() {
            event(
                &ctx,
                &key,
                &uid,
                Some(&name),
                "Warning",
                "BackOff",
                &format!(
                    "Back-off restarting failed container {name} in pod {}_{}({uid})",
                    key.1, key.0
                ),
            )
            .await;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = kill.token.cancelled() => {
                // Stopped while waiting: nothing runs; the last exit stays in lastState.
                return;
            }
        }
        restarts += 1;
        update_container(
            &ctx,
            &key,
            &uid,
            &name,
            |s| s["restartCount"] = json!(restarts),
            None,
        )
        .await;
    }
}

/// How long the kubelet waits before the `n`th restart of a container: the first restart is
/// immediate (no back-off entry exists yet), then 10 s, doubling, at most 5 minutes
/// (`doBackOff` in `kuberuntime_manager.go`).
fn restart_delay(n: u32) -> Duration {
    if n <= 1 {
        Duration::ZERO
    } else {
        back_off(n - 1)
    }
}

/// Spawns the process, captures its output, waits for it (or kills it), returns its exit.
#[allow(clippy::too_many_arguments)]
async fn run_once(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    name: &str,
    c: &Value,
    mounts: &Arc<super::volumes::Mounts>,
    argv: &[String],
    buf: &Arc<LogBuffer>,
    kill: &Kill,
) -> Exit {
    let mut cmd = container_command(key, c, argv, mounts);
    let started_at = ctx.now();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let message = format!(
                "failed to start container {name:?}: exec: {:?}: {e}",
                argv[0]
            );
            buf.append_text(ctx.config.clock.now(), &format!("{message}\n"));
            event(
                ctx,
                key,
                uid,
                Some(name),
                "Warning",
                "Failed",
                &format!("Error: {message}"),
            )
            .await;
            return Exit {
                code: 128,
                reason: "StartError",
                message: Some(message),
                started_at,
            };
        }
    };
    let pid = child.id().unwrap_or(0);
    tracing::debug!(namespace = %key.0, pod = %key.1, container = name, pid, "container started");
    let running = Arc::new(RunningContainer {
        uid: uid.to_owned(),
        spec: c.clone(),
        mounts: mounts.clone(),
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
        stdout: tokio::sync::broadcast::channel(ATTACH_BACKLOG).0,
        stderr: tokio::sync::broadcast::channel(ATTACH_BACKLOG).0,
        ended: CancellationToken::new(),
    });
    let registered = (key.0.clone(), key.1.clone(), name.to_owned());
    ctx.handle.register(registered.clone(), running.clone());
    set_running_with_events(ctx, key, uid, name, &started_at, pid).await;
    let readers = capture_output(&mut child, buf, ctx.config.clock, &running);
    let status = tokio::select! {
        s = child.wait() => s,
        _ = kill.token.cancelled() => terminate(&mut child, pid, kill.grace()).await,
    };
    ctx.handle.unregister(&registered, &running);
    // An attach holding the stdin pipe must not keep it open past the process.
    running.stdin.lock().await.take();
    for r in readers {
        let abort = r.abort_handle();
        if tokio::time::timeout(DRAIN_TIMEOUT, r).await.is_err() {
            abort.abort();
        }
    }
    // After the drain: an attached client that sees `ended` has been sent every chunk.
    running.ended.cancel();
    let code = match &status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
        }
        Err(_) => 137,
    };
    tracing::debug!(namespace = %key.0, pod = %key.1, container = name, pid, code, "container exited");
    Exit {
        code,
        reason: if code == 0 { "Completed" } else { "Error" },
        message: None,
        started_at,
    }
}

/// The command a container runs: its argv, a clean environment (PATH, HOME, HOSTNAME and the
/// container's own `env` values), its working directory when it exists, stdin piped when the
/// container has `stdin: true` (for attach) and closed otherwise, output piped, in a process
/// group of its own and killed if dropped.
fn container_command(
    key: &Key,
    c: &Value,
    argv: &[String],
    mounts: &super::volumes::Mounts,
) -> tokio::process::Command {
    let mut cmd = process_command(key, c, argv, mounts);
    let stdin = if c["stdin"] == true {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A process in a container's context (its argv, environment and working directory, as
/// [`container_command`] and exec give it), in a process group of its own, killed if dropped.
/// The caller wires stdin, stdout and stderr.
pub(crate) fn process_command(
    key: &Key,
    c: &Value,
    argv: &[String],
    mounts: &super::volumes::Mounts,
) -> tokio::process::Command {
    // Paths under a volume mount name the volume's directory on the host ([`super::volumes`]).
    let argv: Vec<String> = argv.iter().map(|w| mounts.rewrite(w)).collect();
    let mut cmd = tokio::process::Command::new(argv.first().map(String::as_str).unwrap_or(""));
    cmd.args(argv.iter().skip(1))
        .env_clear()
        .env("PATH", CHILD_PATH)
        .env("HOME", "/")
        .env("HOSTNAME", &key.1);
    if let Some(root) = &mounts.root {
        cmd.env(super::volumes::POD_ROOT_ENV, root);
    }
    for e in c["env"].as_array().into_iter().flatten() {
        if let (Some(n), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            cmd.env(n, mounts.rewrite(v));
        }
    }
    if let Some(dir) = c["workingDir"].as_str().map(|d| mounts.rewrite(d))
        && std::path::Path::new(&dir).is_dir()
    {
        cmd.current_dir(dir);
    }
    cmd.process_group(0).kill_on_drop(true);
    cmd
}

/// Marks a started container running (its container ID names the process) and records the
/// `Created` and `Started` events.
async fn set_running_with_events(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    name: &str,
    started_at: &str,
    pid: u32,
) {
    set_running(ctx, key, uid, name, started_at, &format!("process://{pid}")).await;
    event(
        ctx,
        key,
        uid,
        Some(name),
        "Normal",
        "Created",
        &format!("Created container: {name}"),
    )
    .await;
    event(
        ctx,
        key,
        uid,
        Some(name),
        "Normal",
        "Started",
        &format!("Started container {name}"),
    )
    .await;
}

/// Starts copying the child's stdout and stderr into the container's log (and to any attached
/// client); the handles end when the pipes close.
fn capture_output(
    child: &mut tokio::process::Child,
    buf: &Arc<LogBuffer>,
    clock: VirtualClock,
    running: &RunningContainer,
) -> Vec<JoinHandle<()>> {
    [
        child.stdout.take().map(|s| {
            (
                Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                running.stdout.clone(),
            )
        }),
        child.stderr.take().map(|s| {
            (
                Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                running.stderr.clone(),
            )
        }),
    ]
    .into_iter()
    .flatten()
    .map(|(pipe, live)| tokio::spawn(capture(pipe, buf.clone(), clock, live)))
    .collect()
}

/// Copies one pipe into the log, line by line, and each chunk as read to the attached clients
/// (a client that lags more than [`ATTACH_BACKLOG`] chunks behind misses the oldest).
async fn capture(
    mut pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
    buf: Arc<LogBuffer>,
    clock: VirtualClock,
    live: tokio::sync::broadcast::Sender<bytes::Bytes>,
) {
    let mut splitter = LineSplitter::default();
    let mut chunk = vec![0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if live.receiver_count() > 0 {
                    let _ = live.send(bytes::Bytes::copy_from_slice(&chunk[..n]));
                }
                for line in splitter.feed(&chunk[..n]) {
                    buf.append(clock.now(), line);
                }
            }
        }
    }
    if let Some(rest) = splitter.finish() {
        buf.append(clock.now(), rest);
    }
}

/// SIGTERM to the process group, up to `grace` for it to exit, then SIGKILL; waits for the
/// child to be reaped.
async fn terminate(
    child: &mut tokio::process::Child,
    pgid: u32,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    if !grace.is_zero() {
        signal_group(pgid, "TERM").await;
        if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
            // The leader is gone; anything it left in its group goes too.
            signal_group(pgid, "KILL").await;
            return status;
        }
    }
    signal_group(pgid, "KILL").await;
    let _ = child.start_kill();
    child.wait().await
}

/// Sends `signal` to every process of group `pgid` with the system's `kill` program. The
/// group's leader has not been reaped yet when this is called, so its id cannot have been
/// reused by another group.
pub(crate) async fn signal_group(pgid: u32, signal: &str) {
    if pgid == 0 {
        return;
    }
    let program = if std::path::Path::new("/bin/kill").exists() {
        "/bin/kill"
    } else {
        "kill"
    };
    let r = tokio::process::Command::new(program)
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = r {
        tracing::warn!(pgid, signal, error = %e, "sending a signal to a container's process group failed");
    }
}

/// Rewrites one container's status (and then the pod's phase and readiness) through the API
/// (read again and redone on a conflict: the pod's containers report concurrently).
async fn update_container(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    name: &str,
    f: impl Fn(&mut Value),
    phase_policy: Option<Restart>,
) {
    let now = ctx.now();
    let updated = ctx.api.update_pod_status(key, uid, None, |pod| {
        if update_ephemeral(pod, name, &f) {
            return Some(());
        }
        let mut statuses = pod["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let s = statuses.iter_mut().find(|s| s["name"] == name)?;
        f(s);
        let all_ready = statuses.iter().all(|s| s["ready"] == true);
        let unready: Vec<&str> = statuses
            .iter()
            .filter(|s| s["ready"] != true)
            .filter_map(|s| s["name"].as_str())
            .collect();
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        let ended = phase_policy.and_then(|policy| pod_end(&statuses, policy));
        let statuses = json!(statuses);
        let was_pending = pod["status"]["phase"] == "Pending";
        with_status(pod, |status| {
            status.insert("containerStatuses".into(), statuses);
            match ended {
                Some(phase) => {
                    status.insert("phase".into(), json!(phase));
                    let reason = if phase == "Succeeded" {
                        "PodCompleted"
                    } else {
                        "PodFailed"
                    };
                    set_condition(status, "Ready", "False", reason, "", &now);
                    set_condition(status, "ContainersReady", "False", reason, "", &now);
                    set_condition(status, "PodReadyToStartContainers", "False", "", "", &now);
                }
                None => {
                    if was_pending {
                        status.insert("phase".into(), json!("Running"));
                    }
                    if all_ready {
                        set_condition(status, "Ready", "True", "", "", &now);
                        set_condition(status, "ContainersReady", "True", "", "", &now);
                    } else {
                        set_condition(
                            status,
                            "Ready",
                            "False",
                            "ContainersNotReady",
                            &message,
                            &now,
                        );
                        set_condition(
                            status,
                            "ContainersReady",
                            "False",
                            "ContainersNotReady",
                            &message,
                            &now,
                        );
                    }
                }
            }
        });
        Some(())
    });
    updated.await;
}

/// Rewrites the status of `name` when it is one of the pod's ephemeral containers (its entry in
/// `status.ephemeralContainerStatuses` is created on its first update); `false`, with `f` left
/// unused, for any other container. An ephemeral container is never `ready` and leaves the
/// pod's phase and conditions alone.
fn update_ephemeral(pod: &mut Value, name: &str, f: &impl Fn(&mut Value)) -> bool {
    let Some(spec) = containers(pod, "ephemeralContainers")
        .into_iter()
        .find(|c| c["name"] == name)
    else {
        return false;
    };
    let mut statuses = pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let i = match statuses.iter().position(|s| s["name"] == name) {
        Some(i) => i,
        None => {
            statuses.push(container_status(
                &spec,
                false,
                0,
                json!({"waiting": {"reason": "ContainerCreating"}}),
            ));
            statuses.len() - 1
        }
    };
    f(&mut statuses[i]);
    statuses[i]["ready"] = json!(false);
    with_status(pod, |status| {
        status.insert("ephemeralContainerStatuses".into(), json!(statuses));
    });
    true
}

/// The pod's final phase once no container will run again, by `restartPolicy`.
fn pod_end(statuses: &[Value], policy: Restart) -> Option<&'static str> {
    let codes: Option<Vec<i64>> = statuses
        .iter()
        .map(|s| s["state"]["terminated"]["exitCode"].as_i64())
        .collect();
    let codes = codes?;
    match policy {
        Restart::Always => None,
        Restart::Never | Restart::OnFailure => Some(if codes.iter().all(|c| *c == 0) {
            "Succeeded"
        } else {
            "Failed"
        }),
    }
}

async fn set_running(ctx: &Ctx, key: &Key, uid: &str, name: &str, started_at: &str, id: &str) {
    update_container(
        ctx,
        key,
        uid,
        name,
        |s| {
            s["state"] = json!({"running": {"startedAt": started_at}});
            s["ready"] = json!(true);
            s["started"] = json!(true);
            s["containerID"] = json!(id);
            s["imageID"] = json!("");
        },
        None,
    )
    .await;
}

fn terminated_json(exit: &Exit, finished_at: &str, id: &Value) -> Value {
    let mut t = json!({
        "exitCode": exit.code, "reason": exit.reason,
        "startedAt": exit.started_at, "finishedAt": finished_at,
    });
    if let Some(m) = &exit.message {
        t["message"] = json!(m);
    }
    if !id.is_null() {
        t["containerID"] = id.clone();
    }
    t
}

/// The container ended for good. `killed`: the node stopped it, so the pod's end is decided
/// by whoever stopped it (deadline, deletion, shutdown), not by the exit codes.
async fn set_terminated(
    ctx: &Ctx,
    key: &Key,
    uid: &str,
    name: &str,
    exit: &Exit,
    policy: Restart,
    killed: bool,
) {
    let now = ctx.now();
    update_container(
        ctx,
        key,
        uid,
        name,
        |s| {
            s["state"] = json!({"terminated": terminated_json(exit, &now, &s["containerID"])});
            s["ready"] = json!(false);
            s["started"] = json!(false);
        },
        (!killed).then_some(policy),
    )
    .await;
}

async fn set_back_off(ctx: &Ctx, key: &Key, uid: &str, name: &str, exit: &Exit, delay: Duration) {
    let now = ctx.now();
    update_container(
        ctx,
        key,
        uid,
        name,
        |s| {
            s["lastState"] = json!({"terminated": terminated_json(exit, &now, &s["containerID"])});
            s["ready"] = json!(false);
            s["started"] = json!(false);
            if delay.is_zero() {
                s["state"] = json!({"terminated": terminated_json(exit, &now, &s["containerID"])});
                return;
            }
            s["state"] = json!({"waiting": {
                "reason": "CrashLoopBackOff",
                "message": format!(
                    "back-off {}s restarting failed container={name} pod={}_{}({uid})",
                    delay.as_secs(), key.1, key.0
                ),
            }});
        },
        None,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_smaller_of_the_pods_and_the_runtimes() {
        let pod = json!({"spec": {"activeDeadlineSeconds": 5}});
        assert_eq!(deadline_of(&pod, None), Some(Duration::from_secs(5)));
        assert_eq!(
            deadline_of(&pod, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            deadline_of(&json!({"spec": {}}), Some(Duration::from_secs(9))),
            Some(Duration::from_secs(9))
        );
        assert_eq!(deadline_of(&json!({"spec": {}}), None), None);
    }

    #[test]
    fn a_pod_ends_when_every_container_has_terminated() {
        let t = |code: i64| json!({"state": {"terminated": {"exitCode": code}}});
        let running = json!({"state": {"running": {}}});
        assert_eq!(pod_end(&[t(0), t(0)], Restart::Never), Some("Succeeded"));
        assert_eq!(pod_end(&[t(0), t(3)], Restart::Never), Some("Failed"));
        assert_eq!(pod_end(&[t(0), running], Restart::Never), None);
        assert_eq!(pod_end(&[t(0)], Restart::OnFailure), Some("Succeeded"));
        assert_eq!(pod_end(&[t(0)], Restart::Always), None);
    }

    #[test]
    fn the_first_restart_is_immediate_then_the_back_off_doubles() {
        assert_eq!(restart_delay(1), Duration::ZERO);
        assert_eq!(restart_delay(2), Duration::from_secs(10));
        assert_eq!(restart_delay(3), Duration::from_secs(20));
        assert_eq!(restart_delay(100), Duration::from_secs(300));
    }

    #[test]
    fn argv_is_command_then_args() {
        let c = json!({"command": ["sh", "-c"], "args": ["echo hi"]});
        assert_eq!(argv_of(&c), ["sh", "-c", "echo hi"]);
        assert_eq!(argv_of(&json!({"args": ["echo"]})), ["echo"]);
        assert!(argv_of(&json!({})).is_empty());
    }
}
