//! RFC 6902 JSON patch (`application/json-patch+json`): a list of operations, applied by the
//! `json-patch` crate within kube-apiserver's limits.
//!
//! Unlike the merge-style patches, a JSON patch does not look like the object: it is a program,
//! `[{"op": "add", "path": "/metadata/labels/a", "value": "1"}, ...]`, whose operations (`add`,
//! `remove`, `replace`, `move`, `copy`, `test`) address values by RFC 6901 JSON pointers
//! (`/spec/containers/0/image`, `~1` for `/` and `~0` for `~` inside a key, `-` for "after the
//! last element" of a list). It is the only patch that can insert into the middle of a list or
//! make a write conditional (`test`). It is what `kubectl patch --type=json` sends.
//!
//! Data in: the stored object and the operation list. Data out: the changed object, or an error
//! naming the operation (by index and `op`) and the pointer that failed. The patch is **all or
//! nothing**: the operations run on a copy, and on any error the target is left untouched (as
//! the real server's `jsonpatch.Apply`, which returns an error and no document).
//!
//! The operations are decoded and applied by the `json-patch` crate (`json_patch::patch_unsafe`,
//! one operation at a time on the copy). A `test` compares with `serde_json::Value`'s
//! equality: `1` and `1.0` differ (an integer and a float), as they do for Go's json-patch,
//! which compares the two values' JSON text.
//!
//! ## Limits (a patch is a program, so it is bounded like one)
//!
//! kube-apiserver runs JSON patches through `gopkg.in/evanphx/json-patch.v4` with two limits
//! (`apiserver/pkg/endpoints/handlers/patch.go` and the generic server's `JSONPatchMaxCopyBytes`),
//! and so does [`json_patch_limited`] around the crate, which has neither:
//!
//! * at most [`MAX_OPERATIONS`] (10,000) operations, else `413 RequestEntityTooLarge`
//!   `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got N`,
//!   checked before any operation is decoded;
//! * `copy` operations may add at most [`MAX_COPY_BYTES`] (3 MiB, the request body limit) in
//!   total, measured as json-patch measures it (the length of each copied value's JSON), else
//!   the patch fails with `Unable to complete the copy, the accumulated size increase of copy is
//!   N, exceeding the limit 3145728`, answered `422` as every failed JSON patch is. Without this
//!   bound 20 `copy` operations that each double the object grow a 1 KB patch into gigabytes;
//!   with it the document can never grow by more than 3 MiB, whatever the patch (also with
//!   `dryRun`, as the patch is applied before anything else happens). Each `copy`'s source is
//!   measured before the crate copies it, by a writer that stops counting at the remaining
//!   budget, so measuring costs no more than the budget either.

use json_patch::PatchOperation;
use serde::Deserialize;
use serde_json::Value;

/// At most this many operations in one JSON patch (`maxJSONPatchOperations`).
pub const MAX_OPERATIONS: usize = 10_000;

/// At most this many bytes added by the `copy` operations of one patch
/// (`JSONPatchMaxCopyBytes`, json-patch's `AccumulatedCopySizeLimit`: 3 MiB).
pub const MAX_COPY_BYTES: u64 = 3 * 1024 * 1024;

/// Why a JSON patch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPatchError {
    /// More than `MAX_OPERATIONS` (10,000) operations (answered `413`).
    #[error("The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {0}")]
    TooManyOperations(usize),
    /// The `copy` operations would add more than the limit (answered `422`).
    #[error(
        "Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {limit}"
    )]
    CopyTooLarge {
        /// Bytes the copies would have added, up to and including the refused one (a lower
        /// bound when the refused value is larger than the rest of the budget).
        accumulated: u64,
        /// The limit.
        limit: u64,
    },
    /// The patch is malformed or an operation does not apply (answered `422`).
    #[error("{0}")]
    Failed(String),
}

/// Counts bytes written and fails once they pass `limit`: measures a value's JSON length
/// without building it, and without walking more than `limit` bytes of it.
struct CountUpTo {
    count: u64,
    limit: u64,
}

impl std::io::Write for CountUpTo {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count += buf.len() as u64;
        if self.count > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `v`'s JSON, or `None` once it passes `limit`.
fn json_len_up_to(v: &Value, limit: u64) -> Option<u64> {
    let mut w = CountUpTo { count: 0, limit };
    serde_json::to_writer(&mut w, v).ok().map(|()| w.count)
}

/// Applies an RFC 6902 JSON patch (`ops` must be an array of operation objects) to `target`.
///
/// The patch is atomic: on any error `target` is left unchanged and the error names the failing
/// operation's index, its `op` and the path. The limits of [`json_patch_limited`] apply.
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    json_patch_limited(target, ops).map_err(|e| e.to_string())
}

/// [`json_patch()`] with its errors typed, so the caller can answer each as kube-apiserver does:
/// too many operations (`413`), too much copied (`422`), or an operation that failed (`422`).
pub fn json_patch_limited(target: &mut Value, ops: &Value) -> Result<(), JsonPatchError> {
    let Value::Array(ops) = ops else {
        return Err(JsonPatchError::Failed(
            "a JSON patch must be an array of operations".to_string(),
        ));
    };
    if ops.len() > MAX_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations(ops.len()));
    }
    let ops = ops
        .iter()
        .enumerate()
        .map(|(i, op)| {
            PatchOperation::deserialize(op).map_err(|e| {
                JsonPatchError::Failed(format!("JSON patch operation {i} is malformed: {e}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut doc = target.clone();
    let mut copied = 0u64;
    for (i, op) in ops.iter().enumerate() {
        if let PatchOperation::Copy(copy) = op
            && let Some(source) = doc.pointer(copy.from.as_str())
        {
            let budget = MAX_COPY_BYTES.saturating_sub(copied);
            let Some(size) = json_len_up_to(source, budget) else {
                return Err(JsonPatchError::CopyTooLarge {
                    accumulated: copied + budget + 1,
                    limit: MAX_COPY_BYTES,
                });
            };
            copied += size;
        }
        json_patch::patch_unsafe(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            let name = match op {
                PatchOperation::Add(_) => "add",
                PatchOperation::Remove(_) => "remove",
                PatchOperation::Replace(_) => "replace",
                PatchOperation::Move(_) => "move",
                PatchOperation::Copy(_) => "copy",
                PatchOperation::Test(_) => "test",
            };
            JsonPatchError::Failed(format!(
                "JSON patch operation {i} ({name}) failed at path {:?}: {}",
                e.path.as_str(),
                e.kind
            ))
        })?;
    }
    *target = doc;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_operations() {
        let mut doc = json!({"metadata":{"labels":{"a":"1"}},"spec":{"list":[1,2,3]}});
        json_patch(
            &mut doc,
            &json!([
                {"op":"add","path":"/metadata/labels/b","value":"2"},
                {"op":"replace","path":"/metadata/labels/a","value":"x"},
                {"op":"add","path":"/spec/list/1","value":9},
                {"op":"add","path":"/spec/list/-","value":4},
                {"op":"remove","path":"/spec/list/0"},
                {"op":"copy","from":"/metadata/labels","path":"/spec/copied"},
                {"op":"move","from":"/spec/copied/b","path":"/spec/moved"},
                {"op":"test","path":"/spec/moved","value":"2"}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata":{"labels":{"a":"x","b":"2"}},
                   "spec":{"list":[9,2,3,4],"copied":{"a":"x"},"moved":"2"}})
        );
    }

    #[test]
    fn json_patch_pointer_escapes() {
        let mut doc = json!({"metadata":{"annotations":{}}});
        json_patch(
            &mut doc,
            &json!([{"op":"add","path":"/metadata/annotations/example.com~1a~0b","value":"v"}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["annotations"]["example.com/a~b"], "v");
        let err = json_patch(&mut doc, &json!([{"op":"test","path":"a","value":1}])).unwrap_err();
        assert!(err.contains("operation 0 is malformed"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"test","path":"/a~2","value":1}])).unwrap_err();
        assert!(err.contains("operation 0 is malformed"), "{err}");
    }

    #[test]
    fn json_patch_is_atomic_and_errors_name_the_op() {
        let original = json!({"a":1,"b":[1]});
        let mut doc = original.clone();
        let err = json_patch(
            &mut doc,
            &json!([{"op":"replace","path":"/a","value":2},{"op":"remove","path":"/missing"}]),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "JSON patch operation 1 (remove) failed at path \"/missing\": path is invalid"
        );
        assert_eq!(doc, original);

        let err = json_patch(&mut doc, &json!([{"op":"test","path":"/a","value":5}])).unwrap_err();
        assert!(
            err.contains("(test)") && err.contains("value did not match"),
            "{err}"
        );
        let err = json_patch(&mut doc, &json!([{"op":"add","path":"/b/5","value":5}])).unwrap_err();
        assert!(err.contains("\"/b/5\""), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"add","path":"/b/01","value":5}])).unwrap_err();
        assert!(err.contains("\"/b/01\""), "{err}");
        let err = json_patch(&mut doc, &json!([{"op":"frob","path":"/a"}])).unwrap_err();
        assert!(err.contains("unknown variant `frob`"), "{err}");
        let err = json_patch(&mut doc, &json!([{"op":"add","path":"/a"}])).unwrap_err();
        assert!(err.contains("missing field `value`"), "{err}");
        let err = json_patch(&mut doc, &json!([7])).unwrap_err();
        assert!(err.contains("operation 0 is malformed"), "{err}");
        let err = json_patch(&mut doc, &json!({"op":"add"})).unwrap_err();
        assert!(err.contains("array"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"move","from":"/b","path":"/b/0"}])).unwrap_err();
        assert!(err.contains("inside itself"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"replace","path":"/zz","value":1}])).unwrap_err();
        assert!(err.contains("(replace)") && err.contains("/zz"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"copy","from":"/zz","path":"/y"}])).unwrap_err();
        assert!(err.contains("\"from\" path is invalid"), "{err}");
        assert_eq!(doc, original);
    }

    #[test]
    fn json_patch_replace_root_and_escaped_array() {
        let mut doc = json!({"a":1});
        json_patch(&mut doc, &json!([{"op":"replace","path":"","value":[1]}])).unwrap();
        assert_eq!(doc, json!([1]));
        json_patch(&mut doc, &json!([{"op":"add","path":"/0","value":0}])).unwrap();
        assert_eq!(doc, json!([0, 1]));
        // `move` to a sibling whose name starts with the source's is not a move into itself.
        let mut doc = json!({"a":1});
        json_patch(&mut doc, &json!([{"op":"move","from":"/a","path":"/ab"}])).unwrap();
        assert_eq!(doc, json!({"ab":1}));
    }

    #[test]
    fn a_test_tells_an_integer_from_a_float() {
        let mut doc = json!({"n": 1, "f": 1.5});
        let err = json_patch(&mut doc, &json!([{"op":"test","path":"/n","value":1.0}]));
        assert!(err.unwrap_err().contains("value did not match"));
        json_patch(&mut doc, &json!([{"op":"test","path":"/n","value":1}])).unwrap();
        json_patch(&mut doc, &json!([{"op":"test","path":"/f","value":1.5}])).unwrap();
        // Objects compare by content, whatever the order of their keys.
        let mut doc = json!({"o": {"a": 1, "b": [true, null]}});
        json_patch(
            &mut doc,
            &json!([{"op":"test","path":"/o","value":{"b":[true,null],"a":1}}]),
        )
        .unwrap();
    }

    #[test]
    fn the_operation_count_is_checked_before_anything_is_decoded() {
        let mut doc = json!({});
        // Not even valid operations: the count alone refuses them.
        let ops = Value::Array(vec![json!(null); MAX_OPERATIONS + 1]);
        assert_eq!(
            json_patch_limited(&mut doc, &ops),
            Err(JsonPatchError::TooManyOperations(MAX_OPERATIONS + 1))
        );
        let ops = Value::Array(vec![
            json!({"op":"add","path":"/a","value":1});
            MAX_OPERATIONS
        ]);
        json_patch_limited(&mut doc, &ops).unwrap();
        assert_eq!(doc, json!({"a": 1}));
    }

    #[test]
    fn copies_add_at_most_the_copy_budget() {
        // A 1 MiB string: copied twice it fits (2 MiB + quotes), the fourth copy does not.
        let big = "x".repeat(1024 * 1024);
        let mut doc = json!({ "s": big });
        let original = doc.clone();
        let copy = |to: &str| json!({"op":"copy","from":"/s","path":to});
        json_patch_limited(&mut doc, &json!([copy("/a"), copy("/b")])).unwrap();
        assert_eq!(doc["b"], doc["s"]);
        let mut doc = original.clone();
        let err =
            json_patch_limited(&mut doc, &json!([copy("/a"), copy("/b"), copy("/c")])).unwrap_err();
        // Each copy adds 1 MiB + 2 bytes of quotes; the third passes 3 MiB.
        assert_eq!(
            err,
            JsonPatchError::CopyTooLarge {
                accumulated: MAX_COPY_BYTES + 1,
                limit: MAX_COPY_BYTES
            }
        );
        assert_eq!(
            err.to_string(),
            "Unable to complete the copy, the accumulated size increase of copy is 3145729, exceeding the limit 3145728"
        );
        assert_eq!(doc, original);
        // Doubling: a small patch cannot grow the document past the budget.
        let mut doc = json!({"d": "0123456789abcdef"});
        let doubling: Vec<Value> = (0..40)
            .map(|i| json!({"op":"copy","from":"","path":format!("/d{i}")}))
            .collect();
        assert!(matches!(
            json_patch_limited(&mut doc, &Value::Array(doubling)),
            Err(JsonPatchError::CopyTooLarge { .. })
        ));
    }
}
