//! Structural schemas of CustomResourceDefinitions: validation, pruning and the structural check.
//!
//! A CRD version carries an OpenAPI v3 schema (`spec.versions[].schema.openAPIV3Schema`). The real
//! API server does three things with it, and so does this module:
//!
//! 1. **When the CRD is written**, it checks the schema is *structural*
//!    ([`check_structural`]): every node says its `type` (except where
//!    `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields` stand in for it), and
//!    none of the JSON-Schema features that make a schema non-structural appear (`$ref`,
//!    `definitions`, `dependencies`, `additionalItems`, `patternProperties`, `uniqueItems: true`,
//!    `additionalProperties` next to `properties`, `additionalProperties: false`). A structural
//!    schema says exactly which fields exist, which is what makes pruning possible.
//! 2. **When a custom resource is written**, it first **prunes** ([`prune`]) every field the
//!    schema does not mention, unless the node says `x-kubernetes-preserve-unknown-fields: true`
//!    (the root's `apiVersion`, `kind` and `metadata` are always kept, as are those of
//!    `x-kubernetes-embedded-resource` objects) — so a typo'd field silently disappears rather
//!    than being stored — and
//! 3. then **validates** ([`validate`]) what is left: `type`, `nullable`, `required`, `enum`,
//!    `format` (`date-time`, `date`, `byte`, `ipv4`, `ipv6`, `cidr`, `uuid`),
//!    `minimum`/`maximum` with their `exclusive*` flags, `multipleOf`, `minLength`/`maxLength`,
//!    `pattern`, `minItems`/`maxItems`, `minProperties`/`maxProperties`, `items`,
//!    `properties`, `additionalProperties`, `x-kubernetes-int-or-string`,
//!    `x-kubernetes-embedded-resource` (which requires `apiVersion` and `kind`),
//!    `x-kubernetes-list-type: set|map` (no duplicate items, or no two items with the same
//!    `x-kubernetes-list-map-keys`), and `allOf`/`anyOf`/`oneOf`/`not` for value checks.
//!    Every failure becomes a [`FieldError`]; the server answers **422 Invalid** with one
//!    `StatusCause` per error ([`FieldError::to_cause`]).
//!
//! Before pruning, [`apply_defaults`] fills in the schema's `default` values, as the real server
//! does when it decodes a body (and when it reads stored objects).
//!
//! # Error wording
//!
//! The real server runs the schema through kube-openapi's validator and converts each result to
//! an apimachinery `field.Error` (`kubeOpenAPIResultToFieldErrors`). This module produces the same
//! texts, so tests and users see what a real cluster prints:
//!
//! ```text
//! spec.command: Required value
//! spec.schedule: Invalid value: "tomorrow": spec.schedule in body must be of type date-time: "tomorrow"
//! spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"
//! spec.mode: Unsupported value: "fast": supported values: "on", "off"
//! spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long
//! spec.name: Too long: may not be more than 5 bytes
//! spec.items: Too many: 4: must have at most 3 items
//! spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1
//! ```
//!
//! Paths are rendered like `field.Path`: `spec.schedulingConfig[0].startTime`, map keys of
//! `additionalProperties` maps as `spec.labels.key` (kube-openapi's naming). Metadata of the root
//! object is validated by the server's ObjectMeta rules, not by the schema, so the root's
//! `apiVersion`, `kind` and `metadata` are skipped here.
//!
//! CEL rules (`x-kubernetes-validations`) are compiled and run by [`crate::apiextensions::cel_rules`], after
//! this module's keywords. Not done here: the `metadata` restrictions of embedded resources, and
//! ratcheting of these keywords (tolerating unchanged invalid values on update).

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;
use serde_json::{Map, Value};

/// The kind of a field error, as apimachinery's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required field is missing (`FieldValueRequired`, "Required value").
    Required,
    /// A value is malformed or out of range (`FieldValueInvalid`, "Invalid value").
    Invalid,
    /// A value has the wrong JSON type or format (`FieldValueTypeInvalid`, "Invalid value").
    TypeInvalid,
    /// A value is not one of an enumeration (`FieldValueNotSupported`, "Unsupported value").
    NotSupported,
    /// A string is too long (`FieldValueTooLong`, "Too long").
    TooLong,
    /// A list or map has too many entries (`FieldValueTooMany`, "Too many").
    TooMany,
    /// A field may not be set (`FieldValueForbidden`, "Forbidden").
    Forbidden,
    /// A list item repeats another (`FieldValueDuplicate`, "Duplicate value").
    Duplicate,
}

impl FieldErrorKind {
    /// The machine-readable `StatusCause.reason`.
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }

    /// The human-readable type, as `field.ErrorType.String()`.
    pub fn label(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::Duplicate => "Duplicate value",
        }
    }
}

/// One validation failure at one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path, e.g. `spec.schedulingConfig[0].startTime`.
    pub path: String,
    /// What kind of failure.
    pub kind: FieldErrorKind,
    /// The explanation after the value (may be empty).
    pub detail: String,
    /// The offending value, shown for the kinds that show one (`Invalid`, `TypeInvalid`,
    /// `NotSupported`, `TooMany`).
    pub value: Option<Value>,
}

/// Renders a bad value as apimachinery does: strings quoted, numbers and booleans bare,
/// everything else as JSON.
fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}")),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

impl FieldError {
    fn new(
        path: &str,
        kind: FieldErrorKind,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            path: if path.is_empty() {
                "<root>".to_string()
            } else {
                path.to_string()
            },
            kind,
            detail: detail.into(),
            value,
        }
    }

    /// The part after the path: `Required value`, `Invalid value: "x": <detail>`, ... This is the
    /// `message` of the error's `StatusCause`.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.value) {
            (FieldErrorKind::Required | FieldErrorKind::TooLong | FieldErrorKind::Forbidden, _)
            | (_, None) => self.kind.label().to_string(),
            (kind, Some(v)) => format!("{}: {}", kind.label(), render_value(v)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The full message, `path: body`, as the API server prints it in an Invalid status.
    pub fn message(&self) -> String {
        format!("{}: {}", self.path, self.body())
    }

    /// The `metav1.StatusCause` for a 422 Invalid status.
    pub fn to_cause(&self) -> StatusCause {
        StatusCause {
            field: Some(self.path.clone()),
            message: Some(self.body()),
            reason: Some(self.kind.reason().to_string()),
        }
    }
}

/// The message of a 422 Invalid status for `kind` `name` with these errors, as
/// `apierrors.NewInvalid` writes it: `At.cnat.example.com "x" is invalid: spec.a: Required value`
/// (several errors are listed in brackets, comma-separated).
#[cfg(test)]
pub fn invalid_message(qualified_kind: &str, name: &str, errors: &[FieldError]) -> String {
    let list = match errors {
        [one] => one.message(),
        many => format!(
            "[{}]",
            many.iter()
                .map(FieldError::message)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{qualified_kind} {name:?} is invalid: {list}")
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn number(schema: &Value, name: &str) -> Option<f64> {
    schema.get(name).and_then(Value::as_f64)
}

fn count(schema: &Value, name: &str) -> Option<u64> {
    schema.get(name).and_then(Value::as_u64)
}

/// Formats a number like Go's `%v` of a float64 (`1`, `1.5`).
fn render_number(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

/// Validates `obj` (a whole custom resource) against `schema` (an `openAPIV3Schema`).
/// Returns every failure; an empty vector means valid. See the module docs for the keywords and
/// the wording.
pub fn validate(schema: &Value, obj: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_node(schema, obj, "", true, &mut errors);
    errors
}

/// Validates one value against one schema node, in this order:
/// the type (a wrong type stops here), `enum`, the keywords of the value's kind (string,
/// number, array, object), then the combinators `allOf`, `anyOf`, `oneOf`, `not`.
fn validate_node(
    schema: &Value,
    value: &Value,
    path: &str,
    root: bool,
    errors: &mut Vec<FieldError>,
) {
    let Some(schema_map) = schema.as_object() else {
        return;
    };
    if schema_map.is_empty() {
        return;
    }
    let display = if path.is_empty() { "." } else { path };
    if !type_matches(schema, value, path, display, errors) {
        return;
    }
    check_enum(schema, value, path, errors);
    match value {
        Value::String(s) => validate_string(schema, s, path, display, errors),
        Value::Number(n) => {
            if let Some(f) = n.as_f64() {
                validate_number(schema, f, value, path, display, errors);
            }
        }
        Value::Array(items) => validate_array(schema, items, path, display, errors),
        Value::Object(map) => validate_object(schema, map, path, display, root, errors),
        _ => {}
    }
    validate_combinators(schema, value, path, display, root, errors);
}

/// The type check: `type` (an integer is a `number` too), `x-kubernetes-int-or-string`, and
/// `null`, which only `nullable` allows. False (with the `Invalid type` error pushed) when the
/// value is of another type, or is an allowed or refused `null`: nothing more is checked then.
fn type_matches(
    schema: &Value,
    value: &Value,
    path: &str,
    display: &str,
    errors: &mut Vec<FieldError>,
) -> bool {
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    // Null handled first: only `nullable` allows it.
    if value.is_null() {
        if !flag(schema, "nullable") && (schema.get("type").is_some() || int_or_string) {
            let want = if int_or_string {
                "integer,string".to_string()
            } else {
                schema
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            errors.push(FieldError::new(
                path,
                FieldErrorKind::TypeInvalid,
                Some(Value::String("null".into())),
                format!("{display} in body must be of type {want}: \"null\""),
            ));
        }
        return false;
    }
    let have = json_type(value);
    if int_or_string {
        if have != "integer" && have != "string" {
            errors.push(FieldError::new(
                path,
                FieldErrorKind::TypeInvalid,
                Some(Value::String(have.into())),
                format!("{display} in body must be of type integer,string: \"{have}\""),
            ));
            return false;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let ok = want == have || (want == "number" && have == "integer");
        if !ok {
            errors.push(FieldError::new(
                path,
                FieldErrorKind::TypeInvalid,
                Some(Value::String(have.into())),
                format!("{display} in body must be of type {want}: \"{have}\""),
            ));
            return false;
        }
    }
    true
}

/// `enum`: a value not in the list is `Unsupported value`, with the supported values quoted.
fn check_enum(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let supported = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
                other => serde_json::to_string(&other.to_string()).unwrap_or_default(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        errors.push(FieldError::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value.clone()),
            format!("supported values: {supported}"),
        ));
    }
}

/// An array: `maxItems` (`Too many`), `minItems`, each item against `items`, then the list
/// type (`set` and `map` items unique).
fn validate_array(
    schema: &Value,
    items: &[Value],
    path: &str,
    display: &str,
    errors: &mut Vec<FieldError>,
) {
    let len = items.len() as u64;
    if let Some(max) = count(schema, "maxItems")
        && len > max
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::TooMany,
            Some(Value::from(len)),
            format!(
                "must have at most {max} {}",
                if max == 1 { "item" } else { "items" }
            ),
        ));
    }
    if let Some(min) = count(schema, "minItems")
        && len < min
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(Value::from(len)),
            format!("{display} in body should have at least {min} items"),
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_node(item_schema, item, &format!("{path}[{i}]"), false, errors);
        }
    }
    validate_list_type(schema, items, path, errors);
}

/// The combinators. Only their value checks: the structure is given by the node itself.
/// `allOf` reports each sub-schema's errors; `anyOf`, `oneOf` and `not` report one error each
/// for the node.
fn validate_combinators(
    schema: &Value,
    value: &Value,
    path: &str,
    display: &str,
    root: bool,
    errors: &mut Vec<FieldError>,
) {
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for sub in all {
            validate_node(sub, value, path, root, errors);
        }
    }
    if let Some(Value::Array(any)) = schema.get("anyOf")
        && !any.is_empty()
        && !any.iter().any(|sub| validate_quiet(sub, value, path, root))
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(value.clone()),
            format!("{display} in body must match at least one schema (anyOf)"),
        ));
    }
    if let Some(Value::Array(one)) = schema.get("oneOf")
        && !one.is_empty()
    {
        let matching = one
            .iter()
            .filter(|sub| validate_quiet(sub, value, path, root))
            .count();
        if matching != 1 {
            errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(value.clone()),
                format!("{display} in body must match exactly one schema in oneOf"),
            ));
        }
    }
    if let Some(not) = schema.get("not")
        && validate_quiet(not, value, path, root)
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(value.clone()),
            format!("{display} in body must not validate the schema (not)"),
        ));
    }
}

/// `x-kubernetes-list-type: set` (items unique) and `map` (items unique by
/// `x-kubernetes-list-map-keys`): a repeated item is a `Duplicate value` at its index.
fn validate_list_type(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    let identity: Box<dyn Fn(&Value) -> Value> =
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Box::new(|item: &Value| item.clone()),
            Some("map") => {
                let keys: Vec<String> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                if keys.is_empty() {
                    return;
                }
                Box::new(move |item: &Value| {
                    let mut m = Map::new();
                    for k in &keys {
                        if let Some(v) = item.get(k) {
                            m.insert(k.clone(), v.clone());
                        }
                    }
                    Value::Object(m)
                })
            }
            _ => return,
        };
    let mut seen: Vec<Value> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let id = identity(item);
        if seen.contains(&id) {
            errors.push(FieldError::new(
                &format!("{path}[{i}]"),
                FieldErrorKind::Duplicate,
                Some(id),
                "",
            ));
        } else {
            seen.push(id);
        }
    }
}

fn validate_quiet(schema: &Value, value: &Value, path: &str, root: bool) -> bool {
    let mut errors = Vec::new();
    validate_node(schema, value, path, root, &mut errors);
    errors.is_empty()
}

/// The compiled sizes (the `regex` crate's `size_limit`) a pattern is tried at, smallest
/// first; the first that fits is what the pattern costs the cache (see [`compiled_pattern`]).
/// A pattern that fits none is refused: at CRD create ([`check_structural`]) as Go's `regexp`
/// refuses an expression too large, and, for a CRD stored before this check, on every value
/// (remembered, so never compiled twice).
const PATTERN_SIZE_TIERS: [usize; 4] = [64 << 10, 256 << 10, 1 << 20, 4 << 20];

/// What the kept patterns may cost together, in the sizes of [`PATTERN_SIZE_TIERS`].
const PATTERN_CACHE_BUDGET: usize = 64 << 20;

/// The kept patterns (each with what it costs) and their total cost.
#[derive(Default)]
struct Patterns {
    compiled: std::collections::HashMap<String, (Result<regex::Regex, String>, usize)>,
    cost: usize,
}

/// The compiled patterns, with the error of each that does not compile.
static PATTERNS: std::sync::LazyLock<std::sync::Mutex<Patterns>> =
    std::sync::LazyLock::new(Default::default);

/// An OpenAPI `pattern` (Go's RE2 syntax) as the `regex` crate's syntax with RE2's meaning.
///
/// The two dialects agree except in one way that matters for CRD patterns: RE2's Perl classes
/// are ASCII (`\w` is `[0-9A-Za-z_]`, `\d` is `[0-9]`, `\s` is `[\t\n\f\r ]`), the `regex`
/// crate's are Unicode (`\w` matches `é`, and `^[\w.-]{1,253}$` compiles to more than the
/// default 10 MiB). Each of the six, inside a class or not, becomes the ASCII class RE2 means
/// (the `regex` crate nests classes, so `[\w.-]` is `[[0-9A-Za-z_].-]`). `\\w` (an escaped
/// backslash, then `w`) is left alone.
pub fn re2_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('s') => out.push_str("[\\t\\n\\f\\r ]"),
            Some('S') => out.push_str("[^\\t\\n\\f\\r ]"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Compiles a pattern (RE2 meaning, [`re2_pattern`]) under the smallest tier it fits in, with
/// what it costs; Go's words when it does not compile.
fn compile_tiered(pattern: &str) -> (Result<regex::Regex, String>, usize) {
    let translated = re2_pattern(pattern);
    for limit in PATTERN_SIZE_TIERS {
        match regex::RegexBuilder::new(&translated)
            .size_limit(limit)
            .build()
        {
            Err(regex::Error::CompiledTooBig(_)) => continue,
            Ok(re) => return (Ok(re), limit.max(pattern.len())),
            Err(e) => return (Err(format!("error parsing regexp: {e}")), pattern.len()),
        }
    }
    (
        Err("error parsing regexp: expression too large".to_string()),
        pattern.len(),
    )
}

/// Why a CRD's `pattern` would not be served, if it would not: Go's `regexp.Compile` error, or
/// "expression too large" past the largest tier (`((a{100}){100}){100}`).
pub fn pattern_error(pattern: &str) -> Option<String> {
    compiled_pattern(pattern).err()
}

/// `pattern` compiled, from a process-wide cache, as kube-openapi's validator keeps it: its
/// `validate` package (go-openapi's, `rexp.go`) holds a map from pattern to compiled
/// `*regexp.Regexp`, filled on first use, so a CRD's patterns are compiled once, not on every
/// write. Compiling was the largest single cost of a custom-resource write here (7 % of the
/// server's CPU while 10,000 Ats ran).
///
/// Unlike Go's map this one is bounded, since CRDs (and so patterns) come from the network. A
/// pattern is compiled under the smallest limit of [`PATTERN_SIZE_TIERS`] it fits in, and that
/// limit (or its length, if longer) is what it costs; the kept patterns cost at most
/// [`PATTERN_CACHE_BUDGET`] together, and past it the cache starts over. A pattern that does not
/// compile, or fits no tier, is remembered with its error, so no value ever waits for a
/// pattern to be compiled again.
fn compiled_pattern(pattern: &str) -> Result<regex::Regex, String> {
    // Inserts and clears only: a poisoned map is still consistent.
    if let Some((hit, _)) = PATTERNS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .compiled
        .get(pattern)
    {
        return hit.clone();
    }
    // Compiled outside the lock: a slow pattern delays only its own request.
    let (compiled, cost) = compile_tiered(pattern);
    let mut cache = PATTERNS.lock().unwrap_or_else(|p| p.into_inner());
    if cache.cost + cost > PATTERN_CACHE_BUDGET {
        cache.compiled.clear();
        cache.cost = 0;
    }
    cache.cost += cost;
    if let Some((_, replaced)) = cache
        .compiled
        .insert(pattern.to_string(), (compiled.clone(), cost))
    {
        // Another request compiled the same pattern meanwhile.
        cache.cost -= replaced;
    }
    compiled
}

fn validate_string(
    schema: &Value,
    s: &str,
    path: &str,
    display: &str,
    errors: &mut Vec<FieldError>,
) {
    let chars = s.chars().count() as u64;
    if let Some(max) = count(schema, "maxLength")
        && chars > max
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::TooLong,
            None,
            format!(
                "may not be more than {max} {}",
                if max == 1 { "byte" } else { "bytes" }
            ),
        ));
    }
    if let Some(min) = count(schema, "minLength")
        && chars < min
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(Value::String(s.into())),
            format!("{display} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match compiled_pattern(pattern) {
            Ok(re) if !re.is_match(s) => errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(Value::String(s.into())),
                format!("{display} in body should match '{pattern}'"),
            )),
            Ok(_) => {}
            Err(e) => errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(Value::String(s.into())),
                format!("the schema's pattern '{pattern}' is not a valid regular expression: {e}"),
            )),
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !format_ok(format, s)
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::TypeInvalid,
            Some(Value::String(s.into())),
            format!(
                "{display} in body must be of type {format}: {}",
                render_value(&Value::String(s.into()))
            ),
        ));
    }
}

/// Checks the string formats of kube-openapi's format registry that matter here (`date-time`,
/// `date`, `byte`, `ipv4`, `ipv6`, `cidr`, `uuid`). Unknown formats pass, as in kube-openapi.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        // Go's `time.Time` reaches 9999-12-31T23:59:59Z; jiff's `Timestamp` stops a day short, so
        // a date, a time and an offset that parse are enough (RFC 3339's shape).
        "date-time" => {
            s.parse::<jiff::Timestamp>().is_ok()
                || jiff::fmt::temporal::Pieces::parse(s)
                    .is_ok_and(|p| p.time().is_some() && p.offset().is_some())
        }
        "date" => s.parse::<jiff::civil::Date>().is_ok() && s.len() == 10,
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            let bits = bits.parse::<u8>().ok();
            match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => bits.is_some_and(|b| b <= 32),
                Ok(std::net::IpAddr::V6(_)) => bits.is_some_and(|b| b <= 128),
                Err(_) => false,
            }
        }),
        "uuid" => {
            let b = s.as_bytes();
            b.len() == 36
                && b.iter().enumerate().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) {
                        *c == b'-'
                    } else {
                        c.is_ascii_hexdigit()
                    }
                })
        }
        // `int32`, `int64`, `double` and other names strfmt does not register are not checked,
        // as in kube-openapi (numeric formats apply to numbers, whose type is checked already).
        _ => true,
    }
}

fn validate_number(
    schema: &Value,
    f: f64,
    value: &Value,
    path: &str,
    display: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(max) = number(schema, "maximum") {
        let (bad, words) = if flag(schema, "exclusiveMaximum") {
            (f >= max, "less than")
        } else {
            (f > max, "less than or equal to")
        };
        if bad {
            errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(value.clone()),
                format!("{display} in body should be {words} {}", render_number(max)),
            ));
        }
    }
    if let Some(min) = number(schema, "minimum") {
        let (bad, words) = if flag(schema, "exclusiveMinimum") {
            (f <= min, "greater than")
        } else {
            (f < min, "greater than or equal to")
        };
        if bad {
            errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(value.clone()),
                format!("{display} in body should be {words} {}", render_number(min)),
            ));
        }
    }
    if let Some(m) = number(schema, "multipleOf")
        && m > 0.0
        && ((f / m) - (f / m).round()).abs() > 1e-9
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(value.clone()),
            format!(
                "{display} in body should be a multiple of {}",
                render_number(m)
            ),
        ));
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    display: &str,
    root: bool,
    errors: &mut Vec<FieldError>,
) {
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    let skip_meta =
        |key: &str| (root || embedded) && matches!(key, "apiVersion" | "kind" | "metadata");
    if embedded {
        for key in ["apiVersion", "kind"] {
            if map
                .get(key)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(FieldError::new(
                    &child(path, key),
                    FieldErrorKind::Required,
                    None,
                    "",
                ));
            }
        }
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) && !skip_meta(key) {
                errors.push(FieldError::new(
                    &child(path, key),
                    FieldErrorKind::Required,
                    None,
                    "",
                ));
            }
        }
    }
    let n = map.len() as u64;
    if let Some(max) = count(schema, "maxProperties")
        && n > max
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::TooMany,
            Some(Value::from(n)),
            format!(
                "must have at most {max} {}",
                if max == 1 { "item" } else { "items" }
            ),
        ));
    }
    if let Some(min) = count(schema, "minProperties")
        && n < min
    {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(Value::from(n)),
            format!("{display} in body should have at least {min} properties"),
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (key, value) in map {
        if skip_meta(key) {
            continue;
        }
        let key_path = child(path, key);
        if let Some(prop) = properties.and_then(|p| p.get(key)) {
            validate_node(prop, value, &key_path, false, errors);
        } else {
            match additional {
                Some(Value::Bool(false)) => errors.push(FieldError::new(
                    &key_path,
                    FieldErrorKind::Forbidden,
                    None,
                    format!("{key_path} in body is a forbidden property"),
                )),
                Some(s @ Value::Object(_)) => validate_node(s, value, &key_path, false, errors),
                _ => {}
            }
        }
    }
}

/// Removes every field of `obj` the schema does not specify, as the API server does before it
/// validates and stores a custom resource. The root's `apiVersion`, `kind` and `metadata` are
/// kept; so are fields under `x-kubernetes-preserve-unknown-fields: true`, and the
/// `apiVersion`/`kind`/`metadata` of `x-kubernetes-embedded-resource` objects.
pub fn prune(schema: &Value, obj: &mut Value) {
    prune_node(schema, obj, true);
}

fn prune_node(schema: &Value, value: &mut Value, root: bool) {
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    match value {
        Value::Object(map) => {
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            map.retain(|key, child| {
                if (root || embedded) && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                {
                    return true;
                }
                if let Some(prop) = properties.and_then(|p| p.get(key)) {
                    prune_node(prop, child, false);
                    return true;
                }
                match additional {
                    Some(s @ Value::Object(_)) => {
                        prune_node(s, child, false);
                        true
                    }
                    Some(Value::Bool(true)) => true,
                    _ => preserve,
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune_node(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default` values of the schema, as the API server does for custom resources when it
/// decodes a request body and when it reads stored objects: a property missing from an object
/// (or `null` where the property is not `nullable`) gets its schema's `default`, then defaulting
/// continues inside it; list items and `additionalProperties` values are defaulted by their
/// schemas. Defaults are applied before pruning and validation, so a default is itself validated.
pub fn apply_defaults(schema: &Value, obj: &mut Value) {
    match obj {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (key, prop) in props {
                    if let Some(default) = prop.get("default") {
                        let missing = match map.get(key) {
                            None => true,
                            Some(Value::Null) => !flag(prop, "nullable"),
                            Some(_) => false,
                        };
                        if missing {
                            map.insert(key.clone(), default.clone());
                        }
                    }
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(prop, child);
                    }
                }
            } else if let Some(additional @ Value::Object(_)) = schema.get("additionalProperties") {
                for child in map.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Checks that `schema` (an `openAPIV3Schema`) is structural, as the API server demands of
/// `apiextensions.k8s.io/v1` CRDs. Errors are messages with paths relative to the schema root,
/// e.g. `properties[spec].properties[replicas].type: Required value: must not be empty for
/// specified object fields`; the caller prefixes them with
/// `spec.versions[i].schema.openAPIV3Schema`.
pub fn check_structural(schema: &Value) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {}
        Some(other) => errors.push(format!(
            "type: Invalid value: \"{other}\": must be object at the root"
        )),
        None => errors.push("type: Required value: must be object at the root".to_string()),
    }
    structural_node(schema, "", true, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Checks one node of the schema, then the nodes under it. `specified`: the node is the schema
/// of a field (or the root), not a branch of `allOf`, `anyOf`, `oneOf` or `not`.
fn structural_node(schema: &Value, path: &str, specified: bool, errors: &mut Vec<String>) {
    let Some(map) = schema.as_object() else {
        errors.push(format!(
            "{}: Invalid value: must be a schema object",
            if path.is_empty() { "<root>" } else { path }
        ));
        return;
    };
    let at = |key: &str| key_path(path, key);
    check_keywords(schema, map, path, errors);
    check_type(schema, map, path, specified, errors);
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, sub) in props {
            structural_node(sub, &format!("{}[{name}]", at("properties")), true, errors);
        }
    }
    if let Some(items) = map.get("items") {
        if items.is_array() {
            errors.push(format!(
                "{}: Forbidden: items must be a schema object and not an array",
                at("items")
            ));
        } else {
            structural_node(items, &at("items"), true, errors);
        }
    }
    if let Some(sub @ Value::Object(_)) = map.get("additionalProperties") {
        structural_node(sub, &at("additionalProperties"), true, errors);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = map.get(key) {
            for (i, sub) in subs.iter().enumerate() {
                // Value validations in logical junctors need not repeat the type.
                structural_node(sub, &format!("{}[{i}]", at(key)), false, errors);
            }
        }
    }
    if let Some(not) = map.get("not") {
        structural_node(not, &at("not"), false, errors);
    }
}

/// Where `key` of the schema node at `path` is reported (`path.key`, or `key` at the root).
fn key_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The keywords a structural schema may not use (or not so): `$ref` and the like, unique
/// items, `additionalProperties` with `properties` or set to false, and an invalid `pattern`.
fn check_keywords(schema: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<String>) {
    let at = |key: &str| key_path(path, key);
    for forbidden in [
        "$ref",
        "definitions",
        "dependencies",
        "additionalItems",
        "patternProperties",
        "id",
        "$schema",
    ] {
        if map.contains_key(forbidden) {
            errors.push(format!(
                "{}: Forbidden: {forbidden} is not supported",
                at(forbidden)
            ));
        }
    }
    if flag(schema, "uniqueItems") {
        errors.push(format!(
            "{}: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            at("uniqueItems")
        ));
    }
    if map.contains_key("properties") && map.contains_key("additionalProperties") {
        errors.push(format!(
            "{}: Forbidden: additionalProperties and properties are mutual exclusive",
            at("additionalProperties")
        ));
    }
    if map.get("additionalProperties") == Some(&Value::Bool(false)) {
        errors.push(format!(
            "{}: Forbidden: additionalProperties cannot be set to false",
            at("additionalProperties")
        ));
    }
    if let Some(pattern) = map.get("pattern").and_then(Value::as_str)
        && let Some(e) = pattern_error(pattern)
    {
        // apiextensions' `ValidateCustomResourceDefinitionOpenAPISchema`.
        errors.push(format!(
            "{}: Invalid value: {}: must be a valid regular expression, but isn't: {e}",
            at("pattern"),
            apimachinery::validation::go_quote(pattern)
        ));
    }
}

/// The node's `type`: required on a specified field (unless it is int-or-string or keeps
/// unknown fields), empty for int-or-string, one of the JSON types, and an array needs `items`.
fn check_type(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    specified: bool,
    errors: &mut Vec<String>,
) {
    let at = |key: &str| key_path(path, key);
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let ty = map.get("type").and_then(Value::as_str);
    if specified && ty.is_none_or(str::is_empty) && !int_or_string && !preserve {
        errors.push(format!(
            "{}: Required value: must not be empty for specified object fields",
            at("type")
        ));
    }
    if int_or_string && ty.is_some() {
        errors.push(format!(
            "{}: Invalid value: \"{}\": must be empty to be structural when x-kubernetes-int-or-string is true",
            at("type"),
            ty.unwrap_or_default()
        ));
    }
    if let Some(t) = ty
        && !matches!(
            t,
            "object" | "array" | "string" | "integer" | "number" | "boolean"
        )
    {
        errors.push(format!(
            "{}: Unsupported value: \"{t}\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
            at("type")
        ));
    }
    if ty == Some("array") && !map.contains_key("items") {
        errors.push(format!(
            "{}: Required value: must be specified",
            at("items")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    fn at_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["command", "schedule"],
                    "properties": {
                        "schedule": {"type": "string", "format": "date-time"},
                        "command": {"type": "string", "minLength": 1, "maxLength": 20},
                        "mode": {"type": "string", "enum": ["on", "off"]},
                        "replicas": {"type": "integer", "minimum": 1, "maximum": 5},
                        "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0},
                        "name": {"type": "string", "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
                        "schedulingConfig": {"type": "array", "items": {
                            "type": "object",
                            "properties": {"startTime": {"type": "string", "format": "date-time"}}
                        }},
                        "port": {"x-kubernetes-int-or-string": true},
                        "note": {"type": "string", "nullable": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "x-kubernetes-preserve-unknown-fields": true}
                    }
                },
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
            }
        })
    }

    fn messages(obj: Value) -> Vec<String> {
        validate(&at_schema(), &obj)
            .iter()
            .map(FieldError::message)
            .collect()
    }

    fn at(spec: Value) -> Value {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
               "metadata": {"name": "x"}, "spec": spec})
    }

    #[test]
    fn valid_object_has_no_errors() {
        let obj = at(
            json!({"schedule": "2024-05-01T10:00:00Z", "command": "echo hi", "mode": "on",
            "replicas": 3, "ratio": 0.5, "name": "abc", "tags": ["a"], "port": "http",
            "note": null, "labels": {"a": "b"}, "raw": {"anything": [1, {"x": 2}]},
            "template": {"apiVersion": "v1", "kind": "Pod", "spec": {}}}),
        );
        assert_eq!(messages(obj), Vec::<String>::new());
    }

    #[test]
    fn required_and_date_time_wording() {
        assert_eq!(
            messages(at(json!({"schedule": "tomorrow"}))),
            vec![
                "spec.command: Required value".to_string(),
                "spec.schedule: Invalid value: \"tomorrow\": spec.schedule in body must be of type date-time: \"tomorrow\"".to_string(),
            ]
        );
    }

    #[test]
    fn type_errors() {
        let errs = validate(
            &at_schema(),
            &at(json!({"schedule": "2024-05-01T10:00:00Z", "command": 5, "replicas": "three"})),
        );
        let msgs: Vec<String> = errs.iter().map(FieldError::message).collect();
        assert_eq!(
            msgs,
            vec![
                "spec.command: Invalid value: \"integer\": spec.command in body must be of type string: \"integer\"",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
            ]
        );
        let cause = errs[0].to_cause();
        assert_eq!(cause.reason.as_deref(), Some("FieldValueTypeInvalid"));
        assert_eq!(cause.field.as_deref(), Some("spec.command"));
        assert_eq!(
            cause.message.as_deref(),
            Some(
                "Invalid value: \"integer\": spec.command in body must be of type string: \"integer\""
            )
        );
        // A float is not an integer; an integer is a number.
        let m = messages(at(
            json!({"schedule": "2024-05-01T10:00:00Z", "command": "c", "replicas": 1.5, "ratio": 2}),
        ));
        assert_eq!(
            m,
            vec![
                "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
            ]
        );
    }

    #[test]
    fn patterns_are_compiled_once_and_the_cache_is_bounded() {
        let schema = json!({"type": "string", "pattern": "^[a-z]+$"});
        assert!(validate(&schema, &json!("abc")).is_empty());
        assert_eq!(validate(&schema, &json!("ABC")).len(), 1);
        let bad = json!({"type": "string", "pattern": "(unclosed"});
        for _ in 0..2 {
            let errors = validate(&bad, &json!("x"));
            assert_eq!(errors.len(), 1);
            assert!(
                errors[0].detail.contains("not a valid regular expression"),
                "{:?}",
                errors[0]
            );
        }
        // Distinct patterns past the budget: it starts over, and stays within it.
        for i in 0..PATTERN_CACHE_BUDGET / PATTERN_SIZE_TIERS[0] + 10 {
            let p = format!("^p{i}$");
            assert!(compiled_pattern(&p).unwrap().is_match(&format!("p{i}")));
            let cache = PATTERNS.lock().unwrap();
            assert!(cache.cost <= PATTERN_CACHE_BUDGET);
            let sum: usize = cache.compiled.values().map(|(_, c)| c).sum();
            assert_eq!(sum, cache.cost);
        }
        // Still right after starting over.
        assert_eq!(validate(&schema, &json!("ABC")).len(), 1);
        // RE2's `\w` is ASCII, so the pattern kube-apiserver accepts compiles small here too;
        // a long pattern is kept like any other; one too large for every tier is remembered
        // with Go's error, never compiled again.
        assert!(compiled_pattern(r"^[\w-]{1,63}$").unwrap().is_match("a-b"));
        let long = format!("^{}$", "a".repeat(4096));
        assert!(compiled_pattern(&long).unwrap().is_match(&"a".repeat(4096)));
        let big = "((a{100}){100}){100}";
        assert_eq!(
            compiled_pattern(big).unwrap_err(),
            "error parsing regexp: expression too large"
        );
        let kept = PATTERNS.lock().unwrap();
        assert_eq!(kept.compiled[r"^[\w-]{1,63}$"].1, PATTERN_SIZE_TIERS[0]);
        assert!(kept.compiled.contains_key(&long) && kept.compiled.contains_key(big));
    }

    #[test]
    fn date_times_reach_the_end_of_year_9999_as_in_go() {
        assert!(format_ok("date-time", "9999-12-31T23:59:59Z"));
        assert!(format_ok("date-time", "2024-01-02T03:04:05.5+02:00"));
        assert!(!format_ok("date-time", "2024-01-02"));
        assert!(!format_ok("date-time", "2024-01-02T03:04:05"));
        assert!(!format_ok("date-time", "not a time"));
    }

    #[test]
    fn patterns_have_re2_semantics() {
        assert_eq!(re2_pattern(r"^[\w.-]+$"), "^[[0-9A-Za-z_].-]+$");
        assert_eq!(re2_pattern(r"\\w\d\S"), r"\\w[0-9][^\t\n\f\r ]");
        let word = compiled_pattern(r"^\w+$").unwrap();
        assert!(word.is_match("hello_1"));
        assert!(!word.is_match("héllo"), "RE2's \\w is ASCII");
        let dns = compiled_pattern(r"^[\w.-]{1,253}$").unwrap();
        assert!(dns.is_match("a.b-c"));
        assert!(compiled_pattern(r"^\p{L}+$").unwrap().is_match("héllo"));
        // Refused when the CRD is written, with apiextensions' words.
        let schema = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "((a{100}){100}){100}"}}});
        let errs = check_structural(&schema).unwrap_err();
        assert_eq!(
            errs,
            [
                "properties[a].pattern: Invalid value: \"((a{100}){100}){100}\": must be a valid regular expression, but isn't: error parsing regexp: expression too large"
            ]
        );
    }

    #[test]
    fn enum_ranges_lengths_patterns_items() {
        let m = messages(at(
            json!({"schedule": "2024-05-01T10:00:00Z", "command": "",
            "mode": "fast", "replicas": 9, "ratio": 0, "name": "ABC", "tags": ["a", "b", "c"]}),
        ));
        assert_eq!(
            m,
            vec![
                "spec.command: Invalid value: \"\": spec.command in body should be at least 1 chars long",
                "spec.mode: Unsupported value: \"fast\": supported values: \"on\", \"off\"",
                "spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'",
                "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
                "spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 5",
                "spec.tags: Too many: 3: must have at most 2 items",
            ]
        );
        let m = messages(at(
            json!({"schedule": "2024-05-01T10:00:00Z", "command": "x".repeat(21), "replicas": 0, "tags": []}),
        ));
        assert_eq!(
            m,
            vec![
                "spec.command: Too long: may not be more than 20 bytes",
                "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            ]
        );
    }

    #[test]
    fn nested_paths_nullable_int_or_string_embedded() {
        let m = messages(at(
            json!({"schedule": "2024-05-01T10:00:00Z", "command": "c",
            "schedulingConfig": [{"startTime": "2024-05-01T10:00:00Z"}, {"startTime": "soon"}],
            "port": true, "labels": {"a": 1}, "template": {"kind": "Pod"}, "mode": null}),
        ));
        assert_eq!(
            m,
            vec![
                "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
                "spec.mode: Invalid value: \"null\": spec.mode in body must be of type string: \"null\"",
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "spec.schedulingConfig[1].startTime: Invalid value: \"soon\": spec.schedulingConfig[1].startTime in body must be of type date-time: \"soon\"",
                "spec.template.apiVersion: Required value",
            ]
        );
    }

    #[test]
    fn root_metadata_is_not_schema_checked() {
        let schema = json!({"type": "object", "required": ["metadata", "spec"], "properties": {"spec": {"type": "object"}}});
        let errs = validate(
            &schema,
            &json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}}),
        );
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].message(), "spec: Required value");
        assert_eq!(
            errs[0].to_cause().reason.as_deref(),
            Some("FieldValueRequired")
        );
        assert_eq!(
            invalid_message("At.cnat.programming-kubernetes.info", "x", &errs),
            "At.cnat.programming-kubernetes.info \"x\" is invalid: spec: Required value"
        );
    }

    #[test]
    fn prune_drops_unknown_fields() {
        let mut obj = at(json!({"schedule": "s", "command": "c", "typo": 1,
            "schedulingConfig": [{"startTime": "t", "extra": true}],
            "labels": {"k": "v"}, "raw": {"kept": {"deep": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}}));
        obj["status"] = json!({"phase": "DONE", "junk": 1});
        obj["unknownTop"] = json!(1);
        prune(&at_schema(), &mut obj);
        assert_eq!(
            obj,
            json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
                   "metadata": {"name": "x"},
                   "spec": {"schedule": "s", "command": "c", "schedulingConfig": [{"startTime": "t"}],
                            "labels": {"k": "v"}, "raw": {"kept": {"deep": 1}},
                            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}},
                   "status": {"phase": "DONE"}})
        );
    }

    #[test]
    fn prune_object_without_properties_drops_everything() {
        let mut obj = json!({"apiVersion": "a", "kind": "k", "metadata": {}, "spec": {"a": 1}});
        prune(
            &json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
            &mut obj,
        );
        assert_eq!(obj["spec"], json!({}));
    }

    #[test]
    fn structural_schema_checks() {
        assert_eq!(check_structural(&at_schema()), Ok(()));
        let bad = json!({"type": "object", "properties": {
            "spec": {"properties": {"a": {"type": "string"}}},
            "list": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
            "ref": {"$ref": "#/definitions/x"},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "ios": {"type": "string", "x-kubernetes-int-or-string": true},
            "arr": {"type": "array"}
        }});
        let errs = check_structural(&bad).unwrap_err();
        let expect = [
            "properties[spec].type: Required value: must not be empty for specified object fields",
            "properties[list].uniqueItems: Forbidden",
            "properties[ref].$ref: Forbidden: $ref is not supported",
            "properties[ref].type: Required value",
            "properties[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
            "properties[ios].type: Invalid value: \"string\": must be empty to be structural",
            "properties[arr].items: Required value",
        ];
        for e in expect {
            assert!(
                errs.iter().any(|m| m.starts_with(e)),
                "missing {e:?} in {errs:#?}"
            );
        }
        assert!(check_structural(&json!({"type": "string"})).is_err());
        assert!(
            check_structural(&json!({"properties": {}})).unwrap_err()[0]
                .contains("must be object at the root")
        );
        assert_eq!(
            check_structural(
                &json!({"type": "object", "properties": {"free": {"x-kubernetes-preserve-unknown-fields": true}}})
            ),
            Ok(())
        );
    }

    #[test]
    fn list_type_map_and_set_duplicates() {
        let schema = json!({"type": "object", "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                           "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
        }});
        let errs = validate(
            &schema,
            &json!({
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Done"}, {"type": "Ready", "status": "False"}],
                "tags": ["a", "b", "a"]
            }),
        );
        let msgs: Vec<String> = errs.iter().map(FieldError::message).collect();
        assert_eq!(
            msgs,
            vec![
                "conditions[2]: Duplicate value: {\"type\":\"Ready\"}".to_string(),
                "tags[2]: Duplicate value: \"a\"".to_string(),
            ]
        );
        assert_eq!(
            errs[0].to_cause().reason.as_deref(),
            Some("FieldValueDuplicate")
        );
    }

    #[test]
    fn formats_beyond_date_time() {
        let schema = json!({"type": "object", "properties": {
            "ip": {"type": "string", "format": "ipv4"}, "net": {"type": "string", "format": "cidr"},
            "id": {"type": "string", "format": "uuid"}, "n": {"type": "string", "format": "int32"},
            "day": {"type": "string", "format": "date"}
        }});
        assert!(
            validate(
                &schema,
                &json!({"ip": "10.0.0.1", "net": "10.0.0.0/8",
            "id": "123e4567-e89b-12d3-a456-426614174000", "n": "not checked", "day": "2024-05-01"})
            )
            .is_empty()
        );
        let errs = validate(
            &schema,
            &json!({"ip": "10.0.0.300", "net": "10.0.0.0/33", "id": "nope", "day": "2024-13-01"}),
        );
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["day", "id", "ip", "net"]);
        assert!(errs.iter().all(|e| e.kind == FieldErrorKind::TypeInvalid));
    }

    #[test]
    fn defaults_fill_missing_fields() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "auto", "nullable": true},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}}}}
            }}
        }});
        let mut obj = json!({"apiVersion": "a/v1", "kind": "K"});
        apply_defaults(&schema, &mut obj);
        assert_eq!(obj["spec"], json!({"replicas": 1, "mode": "auto"}));
        let mut obj =
            json!({"spec": {"replicas": 3, "mode": null, "ports": [{"protocol": "UDP"}, {}]}});
        apply_defaults(&schema, &mut obj);
        assert_eq!(
            obj["spec"],
            json!({"replicas": 3, "mode": null, "ports": [{"protocol": "UDP"}, {"protocol": "TCP"}]})
        );
    }

    #[test]
    fn singular_limits() {
        let schema = json!({"type": "object", "properties": {
            "one": {"type": "string", "maxLength": 1},
            "list": {"type": "array", "maxItems": 1, "items": {"type": "integer"}}
        }});
        let msgs: Vec<String> = validate(&schema, &json!({"one": "ab", "list": [1, 2]}))
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(
            msgs,
            [
                "list: Too many: 2: must have at most 1 item",
                "one: Too long: may not be more than 1 byte"
            ]
        );
    }

    /// The project's own CRDs and examples: every CRD schema is structural, every example
    /// validates and survives pruning unchanged, and every invalid example fails (on the field its
    /// leading comment names, when it names one).
    #[test]
    fn project_crds_and_examples() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts");
        let read_yaml = |path: &std::path::Path| -> Value {
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let mut schemas: Vec<(String, String, Value)> = Vec::new();
        for entry in std::fs::read_dir(root.join("crds")).unwrap() {
            let crd = read_yaml(&entry.unwrap().path());
            let group = crd["spec"]["group"].as_str().unwrap().to_string();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
            for version in crd["spec"]["versions"].as_array().unwrap() {
                let schema = version["schema"]["openAPIV3Schema"].clone();
                assert_eq!(check_structural(&schema), Ok(()), "{kind}");
                let api_version = format!("{group}/{}", version["name"].as_str().unwrap());
                schemas.push((api_version, kind.clone(), schema));
            }
        }
        assert!(!schemas.is_empty());
        let schema_for = |obj: &Value| -> Value {
            schemas
                .iter()
                .find(|(av, k, _)| obj["apiVersion"] == av.as_str() && obj["kind"] == k.as_str())
                .map(|(_, _, s)| s.clone())
                .unwrap_or_else(|| panic!("no CRD for {}", obj["kind"]))
        };
        let mut checked = 0;
        for entry in std::fs::read_dir(root.join("examples")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            // A file may hold several documents (the TDSet example creates its namespace
            // first); the custom resources among them are checked.
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_yaml_ng::Deserializer::from_str(&text) {
                let obj = Value::deserialize(doc).unwrap();
                if obj["apiVersion"] == "v1" {
                    continue;
                }
                let schema = schema_for(&obj);
                assert_eq!(validate(&schema, &obj), vec![], "{}", path.display());
                let mut pruned = obj.clone();
                prune(&schema, &mut pruned);
                assert_eq!(pruned, obj, "{} lost fields to pruning", path.display());
                checked += 1;
            }
        }
        for entry in std::fs::read_dir(root.join("examples/invalid")).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let obj: Value = serde_yaml_ng::from_str(&text).unwrap();
            // As the server validates a create: the schema, then (when it passes) the
            // `x-kubernetes-validations` rules.
            let schema = schema_for(&obj);
            let mut errors = validate(&schema, &obj);
            if errors.is_empty()
                && let Ok(Some(rules)) = crate::apiextensions::cel_rules::compile(&schema, "")
            {
                errors = rules.validate(&obj, None);
            }
            assert!(!errors.is_empty(), "{} should be invalid", path.display());
            let comment = text.lines().next().unwrap_or_default();
            let names_a_field = comment.contains("spec.") || comment.contains("status.");
            assert!(
                !names_a_field || errors.iter().any(|e| comment.contains(&e.path)),
                "{}: errors {:?} do not name the field in {comment:?}",
                path.display(),
                errors.iter().map(FieldError::message).collect::<Vec<_>>()
            );
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} examples found");
    }
}
