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

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;

use crate::client::{Error, Result};

/// Where the service-account files are mounted in a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

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

    /// Applies the loading rules described in the module doc, reading the process environment.
    pub fn infer(opts: &ConfigOptions) -> Result<Config> {
        Self::infer_with(
            opts,
            &|k| std::env::var(k).ok(),
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    /// [`Config::infer`] with the environment and the service-account directory given
    /// explicitly (tests use this).
    pub fn infer_with(
        opts: &ConfigOptions,
        env: &dyn Fn(&str) -> Option<String>,
        service_account_dir: &Path,
    ) -> Result<Config> {
        if let Some(path) = &opts.kubeconfig {
            let kc = Kubeconfig::read(path)?;
            return kc.to_config(opts.context.as_deref(), opts.master.as_deref());
        }
        if let Some(master) = &opts.master {
            return Ok(Config::new(Self::parse_server(master)?));
        }
        if let Some(list) = env("KUBECONFIG").filter(|s| !s.trim().is_empty()) {
            let paths = split_kubeconfig_list(&list);
            let kc = Kubeconfig::read_merged(&paths)?;
            match kc {
                Some(kc) => return kc.to_config(opts.context.as_deref(), None),
                None => tracing::warn!(
                    kubeconfig = %list,
                    "none of the files in KUBECONFIG exist; trying the in-cluster configuration"
                ),
            }
        } else if let Some(home) = env("HOME").filter(|h| !h.is_empty()) {
            let path = Path::new(&home).join(".kube").join("config");
            if path.is_file() {
                let kc = Kubeconfig::read(&path)?;
                return kc.to_config(opts.context.as_deref(), None);
            }
        }
        Self::in_cluster_from(service_account_dir, env).map_err(|e| {
            let why = match e {
                Error::Config(message) => message,
                other => other.to_string(),
            };
            Error::Config(format!(
                "no kubeconfig found (no --kubeconfig, KUBECONFIG or ~/.kube/config) and {why}"
            ))
        })
    }

    /// Parses one kubeconfig document and builds the config of `context` (or its
    /// `current-context`). Relative paths resolve against the current directory.
    pub fn from_kubeconfig_yaml(yaml: &str, context: Option<&str>) -> Result<Config> {
        let kc = Kubeconfig::parse(yaml, "<inline kubeconfig>", Path::new("."))?;
        kc.to_config(context, None)
    }

    /// The in-cluster config: `KUBERNETES_SERVICE_HOST`/`_PORT` and the mounted service account.
    pub fn in_cluster() -> Result<Config> {
        Self::in_cluster_from(Path::new(SERVICE_ACCOUNT_DIR), &|k| std::env::var(k).ok())
    }

    /// [`Config::in_cluster`] reading the service-account files from `dir` and variables from
    /// `env`.
    ///
    /// As `rest.InClusterConfig`: both variables are required; the token file must be readable
    /// (it is also kept as a token file, so rotations are picked up); a CA that does not parse is
    /// logged and ignored; the namespace is `POD_NAMESPACE`, else the `namespace` file, else
    /// `default`.
    pub fn in_cluster_from(dir: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let host = env("KUBERNETES_SERVICE_HOST").filter(|s| !s.is_empty());
        let port = env("KUBERNETES_SERVICE_PORT").filter(|s| !s.is_empty());
        let (Some(host), Some(port)) = (host, port) else {
            return Err(Error::Config(
                "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and \
                 KUBERNETES_SERVICE_PORT must be defined"
                    .into(),
            ));
        };
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let server = Self::parse_server(&format!("https://{host}:{port}"))?;
        let token_path = dir.join("token");
        let token = std::fs::read_to_string(&token_path).map_err(|e| {
            Error::Config(format!(
                "in-cluster: reading service-account token {}: {e}",
                token_path.display()
            ))
        })?;
        let mut config = Config::new(server);
        config.auth = Auth::Bearer {
            token: Some(Secret::new(token.trim())),
            file: Some(token_path),
        };
        let ca_path = dir.join("ca.crt");
        match std::fs::read(&ca_path) {
            Ok(pem) if pem_has_certificate(&pem) => config.tls.ca_pem = Some(pem),
            Ok(_) => {
                tracing::error!(path = %ca_path.display(), "in-cluster CA file holds no PEM certificate; using system roots")
            }
            Err(e) => {
                tracing::error!(path = %ca_path.display(), error = %e, "cannot read in-cluster CA file; using system roots")
            }
        }
        config.default_namespace = env("POD_NAMESPACE")
            .filter(|s| !s.trim().is_empty())
            .or_else(|| {
                std::fs::read_to_string(dir.join("namespace"))
                    .ok()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| "default".into());
        Ok(config)
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

/// Splits `KUBECONFIG` on `:` (`;` on Windows), dropping empties and duplicates.
pub fn split_kubeconfig_list(list: &str) -> Vec<PathBuf> {
    let sep = if cfg!(windows) { ';' } else { ':' };
    let mut seen = HashSet::new();
    list.split(sep)
        .filter(|s| !s.is_empty())
        .filter(|s| seen.insert(s.to_string()))
        .map(PathBuf::from)
        .collect()
}

fn pem_has_certificate(pem: &[u8]) -> bool {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem).any(|c| c.is_ok())
}

// ---------------------------------------------------------------------------------------------
// The kubeconfig file format
// ---------------------------------------------------------------------------------------------

/// A parsed kubeconfig (one file, or several merged), with relative paths already resolved.
#[derive(Clone, Debug, Default)]
pub struct Kubeconfig {
    /// Named clusters.
    pub clusters: Vec<NamedCluster>,
    /// Named users (`users`, historically `authInfos`).
    pub users: Vec<NamedUser>,
    /// Named contexts.
    pub contexts: Vec<NamedContext>,
    /// `current-context`.
    pub current_context: Option<String>,
    /// The file(s) this came from, for error messages.
    pub source: String,
}

/// `clusters[]`.
#[derive(Clone, Debug, Deserialize)]
pub struct NamedCluster {
    /// Name.
    pub name: String,
    /// The cluster.
    #[serde(default)]
    pub cluster: ClusterEntry,
}

/// `clusters[].cluster`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClusterEntry {
    /// `server`.
    pub server: Option<String>,
    /// `certificate-authority` (a file).
    pub certificate_authority: Option<String>,
    /// `certificate-authority-data` (base64 PEM).
    pub certificate_authority_data: Option<String>,
    /// `insecure-skip-tls-verify`.
    #[serde(default)]
    pub insecure_skip_tls_verify: bool,
    /// `tls-server-name`.
    pub tls_server_name: Option<String>,
    /// `proxy-url`.
    pub proxy_url: Option<String>,
}

/// `users[]`.
#[derive(Clone, Debug, Deserialize)]
pub struct NamedUser {
    /// Name.
    pub name: String,
    /// The credentials.
    #[serde(default)]
    pub user: UserEntry,
}

/// `users[].user`.
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct UserEntry {
    /// `client-certificate` (a file).
    pub client_certificate: Option<String>,
    /// `client-certificate-data` (base64 PEM).
    pub client_certificate_data: Option<String>,
    /// `client-key` (a file).
    pub client_key: Option<String>,
    /// `client-key-data` (base64 PEM).
    pub client_key_data: Option<String>,
    /// `token`.
    pub token: Option<String>,
    /// `tokenFile`.
    #[serde(rename = "tokenFile")]
    pub token_file: Option<String>,
    /// `username`.
    pub username: Option<String>,
    /// `password`.
    pub password: Option<String>,
    /// `exec`.
    pub exec: Option<ExecEntry>,
    /// `auth-provider` (unsupported; kept to report it).
    pub auth_provider: Option<serde_yaml_ng::Value>,
}

impl fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |o: &Option<String>| o.as_ref().map(|_| "<set>");
        f.debug_struct("UserEntry")
            .field("client_certificate", &self.client_certificate)
            .field(
                "client_certificate_data",
                &set(&self.client_certificate_data),
            )
            .field("client_key", &self.client_key)
            .field("client_key_data", &set(&self.client_key_data))
            .field("token", &set(&self.token))
            .field("token_file", &self.token_file)
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("exec", &self.exec.as_ref().map(|e| &e.command))
            .finish()
    }
}

/// `users[].user.exec`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecEntry {
    /// `apiVersion`.
    pub api_version: Option<String>,
    /// `command`.
    pub command: Option<String>,
    /// `args`.
    pub args: Option<Vec<String>>,
    /// `env`.
    pub env: Option<Vec<ExecEnvVar>>,
    /// `installHint`.
    pub install_hint: Option<String>,
    /// `interactiveMode`.
    pub interactive_mode: Option<String>,
    /// `provideClusterInfo`.
    #[serde(default)]
    pub provide_cluster_info: bool,
}

/// `exec.env[]`.
#[derive(Clone, Deserialize)]
pub struct ExecEnvVar {
    /// Name.
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

impl fmt::Debug for ExecEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=<redacted>", self.name)
    }
}

/// `contexts[]`.
#[derive(Clone, Debug, Deserialize)]
pub struct NamedContext {
    /// Name.
    pub name: String,
    /// The context.
    #[serde(default)]
    pub context: ContextEntry,
}

/// `contexts[].context`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContextEntry {
    /// The cluster's name.
    #[serde(default)]
    pub cluster: String,
    /// The user's name.
    #[serde(default)]
    pub user: String,
    /// The default namespace.
    pub namespace: Option<String>,
}

#[derive(Deserialize)]
struct RawKubeconfig {
    #[serde(default)]
    clusters: Option<Vec<NamedCluster>>,
    #[serde(default, alias = "authInfos")]
    users: Option<Vec<NamedUser>>,
    #[serde(default)]
    contexts: Option<Vec<NamedContext>>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

impl Kubeconfig {
    /// Parses one kubeconfig; `source` names it in errors, `dir` anchors relative paths.
    pub fn parse(yaml: &str, source: &str, dir: &Path) -> Result<Kubeconfig> {
        let raw: RawKubeconfig = if yaml.trim().is_empty() {
            RawKubeconfig {
                clusters: None,
                users: None,
                contexts: None,
                current_context: None,
            }
        } else {
            serde_yaml_ng::from_str(yaml)
                .map_err(|e| Error::Config(format!("kubeconfig {source}: malformed YAML: {e}")))?
        };
        let mut kc = Kubeconfig {
            clusters: raw.clusters.unwrap_or_default(),
            users: raw.users.unwrap_or_default(),
            contexts: raw.contexts.unwrap_or_default(),
            current_context: raw.current_context.filter(|s| !s.is_empty()),
            source: source.to_owned(),
        };
        kc.resolve_paths(dir);
        Ok(kc)
    }

    /// Reads and parses one file.
    pub fn read(path: &Path) -> Result<Kubeconfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading kubeconfig {}: {e}", path.display())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, &path.display().to_string(), dir)
    }

    /// Reads the files that exist among `paths` and merges them (first definition of a name
    /// wins). `None` when none of them exists.
    pub fn read_merged(paths: &[PathBuf]) -> Result<Option<Kubeconfig>> {
        let mut merged: Option<Kubeconfig> = None;
        for path in paths {
            if !path.exists() {
                tracing::debug!(path = %path.display(), "kubeconfig in KUBECONFIG does not exist; skipping");
                continue;
            }
            let kc = Self::read(path)?;
            merged = Some(match merged {
                None => kc,
                Some(mut m) => {
                    m.merge_from(kc);
                    m
                }
            });
        }
        Ok(merged)
    }

    /// Adds what `later` defines that `self` does not (by name, whole entries).
    pub fn merge_from(&mut self, later: Kubeconfig) {
        for c in later.clusters {
            if !self.clusters.iter().any(|x| x.name == c.name) {
                self.clusters.push(c);
            }
        }
        for u in later.users {
            if !self.users.iter().any(|x| x.name == u.name) {
                self.users.push(u);
            }
        }
        for c in later.contexts {
            if !self.contexts.iter().any(|x| x.name == c.name) {
                self.contexts.push(c);
            }
        }
        if self.current_context.is_none() {
            self.current_context = later.current_context;
        }
        self.source = format!("{}:{}", self.source, later.source);
    }

    fn resolve_paths(&mut self, dir: &Path) {
        let resolve = |p: &mut Option<String>| {
            if let Some(s) = p.as_mut()
                && !s.is_empty()
                && Path::new(s.as_str()).is_relative()
            {
                *s = dir.join(&*s).display().to_string();
            }
        };
        for c in &mut self.clusters {
            resolve(&mut c.cluster.certificate_authority);
        }
        for u in &mut self.users {
            resolve(&mut u.user.client_certificate);
            resolve(&mut u.user.client_key);
            resolve(&mut u.user.token_file);
            if let Some(exec) = &mut u.user.exec
                && let Some(cmd) = &mut exec.command
                && cmd.contains('/')
                && Path::new(cmd.as_str()).is_relative()
            {
                *cmd = dir.join(&*cmd).display().to_string();
            }
        }
    }

    /// Builds the [`Config`] of `context` (or `current-context`), with `master` overriding the
    /// server.
    pub fn to_config(&self, context: Option<&str>, master: Option<&str>) -> Result<Config> {
        let src = &self.source;
        let (ctx_name, ctx) = self.chosen_context(context)?;
        let Some(ctx) = ctx else {
            return match master {
                Some(m) => Ok(Config::new(Config::parse_server(m)?)),
                None => Err(Error::Config(format!(
                    "kubeconfig {src}: no context chosen: current-context is not set and no \
                     --context was given"
                ))),
            };
        };
        let ctx_label = ctx_name.unwrap_or_default();
        // Every problem is collected, not just the first, as clientcmd's validation reports them.
        let mut problems: Vec<String> = Vec::new();
        let (cluster, user) = self.context_entries(&ctx, &ctx_label, master, &mut problems);
        let cl = format!("clusters[{:?}]", ctx.cluster);
        let us = format!("users[{:?}]", ctx.user);
        let ClusterSettings {
            server,
            mut tls,
            proxy_url,
        } = cluster_settings(&cluster, &cl, master, &mut problems);
        let Credentials { auth, cert, key } = user_credentials(&user, &us, &mut problems);

        let server = match server {
            Some(s) if problems.is_empty() => s,
            _ => {
                return Err(Error::Config(format!(
                    "invalid configuration (kubeconfig {src}, context {ctx_label:?}): [{}]",
                    problems.join(", ")
                )));
            }
        };
        let mut config = Config::new(server);
        config.default_namespace = ctx
            .namespace
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        config.proxy_url = proxy_url;
        if config.is_https() {
            tls.client_cert_pem = cert;
            tls.client_key_pem = key.map(|k| Secret::new(String::from_utf8_lossy(&k)));
            config.auth = auth;
        } else if auth != Auth::None || cert.is_some() {
            tracing::warn!(
                server = %config.server,
                user = %ctx.user,
                "server is plain http; credentials of the user are not sent"
            );
        }
        config.tls = tls;
        Ok(config)
    }

    /// The name and entry of `context` (or of `current-context`); `(None, None)` when neither
    /// names one. A name that is not among the contexts is an error listing those that are.
    fn chosen_context(
        &self,
        context: Option<&str>,
    ) -> Result<(Option<String>, Option<ContextEntry>)> {
        let src = &self.source;
        let ctx_name = context
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .or_else(|| self.current_context.clone());
        let ctx = match &ctx_name {
            Some(name) => Some(
                self.contexts
                    .iter()
                    .find(|c| &c.name == name)
                    .ok_or_else(|| {
                        Error::Config(format!(
                            "kubeconfig {src}: context {name:?} does not exist (contexts: {})",
                            list_names(self.contexts.iter().map(|c| c.name.as_str()))
                        ))
                    })?
                    .context
                    .clone(),
            ),
            None => None,
        };
        Ok((ctx_name, ctx))
    }

    /// The cluster and user entries `ctx` refers to (empty ones, with a problem recorded, when
    /// they do not exist; a missing cluster is no problem when `master` names the server).
    fn context_entries(
        &self,
        ctx: &ContextEntry,
        ctx_label: &str,
        master: Option<&str>,
        problems: &mut Vec<String>,
    ) -> (ClusterEntry, UserEntry) {
        let cluster = self.clusters.iter().find(|c| c.name == ctx.cluster);
        if cluster.is_none() && master.is_none() {
            problems.push(format!(
                "context {ctx_label:?} refers to cluster {:?}, which does not exist",
                ctx.cluster
            ));
        }
        let cluster = cluster.map(|c| c.cluster.clone()).unwrap_or_default();
        let user = if ctx.user.is_empty() {
            Some(UserEntry::default())
        } else {
            let u = self
                .users
                .iter()
                .find(|u| u.name == ctx.user)
                .map(|u| u.user.clone());
            if u.is_none() {
                problems.push(format!(
                    "context {ctx_label:?} refers to user {:?}, which does not exist",
                    ctx.user
                ));
            }
            u
        };
        let user = user.unwrap_or_default();
        (cluster, user)
    }
}

fn list_names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<_> = names.map(|n| format!("{n:?}")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Loads a `<field>` file or `<field>-data` base64 value; records problems.
/// The server side of a context: where to connect, how to trust it, through which proxy.
struct ClusterSettings {
    server: Option<http::Uri>,
    tls: TlsConfig,
    proxy_url: Option<http::Uri>,
}

/// The server URL (`master` wins over the cluster's), its TLS settings and the proxy, from the
/// cluster entry `cl` names; every problem found is pushed to `problems`.
fn cluster_settings(
    cluster: &ClusterEntry,
    cl: &str,
    master: Option<&str>,
    problems: &mut Vec<String>,
) -> ClusterSettings {
    // Server.
    let server_str = master.map(str::to_owned).or(cluster.server.clone());
    let server = match server_str.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(s) => match Config::parse_server(s) {
            Ok(u) => Some(u),
            Err(e) => {
                problems.push(format!("{cl}.server: {e}"));
                None
            }
        },
        None => {
            problems.push(format!("{cl}: no server defined"));
            None
        }
    };

    // Server TLS.
    let mut tls = TlsConfig {
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        server_name: if master.is_some() {
            None
        } else {
            cluster.tls_server_name.clone().filter(|s| !s.is_empty())
        },
        ..Default::default()
    };
    let ca = load_pem(
        problems,
        cl,
        "certificate-authority",
        cluster.certificate_authority.as_deref(),
        cluster.certificate_authority_data.as_deref(),
    );
    if ca.is_some() && tls.insecure_skip_tls_verify {
        problems.push(format!(
            "{cl}: specifying a root certificates file with the insecure flag is not allowed"
        ));
    }
    if let Some(pem) = &ca
        && !pem_has_certificate(pem)
    {
        problems.push(format!(
            "{cl}.certificate-authority: no PEM certificate found"
        ));
    }
    tls.ca_pem = ca;
    let proxy_url = match cluster.proxy_url.as_deref().filter(|s| !s.is_empty()) {
        Some(p) => match p.parse::<http::Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.host().is_some() => Some(u),
            Ok(_) => {
                problems.push(format!(
                    "{cl}.proxy-url {p:?}: only http:// CONNECT proxies are supported"
                ));
                None
            }
            Err(e) => {
                problems.push(format!("{cl}.proxy-url {p:?}: {e}"));
                None
            }
        },
        None => None,
    };
    ClusterSettings {
        server,
        tls,
        proxy_url,
    }
}

/// The user side of a context: one authentication method and the client certificate and key.
struct Credentials {
    auth: Auth,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
}

/// The credentials of the user entry `us` names, checked as clientcmd does: at most one
/// method, certificate and key together, username and password together, no auth-provider;
/// every problem found is pushed to `problems`.
fn user_credentials(user: &UserEntry, us: &str, problems: &mut Vec<String>) -> Credentials {
    // User credentials.
    let cert = load_pem(
        problems,
        us,
        "client-certificate",
        user.client_certificate.as_deref(),
        user.client_certificate_data.as_deref(),
    );
    let key = load_pem(
        problems,
        us,
        "client-key",
        user.client_key.as_deref(),
        user.client_key_data.as_deref(),
    );
    match (&cert, &key) {
        (Some(_), None) => problems.push(format!(
            "{us}: client-certificate is set but client-key is not"
        )),
        (None, Some(_)) => problems.push(format!(
            "{us}: client-key is set but client-certificate is not"
        )),
        _ => {}
    }
    let mut methods = Vec::new();
    let has = |o: &Option<String>| o.as_deref().is_some_and(|s| !s.is_empty());
    if has(&user.token) || has(&user.token_file) {
        methods.push("token");
    }
    if cert.is_some() || key.is_some() {
        methods.push("client certificate");
    }
    if has(&user.username) || has(&user.password) {
        methods.push("username/password");
    }
    if user.exec.is_some() {
        methods.push("exec");
    }
    if user.auth_provider.is_some() {
        problems.push(format!(
            "{us}.auth-provider: auth providers were removed from client-go in 1.26 and are \
                 not supported; use an exec credential plugin"
        ));
    }
    if methods.len() > 1 {
        problems.push(format!(
            "{us}: more than one authentication method found: {}; only one is allowed",
            methods.join(", ")
        ));
    }
    if has(&user.username) != has(&user.password) {
        problems.push(format!("{us}: username and password must be set together"));
    }
    let auth = if has(&user.token) || has(&user.token_file) {
        Auth::Bearer {
            token: user
                .token
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(Secret::from),
            file: user
                .token_file
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        }
    } else if has(&user.username) {
        Auth::Basic {
            username: user.username.clone().unwrap_or_default(),
            password: Secret::new(user.password.clone().unwrap_or_default()),
        }
    } else if let Some(exec) = &user.exec {
        match exec_config(exec, us) {
            Ok(e) => Auth::Exec(e),
            Err(e) => {
                problems.push(e);
                Auth::None
            }
        }
    } else {
        Auth::None
    };
    if let Auth::Bearer {
        token: None,
        file: Some(f),
    } = &auth
        && let Err(e) = std::fs::metadata(f)
    {
        problems.push(format!("{us}.tokenFile {}: {e}", f.display()));
    }
    Credentials { auth, cert, key }
}

fn load_pem(
    problems: &mut Vec<String>,
    entry: &str,
    field: &str,
    file: Option<&str>,
    data: Option<&str>,
) -> Option<Vec<u8>> {
    let file = file.filter(|s| !s.is_empty());
    let data = data.filter(|s| !s.trim().is_empty());
    match (file, data) {
        (Some(_), Some(_)) => {
            problems.push(format!(
                "{entry}: {field} and {field}-data are both specified; set only one"
            ));
            None
        }
        (Some(f), None) => match std::fs::read(f) {
            Ok(b) => Some(b),
            Err(e) => {
                problems.push(format!("{entry}.{field}: cannot read file {f}: {e}"));
                None
            }
        },
        (None, Some(d)) => {
            let compact: String = d.chars().filter(|c| !c.is_whitespace()).collect();
            match base64::engine::general_purpose::STANDARD.decode(compact.as_bytes()) {
                Ok(b) => Some(b),
                Err(e) => {
                    problems.push(format!("{entry}.{field}-data: invalid base64: {e}"));
                    None
                }
            }
        }
        (None, None) => None,
    }
}

fn exec_config(e: &ExecEntry, us: &str) -> std::result::Result<ExecConfig, String> {
    let api_version = e.api_version.clone().unwrap_or_default();
    let v1 = "client.authentication.k8s.io/v1";
    let v1beta1 = "client.authentication.k8s.io/v1beta1";
    if api_version != v1 && api_version != v1beta1 {
        return Err(format!(
            "{us}.exec.apiVersion {api_version:?}: must be {v1:?} or {v1beta1:?}"
        ));
    }
    let command = e
        .command
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| format!("{us}.exec.command: required"))?;
    let interactive_mode = match e.interactive_mode.as_deref() {
        Some("Never") => InteractiveMode::Never,
        Some("IfAvailable") => InteractiveMode::IfAvailable,
        Some("Always") => InteractiveMode::Always,
        None | Some("") if api_version == v1beta1 => InteractiveMode::IfAvailable,
        None | Some("") => {
            return Err(format!(
                "{us}.exec.interactiveMode: required for {v1} (Never, IfAvailable or Always)"
            ));
        }
        Some(other) => {
            return Err(format!(
                "{us}.exec.interactiveMode {other:?}: must be Never, IfAvailable or Always"
            ));
        }
    };
    Ok(ExecConfig {
        api_version,
        command,
        args: e.args.clone().unwrap_or_default(),
        env: e
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|v| (v.name, Secret::new(v.value)))
            .collect(),
        install_hint: e.install_hint.clone().filter(|s| !s.is_empty()),
        interactive_mode,
        provide_cluster_info: e.provide_cluster_info,
    })
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
