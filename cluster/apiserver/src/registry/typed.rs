//! Typed decoding of built-in fields: what Go's `encoding/json` refuses when kube-apiserver
//! decodes a body into a built-in kind's struct.
//!
//! kube-apiserver never stores a built-in object as free-form JSON: a body is decoded into the
//! kind's Go struct first, and a value of the wrong JSON type fails that decoding. This server
//! keeps objects as JSON, so without this check `metadata.annotations: {"a": {"b": 1}}` or
//! `data: {"k": 5}` would be stored as sent, slip past the 256 KiB annotation rule (which only
//! counts strings) and break every typed client that reads the object back (`kubectl describe`
//! fails to decode it). The fields checked are the ones every object has (`ObjectMeta`) and
//! the ConfigMap's and Secret's data maps:
//!
//! | field | Go type |
//! |---|---|
//! | `metadata.name`, `generateName`, `namespace`, `uid`, `resourceVersion`, `selfLink` | `string` |
//! | `metadata.generation`, `deletionGracePeriodSeconds` | `int64` |
//! | `metadata.labels`, `metadata.annotations` | `map[string]string` |
//! | `metadata.finalizers` | `[]string` |
//! | `metadata.ownerReferences` | `[]v1.OwnerReference` (`apiVersion`, `kind`, `name`, `uid` strings; `controller`, `blockOwnerDeletion` bools) |
//! | ConfigMap `data` / `binaryData`, Secret `stringData` / `data` | `map[string]string` / `map[string][]uint8` |
//! | ConfigMap and Secret `immutable` | `bool`; Secret `type`: `v1.SecretType` |
//!
//! The error is Go's, `json: cannot unmarshal <what> into Go struct field <Struct>.<path> of type
//! <type>` (`<what>` is `number`, `string`, `bool`, `array` or `object`; a fraction or an
//! out-of-range number into an integer is `number 1.5`), and `null` is accepted anywhere (Go
//! leaves the zero value). A create or update answers it as the real handler's decode error,
//! `400 BadRequest` `<Kind> in version "<v>" cannot be handled as a <Kind>: <error>`; a patch whose
//! result does not decode answers `422 Invalid` with the cause `patch: Invalid value: "<the
//! patched object>": <error>`, as the real patch handler does.

use serde_json::Value;

use crate::api::status::{ApiError, Cause};
use crate::registry::resources::ResourceDef;

/// Go's word for a JSON value's type in an `UnmarshalTypeError`.
fn what(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "bool".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
    }
}

fn error(v: &Value, strukt: &str, path: &str, ty: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field {strukt}.{path} of type {ty}",
        what(v)
    )
}

/// The Go types this module knows.
#[derive(Clone, Copy)]
enum Ty {
    Str(&'static str),
    Int64,
    Bool,
    StrMap,
    BytesMap,
    StrList,
}

fn check(v: Option<&Value>, strukt: &str, path: &str, ty: Ty) -> Result<(), String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(());
    };
    match ty {
        Ty::Str(name) => {
            if !v.is_string() {
                return Err(error(v, strukt, path, name));
            }
        }
        Ty::Bool => {
            if !v.is_boolean() {
                return Err(error(v, strukt, path, "bool"));
            }
        }
        Ty::Int64 => match v {
            Value::Number(n) if n.as_i64().is_some() => {}
            Value::Number(n) => {
                return Err(format!(
                    "json: cannot unmarshal number {n} into Go struct field {strukt}.{path} of type int64"
                ));
            }
            other => return Err(error(other, strukt, path, "int64")),
        },
        Ty::StrMap | Ty::BytesMap => {
            let (whole, elem) = match ty {
                Ty::StrMap => ("map[string]string", "string"),
                _ => ("map[string][]uint8", "[]uint8"),
            };
            let Some(m) = v.as_object() else {
                return Err(error(v, strukt, path, whole));
            };
            if let Some(bad) = m.values().find(|x| !x.is_string() && !x.is_null()) {
                return Err(error(bad, strukt, path, elem));
            }
        }
        Ty::StrList => {
            let Some(items) = v.as_array() else {
                return Err(error(v, strukt, path, "[]string"));
            };
            if let Some(bad) = items.iter().find(|x| !x.is_string() && !x.is_null()) {
                return Err(error(bad, strukt, path, "string"));
            }
        }
    }
    Ok(())
}

/// Go's decoding error for the first wrongly typed field of a built-in object, if any (custom
/// resources are checked against their schema instead).
pub fn decode_error(def: &ResourceDef, obj: &Value) -> Option<String> {
    if def.custom.is_some() {
        return None;
    }
    check_fields(&def.group, &def.kind, obj).err()
}

fn check_fields(group: &str, kind: &str, obj: &Value) -> Result<(), String> {
    let meta = &obj["metadata"];
    if meta.is_object() {
        const M: &str = "ObjectMeta";
        for f in [
            "name",
            "generateName",
            "namespace",
            "selfLink",
            "uid",
            "resourceVersion",
        ] {
            check(meta.get(f), M, &format!("metadata.{f}"), Ty::Str("string"))?;
        }
        for f in ["generation", "deletionGracePeriodSeconds"] {
            check(meta.get(f), M, &format!("metadata.{f}"), Ty::Int64)?;
        }
        for f in ["labels", "annotations"] {
            check(meta.get(f), M, &format!("metadata.{f}"), Ty::StrMap)?;
        }
        check(
            meta.get("finalizers"),
            M,
            "metadata.finalizers",
            Ty::StrList,
        )?;
        if let Some(refs) = meta.get("ownerReferences").filter(|r| !r.is_null()) {
            let Some(items) = refs.as_array() else {
                return Err(error(
                    refs,
                    M,
                    "metadata.ownerReferences",
                    "[]v1.OwnerReference",
                ));
            };
            for r in items.iter().filter(|r| !r.is_null()) {
                if !r.is_object() {
                    return Err(error(r, M, "metadata.ownerReferences", "v1.OwnerReference"));
                }
                const O: &str = "OwnerReference";
                for f in ["apiVersion", "kind", "name", "uid"] {
                    let path = format!("metadata.ownerReferences.{f}");
                    check(r.get(f), O, &path, Ty::Str("string"))?;
                }
                for f in ["controller", "blockOwnerDeletion"] {
                    let path = format!("metadata.ownerReferences.{f}");
                    check(r.get(f), O, &path, Ty::Bool)?;
                }
            }
        }
    }
    match (group, kind) {
        ("", "ConfigMap") => {
            check(obj.get("data"), kind, "data", Ty::StrMap)?;
            check(obj.get("binaryData"), kind, "binaryData", Ty::BytesMap)?;
            check(obj.get("immutable"), kind, "immutable", Ty::Bool)?;
        }
        ("", "Secret") => {
            check(obj.get("data"), kind, "data", Ty::BytesMap)?;
            check(obj.get("stringData"), kind, "stringData", Ty::StrMap)?;
            check(obj.get("type"), kind, "type", Ty::Str("v1.SecretType"))?;
            check(obj.get("immutable"), kind, "immutable", Ty::Bool)?;
        }
        _ => {}
    }
    Ok(())
}

/// The create/update answer: `400` `<Kind> in version "<v>" cannot be handled as a <Kind>: ...`.
pub fn body_error(def: &ResourceDef, message: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{v}\" cannot be handled as a {kind}: {message}",
        kind = def.kind,
        v = def.version
    ))
}

/// The patch answer: `422 Invalid`, `patch: Invalid value: "<patched>": <error>` (the real
/// handler's `errors.NewInvalid(schema.GroupKind{}, "", ...)`, whose kind and name are empty).
pub fn patch_error(patched: &Value, message: &str) -> ApiError {
    let shown = apimachinery::validation::go_quote(&patched.to_string());
    ApiError::invalid(
        "",
        "",
        "",
        vec![Cause::new(
            "FieldValueInvalid",
            "patch",
            format!("Invalid value: {shown}: {message}"),
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrongly_typed_fields_get_gos_words() {
        let cm = |v: Value| check_fields("", "ConfigMap", &v).err().unwrap_or_default();
        assert_eq!(
            cm(json!({"metadata": {"annotations": {"a": {"b": 1}}}})),
            "json: cannot unmarshal object into Go struct field ObjectMeta.metadata.annotations of type string"
        );
        assert_eq!(
            cm(json!({"metadata": {"labels": {"a": 1}}})),
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
        );
        assert_eq!(
            cm(json!({"metadata": {"labels": [1]}})),
            "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string"
        );
        assert_eq!(
            cm(json!({"data": {"k": {}}})),
            "json: cannot unmarshal object into Go struct field ConfigMap.data of type string"
        );
        assert_eq!(
            cm(json!({"metadata": {"generation": 1.5}})),
            "json: cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64"
        );
        assert_eq!(
            cm(json!({"metadata": {"ownerReferences": [{"uid": 7}]}})),
            "json: cannot unmarshal number into Go struct field OwnerReference.metadata.ownerReferences.uid of type string"
        );
        assert_eq!(
            cm(json!({"metadata": {"finalizers": "x"}})),
            "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.finalizers of type []string"
        );
        assert_eq!(
            check_fields("", "Secret", &json!({"data": {"k": 1}})).unwrap_err(),
            "json: cannot unmarshal number into Go struct field Secret.data of type []uint8"
        );
        // Well-typed objects and nulls pass.
        assert!(
            check_fields(
                "",
                "ConfigMap",
                &json!({"metadata": {"name": "a", "labels": {"a": "b"}, "annotations": null,
                                     "finalizers": ["x"], "generation": 2,
                                     "ownerReferences": [{"apiVersion": "v1", "controller": true}]},
                        "data": {"k": "v", "n": null}, "binaryData": {"b": "AA=="}})
            )
            .is_ok()
        );
    }
}
