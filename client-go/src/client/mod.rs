//! # The Kubernetes client
//!
//! client-go's `rest`, `clientcmd` and typed clientsets, by hand. Everything a controller says
//! to the API server goes through here:
//!
//! ```text
//! Config::infer (kubeconfig / in-cluster)      -> Config        where, who, how fast
//! Client::new(config)                          -> Client        one connection pool, cheap clones
//! Api::<At>::namespaced(client, "default")     -> Api<At>       typed verbs for one kind
//! api.list(..) / api.watch(..)                 -> ObjectList / WatchStream   (the reflector's diet)
//! api.update_status(..) / api.patch(..)        -> K             (the controller's writes)
//! ```
//!
//! * [`config`]: where the cluster is and who we are (kubeconfig loading rules, in-cluster
//!   service account, `--master`);
//! * [`transport`]: [`Client`], the loop every request goes through (throttle, credentials,
//!   send, retry, count), built from one file per stage:
//!   * [`throttle`]: the QPS/burst token bucket and the decision to follow the server's API
//!     Priority and Fairness instead;
//!   * [`auth`]: bearer tokens, token files, basic auth, exec credential plugins;
//!   * [`connect`]: the pooled hyper client, rustls, the `CONNECT` proxy;
//!   * [`retry`]: which answers (`429`/`5xx` + `Retry-After`) and failures are resent;
//!   * [`request_metrics`]: the `rest_client_*` counters and histograms;
//! * [`api`]: `Api<K>`, the typed verbs (`get`, `list`, `list_all`, `create`, `update`,
//!   `update_status`, `patch`, `delete`, `delete_collection`, `watch`) for every
//!   `K: k8s_openapi::Resource`, built-in kinds and this crate's CRDs alike;
//! * [`error`]: `metav1.Status` errors and the `is_not_found` family; transport failures by
//!   kind (connection refused, TLS, connection closed, timeout), never by message text;
//! * [`params`]: `ListOptions`, `CreateOptions`, `PatchOptions`, `DeleteOptions`;
//! * [`watch`]: watch events, what a resourceVersion is, and the newline-delimited JSON decoder.
//! * [`skip_managed_fields`]: `metadata.managedFields` cut from a body's text before it is
//!   decoded, for lists and watches whose caller drops the field anyway.
//! * [`undecodable`]: a list's or watch's object that does not decode as the typed kind is
//!   named and set aside, not fatal to the whole list or watch.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use sample_client_go::client::{Api, Client, ListParams};
//!
//! # async fn run() -> sample_client_go::client::Result<()> {
//! let client = Client::try_default().await?;           // kubeconfig or in-cluster
//! let pods: Api<Pod> = Api::default_namespaced(client);
//! for p in pods.list(&ListParams::default()).await?.items {
//!     println!("{}", p.metadata.name.unwrap_or_default());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! How it differs from client-go: one generic `Api<K>` replaces the generated per-type clients;
//! JSON is used for every kind (client-go prefers protobuf for built-ins since 1.32); the watch
//! decoder splits on newlines with a line bound instead of a streaming JSON framer; the default
//! throttle is kube-controller-manager's 20/30 rather than bare client-go's 5/10, and
//! [`Config::follow_server_flow_control`] drops it when the server announces API Priority and
//! Fairness (what controller-runtime, Flux and cert-manager do; client-go has no such switch).
//!
//! ## Client-side throttle or the server's priority and fairness?
//!
//! For years every Kubernetes client throttled itself (client-go's `rest.Config` `QPS`/`Burst`,
//! 5/10 unless set), because the server could not tell a hot loop from real work. Since API
//! Priority and Fairness (GA in 1.29) the server can: it queues per flow and answers `429` with
//! `Retry-After` when a priority level is saturated, so a fixed client-side rate only makes a
//! controller slow on an idle cluster. kubernetes/kubernetes#111880 asks client-go to disable
//! its limiter when APF is on; controller-runtime disabled its limiter by default (PR #3119,
//! 2025, on SIG API Machinery's advice); Flux and cert-manager detect APF from the
//! `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID` response headers and
//! turn their limiter off; cert-manager#9158 shows that a rate the user set explicitly must
//! still win. This client does all of that (see [`throttle`]): the manager follows the server
//! unless `--kube-api-qps`/`--kube-api-burst` are given, `--kube-api-qps=-1` (or 0) turns the
//! throttle off, and `429` + `Retry-After` is honoured either way.

pub mod api;
pub mod auth;
pub mod config;
pub mod connect;
pub mod error;
pub mod params;
pub mod request_metrics;
pub mod retry;
pub mod skip_managed_fields;
pub mod throttle;
pub mod transport;
pub mod undecodable;
pub mod watch;

pub use api::{Api, DeleteResponse};
pub use config::{Config, ConfigOptions};
pub use error::{Error, Result, TransportError, TransportKind};
pub use params::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
    VersionMatch, WatchParams,
};
pub use transport::{Client, ClientMetrics, LatencyHistogram, MetricsSnapshot, ThrottleDecision};
pub use undecodable::UndecodableObject;
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
    /// The objects that did not decode as `K`, named (see [`undecodable`]). Filled by
    /// [`Api::list`] and [`Api::list_all`], which decode item by item; a list read with serde
    /// directly fails on such an object instead.
    #[serde(skip)]
    pub undecodable: Vec<UndecodableObject>,
}

fn null_as_empty<'de, D: Deserializer<'de>, K: Deserialize<'de>>(d: D) -> Result<Vec<K>, D::Error> {
    Ok(Option::<Vec<K>>::deserialize(d)?.unwrap_or_default())
}
