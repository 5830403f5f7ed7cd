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
//! stays); `--pod-run-time 0s` makes one-shot pods finish at once. Faults can be injected with
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
    /// Keep objects, resourceVersions and the watch history in this directory, so a restart
    /// resumes where it stopped (default: memory only).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the CA and serving certificate in this directory (kube-apiserver's flag), so
    /// clients keep verifying the server across restarts (default: a new CA every start).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// How long a resourceVersion stays usable for watches and continue tokens (etcd's
    /// compaction interval).
    #[arg(long, default_value = "5m", value_parser = super::background::parse_duration)]
    pub history_max_age: Duration,
    /// The most bytes of watch history kept in memory (bytes, or with a Ki/Mi/Gi suffix).
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes)]
    pub history_max_bytes: usize,
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

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(args: ApiServerArgs) -> Result<(), StartError> {
    let mut builder = ApiServer::builder()
        .listen(args.listen)
        .plain_http(args.plain_http)
        .simulate(args.simulate)
        .pod_run_time(args.pod_run_time);
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
    builder = builder
        .history_max_age(args.history_max_age)
        .history_max_bytes(args.history_max_bytes);
    if let Some(dir) = &args.data_dir {
        builder = builder.data_dir(dir);
    }
    if let Some(dir) = &args.cert_dir {
        builder = builder.cert_dir(dir);
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

#[cfg(test)]
mod tests {
    #[test]
    fn byte_counts_take_binary_suffixes_and_refuse_garbage() {
        assert_eq!(super::parse_bytes("256Mi"), Ok(256 << 20));
        assert_eq!(super::parse_bytes("1024"), Ok(1024));
        assert_eq!(super::parse_bytes("2Ki"), Ok(2048));
        assert!(super::parse_bytes("12MB").unwrap_err().contains("\"12MB\""));
    }
}
