//! Roles and ClusterRoles: what their strategies add to the generic store, as kube-apiserver's
//! `pkg/registry/rbac/role/` and `clusterrole/` (`strategy.go`, `policybased/storage.go`) do.
//!
//! * **names** are path segments, and a write by an identified user may only grant the rules
//!   that user holds (or has `escalate` on the role; an `aggregationRule` needs full
//!   authority): the group's shared rules ([`crate::registry::rbac`]);
//! * **validation** (`ValidatePolicyRule` for each rule): each rule has verbs; a resource rule
//!   has apiGroups and resources; non-resource URLs are neither mixed with resources nor in a
//!   Role. An aggregated ClusterRole's rules are the controller's to fill in, so a ClusterRole
//!   may carry non-resource URLs.

use apimachinery::validation::FieldError;
use serde_json::Value;

use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::registry::State;
use crate::registry::rbac;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of `roles` and `clusterroles` (see the module docs).
#[derive(Debug, Default)]
pub struct RoleStrategy;

impl Strategy for RoleStrategy {
    /// Its store hooks read the stored objects: writes run under the lock.
    fn store_free_writes(&self) -> bool {
        false
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        rbac::validate_name(name)
    }

    fn field_errors(
        &self,
        def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_rules(&obj["rules"], def.namespaced)
    }

    fn authorize_write(
        &self,
        st: &State,
        def: &ResourceDef,
        user: &UserInfo,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        rbac::authorize_write(st, def, user, obj, old)
    }
}

/// `ValidatePolicyRule` for each rule of a Role (`namespaced`) or ClusterRole.
fn validate_rules(rules: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = vec![];
    let rules = rules.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let non_empty = |r: &Value, k: &str| r[k].as_array().is_some_and(|a| !a.is_empty());
    for (i, r) in rules.iter().enumerate() {
        let p = format!("rules[{i}]");
        if !non_empty(r, "verbs") {
            errs.push(FieldError::required(
                format!("{p}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        if non_empty(r, "nonResourceURLs") {
            if namespaced {
                errs.push(FieldError::invalid_value(
                    format!("{p}.nonResourceURLs"),
                    &r["nonResourceURLs"],
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if non_empty(r, "apiGroups")
                || non_empty(r, "resources")
                || non_empty(r, "resourceNames")
            {
                errs.push(FieldError::invalid_value(
                    format!("{p}.nonResourceURLs"),
                    &r["nonResourceURLs"],
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if !non_empty(r, "apiGroups") {
            errs.push(FieldError::required(
                format!("{p}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if !non_empty(r, "resources") {
            errs.push(FieldError::required(
                format!("{p}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn rules_need_verbs() {
        let e = kind_errors(
            "rbac.authorization.k8s.io",
            "clusterroles",
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]}),
        );
        assert_eq!(
            e[0].full(),
            "rules[0].verbs: Required value: verbs must contain at least one value"
        );
    }
}
