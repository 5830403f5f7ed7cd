//! The kubeconfig file's model: clusters, users and contexts by name, as `clientcmd/api`'s
//! `Config` holds them, and the parsing of one file (relative paths resolved against its
//! directory). Choosing a context and turning it into a [`Config`](super::Config) is the
//! loader's (`loader.rs`).

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use crate::client::{Error, Result};

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
}
