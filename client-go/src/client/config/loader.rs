//! The loading rules (see the [module documentation](super)): which kubeconfig files are read
//! and merged, which context is chosen, and how its cluster and user entries become a
//! [`Config`]: the server, its TLS settings, the proxy and exactly one way to authenticate.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::in_cluster::SERVICE_ACCOUNT_DIR;
use super::kubeconfig::{ClusterEntry, ContextEntry, ExecEntry, Kubeconfig, UserEntry};
use super::{
    Auth, Config, ConfigOptions, ExecConfig, InteractiveMode, Secret, TlsConfig,
    pem_has_certificate,
};
use crate::client::{Error, Result};

impl Config {
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

impl Kubeconfig {
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

/// Loads a `<field>` file or `<field>-data` base64 value; records problems.
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
