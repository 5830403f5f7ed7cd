//! The `rbac.authorization.k8s.io` group's resources: [`roles`] (Roles and ClusterRoles) and
//! [`bindings`] (RoleBindings and ClusterRoleBindings), as kube-apiserver's
//! `pkg/registry/rbac/`. What they share is here: their names are path segments
//! (`ValidateRBACName`), and a write by an identified user (RBAC enforced) may only grant what
//! that user holds, the escalation check of `pkg/registry/rbac/*/policybased/storage.go`
//! ([`crate::auth::escalation`]), which an update that only touches what the garbage collector
//! writes skips (`IsOnlyMutatingGCFields`). Enforcing the rules is the authorizer's
//! ([`crate::auth::rbac`]).

use serde_json::Value;

use crate::api::object_meta::meta_str;
use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::auth::escalation::confirm_no_escalation;
use crate::registry::State;
use crate::registry::resources::ResourceDef;
use crate::registry::validation::is_valid_path_segment_name;

pub mod bindings;
pub mod roles;

/// `ValidateRBACName`: a path segment.
fn validate_name(name: &str) -> Vec<String> {
    is_valid_path_segment_name(name)
}

/// The policy-based storage's check of a create (`old` is `None`) or update by `user`.
fn authorize_write(
    st: &State,
    def: &ResourceDef,
    user: &UserInfo,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if old.is_some_and(|old| only_gc_fields_changed(old, obj)) {
        return Ok(());
    }
    let ns = meta_str(obj, "namespace");
    confirm_no_escalation(st, user, &def.plural, ns, obj)
}

/// `IsOnlyMutatingGCFields`: an update that changes nothing but `ownerReferences` and
/// `finalizers` (what the garbage collector writes) needs no escalation check.
fn only_gc_fields_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            for f in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}
