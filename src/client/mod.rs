//! # The Kubernetes client
//!
//! client-go's `rest`, `clientcmd` and typed clientsets, by hand:
//!
//! * [`config`]: where the cluster is and who we are (kubeconfig, in-cluster service account);
//! * [`transport`]: one pooled hyper + rustls connection pool, auth headers, QPS/burst throttle,
//!   retries that honour `Retry-After`;
//! * [`api`]: `Api<K>`, the typed verbs (`get`, `list`, `create`, `update`, `update_status`,
//!   `patch`, `delete`, `watch`) for every `K: k8s_openapi::Resource`;
//! * [`error`]: `metav1.Status` errors and the `is_not_found` family;
//! * [`watch`]: watch events and the newline-delimited JSON decoder.

pub mod api;
pub mod config;
pub mod error;
pub mod params;
pub mod transport;
pub mod watch;

pub use api::{Api, DeleteResponse};
pub use config::{Config, ConfigOptions};
pub use error::{Error, Result};
pub use params::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
    VersionMatch, WatchParams,
};
pub use transport::{Client, ClientMetrics, MetricsSnapshot};
pub use watch::{Bookmark, WatchDecoder, WatchEvent, WatchStream};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::{Deserialize, Deserializer};

/// A list response (`PodList`, `AtList`, ...), generic over the item type.
///
/// `metadata.resourceVersion` is the point in history the list is a snapshot of: a watch
/// started from it sees every change after the list, none twice. `metadata.continue` is set
/// when more pages follow.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(bound(deserialize = "K: Deserialize<'de>"))]
pub struct ObjectList<K> {
    /// `resourceVersion`, `continue`, `remainingItemCount`.
    #[serde(default)]
    pub metadata: ListMeta,
    /// The objects (a JSON `null` reads as empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub items: Vec<K>,
}

fn null_as_empty<'de, D: Deserializer<'de>, K: Deserialize<'de>>(d: D) -> Result<Vec<K>, D::Error> {
    Ok(Option::<Vec<K>>::deserialize(d)?.unwrap_or_default())
}
