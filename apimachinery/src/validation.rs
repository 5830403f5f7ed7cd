//! # validation: the API server's rules for names, labels, annotations and object metadata
//!
//! Kubernetes checks every object's `metadata` with the same small set of rules, written once in
//! `k8s.io/apimachinery/pkg/util/validation` (the string rules: DNS-1123 labels and subdomains,
//! qualified names, label values) and `k8s.io/apimachinery/pkg/api/validation/objectmeta.go`
//! (how they apply to `metadata`: labels, annotations, finalizers, ownerReferences). A client
//! that validates before it sends (kubectl `--validate`, a controller building a name from
//! user input) and the server that validates on intake must agree character for character, so
//! both sides of this workspace use this module.
//!
//! Two layers:
//!
//! * **string rules** (`is_*`) take a string and return the list of reasons it fails, empty
//!   when it is valid. The texts are the real ones (`MaxLenError`, `RegexError`, `EmptyError`),
//!   so `is_dns1123_subdomain("Bad")` says exactly what kube-apiserver says.
//! * **metadata rules** (`validate_*`) take a part of an object (as `serde_json::Value`) and
//!   return [`FieldError`]s: a field path (`metadata.labels`), a kind (`FieldValueInvalid`, …)
//!   and the message body (`Invalid value: "a b/c?": name part must consist of …`), which the
//!   server turns into the `causes` of a 422 `Invalid` Status.
//!
//! The rules are hand-written character checks equivalent to the regular expressions quoted in
//! the messages (no regex engine needed):
//!
//! | rule | regex (as quoted) | max |
//! |---|---|---|
//! | DNS-1123 label | `[a-z0-9]([-a-z0-9]*[a-z0-9])?` | 63 |
//! | DNS-1123 subdomain | label `(\.` label `)*` | 253 |
//! | qualified name (label key, annotation key, finalizer) | optional subdomain prefix `/` then `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` | 63 (name part) |
//! | label value | empty or the qualified-name part | 63 |
//!
//! Annotations may total at most 256 KiB (keys plus values, `TotalAnnotationSizeLimitB`).

use serde_json::Value;

/// `DNS1123LabelMaxLength`.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// `DNS1123SubdomainMaxLength`.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// `qualifiedNameMaxLength`: the name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// `LabelValueMaxLength`.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// `TotalAnnotationSizeLimitB`: keys plus values of all annotations.
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * 1024;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `validation.EmptyError()`.
pub fn empty_error() -> String {
    "must be non-empty".to_owned()
}

/// `validation.MaxLenError(n)`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `validation.RegexError(msg, fmt, examples...)`, byte for byte (including the double space
/// before each ` or `).
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push('\'');
        s.push_str(e);
        s.push_str("', ");
    }
    s.push_str("regex used for validation is '");
    s.push_str(fmt);
    s.push_str("')");
    s
}

fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn matches_dns_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns_label)
}

fn matches_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// `IsDNS1123Label`: a lowercase RFC 1123 label (namespace names, container names, port names).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = vec![];
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns_label(value) {
        if matches_dns_subdomain(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: dot-separated labels, at most 253 characters (most object names).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = vec![];
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsQualifiedName`: `[prefix/]name` where the prefix is a DNS-1123 subdomain and the name
/// part at most 63 alphanumerics, `-`, `_`, `.` (label keys, annotation keys, finalizers).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = vec![];
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 characters of the qualified-name alphabet.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = vec![];
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// One failed check, as `field.Error`: where, what kind, and the message body the Status cause
/// carries (`Invalid value: "x": detail`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The `StatusCause.reason`: `FieldValueInvalid`, `FieldValueRequired`, `FieldValueTooLong`,
    /// `FieldValueNotSupported`, `FieldValueForbidden`, `FieldValueDuplicate`.
    pub reason: &'static str,
    /// The field path, `metadata.labels`, `spec.containers[0].name`.
    pub field: String,
    /// `field.Error.ErrorBody()`: the message without the field path.
    pub message: String,
}

impl FieldError {
    /// `field.Invalid(path, value, detail)` with a string value.
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", go_quote(value)),
        }
    }

    /// `field.Invalid(path, value, detail)` with a non-string value, printed as JSON (numbers
    /// and booleans bare, structures as the JSON the server would print).
    pub fn invalid_value(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let shown = match value {
            Value::String(s) => go_quote(s),
            Value::Null => "null".to_owned(),
            other => other.to_string(),
        };
        FieldError {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {shown}: {detail}"),
        }
    }

    /// `field.Required(path, detail)`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        FieldError {
            reason: "FieldValueRequired",
            field: field.into(),
            message,
        }
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {detail}"),
        }
    }

    /// `field.TooLong(path, _, max)` for byte limits.
    pub fn too_long_bytes(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: format!("Too long: may not be more than {max} bytes"),
        }
    }

    /// `field.NotSupported(path, value, valid)`.
    pub fn not_supported(field: impl Into<String>, value: &str, valid: &[&str]) -> Self {
        let list: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
        FieldError {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_quote(value),
                list.join(", ")
            ),
        }
    }

    /// `field.Duplicate(path, value)`.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        let shown = match value {
            Value::String(s) => go_quote(s),
            other => other.to_string(),
        };
        FieldError {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {shown}"),
        }
    }

    /// `field.Error.Error()`: `path: body`, as the Status message lists it.
    pub fn full(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// A string as Go's `%q` prints it (JSON escaping is the same for the characters that occur in
/// names and labels).
pub fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn string_map(v: &Value) -> Vec<(&str, &str)> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// `ValidateLabels`: every key a qualified name, every value a label value. `field` is the path
/// of the map (`metadata.labels`, `spec.selector.matchLabels`).
pub fn validate_labels(labels: &Value, field: &str) -> Vec<FieldError> {
    let mut out = vec![];
    for (k, v) in string_map(labels) {
        for m in is_qualified_name(k) {
            out.push(FieldError::invalid(field, k, &m));
        }
        for m in is_valid_label_value(v) {
            out.push(FieldError::invalid(field, v, &m));
        }
    }
    out
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitively) and keys plus values
/// total at most [`TOTAL_ANNOTATION_SIZE_LIMIT_B`].
pub fn validate_annotations(annotations: &Value, field: &str) -> Vec<FieldError> {
    let mut out = vec![];
    let mut total = 0usize;
    for (k, v) in string_map(annotations) {
        for m in is_qualified_name(&k.to_ascii_lowercase()) {
            out.push(FieldError::invalid(field, k, &m));
        }
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        out.push(FieldError::too_long_bytes(
            field,
            TOTAL_ANNOTATION_SIZE_LIMIT_B,
        ));
    }
    out
}

/// `ValidateFinalizers`: each a qualified name; `orphan` and `foregroundDeletion` not both.
pub fn validate_finalizers(finalizers: &Value, field: &str) -> Vec<FieldError> {
    let mut out = vec![];
    let list: Vec<&str> = finalizers
        .as_array()
        .map(|a| a.iter().map(|f| f.as_str().unwrap_or_default()).collect())
        .unwrap_or_default();
    for f in &list {
        for m in is_qualified_name(f) {
            out.push(FieldError::invalid(field, f, &m));
        }
    }
    if list.contains(&"orphan") && list.contains(&"foregroundDeletion") {
        out.push(FieldError::invalid_value(
            field,
            finalizers,
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    out
}

/// `ValidateOwnerReferences`: every reference names an `apiVersion` with a version, a `kind`, a
/// `name` and a `uid`; events cannot own anything; at most one reference has `controller: true`.
pub fn validate_owner_references(refs: &Value, field: &str) -> Vec<FieldError> {
    let mut out = vec![];
    let Some(list) = refs.as_array() else {
        return out;
    };
    let mut first_controller: Option<String> = None;
    for r in list {
        let s = |k: &str| r[k].as_str().unwrap_or_default();
        let api_version = s("apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() {
            out.push(FieldError::invalid(
                format!("{field}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if s("kind").is_empty() {
            out.push(FieldError::invalid(
                format!("{field}.kind"),
                s("kind"),
                "kind must not be empty",
            ));
        }
        if s("name").is_empty() {
            out.push(FieldError::invalid(
                format!("{field}.name"),
                s("name"),
                "name must not be empty",
            ));
        }
        if s("uid").is_empty() {
            out.push(FieldError::invalid(
                format!("{field}.uid"),
                s("uid"),
                "uid must not be empty",
            ));
        }
        if s("kind") == "Event" && (api_version == "v1" || api_version == "events.k8s.io/v1") {
            let (group, version) = match api_version.split_once('/') {
                Some((g, v)) => (g, v),
                None => ("", api_version),
            };
            out.push(FieldError::invalid_value(
                field,
                r,
                &format!("{group}/{version}, Kind=Event is disallowed from being an owner"),
            ));
        }
        if r["controller"].as_bool() == Some(true) {
            let this = format!("{}/{}", s("kind"), s("name"));
            match &first_controller {
                Some(first) => out.push(FieldError::invalid_value(
                    field,
                    refs,
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                    ),
                )),
                None => first_controller = Some(this),
            }
        }
    }
    out
}

/// The metadata checks of `ValidateObjectMeta` other than the name (whose rule depends on the
/// kind): `generateName`'s prefix is left to the name check of the generated name; labels,
/// annotations, finalizers and ownerReferences are checked here.
pub fn validate_object_meta(meta: &Value) -> Vec<FieldError> {
    let mut out = vec![];
    out.extend(validate_labels(&meta["labels"], "metadata.labels"));
    out.extend(validate_annotations(
        &meta["annotations"],
        "metadata.annotations",
    ));
    out.extend(validate_owner_references(
        &meta["ownerReferences"],
        "metadata.ownerReferences",
    ));
    out.extend(validate_finalizers(
        &meta["finalizers"],
        "metadata.finalizers",
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dns_labels_and_subdomains_with_the_real_messages() {
        assert!(is_dns1123_label("cnat-1").is_empty());
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            is_dns1123_label("Bad"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert!(is_dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(is_dns1123_subdomain("a..b").len(), 1);
        assert_eq!(is_dns1123_subdomain("-a").len(), 1);
        let long = "a".repeat(254);
        assert_eq!(
            is_dns1123_subdomain(&long),
            vec!["must be no more than 253 characters"]
        );
        assert_eq!(is_dns1123_label(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn qualified_names_split_prefix_and_name() {
        assert!(is_qualified_name("app").is_empty());
        assert!(is_qualified_name("example.com/My_Name.1").is_empty());
        let e = is_qualified_name("a b/c?");
        assert_eq!(e.len(), 2);
        assert!(e[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert!(e[1].starts_with(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used"
        ));
        assert_eq!(
            is_qualified_name("/x"),
            vec!["prefix part must be non-empty"]
        );
        assert!(is_qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
    }

    #[test]
    fn label_values_are_short_and_plain() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("v1.2_x-y").is_empty());
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert_eq!(is_valid_label_value("-a").len(), 1);
        let errs = validate_labels(&json!({"app": "a".repeat(64)}), "metadata.labels");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.labels");
        assert!(errs[0].message.starts_with("Invalid value: \"aaaa"));
        assert!(
            errs[0]
                .message
                .ends_with(": must be no more than 63 characters")
        );
    }

    #[test]
    fn annotations_total_at_most_256_kib() {
        let ok = json!({"a": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B - 1)});
        assert!(validate_annotations(&ok, "metadata.annotations").is_empty());
        let big = json!({"a": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B)});
        let e = validate_annotations(&big, "metadata.annotations");
        assert_eq!(
            e,
            vec![FieldError {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: "Too long: may not be more than 262144 bytes".into(),
            }]
        );
        // Keys are checked case-insensitively.
        assert!(validate_annotations(&json!({"Example.COM/Key": ""}), "m").is_empty());
    }

    #[test]
    fn owner_references_need_identity_and_one_controller() {
        let good = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]);
        assert!(validate_owner_references(&good, "metadata.ownerReferences").is_empty());
        let bad = json!([{"apiVersion": "apps/", "kind": "", "name": "", "uid": ""}]);
        let fields: Vec<String> = validate_owner_references(&bad, "o")
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, vec!["o.apiVersion", "o.kind", "o.name", "o.uid"]);
        let two = json!([
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}
        ]);
        let e = validate_owner_references(&two, "o");
        assert_eq!(e.len(), 1);
        assert!(e[0].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for A/a and B/b"
        ));
    }

    #[test]
    fn finalizers_are_qualified_names() {
        assert!(validate_finalizers(&json!(["example.com/f", "kubernetes"]), "f").is_empty());
        assert_eq!(validate_finalizers(&json!(["a b"]), "f").len(), 1);
        assert_eq!(
            validate_finalizers(&json!(["orphan", "foregroundDeletion"]), "f").len(),
            1
        );
    }
}
