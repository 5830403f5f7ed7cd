//! A pod's ServiceAccount on the process node: its token, the cluster's CA and the namespace
//! as files, and the variables a client needs to find the API server from inside the pod.
//!
//! ## What Kubernetes does
//!
//! The ServiceAccount admission plugin adds to every pod (unless `automountServiceAccountToken`
//! is `false`) a projected volume `kube-api-access-<random>` of three sources: a
//! `serviceAccountToken` (path `token`, `expirationSeconds: 3607`), the `kube-root-ca.crt`
//! ConfigMap's `ca.crt`, and the pod's namespace through the downward API (path `namespace`),
//! mounted read-only at `/var/run/secrets/kubernetes.io/serviceaccount` in every container. The
//! kubelet fills the token through a TokenRequest (`serviceaccounts/<name>/token`) bound to the
//! pod, and its token manager asks for a new one once 80 % of the token's life has passed. With
//! `KUBERNETES_SERVICE_HOST`/`_PORT` in every container's environment ([`super::env`]),
//! client-go's `rest.InClusterConfig` (here `Config::in_cluster` of the client-go layer) has
//! all it reads, and the pod's requests authenticate as
//! `system:serviceaccount:<namespace>:<serviceAccountName>`.
//!
//! ## What the process node does
//!
//! The same files, requested the same way (a TokenRequest as `system:node:embedded-node`,
//! bound to the pod, `expirationSeconds` [`TOKEN_SECONDS`], renewed at 80 % of its life), written
//! into `<pod dir>/volumes/kube-api-access/` ([`super::volumes`]); `ca.crt` is the API server's
//! CA, the one the root CA publisher puts into `kube-root-ca.crt`. Every container's paths
//! under [`SERVICE_ACCOUNT_DIR`] are rewritten to that directory, like a volume mount's.
//!
//! A process on the host has no mount namespace, so a program that opens the fixed path
//! `/var/run/secrets/kubernetes.io/serviceaccount/token` itself (every in-cluster client does)
//! would not find the file. The node therefore also writes `<pod dir>/kubeconfig`, naming the
//! API server, that CA file and that token file (`tokenFile`, so the renewed token is read
//! again), and sets `KUBECONFIG` to it in the containers' environment (a container's own
//! `KUBECONFIG` entry wins). Every Kubernetes client's loading rules read `KUBECONFIG` before
//! they fall back to the in-cluster configuration, so a controller that would load its
//! in-cluster config in a real pod talks to the same server with the same token here. This
//! variable is the departure a real pod does not have.
//!
//! Further departures: the ServiceAccount's own `automountServiceAccountToken` is not
//! consulted (the pod's is); a pod whose ServiceAccount does not exist (which admission would
//! have refused) runs without the files, after a Warning `FailedMount` event; with a plain-HTTP
//! server the kubeconfig has no CA and clients send the token to nobody (they never send
//! credentials over `http://`), so such a pod's requests are the server's anonymous ones.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::client::{NodeApi, meta_str};
use super::volumes::MountError;

/// Where the ServiceAccount's files are mounted in a pod (`rest.InClusterConfig` reads them
/// there).
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The life of a pod's token, as the admission plugin's projected volume asks for it.
pub const TOKEN_SECONDS: u64 = 3607;

/// The volume's directory name under the pod's `volumes/`.
const VOLUME: &str = "kube-api-access";

/// The API server as the pods reach it: its URL and the CA of its serving certificate.
#[derive(Clone, Debug, Default)]
pub struct ApiServerAddress {
    /// `https://127.0.0.1:<port>` (or `http://`).
    pub url: String,
    /// PEM of the CA (`None` with plain HTTP).
    pub ca_pem: Option<String>,
}

impl ApiServerAddress {
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` for this server (none when the
    /// URL has no host).
    pub fn service_env(&self) -> Vec<(String, String)> {
        let Ok(uri) = self.url.parse::<http::Uri>() else {
            return Vec::new();
        };
        let Some(host) = uri.host() else {
            return Vec::new();
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("http") => 80,
            _ => 443,
        });
        vec![
            ("KUBERNETES_SERVICE_HOST".to_owned(), host.to_owned()),
            ("KUBERNETES_SERVICE_PORT".to_owned(), port.to_string()),
        ]
    }
}

/// A pod's mounted ServiceAccount.
#[derive(Clone, Debug)]
pub(crate) struct Mounted {
    /// The directory holding `token`, `ca.crt` and `namespace`.
    pub(crate) dir: PathBuf,
    /// `KUBECONFIG`, for the containers' environment.
    pub(crate) kubeconfig: PathBuf,
    namespace: String,
    account: String,
    pod: String,
    uid: String,
}

/// The outcome of mounting a pod's ServiceAccount.
pub(crate) enum Mount {
    /// The files are in place.
    Mounted(Mounted),
    /// The pod does not mount one (`automountServiceAccountToken: false`).
    None,
    /// The ServiceAccount does not exist; the message says which.
    Missing(String),
}

/// The ServiceAccount a pod runs as (`default` when unset).
pub(crate) fn account_of(pod: &Value) -> String {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .filter_map(|f| pod["spec"][*f].as_str())
        .find(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned()
}

/// Requests the pod's token and writes the files into the pod's directory `root`. An error
/// other than a missing ServiceAccount is a [`MountError`] (the caller retries).
pub(crate) async fn mount(
    api: &NodeApi,
    pod: &Value,
    root: &Path,
    server: &ApiServerAddress,
) -> Result<Mount, MountError> {
    if pod["spec"]["automountServiceAccountToken"] == false {
        return Ok(Mount::None);
    }
    let mounted = Mounted {
        dir: root.join("volumes").join(VOLUME),
        kubeconfig: root.join("kubeconfig"),
        namespace: meta_str(pod, "namespace").to_owned(),
        account: account_of(pod),
        pod: meta_str(pod, "name").to_owned(),
        uid: meta_str(pod, "uid").to_owned(),
    };
    let Some(token) = mounted.request(api).await? else {
        return Ok(Mount::Missing(format!(
            "MountVolume.SetUp failed for volume \"{VOLUME}\" : failed to fetch token: serviceaccounts \"{}\" not found; the pod runs without its service account's token",
            mounted.account
        )));
    };
    let host = |e: std::io::Error| {
        MountError(format!(
            "MountVolume.SetUp failed for volume \"{VOLUME}\" : {e}"
        ))
    };
    std::fs::create_dir_all(&mounted.dir).map_err(host)?;
    write_atomically(&mounted.dir.join("token"), token.as_bytes()).map_err(host)?;
    write_atomically(&mounted.dir.join("namespace"), mounted.namespace.as_bytes()).map_err(host)?;
    let mut cluster = json!({"server": server.url});
    if let Some(ca) = &server.ca_pem {
        let ca_path = mounted.dir.join("ca.crt");
        write_atomically(&ca_path, ca.as_bytes()).map_err(host)?;
        cluster["certificate-authority"] = json!(ca_path.to_string_lossy());
    }
    // JSON is YAML: every kubeconfig loader reads it.
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": cluster}],
        "users": [{"name": "service-account", "user": {
            "tokenFile": mounted.dir.join("token").to_string_lossy(),
        }}],
        "contexts": [{"name": "in-cluster", "context": {
            "cluster": "in-cluster", "user": "service-account", "namespace": mounted.namespace,
        }}],
        "current-context": "in-cluster",
    });
    let text = serde_json::to_vec_pretty(&kubeconfig).unwrap_or_default();
    write_atomically(&mounted.kubeconfig, &text).map_err(host)?;
    Ok(Mount::Mounted(mounted))
}

impl Mounted {
    /// The `(name, value)` the containers' environment gets.
    pub(crate) fn env(&self) -> (String, String) {
        (
            "KUBECONFIG".to_owned(),
            self.kubeconfig.to_string_lossy().into_owned(),
        )
    }

    async fn request(&self, api: &NodeApi) -> Result<Option<String>, MountError> {
        api.service_account_token(
            &self.namespace,
            &self.account,
            &self.pod,
            &self.uid,
            TOKEN_SECONDS,
        )
        .await
        .map_err(|e| {
            MountError(format!(
                "MountVolume.SetUp failed for volume \"{VOLUME}\" : failed to fetch token: {}",
                e.message
            ))
        })
    }

    /// Renews the token whenever 80 % of its life has passed, as the kubelet's token manager
    /// does, until dropped (a failed renewal is retried every [`RENEW_RETRY`]). Never returns.
    pub(crate) async fn keep_fresh(&self, api: &NodeApi) -> std::convert::Infallible {
        let mut wait = Duration::from_secs(TOKEN_SECONDS * 8 / 10);
        loop {
            tokio::time::sleep(wait).await;
            let renewed = match self.request(api).await {
                Ok(Some(token)) => write_atomically(&self.dir.join("token"), token.as_bytes())
                    .map_err(|e| e.to_string()),
                Ok(None) => Err(format!("serviceaccounts {:?} not found", self.account)),
                Err(e) => Err(e.0),
            };
            wait = match renewed {
                Ok(()) => Duration::from_secs(TOKEN_SECONDS * 8 / 10),
                Err(error) => {
                    tracing::warn!(namespace = %self.namespace, pod = %self.pod, %error, "renewing a pod's service account token failed");
                    RENEW_RETRY
                }
            };
        }
    }
}

/// How soon a failed token renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_secs(10);

/// Writes `bytes` to `path` through a temporary file and a rename, so a reader sees the old
/// content or the new, never a part (the kubelet's atomic writer does the same).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_variables_name_the_servers_address() {
        let at = |url: &str| {
            ApiServerAddress {
                url: url.to_owned(),
                ca_pem: None,
            }
            .service_env()
        };
        let pair = |h: &str, p: &str| {
            vec![
                ("KUBERNETES_SERVICE_HOST".to_owned(), h.to_owned()),
                ("KUBERNETES_SERVICE_PORT".to_owned(), p.to_owned()),
            ]
        };
        assert_eq!(at("https://127.0.0.1:6443"), pair("127.0.0.1", "6443"));
        assert_eq!(at("https://[::1]:6443"), pair("::1", "6443"));
        assert_eq!(at("http://localhost"), pair("localhost", "80"));
        assert!(at("not a url").is_empty());
    }

    #[test]
    fn a_pod_runs_as_its_service_account_or_default() {
        assert_eq!(account_of(&json!({"spec": {}})), "default");
        assert_eq!(
            account_of(&json!({"spec": {"serviceAccountName": "bot"}})),
            "bot"
        );
        assert_eq!(
            account_of(&json!({"spec": {"serviceAccount": "old"}})),
            "old"
        );
    }
}
