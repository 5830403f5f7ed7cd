//! endpoints

pub mod access_review;
pub mod discovery;
pub mod handlers;
pub mod openapi;
pub mod openapi_docs;
pub mod openapi_v2_docs;
pub mod partial;
pub mod printers;
pub mod protobuf;
pub mod table;
pub mod token_review;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::auth::rbac;
use crate::filters::request_log::RequestLog;
use crate::filters::{faults, flowcontrol};
use crate::kubelet;
use crate::registry::{self, Store};

/// State shared by every request of one server.
pub struct Shared {
    /// Objects, history, resource table.
    pub store: Arc<Store>,
    /// Request counts.
    pub log: RequestLog,
    /// Bearer tokens and the user of a request without credentials.
    pub authn: crate::filters::authentication::Authenticator,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// When a watch whose client stopped reading is closed.
    pub watch_unresponsive: watch::Unresponsive,
    /// Answer `sendInitialEvents` with 422.
    pub reject_send_initial_events: bool,
    /// Cancelled at shutdown; ends watches and connections.
    pub shutdown: CancellationToken,
    /// `host:port` for `/api`'s `serverAddressByClientCIDRs`.
    pub server_address: String,
    /// Injected faults (checked on every resource request; ends watches on demand).
    pub faults: faults::Faults,
    /// Users' groups and RBAC enforcement.
    pub rbac: rbac::Authorizer,
    /// API Priority and Fairness (or the max-in-flight limits): seats, queues, 429s.
    pub flowcontrol: Arc<flowcontrol::FlowControl>,
    /// The store and the webhook clients, for the write path ([`crate::admission`],
    /// [`crate::apiextensions`]'s conversion).
    pub backend: registry::Backend,
    /// The kubelets of the nodes that registered: logs, exec, attach and port-forward
    /// ([`kubelet`]).
    pub kubelets: kubelet::Kubelets,
}
