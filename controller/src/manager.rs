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
//!   ├─ metrics (:8080) and probes (:8081: /healthz, /readyz) on their own listeners
//!   ├─ leader election (optional): informers start at once (a standby keeps warm caches),
//!   │   the controllers' workers run only while this process leads
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
//! `--leader-elect*`), with controller-runtime's defaults for the two HTTP listeners:
//!
//! | flag | default | meaning |
//! |---|---|---|
//! | `--kubeconfig` | (loading rules) | a kubeconfig file; else `KUBECONFIG`, `~/.kube/config`, in-cluster |
//! | `--master` | | the API server URL; overrides the kubeconfig's server |
//! | `--context` | current context | the kubeconfig context to use |
//! | `--namespace` | `""` (all) | watch only this namespace |
//! | `--controllers` | `*` | `*` = every registered controller, `name` enables, `-name` disables |
//! | `--workers` | 2 | concurrent `sync_handler` calls per controller |
//! | `--resync-period` | 10m | informer resync (cnat's value): every object is re-queued this often |
//! | `--kube-api-qps` / `--kube-api-burst` | follow the server, else 20 / 30 | client-side throttle; `-1` (or 0) QPS disables it |
//! | `--leader-elect` | false | elect a leader through a Lease before running workers |
//! | `--leader-elect-lease-duration` / `-renew-deadline` / `-retry-period` | 15s / 10s / 2s | client-go's defaults |
//! | `--leader-elect-resource-name` / `-namespace` | `sample-controller` / in-cluster namespace | the Lease |
//! | `--metrics-bind-address` | `:8080` | `/metrics`; `0` turns it off |
//! | `--health-probe-bind-address` | `:8081` | `/healthz` and `/readyz`; `0` turns it off |
//! | `--graceful-shutdown-timeout` | 30s | how long a shutdown waits for in-flight syncs |
//! | `--log-format` | `text` | `text` or `json` |
//! | `-v` | 0 | verbosity, klog style: 0 info, 1–4 debug, 5+ trace; dependencies (hyper, h2, rustls) info until 6, debug 6–8, trace 9 (see [`crate::logging`]) |
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
//! `client-throttle: ...` (see [`crate::client::transport`]).
//!
//! Durations use Go's syntax (`300ms`, `1.5h`, `2h45m`), as the Kubernetes binaries do.
//! [`ManagerOptions::validate`] turns the raw flags into a [`ManagerConfig`] or one
//! [`FlagError`] naming the flag and the value, so a typo gives one clear line and exit code 2,
//! never a panic.

use apimachinery::duration::{format as format_duration, parse as parse_go_duration};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

/// The factory's lister-watchers from a [`Client`]; it lives in [`crate::cache::api_source`].
pub use crate::cache::ClientSource;
use crate::cache::SharedInformerFactory;
use crate::client::{
    self, Api, Client, Config, ConfigOptions, Patch, PatchParams, PostParams, ThrottleDecision,
};
use crate::controllers::registry::{self, BuildContext, Registration};
use crate::controllers::{Clock, Controller};
use crate::health::{HealthState, serve_health};
use crate::leaderelection::{
    LeaderCallbacks, LeaderElectionConfig as ElectionConfig, LeaderElector, LeaseLock,
};
use crate::metrics::{Metrics, serve_metrics};
use crate::record::{EventBroadcaster, EventSink};
use crate::workqueue::QueueMetrics;
use k8s_openapi::api::core::v1::Event;

/// The controllers this manager can run, in the order they start. `--controllers` names them.
/// The names of [`registry::OPERATORS`], the one table of operators.
pub const KNOWN_CONTROLLERS: &[&str] = &registry::NAMES;

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
    /// '-name' disables one. Comma-separated; known: at, tdset, rediscluster,
    /// myapp, foo.
    #[arg(long, value_delimiter = ',', default_value = "*", value_name = "LIST")]
    pub controllers: Vec<String>,

    /// Number of workers per controller (concurrent syncs). 2, as k8s.io/sample-controller
    /// runs; controller-runtime's MaxConcurrentReconciles defaults to 1 and
    /// kube-controller-manager's --concurrent-*-syncs mostly to 5. Measured with
    /// hack/bench-at.sh (README, Performance): 8 workers create a burst of 1,000 due pods about
    /// 3x sooner than 2, but then outrun the event sink, whose 1,000-event queue drops events.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub workers: usize,

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

    /// Address for /healthz and /readyz; '0' turns it off.
    #[arg(long, default_value = ":8081", value_name = "ADDR")]
    pub health_probe_bind_address: String,

    /// How long a shutdown waits for in-flight syncs before giving up on them.
    #[arg(long, default_value = "30s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub graceful_shutdown_timeout: Duration,

    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log verbosity, klog style: 0 = info, 1-4 = debug, 5 and more = trace.
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    pub verbosity: u8,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl LogFormat {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The `tracing` level a klog-style `-v` maps to.
pub fn verbosity_level(v: u8) -> tracing::Level {
    match v {
        0 => tracing::Level::INFO,
        1..=4 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    }
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
    /// The controllers to start, in [`KNOWN_CONTROLLERS`] order.
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
    /// ([`Config::follow_server_flow_control`]).
    pub throttle_follows_server: bool,
    /// `Some` with `--leader-elect`.
    pub leader_election: Option<LeaderElectionConfig>,
    /// `None` when metrics are off.
    pub metrics_addr: Option<SocketAddr>,
    /// `None` when probes are off.
    pub health_addr: Option<SocketAddr>,
    /// `--graceful-shutdown-timeout`.
    pub shutdown_timeout: Duration,
    /// `--log-format`.
    pub log_format: LogFormat,
    /// `-v`.
    pub verbosity: u8,
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
            workers: 2,
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
            health_probe_bind_address: ":8081".to_string(),
            graceful_shutdown_timeout: Duration::from_secs(30),
            log_format: LogFormat::Text,
            verbosity: 0,
        }
    }
}

impl ManagerOptions {
    /// Checks every flag and resolves defaults that depend on the environment (the Lease
    /// namespace). `in_cluster_namespace` is the content of the service-account namespace file
    /// when running in a pod (see [`read_in_cluster_namespace`]).
    pub fn validate(&self, in_cluster_namespace: Option<&str>) -> Result<ManagerConfig, FlagError> {
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
        let controllers = resolve_controllers(&self.controllers)?;
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
        if self.graceful_shutdown_timeout.is_zero() {
            return Err(FlagError::new(
                "graceful-shutdown-timeout",
                format_duration(self.graceful_shutdown_timeout),
                "must be greater than zero",
            ));
        }
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
            shutdown_timeout: self.graceful_shutdown_timeout,
            log_format: self.log_format,
            verbosity: self.verbosity,
        })
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
pub fn resolve_controllers(list: &[String]) -> Result<Vec<&'static str>, FlagError> {
    let joined = list.join(",");
    let entries: Vec<&str> = list
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    for entry in &entries {
        let name = entry.strip_prefix('-').unwrap_or(entry);
        if *entry != "*" && !KNOWN_CONTROLLERS.contains(&name) {
            return Err(FlagError::new(
                "controllers",
                &joined,
                format!(
                    "unknown controller {name:?}; known: {}",
                    KNOWN_CONTROLLERS.join(", ")
                ),
            ));
        }
    }
    let star = entries.contains(&"*");
    let chosen: Vec<&'static str> = KNOWN_CONTROLLERS
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
    if chosen.is_empty() {
        return Err(FlagError::new(
            "controllers",
            &joined,
            "selects no controller",
        ));
    }
    Ok(chosen)
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

/// RFC 1123 label (namespace names): lower-case alphanumerics and '-', at most 63, starting
/// and ending alphanumeric.
fn validate_dns1123_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".to_string());
    }
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !ok_chars || !ok_ends(s.as_bytes()[0]) || !ok_ends(s.as_bytes()[s.len() - 1]) {
        return Err(
            "must consist of lower case alphanumeric characters or '-', and start and end with an alphanumeric character"
                .to_string(),
        );
    }
    Ok(())
}

/// RFC 1123 subdomain (most object names): labels joined by '.', at most 253 characters.
fn validate_dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".to_string());
    }
    s.split('.').try_for_each(validate_dns1123_label).map_err(|_| {
        "must consist of lower case alphanumeric characters, '-' or '.', and start and end with an alphanumeric character".to_string()
    })
}

// ---------------------------------------------------------------------------------------------
// Running: wiring the shared machinery and the controllers.
// ---------------------------------------------------------------------------------------------

/// Something that stops the manager, in one line.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// A flag's value cannot be used.
    #[error(transparent)]
    Flag(#[from] FlagError),
    /// The kubeconfig / in-cluster configuration could not be loaded.
    #[error("loading the client configuration: {0}")]
    Config(#[source] client::Error),
    /// The API server did not answer.
    #[error("cannot reach the API server at {server}: {source}")]
    Unreachable {
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
        }
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

    /// A handle on the controllers once [`Manager::run`] has built them (for tests and the
    /// demo: sync counters, `has_synced`).
    pub fn controllers_handle(&self) -> ControllersHandle {
        ControllersHandle(Arc::clone(&self.controllers))
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
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ManagerError> {
        let cfg = self.config.clone();
        let clock = self.clock.unwrap_or_default();
        let metrics = Metrics::new();
        metrics.register_client(&self.client);
        let health = HealthState::new();
        // Following the server: ask it now (bounded) whether it runs priority and fairness,
        // so that the decision is logged once, up front, and shown on /readyz?verbose.
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
                qps = cfg.qps,
                burst = cfg.burst,
                "client-side throttle {}",
                other.describe()
            ),
        }
        health.add_readiness_check(&format!("client-throttle: {}", throttle.describe()), || {
            true
        });

        // One informer factory for every controller: one watch per type, shared caches.
        // Each informer's reflector reports 403s, relists and watch progress to `health`, so
        // /healthz fails, naming the resource, when a watch is stuck.
        let mut factory =
            SharedInformerFactory::new(ClientSource(self.client.clone()), cfg.resync_period)
                .with_watch_health(health.clone());
        if let Some(ns) = &cfg.namespace {
            factory = factory.with_namespace(ns.clone());
        }
        let factory = Arc::new(factory);

        // Events: logged, and written as core/v1 Events for `kubectl describe`.
        let broadcaster = EventBroadcaster::new();
        metrics.register_event_broadcaster(&broadcaster);
        let log_events = broadcaster.start_logging();
        // The sink writes through a client with a throttle bucket of its own: a burst of events
        // never delays a pod create or a status write (and is not delayed by them).
        let sink_events =
            broadcaster.start_recording_to_sink(EventApiSink::new(self.client.with_own_throttle()));

        let queue_metrics = metrics.with_registry(QueueMetrics::new);
        let mut controllers: Vec<Arc<dyn Controller>> = Vec::new();
        // Every operator is built the same way (see `controllers::registry`): a recorder named
        // after the controller, a named queue (so it has metrics), the shared factory.
        let build_context = BuildContext {
            client: &self.client,
            factory: &factory,
            broadcaster: &broadcaster,
            queue_metrics: &queue_metrics,
            controller_metrics: metrics.controller(),
            clock,
        };
        for name in &cfg.controllers {
            let registration = registry::lookup(name).map_err(|e| ManagerError::Controller {
                name: "manager",
                message: e.to_string(),
            })?;
            let built =
                (registration.build)(&build_context).map_err(|e| ManagerError::Controller {
                    name: registration.name,
                    message: e.to_string(),
                })?;
            controllers.push(built);
        }
        *self.controllers.lock().unwrap_or_else(|p| p.into_inner()) = controllers.clone();

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
        // Every informer the enabled controllers created (and only those): counters and store
        // sizes read by every /metrics scrape, and one readiness line each.
        for informer in factory.informers() {
            metrics.register_reflector(&informer.name, informer.status(), informer.store_len_fn());
            let synced = informer.clone();
            health.add_readiness_check(&format!("informer:{}", informer.name), move || {
                synced.has_synced()
            });
        }
        {
            let handle = self.controllers_handle();
            health.add_readiness_check("informers-synced", move || handle.has_synced());
        }

        // Metrics and probes, each on its own listener (0 = off).
        let servers = CancellationToken::new();
        let _stop_servers_on_drop = servers.clone().drop_guard();
        let mut listeners = Vec::new();
        if let Some(addr) = cfg.metrics_addr {
            let h = serve_metrics(addr, metrics.registry(), servers.clone())
                .await
                .map_err(|source| ManagerError::Bind {
                    what: "the metrics server",
                    addr,
                    source,
                })?;
            tracing::info!(addr = %h.local_addr(), "serving /metrics");
            listeners.push(h);
        }
        if let Some(addr) = cfg.health_addr {
            let h = serve_health(addr, health.clone(), servers.clone())
                .await
                .map_err(|source| ManagerError::Bind {
                    what: "the health probe server",
                    addr,
                    source,
                })?;
            tracing::info!(addr = %h.local_addr(), "serving /healthz and /readyz");
            listeners.push(h);
        }

        let outcome = match &cfg.leader_election {
            None => {
                run_controllers(
                    &controllers,
                    cfg.workers,
                    cfg.shutdown_timeout,
                    shutdown.clone(),
                )
                .await
            }
            Some(le) => {
                self.run_elected(
                    le,
                    &controllers,
                    &metrics,
                    &health,
                    &broadcaster,
                    shutdown.clone(),
                )
                .await
            }
        };

        informers.cancel();
        factory.shutdown().await;
        servers.cancel();
        for l in listeners {
            l.join().await;
        }
        broadcaster.shutdown();
        sink_events.join().await;
        log_events.join().await;
        tracing::info!("stopped");
        outcome
    }

    /// Leader election: the controllers run inside `on_started_leading`; the elector waits for
    /// them to drain before it releases the Lease.
    async fn run_elected(
        &self,
        le: &LeaderElectionConfig,
        controllers: &[Arc<dyn Controller>],
        metrics: &Metrics,
        health: &HealthState,
        broadcaster: &EventBroadcaster,
        shutdown: CancellationToken,
    ) -> Result<(), ManagerError> {
        let lock = LeaseLock::new(self.client.clone(), &le.lease_namespace, &le.lease_name);
        let mut config = ElectionConfig::new(lock, self.identity.clone());
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

/// Writes the recorder's events as core/v1 Events through a [`Client`], each in its own
/// namespace: POST for a new event, strategic-merge PATCH for a repeat.
#[derive(Clone, Debug)]
pub struct EventApiSink {
    client: Client,
}

impl EventApiSink {
    /// A sink writing through `client`.
    pub fn new(client: Client) -> Self {
        EventApiSink { client }
    }

    fn api(&self, event: &Event) -> Api<Event> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }
}

impl EventSink for EventApiSink {
    async fn create(&self, event: &Event) -> client::Result<Event> {
        self.api(event).create(&PostParams::default(), event).await
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> client::Result<Event> {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        self.api(event)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
            )
            .await
    }
}

/// How long the start-up check waits for the API server.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(15);

/// Checks, before anything starts, that the server answers, accepts our credentials and
/// serves the custom resources the selected controllers need. One LIST with `limit=1` per
/// custom resource: it needs only the `list` permission the controller has anyway.
pub async fn preflight(client: &Client, config: &ManagerConfig) -> Result<(), ManagerError> {
    for name in &config.controllers {
        // `config.controllers` was checked against the table by `resolve_controllers`.
        if let Ok(registration) = registry::lookup(name) {
            preflight_crd(registration, client, config).await?;
        }
    }
    Ok(())
}

/// One `LIST ?limit=1` of the operator's custom resource: a 404 means its CRD is not installed.
async fn preflight_crd(
    registration: &Registration,
    client: &Client,
    config: &ManagerConfig,
) -> Result<(), ManagerError> {
    let server = client.server().to_string();
    let list = (registration.list_one)(client, config.namespace.as_deref());
    match tokio::time::timeout(PREFLIGHT_TIMEOUT, list).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.is_not_found() => Err(ManagerError::CrdMissing {
            crd: (registration.crd_name)(),
            server,
        }),
        Ok(Err(e)) if e.is_unauthorized() || e.is_forbidden() => {
            Err(ManagerError::Unauthorized { server, source: e })
        }
        Ok(Err(e)) => Err(ManagerError::Unreachable { server, source: e }),
        Err(_) => Err(ManagerError::Unreachable {
            server,
            source: client::Error::Other(format!(
                "no answer within {}",
                format_duration(PREFLIGHT_TIMEOUT)
            )),
        }),
    }
}

/// How long [`Manager::run`] waits for the priority-and-fairness probe before it goes on with the
/// fallback throttle (the next answer then decides).
const THROTTLE_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// `sample-controller run`: validates the flags, builds the client, checks the server, and runs
/// the manager until SIGINT or SIGTERM.
pub async fn run(options: ManagerOptions) -> Result<(), ManagerError> {
    let in_cluster_ns = read_in_cluster_namespace().await;
    let config = options.validate(in_cluster_ns.as_deref())?;
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
    preflight(&client, &config).await?;

    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(apimachinery::signals::shutdown_on_signal({
        let shutdown = shutdown.clone();
        move || shutdown.cancel()
    }));
    let result = Manager::new(config, client).run(shutdown).await;
    signals.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
    fn defaults_are_the_documented_ones() {
        let opts = parse(&[]).unwrap();
        assert_eq!(opts, ManagerOptions::default());
        let cfg = opts.validate(None).unwrap();
        assert_eq!(cfg.namespace, None);
        assert_eq!(cfg.controllers, KNOWN_CONTROLLERS.to_vec());
        assert_eq!(cfg.workers, 2);
        assert_eq!(cfg.resync_period, Duration::from_secs(600));
        assert_eq!((cfg.qps, cfg.burst), (20.0, 30));
        assert!(cfg.throttle_follows_server);
        assert_eq!(cfg.leader_election, None);
        assert_eq!(cfg.metrics_addr, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(cfg.health_addr, Some("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(cfg.log_format, LogFormat::Text);
        assert_eq!(cfg.shutdown_timeout, Duration::from_secs(30));
    }

    #[test]
    fn an_explicit_throttle_flag_wins_over_the_server() {
        let cfg = |args: &[&str]| parse(args).unwrap().validate(None).unwrap();
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
            assert!(crate::client::transport::Throttle::new(off.qps, off.burst).is_none());
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
            "--workers=8",
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
        let cfg = opts.validate(Some("ignored")).unwrap();
        assert_eq!(cfg.kubeconfig, Some(PathBuf::from("/tmp/k.yaml")));
        assert_eq!(cfg.namespace.as_deref(), Some("cnat"));
        assert_eq!(
            cfg.controllers,
            Vec::<&str>::new()
                .into_iter()
                .chain(["at"])
                .collect::<Vec<_>>()
        );
        assert_eq!(cfg.workers, 8);
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
        let in_pod = opts.validate(Some("sample-controller\n")).unwrap();
        assert_eq!(
            in_pod.leader_election.unwrap().lease_namespace,
            "sample-controller"
        );
        let outside = opts.validate(None).unwrap();
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

    fn invalid(args: &[&str]) -> FlagError {
        parse(args).unwrap().validate(None).unwrap_err()
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
        let v =
            |s: &[&str]| resolve_controllers(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["*"]).unwrap(), KNOWN_CONTROLLERS.to_vec());
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
        assert_eq!(v(&["*", "tdset"]).unwrap(), KNOWN_CONTROLLERS.to_vec());
        assert_eq!(
            v(&["-tdset", "-foo", "-myapp", "-rediscluster", "*"]).unwrap(),
            vec!["at"]
        );
        assert_eq!(
            v(&["foo", "myapp", "rediscluster", "tdset", "at"]).unwrap(),
            KNOWN_CONTROLLERS.to_vec()
        );
        assert_eq!(v(&["foo"]).unwrap(), vec!["foo"]);
    }
}
