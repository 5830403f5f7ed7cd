//! core/v1 Nodes: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/core/node/strategy.go` does.
//!
//! Unlike other kinds with a status subresource, a Node keeps the status it is created with:
//! `nodeStrategy.PrepareForCreate` does not clear it, because a kubelet registers its node with
//! its capacity, addresses and conditions in one create. Everything else (the `/status` split,
//! `spec.unschedulable` as a field selector, DELETE answering with the Node) is the generic
//! store's and the resource table's ([`crate::registry::resources`]).

use serde_json::Value;

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of `nodes`: a new Node keeps its status.
#[derive(Debug, Default)]
pub struct NodeStrategy;

impl Strategy for NodeStrategy {
    fn prepare_for_create(&self, _def: &ResourceDef, _obj: &mut Value) {}
}
