//! RFC 6902 JSON patch (`application/json-patch+json`): a list of operations.
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
//! ## Limits (a patch is a program, so it is bounded like one)
//!
//! kube-apiserver runs JSON patches through `gopkg.in/evanphx/json-patch.v4` with two limits
//! (`apiserver/pkg/endpoints/handlers/patch.go` and the generic server's `JSONPatchMaxCopyBytes`),
//! and so does [`json_patch_limited`]:
//!
//! * at most [`MAX_OPERATIONS`] (10,000) operations, else `413 RequestEntityTooLarge`
//!   `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got N`,
//!   checked before any operation runs;
//! * `copy` operations may add at most [`MAX_COPY_BYTES`] (3 MiB, the request body limit) in
//!   total, measured as json-patch measures it (the length of each copied value's JSON), else
//!   the patch fails with `Unable to complete the copy, the accumulated size increase of copy is
//!   N, exceeding the limit 3145728`, answered `422` as every failed JSON patch is. Without this
//!   bound 20 `copy` operations that each double the object grow a 1 KB patch into gigabytes;
//!   with it the document can never grow by more than 3 MiB, whatever the patch (also with
//!   `dryRun`, as the patch is applied before anything else happens). The copied value's size is
//!   measured by a writer that stops counting at the remaining budget, so measuring costs no
//!   more than the budget either.
//!
//! Reading a value (`copy`'s source, `test`) borrows it; only the value copied is cloned.

use serde_json::Value;

/// Decodes a JSON pointer (RFC 6901) into reference tokens: `""` is the whole document,
/// `/a~1b/c~0d` is `["a/b", "c~d"]`.
pub fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "invalid JSON pointer {pointer:?}: must be empty or start with '/'"
        ));
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(format!(
                                "invalid JSON pointer {pointer:?}: '~' must be followed by '0' or '1'"
                            ));
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

/// Parses an array index token: decimal, no sign, no leading zeros.
fn array_index(token: &str, pointer: &str) -> Result<usize, String> {
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if !valid {
        return Err(format!(
            "path {pointer:?}: {token:?} is not a valid array index"
        ));
    }
    token
        .parse()
        .map_err(|_| format!("path {pointer:?}: array index {token:?} is out of range"))
}

/// Walks to the value a token list addresses.
fn resolve_mut<'a>(
    doc: &'a mut Value,
    tokens: &[String],
    pointer: &str,
) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map
                .get_mut(token)
                .ok_or_else(|| format!("path {pointer:?} does not exist: no key {token:?}"))?,
            Value::Array(items) => {
                let len = items.len();
                let i = array_index(token, pointer)?;
                items.get_mut(i).ok_or_else(|| {
                    format!(
                        "path {pointer:?} does not exist: index {i} out of bounds (length {len})"
                    )
                })?
            }
            _ => {
                return Err(format!(
                    "path {pointer:?} does not exist: {token:?} is below a scalar"
                ));
            }
        };
    }
    Ok(cur)
}

/// Walks to the value a token list addresses, borrowing.
fn resolve<'a>(doc: &'a Value, tokens: &[String], pointer: &str) -> Result<&'a Value, String> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map
                .get(token)
                .ok_or_else(|| format!("path {pointer:?} does not exist: no key {token:?}"))?,
            Value::Array(items) => {
                let len = items.len();
                let i = array_index(token, pointer)?;
                items.get(i).ok_or_else(|| {
                    format!(
                        "path {pointer:?} does not exist: index {i} out of bounds (length {len})"
                    )
                })?
            }
            _ => {
                return Err(format!(
                    "path {pointer:?} does not exist: {token:?} is below a scalar"
                ));
            }
        };
    }
    Ok(cur)
}

fn pointer_get<'a>(doc: &'a Value, pointer: &str) -> Result<&'a Value, String> {
    let tokens = parse_pointer(pointer)?;
    resolve(doc, &tokens, pointer)
}

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

fn pointer_add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    let tokens = parse_pointer(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match resolve_mut(doc, parents, pointer)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let i = if last == "-" {
                items.len()
            } else {
                array_index(last, pointer)?
            };
            if i > items.len() {
                return Err(format!(
                    "path {pointer:?}: index {i} out of bounds for add (length {})",
                    items.len()
                ));
            }
            items.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "path {pointer:?}: parent is not an object or array"
        )),
    }
}

fn pointer_remove(doc: &mut Value, pointer: &str) -> Result<Value, String> {
    let tokens = parse_pointer(pointer)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err("cannot remove the whole document (path \"\")".to_string());
    };
    match resolve_mut(doc, parents, pointer)? {
        Value::Object(map) => map
            .remove(last)
            .ok_or_else(|| format!("path {pointer:?} does not exist: no key {last:?}")),
        Value::Array(items) => {
            let i = array_index(last, pointer)?;
            if i >= items.len() {
                return Err(format!(
                    "path {pointer:?} does not exist: index {i} out of bounds (length {})",
                    items.len()
                ));
            }
            Ok(items.remove(i))
        }
        _ => Err(format!(
            "path {pointer:?}: parent is not an object or array"
        )),
    }
}

/// Applies an RFC 6902 JSON patch (`ops` must be an array of operation objects) to `target`.
///
/// The patch is atomic: on any error `target` is left unchanged and the error names the failing
/// operation's index, its `op` and the path. The limits of [`json_patch_limited`] apply.
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    json_patch_limited(target, ops).map_err(|e| e.to_string())
}

/// [`json_patch`] with its errors typed, so the caller can answer each as kube-apiserver does:
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
    let mut doc = target.clone();
    let mut copied = 0u64;
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op, &mut copied).map_err(|e| match e {
            JsonPatchError::Failed(m) => {
                JsonPatchError::Failed(format!("JSON patch operation {i}: {m}"))
            }
            other => other,
        })?;
    }
    *target = doc;
    Ok(())
}

fn apply_op(doc: &mut Value, op: &Value, copied: &mut u64) -> Result<(), JsonPatchError> {
    let Value::Object(fields) = op else {
        return Err(JsonPatchError::Failed(format!(
            "operation must be an object, got {op}"
        )));
    };
    if fields.get("op").and_then(Value::as_str) == Some("copy") {
        return copy_op(doc, op, fields, copied);
    }
    apply_plain_op(doc, op, fields).map_err(JsonPatchError::Failed)
}

/// `copy`: the one operation that can grow the document by more than the patch's own size, so
/// the one that is metered.
fn copy_op(
    doc: &mut Value,
    op: &Value,
    fields: &serde_json::Map<String, Value>,
    copied: &mut u64,
) -> Result<(), JsonPatchError> {
    let str_field = |name: &str| -> Result<&str, JsonPatchError> {
        fields.get(name).and_then(Value::as_str).ok_or_else(|| {
            JsonPatchError::Failed(format!("missing or non-string {name:?} in {op}"))
        })
    };
    let path = str_field("path")?;
    let from = str_field("from")?;
    let source =
        pointer_get(doc, from).map_err(|e| JsonPatchError::Failed(format!("copy from: {e}")))?;
    let budget = MAX_COPY_BYTES.saturating_sub(*copied);
    let Some(size) = json_len_up_to(source, budget) else {
        return Err(JsonPatchError::CopyTooLarge {
            accumulated: *copied + budget + 1,
            limit: MAX_COPY_BYTES,
        });
    };
    *copied += size;
    let value = source.clone();
    pointer_add(doc, path, value).map_err(JsonPatchError::Failed)
}

fn apply_plain_op(
    doc: &mut Value,
    op: &Value,
    fields: &serde_json::Map<String, Value>,
) -> Result<(), String> {
    let str_field = |name: &str| -> Result<&str, String> {
        fields
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("missing or non-string {name:?} in {op}"))
    };
    let value_field = || -> Result<Value, String> {
        fields
            .get("value")
            .cloned()
            .ok_or_else(|| format!("missing \"value\" in {op}"))
    };
    let kind = str_field("op")?;
    let path = str_field("path")?;
    match kind {
        "add" => pointer_add(doc, path, value_field()?),
        "remove" => pointer_remove(doc, path).map(drop),
        "replace" => {
            let value = value_field()?;
            let tokens = parse_pointer(path)?;
            let slot = resolve_mut(doc, &tokens, path).map_err(|e| format!("replace: {e}"))?;
            *slot = value;
            Ok(())
        }
        "move" => {
            let from = str_field("from")?;
            if path != from && path.starts_with(from) && path[from.len()..].starts_with('/') {
                return Err(format!(
                    "move: cannot move {from:?} into its own child {path:?}"
                ));
            }
            let value = pointer_remove(doc, from).map_err(|e| format!("move from: {e}"))?;
            pointer_add(doc, path, value)
        }
        "test" => {
            let want = value_field()?;
            let have = pointer_get(doc, path).map_err(|e| format!("test: {e}"))?;
            if *have == want {
                Ok(())
            } else {
                Err(format!(
                    "testing value {path} failed: have {have}, want {want}"
                ))
            }
        }
        other => Err(format!(
            "unsupported op {other:?}: expected add, remove, replace, move, copy or test"
        )),
    }
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
        assert_eq!(parse_pointer("").unwrap(), Vec::<String>::new());
        assert!(parse_pointer("a").unwrap_err().contains("start with '/'"));
        assert!(parse_pointer("/a~2").unwrap_err().contains("'~'"));
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
        assert!(
            err.contains("operation 1") && err.contains("/missing"),
            "{err}"
        );
        assert_eq!(doc, original);

        let err = json_patch(&mut doc, &json!([{"op":"test","path":"/a","value":5}])).unwrap_err();
        assert!(err.contains("testing value /a failed"), "{err}");
        let err = json_patch(&mut doc, &json!([{"op":"add","path":"/b/5","value":5}])).unwrap_err();
        assert!(err.contains("out of bounds"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"add","path":"/b/01","value":5}])).unwrap_err();
        assert!(err.contains("not a valid array index"), "{err}");
        let err = json_patch(&mut doc, &json!([{"op":"frob","path":"/a"}])).unwrap_err();
        assert!(err.contains("unsupported op \"frob\""), "{err}");
        let err = json_patch(&mut doc, &json!([{"op":"add","path":"/a"}])).unwrap_err();
        assert!(err.contains("missing \"value\""), "{err}");
        let err = json_patch(&mut doc, &json!({"op":"add"})).unwrap_err();
        assert!(err.contains("array"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"move","from":"/b","path":"/b/0"}])).unwrap_err();
        assert!(err.contains("own child"), "{err}");
        let err =
            json_patch(&mut doc, &json!([{"op":"replace","path":"/zz","value":1}])).unwrap_err();
        assert!(err.contains("replace") && err.contains("/zz"), "{err}");
    }

    #[test]
    fn json_patch_replace_root_and_escaped_array() {
        let mut doc = json!({"a":1});
        json_patch(&mut doc, &json!([{"op":"replace","path":"","value":[1]}])).unwrap();
        assert_eq!(doc, json!([1]));
        json_patch(&mut doc, &json!([{"op":"add","path":"/0","value":0}])).unwrap();
        assert_eq!(doc, json!([0, 1]));
    }
}
