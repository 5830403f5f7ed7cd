//! core/v1 ConfigMaps: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/core/configmap/strategy.go` does.
//!
//! Validation (`ValidateConfigMap`'s size rule): the values of `data` and `binaryData` (the
//! latter as the bytes its base64 decodes to) may total at most
//! [`MAX_SECRET_SIZE`], 1 MiB; more is `422` with the cause
//! `: Too long: may not be more than 1048576 bytes` (an empty field path, as on the real
//! server). That the values are strings is Go's decoding's to check
//! ([`crate::registry::typed`]).

use apimachinery::validation::FieldError;
use serde_json::Value;

use crate::api::limits::MAX_SECRET_SIZE;
use crate::registry::core::secrets::{base64_decoded_len, string_values};
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of `configmaps` (see the module docs).
#[derive(Debug, Default)]
pub struct ConfigMapStrategy;

impl Strategy for ConfigMapStrategy {
    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        let total: usize = string_values(obj, "data")
            .iter()
            .map(|(_, v)| v.len())
            .sum::<usize>()
            + string_values(obj, "binaryData")
                .iter()
                .map(|(_, v)| base64_decoded_len(v))
                .sum::<usize>();
        if total > MAX_SECRET_SIZE {
            return vec![FieldError::too_long_bytes("", MAX_SECRET_SIZE)];
        }
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn data_and_binary_data_total_at_most_one_mebibyte() {
        let big = "x".repeat(MAX_SECRET_SIZE);
        let errs = kind_errors("", "configmaps", json!({"data": {"a": big, "b": "y"}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "");
        assert_eq!(
            errs[0].message,
            "Too long: may not be more than 1048576 bytes"
        );
        assert!(kind_errors("", "configmaps", json!({"data": {"a": "x"}})).is_empty());
    }
}
