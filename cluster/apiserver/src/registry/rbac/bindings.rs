//! RoleBindings and ClusterRoleBindings: what their strategies add to the generic store, as
//! kube-apiserver's `pkg/registry/rbac/rolebinding/` and `clusterrolebinding/` (`strategy.go`,
//! `policybased/storage.go`) do.
//!
//! * **names** are path segments, and a write by an identified user may only bind a role
//!   whose rules that user holds (or has `bind` on it): the group's shared rules
//!   ([`crate::registry::rbac`]);
//! * **validation** (`ValidateRoleBinding`, `ValidateClusterRoleBinding`): `roleRef.apiGroup`
//!   is `rbac.authorization.k8s.io`, `roleRef.kind` a `Role` or `ClusterRole` (only
//!   `ClusterRole` for a ClusterRoleBinding), `roleRef.name` a path segment; each subject has a
//!   name and a kind of `ServiceAccount`, `User` or `Group`.

use apimachinery::validation::FieldError;
use serde_json::Value;

use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::registry::State;
use crate::registry::rbac;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::{is_valid_path_segment_name, str_at};

/// The strategy of `rolebindings` and `clusterrolebindings` (see the module docs).
#[derive(Debug, Default)]
pub struct BindingStrategy;

impl Strategy for BindingStrategy {
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
        validate_binding(obj, def.namespaced)
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

/// The binding rules of a RoleBinding (`namespaced`) or ClusterRoleBinding (see the module
/// docs).
fn validate_binding(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = vec![];
    let rr = &obj["roleRef"];
    let group = str_at(rr, "apiGroup");
    if group != "rbac.authorization.k8s.io" {
        errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            group,
            &["rbac.authorization.k8s.io"],
        ));
    }
    let kind = str_at(rr, "kind");
    if namespaced {
        if !matches!(kind, "Role" | "ClusterRole") {
            errs.push(FieldError::not_supported(
                "roleRef.kind",
                kind,
                &["Role", "ClusterRole"],
            ));
        }
    } else if kind != "ClusterRole" {
        errs.push(FieldError::not_supported(
            "roleRef.kind",
            kind,
            &["ClusterRole"],
        ));
    }
    let name = str_at(rr, "name");
    if name.is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    } else {
        for m in is_valid_path_segment_name(name) {
            errs.push(FieldError::invalid("roleRef.name", name, &m));
        }
    }
    let subjects = obj["subjects"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for (i, s) in subjects.iter().enumerate() {
        let p = format!("subjects[{i}]");
        if str_at(s, "name").is_empty() {
            errs.push(FieldError::required(format!("{p}.name"), ""));
        }
        let kind = str_at(s, "kind");
        if !matches!(kind, "ServiceAccount" | "User" | "Group") {
            errs.push(FieldError::not_supported(
                format!("{p}.kind"),
                kind,
                &["ServiceAccount", "User", "Group"],
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
    fn a_cluster_role_binding_refers_to_a_cluster_role() {
        let e = kind_errors(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}}),
        );
        assert_eq!(
            e[0].full(),
            "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""
        );
    }
}
