//! RFC 7386 JSON merge patch (`application/merge-patch+json`): the simplest of the four.
//!
//! The patch looks like the object it changes. Maps merge key by key and recursively; `null`
//! deletes a key; everything else, **lists included**, replaces the stored value whole. So a merge
//! patch cannot add one container to a pod's list: it has to send the whole list (which is what
//! [`crate::registry::patch::strategic`] fixes for built-in kinds). It is what `kubectl patch --type=merge` sends,
//! and the only merge-style patch custom resources accept.
//!
//! Data in: the stored object and the patch, both JSON. Data out: the object, changed in place.
//! It never fails: any JSON value is a valid merge patch.

use serde_json::{Map, Value};

/// Applies an RFC 7386 JSON merge patch to `target` in place.
///
/// A patch that is not an object replaces the target. An object patch merges key by key: `null`
/// removes the key, an object merges recursively (creating the key if needed), anything else
/// (lists included) replaces the value.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_map) = target {
        for (key, value) in patch_map {
            if value.is_null() {
                target_map.remove(key);
            } else {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                merge_patch(slot, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc_examples() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (mut target, patch, want) in cases {
            merge_patch(&mut target, &patch);
            assert_eq!(target, want, "patch {patch}");
        }
    }
}
