//! Validation of objects on create and update: the rules every resource shares, and the
//! helpers the resources' own rules use.
//!
//! kube-apiserver validates every built-in object twice over: the metadata rules every kind
//! shares (`ValidateObjectMeta`: name, labels, annotations, finalizers, ownerReferences; here
//! [`apimachinery::validation`], bounded by [`crate::api::limits::bounded_meta_errors`]) and the
//! rules of the kind (`pkg/apis/<group>/validation`), which its strategy's `Validate` runs.
//! Here [`validate_object`] is the first and asks the resource's
//! [`Strategy::field_errors`](crate::registry::strategy::Strategy::field_errors) for the second; the kinds' rules live with their strategies, one
//! file per resource under `registry/<group>/` (pods, services, workloads, events, leases,
//! roles and bindings, webhook configurations, the data size of ConfigMaps and Secrets). A
//! failure is a `422 Invalid` Status listing one cause per failing field, in the order the real
//! validators find them, with their exact messages (`spec.containers: Required value`).
//!
//! Names are checked per kind by [`validate_name`], with the kind's rule
//! ([`Strategy::validate_name`](crate::registry::strategy::Strategy::validate_name)): DNS-1123 subdomain (most kinds), DNS-1123 label
//! (namespaces), DNS-1035 label (services), path segment (RBAC). Custom resources meet their
//! CRD's schema and CEL rules (their strategy, [`crate::apiextensions::custom_resources`]) plus
//! the shared metadata rules.
//!
//! Also here: what `fieldValidation` does with the fields a built-in kind's Go type lacks
//! ([`check_unknown_fields`]) and with duplicate JSON keys ([`check_duplicate_fields`],
//! [`parse_json_body`]).

#[cfg(test)]
use std::collections::HashSet;
use std::fmt;

use apimachinery::validation::{self as v, FieldError};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::api::limits::{bounded_meta_errors, json_deserializer};
use crate::api::query::{FieldValidation, Query};
use crate::api::status::ApiError;
use crate::registry::resources::ResourceDef;
use crate::registry::typed;

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

/// The name rule of this resource ([`Strategy::validate_name`](crate::registry::strategy::Strategy::validate_name)), as field errors on
/// `metadata.name`.
pub fn validate_name(def: &ResourceDef, name: &str) -> Vec<FieldError> {
    def.strategy
        .get()
        .validate_name(name)
        .iter()
        .map(|m| FieldError::invalid("metadata.name", name, m))
        .collect()
}

/// Every rule for an object about to be created (`old` is `None`) or updated: the shared
/// metadata rules, then the kind's ([`Strategy::field_errors`](crate::registry::strategy::Strategy::field_errors)).
pub fn validate_object(def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    // The shared metadata rules, bounded for huge collections (`limits`).
    let mut errs = bounded_meta_errors(&obj["metadata"]);
    errs.extend(def.strategy.get().field_errors(def, obj, old));
    errs
}

/// `validation.IsValidPortNum`: a port number is 1 to 65535.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        return vec![];
    }
    vec!["must be between 1 and 65535, inclusive".to_owned()]
}

/// `validation.IsValidPortName`: an IANA service name (at most 15 characters of `a-z`, `0-9`
/// and `-`, at least one letter, no `--`, no hyphen at either end).
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = vec![];
    if port.len() > 15 {
        errs.push(v::max_len_error(15));
    }
    let b = port.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !b.iter().any(u8::is_ascii_lowercase) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if b.first() == Some(&b'-') || b.last() == Some(&b'-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// `metav1validation.ValidateLabelSelector`: `matchLabels` keys are qualified names and
/// values label values; each `matchExpressions` entry has a qualified-name `key`, an operator
/// of `In`, `NotIn`, `Exists`, `DoesNotExist`, and values exactly when the operator needs them.
pub fn validate_label_selector(selector: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    if let Some(labels) = selector.get("matchLabels").filter(|l| !l.is_null()) {
        errs.extend(v::validate_labels(labels, &format!("{path}.matchLabels")));
    }
    let exprs = selector["matchExpressions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, e) in exprs.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = e["values"].as_array().map_or(0, Vec::len);
        match str_at(e, "operator") {
            "In" | "NotIn" if values == 0 => errs.push(FieldError::required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => errs.push(FieldError::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(FieldError::invalid(
                format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = str_at(e, "key");
        for m in v::is_qualified_name(key) {
            errs.push(FieldError::invalid(format!("{at}.key"), key, &m));
        }
    }
    errs
}

/// A list of strings as Go's `%#v` prints a slice of a named string type
/// (`[]networking.PolicyType{"Ingress", "Egress"}`, `[]core.ResourceQuotaScope(nil)`): how
/// `field.Invalid` shows a slice value.
pub fn go_string_slice(type_name: &str, items: Option<&Vec<Value>>) -> String {
    match items {
        None => format!("[]{type_name}(nil)"),
        Some(items) => {
            let shown: Vec<String> = items
                .iter()
                .map(|i| v::go_quote(i.as_str().unwrap_or_default()))
                .collect();
            format!("[]{type_name}{{{}}}", shown.join(", "))
        }
    }
}

/// A string field of `v` (`""` when absent or not a string).
pub fn str_at<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_default()
}

/// The kind rules' errors for `obj` as an object of the built-in `group`/`plural` (tests of the
/// resources' rules).
#[cfg(test)]
pub(crate) fn kind_errors(group: &str, plural: &str, obj: Value) -> Vec<FieldError> {
    use crate::registry::resources::Registry;
    let registry = Registry::builtins();
    let def = registry
        .lookup(group, "v1", plural)
        .expect("a built-in resource");
    validate_object(&def, &obj, None)
}

/// One step of the path [`strip_unknown`] is at: a field name or a list index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Field(&'a str),
    Index(usize),
}

/// `spec.containers[0].bar` from its steps.
fn render_steps(steps: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Whether a `null` is anywhere in `v`.
fn has_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(items) => items.iter().any(has_null),
        Value::Object(m) => m.values().any(has_null),
        _ => false,
    }
}

/// A field's path as the warnings name it: `spec.containers[0].foo`.
fn render_field_steps(steps: &[typed::Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            typed::Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            typed::Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Removes the field at `steps` (a path ending in a field's name) from `body`, if it is there.
fn remove_steps(body: &mut Value, steps: &[typed::Step]) {
    let Some((typed::Step::Field(last), parents)) = steps.split_last() else {
        return;
    };
    let mut at = body;
    for step in parents {
        let next = match step {
            typed::Step::Field(f) => at.get_mut(f.as_str()),
            typed::Step::Index(i) => at.get_mut(*i),
        };
        match next {
            Some(n) => at = n,
            None => return,
        }
    }
    if let Value::Object(m) = at {
        m.remove(last.as_str());
    }
}

/// Removes from `body` every (non-null) field that `typed` lacks, recording its path
/// (`spec.foo`, `spec.containers[0].bar`). The walk keeps the path as borrowed steps and renders
/// one only for a field it reports: a body with no unknown field (nearly every request) costs
/// no allocation per field.
fn strip_unknown(body: &mut Value, typed: &Value, out: &mut Vec<String>) {
    strip_unknown_at(body, typed, &mut Vec::new(), out);
}

fn strip_unknown_at<'t>(
    body: &mut Value,
    typed: &'t Value,
    steps: &mut Vec<Step<'t>>,
    out: &mut Vec<String>,
) {
    match (body, typed) {
        (Value::Object(b), Value::Object(t)) => {
            // In key order, as the fields are reported; unknown ones are removed afterwards.
            let mut unknown: Vec<String> = vec![];
            for (k, bv) in b.iter_mut() {
                match t.get_key_value(k) {
                    Some((tk, tv)) => {
                        steps.push(Step::Field(tk));
                        strip_unknown_at(bv, tv, steps, out);
                        steps.pop();
                    }
                    None => {
                        if !bv.is_null() {
                            let mut path = render_steps(steps);
                            if !path.is_empty() {
                                path.push('.');
                            }
                            path.push_str(k);
                            out.push(path);
                        }
                        unknown.push(k.clone());
                    }
                }
            }
            for k in unknown {
                b.remove(&k);
            }
        }
        (Value::Array(b), Value::Array(t)) => {
            for (i, (bv, tv)) in b.iter_mut().zip(t).enumerate() {
                steps.push(Step::Index(i));
                strip_unknown_at(bv, tv, steps, out);
                steps.pop();
            }
        }
        _ => {}
    }
}

/// `fieldValidation` for a built-in kind's request body: fields the kind does not have are
/// dropped (as the typed decoder drops them), warned about (`Warn`, the default: one
/// `unknown field "spec.foo"` warning each) or refused (`Strict`: 400 `strict decoding error:
/// unknown field "spec.foo", ...`). `apiVersion`, `kind` and `metadata` are always known.
///
/// A field set to `null` is dropped too, known or not, and only an unknown one that is not
/// `null` is reported (Go decodes `null` to the zero value, which the typed object omits). A
/// body without `null` anywhere (nearly every one) asks the decoder which fields it ignored
/// ([`typed::ignored_fields`]); one with a `null` is decoded, encoded again and compared
/// ([`typed::roundtrip`]), which also finds the known fields that are `null`.
pub fn check_unknown_fields(
    def: &ResourceDef,
    body: &mut Value,
    q: &Query,
) -> Result<(), ApiError> {
    let unknown = if has_null(body) {
        let Some(typed) = typed::roundtrip(def, body) else {
            return Ok(());
        };
        let mut unknown = vec![];
        strip_unknown(body, &typed, &mut unknown);
        unknown
    } else {
        let Some(ignored) = typed::ignored_fields(def, body) else {
            return Ok(());
        };
        // Each path ends in an object's field, so removing one moves no list index of another.
        ignored
            .iter()
            .map(|steps| {
                remove_steps(body, steps);
                render_field_steps(steps)
            })
            .collect()
    };
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
#[cfg(test)]
pub fn duplicate_json_keys(bytes: &[u8]) -> Vec<String> {
    struct Walk<'a>(&'a mut Vec<String>);
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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
            let mut seen = HashSet::new();
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
    if let Ok(mut de) = json_deserializer(bytes) {
        let _ = Walk(&mut out).deserialize(&mut de);
    }
    out
}

/// `fieldValidation` for duplicate keys of a JSON body: `Strict` refuses (400 `strict decoding
/// error: duplicate field "x"`), `Warn` warns, `Ignore` keeps the last value silently.
#[cfg(test)]
pub fn check_duplicate_fields(bytes: &[u8], q: &Query) -> Result<(), ApiError> {
    report_duplicate_fields(&duplicate_json_keys(bytes), q)
}

/// A JSON request body parsed, with `fieldValidation` applied to its duplicate keys, in one
/// pass over the text: what `serde_json::from_slice` followed by [`check_duplicate_fields`]
/// does, without parsing the body twice. Errors: 400 `error decoding JSON request body: ...`
/// for a body that does not parse, then the duplicate-field outcome.
pub fn parse_json_body(bytes: &[u8], q: &Query) -> Result<Value, ApiError> {
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
    struct Build<'a>(&'a mut Vec<String>);
    impl<'de> DeserializeSeed<'de> for Build<'_> {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Build<'_> {
        type Value = Value;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
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
    let mut de = json_deserializer(bytes)?;
    let value = Build(&mut dups).deserialize(&mut de)?;
    de.end()?;
    Ok((value, dups))
}

/// `fieldValidation` applied to the duplicate keys found in a JSON body.
fn report_duplicate_fields(dups: &[String], q: &Query) -> Result<(), ApiError> {
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

    /// The fast path (the decoder's ignored fields) finds and drops exactly what the round trip
    /// does, in the same order, for bodies without `null`; with a `null`, the round trip runs
    /// and drops known `null` fields silently.
    #[test]
    fn the_decoder_s_ignored_fields_are_the_round_trip_s_unknown_ones() {
        let r = Registry::builtins();
        let pods = r.lookup("", "v1", "pods").unwrap();
        let deploy = r.lookup("apps", "v1", "deployments").unwrap();
        let crds = r
            .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        let cases = [
            (
                &pods,
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"a": "b"}, "zz": 1},
                "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "i", "x": {"y": 1}}],
                         "aa": [1, 2], "restartPolicy": "Never"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "q": "r"}],
                           "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "i",
                                                  "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z", "w": 2}}}]},
                "extra": "x"}),
            ),
            (
                &deploy,
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"foo": 1, "selector": {"matchLabels": {"a": "b"}},
                         "template": {"spec": {"containers": [{"name": "c", "image": "i", "bar": true}]}}}}),
            ),
            (
                &crds,
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "as.x.io"},
                "spec": {"group": "x.io", "scope": "Namespaced", "what": 1,
                         "names": {"plural": "as", "kind": "A", "nope": "n"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "schema": {"openAPIV3Schema": {"type": "object", "default": {"k": 1},
                                                                      "properties": {"a": {"type": "string", "bogus": 1}}}}}]}}),
            ),
        ];
        for (def, body) in cases {
            let typed = typed::roundtrip(def, &body).unwrap();
            let (mut by_round_trip, mut found) = (body.clone(), vec![]);
            strip_unknown(&mut by_round_trip, &typed, &mut found);
            let mut by_decoder = body.clone();
            let ignored: Vec<String> = typed::ignored_fields(def, &body)
                .unwrap()
                .iter()
                .map(|steps| {
                    remove_steps(&mut by_decoder, steps);
                    render_field_steps(steps)
                })
                .collect();
            assert!(!found.is_empty(), "{found:?}");
            assert_eq!(ignored, found);
            assert_eq!(by_decoder, by_round_trip);
        }
        // A null: known or not, the field goes; only a non-null unknown one is reported.
        let mut b = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}], "nodeName": null, "foo": null, "bar": 1}});
        let warn = Query::parse(None);
        check_unknown_fields(&pods, &mut b, &warn).unwrap();
        assert_eq!(warn.warnings(), ["unknown field \"spec.bar\""]);
        assert_eq!(
            b["spec"],
            json!({"containers": [{"name": "c", "image": "i"}]})
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
}
