//! # The At's webhooks
//!
//! The handlers the manager's webhook server (`sample_controller_runtime::webhook`) routes to:
//! `/validate-at` and `/mutate-at` ([`at`]: admission), `/convert` ([`convert`]: the
//! conversion webhook between `v1alpha1` and `v1`). The registry registers them on the At's
//! `Registration` (`with_webhook`).

pub mod at;
pub mod convert;
