//! core/v1 Secrets: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/core/secret/strategy.go` does.
//!
//! Validation (`ValidateSecret`'s size rule): the values of `data` (as the bytes their base64
//! decodes to), after `stringData` is merged into it as the real server's conversion does, may
//! total at most [`MAX_SECRET_SIZE`], 1 MiB; more is
//! `422` with the cause `data: Too long: may not be more than 1048576 bytes`. That the values
//! are strings, and `type` a string, is Go's decoding's to check ([`crate::registry::typed`]).

use apimachinery::validation::FieldError;
use serde_json::Value;

use crate::api::limits::MAX_SECRET_SIZE;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of `secrets` (see the module docs).
#[derive(Debug, Default)]
pub struct SecretStrategy;

impl Strategy for SecretStrategy {
    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        let plain = string_values(obj, "stringData");
        let total: usize = string_values(obj, "data")
            .iter()
            .filter(|(k, _)| !plain.iter().any(|(p, _)| p == k))
            .map(|(_, v)| base64_decoded_len(v))
            .sum::<usize>()
            + plain.iter().map(|(_, v)| v.len()).sum::<usize>();
        if total > MAX_SECRET_SIZE {
            return vec![FieldError::too_long_bytes("data", MAX_SECRET_SIZE)];
        }
        vec![]
    }
}

/// The entries of the string map `obj[field]` (a value that is not a string counts as empty).
pub(crate) fn string_values<'a>(obj: &'a Value, field: &str) -> Vec<(&'a str, &'a str)> {
    obj[field]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// Bytes a base64 string decodes to (Go's `[]byte` fields arrive base64-encoded).
pub(crate) fn base64_decoded_len(s: &str) -> usize {
    let pad = s.bytes().rev().take_while(|b| *b == b'=').count();
    (s.len() / 4 * 3 + (s.len() % 4) * 3 / 4).saturating_sub(pad.min(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn data_and_string_data_total_at_most_one_mebibyte() {
        let big = "x".repeat(MAX_SECRET_SIZE);
        let secret = json!({"stringData": {"a": big, "b": "y"}});
        assert_eq!(kind_errors("", "secrets", secret)[0].field, "data");
        assert_eq!(base64_decoded_len("YWJj"), 3);
        assert_eq!(base64_decoded_len("YWI="), 2);
        assert_eq!(base64_decoded_len("YQ=="), 1);
    }
}
