//! core/v1 Pods: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/core/pod/strategy.go` does.
//!
//! * **defaults** (`SetDefaults_PodSpec`): `spec.securityContext: {}`, on every write. Every pod
//!   a real server answers with has one, and clients dereference it (`kubectl debug` reads
//!   `spec.securityContext.runAsNonRoot`). The pod's other defaults (`dnsPolicy`,
//!   `schedulerName`, ...) are not filled;
//! * **create** (`PrepareForCreate`): the status is reset to `phase: Pending`;
//! * **validation** ([`validate_pod_spec`], the parts of `ValidatePodSpec` clients rely on): at
//!   least one container; container names DNS-1123 labels, unique; `image` required;
//!   `terminationGracePeriodSeconds >= 0`; `restartPolicy` one of `Always`, `OnFailure`,
//!   `Never`; ephemeral containers by [`crate::registry::core::ephemeral_containers`]. The
//!   workloads' pod templates meet the same rules ([`crate::registry::apps::replicas`]);
//! * **`pods/NAME/ephemeralcontainers`** (`podEphemeralContainersStrategy`): only
//!   `spec.ephemeralContainers` is taken from the request, and the new list is checked against
//!   the stored one ([`crate::registry::core::ephemeral_containers`]);
//! * **graceful deletion** (`CheckGracefulDelete`): a DELETE takes the grace period asked for,
//!   else the pod's `terminationGracePeriodSeconds`, else 30 s; 0 for a pod that was never
//!   scheduled or has finished, 1 for a negative one. A pod with a grace period is only marked
//!   (`deletionTimestamp`, `deletionGracePeriodSeconds`) and stays until its kubelet deletes it
//!   with period 0.
//!
//! DELETE answers with the deleted Pod (`ReturnDeletedObject`), a property of the resource
//! table ([`crate::registry::resources`]).

use std::collections::HashSet;

use apimachinery::validation::{self as v, FieldError};
use serde_json::{Value, json};

use crate::registry::core::ephemeral_containers;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::str_at;

/// The subresource through which ephemeral containers are added.
const EPHEMERAL_CONTAINERS: &str = "ephemeralcontainers";

/// The strategy of `pods` (see the module docs).
#[derive(Debug, Default)]
pub struct PodStrategy;

impl Strategy for PodStrategy {
    fn set_defaults(&self, pod: &mut Value) {
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut)
            && spec.get("securityContext").is_none_or(Value::is_null)
        {
            spec.insert("securityContext".into(), json!({}));
        }
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        if let Some(o) = obj.as_object_mut() {
            o.insert("status".into(), json!({"phase": "Pending"}));
        }
    }

    fn prepare_subresource_update(
        &self,
        subresource: &str,
        old: &Value,
        new: &Value,
    ) -> Option<Value> {
        (subresource == EPHEMERAL_CONTAINERS).then(|| ephemeral_containers::merge(old, new))
    }

    fn validate_subresource_update(
        &self,
        subresource: &str,
        new: &Value,
        old: &Value,
    ) -> Vec<FieldError> {
        if subresource == EPHEMERAL_CONTAINERS {
            ephemeral_containers::validate_update(new, old)
        } else {
            vec![]
        }
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        let mut errs = vec![];
        validate_pod_spec(&obj["spec"], "spec", &mut errs);
        errs
    }

    fn graceful_delete_period(&self, pod: &Value, requested: Option<i64>) -> i64 {
        let g = requested
            .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
            .unwrap_or(30);
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        let unscheduled = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .is_empty();
        if unscheduled || phase == "Succeeded" || phase == "Failed" {
            0
        } else if g < 0 {
            1
        } else {
            g
        }
    }

    fn grace_period_over(&self, pod: &Value) -> bool {
        pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            == 0
    }
}

/// `ValidatePodSpec`, the parts clients rely on. `path` is `spec` or `spec.template.spec`.
pub fn validate_pod_spec(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let containers = spec["containers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if containers.is_empty() {
        errs.push(FieldError::required(format!("{path}.containers"), ""));
    }
    let mut seen = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = format!("{path}.containers[{i}]");
        let name = str_at(c, "name");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{p}.name"), ""));
        } else {
            for m in v::is_dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{p}.name"), name, &m));
            }
            if !seen.insert(name) {
                errs.push(FieldError::duplicate(
                    format!("{p}.name"),
                    &Value::String(name.to_owned()),
                ));
            }
        }
        if str_at(c, "image").trim().is_empty() {
            errs.push(FieldError::required(format!("{p}.image"), ""));
        }
    }
    if let Some(g) = spec["terminationGracePeriodSeconds"].as_i64()
        && g < 0
    {
        errs.push(FieldError::invalid_value(
            format!("{path}.terminationGracePeriodSeconds"),
            &Value::from(g),
            "must be greater than or equal to 0",
        ));
    }
    let policy = str_at(spec, "restartPolicy");
    if !policy.is_empty() && !matches!(policy, "Always" | "OnFailure" | "Never") {
        errs.push(FieldError::not_supported(
            format!("{path}.restartPolicy"),
            policy,
            &["Always", "OnFailure", "Never"],
        ));
    }
    if path == "spec" {
        ephemeral_containers::validate_containers(spec, path, errs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;

    fn errs(obj: Value) -> Vec<FieldError> {
        kind_errors("", "pods", obj)
    }

    #[test]
    fn pods_need_containers_and_a_sane_grace_period() {
        let e = errs(json!({"metadata": {}, "spec": {"containers": []}}));
        assert_eq!(e, vec![FieldError::required("spec.containers", "")]);
        assert_eq!(e[0].message, "Required value");
        let e = errs(
            json!({"spec": {"containers": [{"name": "c", "image": "i"}], "terminationGracePeriodSeconds": -5, "restartPolicy": "Sometimes"}}),
        );
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0].full(),
            "spec.terminationGracePeriodSeconds: Invalid value: -5: must be greater than or equal to 0"
        );
        assert_eq!(
            e[1].full(),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        let e = errs(json!({"spec": {"containers": [{"name": "C", "image": "i"}, {"name": "C"}]}}));
        let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.containers[0].name",
                "spec.containers[1].name",
                "spec.containers[1].name",
                "spec.containers[1].image"
            ]
        );
    }

    #[test]
    fn the_grace_period_of_a_delete_depends_on_where_the_pod_is() {
        let pod = |node: &str, phase: &str, own: Option<i64>| {
            let mut p = json!({"spec": {"nodeName": node}, "status": {"phase": phase}});
            if let Some(g) = own {
                p["spec"]["terminationGracePeriodSeconds"] = json!(g);
            }
            p
        };
        let s = PodStrategy;
        assert_eq!(
            s.graceful_delete_period(&pod("n", "Running", None), None),
            30
        );
        assert_eq!(
            s.graceful_delete_period(&pod("n", "Running", Some(5)), None),
            5
        );
        assert_eq!(
            s.graceful_delete_period(&pod("n", "Running", Some(5)), Some(2)),
            2
        );
        assert_eq!(
            s.graceful_delete_period(&pod("n", "Running", None), Some(-3)),
            1
        );
        assert_eq!(s.graceful_delete_period(&pod("", "Pending", None), None), 0);
        assert_eq!(
            s.graceful_delete_period(&pod("n", "Succeeded", None), None),
            0
        );
    }
}
