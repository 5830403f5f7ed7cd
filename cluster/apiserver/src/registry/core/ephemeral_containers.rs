//! `pods/NAME/ephemeralcontainers`: adding debugging containers to a running pod.
//!
//! ## What kube-apiserver does
//!
//! An ephemeral container (`kubectl debug -it pod --image=busybox`) is a container added to a
//! pod that already exists, for troubleshooting. A pod's spec is otherwise immutable, so the
//! containers go through a subresource of their own, served by `EphemeralContainersREST`
//! (`pkg/registry/core/pod/storage/storage.go`) with `podEphemeralContainersStrategy`
//! (`pkg/registry/core/pod/strategy.go`):
//!
//! * `GET` answers with the whole Pod, as `/status` does; `PUT` and `PATCH` (JSON, merge,
//!   strategic merge with `name` as the merge key, apply) answer with the whole Pod too;
//! * **only `spec.ephemeralContainers` is taken from the request**
//!   (`dropNonEphemeralContainerUpdates`): the stored pod is kept, with its name, namespace,
//!   `resourceVersion` and `uid` from the request and the request's `ephemeralContainers`.
//!   Labels, other spec fields and status sent along are ignored. Pods allow unconditional
//!   updates, so a body without `resourceVersion` is accepted, and a stale one is a 409;
//! * `ValidatePodEphemeralContainersUpdate` (`pkg/apis/core/validation/validation.go`):
//!   the pod's spec is validated with the new list (`validateEphemeralContainers`: each name
//!   required, a DNS-1123 label, unique among all the pod's containers — `Duplicate value`;
//!   `image` required; `targetContainerName` must name one of `containers` or
//!   `initContainers` — `Not found`; the fields an ephemeral container may not have —
//!   `ports`, `resources`, the probes, `lifecycle`, `resizePolicy`, `restartPolicy` — and
//!   `volumeMounts[*].subPath`/`subPathExpr` are `Forbidden: cannot be set for an Ephemeral
//!   Container`), a static (mirror) pod refuses them (`Forbidden: static pods do not support
//!   ephemeral containers`), and every ephemeral container the stored pod has must still be
//!   there (`Forbidden: existing ephemeral containers "x" may not be removed`) and unchanged
//!   (`... may not be changed` followed by a diff). All are `422 Invalid` with those causes on
//!   `spec.ephemeralContainers`.
//!
//! The kubelet starts each new ephemeral container in the running pod (never restarting it)
//! and reports it in `status.ephemeralContainerStatuses`; ephemeral containers count neither
//! for the pod's readiness nor for its phase.
//!
//! ## What this server does
//!
//! The same, with the checks above ([`merge`], [`validate_update`], the pods' strategy's hooks
//! for this subresource: [`crate::registry::core::pods`]). Differences: the `may not be changed` message
//! ends with a short list of the fields that differ, not Go's `cmp.Diff` text; there is no
//! defaulting of built-in kinds, so the stored containers are compared as they were sent; and
//! the pod's own endpoint does not refuse a change of `spec.ephemeralContainers` as the real
//! `ValidatePodUpdate` does (this server checks no immutability of a pod's spec).
//! The simulated node reports each added container `running`; the node's process runtime runs
//! its command like any other container's, once, and reports its exit.
//!
//! The real bootstrap RBAC policy grants `pods/ephemeralcontainers` to no role but
//! `cluster-admin` (its wildcard): `edit` and `admin` may exec into pods but not add
//! containers to them, and so it is here ([`crate::server::bootstrap`]).

use apimachinery::validation::{self as v, FieldError};
use serde_json::Value;

/// The field every cause of this subresource is about.
const FIELD: &str = "spec.ephemeralContainers";

/// The annotation a static pod's mirror carries (`kubernetes.io/config.mirror`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Fields of a container an ephemeral container may not set (`allowedEphemeralContainerFields`
/// lists the others as allowed).
const FORBIDDEN_FIELDS: [&str; 9] = [
    "ports",
    "resources",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
];

const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// `dropNonEphemeralContainerUpdates`: the stored pod with the request's
/// `spec.ephemeralContainers` (the identity fields are the update path's to copy).
pub fn merge(old: &Value, new: &Value) -> Value {
    let mut result = old.clone();
    let sent = new["spec"]
        .get("ephemeralContainers")
        .filter(|v| !v.is_null())
        .cloned();
    if let Some(spec) = result.get_mut("spec").and_then(Value::as_object_mut) {
        match sent {
            Some(list) => {
                spec.insert("ephemeralContainers".into(), list);
            }
            None => {
                spec.remove("ephemeralContainers");
            }
        }
    }
    result
}

/// `ValidatePodEphemeralContainersUpdate`'s ephemeral-container part: the new list is valid
/// and keeps every stored ephemeral container unchanged.
pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    if old["metadata"]["annotations"]
        .get(MIRROR_ANNOTATION)
        .is_some()
    {
        return vec![FieldError::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let mut errs = vec![];
    validate_containers(&new["spec"], "spec", &mut errs);
    let new_list = list(&new["spec"]);
    for existing in list(&old["spec"]) {
        let name = existing["name"].as_str().unwrap_or_default();
        match new_list.iter().find(|c| c["name"].as_str() == Some(name)) {
            None => errs.push(FieldError::forbidden(
                FIELD,
                &format!("existing ephemeral containers {name:?} may not be removed\n"),
            )),
            Some(c) if *c != existing => errs.push(FieldError::forbidden(
                FIELD,
                &format!(
                    "existing ephemeral containers {name:?} may not be changed\n{}",
                    changed_fields(&existing, c)
                ),
            )),
            Some(_) => {}
        }
    }
    errs
}

/// `validateEphemeralContainers` for the pod spec at `path` (`spec`): also run when a pod is
/// created or updated through its main endpoint.
pub fn validate_containers(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let ephemeral = list(spec);
    if ephemeral.is_empty() {
        return;
    }
    let others: Vec<&str> = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| spec[*f].as_array())
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let mut all: std::collections::HashSet<&str> = others.iter().copied().collect();
    for (i, c) in ephemeral.iter().enumerate() {
        let p = format!("{path}.ephemeralContainers[{i}]");
        let name = c["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(format!("{p}.name"), ""));
        } else {
            for m in v::is_dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{p}.name"), name, &m));
            }
        }
        let image = c["image"].as_str().unwrap_or_default();
        if image.is_empty() {
            errs.push(FieldError::required(format!("{p}.image"), ""));
        } else if image.trim() != image {
            errs.push(FieldError::invalid(
                format!("{p}.image"),
                image,
                "must not have leading or trailing whitespace",
            ));
        }
        if !name.is_empty() && !all.insert(name) {
            errs.push(FieldError::duplicate(
                format!("{p}.name"),
                &Value::String(name.to_owned()),
            ));
        }
        let target = c["targetContainerName"].as_str().unwrap_or_default();
        if !target.is_empty() && !others.contains(&target) {
            errs.push(FieldError {
                reason: "FieldValueNotFound",
                field: format!("{p}.targetContainerName"),
                message: format!("Not found: {}", v::go_quote(target)),
            });
        }
        for f in FORBIDDEN_FIELDS {
            if c.get(f).is_some_and(is_set) {
                errs.push(FieldError::forbidden(format!("{p}.{f}"), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, m) in c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for f in ["subPath", "subPathExpr"] {
                if m[f].as_str().is_some_and(|s| !s.is_empty()) {
                    errs.push(FieldError::forbidden(
                        format!("{p}.volumeMounts[{j}].{f}"),
                        NOT_FOR_EPHEMERAL,
                    ));
                }
            }
        }
    }
}

/// The ephemeral containers of a pod spec.
fn list(spec: &Value) -> Vec<Value> {
    spec["ephemeralContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Whether a field holds something other than Go's zero value (reflection's test in
/// `validateFieldAllowList`): absent, `null`, `false`, `0`, `""`, `[]` and objects of zero
/// values are unset.
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => o.values().any(is_set),
    }
}

/// The fields whose values differ between two containers, one `-`/`+` pair a field.
fn changed_fields(old: &Value, new: &Value) -> String {
    let empty = serde_json::Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = String::new();
    for k in keys {
        let (a, b) = (o.get(k), n.get(k));
        if a != b {
            let show =
                |v: Option<&Value>| v.map_or_else(|| "<absent>".to_owned(), Value::to_string);
            out.push_str(&format!("  {k}:\n  - {}\n  + {}\n", show(a), show(b)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ephemeral: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": {"a": "1"}},
               "spec": {"containers": [{"name": "app", "image": "busybox"}],
                        "ephemeralContainers": ephemeral},
               "status": {"phase": "Running"}})
    }

    #[test]
    fn only_the_ephemeral_containers_are_taken_from_the_request() {
        let old = pod(json!(null));
        let mut sent = pod(json!([{"name": "debug", "image": "busybox"}]));
        sent["metadata"]["labels"]["a"] = json!("2");
        sent["spec"]["containers"][0]["image"] = json!("nginx");
        let merged = merge(&old, &sent);
        assert_eq!(merged["metadata"]["labels"]["a"], "1");
        assert_eq!(merged["spec"]["containers"][0]["image"], "busybox");
        assert_eq!(merged["spec"]["ephemeralContainers"][0]["name"], "debug");
        assert_eq!(merged["status"]["phase"], "Running");
    }

    #[test]
    fn existing_ephemeral_containers_may_not_be_removed_or_changed() {
        let old =
            pod(json!([{"name": "one", "image": "busybox"}, {"name": "two", "image": "busybox"}]));
        let new = pod(json!([{"name": "one", "image": "alpine"}]));
        let errs = validate_update(&new, &old);
        let msgs: Vec<String> = errs.iter().map(FieldError::full).collect();
        assert_eq!(errs.len(), 2, "{msgs:?}");
        assert!(msgs[0].starts_with(
            "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"one\" may not be changed\n"
        ));
        assert_eq!(
            msgs[1],
            "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"two\" may not be removed\n"
        );
    }

    #[test]
    fn new_ephemeral_containers_follow_the_container_rules() {
        let old = pod(json!(null));
        let new = pod(json!([
            {"name": "app", "image": "busybox", "ports": [{"containerPort": 80}]},
            {"name": "", "image": "", "targetContainerName": "nope",
             "resources": {}, "volumeMounts": [{"name": "v", "mountPath": "/x", "subPath": "s"}]},
        ]));
        let msgs: Vec<String> = validate_update(&new, &old)
            .iter()
            .map(FieldError::full)
            .collect();
        assert_eq!(
            msgs,
            vec![
                "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[1].name: Required value",
                "spec.ephemeralContainers[1].image: Required value",
                "spec.ephemeralContainers[1].targetContainerName: Not found: \"nope\"",
                "spec.ephemeralContainers[1].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
            ]
        );
    }

    #[test]
    fn static_pods_refuse_ephemeral_containers() {
        let mut old = pod(json!(null));
        old["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "abc"});
        let new = pod(json!([{"name": "debug", "image": "busybox"}]));
        let msgs: Vec<String> = validate_update(&new, &old)
            .iter()
            .map(FieldError::full)
            .collect();
        assert_eq!(
            msgs,
            vec![": Forbidden: static pods do not support ephemeral containers"]
        );
    }
}
