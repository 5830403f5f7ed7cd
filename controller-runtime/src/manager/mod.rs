//! # The controller manager: flags, wiring, leader election, graceful shutdown
//!
//! `sample-controller run` is this crate's `kube-controller-manager`: one process that hosts
//! every registered controller on one set of shared machinery. Reading it top to bottom shows
//! how the pieces of the book's diagram are put together in a real binary:
//!
//! ```text
//! flags ──validate──> ManagerConfig
//!   │
//!   ├─ client::Config (kubeconfig / --master / in-cluster) ──> Client (QPS / burst throttle)
//!   ├─ one SharedInformerFactory (namespace, resync period): informers shared by controllers
//!   ├─ EventBroadcaster ──> EventRecorder per controller (source component = its name)
//!   ├─ metrics (:8080; with /trace and /machinery, see crate::machinery) and probes
//!   │   (:8081: /healthz, /readyz) on their own listeners; one KeyTracer for /trace
//!   ├─ leader election (optional): informers start at once (a standby keeps warm caches
//!   │   and empty queues), the controllers' workers run only while this process leads and
//!   │   start by enqueueing every cached object (Workers::replay_from)
//!   └─ SIGINT / SIGTERM: stop taking new work, drain the queues within a deadline,
//!       release the Lease, exit 0
//! ```
//!
//! ## What the probes and metrics cover
//!
//! Every informer the enabled controllers create through the shared factory (and no other: a
//! disabled controller's types are never listed) is registered twice. Its reflector counters
//! and store size appear in `/metrics` under the resource plural (`reflector_lists{name="ats"}`,
//! `store_objects{name="deployments"}`), and its reflector reports to the probes'
//! [`HealthState`]: `/healthz` fails with `watch:<plural>` when that watch has been answered 403
//! for 5 minutes or relisted 10 times in 10 minutes without an event (see [`crate::health`]),
//! and `/readyz` has an `informer:<plural>` line that passes once its first list is cached, on
//! the leader and on a standby alike.
//!
//! ## Flags
//!
//! The flag set follows sample-controller (`--kubeconfig`, `--master`) and
//! kube-controller-manager (`--controllers`, `--kube-api-qps`, `--kube-api-burst`,
//! `--leader-elect*`), with controller-runtime's defaults for the two HTTP listeners
//! (`--metrics-bind-address=:8080`, `--health-probe-bind-address=:8081`). The one list of them,
//! with defaults and meanings, is the clap definitions of [`ManagerOptions`]: `run --help` prints
//! it, and the repository's `docs/flags.md` is generated from it (a test keeps it current).
//!
//! The client-side throttle follows the server unless told otherwise: with neither
//! `--kube-api-qps` nor `--kube-api-burst` given, the manager asks the server once at start
//! (`GET /livez/ping`) whether it runs API Priority and Fairness (the
//! `X-Kubernetes-PF-FlowSchema-UID` / `-PriorityLevel-UID` response headers). If it does, the
//! client does not throttle itself at all (controller-runtime's default since PR #3119); if it
//! does not, kube-controller-manager's 20 QPS / burst 30 apply (bare client-go's are 5 / 10).
//! Either flag given means a fixed throttle (cert-manager#9158: what the user sets wins), the
//! missing one taking its default; `--kube-api-qps=-1` turns the throttle off. The decision is
//! logged once, exported as `rest_client_rate_limiter_enabled` and shown on `/readyz?verbose` as
//! `client-throttle: ...` (see [`sample_client_go::client::transport`]).
//!
//! Durations use Go's syntax (`300ms`, `1.5h`, `2h45m`), as the Kubernetes binaries do.
//! [`ManagerOptions::validate`] turns the raw flags into a [`ManagerConfig`] or one
//! [`FlagError`] naming the flag and the value, so a typo gives one clear line and exit code 2,
//! never a panic.

mod events;
mod options;
mod preflight;
mod registration;

/// The log flags' types live with the log subscriber ([`crate::logging`]); the manager's
/// flags and the binaries use them from here too.
pub use crate::logging::{LogFormat, verbosity_level};
pub use events::EventApiSink;
pub use options::{
    DEFAULT_LEASE_NAME, FlagError, IN_CLUSTER_NAMESPACE_FILE, LeaderElectionConfig, ManagerConfig,
    ManagerOptions, SHARDER_CONTROLLER, parse_bind_address, read_in_cluster_namespace,
    resolve_controllers, sharder_enabled,
};
pub use preflight::PREFLIGHT_TIMEOUT;
pub use registration::{
    BuildContext, BuildFn, CacheScopeFn, KnownControllers, ListOneFn, Registration, ShardKinds,
};

use apimachinery::duration::format as format_duration;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::controller::{Clock, Controller};
use crate::health::{HealthState, ServerHandle, serve_health_with};
use crate::logging;
use crate::machinery::{self, CountsFn, Machinery};
use crate::metrics::{Metrics, serve_metrics_and_machinery};
pub use crate::metrics_auth::SecureServing;
use crate::metrics_auth::{DelegatingAuth, metrics_tls_config, serve_metrics_secure_and_machinery};
use crate::otlp::{Exporter, ExporterHandle, SpanQueue};
use crate::sharding::sharder::DEFAULT_SYNC_PERIOD;
use crate::sharding::{ShardConfig, Sharder, SharderConfig, SharderElection, SharderMetrics};
use crate::webhook::{self, WebhookServerConfig};
/// The factory's lister-watchers from a [`Client`]; it lives in [`sample_client_go::cache::api_source`].
pub use sample_client_go::cache::ClientSource;
use sample_client_go::cache::SharedInformerFactory;
use sample_client_go::client::{self, Client, Config, ConfigOptions, ThrottleDecision};
use sample_client_go::keytrace::KeyTracer;
use sample_client_go::leaderelection::{
    LeaderCallbacks, LeaderElectionConfig as ElectionConfig, LeaderElector, LeaseLock,
};
use sample_client_go::record::EventBroadcaster;
use sample_client_go::workqueue::QueueMetrics;

/// Something that stops the manager, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// A flag's value cannot be used.
    #[error(transparent)]
    Flag(#[from] FlagError),
    /// The kubeconfig / in-cluster configuration could not be loaded.
    // The client's error starts with "configuration: " already.
    #[error("{0}")]
    Config(#[source] client::Error),
    /// The API server did not answer.
    #[error("cannot reach the API server at {server}: {source}")]
    Unreachable {
        server: String,
        #[source]
        source: client::Error,
    },
    /// The server answered with objects of a custom resource that do not decode as the
    /// controller's version of it (e.g. written in another version under a CRD whose
    /// `conversion` is `None`, or a CRD from another release).
    #[error(
        "the API server at {server} serves the {crd} CustomResourceDefinition, but its objects do not decode as this controller's version: {source}; install this release's CRDs (kubectl apply -f artifacts/crds/) and write objects in a version the CRD converts"
    )]
    Undecodable {
        crd: String,
        server: String,
        #[source]
        source: client::Error,
    },
    /// The server answered, but our credentials were refused.
    #[error("the API server at {server} refused the credentials: {source}")]
    Unauthorized {
        server: String,
        #[source]
        source: client::Error,
    },
    /// A custom resource type a selected controller needs is not served.
    #[error(
        "the {crd} CustomResourceDefinition is not installed on {server}; install it with: kubectl apply -f artifacts/crds/"
    )]
    CrdMissing { crd: String, server: String },
    /// A listener could not be bound.
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A controller could not be built or failed to start.
    #[error("controller {name}: {message}")]
    Controller { name: &'static str, message: String },
    /// The `--metrics-secure` certificate could not be loaded or generated.
    #[error("{0}")]
    MetricsTls(String),
    /// The admission webhook server could not start (its certificate or its address).
    #[error("{0}")]
    Webhook(String),
    /// Leader election failed or leadership was lost.
    #[error("leader election: {0}")]
    LeaderElection(String),
}

/// The controller manager: build it with [`Manager::new`], then [`Manager::run`] until the
/// shutdown token is cancelled. Tests and the demo run it in-process against the embedded API
/// server; the binary's [`run`] adds flags, a preflight check and signal handling.
pub struct Manager {
    config: ManagerConfig,
    client: Client,
    clock: Option<Clock>,
    identity: String,
    controllers: Arc<std::sync::Mutex<Vec<Arc<dyn Controller>>>>,
    secure_metrics: Option<SecureServing>,
    webhook: Option<WebhookServerConfig>,
    sharding: Option<ShardConfig>,
    sharder: Option<SharderElection>,
    span_queue: SpanQueue,
    key_tracer: KeyTracer,
    registrations: Vec<Registration>,
    bound: tokio::sync::watch::Sender<Option<BoundAddrs>>,
}

/// The addresses a running [`Manager`]'s servers listen on, as bound: a configured port of 0
/// becomes the one the system chose. `None` for a server that is off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoundAddrs {
    /// `/metrics` (`--metrics-bind-address`).
    pub metrics: Option<SocketAddr>,
    /// `/healthz` and `/readyz` (`--health-probe-bind-address`).
    pub health: Option<SocketAddr>,
    /// The admission webhook server ([`Manager::with_webhook_server`]).
    pub webhook: Option<SocketAddr>,
}

/// Where a [`Manager`]'s servers listen, once [`Manager::run`] has bound them
/// ([`Manager::listeners_handle`]). Tests bind port 0 and read the port back here, rather than
/// picking a free port beforehand, which another process may take in between.
#[derive(Clone, Debug)]
pub struct ListenersHandle(tokio::sync::watch::Receiver<Option<BoundAddrs>>);

impl ListenersHandle {
    /// Waits until the manager has bound its listeners and returns their addresses; `None` if
    /// it stopped before (a bind failed, or it was never run).
    pub async fn bound(&self) -> Option<BoundAddrs> {
        let mut rx = self.0.clone();
        rx.wait_for(Option::is_some).await.ok().and_then(|b| *b)
    }
}

impl Manager {
    /// A manager for `config`, talking to the cluster through `client`.
    pub fn new(config: ManagerConfig, client: Client) -> Self {
        Manager {
            config,
            client,
            clock: None,
            identity: default_identity(),
            controllers: Arc::default(),
            secure_metrics: None,
            webhook: None,
            sharding: None,
            sharder: None,
            span_queue: SpanQueue::global().clone(),
            key_tracer: KeyTracer::new(),
            registrations: Vec::new(),
            bound: tokio::sync::watch::Sender::new(None),
        }
    }

    /// Registers a controller (controller-runtime's `mgr.Add`, or what
    /// `builder.ControllerManagedBy(mgr)...Complete(r)` does): it runs when
    /// `config.controllers` names it, with the same shared caches, leader election, metrics,
    /// probes, graceful shutdown and sharding as every other. See [`Registration`].
    pub fn register(mut self, registration: Registration) -> Self {
        self.registrations.push(registration);
        self
    }

    /// Registers each of `registrations`, in order (the start order).
    pub fn register_all(mut self, registrations: impl IntoIterator<Item = Registration>) -> Self {
        self.registrations.extend(registrations);
        self
    }

    /// The registered controllers' names, and which of them can run as shards.
    pub fn known_controllers(&self) -> KnownControllers {
        KnownControllers::of(&self.registrations)
    }

    /// The webhook server's paths: the built-in ones and every registered controller's.
    fn webhook_routes(&self) -> webhook::Routes {
        let mut routes = webhook::BUILTIN_ROUTES.to_vec();
        for r in &self.registrations {
            routes.extend(r.webhooks.iter().copied());
        }
        Arc::new(routes)
    }

    fn registration(&self, name: &str) -> Option<&Registration> {
        self.registrations.iter().find(|r| r.name == name)
    }

    /// The registrations of the enabled controllers (`config.controllers`), in start order.
    fn enabled(&self) -> impl Iterator<Item = &Registration> {
        self.config
            .controllers
            .iter()
            .filter_map(|name| self.registration(name))
    }

    /// The queue the OTLP exporter (`config.otlp`) takes spans from: the one the installed
    /// [`otlp::layer`](crate::otlp::layer) feeds. Default: [`SpanQueue::global`], the binary's.
    pub fn with_span_queue(mut self, queue: SpanQueue) -> Self {
        self.span_queue = queue;
        self
    }

    /// Serves `/metrics` over HTTPS behind TokenReview and SubjectAccessReview, through this
    /// manager's client (`--metrics-secure`, see [`crate::metrics_auth`]).
    pub fn with_secure_metrics(mut self, secure: SecureServing) -> Self {
        self.secure_metrics = Some(secure);
        self
    }

    /// Serves the admission webhooks ([`crate::webhook`]) as configured, alongside the
    /// controllers (default: no webhook server).
    pub fn with_webhook_server(mut self, config: Option<WebhookServerConfig>) -> Self {
        self.webhook = config;
        self
    }

    /// Runs this process as one shard of a ring (`--shard-mode=sharded`, see
    /// [`crate::sharding::shard`]): a Lease of its own instead of leader election, caches
    /// narrowed to the objects labelled for the shard. `None` (the default): leader mode.
    pub fn with_sharding(mut self, shard: Option<ShardConfig>) -> Self {
        self.sharding = shard;
        self
    }

    /// Runs this process as the ring's sharder and nothing else (`--controllers=sharder`, see
    /// [`crate::sharding::sharder`]): leader-elected as `election` says, under this manager's
    /// identity, over the kinds of `config.controllers` (which no worker reconciles here); the
    /// webhook server, when configured, answers `/mutate-shard` from its ring. `None` (the
    /// default): the operators run.
    pub fn with_sharder(mut self, election: Option<SharderElection>) -> Self {
        self.sharder = election;
        self
    }

    /// Uses `clock` for the controllers' wall-clock time (tests pin the start time).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The leader-election identity (default: host name plus a random suffix).
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The leader-election identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The tracer of this manager's keys ([`sample_client_go::keytrace`]): what its metrics
    /// server's `/trace` endpoint reads, and what an in-process reader (the demo's `--trace`)
    /// subscribes to.
    pub fn key_tracer(&self) -> KeyTracer {
        self.key_tracer.clone()
    }

    /// A handle on the controllers once [`Manager::run`] has built them (for tests and the
    /// demo: sync counters, `has_synced`).
    pub fn controllers_handle(&self) -> ControllersHandle {
        ControllersHandle(Arc::clone(&self.controllers))
    }

    /// A handle on the addresses the metrics, probe and webhook servers bind once
    /// [`Manager::run`] has started them (for tests: bind port 0, then read the port here).
    pub fn listeners_handle(&self) -> ListenersHandle {
        ListenersHandle(self.bound.subscribe())
    }

    /// Runs until `shutdown` is cancelled: informers start at once; the controllers' workers
    /// run while this process leads (always, without leader election). On shutdown the workers
    /// stop taking new keys, the queues drain within `--graceful-shutdown-timeout`, the Lease
    /// is released, the informers and the event pipeline stop. Losing leadership (a renewal
    /// that missed its deadline) stops the workers too and returns
    /// [`ManagerError::LeaderElection`]: the process should exit and come back as a standby,
    /// as kube-controller-manager does.
    ///
    /// If this future is dropped instead (the task aborted), drop guards stop the workers and
    /// the informers; the Lease is then not released and expires on its own.
    ///
    /// The future is boxed so that the manager is compiled in this crate, once, at its
    /// optimisation level. An `async fn`'s body is a coroutine, and Rust compiles a coroutine
    /// (like a generic function) in the crate that polls it: a binary spawning a plain
    /// `async fn run` would compile every controller, informer and the client again, at the
    /// binary's own optimisation level. The box is made here, so callers poll it through its
    /// vtable.
    pub fn run(self, shutdown: CancellationToken) -> BoxFuture<'static, Result<(), ManagerError>> {
        Box::pin(self.run_until(shutdown))
    }

    async fn run_until(self, shutdown: CancellationToken) -> Result<(), ManagerError> {
        let cfg = &self.config;
        let metrics = Metrics::new();
        metrics.register_client(&self.client);
        // Traces: the exporter runs for the manager's whole life and flushes last.
        let exporter_stop = CancellationToken::new();
        let _stop_exporter_on_drop = exporter_stop.clone().drop_guard();
        let exporter = self.start_exporter(&metrics, &exporter_stop)?;
        let health = HealthState::new();
        self.follow_server_throttle(&health).await;

        // Events: logged, and written as core/v1 Events for `kubectl describe`.
        let broadcaster = EventBroadcaster::new();
        let factory = Arc::new(self.informer_factory(&health, &broadcaster));
        metrics.register_event_broadcaster(&broadcaster);
        let log_events = broadcaster.start_logging();
        // The sink writes through a client with a throttle bucket of its own: a burst of events
        // never delays a pod create or a status write (and is not delayed by them).
        let sink_events =
            broadcaster.start_recording_to_sink(EventApiSink::new(self.client.with_own_throttle()));

        // A sharder process builds no operator: its informers are the sharder's own.
        let controllers = if self.sharder.is_some() {
            Vec::new()
        } else {
            self.build_controllers(&factory, &broadcaster, &metrics)?
        };
        // A replica that may wait for a Lease keeps no keys until its workers start (see
        // `Workers::replay_from`); one that starts its workers at once needs no hold.
        if cfg.leader_election.is_some() || self.sharding.is_some() {
            for controller in &controllers {
                controller.hold_until_started();
            }
        }

        // Informers run on every replica, leader or not: a standby keeps warm caches.
        let informers = CancellationToken::new();
        let _stop_informers_on_drop = informers.clone().drop_guard();
        factory.start(&informers);
        tracing::info!(
            controllers = ?cfg.controllers,
            namespace = cfg.namespace.as_deref().unwrap_or("*"),
            identity = %self.identity,
            "informers started"
        );
        self.observe_informers(&factory, &metrics, &health);

        let servers = CancellationToken::new();
        let _stop_servers_on_drop = servers.clone().drop_guard();
        let machinery = Machinery::new(
            self.key_tracer.clone(),
            machinery_counts(
                Arc::clone(&factory),
                self.controllers_handle(),
                self.client.clone(),
            ),
            servers.clone(),
        );
        let listeners = self
            .start_listeners(&metrics, &health, machinery, &servers)
            .await?;

        // The ring's sharder, elected among its candidates: this process alone
        // (`--controllers=sharder`, under the manager's identity), or a shard that hosts it.
        let sharder = match (&self.sharder, &self.sharding) {
            (Some(election), _) => Some((election.clone(), self.identity.clone())),
            (None, Some(shard)) if shard.run_sharder => {
                Some((shard.sharder_election(), shard.shard_id.clone()))
            }
            _ => None,
        }
        .map(|(election, identity)| {
            let spawn = (&election, identity, &health);
            self.spawn_sharder(spawn, &metrics, &broadcaster, shutdown.clone())
        });
        let outcome = self
            .run_role(&controllers, &metrics, &health, &broadcaster, &shutdown)
            .await;

        // Stop in the reverse order of starting: the sharder, informers, listeners, then the
        // event pipeline (so the last syncs' events are still written).
        if let Some((stop, task)) = sharder {
            stop.cancel();
            let _ = task.await;
        }
        informers.cancel();
        factory.shutdown().await;
        servers.cancel();
        for l in listeners {
            l.join().await;
        }
        broadcaster.shutdown();
        sink_events.join().await;
        log_events.join().await;
        if let Some(exporter) = exporter {
            exporter_stop.cancel();
            exporter.join().await;
        }
        tracing::info!("stopped");
        outcome
    }

    /// The OTLP trace exporter, when `--otlp-endpoint` asks for one; it stops (and flushes)
    /// when `stop` is cancelled.
    fn start_exporter(
        &self,
        metrics: &Metrics,
        stop: &CancellationToken,
    ) -> Result<Option<ExporterHandle>, ManagerError> {
        let Some(otlp) = &self.config.otlp else {
            return Ok(None);
        };
        metrics.with_registry(|r| self.span_queue.register(r));
        let exporter = Exporter::new(otlp.clone(), self.span_queue.clone())
            .map_err(|e| ManagerError::Config(client::Error::Config(e)))?;
        tracing::info!(endpoint = %otlp.traces_url(), service = %otlp.service_name, "exporting traces over OTLP/HTTP");
        Ok(Some(exporter.spawn(stop.clone())))
    }

    /// One informer factory for every controller: one watch per type, shared caches. Each
    /// informer's reflector reports 403s, relists and watch progress to `health`, so /healthz
    /// fails, naming the resource, when a watch is stuck.
    ///
    /// An object that does not decode as its informer's type is left out of that cache (every
    /// other object syncs), counted in `reflector_undecodable_objects_total`, and given a
    /// Warning `UndecodableObject` event naming the field, so `kubectl describe` on it says why
    /// the controller ignores it. Where RBAC does not allow the event, the sink logs the
    /// refusal and nothing else changes.
    fn informer_factory(
        &self,
        health: &HealthState,
        broadcaster: &EventBroadcaster,
    ) -> SharedInformerFactory<ClientSource> {
        let cfg = &self.config;
        let recorder = broadcaster.new_recorder(UNDECODABLE_EVENT_SOURCE);
        let on_undecodable: sample_client_go::cache::reflector::UndecodableHandler = Arc::new(
            move |_informer: &str, u: &client::UndecodableObject| {
                let reference = k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some(u.kind.clone()),
                    api_version: u.api_version.clone(),
                    name: Some(u.name.clone()),
                    namespace: u.namespace.clone(),
                    uid: u.uid.clone(),
                    resource_version: u.resource_version.clone(),
                    field_path: None,
                };
                recorder.event_for_reference(
                    reference,
                    sample_client_go::record::EventType::Warning,
                    UNDECODABLE_EVENT_REASON,
                    &format!(
                        "the controller ignores this object: it does not decode as this release's {} (resourceVersion {}): {}",
                        u.kind,
                        u.resource_version.as_deref().unwrap_or("unknown"),
                        u.error
                    ),
                );
            },
        );
        let mut factory =
            SharedInformerFactory::new(ClientSource(self.client.clone()), cfg.resync_period)
                .with_watch_health(health.watch_observers())
                .with_undecodable_handler(on_undecodable)
                .with_key_tracer(self.key_tracer.clone());
        if let Some(ns) = &cfg.namespace {
            factory = factory.with_namespace(ns.clone());
        }
        // Owned kinds: only what the operators labelled, pods in their slim form.
        for scope in self.enabled().filter_map(|r| r.cache_scope) {
            factory = scope(factory, &cfg.controllers);
        }
        // A shard: only the objects labelled for it (and what they own).
        if let Some(shard) = &self.sharding {
            let selector = shard.selector();
            for kinds in self.enabled().filter_map(|r| r.sharding) {
                factory = (kinds.scope)(factory, &selector);
            }
        }
        factory
    }

    /// Metrics and probes, each on its own listener (0 = off), and the admission webhooks when
    /// configured; all stop when `stop` is cancelled.
    async fn start_listeners(
        &self,
        metrics: &Metrics,
        health: &HealthState,
        machinery: Machinery,
        stop: &CancellationToken,
    ) -> Result<Vec<ServerHandle>, ManagerError> {
        let secure = self.secure_metrics.as_ref().map(|s| (s, &self.client));
        let mut listeners =
            serve_http(&self.config, metrics, health, machinery, secure, stop).await?;
        // serve_http starts metrics, then probes, each when configured.
        let mut http = listeners.iter().map(ServerHandle::local_addr);
        let mut bound = BoundAddrs {
            metrics: self.config.metrics_addr.and_then(|_| http.next()),
            health: self.config.health_addr.and_then(|_| http.next()),
            webhook: None,
        };
        if let Some(wh) = &self.webhook {
            let wm = webhook::WebhookMetrics::default();
            metrics.with_registry(|r| wm.register(r));
            let h = webhook::serve(wh, self.webhook_routes(), wm, stop.clone())
                .await
                .map_err(|e| ManagerError::Webhook(e.to_string()))?;
            tracing::info!(addr = %h.local_addr(), cert_dir = %wh.cert_dir.display(), "serving admission webhooks");
            bound.webhook = Some(h.local_addr());
            listeners.push(h);
        }
        self.bound.send_replace(Some(bound));
        Ok(listeners)
    }

    /// What this process does with its controllers until `shutdown`: nothing (a sharder-only
    /// process), run them as a shard (the shard's Lease), run them at once (no leader
    /// election), or run them while it holds the leader Lease.
    async fn run_role(
        &self,
        controllers: &[Arc<dyn Controller>],
        metrics: &Metrics,
        health: &HealthState,
        broadcaster: &EventBroadcaster,
        shutdown: &CancellationToken,
    ) -> Result<(), ManagerError> {
        match (&self.sharding, &self.config.leader_election) {
            _ if self.sharder.is_some() => {
                tracing::info!("running the ring's sharder only");
                shutdown.cancelled().await;
                Ok(())
            }
            (Some(shard), _) => {
                let le = LeaderElectionConfig {
                    lease_name: shard.shard_id.clone(),
                    lease_namespace: shard.lease_namespace.clone(),
                    lease_duration: shard.lease_duration,
                    renew_deadline: shard.renew_deadline,
                    retry_period: shard.retry_period,
                };
                tracing::info!(shard = %shard.shard_id, ring = shard.labels.ring(), selector = %shard.selector(), "running as a shard");
                self.run_elected(
                    (&le, &shard.shard_id, shard.lease_labels()),
                    controllers,
                    metrics,
                    health,
                    broadcaster,
                    shutdown.clone(),
                )
                .await
            }
            (None, None) => {
                let cfg = &self.config;
                run_controllers(
                    controllers,
                    cfg.workers,
                    cfg.shutdown_timeout,
                    shutdown.clone(),
                )
                .await
            }
            (None, Some(le)) => {
                self.run_elected(
                    (le, &self.identity, Default::default()),
                    controllers,
                    metrics,
                    health,
                    broadcaster,
                    shutdown.clone(),
                )
                .await
            }
        }
    }

    /// Following the server: asks it now (bounded by [`THROTTLE_PROBE_TIMEOUT`]) whether it
    /// runs priority and fairness, so that the throttle decision is logged once, up front, and
    /// shown on `/readyz?verbose` as a `client-throttle: ...` line.
    async fn follow_server_throttle(&self, health: &HealthState) {
        let throttle =
            match tokio::time::timeout(THROTTLE_PROBE_TIMEOUT, self.client.detect_flow_control())
                .await
            {
                Ok(d) => d,
                Err(_) => self.client.throttle_decision(),
            };
        match throttle {
            ThrottleDecision::ServerFlowControl => tracing::info!(
                server = %self.client.server(),
                "the API server announces priority and fairness (X-Kubernetes-PF-* headers): client-side throttle off; set --kube-api-qps to keep one"
            ),
            other => tracing::info!(
                server = %self.client.server(),
                qps = self.config.qps,
                burst = self.config.burst,
                "client-side throttle {}",
                other.describe()
            ),
        }
        health.add_readiness_check(&format!("client-throttle: {}", throttle.describe()), || {
            true
        });
    }

    /// Builds every enabled operator the same way (see `controllers::registry`): a recorder
    /// named after the controller, a named queue (so it has metrics), the shared factory. The
    /// controllers register their informers with the factory here, before it starts.
    fn build_controllers(
        &self,
        factory: &Arc<SharedInformerFactory<ClientSource>>,
        broadcaster: &EventBroadcaster,
        metrics: &Metrics,
    ) -> Result<Vec<Arc<dyn Controller>>, ManagerError> {
        let queue_metrics = metrics.with_registry(QueueMetrics::new);
        let build_context = BuildContext {
            client: &self.client,
            factory,
            broadcaster,
            queue_metrics: &queue_metrics,
            controller_metrics: metrics.controller(),
            clock: self.clock.unwrap_or_default(),
            key_tracer: &self.key_tracer,
        };
        let mut controllers: Vec<Arc<dyn Controller>> = Vec::new();
        for name in &self.config.controllers {
            let registration = self
                .registration(name)
                .ok_or_else(|| ManagerError::Controller {
                    name: "manager",
                    message: format!(
                        "unknown controller {name:?}; registered: {}",
                        self.known_controllers().names.join(", ")
                    ),
                })?;
            if self.sharding.is_some() && !registration.is_sharded() {
                tracing::warn!(
                    controller = name,
                    "not sharded: run it in a --shard-mode=leader manager"
                );
                continue;
            }
            let built =
                (registration.build)(&build_context).map_err(|e| ManagerError::Controller {
                    name: registration.name,
                    message: e.to_string(),
                })?;
            controllers.push(built);
        }
        *self.controllers.lock().unwrap_or_else(|p| p.into_inner()) = controllers.clone();
        Ok(controllers)
    }

    /// Every informer the enabled controllers created (and only those): counters and store
    /// sizes read by every `/metrics` scrape, and one readiness line each, plus the
    /// `informers-synced` line that passes once every controller's caches have synced.
    fn observe_informers(
        &self,
        factory: &SharedInformerFactory<ClientSource>,
        metrics: &Metrics,
        health: &HealthState,
    ) {
        for informer in factory.informers() {
            metrics.register_reflector(&informer.name, informer.status(), informer.store_len_fn());
            let synced = informer.clone();
            health.add_readiness_check(&format!("informer:{}", informer.name), move || {
                synced.has_synced()
            });
        }
        if self.sharder.is_none() {
            let handle = self.controllers_handle();
            health.add_readiness_check("informers-synced", move || handle.has_synced());
        }
    }

    /// The ring's sharder, run while this process holds the Lease `<ring>-sharder` (see
    /// [`crate::sharding::SharderElection`]) under `identity`; contends again after losing it,
    /// until `shutdown` or the returned token is cancelled. Its elector's health is a liveness
    /// check (`sharder-election`), as a leader's is.
    fn spawn_sharder(
        &self,
        (shard, identity, health): (&SharderElection, String, &HealthState),
        metrics: &Metrics,
        broadcaster: &EventBroadcaster,
        shutdown: CancellationToken,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let sharder_metrics = SharderMetrics::default();
        metrics.with_registry(|r| sharder_metrics.register(r));
        let stop = shutdown.child_token();
        let config = SharderConfig {
            labels: shard.labels.clone(),
            lease_namespace: shard.lease_namespace.clone(),
            sync_period: DEFAULT_SYNC_PERIOD,
        };
        let lease_name = shard.lease_name();
        let mut election = ElectionConfig::new(
            LeaseLock::new(self.client.clone(), &shard.lease_namespace, &lease_name),
            identity,
        );
        election.lease_duration = shard.lease_duration;
        election.renew_deadline = shard.renew_deadline;
        election.retry_period = shard.retry_period;
        election.release_on_cancel = true;
        let client = self.client.clone();
        let kinds: Vec<ShardKinds> = self.enabled().filter_map(|r| r.sharding).collect();
        let callbacks = LeaderCallbacks::new(
            move |leading: CancellationToken| {
                let sharder = kinds
                    .iter()
                    .fold(Sharder::new(client.clone(), config.clone()), |s, k| {
                        (k.sharder)(s)
                    })
                    .with_metrics(sharder_metrics.clone());
                async move {
                    tracing::info!("became the ring's sharder");
                    sharder.run(leading).await;
                }
            },
            || tracing::info!("stopped being the ring's sharder"),
        );
        let recorder = broadcaster.new_recorder("sample-controller-sharder");
        let elector = match LeaderElector::new(election, callbacks) {
            Ok(e) => e
                .with_metrics(metrics.leader_election())
                .with_event_recorder(recorder),
            Err(e) => {
                tracing::error!(error = %e, "the sharder's election is misconfigured");
                return (stop, tokio::spawn(async {}));
            }
        };
        {
            let elector = elector.clone();
            let tolerance = shard.renew_deadline;
            health.add_liveness_check("sharder-election", move || elector.check(tolerance));
        }
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    elector.run(stop.clone()).await;
                }
            })
        };
        (stop, task)
    }

    /// Leader election: the controllers run inside `on_started_leading`; the elector waits for
    /// them to drain before it releases the Lease. `lease` is the Lease, the holder identity and
    /// the labels the Lease carries (a shard's ring label; none for a leader).
    async fn run_elected(
        &self,
        lease: (
            &LeaderElectionConfig,
            &str,
            std::collections::BTreeMap<String, String>,
        ),
        controllers: &[Arc<dyn Controller>],
        metrics: &Metrics,
        health: &HealthState,
        broadcaster: &EventBroadcaster,
        shutdown: CancellationToken,
    ) -> Result<(), ManagerError> {
        let (le, identity, lease_labels) = lease;
        let lock = LeaseLock::new(self.client.clone(), &le.lease_namespace, &le.lease_name)
            .with_labels(lease_labels);
        let mut config = ElectionConfig::new(lock, identity.to_string());
        config.lease_duration = le.lease_duration;
        config.renew_deadline = le.renew_deadline;
        config.retry_period = le.retry_period;
        config.release_on_cancel = true;
        let (workers, drain) = (self.config.workers, self.config.shutdown_timeout);
        let controllers = controllers.to_vec();
        let worker_error: Arc<std::sync::Mutex<Option<ManagerError>>> = Arc::default();
        let callbacks = {
            let worker_error = Arc::clone(&worker_error);
            LeaderCallbacks::new(
                move |leading: CancellationToken| {
                    let (controllers, worker_error) =
                        (controllers.clone(), Arc::clone(&worker_error));
                    async move {
                        tracing::info!("became the leader; starting the controllers' workers");
                        if let Err(e) = run_controllers(&controllers, workers, drain, leading).await
                        {
                            *worker_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        }
                    }
                },
                || tracing::info!("stopped leading"),
            )
            .on_new_leader(|id| tracing::info!(leader = id, "observed a new leader"))
        };
        let elector = LeaderElector::new(config, callbacks)
            .map_err(|e| ManagerError::LeaderElection(e.to_string()))?
            .with_metrics(metrics.leader_election())
            .with_event_recorder(broadcaster.new_recorder("sample-controller"));
        {
            let elector = elector.clone();
            let tolerance = le.renew_deadline;
            health.add_liveness_check("leader-election", move || elector.check(tolerance));
        }
        elector.run(shutdown.clone()).await;
        if let Some(e) = worker_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(e);
        }
        if shutdown.is_cancelled() {
            Ok(())
        } else {
            Err(ManagerError::LeaderElection(format!(
                "lost the lease {}/{}; exiting so a standby can take over",
                le.lease_namespace, le.lease_name
            )))
        }
    }
}

/// Starts the metrics and probe listeners the flags ask for (an address of `0` turns one off);
/// they stop when `stop` is cancelled.
async fn serve_http(
    cfg: &ManagerConfig,
    metrics: &Metrics,
    health: &HealthState,
    machinery: Machinery,
    secure: Option<(&SecureServing, &Client)>,
    stop: &CancellationToken,
) -> Result<Vec<ServerHandle>, ManagerError> {
    let mut listeners = Vec::new();
    if let Some(addr) = cfg.metrics_addr {
        let bind_error = |source| ManagerError::Bind {
            what: "the metrics server",
            addr,
            source,
        };
        let h = match secure {
            None => serve_metrics_and_machinery(
                addr,
                metrics.registry(),
                Some(machinery),
                stop.clone(),
                cfg.serving.clone(),
            )
            .await
            .map_err(bind_error)?,
            Some((serving, client)) => {
                let tls = metrics_tls_config(serving.cert_dir.as_deref())
                    .map_err(|e| ManagerError::MetricsTls(e.to_string()))?;
                let auth = Arc::new(DelegatingAuth::new(client.clone()));
                serve_metrics_secure_and_machinery(
                    addr,
                    metrics.registry(),
                    Some(machinery),
                    tls,
                    auth,
                    stop.clone(),
                    cfg.serving.clone(),
                )
                .await
                .map_err(bind_error)?
            }
        };
        let scheme = if secure.is_some() { "https" } else { "http" };
        tracing::info!(addr = %h.local_addr(), scheme, "serving /metrics, /trace and /machinery");
        listeners.push(h);
    }
    if let Some(addr) = cfg.health_addr {
        let h = serve_health_with(addr, health.clone(), stop.clone(), cfg.serving.clone())
            .await
            .map_err(|source| ManagerError::Bind {
                what: "the health probe server",
                addr,
                source,
            })?;
        tracing::info!(addr = %h.local_addr(), "serving /healthz and /readyz");
        listeners.push(h);
    }
    Ok(listeners)
}

/// The counts of `/machinery/counts` ([`crate::machinery::counts`]): every informer of
/// `factory`, every controller of `controllers`, and `client`'s writes by method.
fn machinery_counts(
    factory: Arc<SharedInformerFactory<ClientSource>>,
    controllers: ControllersHandle,
    client: Client,
) -> CountsFn {
    Arc::new(move || {
        let informers = factory
            .informers()
            .iter()
            .map(|i| {
                let s = i.status().snapshot();
                serde_json::json!({
                    "name": i.name,
                    "events": s.events,
                    "lists": s.lists,
                    "cached": i.store_len(),
                    "synced": s.synced,
                })
            })
            .collect();
        let controllers = controllers
            .controllers()
            .iter()
            .map(|c| {
                let st = c.stats().snapshot();
                let q = c.queue();
                serde_json::json!({
                    "name": c.name(),
                    "queued": q.map_or(0, |q| q.len()),
                    "waiting": q.map_or(0, |q| q.waiting_len()),
                    "processing": q.map_or(0, |q| q.processing_len()),
                    "syncs": st.syncs,
                    "errors": st.errors,
                    "retries": st.errors + st.panics + st.timeouts,
                })
            })
            .collect();
        let snapshot = client.metrics().snapshot();
        let writes: serde_json::Map<String, serde_json::Value> = ["POST", "PUT", "PATCH", "DELETE"]
            .iter()
            .map(|m| ((*m).to_owned(), snapshot.count_method(m).into()))
            .collect();
        machinery::counts(informers, controllers, writes.into())
    })
}

/// Runs every controller's workers until `stop` is cancelled (or one controller fails), then
/// drains: workers take no new keys, queues shut down and wait for the keys in flight, bounded
/// by `drain_timeout`.
async fn run_controllers(
    controllers: &[Arc<dyn Controller>],
    workers: usize,
    drain_timeout: Duration,
    stop: CancellationToken,
) -> Result<(), ManagerError> {
    let workers_stop = CancellationToken::new();
    let _stop_workers_on_drop = workers_stop.clone().drop_guard();
    let mut running = tokio::task::JoinSet::new();
    for c in controllers {
        let (c, token) = (Arc::clone(c), workers_stop.clone());
        running.spawn(async move {
            let name = c.name();
            (name, c.run(workers, token).await)
        });
    }
    let mut outcome = Ok(());
    tokio::select! {
        _ = stop.cancelled() => {}
        Some(done) = running.join_next() => {
            if let Ok((name, Err(message))) = done {
                outcome = Err(ManagerError::Controller { name, message });
            }
        }
    }
    tracing::info!("stopping: workers take no new keys; draining queues");
    workers_stop.cancel();
    let drain = async {
        for c in controllers {
            c.shut_down_queue().await;
        }
        while running.join_next().await.is_some() {}
    };
    if tokio::time::timeout(drain_timeout, drain).await.is_err() {
        tracing::warn!(
            timeout = %format_duration(drain_timeout),
            "in-flight syncs did not finish before the graceful shutdown timeout"
        );
        running.abort_all();
    }
    outcome
}

/// A read-only view of a running manager's controllers.
#[derive(Clone)]
pub struct ControllersHandle(Arc<std::sync::Mutex<Vec<Arc<dyn Controller>>>>);

impl ControllersHandle {
    /// The controllers built so far (empty before `run` starts).
    pub fn controllers(&self) -> Vec<Arc<dyn Controller>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// True when every controller's caches have synced (and at least one controller exists).
    pub fn has_synced(&self) -> bool {
        let cs = self.controllers();
        !cs.is_empty() && cs.iter().all(|c| c.has_synced())
    }
}

/// `<hostname>_<random>`, client-go's leader-election identity shape.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sample-controller".to_string());
    format!("{host}_{:016x}", fastrand::u64(..))
}

/// How long [`Manager::run`] waits for the priority-and-fairness probe before it goes on with the
/// fallback throttle (the next answer then decides).
const THROTTLE_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The source component of the Warning event on an object that does not decode.
pub const UNDECODABLE_EVENT_SOURCE: &str = "sample-controller";
/// The reason of the Warning event on an object that does not decode.
pub const UNDECODABLE_EVENT_REASON: &str = "UndecodableObject";

/// The manager's command line, `run [flags]`, as both binaries offer it (`sample-controller`
/// flattens it beside `demo` and `apiserver`; `controller-manager` has nothing else).
#[derive(clap::Subcommand, Debug)]
pub enum ManagerCommand {
    /// Run the controller manager against a cluster (kubeconfig, --master or in-cluster).
    Run(Box<ManagerOptions>),
}

impl ManagerCommand {
    /// Runs the command through [`main`] with `registrations`; returns the process's exit code.
    pub fn main(self, program: &str, registrations: Vec<Registration>) -> std::process::ExitCode {
        match self {
            ManagerCommand::Run(options) => main(*options, program, registrations),
        }
    }
}

/// A binary's `run` command, whole: glibc's malloc tuned for the manager
/// ([`apimachinery::malloc`]), the TLS crypto provider, a tokio runtime of `--runtime-threads`
/// worker threads (one by default), the log subscriber of `--log-format` and `-v` ([`crate::logging::init`]), then [`run`]. Returns the
/// process's exit code: 0 after a clean shutdown, 2 for a bad flag, 1 for anything else, with
/// the error on stderr after `program: error:`. Both binaries (`sample-controller run` and the
/// image's `controller-manager run`) are this function behind their flag parser, with the
/// operators of `sample-operators` as `registrations`; a binary of one's own passes its own.
/// Call it from `main` before any thread is started.
pub fn main(
    options: ManagerOptions,
    program: &str,
    registrations: Vec<Registration>,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    apimachinery::malloc::tune_for_manager();
    apimachinery::crypto::install_provider();
    apimachinery::serving::set_memory_release(apimachinery::malloc::release_freed_memory);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if options.runtime_threads > 0 {
        builder.worker_threads(options.runtime_threads);
    }
    let runtime = match builder
        .enable_all()
        .on_thread_park(apimachinery::malloc::on_thread_park)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{program}: error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    logging::init(
        options.log_format,
        &logging::filter_directives(options.verbosity, verbosity_level(options.verbosity)),
        options
            .otlp_endpoint
            .as_deref()
            .is_some_and(|e| !e.trim().is_empty()),
    );
    match runtime.block_on(run(options, registrations)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(ManagerError::Flag(e)) => {
            eprintln!("{program}: error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("{program}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sample-controller run`: validates the flags (`--controllers` against `registrations`),
/// builds the client, checks the server, and runs the manager with `registrations` until
/// SIGINT or SIGTERM. Boxed for the reason [`Manager::run`] gives.
pub fn run(
    options: ManagerOptions,
    registrations: Vec<Registration>,
) -> BoxFuture<'static, Result<(), ManagerError>> {
    Box::pin(validate_and_run(options, registrations))
}

async fn validate_and_run(
    options: ManagerOptions,
    registrations: Vec<Registration>,
) -> Result<(), ManagerError> {
    let in_cluster_ns = read_in_cluster_namespace().await;
    let known = KnownControllers::of(&registrations);
    let config = options.validate(in_cluster_ns.as_deref(), &known)?;
    let webhook = options.webhook_config()?;
    let sharder = options.sharder_config(in_cluster_ns.as_deref())?;
    let shard = options.shard_config(in_cluster_ns.as_deref())?;
    let opts = ConfigOptions {
        kubeconfig: config.kubeconfig.clone(),
        context: config.context.clone(),
        master: config.master.clone(),
    };
    // Loading may read files and run an exec credential plugin: keep it off the runtime.
    let mut client_config = tokio::task::spawn_blocking(move || Config::infer(&opts))
        .await
        .map_err(|e| ManagerError::Config(client::Error::Other(e.to_string())))?
        .map_err(ManagerError::Config)?;
    client_config.qps = config.qps;
    client_config.burst = config.burst;
    client_config.follow_server_flow_control = config.throttle_follows_server;
    let client = Client::new(client_config).map_err(ManagerError::Config)?;
    let mut manager = Manager::new(config, client).register_all(registrations);
    manager.preflight().await?;
    if webhook.is_none() && options.webhook_bind_address.trim() != "0" {
        tracing::info!(
            dir = %options.webhook_cert_dir.display(),
            "no webhook certificate (tls.crt) in the default --webhook-cert-dir: the webhook server is off"
        );
    }

    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(apimachinery::signals::shutdown_on_signal({
        let shutdown = shutdown.clone();
        move || shutdown.cancel()
    }));
    manager = manager
        .with_webhook_server(webhook)
        .with_sharding(shard)
        .with_sharder(sharder);
    if let Some(secure) = options.secure_metrics() {
        manager = manager.with_secure_metrics(secure);
    }
    let result = manager.run(shutdown).await;
    signals.abort();
    result
}
