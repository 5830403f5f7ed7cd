//! # The operators: one `controller.go` each
//!
//! Each submodule is one operator, written the way sample-controller's `controller.go` reads:
//! the struct, the constructor that wires informers to event handlers, and `sync_handler`.
//! What they share (the worker loop, [`Operator`](sample_controller_runtime::controller::Operator),
//! expectations, owner references) is `sample_controller_runtime`'s; [`myapp`] is the smallest
//! complete one, [`at`] the book's.

pub mod at;
mod existing;
pub mod foo;
pub mod myapp;
pub mod rediscluster;
pub mod tdset;

pub use existing::get_existing;

use sample_controller_runtime::ownership::LABEL_MANAGED_BY;

/// The `app.kubernetes.io/managed-by` values of this crate's operators, sorted.
pub const MANAGERS: [&str; 5] = [
    at::CONTROLLER_NAME,
    myapp::CONTROLLER_NAME,
    rediscluster::CONTROLLER_NAME,
    foo::CONTROLLER_NAME,
    tdset::CONTROLLER_NAME,
];

/// `app.kubernetes.io/managed-by in (<every operator's manager name>)`: the server-side
/// selector of the informers of what the operators create.
pub fn managed_by_selector() -> String {
    format!("{LABEL_MANAGED_BY} in ({})", MANAGERS.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_selector_names_every_operator_once() {
        let s = managed_by_selector();
        assert!(s.starts_with("app.kubernetes.io/managed-by in ("));
        for m in MANAGERS {
            assert_eq!(
                s.matches(&format!("{m},")).count() + s.matches(&format!("{m})")).count(),
                1,
                "{m}"
            );
        }
        let parsed = apimachinery::labels::Selector::parse(&s).expect("a valid selector");
        let labels = BTreeMap::from([(LABEL_MANAGED_BY.to_string(), "at-controller".to_string())]);
        assert!(parsed.matches(&labels));
        let other = BTreeMap::from([(LABEL_MANAGED_BY.to_string(), "helm".to_string())]);
        assert!(!parsed.matches(&other));
    }
}
