//! The server's internals, for the project's own tests and benchmarks. **Not part of the API.**
//!
//! Compiled only with the off-by-default cargo feature `unstable-internals`, as tokio keeps its
//! unstable APIs behind `--cfg tokio_unstable`: what is here may change or go in any release,
//! without notice or a semver bump. A program that reaches the server from outside uses HTTP
//! (any client, kubectl); a component that runs beside it uses the interfaces of the crate
//! root ([`crate::loopback`], [`crate::kubelet`], [`crate::faults`]).
//!
//! Who uses it, and why: the workspace's integration tests seed and read the store directly
//! where a paused clock must not wait on a client (the controller manager's and node's tests,
//! through `tests/integration/support/cluster.rs`), and check limits against the server's own
//! constants; the benchmarks measure the store's LIST and the CEL compiler without HTTP.

/// The store, its state under the lock, the history's changes.
pub mod store {
    pub use crate::registry::{State, Store};
    pub use crate::storage::store::*;
}
/// Object metadata helpers.
pub use crate::api::object_meta as meta;
/// Query strings and list options.
pub use crate::api::query;
/// The request handlers' constants (body limit).
pub use crate::endpoints::handlers as http;
/// The watch endpoint's constants.
pub use crate::endpoints::watch;
/// The generic registry's verbs (create, get, list, update, patch, delete), on a locked state.
pub use crate::registry::generic as verbs;
/// Objects at rest (the unread-object shedding of `rest_unread_objects`).
pub use crate::storage::stored;
/// CRD validation rules (x-kubernetes-validations), compiled as the server does.
pub mod cel_rules {
    pub use crate::apiextensions::cel_rules::*;
}
