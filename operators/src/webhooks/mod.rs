//! # The At's webhooks
//!
//! The handlers the manager's webhook server (`sample_controller_runtime::webhook`) routes to:
//! `/validate-at` and `/mutate-at` ([`at`]: admission), `/convert` ([`convert`]: the
//! conversion webhook between `v1alpha1` and `v1`). [`ROUTES`] is what the registry gives the
//! server.

pub mod at;
pub mod convert;
