//! Label and field selectors: the `?labelSelector=` and `?fieldSelector=` filters of list and watch.
//!
//! A client that wants only some objects of a collection sends a selector with its list or watch
//! request. The API server parses it once, before it answers (a parse error is a **400 BadRequest**,
//! sent before any watch stream starts), and then asks the parsed selector about every object.
//!
//! # Label selectors (`labels.Parse` in apimachinery)
//!
//! ```text
//! selector    := requirement ("," requirement)*          (all requirements must hold: AND)
//! requirement := KEY                                      exists
//!              | "!" KEY                                  does not exist
//!              | KEY ("=" | "==" | "!=") VALUE            equality
//!              | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"   set-based
//!              | KEY (">" | "<") INTEGER                  numeric comparison
//! ```
//!
//! Two rules surprise people: `!=` and `notin` **match objects that do not carry the key at all**
//! (an absent label is "not equal" to anything), and the empty selector matches everything. Keys are
//! qualified names (`[prefix/]name`, the name at most 63 characters of `[A-Za-z0-9_.-]` starting
//! and ending alphanumeric); values follow the same rule and may be empty (`env in (prod,,dev)`).
//!
//! # Field selectors (`fields.ParseSelector`)
//!
//! Field selectors are much simpler: comma-joined `path=value`, `path==value` or `path!=value` terms,
//! with `\,`, `\=` and `\\` escapes in values. The path is a dotted JSON path into the object
//! (`metadata.name`, `involvedObject.uid`, `status.phase`, `spec.nodeName`). A missing field reads
//! as the empty string, so `spec.nodeName=` selects unscheduled pods and `status.phase!=Running`
//! selects pods without a phase. The real server supports only a fixed set of paths per kind and
//! rejects the rest with 400 `field label not supported: <path>`; that policy belongs to the
//! caller, which can ask [`FieldSelector::unsupported_field`] about its allowed set. One alias is
//! built in, as in the events storage: `source` means `source.component`.
//!
//! Both selectors are plain values: parse once, then call `matches` as often as needed.
//! [`LabelSelector::from_json`] builds one from the structured `metav1.LabelSelector` of a
//! Deployment's `spec.selector`; its `Display` form is the string `kubectl` shows.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use apimachinery::labels::Selector;

/// A parsed label selector: the AND of its requirements. The default (empty) selector matches
/// every object. The grammar, the validation of keys and values and the matching are
/// `apimachinery::labels`, shared with the controller library's listers; this type adds what
/// only the server needs: reading the structured selector of a stored JSON object and matching
/// an object's `metadata.labels`, with errors as the strings a Status message carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Selector);

impl LabelSelector {
    /// Parses a `labelSelector` query value. The empty string (or only whitespace) gives the
    /// selector that matches everything. Errors name the selector and the offending term.
    pub fn parse(input: &str) -> Result<LabelSelector, String> {
        Selector::parse(input)
            .map(LabelSelector)
            .map_err(|e| e.to_string())
    }

    /// Converts a structured `metav1.LabelSelector` (`{"matchLabels": {...}, "matchExpressions":
    /// [{"key", "operator": In|NotIn|Exists|DoesNotExist, "values"}]}`), as found in
    /// `spec.selector` of Deployments and StatefulSets. `null` or `{}` selects everything.
    /// Errors name the offending field. Its `Display` form is the string the `/scale`
    /// subresource reports in `status.selector`.
    pub fn from_json(selector: &Value) -> Result<LabelSelector, String> {
        if selector.is_null() {
            return Ok(LabelSelector::default());
        }
        if !selector.is_object() {
            return Err(format!(
                "a label selector must be an object, got {selector}"
            ));
        }
        let typed: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(selector.clone())
                .map_err(|e| format!("invalid label selector {selector}: {e}"))?;
        Selector::from_label_selector(&typed)
            .map(LabelSelector)
            .map_err(|e| e.to_string())
    }

    /// Does every requirement hold for `labels`?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }

    /// Reads `metadata.labels` of a JSON object (missing labels are an empty set) and matches.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.0.is_everything() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.0.matches(&labels)
    }

    /// True when the selector has no requirements and so matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_everything()
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The dotted path, as written (`metadata.name`).
    pub field: String,
    /// `true` for `!=`, `false` for `=` / `==`.
    pub negated: bool,
    /// The (unescaped) value compared with.
    pub value: String,
}

/// A parsed field selector: the AND of its terms. The default selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Splits on commas not preceded by a backslash escape.
fn split_unescaped(input: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in input.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&input[start..i]);
            start = i + 1;
        }
    }
    parts.push(&input[start..]);
    parts
}

fn unescape_field_value(term: &str, value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(other) => {
                    return Err(format!(
                        "invalid field selector term {term:?}: invalid escape sequence '\\{other}'"
                    ));
                }
                None => {
                    return Err(format!(
                        "invalid field selector term {term:?}: value ends with an unfinished escape"
                    ));
                }
            }
        } else if c == ',' || c == '=' {
            return Err(format!(
                "invalid field selector term {term:?}: unescaped '{c}' in value {value:?}"
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The value a field selector sees at a dotted `path` in `obj`: strings as they are, numbers and
/// booleans rendered, anything missing or null as the empty string, except the fields below.
///
/// kube-apiserver computes selectable fields from the typed, defaulted object
/// (`ToSelectableFields` of each registry): a Go `bool` has no "absent", so a node without
/// `spec.unschedulable` is `spec.unschedulable=false` (`strconv.FormatBool`), and a pod without
/// `spec.hostNetwork` is `spec.hostNetwork=false`; a pod's `spec.restartPolicy` and
/// `spec.schedulerName` are defaulted before they are stored (`Always`, `default-scheduler`).
/// This server stores built-in objects undefaulted, so those fields answer their Go value here.
pub fn field_value(obj: &Value, path: &str) -> String {
    let path = match path {
        "source" => "source.component",
        other => other,
    };
    let absent = || -> String {
        match path {
            "spec.unschedulable" | "spec.hostNetwork" => "false",
            "spec.restartPolicy" if obj["kind"] == "Pod" => "Always",
            "spec.schedulerName" if obj["kind"] == "Pod" => "default-scheduler",
            _ => "",
        }
        .to_owned()
    };
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(next) => cur = next,
            None => return absent(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => absent(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value (`a=b,c!=d`). The empty string matches everything.
    /// Errors name the term that could not be understood.
    pub fn parse(input: &str) -> Result<FieldSelector, String> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector { requirements });
        }
        for term in split_unescaped(input, ',') {
            // The earliest operator wins; at one position `!=` and `==` beat `=`.
            let mut found = None;
            for (i, _) in term.char_indices() {
                let rest = &term[i..];
                if let Some(op) = ["!=", "==", "="]
                    .into_iter()
                    .find(|op| rest.starts_with(op))
                {
                    found = Some((i, op));
                    break;
                }
            }
            let Some((i, op)) = found else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{term}': expected one of '=', '==', '!='"
                ));
            };
            let field = term[..i].trim();
            if field.is_empty() {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{term}': missing field name"
                ));
            }
            let value = unescape_field_value(term, &term[i + op.len()..])?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                negated: op == "!=",
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Does every term hold for `obj`? See [`field_value`] for how a path is read.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(obj, &r.field) == r.value) != r.negated)
    }

    /// The first field not in `allowed`, for the server's `field label not supported: <field>`
    /// answer. `None` when every field is allowed.
    pub fn unsupported_field(&self, allowed: &[&str]) -> Option<&str> {
        self.requirements
            .iter()
            .map(|r| r.field.as_str())
            .find(|f| !allowed.contains(f))
    }

    /// The name demanded by a `metadata.name=<n>` term, if any (watch on an object URL compares
    /// it with the name in the URL).
    pub fn required_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && !r.negated)
            .map(|r| r.value.as_str())
    }

    /// The selector `metadata.name=<name>`, which the server uses for a watch on an object URL.
    pub fn for_name(name: &str) -> FieldSelector {
        FieldSelector {
            requirements: vec![FieldRequirement {
                field: "metadata.name".into(),
                negated: false,
                value: name.into(),
            }],
        }
    }

    /// True when the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed terms, in the order written.
    #[cfg(test)]
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matches_object_reads_metadata_labels() {
        let s = LabelSelector::parse("app=web").unwrap();
        assert!(s.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
        assert!(!s.matches_object(&json!({"metadata": {}})));
        assert!(LabelSelector::default().matches_object(&json!({})));
    }

    fn event() -> Value {
        json!({
            "metadata": {"name": "at.1", "namespace": "default"},
            "involvedObject": {"kind": "At", "name": "example", "namespace": "default", "uid": "u-1"},
            "source": {"component": "cnat"},
            "count": 3,
            "type": "Normal"
        })
    }

    #[test]
    fn field_selector_like_kubectl_describe() {
        let s = FieldSelector::parse(
            "involvedObject.kind=At,involvedObject.name=example,involvedObject.namespace=default,involvedObject.uid=u-1",
        )
        .unwrap();
        assert!(s.matches(&event()));
        let s = FieldSelector::parse("involvedObject.uid=u-2").unwrap();
        assert!(!s.matches(&event()));
    }

    #[test]
    fn absent_go_booleans_and_pod_defaults_read_as_their_go_values() {
        let node = json!({"kind": "Node", "metadata": {"name": "n"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable==false")
                .unwrap()
                .matches(&node)
        );
        assert!(
            !FieldSelector::parse("spec.unschedulable=true")
                .unwrap()
                .matches(&node)
        );
        let cordoned = json!({"kind": "Node", "spec": {"unschedulable": true}});
        assert!(
            FieldSelector::parse("spec.unschedulable!=false")
                .unwrap()
                .matches(&cordoned)
        );
        let pod = json!({"kind": "Pod", "spec": {"containers": []}});
        assert!(FieldSelector::parse("spec.hostNetwork=false,spec.restartPolicy=Always,spec.schedulerName=default-scheduler")
            .unwrap()
            .matches(&pod));
        let event = json!({"kind": "Event", "type": null});
        assert!(FieldSelector::parse("type=").unwrap().matches(&event));
    }

    #[test]
    fn field_selector_operators_and_missing_fields() {
        assert!(
            FieldSelector::parse("metadata.name==at.1")
                .unwrap()
                .matches(&event())
        );
        assert!(
            !FieldSelector::parse("metadata.name!=at.1")
                .unwrap()
                .matches(&event())
        );
        assert!(
            FieldSelector::parse("status.phase!=Running")
                .unwrap()
                .matches(&event())
        );
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(&event())
        );
        assert!(FieldSelector::parse("count=3").unwrap().matches(&event()));
        assert!(
            FieldSelector::parse("source=cnat")
                .unwrap()
                .matches(&event())
        );
        assert!(FieldSelector::parse("").unwrap().matches(&event()));
    }

    #[test]
    fn field_selector_escapes() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(s.requirements()[0].value, r"a,b=c\d");
        assert!(s.matches(&json!({"metadata": {"name": r"a,b=c\d"}})));
        let err = FieldSelector::parse(r"metadata.name=a\x").unwrap_err();
        assert!(err.contains("invalid escape"), "{err}");
    }

    #[test]
    fn field_selector_errors() {
        let err = FieldSelector::parse("metadata.name").unwrap_err();
        assert!(err.contains("can't understand 'metadata.name'"), "{err}");
        let err = FieldSelector::parse("=x").unwrap_err();
        assert!(err.contains("missing field name"), "{err}");
        let err = FieldSelector::parse("a=b=c").unwrap_err();
        assert!(err.contains("unescaped '='"), "{err}");
    }

    #[test]
    fn field_selector_helpers() {
        let s = FieldSelector::parse("metadata.name=x,spec.foo=y").unwrap();
        assert_eq!(s.required_name(), Some("x"));
        assert_eq!(
            s.unsupported_field(&["metadata.name", "metadata.namespace"]),
            Some("spec.foo")
        );
        assert_eq!(s.unsupported_field(&["metadata.name", "spec.foo"]), None);
        assert!(FieldSelector::for_name("x").matches(&json!({"metadata": {"name": "x"}})));
    }

    #[test]
    fn structured_selectors() {
        let s = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert_eq!(s.to_string(), "app=web,!canary,tier in (be,fe)");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("canary", "1")])));
        assert!(LabelSelector::from_json(&Value::Null).unwrap().is_empty());
        assert!(LabelSelector::from_json(&json!({})).unwrap().is_empty());
        let err = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        )
        .unwrap_err();
        assert!(
            err.contains("matchExpressions[key=a]") && err.contains("\"Gt\""),
            "{err}"
        );
        let err = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        )
        .unwrap_err();
        assert!(err.contains("at least one value is required"), "{err}");
        let err = LabelSelector::from_json(&json!({"matchLabels": {"a": 1}})).unwrap_err();
        assert!(err.contains("expected a string"), "{err}");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// Parsing arbitrary text never panics.
            #[test]
            fn parse_never_panics(text in "\\PC{0,40}") {
                let _ = LabelSelector::parse(&text);
                let _ = FieldSelector::parse(&text);
            }
        }
    }
}
