//! The demo's webhooks: the manager's `/convert`, `/mutate-at` and `/validate-at`, wired into
//! the embedded API server the way a cluster wires them.
//!
//! In a cluster, `artifacts/deploy/webhook/` does this with a Service, cert-manager and two
//! webhook configurations. The demo plays every part in-process:
//!
//! ```text
//! cert-manager  → [`DemoWebhooks::prepare`] mints a CA and a serving certificate for
//!                 sample-controller-webhook.sample-controller.svc into a private directory
//!                 (the manager's --webhook-cert-dir)
//! the Service   → once the manager's webhook server has bound 127.0.0.1:0, the server maps
//!                 sample-controller/sample-controller-webhook to the port it got
//!                 (`ClusterHandle::set_service_endpoint`)
//! the CA injector → [`DemoWebhooks::install_at_crd`] installs the At CRD with
//!                 `conversion: Webhook` (the overlay's crd-conversion-patch.yaml) and
//!                 [`DemoWebhooks::install_admission`] applies the overlay's webhooks.yaml, each
//!                 with the CA as `caBundle`
//! ```
//!
//! The order matters: the CRD's conversion webhook only runs for requests in `v1alpha1`, so it
//! may be installed before the manager listens, but the admission webhooks fail every At write
//! (`failurePolicy: Fail`) while nobody answers, so they are applied once the manager's webhook
//! server listens ([`webhook_address`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use sample_client_go::client::{self, Client};

use super::DemoError;

/// `namespace/name` of the webhook Service in `artifacts/deploy/webhook/`.
pub const SERVICE: &str = "sample-controller/sample-controller-webhook";
/// The name the serving certificate is issued for (the Service's DNS name).
const HOST: &str = "sample-controller-webhook.sample-controller.svc";
/// The overlay's two webhook configurations.
const CONFIGURATIONS: &str = include_str!("../../artifacts/deploy/webhook/webhooks.yaml");

/// The certificate directory of the manager's webhook server, and the CA the API server trusts
/// for it.
#[derive(Debug)]
pub struct DemoWebhooks {
    /// `--webhook-cert-dir`: `tls.crt` and `tls.key`; removed on drop.
    pub cert_dir: PathBuf,
    ca_pem: String,
}

impl Drop for DemoWebhooks {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cert_dir);
    }
}

fn setup_err(what: &str) -> impl Fn(String) -> DemoError + '_ {
    move |e| DemoError::Api {
        what: what.to_string(),
        source: client::Error::Other(e),
    }
}

impl DemoWebhooks {
    /// Mints the CA and serving certificate into a fresh private directory.
    pub fn prepare() -> Result<Self, DemoError> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let err = setup_err("minting the webhook server's certificate");
        let e = |x: rcgen::Error| err(x.to_string());
        let ca_key = KeyPair::generate().map_err(e)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca.distinguished_name
            .push(DnType::CommonName, "sample-controller demo webhook CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().map_err(e)?;
        let cert = CertificateParams::new(vec![HOST.to_owned()])
            .map_err(e)?
            .signed_by(&key, &issuer)
            .map_err(e)?;

        let cert_dir = std::env::temp_dir().join(format!(
            "sample-controller-demo-webhook-{}",
            std::process::id()
        ));
        let io = |x: std::io::Error| err(format!("{}: {x}", cert_dir.display()));
        std::fs::create_dir_all(&cert_dir).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cert_dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io)?;
        }
        std::fs::write(cert_dir.join("tls.key"), key.serialize_pem()).map_err(io)?;
        std::fs::write(cert_dir.join("tls.crt"), cert.pem()).map_err(io)?;

        Ok(Self {
            cert_dir,
            ca_pem: ca_cert.pem(),
        })
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// Installs the At CRD with the manager's `/convert` as its conversion webhook.
    pub async fn install_at_crd(&self, client: &Client) -> Result<(), DemoError> {
        let crd = sample_operators::apis::crds::at_crd_with_conversion_webhook(json!({
            "service": {"namespace": "sample-controller", "name": "sample-controller-webhook", "path": "/convert", "port": 443},
            "caBundle": self.ca_bundle(),
        }))
        .map_err(|e| setup_err("building the At CRD")(e.to_string()))?;
        post(
            client,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await
        .map_err(setup_err(
            "installing the At CRD with its conversion webhook",
        ))
    }

    /// Applies `artifacts/deploy/webhook/webhooks.yaml` with the CA injected.
    pub async fn install_admission(&self, client: &Client) -> Result<(), DemoError> {
        let err = setup_err("applying artifacts/deploy/webhook/webhooks.yaml");
        for doc in serde_yaml_ng::Deserializer::from_str(CONFIGURATIONS) {
            let mut v: Value =
                serde::Deserialize::deserialize(doc).map_err(|e| err(e.to_string()))?;
            let plural = match v["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => "mutatingwebhookconfigurations",
                Some("ValidatingWebhookConfiguration") => "validatingwebhookconfigurations",
                other => return Err(err(format!("unexpected kind {other:?}"))),
            };
            if let Some(hooks) = v["webhooks"].as_array_mut() {
                for h in hooks {
                    h["clientConfig"]["caBundle"] = json!(self.ca_bundle());
                }
            }
            post(
                client,
                &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
                &v,
            )
            .await
            .map_err(&err)?;
        }
        Ok(())
    }
}

/// POSTs `body` to `path`; AlreadyExists counts as success (a `--serve` demo re-run against
/// the same server is not possible, but the call stays idempotent like `kubectl create`).
async fn post(client: &Client, path: &str, body: &Value) -> Result<(), String> {
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(bytes::Bytes::from(bytes))
        .map_err(|e| e.to_string())?;
    match client.request_json::<Value>(request).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// `--webhook-bind-address`: port 0 on 127.0.0.1, so the kernel picks a free port as the
/// manager binds it (picking one first and binding it later could lose it to another process).
pub const BIND_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Where the manager's webhook server listens, once it has bound its port.
pub async fn webhook_address(
    listeners: &sample_controller_runtime::manager::ListenersHandle,
    timeout: Duration,
) -> Result<SocketAddr, DemoError> {
    match tokio::time::timeout(timeout, listeners.bound()).await {
        Ok(Some(bound)) => bound
            .webhook
            .ok_or_else(|| DemoError::Manager("it runs no webhook server".to_string())),
        Ok(None) => Err(DemoError::Manager(
            "it stopped before its webhook server listened (see its log above)".to_string(),
        )),
        Err(_) => Err(DemoError::Manager(format!(
            "its webhook server did not listen within {timeout:?}"
        ))),
    }
}
