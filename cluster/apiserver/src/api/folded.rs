//! Field sets folded: the store holds each `managedFields` entry's `fieldsV1` as its JSON text.
//!
//! Every write records who owns which fields in `metadata.managedFields`
//! ([`crate::registry::patch::record_update`]), one entry per manager, each with a field set in
//! the `FieldsV1` format: `{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{...}}`. As a
//! `serde_json::Value` tree such a set is a map per level, and every non-empty map costs a
//! `BTreeMap` node of about 640 bytes whatever it holds: a pod after the node's status writes
//! is 3,105 bytes of JSON and a tree of about 50 KB, 36 KB of it its field sets. Nothing but the
//! field manager reads them.
//!
//! kube-apiserver keeps a set as its bytes (`metav1.FieldsV1{Raw []byte}`) and decodes it only
//! in the field manager. So does this server: in every object the store holds (its tree, its
//! rested bytes, the history, the data directory), a `fieldsV1` that is a JSON object is
//! *folded* into a `Value::String` holding that object's compact JSON ([`fold`]); the same pod
//! is then a tree of about 16 KB.
//!
//! * **In:** a write's object is folded where it enters the write path
//!   ([`crate::registry::strategy::intake`]) and again, for any path that built it otherwise,
//!   where it is stored ([`crate::storage::store::State::write`]); folding is idempotent.
//! * **Inside:** the field manager reads a set's paths straight from its text, looks a set up
//!   through [`set_tree`] and compares sets with [`same_set`], all of which take either form;
//!   a set it writes is rendered folded, straight from its paths. A folded set is serde_json's
//!   compact encoding of a sorted tree, so two sets are equal exactly when their texts are.
//! * **Out:** everything a client sees is unfolded. Responses and watch events are serialized
//!   through [`crate::api::json_order`], which writes a folded set as the raw JSON it holds
//!   ([`ManagedFields`]); a copy made to be shown ([`crate::registry::strategy::present`], from
//!   which admission reviews, Table rows and `PartialObjectMetadata` are built) is unfolded
//!   ([`unfold`]), and so are the objects of a conversion review. A set that is a string but
//!   not JSON (a client may send anything) is written as the string it is.
//!
//! The loopback clients ([`crate::loopback`]) read the store's objects as they are held,
//! folded; the controllers of the embedded cluster never read field sets, and what they write
//! back is folded already.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The entries of `metadata.managedFields`, if it is a list.
fn entries_mut(obj: &mut Value) -> Option<&mut Vec<Value>> {
    obj.get_mut("metadata")?
        .get_mut("managedFields")?
        .as_array_mut()
}

/// Folds every entry's `fieldsV1` that is a JSON object into a string of its compact JSON.
/// Anything else (a set folded already, a value that is no set) is left as it is.
pub fn fold(obj: &mut Value) {
    let Some(entries) = entries_mut(obj) else {
        return;
    };
    for e in entries {
        if let Some(set) = e.get_mut("fieldsV1")
            && set.is_object()
        {
            *set = Value::String(set.to_string());
        }
    }
}

/// Unfolds every entry's folded `fieldsV1` back into a JSON object (a copy to be shown). A
/// string that is not JSON is left a string.
pub fn unfold(obj: &mut Value) {
    let Some(entries) = entries_mut(obj) else {
        return;
    };
    for e in entries {
        if let Some(set) = e.get_mut("fieldsV1")
            && let Value::String(text) = set
            && let Ok(tree) = serde_json::from_str::<Value>(text)
        {
            *set = tree;
        }
    }
}

/// A `fieldsV1` set as a map, in either form: borrowed when it is one, parsed when it is
/// folded; `None` for anything that is no map.
pub fn set_tree(set: &Value) -> Option<Cow<'_, Map<String, Value>>> {
    match set {
        Value::Object(m) => Some(Cow::Borrowed(m)),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Some(Cow::Owned(m)),
            _ => None,
        },
        _ => None,
    }
}

/// Whether two `fieldsV1` values are the same set, whichever form each is in.
pub fn same_set(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::String(text)), Some(tree @ Value::Object(_)))
        | (Some(tree @ Value::Object(_)), Some(Value::String(text))) => encodes_as(tree, text),
        _ => a == b,
    }
}

/// Whether `tree`'s compact JSON is `text`, compared as it is written (no copy).
fn encodes_as(tree: &Value, text: &str) -> bool {
    struct Matches<'a>(&'a [u8]);
    impl std::io::Write for Matches<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.0.strip_prefix(buf) {
                Some(rest) => {
                    self.0 = rest;
                    Ok(buf.len())
                }
                None => Err(std::io::ErrorKind::InvalidData.into()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut rest = Matches(text.as_bytes());
    serde_json::to_writer(&mut rest, tree).is_ok() && rest.0.is_empty()
}

/// Whether a `fieldsV1` value, in either form, is a set with at least one member.
pub fn is_nonempty_set(set: &Value) -> bool {
    match set {
        Value::Object(m) => !m.is_empty(),
        // Folded sets are compact encodings of maps: `{}` is the empty one.
        Value::String(text) => text.starts_with('{') && text != "{}",
        _ => false,
    }
}

/// A `managedFields` list serialized as a client sees it: each folded `fieldsV1` written as
/// the JSON it holds.
pub struct ManagedFields<'a>(pub &'a Value);

impl Serialize for ManagedFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Array(entries) = self.0 else {
            return self.0.serialize(s);
        };
        let mut seq = s.serialize_seq(Some(entries.len()))?;
        for e in entries {
            seq.serialize_element(&Entry(e))?;
        }
        seq.end()
    }
}

/// One entry of [`ManagedFields`].
struct Entry<'a>(&'a Value);

impl Serialize for Entry<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            match v {
                Value::String(text) if k == "fieldsV1" => {
                    match serde_json::from_str::<&RawValue>(text) {
                        Ok(raw) => map.serialize_entry(k, raw)?,
                        Err(_) => map.serialize_entry(k, v)?,
                    }
                }
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// An object serialized as a client sees it, its keys in the tree's (sorted) order, with
/// `metadata.managedFields` through [`ManagedFields`]; for a list, each item so. The bytes of
/// `serde_json::to_vec` of the unfolded object.
pub struct Unfolded<'a>(pub &'a Value);

impl Serialize for Unfolded<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("metadata", Value::Object(_)) => map.serialize_entry(k, &SortedMeta(v))?,
                ("items", Value::Array(items)) => {
                    map.serialize_entry(k, &Items(items))?;
                }
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// An object's metadata in sorted order, `managedFields` unfolded.
pub struct SortedMeta<'a>(pub &'a Value);

impl Serialize for SortedMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(Some(fields.len()))?;
        for (k, v) in fields {
            if k == "managedFields" {
                map.serialize_entry(k, &ManagedFields(v))?;
            } else {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

struct Items<'a>(&'a [Value]);

impl Serialize for Items<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Unfolded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"kind": "Pod", "metadata": {"name": "p", "managedFields": [
            {"manager": "kubelet", "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}}}}},
            {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:nodeName": {}}}},
        ]}, "spec": {"nodeName": "n"}})
    }

    /// Folded, a set is its compact JSON; unfolded, the object again; serialized, the bytes of
    /// the unfolded object, whichever form it is in.
    #[test]
    fn a_folded_object_serializes_and_unfolds_to_what_was_folded() {
        let mut folded = pod();
        fold(&mut folded);
        let sets = &folded["metadata"]["managedFields"];
        assert_eq!(
            sets[1]["fieldsV1"],
            json!(r#"{"f:spec":{"f:nodeName":{}}}"#)
        );
        let once = folded.clone();
        fold(&mut folded);
        assert_eq!(folded, once, "folding twice is folding once");
        let want = serde_json::to_vec(&pod()).unwrap();
        assert_eq!(serde_json::to_vec(&Unfolded(&folded)).unwrap(), want);
        assert_eq!(serde_json::to_vec(&Unfolded(&pod())).unwrap(), want);
        let list = json!({"kind": "PodList", "items": [folded.clone(), pod()]});
        assert_eq!(
            serde_json::to_vec(&Unfolded(&list)).unwrap(),
            serde_json::to_vec(&json!({"kind": "PodList", "items": [pod(), pod()]})).unwrap()
        );
        unfold(&mut folded);
        assert_eq!(folded, pod());
    }

    /// A string that is not JSON stays the string it is, in and out.
    #[test]
    fn a_set_that_is_no_json_stays_a_string() {
        let mut odd = json!({"metadata": {"managedFields": [{"fieldsV1": "f:spec"}]}});
        let before = odd.clone();
        unfold(&mut odd);
        assert_eq!(odd, before);
        assert_eq!(
            serde_json::to_string(&Unfolded(&odd)).unwrap(),
            r#"{"metadata":{"managedFields":[{"fieldsV1":"f:spec"}]}}"#
        );
        assert!(set_tree(&json!("f:spec")).is_none());
        assert!(!is_nonempty_set(&json!("{}")) && !is_nonempty_set(&json!({})));
        assert!(is_nonempty_set(&json!("{\"f:a\":{}}")) && is_nonempty_set(&json!({"f:a": {}})));
    }

    #[test]
    fn sets_compare_equal_across_forms() {
        let tree = json!({"f:spec": {"f:a": {}, "f:b": {}}});
        let text = json!(tree.to_string());
        assert!(same_set(Some(&tree), Some(&text)));
        assert!(same_set(Some(&text), Some(&tree)));
        assert!(!same_set(Some(&text), Some(&json!({"f:spec": {}}))));
        assert!(!same_set(Some(&text), None));
        let longer = json!({"f:spec": {"f:a": {}, "f:b": {}, "f:c": {}}});
        assert!(
            !same_set(Some(&longer), Some(&text)),
            "a prefix is not the set"
        );
        assert!(!same_set(
            Some(&text),
            Some(&json!({"f:spec": {"f:a": {}}}))
        ));
        assert_eq!(
            set_tree(&text).unwrap().into_owned(),
            tree.as_object().unwrap().clone()
        );
    }
}
