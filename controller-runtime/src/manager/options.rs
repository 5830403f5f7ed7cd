//! # The manager's flags: from the command line to a checked [`ManagerConfig`]
//!
//! [`ManagerOptions`] is the raw flag set of `sample-controller run` (clap derives the parser);
//! [`ManagerOptions::validate`] turns it into a [`ManagerConfig`] the [`super::Manager`] runs
//! on, or into one [`FlagError`] naming the flag, the value and what is wrong with it. Nothing
//! here talks to the network: the one environment input is the in-cluster namespace file
//! ([`read_in_cluster_namespace`]), read by the caller and passed in, so validation is a pure
//! function the tests below call directly. The table of flags and defaults is in the
//! [`manager`](super) module doc.

use apimachinery::duration::{format as format_duration, parse as parse_go_duration};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::KnownControllers;
use crate::health::probe_serving_limits;
use crate::logging::LogFormat;
use crate::metrics_auth::SecureServing;
use crate::otlp::{DEFAULT_SERVICE_NAME, OtlpConfig, parse_endpoint};
use crate::sharding::{ShardConfig, ShardFlags, ShardMode, SharderElection};
use crate::webhook::{
    DEFAULT_BIND_ADDRESS as DEFAULT_WEBHOOK_BIND_ADDRESS,
    DEFAULT_CERT_DIR as DEFAULT_WEBHOOK_CERT_DIR, WebhookServerConfig,
};
use sample_client_go::client;

/// `--controllers=sharder`: run the ring's sharder ([`crate::sharding::sharder`]) instead of
/// the operators (see [`resolve_controllers`] and [`ManagerOptions::sharder_config`]).
pub const SHARDER_CONTROLLER: &str = "sharder";

/// The Lease name used when `--leader-elect-resource-name` is not given.
pub const DEFAULT_LEASE_NAME: &str = "sample-controller";

/// The service-account namespace file read to default the Lease namespace in a pod.
pub const IN_CLUSTER_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The raw command-line flags of `sample-controller run`.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct ManagerOptions {
    /// Path to a kubeconfig file. Without it: $KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The address of the Kubernetes API server; overrides any value in the kubeconfig.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,

    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Watch and manage objects only in this namespace (empty: all namespaces).
    #[arg(long, default_value = "", value_name = "NAMESPACE")]
    pub namespace: String,

    /// Controllers to run: '*' enables every registered controller, 'name' enables one,
    /// '-name' disables one. Comma-separated names of the binary's registered controllers (in
    /// sample-controller and controller-manager: at, tdset, rediscluster, myapp, foo; an
    /// unknown name is refused with the list). 'sharder' (never enabled by '*') runs the
    /// ring's sharder and nothing else, leader-elected on the Lease <--shard-ring>-sharder,
    /// serving /mutate-shard; the controller names beside it choose whose objects it shards
    /// (default: every sharded controller).
    #[arg(long, value_delimiter = ',', default_value = "*", value_name = "LIST")]
    pub controllers: Vec<String>,

    /// Number of workers per controller (concurrent syncs). 32: k8s.io/sample-controller runs
    /// 2, controller-runtime's MaxConcurrentReconciles defaults to 1 and
    /// kube-controller-manager's --concurrent-*-syncs mostly to 5, but a worker here is a
    /// tokio task (a few KB, not a thread) and a sync spends nearly all its time waiting on the
    /// API server, so more in flight means more throughput until the server's cores are busy,
    /// and past that only longer queues at the server. Measured with hack/bench-at.sh (README,
    /// Performance) on the 2-core VM, 1,000 Ats due at one instant, pod-create lateness p50 over
    /// six runs each (three of them interleaved): 226-276 ms with 32 workers (median 236),
    /// 247-309 ms with 64 (median 288); three runs with 16: 225-267 ms. 10,000 Ats due at once
    /// (hack/at-vs-kube-rs.sh): 17.4-18.4 s to all DONE with 16 or 32 workers, 15.1-18.1 s with
    /// 64, and the manager's peak RSS 51, 53 and 56-57 MiB. 8 workers took 21.6 s.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub workers: usize,

    /// Threads of the async runtime that runs the manager's informers, workers and servers; 0
    /// means one per CPU (tokio's default). 1: a sync spends nearly all its time waiting on the
    /// API server, and on one thread the tasks hand work to each other without waking another
    /// thread or taking another thread's malloc arena lock. Measured with hack/at-vs-kube-rs.sh
    /// on the 2-core VM (ONLY=project, alternated runs): the manager's CPU for 10,000 Ats 7.49 and
    /// 7.51 s with two threads, 5.12 and 5.20 s with one, and the wall to all DONE 12.2 s against
    /// 10.9-11.2 s; for 30,000 Ats 26.97 s against 20.28 s. Raise it for a manager whose syncs
    /// compute more than they wait.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub runtime_threads: usize,

    /// How often informers re-deliver every cached object to the controllers.
    #[arg(long, default_value = "10m", value_parser = parse_go_duration, value_name = "DURATION")]
    pub resync_period: Duration,

    /// Client-side queries per second to the API server; -1 (or 0) disables the throttle.
    /// Unset (with --kube-api-burst unset too): no client-side throttle when the server runs API
    /// Priority and Fairness, else 20.
    #[arg(long, value_name = "QPS", allow_negative_numbers = true)]
    pub kube_api_qps: Option<f32>,

    /// Burst allowed above --kube-api-qps (default 30).
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<u32>,

    /// Elect a leader through a coordination.k8s.io Lease before running any controller.
    #[arg(long)]
    pub leader_elect: bool,

    /// How long a Lease is valid for non-leaders before they may take it.
    #[arg(long, default_value = "15s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps retrying a renewal before it gives up leading.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub leader_elect_renew_deadline: Duration,

    /// How long candidates wait between attempts to acquire or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub leader_elect_retry_period: Duration,

    /// The name of the Lease object.
    #[arg(long, default_value = DEFAULT_LEASE_NAME, value_name = "NAME")]
    pub leader_elect_resource_name: String,

    /// The namespace of the Lease (default: the pod's namespace in a cluster, else "default").
    #[arg(long, default_value = "", value_name = "NAMESPACE")]
    pub leader_elect_resource_namespace: String,

    /// Address for /metrics, e.g. ':8080' or '127.0.0.1:8080'; '0' turns it off.
    #[arg(long, default_value = ":8080", value_name = "ADDR")]
    pub metrics_bind_address: String,

    /// Serve /metrics over HTTPS, every scrape authenticated (TokenReview) and authorized
    /// (SubjectAccessReview: get on /metrics) by the API server.
    #[arg(long)]
    pub metrics_secure: bool,

    /// A directory holding tls.crt and tls.key for --metrics-secure; without it (or when it
    /// holds neither file) a self-signed certificate is generated at start.
    #[arg(long, value_name = "DIR")]
    pub metrics_cert_dir: Option<PathBuf>,

    /// Address for /healthz and /readyz; '0' turns it off.
    #[arg(long, default_value = ":8081", value_name = "ADDR")]
    pub health_probe_bind_address: String,

    /// Connection limits of the metrics and probe servers: `--max-connections` (default
    /// 1024), `--header-read-timeout` (10s), `--idle-timeout` (90s)
    /// ([`apimachinery::serving::ServingFlags`]; they speak HTTP/1.1 only, so
    /// `--http2-max-streams-per-connection` has no effect here).
    #[command(flatten)]
    pub serving: apimachinery::serving::ServingFlags,

    /// How long a shutdown waits for in-flight syncs before giving up on them.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub graceful_shutdown_timeout: Duration,

    /// Export the `sync` and `request` spans over OTLP/HTTP (JSON) to this collector, e.g.
    /// http://localhost:4318 (spans go to {URL}/v1/traces).
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// The exported spans' `service.name`.
    #[arg(long, value_name = "NAME", env = "OTEL_SERVICE_NAME", default_value = DEFAULT_SERVICE_NAME)]
    pub otlp_service_name: String,

    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log verbosity, klog style: 0 = info, 1-4 = debug, 5 and more = trace.
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    pub verbosity: u8,

    /// The webhook server's address (HTTPS: /validate-at, /mutate-at, /convert); 0 turns it off.
    #[arg(long, default_value = DEFAULT_WEBHOOK_BIND_ADDRESS, value_name = "ADDR")]
    pub webhook_bind_address: String,

    /// Directory holding the webhook server's tls.crt and tls.key (reloaded when they change).
    #[arg(long, default_value = DEFAULT_WEBHOOK_CERT_DIR, value_name = "DIR")]
    pub webhook_cert_dir: PathBuf,
    /// `--shard-mode`, `--shard-id`, `--shard-ring`, `--shard-lease-namespace`
    /// ([`crate::sharding::shard`]).
    #[command(flatten)]
    pub sharding: ShardFlags,
}

/// Leader election settings, present only with `--leader-elect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace.
    pub lease_namespace: String,
    /// See `--leader-elect-lease-duration`.
    pub lease_duration: Duration,
    /// See `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// See `--leader-elect-retry-period`.
    pub retry_period: Duration,
}

/// The validated configuration the manager runs with.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerConfig {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--master`.
    pub master: Option<String>,
    /// `--context`.
    pub context: Option<String>,
    /// `--namespace`; `None` means every namespace.
    pub namespace: Option<String>,
    /// The controllers to start, in the manager's start order ([`KnownControllers`]).
    pub controllers: Vec<&'static str>,
    /// `--workers`, at least 1.
    pub workers: usize,
    /// `--resync-period`; zero turns resync off.
    pub resync_period: Duration,
    /// `--kube-api-qps` (20 when not given); `<= 0` disables the throttle.
    pub qps: f32,
    /// `--kube-api-burst` (30 when not given).
    pub burst: u32,
    /// True when neither `--kube-api-qps` nor `--kube-api-burst` was given: `qps`/`burst` are
    /// then only the fallback for a server without priority and fairness
    /// ([`Config::follow_server_flow_control`](sample_client_go::client::Config::follow_server_flow_control)).
    pub throttle_follows_server: bool,
    /// `Some` with `--leader-elect`.
    pub leader_election: Option<LeaderElectionConfig>,
    /// `None` when metrics are off.
    pub metrics_addr: Option<SocketAddr>,
    /// `None` when probes are off.
    pub health_addr: Option<SocketAddr>,
    /// Connection limits of the metrics and probe servers (the defaults of
    /// [`crate::health::probe_serving_limits`] with the connection flags applied).
    pub serving: apimachinery::serving::ServingLimits,
    /// `--graceful-shutdown-timeout`.
    pub shutdown_timeout: Duration,
    /// `--log-format`.
    pub log_format: LogFormat,
    /// `-v`.
    pub verbosity: u8,
    /// `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`) and `--otlp-service-name` (or
    /// `OTEL_SERVICE_NAME`): `Some` when spans are exported ([`crate::otlp`]).
    pub otlp: Option<OtlpConfig>,
}

/// A flag whose value cannot be used. The message names the flag and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for --{flag}: {reason}")]
pub struct FlagError {
    /// The flag's long name, without dashes.
    pub flag: &'static str,
    /// The offending value, as given.
    pub value: String,
    /// Why it was rejected.
    pub reason: String,
}

impl FlagError {
    fn new(flag: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        FlagError {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

impl Default for ManagerOptions {
    /// The documented defaults, as if no flag was given.
    fn default() -> Self {
        ManagerOptions {
            kubeconfig: None,
            master: None,
            context: None,
            namespace: String::new(),
            controllers: vec!["*".to_string()],
            workers: 32,
            runtime_threads: 1,
            resync_period: Duration::from_secs(600),
            kube_api_qps: None,
            kube_api_burst: None,
            leader_elect: false,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
            leader_elect_resource_name: DEFAULT_LEASE_NAME.to_string(),
            leader_elect_resource_namespace: String::new(),
            metrics_bind_address: ":8080".to_string(),
            metrics_secure: false,
            metrics_cert_dir: None,
            health_probe_bind_address: ":8081".to_string(),
            serving: apimachinery::serving::ServingFlags::default(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            otlp_endpoint: None,
            otlp_service_name: DEFAULT_SERVICE_NAME.to_string(),
            log_format: LogFormat::Text,
            verbosity: 0,
            webhook_bind_address: DEFAULT_WEBHOOK_BIND_ADDRESS.to_string(),
            webhook_cert_dir: PathBuf::from(DEFAULT_WEBHOOK_CERT_DIR),
            sharding: ShardFlags::default(),
        }
    }
}

impl ManagerOptions {
    /// The webhook server's configuration from `--webhook-bind-address` and
    /// `--webhook-cert-dir`: `None` when the address is `0`, or when the cert dir is the
    /// default one and holds no `tls.crt` (a manager run outside a cluster without webhook
    /// certificates then runs without webhooks; [`super::run`] says so in the log once the
    /// cluster answered). A cert dir given explicitly must hold the pair; the server refuses
    /// to start otherwise.
    pub fn webhook_config(&self) -> Result<Option<WebhookServerConfig>, FlagError> {
        let Some(addr) = parse_bind_address("webhook-bind-address", &self.webhook_bind_address)?
        else {
            return Ok(None);
        };
        let default_dir = self.webhook_cert_dir == std::path::Path::new(DEFAULT_WEBHOOK_CERT_DIR);
        if default_dir && !self.webhook_cert_dir.join("tls.crt").exists() {
            return Ok(None);
        }
        Ok(Some(WebhookServerConfig {
            addr,
            cert_dir: self.webhook_cert_dir.clone(),
        }))
    }
}

impl ManagerOptions {
    /// Checks every flag and resolves defaults that depend on the environment (the Lease
    /// namespace). `in_cluster_namespace` is the content of the service-account namespace file
    /// when running in a pod (see [`read_in_cluster_namespace`]).
    pub fn validate(
        &self,
        in_cluster_namespace: Option<&str>,
        known: &KnownControllers,
    ) -> Result<ManagerConfig, FlagError> {
        let namespace = match self.namespace.trim() {
            "" => None,
            ns => {
                validate_dns1123_label(ns).map_err(|r| FlagError::new("namespace", ns, r))?;
                Some(ns.to_string())
            }
        };
        if let Some(master) = &self.master
            && !(master.starts_with("https://") || master.starts_with("http://"))
        {
            return Err(FlagError::new(
                "master",
                master,
                "expected a URL starting with https:// or http://",
            ));
        }
        if let Some(context) = &self.context
            && context.is_empty()
        {
            return Err(FlagError::new("context", context, "must not be empty"));
        }
        let controllers = resolve_controllers(&self.controllers, known)?;
        if self.workers == 0 {
            return Err(FlagError::new(
                "workers",
                self.workers,
                "must be at least 1",
            ));
        }
        let qps = self.kube_api_qps.unwrap_or(client::config::DEFAULT_QPS);
        let burst = self.kube_api_burst.unwrap_or(client::config::DEFAULT_BURST);
        if !qps.is_finite() || (qps < 0.0 && qps != -1.0) {
            return Err(FlagError::new(
                "kube-api-qps",
                qps,
                "must be a finite number >= 0, or -1 to disable the throttle",
            ));
        }
        if qps > 0.0 && burst == 0 {
            return Err(FlagError::new(
                "kube-api-burst",
                burst,
                "must be at least 1 when --kube-api-qps is set",
            ));
        }
        let leader_election = if self.leader_elect {
            Some(self.leader_election_config(in_cluster_namespace)?)
        } else {
            None
        };
        let metrics_addr = parse_bind_address("metrics-bind-address", &self.metrics_bind_address)?;
        let health_addr =
            parse_bind_address("health-probe-bind-address", &self.health_probe_bind_address)?;
        if let (Some(m), Some(h)) = (metrics_addr, health_addr)
            && m.port() != 0
            && m == h
        {
            return Err(FlagError::new(
                "health-probe-bind-address",
                &self.health_probe_bind_address,
                "must differ from --metrics-bind-address",
            ));
        }
        self.secure_metrics_flags(metrics_addr.is_some())?;
        if self.graceful_shutdown_timeout.is_zero() {
            return Err(FlagError::new(
                "graceful-shutdown-timeout",
                format_duration(self.graceful_shutdown_timeout),
                "must be greater than zero",
            ));
        }
        let otlp = self.otlp_config()?;
        Ok(ManagerConfig {
            kubeconfig: self.kubeconfig.clone(),
            master: self.master.clone(),
            context: self.context.clone(),
            namespace,
            controllers,
            workers: self.workers,
            resync_period: self.resync_period,
            qps,
            burst,
            throttle_follows_server: self.kube_api_qps.is_none() && self.kube_api_burst.is_none(),
            leader_election,
            metrics_addr,
            health_addr,
            serving: self.serving.apply(probe_serving_limits()),
            shutdown_timeout: self.graceful_shutdown_timeout,
            log_format: self.log_format,
            verbosity: self.verbosity,
            otlp,
        })
    }

    /// `--otlp-endpoint` checked (an empty value, as an empty `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// means no export), with `--otlp-service-name` (empty: the default).
    fn otlp_config(&self) -> Result<Option<OtlpConfig>, FlagError> {
        let Some(endpoint) = self.otlp_endpoint.as_deref().map(str::trim) else {
            return Ok(None);
        };
        if endpoint.is_empty() {
            return Ok(None);
        }
        let uri = parse_endpoint(endpoint)
            .map_err(|reason| FlagError::new("otlp-endpoint", endpoint, reason))?;
        let service = match self.otlp_service_name.trim() {
            "" => DEFAULT_SERVICE_NAME,
            s => s,
        };
        Ok(Some(OtlpConfig::new(uri, service)))
    }

    /// `--metrics-secure` and `--metrics-cert-dir`: `Some` when `/metrics` is to be served over
    /// HTTPS behind TokenReview and SubjectAccessReview ([`crate::metrics_auth`]). They are
    /// kept out of [`ManagerConfig`] (the in-process manager of the demo and the tests serves
    /// no metrics); [`run`](super::run) hands them to
    /// [`Manager::with_secure_metrics`](super::Manager::with_secure_metrics).
    pub fn secure_metrics(&self) -> Option<SecureServing> {
        self.metrics_secure.then(|| SecureServing {
            cert_dir: self.metrics_cert_dir.clone(),
        })
    }

    fn secure_metrics_flags(&self, metrics_on: bool) -> Result<(), FlagError> {
        let Some(dir) = &self.metrics_cert_dir else {
            return Ok(());
        };
        let shown = dir.display();
        if !self.metrics_secure {
            return Err(FlagError::new(
                "metrics-cert-dir",
                shown,
                "only used with --metrics-secure",
            ));
        }
        if !metrics_on {
            return Err(FlagError::new(
                "metrics-cert-dir",
                shown,
                "the metrics server is off (--metrics-bind-address=0)",
            ));
        }
        if !dir.is_dir() {
            return Err(FlagError::new("metrics-cert-dir", shown, "not a directory"));
        }
        Ok(())
    }

    /// `--shard-mode=sharded` and its flags: `Some` when this process is a shard
    /// ([`crate::sharding::shard`]). The shard Lease takes the `--leader-elect-*` timings
    /// (checked as for a leader Lease) and defaults its namespace as the leader Lease does;
    /// `--leader-elect` itself is refused, since a shard holds a Lease of its own.
    pub fn shard_config(
        &self,
        in_cluster_namespace: Option<&str>,
    ) -> Result<Option<ShardConfig>, FlagError> {
        if self.sharding.shard_mode == ShardMode::Leader {
            return Ok(None);
        }
        if self.leader_elect {
            return Err(FlagError::new(
                "leader-elect",
                true,
                "a shard holds a Lease of its own: drop --leader-elect with --shard-mode=sharded",
            ));
        }
        let le = self.leader_election_config(in_cluster_namespace)?;
        let timings = (le.lease_duration, le.renew_deadline, le.retry_period);
        let shard = self
            .sharding
            .validate(&le.lease_namespace, timings, |k| std::env::var(k).ok())
            .map_err(|e| FlagError::new(e.flag, e.value, e.reason))?;
        if let Some(s) = &shard {
            validate_dns1123_label(&s.lease_namespace)
                .map_err(|r| FlagError::new("shard-lease-namespace", &s.lease_namespace, r))?;
        }
        Ok(shard)
    }

    /// `--controllers=sharder`: `Some` when this process runs the ring's sharder, and nothing
    /// else ([`crate::sharding::SharderElection`]): leader-elected on the Lease
    /// `<--shard-ring>-sharder` in `--shard-lease-namespace` (default: as the leader Lease's
    /// namespace), with the `--leader-elect-*` timings. Leader election is implied, so
    /// `--leader-elect` changes nothing; `--shard-mode=sharded` is refused (a shard hosts the
    /// sharder with `--shard-sharder` instead, and a sharder process holds no shard Lease).
    pub fn sharder_config(
        &self,
        in_cluster_namespace: Option<&str>,
    ) -> Result<Option<SharderElection>, FlagError> {
        if !sharder_enabled(&self.controllers) {
            return Ok(None);
        }
        if self.sharding.shard_mode == ShardMode::Sharded {
            return Err(FlagError::new(
                "controllers",
                self.controllers.join(","),
                "the sharder runs alone and holds no shard Lease: drop --shard-mode=sharded (a shard hosts the sharder with --shard-sharder=true)",
            ));
        }
        let le = self.leader_election_config(in_cluster_namespace)?;
        let timings = (le.lease_duration, le.renew_deadline, le.retry_period);
        let election = self
            .sharding
            .sharder_election(&le.lease_namespace, timings)
            .map_err(|e| FlagError::new(e.flag, e.value, e.reason))?;
        validate_dns1123_label(&election.lease_namespace)
            .map_err(|r| FlagError::new("shard-lease-namespace", &election.lease_namespace, r))?;
        Ok(Some(election))
    }

    /// client-go's `LeaderElectionConfig` checks: lease > renew deadline > jitter × retry.
    fn leader_election_config(
        &self,
        in_cluster_namespace: Option<&str>,
    ) -> Result<LeaderElectionConfig, FlagError> {
        /// client-go's `JitterFactor`.
        const JITTER: f64 = 1.2;
        let lease = self.leader_elect_lease_duration;
        let renew = self.leader_elect_renew_deadline;
        let retry = self.leader_elect_retry_period;
        if retry.is_zero() {
            return Err(FlagError::new(
                "leader-elect-retry-period",
                format_duration(retry),
                "must be greater than zero",
            ));
        }
        if lease <= renew {
            return Err(FlagError::new(
                "leader-elect-lease-duration",
                format_duration(lease),
                format!(
                    "must be greater than --leader-elect-renew-deadline ({})",
                    format_duration(renew)
                ),
            ));
        }
        if renew.as_secs_f64() <= JITTER * retry.as_secs_f64() {
            return Err(FlagError::new(
                "leader-elect-renew-deadline",
                format_duration(renew),
                format!(
                    "must be greater than {JITTER} x --leader-elect-retry-period ({})",
                    format_duration(retry)
                ),
            ));
        }
        let name = self.leader_elect_resource_name.trim();
        validate_dns1123_subdomain(name)
            .map_err(|r| FlagError::new("leader-elect-resource-name", name, r))?;
        let namespace = match self.leader_elect_resource_namespace.trim() {
            "" => in_cluster_namespace
                .map(str::trim)
                .filter(|ns| !ns.is_empty())
                .unwrap_or("default")
                .to_string(),
            ns => ns.to_string(),
        };
        validate_dns1123_label(&namespace)
            .map_err(|r| FlagError::new("leader-elect-resource-namespace", &namespace, r))?;
        Ok(LeaderElectionConfig {
            lease_name: name.to_string(),
            lease_namespace: namespace,
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
        })
    }
}

/// Reads the pod's namespace from the service-account volume, if there is one.
pub async fn read_in_cluster_namespace() -> Option<String> {
    tokio::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE)
        .await
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// kube-controller-manager's `--controllers` rules (`IsControllerEnabled`): for each known
/// controller the first entry that names it decides (`name` on, `-name` off); a controller no
/// entry names is on when the list contains `*`. The default, `*`, runs every registered
/// controller, so each needs its CRD installed (`kubectl apply -f artifacts/crds/` installs them
/// all); `--controllers=at` runs the At operator alone on a cluster that has only its CRD.
/// Unknown names are an error, not silently ignored.
///
/// `sharder` ([`SHARDER_CONTROLLER`]) is the one name `*` does not enable (like
/// kube-controller-manager's disabled-by-default controllers). With it the process runs the
/// ring's sharder and no operator, and the operator names choose whose objects it shards: the
/// result is then the sharded operators among them, or all of the sharded ones ([`KnownControllers::sharded`]) when
/// none is named (`--controllers=sharder`).
pub fn resolve_controllers(
    list: &[String],
    known: &KnownControllers,
) -> Result<Vec<&'static str>, FlagError> {
    let joined = list.join(",");
    let entries: Vec<&str> = list
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && s.strip_prefix('-').unwrap_or(s) != SHARDER_CONTROLLER)
        .collect();
    for entry in &entries {
        let name = entry.strip_prefix('-').unwrap_or(entry);
        if *entry != "*" && !known.names.contains(&name) {
            return Err(FlagError::new(
                "controllers",
                &joined,
                format!(
                    "unknown controller {name:?}; known: {}, {SHARDER_CONTROLLER}",
                    known.names.join(", ")
                ),
            ));
        }
    }
    if sharder_enabled(list)
        && let Some(name) = entries
            .iter()
            .find(|e| known.names.contains(e) && !known.sharded.contains(e))
    {
        return Err(FlagError::new(
            "controllers",
            &joined,
            format!(
                "the sharder shards the objects of {}; {name} is not sharded",
                known.sharded.join(", ")
            ),
        ));
    }
    let star = entries.contains(&"*");
    let chosen: Vec<&'static str> = known
        .names
        .iter()
        .copied()
        .filter(|known| {
            entries
                .iter()
                .find_map(|e| match e.strip_prefix('-') {
                    Some(n) if n == *known => Some(false),
                    None if e == known => Some(true),
                    _ => None,
                })
                .unwrap_or(star)
        })
        .collect();
    if sharder_enabled(list) {
        let sharded: Vec<&'static str> = chosen
            .into_iter()
            .filter(|c| known.sharded.contains(c))
            .collect();
        return Ok(if sharded.is_empty() {
            known.sharded.clone()
        } else {
            sharded
        });
    }
    if chosen.is_empty() {
        return Err(FlagError::new(
            "controllers",
            &joined,
            "selects no controller",
        ));
    }
    Ok(chosen)
}

/// Whether `--controllers` runs the sharder: the first entry naming it decides (`sharder` on,
/// `-sharder` off); `*` does not enable it.
pub fn sharder_enabled(list: &[String]) -> bool {
    list.iter()
        .map(|s| s.trim())
        .find_map(|e| match e.strip_prefix('-') {
            Some(SHARDER_CONTROLLER) => Some(false),
            None if e == SHARDER_CONTROLLER => Some(true),
            _ => None,
        })
        .unwrap_or(false)
}

/// Parses a bind address as controller-runtime does: `:8080` (every interface),
/// `127.0.0.1:8080`, `[::1]:8080`; `0` means "off" (`None`). Host names are not resolved.
pub fn parse_bind_address(
    flag: &'static str,
    value: &str,
) -> Result<Option<SocketAddr>, FlagError> {
    let v = value.trim();
    if v == "0" {
        return Ok(None);
    }
    if let Some(port) = v.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| {
            FlagError::new(flag, value, "the port must be a number from 0 to 65535")
        })?;
        return Ok(Some(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))));
    }
    v.parse::<SocketAddr>().map(Some).map_err(|_| {
        FlagError::new(
            flag,
            value,
            "expected HOST:PORT with an IP address (e.g. 127.0.0.1:8080), :PORT, or 0 to turn it off",
        )
    })
}

/// RFC 1123 label (namespace names), with the API server's own messages
/// ([`apimachinery::validation::is_dns1123_label`]).
fn validate_dns1123_label(s: &str) -> Result<(), String> {
    first_error(apimachinery::validation::is_dns1123_label(s))
}

/// RFC 1123 subdomain (most object names, such as the Lease's).
fn validate_dns1123_subdomain(s: &str) -> Result<(), String> {
    first_error(apimachinery::validation::is_dns1123_subdomain(s))
}

fn first_error(errors: Vec<String>) -> Result<(), String> {
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::verbosity_level;
    use clap::Parser;

    /// The operators of `sample-operators`, as its registry declares them (all five shard).
    fn known() -> KnownControllers {
        let names = vec!["at", "tdset", "rediscluster", "myapp", "foo"];
        KnownControllers {
            sharded: names.clone(),
            names,
        }
    }

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        opts: ManagerOptions,
    }

    fn parse(args: &[&str]) -> Result<ManagerOptions, clap::Error> {
        let mut full = vec!["sample-controller"];
        full.extend_from_slice(args);
        Cli::try_parse_from(full).map(|c| c.opts)
    }

    #[test]
    fn metrics_secure_flags_are_checked_and_handed_over() {
        assert_eq!(parse(&[]).unwrap().secure_metrics(), None);
        let opts = parse(&["--metrics-secure"]).unwrap();
        assert!(opts.validate(None, &known()).is_ok());
        assert_eq!(
            opts.secure_metrics(),
            Some(SecureServing { cert_dir: None })
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let opts = parse(&["--metrics-secure", "--metrics-cert-dir", d]).unwrap();
        assert!(opts.validate(None, &known()).is_ok());
        assert_eq!(
            opts.secure_metrics().and_then(|s| s.cert_dir),
            Some(dir.path().to_path_buf())
        );
        let e = parse(&["--metrics-cert-dir", d])
            .unwrap()
            .validate(None, &known())
            .unwrap_err();
        assert_eq!(e.flag, "metrics-cert-dir");
        assert!(e.reason.contains("--metrics-secure"), "{e}");
        let missing = dir.path().join("nope");
        let e = parse(&[
            "--metrics-secure",
            "--metrics-cert-dir",
            missing.to_str().unwrap(),
        ])
        .unwrap()
        .validate(None, &known())
        .unwrap_err();
        assert_eq!(e.reason, "not a directory");
        let e = parse(&[
            "--metrics-secure",
            "--metrics-bind-address=0",
            "--metrics-cert-dir",
            d,
        ])
        .unwrap()
        .validate(None, &known())
        .unwrap_err();
        assert!(e.reason.contains("off"), "{e}");
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let opts = parse(&[]).unwrap();
        assert_eq!(opts, ManagerOptions::default());
        assert_eq!(opts.runtime_threads, 1);
        assert_eq!(parse(&["--runtime-threads=0"]).unwrap().runtime_threads, 0);
        let cfg = opts.validate(None, &known()).unwrap();
        assert_eq!(cfg.namespace, None);
        assert_eq!(cfg.controllers, known().names);
        assert_eq!(cfg.workers, 32);
        assert_eq!(cfg.resync_period, Duration::from_secs(600));
        assert_eq!((cfg.qps, cfg.burst), (20.0, 30));
        assert!(cfg.throttle_follows_server);
        assert_eq!(cfg.leader_election, None);
        assert_eq!(cfg.metrics_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(cfg.health_addr, Some("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(cfg.log_format, LogFormat::Text);
        assert_eq!(cfg.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(cfg.serving, crate::health::probe_serving_limits());
    }

    #[test]
    fn connection_flags_set_the_metrics_and_probe_servers_limits() {
        let cfg = parse(&[
            "--max-connections=4000",
            "--header-read-timeout=2s",
            "--idle-timeout=1m",
        ])
        .unwrap()
        .validate(None, &known())
        .unwrap();
        assert_eq!(cfg.serving.max_connections, 4000);
        assert_eq!(cfg.serving.header_read_timeout, Duration::from_secs(2));
        assert_eq!(cfg.serving.idle_timeout, Duration::from_secs(60));
        assert_eq!(
            cfg.serving.max_buf_size,
            crate::health::probe_serving_limits().max_buf_size
        );
        for bad in [
            "--max-connections=0",
            "--idle-timeout=0s",
            "--header-read-timeout=x",
        ] {
            let e = parse(&[bad]).unwrap_err().to_string();
            let flag = bad.split('=').next().unwrap_or_default();
            assert!(e.contains(flag), "{bad}: {e}");
        }
    }

    #[test]
    fn an_explicit_throttle_flag_wins_over_the_server() {
        let cfg = |args: &[&str]| parse(args).unwrap().validate(None, &known()).unwrap();
        let only_qps = cfg(&["--kube-api-qps=5"]);
        assert_eq!((only_qps.qps, only_qps.burst), (5.0, 30));
        assert!(!only_qps.throttle_follows_server);
        let only_burst = cfg(&["--kube-api-burst=7"]);
        assert_eq!((only_burst.qps, only_burst.burst), (20.0, 7));
        assert!(!only_burst.throttle_follows_server);
        // client-go's "no throttle", in both spellings.
        for args in [&["--kube-api-qps=-1"][..], &["--kube-api-qps", "-1"][..]] {
            let off = cfg(args);
            assert_eq!(off.qps, -1.0);
            assert!(!off.throttle_follows_server);
            assert!(
                sample_client_go::client::transport::Throttle::new(off.qps, off.burst).is_none()
            );
        }
    }

    #[test]
    fn every_flag_is_accepted() {
        let opts = parse(&[
            "--kubeconfig=/tmp/k.yaml",
            "--master=https://127.0.0.1:6443",
            "--context=kind",
            "--namespace=cnat",
            "--controllers=at,-at",
            "--workers=4",
            "--resync-period=30s",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            "--leader-elect",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=4s",
            "--leader-elect-resource-name=my-lease",
            "--leader-elect-resource-namespace=ops",
            "--metrics-bind-address=127.0.0.1:9090",
            "--health-probe-bind-address=0",
            "--graceful-shutdown-timeout=1m",
            "--log-format=json",
            "-v=4",
        ])
        .unwrap();
        let cfg = opts.validate(Some("ignored"), &known()).unwrap();
        assert_eq!(cfg.kubeconfig, Some(PathBuf::from("/tmp/k.yaml")));
        assert_eq!(cfg.namespace.as_deref(), Some("cnat"));
        assert_eq!(
            cfg.controllers,
            Vec::<&str>::new()
                .into_iter()
                .chain(["at"])
                .collect::<Vec<_>>()
        );
        assert_eq!(cfg.workers, 4);
        assert_eq!(cfg.resync_period, Duration::from_secs(30));
        let le = cfg.leader_election.unwrap();
        assert_eq!(le.lease_name, "my-lease");
        assert_eq!(le.lease_namespace, "ops");
        assert_eq!(le.lease_duration, Duration::from_secs(30));
        assert_eq!(cfg.metrics_addr, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(cfg.health_addr, None);
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert_eq!(cfg.verbosity, 4);
        assert_eq!(verbosity_level(cfg.verbosity), tracing::Level::DEBUG);
    }

    #[test]
    fn lease_namespace_defaults_to_the_pods_namespace_then_default() {
        let opts = parse(&["--leader-elect"]).unwrap();
        let in_pod = opts
            .validate(Some("sample-controller\n"), &known())
            .unwrap();
        assert_eq!(
            in_pod.leader_election.unwrap().lease_namespace,
            "sample-controller"
        );
        let outside = opts.validate(None, &known()).unwrap();
        let le = outside.leader_election.unwrap();
        assert_eq!(le.lease_namespace, "default");
        assert_eq!(le.lease_name, "sample-controller");
        assert_eq!(
            (le.lease_duration, le.renew_deadline, le.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
    }

    #[test]
    fn otlp_endpoint_is_checked_and_handed_over() {
        let cfg = parse(&[
            "--otlp-endpoint=http://localhost:4318",
            "--otlp-service-name=ctl",
        ])
        .unwrap()
        .validate(None, &known())
        .unwrap();
        let otlp = cfg.otlp.expect("export on");
        assert_eq!(otlp.traces_url(), "http://localhost:4318/v1/traces");
        assert_eq!(otlp.service_name, "ctl");
        assert_eq!(otlp.scheduled_delay, crate::otlp::DEFAULT_SCHEDULED_DELAY);
        // An empty value (an empty OTEL_EXPORTER_OTLP_ENDPOINT) means no export.
        let cfg = parse(&["--otlp-endpoint="])
            .unwrap()
            .validate(None, &known())
            .unwrap();
        assert_eq!(cfg.otlp, None);
        let e = invalid(&["--otlp-endpoint=localhost:4318"]);
        assert_eq!(
            (e.flag, e.value.as_str()),
            ("otlp-endpoint", "localhost:4318")
        );
    }

    fn invalid(args: &[&str]) -> FlagError {
        parse(args).unwrap().validate(None, &known()).unwrap_err()
    }

    #[test]
    fn bad_values_name_the_flag_and_the_value() {
        let e = invalid(&["--workers=0"]);
        assert_eq!((e.flag, e.value.as_str()), ("workers", "0"));
        let e = invalid(&["--controllers=at,tdsets"]);
        assert_eq!(e.flag, "controllers");
        assert!(e.to_string().contains("\"tdsets\""), "{e}");
        let e = invalid(&["--controllers=-at"]);
        assert!(e.reason.contains("no controller"), "{e}");
        let e = invalid(&["--namespace=Not_A_Namespace"]);
        assert_eq!(e.flag, "namespace");
        let e = invalid(&["--master=127.0.0.1:6443"]);
        assert_eq!(e.flag, "master");
        let e = invalid(&["--kube-api-qps=-2"]);
        assert_eq!(e.flag, "kube-api-qps");
        let e = invalid(&["--kube-api-burst=0"]);
        assert_eq!(e.flag, "kube-api-burst");
        let e = invalid(&["--metrics-bind-address=localhost:8080"]);
        assert_eq!(e.flag, "metrics-bind-address");
        let e = invalid(&["--metrics-bind-address=:99999"]);
        assert_eq!(e.flag, "metrics-bind-address");
        let e = invalid(&["--health-probe-bind-address=:8080"]);
        assert_eq!(e.flag, "health-probe-bind-address");
        assert_eq!(
            e.to_string(),
            "invalid value \":8080\" for --health-probe-bind-address: must differ from --metrics-bind-address"
        );
        let e = invalid(&["--leader-elect", "--leader-elect-lease-duration=10s"]);
        assert_eq!(e.flag, "leader-elect-lease-duration");
        let e = invalid(&["--leader-elect", "--leader-elect-retry-period=9s"]);
        assert_eq!(e.flag, "leader-elect-renew-deadline");
        let e = invalid(&["--leader-elect", "--leader-elect-resource-name=Bad Name"]);
        assert_eq!(e.flag, "leader-elect-resource-name");
        let e = invalid(&["--graceful-shutdown-timeout=0"]);
        assert_eq!(e.flag, "graceful-shutdown-timeout");
    }

    #[test]
    fn clap_rejects_malformed_values_with_the_flag_name() {
        let e = parse(&["--resync-period=10"]).unwrap_err().to_string();
        assert!(
            e.contains("--resync-period") && e.contains("missing a unit"),
            "{e}"
        );
        let e = parse(&["--log-format=xml"]).unwrap_err().to_string();
        assert!(e.contains("--log-format"), "{e}");
        let e = parse(&["--workers=two"]).unwrap_err().to_string();
        assert!(e.contains("--workers"), "{e}");
    }

    #[test]
    fn controllers_rules() {
        let v = |s: &[&str]| {
            resolve_controllers(
                &s.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
                &known(),
            )
        };
        assert_eq!(v(&["*"]).unwrap(), known().names);
        assert_eq!(v(&["at"]).unwrap(), vec!["at"]);
        assert_eq!(
            v(&["*", "-at"]).unwrap(),
            vec!["tdset", "rediscluster", "myapp", "foo"]
        );
        assert_eq!(
            v(&["-at", "*"]).unwrap(),
            vec!["tdset", "rediscluster", "myapp", "foo"]
        );
        assert_eq!(v(&["at", "-at"]).unwrap(), vec!["at"]);
        assert!(v(&[""]).is_err());
        assert!(v(&["nope"]).is_err());
        // Naming a controller next to `*` changes nothing; `-name` switches one off.
        assert_eq!(v(&["*", "tdset"]).unwrap(), known().names);
        assert_eq!(
            v(&["-tdset", "-foo", "-myapp", "-rediscluster", "*"]).unwrap(),
            vec!["at"]
        );
        assert_eq!(
            v(&["foo", "myapp", "rediscluster", "tdset", "at"]).unwrap(),
            known().names
        );
        assert_eq!(v(&["foo"]).unwrap(), vec!["foo"]);
    }

    #[test]
    fn sharder_is_named_not_implied_and_picks_the_sharded_kinds() {
        let list = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let v = |s: &[&str]| resolve_controllers(&list(s), &known());
        // `*` does not run the sharder; naming it does, and then selects the kinds.
        assert!(!sharder_enabled(&list(&["*"])));
        assert!(sharder_enabled(&list(&["sharder"])));
        assert!(!sharder_enabled(&list(&["-sharder", "sharder"])));
        assert_eq!(v(&["sharder"]).unwrap(), known().sharded);
        assert_eq!(v(&["sharder", "at"]).unwrap(), vec!["at"]);
        assert_eq!(v(&["*", "sharder"]).unwrap(), known().sharded);
        assert_eq!(v(&["*", "-sharder"]).unwrap(), known().names);
        assert_eq!(
            v(&["sharder", "rediscluster", "at"]).unwrap(),
            vec!["at", "rediscluster"]
        );
        assert!(v(&["-sharder"]).is_err(), "selects no controller");

        let sharder = |extra: ManagerOptions| ManagerOptions {
            controllers: list(&["sharder"]),
            ..extra
        };
        assert_eq!(ManagerOptions::default().sharder_config(None), Ok(None));
        let e = sharder(ManagerOptions::default())
            .sharder_config(Some("ops"))
            .unwrap()
            .unwrap();
        assert_eq!(e.lease_name(), "sample-controller-sharder");
        assert_eq!(e.lease_namespace, "ops");
        assert_eq!(e.lease_duration, Duration::from_secs(15));
        let ring = sharder(ManagerOptions {
            sharding: crate::sharding::ShardFlags {
                shard_ring: "ats".into(),
                shard_lease_namespace: "leases".into(),
                ..Default::default()
            },
            ..ManagerOptions::default()
        });
        let e = ring.sharder_config(Some("ops")).unwrap().unwrap();
        assert_eq!(
            (e.lease_name().as_str(), e.lease_namespace.as_str()),
            ("ats-sharder", "leases")
        );
        // A sharder process is no shard.
        let both = sharder(ManagerOptions {
            sharding: crate::sharding::ShardFlags {
                shard_mode: crate::sharding::ShardMode::Sharded,
                ..Default::default()
            },
            ..ManagerOptions::default()
        });
        let e = both.sharder_config(None).unwrap_err();
        assert_eq!(e.flag, "controllers");
        assert!(e.to_string().contains("--shard-mode=sharded"), "{e}");
    }

    #[test]
    fn sharded_mode_takes_the_lease_timings_and_refuses_leader_election() {
        use crate::sharding::{ShardFlags, ShardMode};
        let sharded = |id: &str| ManagerOptions {
            sharding: ShardFlags {
                shard_mode: ShardMode::Sharded,
                shard_id: id.to_string(),
                ..ShardFlags::default()
            },
            ..ManagerOptions::default()
        };
        assert_eq!(ManagerOptions::default().shard_config(None), Ok(None));
        let c = sharded("shard-0")
            .shard_config(Some("ops"))
            .unwrap()
            .unwrap();
        assert_eq!(c.shard_id, "shard-0");
        assert_eq!(c.lease_namespace, "ops");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.labels.ring(), "sample-controller");
        let both = ManagerOptions {
            leader_elect: true,
            ..sharded("shard-0")
        };
        assert_eq!(both.shard_config(None).unwrap_err().flag, "leader-elect");
        let e = sharded("Bad_Id").shard_config(None).unwrap_err();
        assert_eq!(e.flag, "shard-id");
    }

    #[test]
    fn the_webhook_server_follows_its_two_flags() {
        let dir = tempfile::tempdir().unwrap();
        let with = |addr: &str, cert_dir: &std::path::Path| ManagerOptions {
            webhook_bind_address: addr.to_string(),
            webhook_cert_dir: cert_dir.to_owned(),
            ..ManagerOptions::default()
        };
        // Off with 0; a bad address names the flag.
        assert_eq!(with("0", dir.path()).webhook_config(), Ok(None));
        let e = with("nine", dir.path()).webhook_config().unwrap_err();
        assert_eq!(e.flag, "webhook-bind-address");
        // An explicit directory is used as given (the server then requires the pair in it).
        let cfg = with(":9443", dir.path()).webhook_config().unwrap().unwrap();
        assert_eq!(cfg.addr, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(cfg.cert_dir, dir.path());
        // The default directory without tls.crt: no webhook server.
        let default = ManagerOptions::default();
        if !std::path::Path::new(crate::webhook::DEFAULT_CERT_DIR)
            .join("tls.crt")
            .exists()
        {
            assert_eq!(default.webhook_config(), Ok(None));
        }
    }
}
