//! apps/v1 Deployments, ReplicaSets and StatefulSets, the workloads that keep `spec.replicas`
//! copies of a pod template: what their strategies add to the generic store, as
//! kube-apiserver's `pkg/registry/apps/deployment/strategy.go`, `replicaset/strategy.go` and
//! `statefulset/strategy.go` do. Their rules here are the same for the three kinds, so one
//! [`ReplicasStrategy`] serves them:
//!
//! * **`spec.replicas`** ([`validate_replicas`]): an `int32`, so a fraction, a string or a
//!   number outside `-2^31..2^31` fails Go's decoding with `400 BadRequest`, and a negative count
//!   fails validation with `422 Invalid`; checked on its own, before the metadata rules;
//! * **validation** (the parts of `ValidateDeploymentSpec`, `ValidateReplicaSetSpec` and
//!   `ValidateStatefulSetSpec` clients rely on): `spec.selector` required and non-empty; its
//!   `matchLabels` valid labels; the template's labels match it; the template's pod spec meets
//!   the pod rules ([`validate_pod_spec`]).
//!
//! Their status subresource, `/scale` (`.spec.replicas`, `.status.replicas`, `.spec.selector`)
//! and `generation` tracking are properties of the resource table
//! ([`crate::registry::resources`]); DaemonSets have no rules beyond those. What makes them roll
//! out is the controller manager's.

use apimachinery::validation::{self as v, FieldError};
use serde_json::Value;

use crate::api::object_meta::meta_str;
use crate::api::status::{ApiError, Cause};
use crate::registry::core::pods::validate_pod_spec;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::str_at;

/// The strategy of `deployments`, `replicasets` and `statefulsets` (see the module docs).
#[derive(Debug, Default)]
pub struct ReplicasStrategy;

impl Strategy for ReplicasStrategy {
    fn validate(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        _old: Option<&Value>,
        _strict: bool,
    ) -> Result<(), ApiError> {
        validate_replicas(def, obj)
    }

    fn field_errors(
        &self,
        def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_workload(&def.kind, &obj["spec"])
    }
}

/// The real API server's checks of `spec.replicas` on Deployments, ReplicaSets and
/// StatefulSets (their `/scale` has its own, in [`crate::registry::generic`]): the field is an
/// `int32`, so a fraction, a string or a number outside `-2^31..2^31` fails decoding with
/// `400 BadRequest` (`json: cannot unmarshal number 1.5 into Go struct field
/// DeploymentSpec.spec.replicas of type int32`), and a negative count fails validation with
/// `422 Invalid` (`spec.replicas: Invalid value: -1: must be greater than or equal to 0`).
pub fn validate_replicas(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let kind = def.kind.as_str();
    let Some(v) = obj.get("spec").and_then(|s| s.get("replicas")) else {
        return Ok(());
    };
    if v.is_null() {
        return Ok(());
    }
    let decode_error = |what: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {what} into Go struct field {kind}Spec.spec.replicas of type int32"
        ))
    };
    let n = match v {
        Value::Number(num) => match num.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => n,
            None => return Err(decode_error(format!("number {num}"))),
        },
        Value::String(_) => return Err(decode_error("string".into())),
        Value::Bool(_) => return Err(decode_error("bool".into())),
        Value::Array(_) => return Err(decode_error("array".into())),
        _ => return Err(decode_error("object".into())),
    };
    if n < 0 {
        return Err(ApiError::invalid(
            kind,
            &def.group,
            meta_str(obj, "name"),
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {n}: must be greater than or equal to 0"),
            )],
        ));
    }
    Ok(())
}

/// The workload rules (see the module docs).
fn validate_workload(kind: &str, spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let selector = &spec["selector"];
    if !selector.is_object() {
        errs.push(FieldError::required("spec.selector", ""));
    } else {
        let match_labels = selector["matchLabels"].as_object();
        let exprs = selector["matchExpressions"].as_array();
        if match_labels.is_none_or(|m| m.is_empty()) && exprs.is_none_or(|e| e.is_empty()) {
            errs.push(FieldError::invalid_value(
                "spec.selector",
                selector,
                &format!(
                    "empty selector is invalid for {}",
                    kind.to_ascii_lowercase()
                ),
            ));
        }
        errs.extend(v::validate_labels(
            &selector["matchLabels"],
            "spec.selector.matchLabels",
        ));
        let template_labels = &spec["template"]["metadata"]["labels"];
        if !selector_matches(selector, template_labels) {
            errs.push(FieldError::invalid_value(
                "spec.template.metadata.labels",
                template_labels,
                "`selector` does not match template `labels`",
            ));
        }
    }
    errs.extend(v::validate_labels(
        &spec["template"]["metadata"]["labels"],
        "spec.template.metadata.labels",
    ));
    validate_pod_spec(&spec["template"]["spec"], "spec.template.spec", &mut errs);
    errs
}

/// A `metav1.LabelSelector` (matchLabels and the four operators) against a label map.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = selector["matchLabels"].as_object()
        && !m.iter().all(|(k, want)| get(k) == want.as_str())
    {
        return false;
    }
    let exprs = selector["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    exprs.iter().all(|e| {
        let key = str_at(e, "key");
        let values: Vec<&str> = e["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match str_at(e, "operator") {
            "In" => get(key).is_some_and(|x| values.contains(&x)),
            "NotIn" => get(key).is_none_or(|x| !values.contains(&x)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn workload_selectors_must_match_their_template() {
        let ok = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", "x": "y"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert!(kind_errors("apps", "deployments", ok).is_empty());
        let bad = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let e = kind_errors("apps", "replicasets", bad);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].full(),
            "spec.template.metadata.labels: Invalid value: {\"app\":\"db\"}: `selector` does not match template `labels`"
        );
        let none =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert_eq!(
            kind_errors("apps", "statefulsets", none)[0].full(),
            "spec.selector: Required value"
        );
    }
}
