//! Shared fixtures of the At controller's integration tests: an embedded API server with the
//! At CRD, a controller manager running in-process against it over real HTTP, and a tiny
//! stand-in for the kubelet that finishes pods on the test's command (the way envtest users
//! set pod status by hand: the tests decide when and how each pod ends).
#![allow(dead_code)]

use std::time::Duration;

use embedded_cluster::{Cluster, ClusterHandle};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Api, Client, Config, ListParams, Patch, PatchParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::{
    ControllersHandle, ListenersHandle, LogFormat, ManagerConfig, ManagerError,
};
use sample_operators::apis::{At, AtPhase, AtSpec};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";

/// An embedded API server with the At CRD installed, and an admin client for it.
pub async fn server() -> (ClusterHandle, Client) {
    sample_client_go::install_crypto_provider();
    init_tracing();
    let server = Cluster::builder().start().await.expect("server starts");
    let client = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .expect("CRD installs");
    (server, client)
}

/// Logs to the test's output when `RUST_LOG` is set (e.g. `RUST_LOG=sample_controller_runtime=debug,sample_operators=debug`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// The test's own client (admin, unthrottled): it observes and plays the kubelet. The
/// manager gets a client of its own ([`manager_client`]), so the test's polling never competes
/// with the controller for the client-side rate limit.
pub fn client_for(server: &ClusterHandle) -> Client {
    let mut config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    config.qps = 0.0;
    Client::new(config).unwrap()
}

/// A client for a manager: the server's admin credentials with the default client-side
/// throttle (QPS 20, burst 30), as `sample-controller run` would have.
pub fn manager_client(server: &ClusterHandle) -> Client {
    let config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    Client::new(config).unwrap()
}

/// A manager client with another throttle (`qps` 0 turns it off).
pub fn manager_client_with_qps(server: &ClusterHandle, qps: f32, burst: u32) -> Client {
    let mut config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    config.qps = qps;
    config.burst = burst;
    Client::new(config).unwrap()
}

/// Every At in the test namespace (one LIST, never a GET).
pub async fn list_ats(client: &Client) -> Vec<At> {
    ats(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Every pod in the test namespace (one LIST, never a GET).
pub async fn list_pods(client: &Client) -> Vec<Pod> {
    pods(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The manager configuration of the tests: the At controller, no HTTP listeners.
pub fn manager_config() -> ManagerConfig {
    ManagerConfig {
        kubeconfig: None,
        master: None,
        context: None,
        namespace: None,
        controllers: vec!["at"],
        workers: 2,
        resync_period: Duration::from_secs(600),
        qps: 0.0,
        burst: 0,
        throttle_follows_server: false,
        leader_election: None,
        metrics_addr: None,
        health_addr: None,
        serving: sample_controller_runtime::health::probe_serving_limits(),
        shutdown_timeout: Duration::from_secs(10),
        log_format: LogFormat::Text,
        verbosity: 0,
        otlp: None,
    }
}

/// A manager running in a task.
pub struct RunningManager {
    pub stop: CancellationToken,
    pub controllers: ControllersHandle,
    pub task: JoinHandle<Result<(), ManagerError>>,
    /// Where its metrics, probe and webhook servers listen, once bound.
    pub listeners: ListenersHandle,
}

impl RunningManager {
    /// Runs `manager` on its own task until [`RunningManager::stop`].
    pub fn spawn(manager: sample_controller_runtime::manager::Manager) -> RunningManager {
        let controllers = manager.controllers_handle();
        let listeners = manager.listeners_handle();
        let stop = CancellationToken::new();
        let task = tokio::spawn(manager.run(stop.clone()));
        RunningManager {
            stop,
            controllers,
            task,
            listeners,
        }
    }

    /// Stops it gracefully and returns its result.
    pub async fn stop(self) -> Result<(), ManagerError> {
        self.stop.cancel();
        self.task.await.expect("manager task")
    }

    /// Sum of the controllers' syncs so far.
    pub fn syncs(&self) -> u64 {
        self.controllers
            .controllers()
            .iter()
            .map(|c| c.stats().snapshot().syncs)
            .sum()
    }
}

/// Starts a manager with `config` and `clock`, and waits until its caches have synced.
pub async fn start_manager(client: &Client, config: ManagerConfig, clock: Clock) -> RunningManager {
    let manager = sample_operators::registry::manager(config, client.clone()).with_clock(clock);
    let running = RunningManager::spawn(manager);
    wait_until("the manager's caches to sync", || async {
        running.controllers.has_synced()
    })
    .await;
    running
}

/// Polls `check` every 10 ms (of tokio time) until it is true; panics after 6,000 tries
/// (a minute of tokio time).
pub async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_until_every(what, Duration::from_millis(10), 6_000, check).await
}

/// Polls `check` every `period` (of tokio time), at most `tries` times; panics after that.
pub async fn wait_until_every<F, Fut>(what: &str, period: Duration, tries: u32, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..tries {
        if check().await {
            return;
        }
        tokio::time::sleep(period).await;
    }
    panic!("timed out waiting for {what}");
}

/// Keeps tokio's paused clock from leaping while requests are in flight.
///
/// With `start_paused`, tokio jumps the clock to the next timer whenever the runtime is idle,
/// and a runtime waiting for a loopback socket can look idle for an instant: the next timer may
/// then be a request's 60 s timeout, which fires although the answer is microseconds away. A
/// task that always has a 1 ms timer pending makes every idle jump 1 ms long. Big jumps are made
/// explicitly with [`advance_settled`]. Dropping the guard stops the task.
pub struct Ticker(JoinHandle<()>);

impl Ticker {
    pub fn start() -> Self {
        Ticker(tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Moves tokio's clock forward by exactly `total`, in steps of at most `step`, letting the
/// system settle for 100 ms (part of the step) after each jump so that the timers that fired get
/// their requests answered. One giant jump would also expire every connection's keep-alive at
/// once; steps of a day behave like a year of quiet days.
pub async fn advance_settled(total: Duration, step: Duration) {
    const SETTLE: Duration = Duration::from_millis(100);
    let mut left = total;
    while !left.is_zero() {
        let d = step.min(left);
        if d > SETTLE {
            tokio::time::advance(d - SETTLE).await;
            tokio::time::sleep(SETTLE).await;
        } else {
            tokio::time::sleep(d).await;
        }
        left -= d;
    }
}

/// An At in the test namespace.
pub fn at(name: &str, schedule: &str, command: &str) -> At {
    At {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NS.to_string()),
            ..ObjectMeta::default()
        },
        spec: AtSpec::new(schedule, command),
        status: None,
    }
}

pub fn ats(client: &Client) -> Api<At> {
    Api::namespaced(client.clone(), NS)
}

pub fn pods(client: &Client) -> Api<Pod> {
    Api::namespaced(client.clone(), NS)
}

pub async fn create_at(client: &Client, at: &At) -> At {
    ats(client)
        .create(&PostParams::default(), at)
        .await
        .expect("create At")
}

pub async fn phase(client: &Client, name: &str) -> AtPhase {
    ats(client).get(name).await.expect("get At").phase()
}

pub async fn wait_for_phase(client: &Client, name: &str, want: AtPhase) -> At {
    wait_until(&format!("at/{name} to be {want}"), || async {
        ats(client)
            .get(name)
            .await
            .map(|a| a.status.is_some() && a.phase() == want)
            .unwrap_or(false)
    })
    .await;
    ats(client).get(name).await.unwrap()
}

pub async fn pod_exists(client: &Client, name: &str) -> bool {
    pods(client).get_opt(name).await.expect("get pod").is_some()
}

pub async fn wait_for_pod(client: &Client, name: &str) -> Pod {
    wait_until(&format!("pod/{name}"), || pod_exists(client, name)).await;
    pods(client).get(name).await.unwrap()
}

/// The kubelet's part, by hand: the pod ran and its container exited with `exit_code`.
pub async fn finish_pod(client: &Client, name: &str, exit_code: i32) {
    let (phase, reason) = if exit_code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let patch = json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": "busybox",
            "image": "busybox:1.36",
            "imageID": "",
            "ready": false,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": reason}}
        }]
    }});
    pods(client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch pod status");
}

/// The kubelet's part, by hand: the pod's container is running.
pub async fn start_pod(client: &Client, name: &str) {
    let patch = json!({"status": {"phase": "Running"}});
    pods(client)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch pod status");
}

/// Events about `object_name`, as `kubectl describe` would list them.
pub async fn events_for(client: &Client, object_name: &str) -> Vec<Event> {
    let params = ListParams {
        field_selector: Some(format!("involvedObject.name={object_name}")),
        ..ListParams::default()
    };
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&params)
        .await
        .expect("list events")
        .items
}

/// Waits until an event with `reason` about `object_name` exists; returns it.
pub async fn wait_for_event(client: &Client, object_name: &str, reason: &str) -> Event {
    for _ in 0..6_000 {
        let found = events_for(client, object_name)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason));
        if let Some(e) = found {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for event {reason} for {object_name}");
}

/// RFC 3339 of `clock.now() + d`, whole seconds.
pub fn in_the_future(clock: &Clock, d: Duration) -> String {
    let t = clock.now() + jiff::SignedDuration::try_from(d).unwrap();
    jiff::Timestamp::from_second(t.as_second())
        .unwrap()
        .to_string()
}
