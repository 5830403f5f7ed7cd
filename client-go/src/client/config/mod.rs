//! Where the cluster is and who we are: kubeconfig files, in-cluster service accounts and the
//! `--master` override, turned into one [`Config`] (client-go's `rest.Config`).
//!
//! ## Loading rules (clientcmd's, in order)
//!
//! 1. An explicit kubeconfig path (`--kubeconfig`, [`ConfigOptions::kubeconfig`]) wins, and only
//!    that file is read; a missing explicit file is an error.
//! 2. `--master` alone ([`ConfigOptions::master`] without a kubeconfig path) means "this URL and
//!    nothing else": no files are read, no credentials are sent.
//! 3. Otherwise `KUBECONFIG`, a colon-separated list of files, is read and *merged*: for clusters,
//!    users and contexts **the first file that defines a name wins, as a whole** (a later file's
//!    `alice` user is ignored entirely, even fields the first one lacks), and `current-context` is
//!    taken from the first file that sets it. Missing files in the list are skipped.
//! 4. Otherwise `~/.kube/config`.
//! 5. Otherwise the in-cluster service account ([`Config::in_cluster`]).
//!
//! Then a context is picked (`--context`, else `current-context`); it names a cluster (where) and
//! a user (who) and optionally a namespace (the default namespace of every namespaced
//! [`crate::client::Api`] built with `default_namespaced`). `--master` overrides the cluster's
//! server (and clears its `tls-server-name`).
//!
//! Relative paths inside a file (`certificate-authority`, `client-certificate`, `client-key`,
//! `tokenFile`, an exec `command` containing `/`) are resolved against *that file's* directory.
//!
//! ## What a user entry may hold
//!
//! Exactly one way to authenticate: a bearer `token` and/or `tokenFile` (the file is re-read about
//! every minute, so rotated tokens are picked up), `client-certificate(-data)` +
//! `client-key(-data)` (PEM; PKCS#1 RSA, SEC1 EC or PKCS#8 keys), `username` + `password`, or an
//! `exec` credential plugin (see [`crate::client::transport`]). More than one is an error, as in
//! clientcmd's validation. Credentials are applied only when the server URL is `https` (client-go
//! refuses to send them in clear text). `auth-provider` was removed from client-go in 1.26 and is
//! rejected with a hint to use an exec plugin.
//!
//! ## Errors
//!
//! Every problem names the file and the entry (`users["alice"].client-key-data`) and says what was
//! wrong; validation problems of one context are collected into one
//! `invalid configuration: [...]` error, as clientcmd does. Nothing here panics on file content.
//!
//! The functions here do blocking file I/O: call them before starting the runtime or through
//! `tokio::task::spawn_blocking` ([`crate::client::Client::try_default`] does the latter).
//!
//! ## The files
//!
//! | file | what it holds | client-go |
//! |---|---|---|
//! | `mod.rs` | [`Config`] and its parts ([`TlsConfig`], [`Auth`], [`ExecConfig`], [`Secret`]) | `rest.Config` |
//! | `kubeconfig.rs` | the kubeconfig file's model ([`Kubeconfig`] and its entries) and its parsing | `clientcmd/api` |
//! | `loader.rs` | the loading rules above ([`Config::infer`]), merging, and turning a context into a [`Config`] | `clientcmd`'s loader and client config |
//! | `in_cluster.rs` | the pod's service account ([`Config::in_cluster`]) | `rest.InClusterConfig` |

mod in_cluster;
mod kubeconfig;
mod loader;

pub use in_cluster::SERVICE_ACCOUNT_DIR;
pub use kubeconfig::{
    ClusterEntry, ContextEntry, ExecEntry, ExecEnvVar, Kubeconfig, NamedCluster, NamedContext,
    NamedUser, UserEntry,
};
pub use loader::split_kubeconfig_list;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::client::{Error, Result};

/// The default client-side rate: 20 requests per second (kube-controller-manager's setting; bare
/// client-go defaults to 5).
pub const DEFAULT_QPS: f32 = 20.0;
/// The default burst: 30 requests may go out at once before the rate applies.
pub const DEFAULT_BURST: u32 = 30;

/// A string that never shows up in `Debug` output or logs (tokens, passwords, keys).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The secret itself; call only where it is sent.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

/// TLS material for talking to the server.
#[derive(Clone, Default)]
pub struct TlsConfig {
    /// PEM bundle of CA certificates to trust; `None` means the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain (mutual TLS).
    pub client_cert_pem: Option<Vec<u8>>,
    /// PEM private key matching `client_cert_pem`.
    pub client_key_pem: Option<Secret>,
    /// Skip verifying the server's certificate (logged as a warning when used).
    pub insecure_skip_tls_verify: bool,
    /// Verify the server certificate against this name instead of the URL's host.
    pub server_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field(
                "ca_pem",
                &self.ca_pem.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(|_| "<set>"),
            )
            .field("client_key_pem", &self.client_key_pem)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// `interactiveMode` of an exec plugin: may it use our terminal's stdin?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InteractiveMode {
    /// Never give it stdin.
    Never,
    /// Give it stdin when stdin is a terminal.
    IfAvailable,
    /// It needs a terminal; fail if there is none.
    Always,
}

/// An exec credential plugin (`users[].user.exec`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecConfig {
    /// `client.authentication.k8s.io/v1` or `.../v1beta1`.
    pub api_version: String,
    /// The program (absolute, on `PATH`, or resolved against the kubeconfig's directory).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (values may be secret: never logged).
    pub env: Vec<(String, Secret)>,
    /// Printed in the error when the command is not found.
    pub install_hint: Option<String>,
    /// Whether it may read our stdin.
    pub interactive_mode: InteractiveMode,
    /// Pass the cluster (server, CA) in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
}

/// Who we are.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Auth {
    /// Anonymous (or client certificate only, which lives in [`TlsConfig`]).
    #[default]
    None,
    /// `Authorization: Bearer`: a fixed token, a file re-read about every minute, or both (the
    /// token is used until the file is first read).
    Bearer {
        /// The token, if given inline.
        token: Option<Secret>,
        /// The file holding the token.
        file: Option<PathBuf>,
    },
    /// HTTP basic auth.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: Secret,
    },
    /// Run a credential plugin.
    Exec(ExecConfig),
}

/// Everything needed to talk to one API server (client-go's `rest.Config`).
///
/// Its `Debug` output leaves out secrets (tokens, passwords, keys, proxy credentials).
#[derive(Clone)]
pub struct Config {
    /// The server's base URL, e.g. `https://127.0.0.1:6443` (a path prefix is kept).
    pub server: http::Uri,
    /// The namespace of `Api::default_namespaced` (the context's, the pod's, or `default`).
    pub default_namespace: String,
    /// TLS material.
    pub tls: TlsConfig,
    /// Credentials.
    pub auth: Auth,
    /// `proxy-url`: tunnel every connection through this HTTP CONNECT proxy.
    pub proxy_url: Option<http::Uri>,
    /// Client-side sustained request rate (requests per second); 0 or a negative number (client-go
    /// writes `-1`) disables the throttle.
    pub qps: f32,
    /// How many requests may go out at once before `qps` applies.
    pub burst: u32,
    /// Let the server decide: when `true`, `qps`/`burst` are only the fallback for a server that
    /// does not announce API Priority and Fairness. The first answer carrying the APF headers
    /// (`X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID`) turns the
    /// client-side throttle off for the life of the client; the first answer without them keeps
    /// it. `false` (the default, client-go's behaviour): `qps`/`burst` apply as given. See
    /// [`crate::client::transport`] for the history.
    pub follow_server_flow_control: bool,
    /// TCP connect timeout (client-go: 30 s).
    pub connect_timeout: Duration,
    /// Timeout of a whole non-watch request (headers and body, retries included), counted once
    /// the client-side throttle has let it go; `None` = no limit. Watches never get one: the
    /// server ends them after their `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// How many times a request is retried after a `Retry-After` answer or, for a `GET`, a lost
    /// connection (reset, probable EOF, `GOAWAY`); client-go's `maxRetries`, 10. Connection
    /// refused is never retried.
    pub max_retries: u32,
    /// `User-Agent` header.
    pub user_agent: String,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proxy = self.proxy_url.as_ref().map(|p| {
            format!(
                "{}://{}:{}",
                p.scheme_str().unwrap_or("http"),
                p.host().unwrap_or(""),
                p.port_u16().unwrap_or(80)
            )
        });
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("default_namespace", &self.default_namespace)
            .field("tls", &self.tls)
            .field("auth", &self.auth)
            .field("proxy_url", &proxy)
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .field(
                "follow_server_flow_control",
                &self.follow_server_flow_control,
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("user_agent", &self.user_agent)
            .finish()
    }
}

/// The default user agent: `sample-controller/<version> (<os>/<arch>)`.
pub fn default_user_agent() -> String {
    format!(
        "sample-controller/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        go_arch()
    )
}

/// Go's names for architectures, so the agent reads like client-go's (`linux/amd64`).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

impl Config {
    /// A config for `server` with defaults: no TLS material (system roots), no credentials,
    /// namespace `default`, qps 20, burst 30 (not following the server), 30 s connect timeout, 60 s request timeout, 10
    /// retries.
    pub fn new(server: http::Uri) -> Self {
        Config {
            server,
            default_namespace: "default".into(),
            tls: TlsConfig::default(),
            auth: Auth::None,
            proxy_url: None,
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            follow_server_flow_control: false,
            connect_timeout: Duration::from_secs(30),
            timeout: Some(Duration::from_secs(60)),
            max_retries: 10,
            user_agent: default_user_agent(),
        }
    }

    /// Parses a server URL (`--master`, `cluster.server`): scheme http/https and a host are
    /// required; query and fragment are dropped.
    pub fn parse_server(server: &str) -> Result<http::Uri> {
        let trimmed = server.trim();
        let uri: http::Uri = trimmed
            .parse()
            .map_err(|e| Error::Config(format!("server URL {trimmed:?} is not a URL: {e}")))?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => {
                return Err(Error::Config(format!(
                    "server URL {trimmed:?} must start with https:// or http://"
                )));
            }
        }
        let Some(authority) = uri.authority().cloned() else {
            return Err(Error::Config(format!("server URL {trimmed:?} has no host")));
        };
        let path = uri.path().trim_end_matches('/');
        let mut parts = http::uri::Parts::default();
        parts.scheme = uri.scheme().cloned();
        parts.authority = Some(authority);
        parts.path_and_query = Some(
            (if path.is_empty() { "/" } else { path })
                .parse()
                .map_err(|e| Error::Config(format!("server URL {trimmed:?}: bad path: {e}")))?,
        );
        http::Uri::from_parts(parts)
            .map_err(|e| Error::Config(format!("server URL {trimmed:?}: {e}")))
    }

    /// Whether the server URL is `https`.
    pub fn is_https(&self) -> bool {
        self.server.scheme_str() == Some("https")
    }
}

/// Command-line choices that steer [`Config::infer`] (sample-controller's `-kubeconfig` and
/// `-master`, kubectl's `--context`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigOptions {
    /// An explicit kubeconfig file; only it is read.
    pub kubeconfig: Option<PathBuf>,
    /// The context to use instead of `current-context`.
    pub context: Option<String>,
    /// The server URL, overriding the kubeconfig's (alone: "this URL, no kubeconfig").
    pub master: Option<String>,
}

/// Whether `pem` holds at least one certificate that parses (a CA bundle worth using).
fn pem_has_certificate(pem: &[u8]) -> bool {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem).any(|c| c.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KC: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/prefix/?x=1
    insecure-skip-tls-verify: true
    tls-server-name: api.internal
users:
- name: alice
  user:
    token: s3cr3t
- name: bob
  user:
    username: bob
    password: pw
contexts:
- name: dev
  context: {cluster: c1, user: alice, namespace: team-a}
- name: basic
  context: {cluster: c1, user: bob}
"#;

    #[test]
    fn builds_config_of_current_and_named_context() {
        let c = Config::from_kubeconfig_yaml(KC, None).unwrap();
        assert_eq!(c.server.to_string(), "https://10.0.0.1:6443/prefix");
        assert_eq!(c.default_namespace, "team-a");
        assert!(c.tls.insecure_skip_tls_verify);
        assert_eq!(c.tls.server_name.as_deref(), Some("api.internal"));
        assert_eq!(
            c.auth,
            Auth::Bearer {
                token: Some("s3cr3t".into()),
                file: None
            }
        );
        assert!(!format!("{c:?}").contains("s3cr3t"), "Debug must redact");
        let mut p = c.clone();
        p.proxy_url = Some("http://user:pw@proxy:3128".parse().unwrap());
        let dbg = format!("{p:?}");
        assert!(dbg.contains("proxy:3128") && !dbg.contains("pw"), "{dbg}");
        let c = Config::from_kubeconfig_yaml(KC, Some("basic")).unwrap();
        assert_eq!(c.default_namespace, "default");
        assert!(matches!(c.auth, Auth::Basic { ref username, .. } if username == "bob"));
    }

    #[test]
    fn unknown_context_is_named() {
        let e = Config::from_kubeconfig_yaml(KC, Some("prod"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"prod\" does not exist"), "{e}");
        assert!(e.contains("\"dev\""), "{e}");
    }

    #[test]
    fn server_url_validation() {
        assert!(Config::parse_server("ftp://x").is_err());
        assert!(Config::parse_server("not a url").is_err());
        assert_eq!(
            Config::parse_server("http://127.0.0.1:8080")
                .unwrap()
                .to_string(),
            "http://127.0.0.1:8080/"
        );
    }

    #[test]
    fn kubeconfig_list_splits_and_dedupes() {
        let v = split_kubeconfig_list("/a::/b:/a");
        assert_eq!(v, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
    }

    #[test]
    fn user_agent_names_os_and_arch() {
        let ua = default_user_agent();
        assert!(ua.starts_with("sample-controller/"));
        assert!(ua.contains(std::env::consts::OS));
    }
}
