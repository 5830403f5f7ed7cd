//! # A Kubernetes cluster in process
//!
//! Kubernetes is three programs that meet only at the API: **kube-apiserver** (the API, its
//! storage, admission and authorization), **kube-controller-manager** (the garbage collector
//! and the controllers that make Deployments, Jobs and the rest come true) and the **kubelet**
//! on every node (which runs the pods). The embedded cluster is the same three, one crate
//! each, and this crate starts them together:
//!
//! ```text
//!   embedded-cluster (this crate): Cluster::builder() ... start()
//!        │
//!        ├── embedded-apiserver            the API server: HTTP(S), filters, storage, watch,
//!        │     ▲        ▲                  admission, RBAC, CRDs; usable alone (envtest)
//!        │     │ loopback interface: the API's verbs, in process, as an identified user
//!        │     │        │
//!        ├── embedded-controller-manager   garbage collector, ServiceAccounts, Deployments,
//!        │                                 ReplicaSets, StatefulSets, Jobs, CronJobs, ...
//!        └── embedded-node                 the kubelet: binds and runs pods (simulated, or as
//!                                          processes), logs, exec, attach, port-forward
//! ```
//!
//! A test that needs only the API (the way Go projects use envtest) starts an
//! [`embedded_apiserver::ApiServer`]; one that needs pods to run, owners to be collected or
//! Deployments to roll out starts a [`Cluster`]:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_cluster::Cluster;
//!
//! let cluster = Cluster::builder().simulate(true).start().await?;
//! cluster.write_kubeconfig("/tmp/kubeconfig")?; // kubectl --kubeconfig /tmp/kubeconfig get pods
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`ClusterHandle`] dereferences to the server's [`ApiServerHandle`] (its URL, token,
//! kubeconfig, request log, faults), and adds the node's controls. The
//! `sample-controller apiserver` command is [`command`].

#![forbid(unsafe_code)]

pub mod command;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;

pub use embedded_apiserver::{self as apiserver, ApiServer, ApiServerBuilder, ApiServerHandle};
pub use embedded_controller_manager::{self as controller_manager, ControllerManager};
pub use embedded_node::{self as node, Node, NodeControl, NodeRuntime};

/// The entry point: `Cluster::builder()...start().await`.
#[derive(Debug)]
pub struct Cluster;

impl Cluster {
    /// A builder with the documented defaults.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }
}

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The API server could not start.
    #[error(transparent)]
    ApiServer(#[from] embedded_apiserver::StartError),
    /// The process runtime was asked for on a non-loopback address without RBAC enforcement
    /// ([`embedded_node::NodeRuntime::Process`]): anyone reaching the server could run commands on the host.
    #[error(
        "refusing to run pods as processes on {addr}: it is not a loopback address and RBAC is not enforced (anyone who can reach it could run commands on this host); listen on 127.0.0.1 or enforce RBAC"
    )]
    UnsafeRuntime {
        /// The address.
        addr: SocketAddr,
    },
}

/// Configures a cluster: the API server's options ([`ApiServerBuilder`], each also a method
/// here), which controllers run and whether a node runs pods. Defaults: the API server's; the
/// garbage collector and the ServiceAccount controller on; the simulated node and the workload
/// controllers off (when on: pods run 1 s, workloads react after 500 ms).
#[derive(Clone, Debug, Default)]
pub struct ClusterBuilder {
    server: ApiServerBuilder,
    controllers: embedded_controller_manager::ControllerManagerBuilder,
    node: embedded_node::NodeBuilder,
    simulate: bool,
    node_runtime: NodeRuntime,
}

/// Methods of the builder that set an option of the API server.
macro_rules! server_options {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*); )*) => {
        $(
            $(#[$doc])*
            #[doc = ""]
            #[doc = concat!("The API server's [`ApiServerBuilder::", stringify!($name), "`].")]
            pub fn $name(mut self, $($arg: $ty),*) -> Self {
                self.server = self.server.$name($($arg),*);
                self
            }
        )*
    };
}

impl ClusterBuilder {
    server_options! {
        /// Serve plain HTTP instead of HTTPS.
        fn plain_http(yes: bool);
        /// The admin bearer token.
        fn token(token: impl Into<String>);
        /// One more accepted bearer token and its user.
        fn extra_token(token: impl Into<String>, user: impl Into<String>);
        /// Extra groups of a user.
        fn user_groups(user: impl Into<String>, groups: &[&str]);
        /// Enforce RBAC.
        fn enforce_rbac(yes: bool);
        /// The listen address.
        fn listen(addr: SocketAddr);
        /// The watch history's length in changes.
        fn history_window(n: usize);
        /// The watch history's age bound.
        fn history_max_age(d: Duration);
        /// The watch history's byte bound.
        fn history_max_bytes(bytes: usize);
        /// Keep the state in a data directory.
        fn data_dir(dir: impl Into<PathBuf>);
        /// Keep the certificates in a directory.
        fn cert_dir(dir: impl Into<PathBuf>);
        /// Interval between watch bookmarks.
        fn bookmark_interval(d: Duration);
        /// When a watch whose client stopped reading is closed.
        fn watch_unresponsive(after: Duration, backlog: usize);
        /// Write a kubeconfig at start.
        fn kubeconfig_path(path: impl Into<PathBuf>);
        /// Write a client-certificate kubeconfig at start.
        fn kubeconfig_client_cert(user: &str, group: Option<&str>);
        /// Answer `sendInitialEvents` with 422.
        fn reject_send_initial_events(yes: bool);
        /// How long events are kept after their last write.
        fn event_ttl(ttl: Duration);
        /// Let unread objects rest as JSON bytes.
        fn rest_unread_objects(on: bool);
        /// How long an object stays unread before it rests.
        fn rest_unread_after(d: Duration);
        /// API Priority and Fairness.
        fn priority_and_fairness(yes: bool);
        /// The max-in-flight limit.
        fn max_requests_inflight(n: usize);
        /// The mutating max-in-flight limit.
        fn max_mutating_requests_inflight(n: usize);
        /// How long a request may wait in a flow-control queue.
        fn flow_control_queue_wait(d: Duration);
        /// Connection limits.
        fn serving_limits(limits: embedded_apiserver::ServingLimits);
        /// What hands freed memory back after bursts.
        fn memory_release(release: fn());
        /// Where a Service's webhooks are reached.
        fn service_endpoint(namespace_name: &str, host_port: &str);
        /// One more CA for client certificates.
        fn client_ca_pem(pem: impl Into<String>);
        /// The conversion webhooks' timeout.
        fn conversion_webhook_timeout(timeout: Duration);
    }

    /// A ServiceAccount token (see [`ApiServerBuilder::service_account_token`]).
    pub fn service_account_token(
        mut self,
        token: impl Into<String>,
        namespace: &str,
        name: &str,
    ) -> Self {
        self.server = self.server.service_account_token(token, namespace, name);
        self
    }

    /// Run the node ([`embedded_node`]) and the workload controllers (default: off for the
    /// library, so a test sees exactly the objects it wrote; on for the standalone
    /// `sample-controller apiserver` and the demo). With it, pods get bound to
    /// `embedded-node`, run, and end `Succeeded` or `Failed` by their command.
    pub fn simulate(mut self, yes: bool) -> Self {
        self.simulate = yes;
        self
    }

    /// Which runtime the node uses when [`Self::simulate`] is on (default
    /// [`NodeRuntime::Simulated`]). [`NodeRuntime::Process`] runs each container's command as
    /// a child process of this process (read its safety notes):
    /// [`Self::start`] then refuses a non-loopback address unless RBAC is enforced.
    pub fn node_runtime(mut self, runtime: NodeRuntime) -> Self {
        self.node_runtime = runtime;
        self
    }

    /// At most this many pods run at once under the process runtime (default
    /// [`embedded_node::DEFAULT_MAX_PODS`]; at least 1).
    pub fn node_runtime_max_pods(mut self, n: usize) -> Self {
        self.node = self.node.max_pods(n);
        self
    }

    /// Caps how long any pod may run under the process runtime, like an
    /// `activeDeadlineSeconds` on every pod (default: no cap).
    pub fn node_runtime_timeout(mut self, d: Option<Duration>) -> Self {
        self.node = self.node.timeout(d);
        self
    }

    /// Under the process runtime, run the host binary `path` for containers whose `image` is
    /// exactly `image` and that have no `command`, as the image's entrypoint would run: `path`
    /// followed by the container's `args` (with `$(VAR)` references expanded), with the
    /// container's environment, `KUBERNETES_SERVICE_HOST`/`_PORT` naming this server and the
    /// pod's ServiceAccount token mounted (the node crate's `env` and
    /// `serviceaccount` modules). So a chart's or manifest's Deployment runs as
    /// written, its pods the processes of the built binary: `image_binary("sample-controller:dev",
    /// env!("CARGO_BIN_EXE_sample-controller"))`. Repeat for more images. Standalone:
    /// `--image-binary IMAGE=PATH`.
    pub fn image_binary(mut self, image: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        self.node = self.node.image_binary(image, path);
        self
    }

    /// Bytes of output kept per container instance for `kubectl logs` (default 1 MiB); the
    /// oldest lines go first.
    pub fn pod_log_bytes(mut self, n: usize) -> Self {
        self.node = self.node.pod_log_bytes(n);
        self
    }

    /// How long a simulated one-shot container runs (default 1 s; zero allowed).
    pub fn pod_run_time(mut self, d: Duration) -> Self {
        self.node = self.node.pod_run_time(d);
        self
    }

    /// How long the Deployment, ReplicaSet and StatefulSet controllers take to react to a change
    /// (default 500 ms; zero allowed).
    pub fn workload_delay(mut self, d: Duration) -> Self {
        self.controllers = self.controllers.workload_delay(d);
        self
    }

    /// Run Deployments and ReplicaSets as Kubernetes does (default: on whenever
    /// [`Self::simulate`] runs the workload controllers): a ReplicaSet per template revision,
    /// rolling updates, pods the node runs (`deployment-controller`, `replicaset-controller`).
    /// Off is a fast mode that **departs from Kubernetes**: a Deployment or ReplicaSet gets
    /// only its status, every count equal to `spec.replicas` after the workload delay, and no
    /// ReplicaSet or pod is created (for tests of controllers that own many Deployments).
    pub fn deployment_pods(mut self, yes: bool) -> Self {
        self.controllers = self.controllers.deployment_pods(yes);
        self
    }

    /// Run the garbage collector (default: on): deleting an owner deletes or orphans its
    /// dependents by `ownerReferences`, following the DELETE's `propagationPolicy`.
    pub fn garbage_collector(mut self, yes: bool) -> Self {
        self.controllers = self.controllers.garbage_collector(yes);
        self
    }

    /// Run the ServiceAccount controller (default on): every namespace gets a `default`
    /// ServiceAccount, as kube-controller-manager gives it on a real cluster.
    pub fn service_account_controller(mut self, yes: bool) -> Self {
        self.controllers = self.controllers.service_accounts(yes);
        self
    }

    /// Run the root CA publisher (default off for the library, on for the standalone
    /// server): with HTTPS, every namespace gets a `kube-root-ca.crt` ConfigMap holding the
    /// server's CA, as kube-controller-manager gives it. Off by default so that a test's
    /// ConfigMaps are the only ones, as under envtest (which runs no controllers).
    pub fn root_ca_publisher(mut self, yes: bool) -> Self {
        self.controllers = self.controllers.root_ca_publisher(yes);
        self
    }

    /// Changes the API server's options with `f` (for the ones without a method here).
    pub fn apiserver(mut self, f: impl FnOnce(ApiServerBuilder) -> ApiServerBuilder) -> Self {
        self.server = f(self.server);
        self
    }

    /// Starts the API server, then the controller manager and (with [`Self::simulate`]) the
    /// node against it. The returned future is boxed here, so a caller does not compile the
    /// whole cluster again at its own optimisation level.
    pub fn start(self) -> BoxFuture<'static, Result<ClusterHandle, StartError>> {
        Box::pin(self.start_all())
    }

    async fn start_all(self) -> Result<ClusterHandle, StartError> {
        let listen = self.server.listen_addr();
        if self.simulate
            && self.node_runtime == NodeRuntime::Process
            && !listen.ip().is_loopback()
            && !self.server.rbac_enforced()
        {
            return Err(StartError::UnsafeRuntime { addr: listen });
        }
        let server = self.server.start().await?;
        self.controllers.workloads(self.simulate).start(&server);
        let node = self
            .simulate
            .then(|| self.node.runtime(self.node_runtime).start(&server));
        Ok(ClusterHandle {
            server,
            node,
            idle: NodeControl::default(),
        })
    }
}

/// A running cluster. Dereferences to the API server's handle; [`ApiServerHandle::shutdown`]
/// stops everything (the controllers and the node run on the server's tasks).
#[derive(Debug)]
pub struct ClusterHandle {
    server: ApiServerHandle,
    node: Option<embedded_node::NodeHandle>,
    idle: NodeControl,
}

impl std::ops::Deref for ClusterHandle {
    type Target = ApiServerHandle;

    fn deref(&self) -> &ApiServerHandle {
        &self.server
    }
}

impl ClusterHandle {
    /// The API server's handle.
    pub fn server(&self) -> &ApiServerHandle {
        &self.server
    }

    /// Pauses and resumes the simulated node ([`NodeControl`]); without
    /// [`ClusterBuilder::simulate`] there is no node and pausing has no effect.
    pub fn node(&self) -> &NodeControl {
        self.node.as_ref().map_or(&self.idle, |n| n.control())
    }

    /// The container logs the node has written (what `kubectl logs` reads); empty without a
    /// node.
    pub fn logs(&self) -> Option<std::sync::Arc<embedded_node::LogStore>> {
        self.node.as_ref().map(|n| n.logs())
    }
}
