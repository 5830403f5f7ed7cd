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
//! Which Go type a built-in kind decodes into is the *scheme*'s to know: kube-apiserver's
//! `runtime.Scheme`, where each group's `install` package registers its kinds' Go structs, and
//! which is not part of any resource's strategy. Here [`SCHEME`] is that table: per kind, the
//! [`k8s_openapi`] struct standing in for the Go one (its decoder names the fields of a body it
//! ignores, the fields the kind lacks: [`ignored_fields`], for `fieldValidation`; a body
//! round-tripped through it keeps the fields the kind has: [`roundtrip`], for a body with a
//! `null`) and the kind's own fields checked above. Kinds not in it (Jobs, CronJobs, ...) keep every field sent and get the `ObjectMeta`
//! checks alone.
//!
//! The error is Go's, `json: cannot unmarshal <what> into Go struct field <Struct>.<path> of type
//! <type>` (`<what>` is `number`, `string`, `bool`, `array` or `object`; a fraction or an
//! out-of-range number into an integer is `number 1.5`), and `null` is accepted anywhere (Go
//! leaves the zero value). A create or update answers it as the real handler's decode error,
//! `400 BadRequest` `<Kind> in version "<v>" cannot be handled as a <Kind>: <error>`; a patch whose
//! result does not decode answers `422 Invalid` with the cause `patch: Invalid value: "<the
//! patched object>": <error>`, as the real patch handler does.

use k8s_openapi::api::{apps::v1 as apps, coordination::v1 as coord, core::v1 as core};
use k8s_openapi::api::{events::v1 as events, networking::v1 as net, rbac::v1 as rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::status::{ApiError, Cause};
use crate::registry::resources::ResourceDef;

/// A built-in kind as the scheme knows it (see the module docs).
pub struct GoKind {
    /// API group, `""` for core.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// A body decoded into the kind's struct and encoded again (`None` when it does not
    /// decode).
    roundtrip: fn(&Value) -> Option<Value>,
    /// The fields of a body that decoding it into the kind's struct ignores (`None` when it
    /// does not decode).
    ignored: fn(&Value) -> Option<Vec<FieldSteps>>,
    /// The kind's own top-level fields whose Go types are checked, beyond `ObjectMeta`.
    fields: &'static [(&'static str, Ty)],
}

/// A body decoded into `T` and encoded again.
fn rt<T: DeserializeOwned + Serialize>(b: &Value) -> Option<Value> {
    // Decoded from the borrowed tree: the body is not copied first.
    let t = T::deserialize(b).ok()?;
    serde_json::to_value(t).ok()
}

/// One step of a path into a body: a field's name or a list's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A field of an object.
    Field(String),
    /// An element of a list.
    Index(usize),
}

/// A path into a body, from its root.
pub type FieldSteps = Vec<Step>;

/// The fields of `b` that decoding it into `T` ignores, in the order the decoder meets them
/// (the body's, depth first): each an unknown field's path, ending in its name. The decoder
/// reports them itself (serde's `IgnoredAny`, which every struct's decoder asks for a field it
/// lacks), so nothing is encoded again.
fn ign<T: DeserializeOwned>(b: &Value) -> Option<Vec<FieldSteps>> {
    let mut out = vec![];
    let decoded: Result<T, _> = serde_ignored::deserialize(b, |p| out.push(steps_of(&p)));
    decoded.ok().map(|_| out)
}

/// A decoder's path as steps (`Option`s and newtypes take no step).
fn steps_of(path: &serde_ignored::Path<'_>) -> FieldSteps {
    use serde_ignored::Path;
    let mut steps = vec![];
    let mut at = path;
    loop {
        at = match at {
            Path::Root => break,
            Path::Seq { parent, index } => {
                steps.push(Step::Index(*index));
                parent
            }
            Path::Map { parent, key } => {
                steps.push(Step::Field(key.clone()));
                parent
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => parent,
        };
    }
    steps.reverse();
    steps
}

const fn go_kind<T: DeserializeOwned + Serialize>(
    group: &'static str,
    kind: &'static str,
) -> GoKind {
    GoKind {
        group,
        kind,
        roundtrip: rt::<T>,
        ignored: ign::<T>,
        fields: &[],
    }
}

/// The built-in kinds whose Go types this server knows.
pub const SCHEME: &[GoKind] = &[
    go_kind::<core::Namespace>("", "Namespace"),
    go_kind::<core::Pod>("", "Pod"),
    go_kind::<core::Event>("", "Event"),
    go_kind::<events::Event>("events.k8s.io", "Event"),
    go_kind::<core::Service>("", "Service"),
    GoKind {
        fields: &[
            ("data", Ty::StrMap),
            ("binaryData", Ty::BytesMap),
            ("immutable", Ty::Bool),
        ],
        ..go_kind::<core::ConfigMap>("", "ConfigMap")
    },
    GoKind {
        fields: &[
            ("data", Ty::BytesMap),
            ("stringData", Ty::StrMap),
            ("type", Ty::Str("v1.SecretType")),
            ("immutable", Ty::Bool),
        ],
        ..go_kind::<core::Secret>("", "Secret")
    },
    go_kind::<core::ServiceAccount>("", "ServiceAccount"),
    go_kind::<core::ResourceQuota>("", "ResourceQuota"),
    go_kind::<core::Node>("", "Node"),
    go_kind::<apps::Deployment>("apps", "Deployment"),
    go_kind::<apps::StatefulSet>("apps", "StatefulSet"),
    go_kind::<apps::ReplicaSet>("apps", "ReplicaSet"),
    go_kind::<coord::Lease>("coordination.k8s.io", "Lease"),
    go_kind::<net::Ingress>("networking.k8s.io", "Ingress"),
    go_kind::<net::IngressClass>("networking.k8s.io", "IngressClass"),
    go_kind::<net::NetworkPolicy>("networking.k8s.io", "NetworkPolicy"),
    go_kind::<ext::CustomResourceDefinition>("apiextensions.k8s.io", "CustomResourceDefinition"),
    go_kind::<rbac::Role>("rbac.authorization.k8s.io", "Role"),
    go_kind::<rbac::ClusterRole>("rbac.authorization.k8s.io", "ClusterRole"),
    go_kind::<rbac::RoleBinding>("rbac.authorization.k8s.io", "RoleBinding"),
    go_kind::<rbac::ClusterRoleBinding>("rbac.authorization.k8s.io", "ClusterRoleBinding"),
];

/// The scheme's entry for a built-in kind, if it has one.
fn lookup(group: &str, kind: &str) -> Option<&'static GoKind> {
    SCHEME.iter().find(|k| k.group == group && k.kind == kind)
}

/// The built-in kind's typed form round-tripped (decode, encode): what the real server keeps of
/// a body, as its typed decoder drops every field the Go struct lacks. `None` for kinds without
/// a Go type here (custom resources among them) or bodies that do not decode.
pub fn roundtrip(def: &ResourceDef, body: &Value) -> Option<Value> {
    if def.custom.is_some() {
        return None;
    }
    (lookup(&def.group, &def.kind)?.roundtrip)(body)
}

/// The fields of a body that the built-in kind's typed decoder ignores (the fields its Go
/// struct lacks), as [`ign`] finds them. `None` for kinds without a Go type here (custom
/// resources among them) or bodies that do not decode.
pub fn ignored_fields(def: &ResourceDef, body: &Value) -> Option<Vec<FieldSteps>> {
    if def.custom.is_some() {
        return None;
    }
    (lookup(&def.group, &def.kind)?.ignored)(body)
}

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
    let fields = lookup(group, kind).map_or(&[][..], |k| k.fields);
    for (field, ty) in fields {
        check(obj.get(*field), kind, field, *ty)?;
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
