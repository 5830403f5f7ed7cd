//! From a schemars JSON schema to a Kubernetes *structural* schema.
//!
//! `apiextensions.k8s.io/v1` only accepts structural schemas (see the Kubernetes docs,
//! "Specifying a structural schema"): every object, array and scalar node states its `type`;
//! `properties`, `items` and `additionalProperties` carry the shape; `anyOf`/`oneOf`/`allOf`/
//! `not` may only add validation *on top of* a typed shape, never replace it; `$ref`,
//! `definitions`, `$schema` and friends do not exist.
//!
//! schemars speaks full JSON Schema, so three of its idioms are rewritten here:
//!
//! | schemars emits | for | becomes |
//! |---|---|---|
//! | `oneOf: [{type: string, enum: [A], description}, ...]` | an enum whose variants have doc comments | `type: string, enum: [A, ...]`, variant docs appended to the description as "Possible enum values" (as Kubernetes' own openapi-gen does) |
//! | `anyOf: [X, {enum: [null], nullable: true}]` | `Option<X>` for a non-trivial `X` | `X` with `nullable: true` |
//! | `enum: [A, B, null]` | `Option<Enum>` without variant docs | `enum: [A, B]` |
//!
//! `Option<T>` is `nullable: true` (serde reads `null` as `None`), except for enums: the API
//! server validates `enum` even against null, so no enum node is nullable and an absent
//! optional enum is simply omitted, which is how the Rust types serialise `None`.
//!
//! and JSON-Schema-only annotations (`$schema`, `title`, `default`, `examples`, ...) are
//! dropped. Any other construct is reported as an error with the JSON path of the node, so a
//! new Rust type that cannot be expressed fails `hack/update-codegen.sh` instead of producing a
//! CRD the API server rejects.

use serde_json::{Map, Value};

/// A problem at one node of the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    /// JSON path of the node, e.g. `$.properties.spec.properties.schedule`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl PathError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        PathError {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// Annotations that JSON Schema has and structural schemas do not need; dropped silently.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "title",
    "default",
    "examples",
    "example",
    "readOnly",
    "writeOnly",
    "deprecated",
];

/// Keywords a node may keep in the output. `x-kubernetes-*` extensions are allowed as well.
const ALLOWED: &[&str] = &[
    "type",
    "format",
    "description",
    "properties",
    "required",
    "items",
    "additionalProperties",
    "enum",
    "nullable",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
];

/// Rewrites a schemars schema (OpenAPI 3 settings, sub-schemas inlined) into a structural one.
pub fn to_structural(schema: Value) -> Result<Value, PathError> {
    convert(schema, "$")
}

fn convert(schema: Value, path: &str) -> Result<Value, PathError> {
    let Value::Object(mut node) = schema else {
        return Err(PathError::new(
            path,
            format!("expected a schema object, found {schema}"),
        ));
    };
    for key in DROPPED {
        node.remove(*key);
    }
    if node.contains_key("$ref") {
        return Err(PathError::new(
            path,
            "$ref is not allowed (sub-schemas must be inlined)",
        ));
    }
    for key in ["$defs", "definitions", "components"] {
        if node.contains_key(key) {
            return Err(PathError::new(
                path,
                format!("{key} left over: a $ref was not inlined"),
            ));
        }
    }

    if let Some(any_of) = node.remove("anyOf") {
        node = merge_nullable_any_of(node, any_of, path)?;
    }
    if let Some(one_of) = node.remove("oneOf") {
        node = merge_string_enum_one_of(node, one_of, path)?;
    }
    if let Some(Value::Array(types)) = node.get("type").cloned() {
        let non_null: Vec<&Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .collect();
        if non_null.len() != 1 {
            return Err(PathError::new(
                path,
                format!("a node must have exactly one type, found {types:?}"),
            ));
        }
        if non_null.len() != types.len() {
            node.insert("nullable".into(), Value::Bool(true));
        }
        node.insert("type".into(), non_null[0].clone());
    }
    if let Some(Value::Array(values)) = node.get_mut("enum") {
        values.retain(|v| !v.is_null());
        // The API server checks `enum` even when the value is null (kube-openapi's common
        // validator runs for null data and no enum entry matches null), so `nullable` on an
        // enum would promise something the server does not do. An optional enum field is
        // omitted, never null; the Rust types serialise `None` that way.
        node.remove("nullable");
    }

    if let Some(props) = node.remove("properties") {
        let Value::Object(props) = props else {
            return Err(PathError::new(path, "properties is not an object"));
        };
        let mut out = Map::new();
        for (name, sub) in props {
            let sub_path = format!("{path}.properties.{name}");
            out.insert(name, convert(sub, &sub_path)?);
        }
        node.insert("properties".into(), Value::Object(out));
    }
    if let Some(items) = node.remove("items") {
        if !items.is_object() {
            return Err(PathError::new(
                path,
                "items must be a single schema (tuples are not structural)",
            ));
        }
        node.insert("items".into(), convert(items, &format!("{path}.items"))?);
    }
    if let Some(additional) = node.remove("additionalProperties") {
        match additional {
            Value::Object(_) => {
                let converted = convert(additional, &format!("{path}.additionalProperties"))?;
                node.insert("additionalProperties".into(), converted);
            }
            other => {
                return Err(PathError::new(
                    path,
                    format!(
                        "additionalProperties: {other} is not structural; use a typed map \
                         or x-kubernetes-preserve-unknown-fields"
                    ),
                ));
            }
        }
    }

    for key in node.keys() {
        if !ALLOWED.contains(&key.as_str()) && !key.starts_with("x-kubernetes-") {
            return Err(PathError::new(
                path,
                format!("keyword {key:?} is not supported in a CRD schema"),
            ));
        }
    }
    Ok(Value::Object(node))
}

/// `anyOf: [X, null-branch]` (schemars' `Option<X>` for non-trivial `X`) → `X` + `nullable`.
/// The node's own keys (its field's description) win over `X`'s (the type's description).
fn merge_nullable_any_of(
    mut node: Map<String, Value>,
    any_of: Value,
    path: &str,
) -> Result<Map<String, Value>, PathError> {
    let Value::Array(branches) = any_of else {
        return Err(PathError::new(path, "anyOf is not an array"));
    };
    let (nulls, others): (Vec<Value>, Vec<Value>) = branches.into_iter().partition(is_null_branch);
    if nulls.len() != 1 || others.len() != 1 {
        return Err(PathError::new(
            path,
            "anyOf is only supported as Option<T> (one schema plus null)",
        ));
    }
    let Some(Value::Object(inner)) = others.into_iter().next() else {
        return Err(PathError::new(path, "anyOf branch is not a schema object"));
    };
    for (key, value) in inner {
        node.entry(key).or_insert(value);
    }
    node.insert("nullable".into(), Value::Bool(true));
    Ok(node)
}

fn is_null_branch(branch: &Value) -> bool {
    let Value::Object(b) = branch else {
        return false;
    };
    let null_enum = b.get("enum") == Some(&Value::Array(vec![Value::Null]));
    let null_type = b.get("type") == Some(&Value::String("null".into()));
    (null_enum || null_type)
        && b.keys()
            .all(|k| matches!(k.as_str(), "enum" | "type" | "nullable" | "description"))
}

/// `oneOf` of single-value string enums (a Rust enum whose variants have doc comments) → one
/// `enum` list, the variant docs appended to the description.
fn merge_string_enum_one_of(
    mut node: Map<String, Value>,
    one_of: Value,
    path: &str,
) -> Result<Map<String, Value>, PathError> {
    let Value::Array(branches) = one_of else {
        return Err(PathError::new(path, "oneOf is not an array"));
    };
    let mut values = Vec::new();
    let mut docs = Vec::new();
    for branch in branches {
        let is_string = branch.get("type").and_then(Value::as_str) == Some("string");
        let variants = branch.get("enum").and_then(Value::as_array);
        let (true, Some(variants)) = (is_string, variants) else {
            return Err(PathError::new(
                path,
                "oneOf is only supported for enums of unit variants (strings)",
            ));
        };
        for v in variants {
            if let (Some(s), Some(d)) = (
                v.as_str(),
                branch.get("description").and_then(Value::as_str),
            ) {
                docs.push(format!(" - `{s:?}`: {d}"));
            }
            values.push(v.clone());
        }
    }
    if !docs.is_empty() {
        let base = node
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let sep = if base.is_empty() { "" } else { "\n\n" };
        let text = format!("{base}{sep}Possible enum values:\n{}", docs.join("\n"));
        node.insert("description".into(), Value::String(text));
    }
    node.insert("type".into(), Value::String("string".into()));
    node.insert("enum".into(), Value::Array(values));
    Ok(node)
}

/// Checks the structural rules on an already converted schema: every node has a `type` (or
/// is `x-kubernetes-int-or-string` / `x-kubernetes-preserve-unknown-fields`), no `$ref`, no
/// keyword outside the supported set, objects describe their shape with `properties` or
/// `additionalProperties` only, arrays have exactly one `items` schema.
pub fn check_structural(schema: &Value) -> Result<(), PathError> {
    check(schema, "$")
}

fn check(schema: &Value, path: &str) -> Result<(), PathError> {
    let Value::Object(node) = schema else {
        return Err(PathError::new(path, "not a schema object"));
    };
    for key in node.keys() {
        if !ALLOWED.contains(&key.as_str()) && !key.starts_with("x-kubernetes-") {
            return Err(PathError::new(
                path,
                format!("keyword {key:?} is not allowed"),
            ));
        }
    }
    let flag = |k: &str| node.get(k).and_then(Value::as_bool) == Some(true);
    let ty = node.get("type").and_then(Value::as_str);
    if ty.is_none()
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        return Err(PathError::new(path, "node has no type"));
    }
    if let Some(props) = node.get("properties") {
        if ty != Some("object") {
            return Err(PathError::new(path, "properties on a non-object node"));
        }
        let Value::Object(props) = props else {
            return Err(PathError::new(path, "properties is not an object"));
        };
        for (name, sub) in props {
            check(sub, &format!("{path}.properties.{name}"))?;
        }
    }
    if let Some(items) = node.get("items") {
        check(items, &format!("{path}.items"))?;
    } else if ty == Some("array") {
        return Err(PathError::new(path, "array without items"));
    }
    if let Some(additional) = node.get("additionalProperties") {
        check(additional, &format!("{path}.additionalProperties"))?;
    }
    Ok(())
}

/// The value with the keys of every map in sorted order (arrays keep their order), so output
/// is byte-for-byte stable whatever order the schema was built in.
pub fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(k, sorted(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The value with every whole-valued float (`1.0`) turned into an integer (`1`).
pub fn integral_numbers(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, integral_numbers(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(integral_numbers).collect()),
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            // 2^53: beyond it f64 no longer holds every integer exactly.
            Some(f) if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 => {
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        other => other,
    }
}

/// The first path at which two JSON values differ, for error messages.
pub fn first_difference(want: &Value, got: &Value) -> Option<String> {
    diff_at(want, got, "$")
}

fn diff_at(want: &Value, got: &Value, path: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let sub = format!("{path}.{k}");
                match b.get(k) {
                    None => return Some(format!("{sub} was dropped")),
                    Some(vb) => {
                        if let Some(d) = diff_at(va, vb, &sub) {
                            return Some(d);
                        }
                    }
                }
            }
            b.keys()
                .find(|k| !a.contains_key(*k))
                .map(|k| format!("{path}.{k} appeared"))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| diff_at(x, y, &format!("{path}[{i}]"))),
        // Numbers may change representation (1 vs 1.0) through f64 fields; compare values.
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ if want == got => None,
        _ => Some(format!("{path}: {want} became {got}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documented_enum_one_of_becomes_a_string_enum_with_variant_docs() {
        let got = to_structural(json!({
            "description": "The phase.",
            "oneOf": [
                {"type": "string", "enum": ["PENDING"], "description": "Waiting."},
                {"type": "string", "enum": ["DONE"], "description": "Finished."}
            ]
        }))
        .unwrap();
        assert_eq!(got["type"], "string");
        assert_eq!(got["enum"], json!(["PENDING", "DONE"]));
        assert_eq!(
            got["description"],
            "The phase.\n\nPossible enum values:\n - `\"PENDING\"`: Waiting.\n - `\"DONE\"`: Finished."
        );
        assert!(got.get("oneOf").is_none());
    }

    #[test]
    fn option_of_object_becomes_nullable_and_keeps_the_field_description() {
        let got = to_structural(json!({
            "description": "Field doc.",
            "anyOf": [
                {"description": "Type doc.", "type": "object", "properties": {"a": {"type": "string"}}},
                {"enum": [null], "nullable": true}
            ]
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({"description": "Field doc.", "type": "object", "properties": {"a": {"type": "string"}}, "nullable": true})
        );
    }

    #[test]
    fn optional_enums_are_not_nullable() {
        let got = to_structural(json!({
            "description": "Field doc.",
            "anyOf": [
                {"description": "Type doc.", "type": "string", "enum": ["A", "B"]},
                {"enum": [null], "nullable": true}
            ]
        }))
        .unwrap();
        assert_eq!(
            got,
            json!({"description": "Field doc.", "type": "string", "enum": ["A", "B"]})
        );
        let got = to_structural(json!({"type": "string", "enum": ["A", null], "nullable": true}))
            .unwrap();
        assert_eq!(got, json!({"type": "string", "enum": ["A"]}));
    }

    #[test]
    fn null_in_type_arrays_becomes_nullable() {
        let got = to_structural(json!({"type": ["integer", "null"]})).unwrap();
        assert_eq!(got, json!({"type": "integer", "nullable": true}));
    }

    #[test]
    fn json_schema_annotations_are_dropped() {
        let got = to_structural(json!({
            "$schema": "x", "title": "T", "type": "array", "default": [],
            "items": {"type": "string", "examples": ["a"]}
        }))
        .unwrap();
        assert_eq!(got, json!({"type": "array", "items": {"type": "string"}}));
    }

    #[test]
    fn untranslatable_constructs_are_errors_with_paths() {
        let err = to_structural(json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/components/schemas/A"}}
        }))
        .unwrap_err();
        assert_eq!(err.path, "$.properties.a");
        assert!(err.message.contains("$ref"), "{err:?}");

        let err =
            to_structural(json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})).unwrap_err();
        assert!(err.message.contains("Option<T>"), "{err:?}");

        let err =
            to_structural(json!({"type": "object", "additionalProperties": true})).unwrap_err();
        assert!(err.message.contains("additionalProperties"), "{err:?}");

        let err =
            to_structural(json!({"type": "string", "contentEncoding": "base64"})).unwrap_err();
        assert!(err.message.contains("contentEncoding"), "{err:?}");
    }

    #[test]
    fn check_requires_a_type_on_every_node() {
        let err = check_structural(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {"x": {"description": "no type"}}}}
        }))
        .unwrap_err();
        assert_eq!(err.path, "$.properties.spec.properties.x");
        check_structural(&json!({"x-kubernetes-int-or-string": true})).unwrap();
        let err = check_structural(&json!({"type": "array"})).unwrap_err();
        assert!(err.message.contains("items"));
    }

    #[test]
    fn sorted_orders_keys_recursively_and_keeps_arrays() {
        let v = sorted(json!({"b": 1, "a": {"d": [3, 1], "c": 2}}));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":{"c":2,"d":[3,1]},"b":1}"#
        );
    }

    #[test]
    fn whole_floats_print_as_integers() {
        let v = integral_numbers(json!({"minimum": 0.0, "maximum": 1440.0, "multipleOf": 0.5}));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"maximum":1440,"minimum":0,"multipleOf":0.5}"#
        );
    }

    #[test]
    fn first_difference_names_the_path() {
        let d = first_difference(&json!({"a": {"b": 1, "c": 2}}), &json!({"a": {"b": 1}}));
        assert_eq!(d.as_deref(), Some("$.a.c was dropped"));
        assert_eq!(first_difference(&json!({"m": 1}), &json!({"m": 1.0})), None);
    }
}
