//! The four kinds of PATCH: JSON merge patch, JSON patch, strategic merge patch and server-side
//! apply, one file each, plus the two parts they share.
//!
//! A PATCH request carries a *description of a change* rather than a whole object; the
//! `Content-Type` says which language the description is written in. The API server reads the
//! stored object, applies the patch here, and then treats the result exactly like the body of a
//! PUT (validation, resourceVersion, generation, watch event). All functions in this module are
//! pure: JSON in, JSON out. They mirror `apiserver/pkg/endpoints/handlers/patch.go` and the
//! libraries it calls (`evanphx/json-patch`, `strategicpatch`, the structured-merge-diff field
//! manager).
//!
//! | Content-Type | function | file | idea |
//! |---|---|---|---|
//! | `application/merge-patch+json` | [`merge_patch`] | `merge_patch.rs` | RFC 7386: the patch looks like the object; maps merge recursively, `null` deletes a key, **lists are replaced whole** |
//! | `application/json-patch+json` | [`json_patch()`] | `json_patch.rs` | RFC 6902: a list of operations (`add`, `remove`, `replace`, `move`, `copy`, `test`) addressed by JSON pointers; all or nothing (the `json-patch` crate, within kube-apiserver's limits) |
//! | `application/strategic-merge-patch+json` | [`strategic_merge_patch`] | `strategic.rs` | like merge patch, but lists the Kubernetes types mark as "merge" lists are merged **element by element by a key** (containers by `name`, conditions by `type`, …), plus `$patch` directives |
//! | `application/apply-patch+yaml` | [`apply_patch`] | `apply.rs` | server-side apply: the client sends the fields it *owns*; the server merges them in and records ownership in `metadata.managedFields` |
//!
//! The shared parts:
//!
//! - `lists.rs`, [`list_strategy`]: which built-in lists merge by which key (the real server
//!   reads this from Go struct tags; this crate decides by the list's field name). Strategic
//!   merge patch and apply both use it.
//! - `managed_fields.rs`: field sets in the `FieldsV1` format of `metadata.managedFields`, and
//!   [`record_update`], which records ordinary writes (create, PUT, non-apply PATCH) as
//!   `operation: Update` entries. Apply reads and writes the same sets.
//!
//! # Reading order
//!
//! Merge patch first (twenty lines: the idea everything else refines), then JSON patch (a
//! different idea: a program of pointer operations), then strategic merge patch (merge patch
//! plus list keys and directives), then the field sets, then server-side apply (strategic
//! merge plus ownership: removals of fields a manager dropped, conflicts between managers).
//! Each file's doc says what it leaves out compared with the real server.

mod apply;
mod json_patch;
mod lists;
mod managed_fields;
mod merge_patch;
mod strategic;

pub use apply::{ApplyError, apply};
pub use json_patch::{JsonPatchError, json_patch, json_patch_limited};
pub use managed_fields::record_update;
pub use merge_patch::merge_patch;
pub use strategic::strategic_merge_patch;

#[cfg(test)]
mod props {
    //! Properties that hold across patch kinds, checked on random documents.
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn op() -> impl Strategy<Value = Value> {
        let path =
            prop::collection::vec(prop_oneof!["[a-d]", "[0-3]", Just("-".to_string())], 0..3)
                .prop_map(|t| t.iter().map(|s| format!("/{s}")).collect::<String>());
        (0..6usize, path.clone(), path, json_value()).prop_map(|(kind, path, from, value)| {
            let name = ["add", "remove", "replace", "move", "copy", "test"][kind];
            json!({"op": name, "path": path, "from": from, "value": value})
        })
    }

    proptest! {
        /// A JSON patch either applies completely or leaves the document untouched.
        #[test]
        fn json_patch_is_all_or_nothing(doc in json_value(), ops in prop::collection::vec(op(), 0..5)) {
            let mut target = doc.clone();
            if json_patch(&mut target, &Value::Array(ops.clone())).is_err() {
                prop_assert_eq!(target, doc);
            } else {
                // Applying the ops one by one gives the same result.
                let mut stepwise = doc.clone();
                for op in &ops {
                    json_patch(&mut stepwise, &Value::Array(vec![op.clone()])).unwrap();
                }
                prop_assert_eq!(target, stepwise);
            }
        }

        /// Merge patch: applying a patch twice is the same as once, and a patch without
        /// nulls is contained in the result.
        #[test]
        fn merge_patch_is_idempotent(doc in json_value(), patch in json_value()) {
            let mut once = doc.clone();
            merge_patch(&mut once, &patch);
            let mut twice = once.clone();
            merge_patch(&mut twice, &patch);
            prop_assert_eq!(&once, &twice);
        }

        /// Without merge lists or directives, a strategic merge patch is a merge patch.
        #[test]
        fn smp_without_lists_equals_merge_patch(doc in json_value(), patch in json_value()) {
            prop_assume!(!patch.to_string().contains('['));
            let mut a = doc.clone();
            merge_patch(&mut a, &patch);
            let mut b = doc.clone();
            strategic_merge_patch(&mut b, &patch).unwrap();
            prop_assert_eq!(a, b);
        }
    }
}
