//! JSON in kube-apiserver's byte layout: Go's field order for the parts clients see first.
//!
//! kube-apiserver encodes typed Go structs, so a response's keys come in struct order
//! (`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":...}`),
//! and `json.Encoder` ends each body with `\n` (added by [`crate::endpoints::handlers::json_response`]).
//! This server keeps objects as `serde_json::Value`s, whose maps are sorted; [`GoOrdered`]
//! writes them in Go's order where it is known:
//!
//! * the top level of every object: `kind`, `apiVersion`, `metadata`, then the kind's own
//!   fields in struct order (`spec`, `status` for most kinds; `data`, `binaryData` for a
//!   ConfigMap; `rules`, `aggregationRule` for roles; `subjects`, `roleRef` for bindings;
//!   `involvedObject`, `reason`, `message`, ... for an Event; `columnDefinitions`, `rows` for
//!   a Table; `items` for a list), then any other keys sorted;
//! * a `Status`: `kind, apiVersion, metadata, status, message, reason, details, code`, and its
//!   `details`: `name, group, kind, uid, causes, retryAfterSeconds`;
//! * `metadata` (ObjectMeta and ListMeta): `name, generateName, namespace, selfLink, uid,
//!   resourceVersion, generation, creationTimestamp, deletionTimestamp,
//!   deletionGracePeriodSeconds, labels, annotations, ownerReferences, finalizers,
//!   managedFields`, and `continue`, `remainingItemCount` for lists;
//! * each list item as an object.
//!
//! Wherever it is, a `managedFields` list is written with its field sets unfolded: the store
//! holds each `fieldsV1` as its JSON text ([`crate::api::folded`]), and a client gets the
//! JSON object.
//!
//! Deeper levels (a spec's own fields) stay sorted: only a decoder that reports byte offsets
//! or a client comparing bodies byte for byte could tell, and both look at the envelope.
//! Custom resources (and their lists) are served by kube-apiserver from unstructured maps,
//! which Go's encoder writes with every level's keys sorted, so they stay sorted here
//! ([`crate::registry::resources::ResourceDef::ordered`]); a Status is typed whatever the resource.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Map, Value};

use crate::api::folded::{ManagedFields, Unfolded};

/// ObjectMeta and ListMeta field order.
const META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "continue",
    "remainingItemCount",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const STATUS: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "status",
    "message",
    "reason",
    "details",
    "code",
];

const DETAILS: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];

/// The top-level order of an object of `kind` in `api_version` (`has_items`: a list).
fn top_order(kind: &str, api_version: &str, has_items: bool) -> &'static [&'static str] {
    if has_items || kind.ends_with("List") {
        return &["kind", "apiVersion", "metadata", "items"];
    }
    match kind {
        "Event" if api_version.starts_with("events.k8s.io/") => &[
            "kind",
            "apiVersion",
            "metadata",
            "eventTime",
            "series",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "regarding",
            "related",
            "note",
            "type",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
        ],
        "Status" => STATUS,
        "ConfigMap" => &[
            "kind",
            "apiVersion",
            "metadata",
            "immutable",
            "data",
            "binaryData",
        ],
        "Secret" => &[
            "kind",
            "apiVersion",
            "metadata",
            "immutable",
            "data",
            "stringData",
            "type",
        ],
        "ServiceAccount" => &[
            "kind",
            "apiVersion",
            "metadata",
            "secrets",
            "imagePullSecrets",
            "automountServiceAccountToken",
        ],
        "Role" | "ClusterRole" => &["kind", "apiVersion", "metadata", "rules", "aggregationRule"],
        "RoleBinding" | "ClusterRoleBinding" => {
            &["kind", "apiVersion", "metadata", "subjects", "roleRef"]
        }
        "Event" => &[
            "kind",
            "apiVersion",
            "metadata",
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        "Table" => &[
            "kind",
            "apiVersion",
            "metadata",
            "columnDefinitions",
            "rows",
        ],
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
            &["kind", "apiVersion", "metadata", "webhooks"]
        }
        _ => &["kind", "apiVersion", "metadata", "spec", "status"],
    }
}

/// What a nested value is, for its key order.
#[derive(Clone, Copy)]
enum Ctx {
    Object,
    Meta,
    Details,
    Plain,
    /// An object in sorted key order, its field sets unfolded.
    Sorted,
    /// `metadata.managedFields`, its field sets unfolded.
    ManagedFields,
}

/// `value` (an object, a list or a Status), serialized in Go's field order.
pub struct GoOrdered<'a> {
    value: &'a Value,
    /// How its top level is ordered.
    ctx: Ctx,
}

impl<'a> GoOrdered<'a> {
    /// A built-in object, a list of them, a Status or a Table.
    pub fn new(value: &'a Value) -> Self {
        GoOrdered {
            value,
            ctx: Ctx::Object,
        }
    }

    /// An `ObjectMeta` or `ListMeta`.
    pub fn meta(value: &'a Value) -> Self {
        GoOrdered {
            value,
            ctx: Ctx::Meta,
        }
    }

    /// An object or list in sorted key order (an unstructured custom resource, as a real
    /// server serves one); [`crate::registry::resources::ResourceDef::ordered`] picks this or
    /// [`GoOrdered::new`] for a resource.
    pub fn sorted(value: &'a Value) -> Self {
        GoOrdered {
            value,
            ctx: Ctx::Sorted,
        }
    }
}

impl Serialize for GoOrdered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Nested(self.value, self.ctx).serialize(s)
    }
}

struct Nested<'a>(&'a Value, Ctx);

impl Serialize for Nested<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.1 {
            Ctx::Sorted => return Unfolded(self.0).serialize(s),
            Ctx::ManagedFields => return ManagedFields(self.0).serialize(s),
            _ => {}
        }
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(s);
        };
        match self.1 {
            Ctx::Plain | Ctx::Sorted | Ctx::ManagedFields => self.0.serialize(s),
            Ctx::Meta => ordered(s, fields, META, &[], |k| {
                if k == "managedFields" {
                    Ctx::ManagedFields
                } else {
                    Ctx::Plain
                }
            }),
            Ctx::Details => ordered(s, fields, DETAILS, &[], |_| Ctx::Plain),
            Ctx::Object => object(s, fields, &[]),
        }
    }
}

/// An object's top level, with `overrides` (`apiVersion`, `kind` set by the served version)
/// taking the place of the stored fields of the same name.
pub fn object<S: serde::Serializer>(
    s: S,
    fields: &Map<String, Value>,
    overrides: &[(&str, &Value)],
) -> Result<S::Ok, S::Error> {
    let field = |name: &str| {
        overrides
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .or_else(|| fields.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (kind, api_version) = (field("kind"), field("apiVersion"));
    let has_items = fields.get("items").is_some_and(Value::is_array);
    let is_status = kind == "Status";
    let order = top_order(kind, api_version, has_items);
    ordered(s, fields, order, overrides, |k| match k {
        "metadata" => Ctx::Meta,
        "details" if is_status => Ctx::Details,
        _ => Ctx::Plain,
    })
}

/// A built-in object as an item of a list: Go's order for an object of `kind` in
/// `api_version`, without the object's own `kind` and `apiVersion` (a typed list's items
/// leave their `TypeMeta` out, so kube-apiserver writes none).
pub fn list_item<S: serde::Serializer>(
    s: S,
    fields: &Map<String, Value>,
    kind: &str,
    api_version: &str,
) -> Result<S::Ok, S::Error> {
    let order = top_order(kind, api_version, false);
    ordered_without(
        s,
        fields,
        order,
        &[],
        &["kind", "apiVersion"],
        |k| match k {
            "metadata" => Ctx::Meta,
            _ => Ctx::Plain,
        },
    )
}

fn ordered<S: serde::Serializer>(
    s: S,
    fields: &Map<String, Value>,
    order: &[&str],
    overrides: &[(&str, &Value)],
    ctx: impl Fn(&str) -> Ctx,
) -> Result<S::Ok, S::Error> {
    ordered_without(s, fields, order, overrides, &[], ctx)
}

fn ordered_without<S: serde::Serializer>(
    s: S,
    fields: &Map<String, Value>,
    order: &[&str],
    overrides: &[(&str, &Value)],
    omit: &[&str],
    ctx: impl Fn(&str) -> Ctx,
) -> Result<S::Ok, S::Error> {
    let lookup = |k: &str| -> Option<&Value> {
        overrides
            .iter()
            .find(|(o, _)| *o == k)
            .map(|(_, v)| *v)
            .or_else(|| fields.get(k))
    };
    let extra = overrides
        .iter()
        .filter(|(k, _)| !fields.contains_key(*k))
        .count();
    let omitted = omit.iter().filter(|k| fields.contains_key(**k)).count();
    let mut map = s.serialize_map(Some(fields.len() + extra - omitted))?;
    for key in order {
        if omit.contains(key) {
            continue;
        }
        if let Some(v) = lookup(key) {
            if *key == "items" {
                map.serialize_entry(key, &Items(v))?;
            } else {
                map.serialize_entry(key, &Nested(v, ctx(key)))?;
            }
        }
    }
    // Overrides not in the order list, then the remaining stored keys (sorted, as stored).
    for (k, v) in overrides {
        if !order.contains(k) {
            map.serialize_entry(k, &Nested(v, ctx(k)))?;
        }
    }
    for (k, v) in fields {
        if order.contains(&k.as_str())
            || overrides.iter().any(|(o, _)| o == k)
            || omit.contains(&k.as_str())
        {
            continue;
        }
        map.serialize_entry(k, &Nested(v, ctx(k)))?;
    }
    map.end()
}

/// A list's `items`, each one an object.
struct Items<'a>(&'a Value);

impl Serialize for Items<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => s.collect_seq(items.iter().map(|i| Nested(i, Ctx::Object))),
            other => other.serialize(s),
        }
    }
}

/// [`GoOrdered`] as bytes.
#[cfg(test)]
pub fn to_vec(v: &Value) -> Vec<u8> {
    serde_json::to_vec(&GoOrdered::new(v)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_comes_in_go_field_order() {
        let status = json!({"apiVersion": "v1", "code": 409, "details": {"kind": "configmaps", "name": "a"},
            "kind": "Status", "message": "m", "metadata": {}, "reason": "AlreadyExists", "status": "Failure"});
        assert_eq!(
            String::from_utf8(to_vec(&status)).unwrap(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","reason":"AlreadyExists","details":{"name":"a","kind":"configmaps"},"code":409}"#
        );
    }

    #[test]
    fn objects_and_lists_put_the_envelope_first_and_keep_the_rest_sorted() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending"},
            "spec": {"z": 1, "a": 2}, "metadata": {"uid": "u", "name": "p", "namespace": "d",
            "creationTimestamp": "t", "resourceVersion": "5"}});
        let list = json!({"apiVersion": "v1", "items": [pod], "kind": "PodList",
                          "metadata": {"resourceVersion": "7", "continue": "c"}});
        assert_eq!(
            String::from_utf8(to_vec(&list)).unwrap(),
            concat!(
                r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"c"},"items":["#,
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"d","uid":"u","resourceVersion":"5","creationTimestamp":"t"},"#,
                r#""spec":{"a":2,"z":1},"status":{"phase":"Pending"}}]}"#
            )
        );
    }

    #[test]
    fn overrides_take_the_place_of_stored_fields() {
        let stored = json!({"metadata": {"name": "x"}, "data": {"k": "v"}, "apiVersion": "old"});
        let (av, kind) = (json!("v1"), json!("ConfigMap"));
        let Value::Object(fields) = &stored else {
            unreachable!()
        };
        let mut out = vec![];
        object(
            &mut serde_json::Serializer::new(&mut out),
            fields,
            &[("apiVersion", &av), ("kind", &kind)],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"},"data":{"k":"v"}}"#
        );
    }
}
