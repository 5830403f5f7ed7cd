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
//! box: the garbage collector, the simulated node ([`super::kubelet`]) and the simulated
//! workload controllers run, so pods reach `Running` and `Succeeded`/`Failed` on their own.
//! `--simulate=false` turns the node and the workload controllers off (the garbage collector
//! stays); `--pod-run-time 0s` makes one-shot pods finish at once. `--node-runtime process`
//! runs each container's command on this host instead ([`super::runtime`], with its safety
//! rules), so `kubectl logs` shows what the command printed. Faults can be injected with
//! the bootstrap token at `POST /admin/faults` ([`super::faults::admin`]):
//!
//! ```text
//! curl -k -H "Authorization: Bearer $TOKEN" -X POST https://127.0.0.1:6443/admin/faults \
//!      -d '{"action":"fail","code":503,"verb":"list","resource":"ats","count":3}'
//! ```
//!
//! To see a controller run under its own, least-privilege identity, give it a token and turn
//! RBAC on: `--token-auth-file tokens.csv` (kube-apiserver's format, e.g.
//! `ctrl-token,system:serviceaccount:cnat:cnat,1`), `--manifests artifacts/deploy/` (the
//! Namespace, ServiceAccount, ClusterRole and bindings) and `--enforce-rbac`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{ApiServer, StartError};

/// Options of the `apiserver` subcommand.
#[derive(Clone, Debug, clap::Args)]
pub struct ApiServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Write a kubeconfig for this server (CA data and token included) to this path.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
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
    /// `process` (runs each container's command on this host as a child process; see the
    /// `runtime` module's safety notes: refused on a non-loopback address without
    /// `--enforce-rbac`).
    #[arg(long, value_enum, default_value_t = super::runtime::NodeRuntime::Simulated)]
    pub node_runtime: super::runtime::NodeRuntime,
    /// Process runtime: at most this many pods run at once.
    #[arg(long, default_value_t = super::runtime::DEFAULT_MAX_PODS)]
    pub node_runtime_max_pods: usize,
    /// Process runtime: the longest any pod may run (`30s`, `5m`), like an
    /// `activeDeadlineSeconds` on every pod.
    #[arg(long, value_parser = super::background::parse_duration)]
    pub node_runtime_timeout: Option<Duration>,
    /// Bytes of output kept per container for `kubectl logs` (the oldest lines go first).
    #[arg(long, default_value_t = super::logs::DEFAULT_LOG_BYTES)]
    pub pod_log_bytes: usize,
    /// How long a simulated one-shot container runs (`1s`, `250ms`, `0s`).
    #[arg(long, default_value = "1s", value_parser = super::background::parse_duration)]
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
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(args: ApiServerArgs) -> Result<(), StartError> {
    let mut builder = ApiServer::builder()
        .listen(args.listen)
        .plain_http(args.plain_http)
        .simulate(args.simulate)
        .pod_run_time(args.pod_run_time)
        .node_runtime(args.node_runtime)
        .node_runtime_max_pods(args.node_runtime_max_pods)
        .node_runtime_timeout(args.node_runtime_timeout)
        .pod_log_bytes(args.pod_log_bytes);
    if let Some(t) = args.token {
        builder = builder.token(t);
    }
    if let Some(p) = &args.kubeconfig_out {
        builder = builder.kubeconfig_path(p);
    }
    if let Some(path) = &args.token_auth_file {
        let bad = |message: String| StartError::TokenFile {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        for t in super::rbac::parse_token_auth_file(&text).map_err(bad)? {
            let groups: Vec<&str> = t.groups.iter().map(String::as_str).collect();
            builder = builder
                .extra_token(t.token, t.user.clone())
                .user_groups(t.user, &groups);
        }
    }
    builder = builder.enforce_rbac(args.enforce_rbac);
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
                return Err(e.into());
            }
        }
    }
    wait_for_signal().await;
    println!("shutting down");
    server.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
