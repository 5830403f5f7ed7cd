//! The in-cluster configuration: a pod's service account (`rest.InClusterConfig`).

use std::path::Path;

use super::{Auth, Config, Secret, pem_has_certificate};
use crate::client::{Error, Result};

/// Where the service-account files are mounted in a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

impl Config {
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
