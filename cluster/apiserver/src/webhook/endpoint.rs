//! Where a webhook is reached: a `WebhookClientConfig`'s `url`, or its `service` resolved
//! through the server's service endpoints (admission webhooks and CRD conversion webhooks
//! alike).

use apimachinery::validation::FieldError;
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

/// `ValidateWebhookClientConfig`: exactly one of `url` and `service`, each checked as
/// kube-apiserver checks it, and a `caBundle` that decodes.
pub fn validate_client_config(cc: &Value, p: &str, errs: &mut Vec<FieldError>) {
    let url = cc["url"].as_str();
    let svc = cc.get("service").filter(|s| !s.is_null());
    match (url, svc) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
            p.to_owned(),
            "exactly one of url or service is required",
        )),
        (Some(u), None) => {
            if let Err(e) = check_url(u) {
                errs.push(FieldError::invalid(format!("{p}.url"), u, &e));
            }
        }
        (None, Some(s)) => {
            for f in ["namespace", "name"] {
                if s[f].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{p}.service.{f}"),
                        &format!("service {f} is required"),
                    ));
                }
            }
            if let Some(path) = s["path"].as_str()
                && !path.is_empty()
                && !path.starts_with('/')
            {
                errs.push(FieldError::invalid(
                    format!("{p}.service.path"),
                    path,
                    "must start with a '/'",
                ));
            }
            if let Some(port) = s.get("port").filter(|v| !v.is_null())
                && !port.as_i64().is_some_and(|n| (1..=65535).contains(&n))
            {
                errs.push(FieldError::invalid_value(
                    format!("{p}.service.port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
    if let Some(ca) = cc.get("caBundle").filter(|v| !v.is_null())
        && decode_ca(ca).is_err()
    {
        errs.push(FieldError::invalid_value(
            format!("{p}.caBundle"),
            ca,
            "must be base64-encoded PEM",
        ));
    }
}

/// The checks `webhook.ValidateWebhookURL` makes (messages included).
fn check_url(u: &str) -> Result<(), String> {
    let Some(rest) = u.strip_prefix("https://") else {
        return Err("'https' is the only allowed URL scheme".into());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err("host must be specified".into());
    }
    if authority.contains('@') {
        return Err("user information is not permitted in the URL".into());
    }
    if u.contains('#') {
        return Err("fragments are not permitted in the URL".into());
    }
    if u.contains('?') {
        return Err("query parameters are not permitted in the URL".into());
    }
    Ok(())
}

/// A `caBundle` (base64 of PEM, as JSON carries `[]byte`) decoded.
pub fn decode_ca(ca: &Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let s = ca.as_str().ok_or("caBundle must be a base64 string")?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("caBundle is not base64: {e}"))
}
