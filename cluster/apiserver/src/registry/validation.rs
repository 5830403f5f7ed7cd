//! Validation of objects on create and update: the `Validate` / `ValidateUpdate` step of each
//! resource's strategy.
//!
//! kube-apiserver validates every built-in object twice over: the metadata rules every kind
//! shares (`ValidateObjectMeta`: name, labels, annotations, finalizers, ownerReferences; here
//! [`apimachinery::validation`]) and the rules of the kind (`pkg/apis/<group>/validation`). A
//! failure is a `422 Invalid` Status listing one cause per failing field, in the order the real
//! validators find them, with their exact messages (`spec.containers: Required value`).
//!
//! Kind rules reproduced (the ones clients and controllers rely on):
//!
//! | kind | checks |
//! |---|---|
//! | Pod (and workload templates) | at least one container; container names DNS-1123 labels, unique; `image` required; `terminationGracePeriodSeconds >= 0`; `restartPolicy` one of `Always`, `OnFailure`, `Never`; ephemeral containers by [`crate::registry::core::ephemeral_containers`] |
//! | Deployment, ReplicaSet, StatefulSet | `spec.selector` required and non-empty; its `matchLabels` valid labels; the template's labels match it |
//! | Service | ports required unless headless or `ExternalName`; port and `targetPort` in 1..=65535; names required (several ports) and unique; protocol `TCP`/`UDP`/`SCTP` |
//! | Role, ClusterRole | each rule has verbs; resource rules have apiGroups and resources; non-resource URLs not mixed with resources nor in a Role |
//! | RoleBinding, ClusterRoleBinding | `roleRef` kind, name and apiGroup; subjects' kind and name |
//! | Event (core/v1) | `involvedObject.namespace` agrees with the event's namespace |
//! | Lease | `leaseDurationSeconds > 0`, `leaseTransitions >= 0` |
//!
//! Custom resources meet their CRD's schema and its CEL rules instead
//! ([`crate::registry::generic::validate_custom`], [`crate::apiextensions::cel_rules`]) plus the shared metadata rules. Names are checked per kind by [`validate_name`]: DNS-1123 subdomain
//! (most kinds), DNS-1123 label (namespaces), DNS-1035 label (services), path segment (RBAC).

use apimachinery::validation::{self as v, FieldError};
use serde_json::Value;

use crate::api::status::ApiError;
use crate::registry::resources::ResourceDef;

pub use crate::api::status::to_causes;

/// A 422 `Invalid` for these errors, or `Ok` when there are none.
pub fn check(def: &ResourceDef, name: &str, errs: Vec<FieldError>) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        &def.kind,
        &def.group,
        name,
        to_causes(errs),
    ))
}

/// `IsDNS1035Label`: a DNS-1123 label that starts with a letter (service names).
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = vec![];
    if value.len() > 63 {
        errs.push(v::max_len_error(63));
    }
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    if !ok {
        errs.push(v::regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName` (RBAC object names).
pub fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    for bad in [".", ".."] {
        if name == bad {
            return vec![format!("may not be '{bad}'")];
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(**c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// The name rule of this resource, as field errors on `metadata.name`.
pub fn validate_name(def: &ResourceDef, name: &str) -> Vec<FieldError> {
    let msgs = if def.group.is_empty() && def.plural == "namespaces" {
        v::is_dns1123_label(name)
    } else if def.group.is_empty() && def.plural == "services" {
        is_dns1035_label(name)
    } else if def.group == "rbac.authorization.k8s.io" {
        is_valid_path_segment_name(name)
    } else {
        v::is_dns1123_subdomain(name)
    };
    msgs.iter()
        .map(|m| FieldError::invalid("metadata.name", name, m))
        .collect()
}

/// Every rule for an object about to be stored: the shared metadata rules, then the kind's.
pub fn validate_object(def: &ResourceDef, obj: &Value) -> Vec<FieldError> {
    // The shared metadata rules, bounded for huge collections (`limits`).
    let mut errs = crate::api::limits::bounded_meta_errors(&obj["metadata"]);
    if def.custom.is_some() {
        return errs;
    }
    errs.extend(crate::api::limits::validate_data_size(
        &def.group, &def.kind, obj,
    ));
    let spec = &obj["spec"];
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => validate_pod_spec(spec, "spec", &mut errs),
        ("apps", "deployments" | "replicasets" | "statefulsets") => {
            validate_workload(&def.kind, spec, &mut errs)
        }
        ("", "services") => validate_service(spec, &mut errs),
        ("rbac.authorization.k8s.io", "roles") => validate_rules(&obj["rules"], true, &mut errs),
        ("rbac.authorization.k8s.io", "clusterroles") => {
            // Aggregated cluster roles have their rules filled in by the controller.
            validate_rules(&obj["rules"], false, &mut errs)
        }
        ("rbac.authorization.k8s.io", "rolebindings") => validate_binding(obj, true, &mut errs),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            validate_binding(obj, false, &mut errs)
        }
        ("", "events") => validate_core_event(obj, &mut errs),
        ("coordination.k8s.io", "leases") => validate_lease(spec, &mut errs),
        (crate::registry::admissionregistration::GROUP, plural) => errs.extend(
            crate::registry::admissionregistration::validate(plural, obj),
        ),
        _ => {}
    }
    errs
}

fn str_at<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_default()
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
    let mut seen = std::collections::HashSet::new();
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
        crate::registry::core::ephemeral_containers::validate_containers(spec, path, errs);
    }
}

fn validate_workload(kind: &str, spec: &Value, errs: &mut Vec<FieldError>) {
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
    validate_pod_spec(&spec["template"]["spec"], "spec.template.spec", errs);
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

fn validate_port_number(v: &Value, field: String, errs: &mut Vec<FieldError>) {
    if let Some(n) = v.as_i64()
        && !(1..=65535).contains(&n)
    {
        errs.push(FieldError::invalid_value(
            field,
            v,
            "must be between 1 and 65535, inclusive",
        ));
    }
}

fn validate_service(spec: &Value, errs: &mut Vec<FieldError>) {
    let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let headless = str_at(spec, "clusterIP") == "None";
    let ty = str_at(spec, "type");
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = std::collections::HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = str_at(p, "name");
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else if !name.is_empty() {
            for m in v::is_dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{path}.name"), name, &m));
            }
            if !names.insert(name) {
                errs.push(FieldError::duplicate(
                    format!("{path}.name"),
                    &Value::String(name.to_owned()),
                ));
            }
        }
        if p["port"].is_null() {
            errs.push(FieldError::invalid_value(
                format!("{path}.port"),
                &Value::from(0),
                "must be between 1 and 65535, inclusive",
            ));
        } else {
            validate_port_number(&p["port"], format!("{path}.port"), errs);
        }
        validate_port_number(&p["targetPort"], format!("{path}.targetPort"), errs);
        let proto = str_at(p, "protocol");
        if !proto.is_empty() && !matches!(proto, "TCP" | "UDP" | "SCTP") {
            errs.push(FieldError::not_supported(
                format!("{path}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
    }
}

/// `ValidatePolicyRule` for each rule.
fn validate_rules(rules: &Value, namespaced: bool, errs: &mut Vec<FieldError>) {
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
}

fn validate_binding(obj: &Value, namespaced: bool, errs: &mut Vec<FieldError>) {
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
}

/// The core/v1 event rule (`legacyValidateEvent`): the involved object's namespace agrees with
/// the event's. An old-style event (no `eventTime`) about a cluster-scoped object lives in
/// `default` (or no namespace); a new-style one in `default` or `kube-system`.
fn validate_core_event(obj: &Value, errs: &mut Vec<FieldError>) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let involved = str_at(&obj["involvedObject"], "namespace");
    let old_style = str_at(obj, "eventTime").is_empty();
    let ok = match (old_style, involved.is_empty()) {
        (true, true) => ns.is_empty() || ns == "default",
        (false, true) => ns == "default" || ns == "kube-system",
        (_, false) => ns == involved,
    };
    if !ok {
        errs.push(FieldError::invalid(
            "involvedObject.namespace",
            involved,
            "does not match event.namespace",
        ));
    }
}

fn validate_lease(spec: &Value, errs: &mut Vec<FieldError>) {
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
}

/// The built-in kind's typed form round-tripped (decode, encode): what the real server keeps of a
/// body, as its typed decoder drops every field the Go struct lacks. `None` for kinds without a
/// typed model here (custom resources) or bodies that do not decode.
fn typed_roundtrip(def: &ResourceDef, body: &Value) -> Option<Value> {
    use k8s_openapi::api::{apps::v1 as apps, coordination::v1 as coord, core::v1 as core};
    use k8s_openapi::api::{events::v1 as events, rbac::v1 as rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    fn rt<T: serde::de::DeserializeOwned + serde::Serialize>(b: &Value) -> Option<Value> {
        // Decoded from the borrowed tree: the body is not copied first.
        let t = T::deserialize(b).ok()?;
        serde_json::to_value(t).ok()
    }
    if def.custom.is_some() {
        return None;
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Namespace") => rt::<core::Namespace>(body),
        ("", "Pod") => rt::<core::Pod>(body),
        ("", "Event") => rt::<core::Event>(body),
        ("events.k8s.io", "Event") => rt::<events::Event>(body),
        ("", "Service") => rt::<core::Service>(body),
        ("", "ConfigMap") => rt::<core::ConfigMap>(body),
        ("", "Secret") => rt::<core::Secret>(body),
        ("", "ServiceAccount") => rt::<core::ServiceAccount>(body),
        ("", "Node") => rt::<core::Node>(body),
        ("apps", "Deployment") => rt::<apps::Deployment>(body),
        ("apps", "StatefulSet") => rt::<apps::StatefulSet>(body),
        ("apps", "ReplicaSet") => rt::<apps::ReplicaSet>(body),
        ("coordination.k8s.io", "Lease") => rt::<coord::Lease>(body),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            rt::<ext::CustomResourceDefinition>(body)
        }
        ("rbac.authorization.k8s.io", "Role") => rt::<rbac::Role>(body),
        ("rbac.authorization.k8s.io", "ClusterRole") => rt::<rbac::ClusterRole>(body),
        ("rbac.authorization.k8s.io", "RoleBinding") => rt::<rbac::RoleBinding>(body),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => rt::<rbac::ClusterRoleBinding>(body),
        _ => None,
    }
}

/// Removes from `body` every (non-null) field that `typed` lacks, recording its path
/// (`spec.foo`, `spec.containers[0].bar`).
fn strip_unknown(body: &mut Value, typed: &Value, prefix: &str, out: &mut Vec<String>) {
    match (body, typed) {
        (Value::Object(b), Value::Object(t)) => {
            let keys: Vec<String> = b.keys().cloned().collect();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match t.get(&k) {
                    Some(tv) => {
                        if let Some(bv) = b.get_mut(&k) {
                            strip_unknown(bv, tv, &path, out);
                        }
                    }
                    None => {
                        if b.get(&k).is_some_and(|v| !v.is_null()) {
                            out.push(path);
                        }
                        b.remove(&k);
                    }
                }
            }
        }
        (Value::Array(b), Value::Array(t)) => {
            for (i, (bv, tv)) in b.iter_mut().zip(t).enumerate() {
                strip_unknown(bv, tv, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `fieldValidation` for a built-in kind's request body: fields the kind does not have are
/// dropped (as the typed decoder drops them), warned about (`Warn`, the default: one
/// `unknown field "spec.foo"` warning each) or refused (`Strict`: 400 `strict decoding error:
/// unknown field "spec.foo", ...`). `apiVersion`, `kind` and `metadata` are always known.
pub fn check_unknown_fields(
    def: &ResourceDef,
    body: &mut Value,
    q: &crate::api::query::Query,
) -> Result<(), ApiError> {
    use crate::api::query::FieldValidation;
    let Some(typed) = typed_roundtrip(def, body) else {
        return Ok(());
    };
    let mut unknown = vec![];
    strip_unknown(body, &typed, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {}", v::go_quote(f)))
        .collect();
    match q.field_validation() {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            texts.join(", ")
        ))),
        FieldValidation::Warn => {
            for t in texts {
                q.warn(t);
            }
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

/// Duplicate keys of a JSON object body, in document order (`duplicate field "replicas"`).
/// serde_json keeps the last of duplicate keys silently; this walks the text once more and
/// records them, bounded by the body limit the HTTP layer already enforced.
pub fn duplicate_json_keys(bytes: &[u8]) -> Vec<String> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Walk<'a>(&'a mut Vec<String>);
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            while a.next_element_seed(Walk(self.0))?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(k) = a.next_key::<String>()? {
                if !seen.insert(k.clone()) {
                    self.0.push(k);
                }
                a.next_value_seed(Walk(self.0))?;
            }
            Ok(())
        }
    }
    let mut out = vec![];
    // A body that does not parse (or nests too deep) is reported by the decoder proper.
    if let Ok(mut de) = crate::api::limits::json_deserializer(bytes) {
        let _ = Walk(&mut out).deserialize(&mut de);
    }
    out
}

/// `fieldValidation` for duplicate keys of a JSON body: `Strict` refuses (400 `strict decoding
/// error: duplicate field "x"`), `Warn` warns, `Ignore` keeps the last value silently.
pub fn check_duplicate_fields(bytes: &[u8], q: &crate::api::query::Query) -> Result<(), ApiError> {
    report_duplicate_fields(&duplicate_json_keys(bytes), q)
}

/// A JSON request body parsed, with `fieldValidation` applied to its duplicate keys, in one
/// pass over the text: what `serde_json::from_slice` followed by [`check_duplicate_fields`]
/// does, without parsing the body twice. Errors: 400 `error decoding JSON request body: ...`
/// for a body that does not parse, then the duplicate-field outcome.
pub fn parse_json_body(bytes: &[u8], q: &crate::api::query::Query) -> Result<Value, ApiError> {
    let (value, dups) = parse_json_noting_duplicates(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON request body: {e}")))?;
    report_duplicate_fields(&dups, q)?;
    Ok(value)
}

/// Parses JSON into a [`Value`] exactly as `serde_json::from_slice` does (the last of duplicate
/// keys wins) and lists the duplicate keys met on the way, in document order.
pub fn parse_json_noting_duplicates(
    bytes: &[u8],
) -> Result<(Value, Vec<String>), serde_json::Error> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Build<'a>(&'a mut Vec<String>);
    impl<'de> DeserializeSeed<'de> for Build<'_> {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Build<'_> {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any valid JSON value")
        }
        fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
            Ok(Value::Bool(b))
        }
        fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
            Ok(Value::Number(n.into()))
        }
        fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
            Ok(Value::Number(n.into()))
        }
        fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E>(self, s: &str) -> Result<Value, E> {
            Ok(Value::String(s.to_owned()))
        }
        fn visit_string<E>(self, s: String) -> Result<Value, E> {
            Ok(Value::String(s))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut items = Vec::with_capacity(a.size_hint().unwrap_or(0).min(1024));
            while let Some(v) = a.next_element_seed(Build(self.0))? {
                items.push(v);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
            let mut map = serde_json::Map::new();
            while let Some(k) = a.next_key::<String>()? {
                // Noted before the value is read, so the order is the document's.
                if map.contains_key(&k) {
                    self.0.push(k.clone());
                }
                let v = a.next_value_seed(Build(self.0))?;
                map.insert(k, v);
            }
            Ok(Value::Object(map))
        }
    }
    let mut dups = vec![];
    let mut de = crate::api::limits::json_deserializer(bytes)?;
    let value = Build(&mut dups).deserialize(&mut de)?;
    de.end()?;
    Ok((value, dups))
}

/// `fieldValidation` applied to the duplicate keys found in a JSON body.
fn report_duplicate_fields(dups: &[String], q: &crate::api::query::Query) -> Result<(), ApiError> {
    use crate::api::query::FieldValidation;
    if dups.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = dups
        .iter()
        .map(|k| format!("duplicate field {}", v::go_quote(k)))
        .collect();
    match q.field_validation() {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            texts.join(", ")
        ))),
        FieldValidation::Warn => {
            for t in texts {
                q.warn(t);
            }
            Ok(())
        }
        FieldValidation::Ignore => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;
    use serde_json::json;

    fn errs(plural: &str, group: &str, obj: Value) -> Vec<FieldError> {
        let r = Registry::builtins();
        let def = r.lookup(group, "v1", plural).unwrap();
        validate_object(&def, &obj)
    }

    #[test]
    fn one_pass_parsing_matches_serde_json_and_the_duplicate_walk() {
        for text in [
            r#"{"a":1,"b":{"c":1,"c":2},"a":[{"x":1,"x":1}]}"#,
            r#"{"n":-3,"u":18446744073709551615,"f":1.5e3,"s":"\u00e9\n","z":null,"t":true,"l":[]}"#,
            r#"[1,{"k":"v"}]"#,
            "  \"plain\"  ",
        ] {
            let (v, dups) = parse_json_noting_duplicates(text.as_bytes()).unwrap();
            assert_eq!(v, serde_json::from_str::<Value>(text).unwrap(), "{text}");
            assert_eq!(dups, duplicate_json_keys(text.as_bytes()), "{text}");
        }
        for bad in [r#"{"a":1"#, r#"{"a":1} x"#, "", "{'a':1}"] {
            let ours = parse_json_noting_duplicates(bad.as_bytes()).unwrap_err();
            let theirs = serde_json::from_str::<Value>(bad).unwrap_err();
            assert_eq!(ours.to_string(), theirs.to_string(), "{bad}");
        }
    }

    #[test]
    fn unknown_and_duplicate_fields_follow_field_validation() {
        use crate::api::query::Query;
        let r = Registry::builtins();
        let deploy = r.lookup("apps", "v1", "deployments").unwrap();
        let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"foo": 1, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "i", "bar": true}]}}}});
        let strict = Query::parse(Some("fieldValidation=Strict"));
        let e = check_unknown_fields(&deploy, &mut body.clone(), &strict).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "strict decoding error: unknown field \"spec.foo\", unknown field \"spec.template.spec.containers[0].bar\""
        );
        let warn = Query::parse(None);
        let mut b = body.clone();
        check_unknown_fields(&deploy, &mut b, &warn).unwrap();
        assert_eq!(warn.warnings().len(), 2);
        assert!(b["spec"].get("foo").is_none());
        assert_eq!(b["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
        let ignore = Query::parse(Some("fieldValidation=Ignore"));
        check_unknown_fields(&deploy, &mut body.clone(), &ignore).unwrap();
        assert!(ignore.warnings().is_empty());

        assert_eq!(
            duplicate_json_keys(br#"{"a":1,"b":{"c":1,"c":2},"a":[{"x":1,"x":1}]}"#),
            vec!["c", "a", "x"]
        );
        let e = check_duplicate_fields(br#"{"spec":{"replicas":1,"replicas":2}}"#, &strict)
            .unwrap_err();
        assert_eq!(
            e.message,
            "strict decoding error: duplicate field \"replicas\""
        );
    }

    #[test]
    fn names_follow_the_rule_of_the_kind() {
        let r = Registry::builtins();
        let cm = r.lookup("", "v1", "configmaps").unwrap();
        let ns = r.lookup("", "v1", "namespaces").unwrap();
        let svc = r.lookup("", "v1", "services").unwrap();
        let role = r
            .lookup("rbac.authorization.k8s.io", "v1", "roles")
            .unwrap();
        assert!(validate_name(&cm, "a.b-c").is_empty());
        assert_eq!(validate_name(&cm, "Bad").len(), 1);
        assert_eq!(
            validate_name(&ns, "a.b")[0].message,
            "Invalid value: \"a.b\": must not contain dots"
        );
        assert!(validate_name(&svc, "1abc")[0].message.contains("DNS-1035"));
        assert!(validate_name(&role, "system:admin").is_empty());
        assert_eq!(
            validate_name(&role, "a/b%")
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>(),
            vec![
                "Invalid value: \"a/b%\": may not contain '/'",
                "Invalid value: \"a/b%\": may not contain '%'"
            ]
        );
    }

    #[test]
    fn pods_need_containers_and_a_sane_grace_period() {
        let e = errs(
            "pods",
            "",
            json!({"metadata": {}, "spec": {"containers": []}}),
        );
        assert_eq!(e, vec![FieldError::required("spec.containers", "")]);
        assert_eq!(e[0].message, "Required value");
        let e = errs(
            "pods",
            "",
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
        let e = errs(
            "pods",
            "",
            json!({"spec": {"containers": [{"name": "C", "image": "i"}, {"name": "C"}]}}),
        );
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
    fn workload_selectors_must_match_their_template() {
        let ok = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", "x": "y"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert!(errs("deployments", "apps", ok).is_empty());
        let bad = json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let e = errs("replicasets", "apps", bad);
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].full(),
            "spec.template.metadata.labels: Invalid value: {\"app\":\"db\"}: `selector` does not match template `labels`"
        );
        let none =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        assert_eq!(
            errs("statefulsets", "apps", none)[0].full(),
            "spec.selector: Required value"
        );
    }

    #[test]
    fn services_rules_bindings_events_and_leases() {
        let e = errs(
            "services",
            "",
            json!({"spec": {"ports": [{"port": 70000}]}}),
        );
        assert_eq!(
            e[0].full(),
            "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
        );
        assert!(errs("services", "", json!({"spec": {"clusterIP": "None"}})).is_empty());
        assert_eq!(
            errs("services", "", json!({"spec": {}}))[0].full(),
            "spec.ports: Required value"
        );
        let e = errs(
            "clusterroles",
            "rbac.authorization.k8s.io",
            json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]}),
        );
        assert_eq!(
            e[0].full(),
            "rules[0].verbs: Required value: verbs must contain at least one value"
        );
        let e = errs(
            "clusterrolebindings",
            "rbac.authorization.k8s.io",
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}}),
        );
        assert_eq!(
            e[0].full(),
            "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""
        );
        let e = errs(
            "events",
            "",
            json!({"metadata": {"namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "b"}}),
        );
        assert_eq!(
            e[0].full(),
            "involvedObject.namespace: Invalid value: \"b\": does not match event.namespace"
        );
        let e = errs(
            "leases",
            "coordination.k8s.io",
            json!({"spec": {"leaseDurationSeconds": 0}}),
        );
        assert_eq!(
            e[0].full(),
            "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
        );
    }
}
