//! coordination.k8s.io/v1 Leases: what their strategy adds to the generic store, as
//! kube-apiserver's `pkg/registry/coordination/lease/strategy.go` does.
//!
//! Validation (`ValidateLeaseSpec`): `leaseDurationSeconds > 0` and `leaseTransitions >= 0`
//! when set. That an update must carry a `resourceVersion` and that a PUT on a missing Lease
//! creates it (what leader election relies on) are properties of the resource table
//! ([`crate::registry::resources`]).

use apimachinery::validation::FieldError;
use serde_json::Value;

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of `leases` (see the module docs).
#[derive(Debug, Default)]
pub struct LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_lease_spec(&obj["spec"])
    }
}

fn validate_lease_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        errs.push(FieldError::invalid_value(
            "spec.leaseDurationSeconds",
            &Value::from(d),
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        errs.push(FieldError::invalid_value(
            "spec.leaseTransitions",
            &Value::from(t),
            "must be greater than or equal to 0",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn a_lease_lasts_a_while() {
        let e = kind_errors(
            "coordination.k8s.io",
            "leases",
            json!({"spec": {"leaseDurationSeconds": 0}}),
        );
        assert_eq!(
            e[0].full(),
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
        );
    }
}
