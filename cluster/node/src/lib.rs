//! # The embedded cluster's node
//!
//! A Kubernetes node runs the kubelet: it watches the API server for the pods bound to it, runs
//! their containers, reports their status, keeps their logs, and serves the streams the API
//! server hands it for `kubectl logs`, `exec`, `attach` and `port-forward`. This crate is that
//! node for the embedded cluster, started beside an [`embedded_apiserver`] server; like a
//! kubelet it also renews its heartbeat, a Lease in `kube-node-lease` (`nodelease`, timing in [`RENEW_INTERVAL`]):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
//! use embedded_node::{Node, NodeRuntime};
//!
//! let server = ApiServer::builder().start().await?;
//! let node = Node::builder().runtime(NodeRuntime::Simulated).start(&server);
//! // pods created on `server` are now bound to `embedded-node`, run and reported
//! node.control().pause(); // hold every pod where it is
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Two runtimes run the pods ([`NodeRuntime`]): the **simulated** one (`kubelet`) decides
//! each container's outcome from its command's text and runs nothing; the **process** one
//! (`runtime`) runs each container's command as a child process of this process, with the
//! pod's environment (`env`), volumes (`volumes`) and ServiceAccount token
//! (`serviceaccount`), so `kubectl logs` shows what it printed and
//! `kubectl exec`, `attach` and `port-forward` work (`remotecommand`, over SPDY ([`spdy`]) or
//! WebSocket (`wsstream` on `websocket`)).
//!
//! ## The seam with the server
//!
//! The node and the API server meet where a kubelet and kube-apiserver meet, in both
//! directions:
//!
//! ```text
//!  embedded-node ──── loopback interface, as system:node:embedded-node ────▶ API server
//!  (client)           (group system:nodes; RBAC, admission, validation)
//!                     LIST/WATCH pods · PUT pods/NAME/status · POST pods/NAME/binding ·
//!                     DELETE pods (grace 0) · POST nodes, events · GET configmaps, secrets ·
//!                     GET, POST, PUT leases (kube-node-lease/embedded-node, every 10 s)
//!
//!  API server ─────── Kubelet trait (the kubelet's own endpoints) ─────────▶ KubeletServer
//!                     pods/log · pods/exec, attach, portforward (upgraded streams) ·
//!                     nodes/NAME/proxy/PATH (/healthz, /pods, /configz)
//! ```
//!
//! * **node → server**: everything the node knows of the cluster it learns through
//!   [`embedded_apiserver::loopback::Loopback`], made for the user `system:node:<node>` in
//!   the group `system:nodes` (`client::NodeApi`), whose rights are the bootstrap
//!   `system:node` ClusterRole. It never reads or writes the server's storage directly:
//!   its pods come from an informer (`client::PodInformer`: LIST, WATCH from the list's
//!   resourceVersion, LIST again on `410 Gone`), its reports are conditional writes redone on
//!   `409 Conflict`, so the node's writes meet the same authorization, admission webhooks and
//!   validation as any client's;
//! * **server → node**: the node registers its kubelet under [`NODE_NAME`]
//!   ([`embedded_apiserver::ApiServerHandle::register_kubelet`]); the server checks a log,
//!   stream or node-proxy request as kube-apiserver does and hands it to [`KubeletServer`],
//!   the kubelet's own endpoints ([`embedded_apiserver::kubelet::Kubelet`]).
//!
//! ## The public surface
//!
//! | item | what it is |
//! |---|---|
//! | [`Node`], [`NodeBuilder`] | starting a node against a running server: runtime, run time of one-shot containers, pod and log limits, timeout |
//! | [`NodeHandle`], [`NodeControl`] | a running node: pausing and resuming its pods, their logs ([`LogStore`]) |
//! | [`NodeRuntime`] | simulated or process runtime |
//! | [`KubeletServer`] | the node's side of the server's `Kubelet` interface (registered by [`NodeBuilder::start`]) |
//! | [`NODE_NAME`], [`DEFAULT_MAX_PODS`], [`DEFAULT_LOG_BYTES`], [`FALLBACK_MEMORY`] | the node's name and defaults, for command lines and tests |
//! | [`LEASE_NAMESPACE`], [`LEASE_DURATION_SECONDS`], [`RENEW_INTERVAL`], [`JITTER`] | the node heartbeat Lease's place and timing (see the `nodelease` module) |
//! | [`spdy`] | SPDY/3.1 frames (the codec kubectl ≤ 1.29 speaks), for clients and tests that speak it to the server |
//!
//! Everything else is the crate's own (`pub(crate)`); the module map is for readers of the
//! source (`cargo doc --document-private-items`).
//!
//! ## Module map
//!
//! | module | kubelet analogue | what lives there |
//! |---|---|---|
//! | `client` | the kubelet's clientset, pod config source, status manager | the loopback client as `system:node:<node>`, the pod informer, status writes, binding, deletion, Node registration, events |
//! | `kubelet` | the scheduler + kubelet, without containers | the simulated runtime: pod lifecycle decided from each command's text, crash-loop back-off, pause |
//! | `runtime` | `pod_workers.go`, `kuberuntime_manager.go` | the process runtime: each container a child process, restarts, deadlines, graceful deletion, events |
//! | `nodelease` | `pkg/kubelet/nodelease`, the component-helpers lease controller | the node's heartbeat: its Lease in `kube-node-lease`, renewed every 10 s |
//! | `machine` | cAdvisor's `MachineInfo` | the Node's capacity: this machine's CPUs and memory, or the simulated node's fixed size |
//! | `volumes` | the volume manager | `configMap`, `secret` and `emptyDir` volumes as host directories; path rewriting |
//! | `serviceaccount` | the ServiceAccount admission plugin's projected volume, the token manager | a pod's token, CA and namespace files, renewed; the kubeconfig naming them |
//! | `env` | `makeEnvironmentVariables`, `expansion` | a container's environment (`fieldRef`s, `$(VAR)`), `KUBERNETES_SERVICE_HOST`/`_PORT`, an image's binary |
//! | `logs` | the CRI's container logs, `/containerLogs` | per-container bounded logs, `kubectl logs` (follow, tail, since, previous) |
//! | `endpoints` | `pkg/kubelet/server` | what the node proxy reaches: `/healthz`, `/pods`, `/configz` |
//! | `remotecommand` | `pkg/kubelet/cri/streaming` | exec, attach and port-forward sessions on the process runtime |
//! | [`spdy`] | `httpstream/spdy` | SPDY/3.1 streams (kubectl up to 1.29) |
//! | `websocket`, `wsstream` | `wsstream`, the v5 channel protocol | WebSocket frames and channels (kubectl 1.30+), port-forward's SPDY tunnel |
//! | `background` | — | the virtual clock the node's timestamps come from |

#![forbid(unsafe_code)]

mod background;
mod client;
mod endpoints;
mod env;
mod kubelet;
mod logs;
mod machine;
mod nodelease;
mod remotecommand;
mod runtime;
mod serviceaccount;
pub mod spdy;
mod volumes;
mod websocket;
mod wsstream;

use std::sync::Arc;
use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::ApiServerHandle;
use embedded_apiserver::kubelet::Body;
use embedded_apiserver::kubelet::{Kubelet, LogsRequest, ProxyRequest, StreamRequest};
use futures_util::future::BoxFuture;
use http::Response;
use tokio_util::sync::CancellationToken;

pub use kubelet::{NODE_NAME, NodeControl};
pub use logs::{DEFAULT_LOG_BYTES, LogStore};
pub use machine::FALLBACK_MEMORY;
pub use nodelease::{JITTER, LEASE_DURATION_SECONDS, LEASE_NAMESPACE, RENEW_INTERVAL};
pub use runtime::{DEFAULT_MAX_PODS, NodeRuntime};

/// The entry point: `Node::builder()...start(&server)`.
#[derive(Debug)]
pub struct Node;

impl Node {
    /// A builder with the documented defaults.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }
}

/// Configures a node. Defaults: the simulated runtime, one-shot containers run 1 s, at most
/// [`DEFAULT_MAX_PODS`] process pods at once and no time limit, 1 MiB of log per
/// container instance.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    runtime: NodeRuntime,
    pod_run_time: Duration,
    max_pods: usize,
    timeout: Option<Duration>,
    pod_log_bytes: usize,
    image_binaries: std::collections::BTreeMap<String, std::path::PathBuf>,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            runtime: NodeRuntime::Simulated,
            pod_run_time: Duration::from_secs(1),
            max_pods: runtime::DEFAULT_MAX_PODS,
            timeout: None,
            pod_log_bytes: logs::DEFAULT_LOG_BYTES,
            image_binaries: Default::default(),
        }
    }
}

impl NodeBuilder {
    /// Which runtime runs the pods (default [`NodeRuntime::Simulated`]).
    /// [`NodeRuntime::Process`] runs each container's command as a child process of this
    /// process (with the safety rules of [`NodeRuntime::Process`]).
    pub fn runtime(mut self, runtime: NodeRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    /// How long a simulated one-shot container runs (default 1 s; zero allowed).
    pub fn pod_run_time(mut self, d: Duration) -> Self {
        self.pod_run_time = d;
        self
    }

    /// How many pods the process runtime runs at once (default
    /// [`DEFAULT_MAX_PODS`]; at least 1).
    pub fn max_pods(mut self, n: usize) -> Self {
        self.max_pods = n.max(1);
        self
    }

    /// The longest any process pod may run (default: no limit).
    pub fn timeout(mut self, d: Option<Duration>) -> Self {
        self.timeout = d;
        self
    }

    /// How much log the node keeps per container instance (default
    /// [`logs::DEFAULT_LOG_BYTES`]); the oldest lines go first.
    pub fn pod_log_bytes(mut self, n: usize) -> Self {
        self.pod_log_bytes = n.max(1);
        self
    }

    /// The process runtime runs the host binary `path` for a container whose `image` is
    /// exactly `image` and that has no `command`, as its image's entrypoint, followed by the
    /// container's `args` (the `env` module); repeat for more images (the last mapping of an image
    /// wins). A container with a `command` runs its command as given. Without a mapping, a
    /// container without `command` runs its `args` alone as the command (or nothing at all).
    pub fn image_binary(
        mut self,
        image: impl Into<String>,
        path: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.image_binaries.insert(image.into(), path.into());
        self
    }

    /// Starts the node against `server`: registers its kubelet and runs pods until the server
    /// shuts down (its tasks run on the server's tracker, so the server's shutdown waits for
    /// them and every child process is gone when it returns).
    pub fn start(self, server: &ApiServerHandle) -> NodeHandle {
        let shutdown = server.shutdown_token();
        let tracker = server.tracker().clone();
        let api = client::NodeApi::new(server, NODE_NAME);
        let api_for_server = api.clone();
        let clock = background::VirtualClock::new();
        nodelease::spawn(api.clone(), clock, shutdown.clone(), &tracker);
        let logs = Arc::new(logs::LogStore::new(self.pod_log_bytes));
        let control = NodeControl::default();
        let process = (self.runtime == NodeRuntime::Process).then(|| {
            runtime::NodeHandle::new(
                shutdown.clone(),
                tracker.clone(),
                runtime::DEFAULT_MAX_SESSIONS,
            )
        });
        match &process {
            Some(handle) => runtime::spawn(
                api,
                runtime::ProcessConfig {
                    clock,
                    max_pods: self.max_pods,
                    timeout: self.timeout,
                    logs: logs.clone(),
                    image_binaries: Arc::new(self.image_binaries.clone()),
                    api_server: serviceaccount::ApiServerAddress {
                        url: server.url().to_owned(),
                        ca_pem: server.ca_pem().map(str::to_owned),
                    },
                },
                handle.clone(),
                shutdown.clone(),
                &tracker,
            ),
            None => kubelet::spawn(
                api,
                kubelet::KubeletConfig {
                    run_time: self.pod_run_time,
                    clock,
                    logs: logs.clone(),
                },
                control.clone(),
                shutdown.clone(),
                &tracker,
            ),
        }
        server.register_kubelet(
            NODE_NAME,
            Arc::new(KubeletServer {
                api: api_for_server,
                settings: endpoints::KubeletSettings {
                    runtime: self.runtime,
                    max_pods: if self.runtime == NodeRuntime::Process {
                        self.max_pods
                    } else {
                        SIMULATED_MAX_PODS
                    },
                    pod_run_time: self.pod_run_time,
                },
                logs: logs.clone(),
                process,
                shutdown,
            }),
        );
        NodeHandle { control, logs }
    }
}

/// A running node.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    control: NodeControl,
    logs: Arc<logs::LogStore>,
}

impl NodeHandle {
    /// Pauses and resumes the simulated node ([`NodeControl`]).
    pub fn control(&self) -> &NodeControl {
        &self.control
    }

    /// The container logs the node has written (what `kubectl logs` reads).
    pub fn logs(&self) -> Arc<logs::LogStore> {
        self.logs.clone()
    }
}

/// The kubelet's endpoints for the API server: container logs, the exec, attach and
/// port-forward streams (only the process runtime has processes to stream), and the paths
/// the node proxy reaches (`/healthz`, `/pods`, `/configz`).
pub struct KubeletServer {
    api: client::NodeApi,
    settings: endpoints::KubeletSettings,
    logs: Arc<logs::LogStore>,
    process: Option<runtime::NodeHandle>,
    shutdown: CancellationToken,
}

/// The kubelet's `maxPods` the simulated node reports (its Node's `pods` capacity).
const SIMULATED_MAX_PODS: usize = 110;

impl Kubelet for KubeletServer {
    fn proxy(&self, request: ProxyRequest) -> BoxFuture<'static, Response<Body>> {
        let api = self.api.clone();
        let settings = self.settings.clone();
        Box::pin(async move { endpoints::serve(&api, &settings, request).await })
    }

    fn container_logs(&self, request: LogsRequest) -> Result<Response<Body>, ApiError> {
        logs::serve(&self.logs, request, self.shutdown.clone())
    }

    fn stream(&self, request: StreamRequest) -> Result<Response<Body>, ApiError> {
        let session = remotecommand::Session::open(self.process.as_ref(), &request)?;
        let StreamRequest {
            method,
            headers,
            on_upgrade,
            ..
        } = request;
        let is_websocket = websocket::is_upgrade_request(&headers);
        let is_spdy = headers
            .get(http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("spdy/"));
        let (Some(on_upgrade), true) = (on_upgrade, is_websocket || is_spdy) else {
            return Err(websocket::upgrade_required());
        };
        let up = remotecommand::UpgradeRequest {
            headers,
            on_upgrade,
            session,
        };
        if is_websocket {
            // kubectl 1.31+ tunnels port-forward's SPDY inside the WebSocket.
            wsstream::serve(&method, up, Some(spdy::tunnel))
        } else {
            Ok(spdy::serve(up))
        }
    }
}
