//! registry

pub mod admissionregistration;
pub mod apps;
pub mod batch;
pub mod core;
pub mod generic;
pub mod patch;
pub mod resources;
pub mod strategy;
pub mod typed;
pub mod validation;
#[doc(hidden)]
pub use resources::{CustomInfo, Registry, ResourceDef, ScaleSpec, View};

/// The store of this server: its objects, their history, and the resource table.
pub type Store = crate::storage::store::Store<resources::Registry>;

/// What [`Store::read`] and [`Store::write`] hand over: the objects and the resource table.
pub type State = crate::storage::store::State<resources::Registry>;

/// What the write path below the handlers needs: the store and the webhook clients
/// (admission and CRD conversion call webhooks). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The objects, their history and the resource table.
    pub store: std::sync::Arc<Store>,
    /// The webhook clients.
    pub webhooks: std::sync::Arc<crate::webhook::Webhooks>,
}
