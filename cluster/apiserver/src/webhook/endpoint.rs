//! Where a webhook is reached: a `WebhookClientConfig`'s `url`, or its `service` resolved
//! through the server's service endpoints (admission webhooks and CRD conversion webhooks
//! alike).

use serde_json::Value;

/// Where a webhook is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`, dialled directly.
    Url(String),
    /// `clientConfig.service`, resolved through the server's service endpoints.
    Service {
        /// Service namespace.
        namespace: String,
        /// Service name.
        name: String,
        /// `path` (default `/`).
        path: String,
        /// `port` (default 443).
        port: u16,
    },
}

impl Endpoint {
    /// Reads a `WebhookClientConfig` (admission or CRD conversion, already validated): its
    /// `url`, or its `service` with the defaults path `/` and port 443.
    pub fn from_client_config(cc: &Value) -> Endpoint {
        if let Some(u) = cc["url"].as_str() {
            return Endpoint::Url(u.to_owned());
        }
        let s = &cc["service"];
        Endpoint::Service {
            namespace: s["namespace"].as_str().unwrap_or_default().to_owned(),
            name: s["name"].as_str().unwrap_or_default().to_owned(),
            path: s["path"].as_str().unwrap_or("/").to_owned(),
            port: s["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        }
    }

    /// The URL the webhook is called at (a service as `https://NAME.NAMESPACE.svc:PORT/PATH`).
    pub fn url(&self) -> String {
        match self {
            Endpoint::Url(u) => u.clone(),
            Endpoint::Service {
                namespace,
                name,
                path,
                port,
            } => format!("https://{name}.{namespace}.svc:{port}{path}"),
        }
    }
}
