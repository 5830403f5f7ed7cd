//! Credentials: what goes into a request's `Authorization` header, or which client certificate
//! its connection presents (client-go's `transport` round trippers and
//! `plugin/pkg/client/auth/exec`).
//!
//! A bearer token (fixed, or a file re-read about every minute: kubelet rotates
//! projected service-account tokens), basic auth, a client certificate, or an exec credential
//! plugin (`client.authentication.k8s.io/v1` or `v1beta1`): the plugin's `ExecCredential` is
//! cached until its `expirationTimestamp` and re-fetched after a `401`. A plugin may return a
//! client certificate instead of a token; the connection pool is then rebuilt with it. Header
//! values carrying secrets are marked sensitive and nothing secret is logged.
//!
//! Data in: the [`Auth`] of a [`Config`]. Data out: a `Credential` per request attempt; after a
//! `401` the transport calls `AuthProvider::invalidate` and tries once more with a fresh one.

use std::time::Duration;

use base64::Engine as _;
use http::HeaderValue;

use super::config::{Auth, Config, ExecConfig, InteractiveMode, Secret};
use super::{Error, Result};

/// How often a token file is re-read (client-go: a 1 minute cache with 10 s leeway).
pub const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(50);

/// What one request carries: an `Authorization` header and/or a client identity.
#[derive(Default)]
pub(super) struct Credential {
    pub(super) header: Option<HeaderValue>,
    pub(super) identity: Option<(Vec<u8>, Secret)>,
}

pub(super) enum AuthProvider {
    None,
    Static(HeaderValue),
    TokenFile(TokenFile),
    Exec(ExecProvider),
}

impl AuthProvider {
    pub(super) fn new(config: &Config) -> Result<AuthProvider> {
        Ok(match &config.auth {
            Auth::None => AuthProvider::None,
            Auth::Bearer { token, file: None } => match token {
                Some(t) => AuthProvider::Static(bearer(t.expose()).ok_or_else(|| {
                    Error::Config("token: contains characters not allowed in a header".into())
                })?),
                None => AuthProvider::None,
            },
            Auth::Bearer {
                token,
                file: Some(path),
            } => AuthProvider::TokenFile(TokenFile {
                path: path.clone(),
                cached: tokio::sync::Mutex::new(
                    token
                        .as_ref()
                        .filter(|t| !t.expose().is_empty())
                        .map(|t| (t.clone(), tokio::time::Instant::now())),
                ),
            }),
            Auth::Basic { username, password } => {
                let raw = format!("{username}:{}", password.expose());
                let enc = base64::engine::general_purpose::STANDARD.encode(raw);
                let mut v = HeaderValue::from_str(&format!("Basic {enc}"))
                    .map_err(|e| Error::Config(format!("basic auth header: {e}")))?;
                v.set_sensitive(true);
                AuthProvider::Static(v)
            }
            Auth::Exec(exec) => AuthProvider::Exec(ExecProvider {
                config: exec.clone(),
                cluster: exec_cluster_info(config),
                cached: tokio::sync::Mutex::new(None),
            }),
        })
    }

    pub(super) async fn credential(&self) -> Result<Credential> {
        match self {
            AuthProvider::None => Ok(Credential::default()),
            AuthProvider::Static(h) => Ok(Credential {
                header: Some(h.clone()),
                identity: None,
            }),
            AuthProvider::TokenFile(f) => {
                let header = match f.token().await? {
                    Some(t) => Some(bearer(t.expose()).ok_or_else(|| {
                        Error::Config(format!(
                            "token file {}: contains characters not allowed in a header",
                            f.path.display()
                        ))
                    })?),
                    None => None,
                };
                Ok(Credential {
                    header,
                    identity: None,
                })
            }
            AuthProvider::Exec(e) => e.credential().await,
        }
    }

    /// After a 401: drop cached credentials if they can be refreshed; true if they were.
    pub(super) fn invalidate(&self) -> bool {
        match self {
            AuthProvider::Exec(e) => match e.cached.try_lock() {
                Ok(mut c) => {
                    *c = None;
                    true
                }
                Err(_) => true,
            },
            AuthProvider::TokenFile(f) => match f.cached.try_lock() {
                Ok(mut c) => {
                    *c = None;
                    true
                }
                Err(_) => true,
            },
            _ => false,
        }
    }
}

fn bearer(token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// A token file, re-read when the cached copy is older than [`TOKEN_FILE_REFRESH`].
pub(super) struct TokenFile {
    path: std::path::PathBuf,
    cached: tokio::sync::Mutex<Option<(Secret, tokio::time::Instant)>>,
}

impl TokenFile {
    async fn token(&self) -> Result<Option<Secret>> {
        let mut cached = self.cached.lock().await;
        if let Some((t, at)) = &*cached
            && at.elapsed() < TOKEN_FILE_REFRESH
        {
            return Ok(Some(t.clone()));
        }
        match tokio::fs::read_to_string(&self.path).await {
            Ok(s) => {
                let t = Secret::new(s.trim());
                *cached = Some((t.clone(), tokio::time::Instant::now()));
                Ok(Some(t))
            }
            Err(e) => match &mut *cached {
                Some((t, at)) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot re-read token file; using the previous token");
                    *at = tokio::time::Instant::now();
                    Ok(Some(t.clone()))
                }
                None => Err(Error::Config(format!(
                    "reading token file {}: {e}",
                    self.path.display()
                ))),
            },
        }
    }
}

/// Runs an exec credential plugin and caches its answer until it expires.
pub(super) struct ExecProvider {
    config: ExecConfig,
    cluster: serde_json::Value,
    cached: tokio::sync::Mutex<Option<ExecCredential>>,
}

#[derive(Clone)]
struct ExecCredential {
    token: Option<Secret>,
    identity: Option<(Vec<u8>, Secret)>,
    expires: Option<jiff::Timestamp>,
}

fn exec_cluster_info(config: &Config) -> serde_json::Value {
    let mut c = serde_json::json!({ "server": config.server.to_string() });
    if let Some(name) = &config.tls.server_name {
        c["tls-server-name"] = name.clone().into();
    }
    if config.tls.insecure_skip_tls_verify {
        c["insecure-skip-tls-verify"] = true.into();
    }
    if let Some(ca) = &config.tls.ca_pem {
        c["certificate-authority-data"] =
            base64::engine::general_purpose::STANDARD.encode(ca).into();
    }
    if let Some(p) = &config.proxy_url {
        c["proxy-url"] = p.to_string().into();
    }
    c
}

/// Longest plugin stderr kept in an error.
const STDERR_EXCERPT: usize = 4096;

impl ExecProvider {
    async fn credential(&self) -> Result<Credential> {
        let mut cached = self.cached.lock().await;
        let fresh = cached
            .as_ref()
            .is_some_and(|c| c.expires.is_none_or(|exp| jiff::Timestamp::now() < exp));
        if !fresh {
            *cached = Some(self.run().await?);
        }
        let c = cached
            .as_ref()
            .cloned()
            .ok_or_else(|| Error::Other("exec plugin produced no credential".into()))?;
        let header = match &c.token {
            Some(t) => Some(bearer(t.expose()).ok_or_else(|| {
                Error::Config(format!(
                    "exec plugin {}: token contains characters not allowed in a header",
                    self.config.command
                ))
            })?),
            None => None,
        };
        Ok(Credential {
            header,
            identity: c.identity,
        })
    }

    async fn run(&self) -> Result<ExecCredential> {
        use std::io::IsTerminal as _;
        use std::process::Stdio;
        let cfg = &self.config;
        let cmd_name = &cfg.command;
        let stdin_tty = std::io::stdin().is_terminal();
        let interactive = match cfg.interactive_mode {
            InteractiveMode::Never => false,
            InteractiveMode::IfAvailable => stdin_tty,
            InteractiveMode::Always => {
                if !stdin_tty {
                    return Err(Error::Config(format!(
                        "exec plugin {cmd_name}: interactiveMode is Always but stdin is not a terminal"
                    )));
                }
                true
            }
        };
        let mut spec = serde_json::json!({ "interactive": interactive });
        if cfg.provide_cluster_info {
            spec["cluster"] = self.cluster.clone();
        }
        let info = serde_json::json!({
            "apiVersion": cfg.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        });
        let mut command = tokio::process::Command::new(cmd_name);
        command
            .args(&cfg.args)
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if interactive {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true);
        for (k, v) in &cfg.env {
            command.env(k, v.expose());
        }
        tracing::debug!(command = %cmd_name, "running exec credential plugin");
        let output = command.output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                let hint = cfg
                    .install_hint
                    .as_deref()
                    .map(|h| format!("\n\n{h}"))
                    .unwrap_or_default();
                Error::Config(format!(
                    "exec plugin: executable {cmd_name} not found{hint}"
                ))
            } else {
                Error::Config(format!("exec plugin {cmd_name}: cannot run: {e}"))
            }
        })?;
        let stderr = excerpt(&output.stderr);
        if !output.status.success() {
            return Err(Error::Config(format!(
                "exec plugin {cmd_name} failed ({}): {stderr}",
                output.status
            )));
        }
        if !stderr.is_empty() {
            tracing::debug!(command = %cmd_name, stderr = %stderr, "exec plugin wrote to stderr");
        }
        parse_exec_credential(&output.stdout, &cfg.api_version, cmd_name)
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let cut = bytes.len().min(STDERR_EXCERPT);
    let mut s = String::from_utf8_lossy(&bytes[..cut]).trim().to_owned();
    if bytes.len() > cut {
        s.push_str("...");
    }
    s
}

/// Parses the `ExecCredential` a plugin printed (never logs it: it holds the secret).
fn parse_exec_credential(stdout: &[u8], api_version: &str, cmd: &str) -> Result<ExecCredential> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        api_version: Option<String>,
        kind: Option<String>,
        status: Option<Status>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        token: Option<String>,
        client_certificate_data: Option<String>,
        client_key_data: Option<String>,
        expiration_timestamp: Option<String>,
    }
    let out: Out = serde_json::from_slice(stdout).map_err(|e| {
        Error::Config(format!(
            "exec plugin {cmd}: output is not an ExecCredential: {e}"
        ))
    })?;
    if out.kind.as_deref() != Some("ExecCredential") {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: output kind {:?}, expected \"ExecCredential\"",
            out.kind.unwrap_or_default()
        )));
    }
    if out.api_version.as_deref() != Some(api_version) {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: output apiVersion {:?} does not match the configured {api_version:?}",
            out.api_version.unwrap_or_default()
        )));
    }
    let status = out
        .status
        .ok_or_else(|| Error::Config(format!("exec plugin {cmd}: ExecCredential has no status")))?;
    let token = status.token.filter(|t| !t.is_empty()).map(Secret::new);
    let identity = match (status.client_certificate_data, status.client_key_data) {
        (Some(c), Some(k)) if !c.is_empty() && !k.is_empty() => {
            Some((c.into_bytes(), Secret::new(k)))
        }
        (None, None) => None,
        (Some(c), Some(k)) if c.is_empty() && k.is_empty() => None,
        _ => {
            return Err(Error::Config(format!(
                "exec plugin {cmd}: clientCertificateData and clientKeyData must be given together"
            )));
        }
    };
    if token.is_none() && identity.is_none() {
        return Err(Error::Config(format!(
            "exec plugin {cmd}: ExecCredential status has neither a token nor a client certificate"
        )));
    }
    let expires = match status.expiration_timestamp.filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<jiff::Timestamp>().map_err(|e| {
            Error::Config(format!(
                "exec plugin {cmd}: status.expirationTimestamp {s:?}: {e}"
            ))
        })?),
        None => None,
    };
    Ok(ExecCredential {
        token,
        identity,
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_credential_parsing() {
        let ok = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        let c = parse_exec_credential(ok, "client.authentication.k8s.io/v1", "p").unwrap();
        assert_eq!(c.token.unwrap().expose(), "t");
        assert!(c.expires.is_some());
        let e = parse_exec_credential(ok, "client.authentication.k8s.io/v1beta1", "p")
            .err()
            .unwrap();
        assert!(e.to_string().contains("does not match"));
        let half =
            br#"{"apiVersion":"v","kind":"ExecCredential","status":{"clientCertificateData":"x"}}"#;
        assert!(parse_exec_credential(half, "v", "p").is_err());
        assert!(parse_exec_credential(b"garbage", "v", "p").is_err());
    }
}
