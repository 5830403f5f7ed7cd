//! webhook

pub mod client;
pub mod endpoint;

use std::collections::HashMap;

use client::ClientManager;

/// How long a conversion webhook call may take by default (apiextensions-apiserver's 30 s).
pub const DEFAULT_CONVERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The server's webhook clients and their settings, shared by admission and CRD conversion.
#[derive(Debug, Default)]
pub struct Webhooks {
    /// Service endpoints and pooled clients.
    pub clients: ClientManager,
    /// How long a CRD conversion webhook call may take ([`CRD conversion, `crate::apiextensions::conversion``]).
    pub conversion_timeout: std::time::Duration,
}

impl Webhooks {
    /// Webhook clients resolving `clientConfig.service` through `endpoints`
    /// (`NAMESPACE/NAME` → `HOST:PORT`).
    pub fn new(endpoints: HashMap<String, String>) -> Self {
        Webhooks {
            clients: ClientManager::new(endpoints),
            conversion_timeout: DEFAULT_CONVERSION_TIMEOUT,
        }
    }
}
