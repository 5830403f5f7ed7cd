//! core/v1 ResourceQuotas: their strategy, the usage they report, and the quota admission
//! every create in their namespace goes through.
//!
//! A ResourceQuota caps what a namespace may hold: `spec.hard` maps resource names to limits
//! (`count/configmaps: 2`, `pods: 10`, `requests.cpu: 1`, `limits.memory: 2Gi`). On a cluster
//! three pieces make it work, and all three are here:
//!
//! 1. **the strategy** (`pkg/registry/core/resourcequota/strategy.go`, `ValidateResourceQuota`):
//!    each `spec.hard` name is a standard quota resource (`pods`, `services`, `configmaps`,
//!    `requests.cpu`, ...) or a qualified name (`count/deployments.apps`,
//!    `requests.example.com/gpu`; `must be a standard resource for quota` otherwise), each
//!    value a non-negative quantity, whole for the counting resources (`must be an integer`);
//!    `spec.scopes` are known scopes. A value that is not a quantity fails decoding (`400`,
//!    Go's `quantities must match the regular expression ...`). `spec.hard` is stored in
//!    canonical form (`1000m` → `1`), as Go's `Quantity` re-encodes it.
//! 2. **the status** (kube-controller-manager's `resourcequota` controller): `status.hard`
//!    mirrors `spec.hard` and `status.used` holds, for each of its names, what the namespace's
//!    objects use ([`usage`]). Here the registry keeps it exact under the store's lock: a quota's
//!    status is computed when it is written, and every write or removal of a namespaced object
//!    recomputes the status of the quotas in its namespace ([`refresh`]), writing those that
//!    changed (a `MODIFIED` event, as the controller's status update). The controller's
//!    periodic resync is therefore not needed, and a write through `/status` is recomputed
//!    instead of kept (on a cluster the controller overwrites it at its next sync). One clock
//!    effect is not followed: a deleted pod past its grace period stops counting when something
//!    in its namespace is next written.
//! 3. **admission** ([`admission`], `plugin/pkg/admission/resourcequota`): a create that would
//!    take any quota of its namespace past `hard` is refused with `403 Forbidden` and kube's
//!    message, and a pod without the requests or limits a quota tracks is refused too.

pub mod admission;
pub mod usage;

use apimachinery::quantity::Quantity;
use apimachinery::validation::{self as v, FieldError};
use serde_json::{Map, Value, json};

use crate::api::object_meta::meta_str;
use crate::api::status::ApiError;
use crate::registry::State;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::go_string_slice;

use usage::namespace_usage;

/// The storage of ResourceQuotas.
pub const STORAGE: &str = "core/resourcequotas";

/// The strategy of `resourcequotas` (see the module docs).
#[derive(Debug, Default)]
pub struct ResourceQuotaStrategy;

/// `IsStandardQuotaResourceName`'s names.
const STANDARD_QUOTA: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
    "cpu",
    "memory",
    "ephemeral-storage",
    "storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// Names whose quantities must be whole (`IsIntegerResourceName`).
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// The scopes a quota may name (`ResourceQuotaScope`).
pub const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// `spec.hard` (or any resource map) parsed; `Err` names the first value that is not a
/// quantity, in Go's words.
pub fn parse_list(map: &Value) -> Result<Vec<(String, Quantity)>, String> {
    let Some(m) = map.as_object() else {
        return Ok(vec![]);
    };
    m.iter()
        .map(|(k, v)| {
            let q = match v {
                Value::String(s) => Quantity::parse(s)?,
                Value::Number(n) => Quantity::parse(&n.to_string())?,
                _ => return Err(apimachinery::quantity::FORMAT_ERROR.to_owned()),
            };
            Ok((k.clone(), q))
        })
        .collect()
}

fn to_map(list: impl IntoIterator<Item = (String, Quantity)>) -> Value {
    Value::Object(
        list.into_iter()
            .map(|(k, q)| (k, Value::String(q.to_string())))
            .collect::<Map<String, Value>>(),
    )
}

/// The status of `quota` as the quota controller would write it: `hard` from the spec, `used`
/// from the namespace (plus `extra` for the quota itself when it is being created).
fn computed_status(st: &State, quota: &Value, creating: bool) -> Value {
    let hard = parse_list(&quota["spec"]["hard"]).unwrap_or_default();
    if hard.is_empty() {
        return json!({});
    }
    let names: Vec<String> = hard.iter().map(|(k, _)| k.clone()).collect();
    let mut used = namespace_usage(st, meta_str(quota, "namespace"), &names);
    if creating {
        for name in ["count/resourcequotas", "resourcequotas"] {
            if let Some(q) = used.get_mut(name) {
                *q = q.add(&Quantity::from_int(1));
            }
        }
    }
    json!({"hard": to_map(hard), "used": to_map(used)})
}

impl Strategy for ResourceQuotaStrategy {
    /// Its store hooks read the stored objects: writes run under the lock.
    fn store_free_writes(&self) -> bool {
        false
    }

    fn validate(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        _old: Option<&Value>,
        _strict: bool,
    ) -> Result<(), ApiError> {
        // A value that is not a quantity fails Go's decoding, before any validation.
        match parse_list(&obj["spec"]["hard"]) {
            Err(e) => Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
                kind = def.kind,
                version = def.version
            ))),
            Ok(hard) => {
                if !hard.is_empty() {
                    obj["spec"]["hard"] = to_map(hard);
                }
                Ok(())
            }
        }
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_spec(&obj["spec"])
    }

    fn before_store(
        &self,
        st: &mut State,
        obj: &mut Value,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        let creating = st
            .get(STORAGE, meta_str(obj, "namespace"), meta_str(obj, "name"))
            .is_none();
        let status = computed_status(st, obj, creating);
        if let Some(o) = obj.as_object_mut() {
            if status.as_object().is_some_and(Map::is_empty) {
                o.remove("status");
            } else {
                o.insert("status".into(), status);
            }
        }
        Ok(())
    }
}

/// `ValidateResourceQuotaSpec`.
fn validate_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    for (name, value) in spec["hard"].as_object().into_iter().flatten() {
        let at = format!("spec.hard[{name}]");
        let name_errs = v::is_qualified_name(name);
        let bad_name = !name_errs.is_empty();
        for m in name_errs {
            errs.push(FieldError::invalid(at.as_str(), name, &m));
        }
        if !bad_name && !name.contains('/') && !is_standard_quota_name(name) {
            errs.push(FieldError::invalid(
                at.as_str(),
                name,
                "must be a standard resource for quota",
            ));
        }
        let Some(q) = value
            .as_str()
            .map(str::to_owned)
            .or_else(|| value.as_number().map(ToString::to_string))
            .and_then(|s| Quantity::parse(&s).ok())
        else {
            continue;
        };
        if q.is_negative() {
            errs.push(FieldError::invalid(
                at.as_str(),
                &q.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        if INTEGER_RESOURCES.contains(&name.as_str()) && q.milli_value() % 1000 != 0 {
            errs.push(FieldError::invalid(
                at.as_str(),
                &q.to_string(),
                "must be an integer",
            ));
        }
    }
    let scopes = spec["scopes"].as_array();
    if scopes
        .into_iter()
        .flatten()
        .any(|s| !SCOPES.contains(&s.as_str().unwrap_or_default()))
    {
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec.scopes".into(),
            message: format!(
                "Invalid value: {}: unsupported scope",
                go_string_slice("core.ResourceQuotaScope", scopes)
            ),
        });
    }
    errs
}

fn is_standard_quota_name(name: &str) -> bool {
    STANDARD_QUOTA.contains(&name)
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
}

/// Recomputes the status of every ResourceQuota in namespace `ns` after a write there, and
/// stores those whose status changed (the quota controller's sync, done at once).
pub fn refresh(st: &mut State, ns: &str) {
    if ns.is_empty() {
        return;
    }
    let quotas: Vec<Value> = st.list(STORAGE, Some(ns)).into_iter().cloned().collect();
    for quota in quotas {
        let status = computed_status(st, &quota, false);
        let current = quota.get("status").cloned().unwrap_or(json!({}));
        if status != current {
            let mut updated = quota;
            updated["status"] = status;
            st.write(STORAGE, updated);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;

    fn errors(hard: Value) -> Vec<String> {
        kind_errors(
            "",
            "resourcequotas",
            json!({"metadata": {"name": "q", "namespace": "default"}, "spec": {"hard": hard}}),
        )
        .iter()
        .map(FieldError::full)
        .collect()
    }

    #[test]
    fn hard_names_are_quota_resources_and_counts_are_whole() {
        assert!(errors(json!({"count/configmaps": "2", "pods": "1", "requests.cpu": "500m", "count/deployments.apps": "3"})).is_empty());
        assert_eq!(
            errors(json!({"bananas": "1"})),
            [
                "spec.hard[bananas]: Invalid value: \"bananas\": must be a standard resource for quota"
            ]
        );
        assert_eq!(
            errors(json!({"pods": "1500m"})),
            ["spec.hard[pods]: Invalid value: \"1500m\": must be an integer"]
        );
        assert_eq!(
            errors(json!({"cpu": "-1"})),
            ["spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"]
        );
    }
}
