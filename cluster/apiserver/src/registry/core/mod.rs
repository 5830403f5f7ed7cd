//! The core (`""`) group's resources: one file per resource with behaviour of its own (its
//! [`Strategy`](crate::registry::strategy::Strategy)), as kube-apiserver's
//! `pkg/registry/core/<resource>/` packages. Service accounts, replication controllers and
//! component statuses have none beyond the resource table's flags; the actions that are not
//! objects (TokenRequest, Eviction, ComponentStatus) are in [`pod_actions`]. Resource quotas are a
//! folder ([`resourcequotas`]): their strategy, the usage evaluators and the quota admission plugin.

pub mod configmaps;
pub mod ephemeral_containers;
pub mod events;
pub mod namespaces;
pub mod nodes;
pub mod pod_actions;
pub mod pods;
pub mod resourcequotas;
pub mod secrets;
pub mod services;
