//! `sample-controller apiserver`: the embedded server as a standalone process.
//!
//! ```text
//! sample-controller apiserver --kubeconfig-out k.yaml
//! kubectl --kubeconfig k.yaml apply -f artifacts/crds/
//! kubectl --kubeconfig k.yaml get ats
//! ```
//!
//! It prints its URL (and where the kubeconfig went), then serves until SIGINT or SIGTERM, when
//! it ends every watch and connection and exits. The default listen address is the one a
//! kube-apiserver uses, `127.0.0.1:6443`; pass `--listen 127.0.0.1:0` for a free port.
//!
//! Unlike the library default, the standalone server behaves like a small cluster out of the
//! box: the garbage collector, the simulated node ([`embedded_node::NodeRuntime::Simulated`]) and the simulated
//! workload controllers run, so pods reach `Running` and `Succeeded`/`Failed` on their own.
//! `--simulate=false` turns the node and the workload controllers off (the garbage collector
//! stays); `--pod-run-time 0s` makes one-shot pods finish at once. `--node-runtime process`
//! runs each container's command on this host instead ([`embedded_node::NodeRuntime::Process`], with its safety
//! rules), so `kubectl logs` shows what the command printed; `--image-binary IMAGE=PATH`
//! (repeatable) runs the host binary PATH where a container of image IMAGE has no `command`,
//! as that image's entrypoint, with the pod's ServiceAccount token, so a Deployment or Helm
//! chart whose pods run IMAGE runs the built binary as those pods
//! ([`crate::ClusterBuilder::image_binary`]). Faults can be injected with
//! the bootstrap token at `POST /admin/faults` ([`embedded_apiserver::faults::admin`]):
//!
//! ```text
//! curl -k -H "Authorization: Bearer $TOKEN" -X POST https://127.0.0.1:6443/admin/faults \
//!      -d '{"action":"fail","code":503,"verb":"list","resource":"ats","count":3}'
//! ```
//!
//! To see a controller run under its own, least-privilege identity, give it a token and turn
//! RBAC on: `--token-auth-file tokens.csv` (kube-apiserver's format, e.g.
//! `ctrl-token,system:serviceaccount:cnat:cnat,1`), `--manifests artifacts/deploy/base/` (the
//! Namespace, ServiceAccount, ClusterRole and bindings) and `--enforce-rbac`.
//!
//! ## Connections
//!
//! Like kube-apiserver, the server bounds what connections may cost
//! ([`apimachinery::serving`]): `--max-connections` (default 10000; more are closed on accept),
//! `--header-read-timeout` (32s to finish the TLS handshake and send request headers),
//! `--idle-timeout` (90s keep-alive) and `--http2-max-streams-per-connection` (250).
//!
//! ## Safe defaults
//!
//! With `--plain-http` a request without a token is the bootstrap user, a member of
//! `system:masters`: it can read secrets, rewrite RBAC and inject faults. That is fine on a
//! loopback address (only this machine can connect) and dangerous anywhere else, so
//! `--plain-http` with a non-loopback `--listen` (`0.0.0.0`, `::`, a LAN address) is refused at
//! start unless `--insecure-allow-anonymous-admin-on-network` is given, and whenever the server
//! is reachable from the network without authentication it prints a `WARNING:` line to stderr
//! at start. HTTPS always requires a token ([`check_exposure`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Cluster, StartError};
use embedded_apiserver::StartError as ServerError;
use futures_util::future::BoxFuture;

/// Which runtime the node uses (`--node-runtime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeRuntimeArg {
    /// Decide each pod's outcome from its command's text; run nothing (the simulated kubelet).
    #[default]
    Simulated,
    /// Run each container's command as a child process of the server.
    Process,
}

impl From<NodeRuntimeArg> for embedded_node::NodeRuntime {
    fn from(arg: NodeRuntimeArg) -> Self {
        match arg {
            NodeRuntimeArg::Simulated => embedded_node::NodeRuntime::Simulated,
            NodeRuntimeArg::Process => embedded_node::NodeRuntime::Process,
        }
    }
}

/// Options of the `apiserver` subcommand.
#[derive(Clone, Debug, clap::Args)]
pub struct ApiServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Write a kubeconfig for this server (CA data and token included) to this path.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Make the kubeconfig of --kubeconfig-out authenticate with a client certificate for
    /// USER (its common name), in GROUP (its organization) if given, signed by the server's
    /// client CA, as kind's does (`kubernetes-admin/system:masters`).
    #[arg(long, value_name = "USER[/GROUP]")]
    pub kubeconfig_client_cert: Option<String>,
    /// Also accept client certificates signed by the CA(s) in this PEM file (besides the
    /// server's own client CA), as kube-apiserver's --client-ca-file.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve plain HTTP instead of HTTPS. Like kube-apiserver's old insecure port, requests
    /// without a token are then the bootstrap user (clients send no credentials over http).
    #[arg(long)]
    pub plain_http: bool,
    /// Bearer token to accept (default: random).
    #[arg(long, env = "SAMPLE_CONTROLLER_APISERVER_TOKEN")]
    pub token: Option<String>,
    /// Run the simulated node and workload controllers (`--simulate=false` turns them off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub simulate: bool,
    /// Which node runs pods: `simulated` (decides outcomes from the command's text) or
    /// `process` (runs each container's command on this host as a child process, with the
    /// server's own privileges: refused on a non-loopback address without `--enforce-rbac`).
    #[arg(long, value_enum, default_value_t = NodeRuntimeArg::Simulated)]
    pub node_runtime: NodeRuntimeArg,
    /// Process runtime: run the host binary PATH for containers whose image is exactly IMAGE
    /// and that have no `command`, as the image's entrypoint (PATH followed by the container's
    /// `args`), with the pod's ServiceAccount token and `KUBERNETES_SERVICE_HOST`/`_PORT`
    /// (repeatable), e.g. `--image-binary sample-controller:dev=target/debug/sample-controller`.
    #[arg(long = "image-binary", value_name = "IMAGE=PATH", value_parser = parse_image_binary)]
    pub image_binaries: Vec<(String, PathBuf)>,
    /// Process runtime: at most this many pods run at once.
    #[arg(long, default_value_t = embedded_node::DEFAULT_MAX_PODS)]
    pub node_runtime_max_pods: usize,
    /// Process runtime: the longest any pod may run (`30s`, `5m`), like an
    /// `activeDeadlineSeconds` on every pod.
    #[arg(long, value_parser = apimachinery::duration::parse)]
    pub node_runtime_timeout: Option<Duration>,
    /// Bytes of output kept per container for `kubectl logs` (the oldest lines go first).
    #[arg(long, default_value_t = embedded_node::DEFAULT_LOG_BYTES)]
    pub pod_log_bytes: usize,
    /// Keep objects nobody has read for `--rest-unread-after` as their JSON bytes instead of
    /// decoded trees: after a burst of writes the RSS grows by about 1.5 times the live JSON
    /// instead of 14 (see `embedded_apiserver::stored`; on by default for this long-running
    /// server, `--rest-unread-objects=false` keeps every object a tree).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rest_unread_objects: bool,
    /// How long an object goes unread before it rests (`30s`, `5m`): it rests between two and
    /// three thirds of this after its last read. Shorter saves memory sooner for more CPU
    /// under writes.
    #[arg(long, default_value = "30s", value_parser = apimachinery::duration::parse)]
    pub rest_unread_after: Duration,
    /// How long an event is kept after its last write (kube-apiserver's flag and default);
    /// `0s` keeps events until they are deleted.
    #[arg(long, default_value = "1h", value_parser = apimachinery::duration::parse)]
    pub event_ttl: Duration,
    /// How long a simulated one-shot container runs (`1s`, `250ms`, `0s`).
    #[arg(long, default_value = "1s", value_parser = apimachinery::duration::parse)]
    pub pod_run_time: Duration,
    /// More bearer tokens, in kube-apiserver's format: `token,user,uid[,"group1,group2"]`.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Enforce RBAC (Roles and bindings stored in the server); the bootstrap token stays
    /// all-powerful.
    #[arg(long)]
    pub enforce_rbac: bool,
    /// YAML files or directories of objects to create at start (RBAC, namespaces, CRDs, ...).
    #[arg(long)]
    pub manifests: Vec<PathBuf>,
    /// Allow `--plain-http` on a non-loopback address, where anyone who can reach the port is
    /// the all-powerful bootstrap user (secrets, RBAC, fault injection). Never on a shared
    /// network.
    #[arg(long)]
    pub insecure_allow_anonymous_admin_on_network: bool,
    /// API Priority and Fairness (`--enable-priority-and-fairness=false` keeps only the two
    /// max-in-flight limits).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,
    /// Seats for read-only requests (with APF: part of the seats all priority levels share).
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Seats for mutating requests (with APF: the rest of the shared seats).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,
    /// Keep objects, resourceVersions and the watch history in this directory, so a restart
    /// resumes where it stopped, and the server's identity (CA, certificates, admin token)
    /// unless --cert-dir is given, so kubeconfigs keep working (default: memory only).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the CA and serving certificate in this directory (kube-apiserver's flag), so
    /// clients keep verifying the server across restarts (default: the --data-dir when given,
    /// else a new CA every start).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// How long a resourceVersion stays usable for watches and continue tokens (etcd's
    /// compaction interval).
    #[arg(long, default_value = "5m", value_parser = apimachinery::duration::parse)]
    pub history_max_age: Duration,
    /// The most bytes of watch history kept in memory (bytes, or with a Ki/Mi/Gi suffix).
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes)]
    pub history_max_bytes: usize,
    /// Where admission webhooks reach a Service: `NAMESPACE/NAME=HOST:PORT` (repeatable). A
    /// webhook whose `clientConfig.service` names `NAMESPACE/NAME` is dialled at HOST:PORT
    /// and must present a certificate for `NAME.NAMESPACE.svc`.
    #[arg(long = "service-endpoint", value_name = "NAMESPACE/NAME=HOST:PORT", value_parser = parse_service_endpoint)]
    pub service_endpoints: Vec<(String, String)>,
    /// Connection limits: `--max-connections`, `--header-read-timeout`, `--idle-timeout`,
    /// `--http2-max-streams-per-connection` ([`apimachinery::serving::ServingFlags`]).
    #[command(flatten)]
    pub serving: apimachinery::serving::ServingFlags,
}

/// `NAMESPACE/NAME=HOST:PORT` as its two halves.
pub fn parse_service_endpoint(s: &str) -> Result<(String, String), String> {
    let bad =
        || format!("{s:?} is not NAMESPACE/NAME=HOST:PORT (e.g. cnat/webhook=127.0.0.1:9443)");
    let (svc, addr) = s.split_once('=').ok_or_else(bad)?;
    let (ns, name) = svc.split_once('/').ok_or_else(bad)?;
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    for (what, v) in [("namespace", ns), ("name", name)] {
        if let Some(m) = apimachinery::validation::is_dns1123_label(v).first() {
            return Err(format!("{s:?}: service {what} {v:?}: {m}"));
        }
    }
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok((svc.to_owned(), addr.to_owned()))
}

/// `IMAGE=PATH` as its two halves. The path is made absolute (against the current directory),
/// since the pods' processes run elsewhere.
pub fn parse_image_binary(s: &str) -> Result<(String, PathBuf), String> {
    let bad = || {
        format!(
            "{s:?} is not IMAGE=PATH (e.g. sample-controller:dev=/usr/local/bin/sample-controller)"
        )
    };
    let (image, path) = s.split_once('=').ok_or_else(bad)?;
    if image.is_empty() || path.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    let path = std::path::absolute(path).map_err(|e| format!("{s:?}: {e}"))?;
    Ok((image.to_owned(), path))
}

/// The start-time exposure check: `Err` (the refusal's text) for anonymous admin on a network
/// address without the opt-in, `Ok(Some(warning))` when the server will be reachable from the
/// network without authentication, `Ok(None)` otherwise.
pub fn check_exposure(args: &ApiServerArgs) -> Result<Option<String>, String> {
    if !args.plain_http || args.listen.ip().is_loopback() {
        return Ok(None);
    }
    if !args.insecure_allow_anonymous_admin_on_network {
        return Err(format!(
            "refusing to serve plain HTTP on {}: every request without a token would be the \
             bootstrap admin (system:masters) for anyone who can reach this address. Listen on \
             a loopback address (--listen 127.0.0.1:PORT), drop --plain-http (HTTPS requires \
             the token), or pass --insecure-allow-anonymous-admin-on-network to accept the risk",
            args.listen
        ));
    }
    Ok(Some(format!(
        "WARNING: serving plain HTTP on {} without authentication: anyone who can reach this \
         address is the bootstrap admin (system:masters), including secrets, RBAC and \
         /admin/faults (--insecure-allow-anonymous-admin-on-network)",
        args.listen
    )))
}

/// `1048576`, `512Ki`, `256Mi`, `1Gi` as a byte count.
fn parse_bytes(s: &str) -> Result<usize, String> {
    let (digits, shift) = match s {
        _ if s.ends_with("Ki") => (&s[..s.len() - 2], 10),
        _ if s.ends_with("Mi") => (&s[..s.len() - 2], 20),
        _ if s.ends_with("Gi") => (&s[..s.len() - 2], 30),
        _ => (s, 0),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count like 268435456 or 256Mi"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Runs the server until SIGINT or SIGTERM. The future is boxed for the reason
/// [`ApiServerBuilder::start`](crate::ApiServerBuilder::start) gives: the server is compiled in
/// this crate, not again in the binary that awaits it.
pub fn run(args: ApiServerArgs) -> BoxFuture<'static, Result<(), StartError>> {
    Box::pin(run_until_signal(args))
}

async fn run_until_signal(args: ApiServerArgs) -> Result<(), StartError> {
    if let Some(warning) = check_exposure(&args).map_err(ServerError::Unsafe)? {
        eprintln!("{warning}");
    }
    let mut builder = Cluster::builder()
        .listen(args.listen)
        .plain_http(args.plain_http)
        .simulate(args.simulate)
        .root_ca_publisher(true)
        .pod_run_time(args.pod_run_time)
        .node_runtime(args.node_runtime.into())
        .node_runtime_max_pods(args.node_runtime_max_pods)
        .node_runtime_timeout(args.node_runtime_timeout)
        .pod_log_bytes(args.pod_log_bytes)
        .rest_unread_objects(args.rest_unread_objects)
        .rest_unread_after(args.rest_unread_after)
        .event_ttl(args.event_ttl);
    // The binary's way of handing freed memory back (`apimachinery::serving`), after bursts of
    // writes too.
    if let Some(release) = apimachinery::serving::memory_release() {
        builder = builder.memory_release(release);
    }
    for (image, path) in &args.image_binaries {
        builder = builder.image_binary(image, path);
    }
    if let Some(t) = args.token {
        builder = builder.token(t);
    }
    if let Some(p) = &args.kubeconfig_out {
        builder = builder.kubeconfig_path(p);
    }
    if let Some(spec) = &args.kubeconfig_client_cert {
        let (user, group) = match spec.split_once('/') {
            Some((u, g)) => (u, Some(g)),
            None => (spec.as_str(), None),
        };
        builder = builder.kubeconfig_client_cert(user, group);
    }
    if let Some(path) = &args.client_ca_file {
        let pem = std::fs::read_to_string(path).map_err(|e| {
            ServerError::Tls(embedded_apiserver::TlsError::new(format!(
                "--client-ca-file {}: {e}",
                path.display()
            )))
        })?;
        builder = builder.client_ca_pem(pem);
    }
    if let Some(path) = &args.token_auth_file {
        let bad = |message: String| ServerError::TokenFile {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        for t in embedded_apiserver::parse_token_auth_file(&text).map_err(bad)? {
            let groups: Vec<&str> = t.groups.iter().map(String::as_str).collect();
            builder = builder
                .extra_token(t.token, t.user.clone())
                .user_groups(t.user, &groups);
        }
    }
    builder = builder
        .enforce_rbac(args.enforce_rbac)
        .priority_and_fairness(args.enable_priority_and_fairness)
        .max_requests_inflight(args.max_requests_inflight)
        .max_mutating_requests_inflight(args.max_mutating_requests_inflight);
    builder = builder
        .history_max_age(args.history_max_age)
        .history_max_bytes(args.history_max_bytes)
        .serving_limits(
            args.serving
                .apply(embedded_apiserver::ServingLimits::default()),
        );
    if let Some(dir) = &args.data_dir {
        builder = builder.data_dir(dir);
    }
    if let Some(dir) = &args.cert_dir {
        builder = builder.cert_dir(dir);
    }
    // Listen for SIGINT/SIGTERM before announcing the URL: whoever reads it may signal at once.
    let stop = apimachinery::signals::wait_for_signal();
    for (svc, addr) in &args.service_endpoints {
        builder = builder.service_endpoint(svc, addr);
    }
    let server = builder.start().await?;
    println!("API server listening at {}", server.url());
    if let Some(p) = &args.kubeconfig_out {
        println!(
            "kubeconfig written to {} (try: kubectl --kubeconfig {} get namespaces)",
            p.display(),
            p.display()
        );
    }
    for path in &args.manifests {
        match server.load_manifest_path(path) {
            Ok(loaded) => println!("loaded {} objects from {}", loaded.len(), path.display()),
            Err(e) => {
                server.shutdown().await;
                return Err(ServerError::from(e).into());
            }
        }
    }
    stop.await;
    println!("shutting down");
    server.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ApiServerArgs,
    }

    fn args(flags: &[&str]) -> ApiServerArgs {
        let mut argv = vec!["apiserver"];
        argv.extend_from_slice(flags);
        Cli::parse_from(argv).args
    }

    #[test]
    fn service_endpoints_repeat_and_bad_ones_are_named() {
        let a = args(&[
            "--service-endpoint",
            "cnat/webhook=127.0.0.1:9443",
            "--service-endpoint",
            "other/hook=localhost:8443",
        ]);
        assert_eq!(
            a.service_endpoints,
            vec![
                ("cnat/webhook".to_owned(), "127.0.0.1:9443".to_owned()),
                ("other/hook".to_owned(), "localhost:8443".to_owned())
            ]
        );
        for bad in [
            "cnat/webhook",
            "webhook=127.0.0.1:9443",
            "cnat/webhook=127.0.0.1",
            "Cnat/w=h:1",
        ] {
            let e = parse_service_endpoint(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn image_binaries_repeat_become_absolute_and_bad_ones_are_named() {
        let a = args(&[
            "--image-binary",
            "sample-controller:dev=/bin/true",
            "--image-binary",
            "other=rel/bin",
        ]);
        assert_eq!(
            a.image_binaries[0],
            (
                "sample-controller:dev".to_owned(),
                PathBuf::from("/bin/true")
            )
        );
        assert_eq!(a.image_binaries[1].0, "other");
        assert!(a.image_binaries[1].1.is_absolute());
        assert!(a.image_binaries[1].1.ends_with("rel/bin"));
        for bad in ["noequals", "=path", "image=", "two words=/bin/true"] {
            let e = parse_image_binary(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn unread_objects_rest_after_thirty_seconds_by_default() {
        let a = args(&[]);
        assert!(a.rest_unread_objects);
        assert_eq!(a.rest_unread_after, Duration::from_secs(30));
        assert!(args(&["--rest-unread-objects"]).rest_unread_objects);
        assert!(!args(&["--rest-unread-objects=false"]).rest_unread_objects);
        assert_eq!(
            args(&["--rest-unread-after", "5m"]).rest_unread_after,
            Duration::from_secs(300)
        );
        let e = Cli::try_parse_from(["apiserver", "--rest-unread-after", "soon"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("--rest-unread-after"), "{e}");
    }

    #[test]
    fn anonymous_admin_is_refused_on_network_addresses_unless_opted_in() {
        assert_eq!(check_exposure(&args(&[])), Ok(None));
        assert_eq!(check_exposure(&args(&["--plain-http"])), Ok(None));
        assert_eq!(
            check_exposure(&args(&["--plain-http", "--listen", "[::1]:8080"])),
            Ok(None)
        );
        // HTTPS needs a token wherever it listens.
        assert_eq!(
            check_exposure(&args(&["--listen", "0.0.0.0:6443"])),
            Ok(None)
        );
        for addr in ["0.0.0.0:8080", "[::]:8080", "192.168.1.10:8080"] {
            let e = check_exposure(&args(&["--plain-http", "--listen", addr])).unwrap_err();
            assert!(e.starts_with("refusing to serve plain HTTP on "), "{e}");
            assert!(e.contains("--insecure-allow-anonymous-admin-on-network"));
            let w = check_exposure(&args(&[
                "--plain-http",
                "--listen",
                addr,
                "--insecure-allow-anonymous-admin-on-network",
            ]))
            .unwrap()
            .unwrap();
            assert!(w.starts_with("WARNING: serving plain HTTP on "), "{w}");
        }
    }
}

#[cfg(test)]
mod serving_flag_tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::ApiServerArgs,
    }

    #[test]
    fn connection_flags_reach_the_servers_limits() {
        let cli = Cli::try_parse_from([
            "apiserver",
            "--max-connections",
            "100",
            "--idle-timeout",
            "5s",
        ])
        .unwrap();
        let limits = cli
            .args
            .serving
            .apply(embedded_apiserver::ServingLimits::default());
        assert_eq!(limits.max_connections, 100);
        assert_eq!(limits.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(
            limits.header_read_timeout,
            embedded_apiserver::ServingLimits::default().header_read_timeout
        );
        let e = Cli::try_parse_from(["apiserver", "--max-connections", "0"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--max-connections"), "{e}");
    }
}

#[cfg(test)]
mod byte_count_tests {
    #[test]
    fn byte_counts_take_binary_suffixes_and_refuse_garbage() {
        assert_eq!(super::parse_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(super::parse_bytes("1024"), Ok(1024));
        assert_eq!(super::parse_bytes("2Ki"), Ok(2048));
        assert!(super::parse_bytes("12MB").unwrap_err().contains("\"12MB\""));
    }
}
