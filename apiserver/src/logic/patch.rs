//! The four kinds of PATCH: JSON merge patch, JSON patch, strategic merge patch and server-side apply.
//!
//! A PATCH request carries a *description of a change* rather than a whole object; the
//! `Content-Type` says which language the description is written in. The API server reads the
//! stored object, applies the patch here, and then treats the result exactly like the body of a
//! PUT (validation, resourceVersion, generation, watch event). All functions in this module are
//! pure: JSON in, JSON out.
//!
//! | Content-Type | function | idea |
//! |---|---|---|
//! | `application/merge-patch+json` | [`merge_patch`] | RFC 7386: the patch looks like the object; maps merge recursively, `null` deletes a key, **lists are replaced whole** |
//! | `application/json-patch+json` | [`json_patch`] | RFC 6902: a list of operations (`add`, `remove`, `replace`, `move`, `copy`, `test`) addressed by JSON pointers; all or nothing |
//! | `application/strategic-merge-patch+json` | [`strategic_merge_patch`] | like merge patch, but lists the Kubernetes types mark as "merge" lists are merged **element by element by a key** (containers by `name`, conditions by `type`, …), plus `$patch` directives |
//! | `application/apply-patch+yaml` | [`apply_patch`] | server-side apply: the client sends the fields it *owns*; the server merges them in and records ownership in `metadata.managedFields` |
//!
//! # Strategic merge patch without Go struct tags
//!
//! The real server finds merge keys in the Go struct tags of the built-in types
//! (`patchStrategy:"merge" patchMergeKey:"name"`). This crate serves built-in kinds as JSON, so the
//! keys are looked up by the *list's field name* in [`list_strategy`]; the names were chosen so
//! that no two built-in lists that share a name disagree on the key (the one exception, `ports`,
//! is `containerPort` in containers and `port` in Services, and is decided by the elements).
//! Lists not in that table are replaced, as in a merge patch. The directives kubectl and client-go
//! send are understood:
//!
//! - `{"$patch": "replace", ...}` in a map replaces the map instead of merging into it;
//!   `{"$patch": "delete"}` removes it.
//! - In a merge list, an element `{"name": "x", "$patch": "delete"}` removes element `x`, and an
//!   element `{"$patch": "replace"}` makes the patch's list replace the stored one.
//! - `$deleteFromPrimitiveList/<field>: [values]` removes values from a primitive merge list
//!   (such as `finalizers`).
//! - `$setElementOrder/<field>: [...]` reorders the merged list (elements named in it first, in
//!   that order, then the rest in their stored order).
//! - `$retainKeys: [keys]` in a map drops every key of the merged map not listed.
//!
//! Custom resources never get strategic merge patch (the server answers 415), so the table only
//! has to be right for built-in kinds.
//!
//! # Server-side apply, the basic version
//!
//! [`apply_patch`] merges the applied configuration onto the live object (maps recursively, lists
//! by the same keys as strategic merge patch, other lists replaced), then records the applying
//! manager's *field set* in `metadata.managedFields` in the real `FieldsV1` format
//! (`{"f:spec":{"f:replicas":{}}}`, list elements as `k:{"name":"web"}`, set members as `v:"x"`).
//! Because it remembers what each manager applied, it can also do the two things users notice:
//!
//! - a field the same manager applied before but omits now is **removed** (unless another
//!   manager also owns it), which is how `kubectl apply --server-side` deletes a field you took out
//!   of the file;
//! - a field another *applier* owns and this apply sets to a different value is a **conflict**
//!   (409, `Apply failed with 1 conflict: conflict with "other": .spec.x`), unless `force` is set,
//!   in which case ownership moves to this manager.
//!
//! Ordinary writes are recorded too: [`record_update`] gives the writing manager an
//! `operation: Update` entry with the fields it set or changed, taking them away from other
//! managers, as the real field manager does for creates, PUTs and non-apply PATCHes.
//!
//! What it leaves out: fields owned by `Update` managers never conflict with an apply (the real
//! server reports those conflicts too, so an apply that changes a value a controller wrote
//! succeeds here where a real server would ask for `force`); field sets are computed
//! without the OpenAPI schema, so the `"."` self-marker is written only for list elements and
//! for `labels`/`annotations`, and list merge keys come from [`list_strategy`] rather than from
//! `x-kubernetes-list-map-keys`; there is no per-version conversion of field sets.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

// ------------------------------------------------------------------------------------------------
// RFC 7386 JSON merge patch
// ------------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------------
// RFC 6902 JSON patch
// ------------------------------------------------------------------------------------------------

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

fn pointer_get(doc: &Value, pointer: &str) -> Result<Value, String> {
    let tokens = parse_pointer(pointer)?;
    let mut doc = doc.clone();
    resolve_mut(&mut doc, &tokens, pointer).map(|v| v.clone())
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
/// operation's index, its `op` and the path. The API server caps patches at 10000 operations;
/// so does this function.
pub fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON patch must be an array of operations".to_string());
    };
    if ops.len() > 10_000 {
        return Err(format!(
            "the allowed maximum operations in a JSON patch is 10000, got {}",
            ops.len()
        ));
    }
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|e| format!("JSON patch operation {i}: {e}"))?;
    }
    *target = doc;
    Ok(())
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let Value::Object(fields) = op else {
        return Err(format!("operation must be an object, got {op}"));
    };
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
        "copy" => {
            let from = str_field("from")?;
            let value = pointer_get(doc, from).map_err(|e| format!("copy from: {e}"))?;
            pointer_add(doc, path, value)
        }
        "test" => {
            let want = value_field()?;
            let have = pointer_get(doc, path).map_err(|e| format!("test: {e}"))?;
            if have == want {
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

// ------------------------------------------------------------------------------------------------
// Strategic merge patch
// ------------------------------------------------------------------------------------------------

/// How strategic merge patch (and apply) treat a list field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// A list of objects merged element by element; elements are identified by this key.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (union), e.g. `metadata.finalizers`.
    PrimitiveSet,
    /// Atomic: the patch's list replaces the stored one.
    Replace,
}

/// The merge strategy of the built-in list named `field`, as declared by the Kubernetes types'
/// `patchStrategy`/`patchMergeKey` tags. `sample` holds elements of the lists being merged: it
/// decides between `containerPort` (container ports) and `port` (Service ports).
pub fn list_strategy(field: &str, sample: &[&Value]) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates"
        | "claims" => ListStrategy::MergeByKey("name"),
        "volumeMounts" => ListStrategy::MergeByKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeByKey("devicePath"),
        "conditions" => ListStrategy::MergeByKey("type"),
        "ownerReferences" => ListStrategy::MergeByKey("uid"),
        "hostAliases" => ListStrategy::MergeByKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeByKey("topologyKey"),
        "ports" => {
            if sample.iter().any(|v| v.get("containerPort").is_some()) {
                ListStrategy::MergeByKey("containerPort")
            } else {
                ListStrategy::MergeByKey("port")
            }
        }
        "finalizers" => ListStrategy::PrimitiveSet,
        _ => ListStrategy::Replace,
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `target` in place (see the module docs for the rules).
///
/// Errors name the offending directive or element, e.g. an unknown `$patch` value or a merge-list
/// element without its merge key. On error `target` is left unchanged.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let mut result = target.clone();
    smp_value(&mut result, patch, "")?;
    *target = result;
    Ok(())
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn smp_value(target: &mut Value, patch: &Value, path: &str) -> Result<(), String> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match patch_map.get(DIRECTIVE) {
        None => {}
        Some(Value::String(d)) if d == "replace" => {
            let mut replacement = patch_map.clone();
            replacement.remove(DIRECTIVE);
            strip_directives(&mut replacement);
            *target = Value::Object(replacement);
            return Ok(());
        }
        Some(Value::String(d)) if d == "delete" => {
            *target = Value::Null;
            return Ok(());
        }
        Some(Value::String(d)) if d == "merge" => {}
        Some(other) => {
            return Err(format!(
                "{}: unknown patch directive {other} (expected \"replace\", \"delete\" or \"merge\")",
                if path.is_empty() { "<root>" } else { path }
            ));
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    // Primitive-list deletions and element orders are applied after the merge of their field.
    let mut orders: Vec<(&str, &Value)> = Vec::new();
    for (key, value) in patch_map {
        if key == DIRECTIVE || key == RETAIN_KEYS {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER_PREFIX) {
            orders.push((field, value));
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_PRIMITIVE_PREFIX) {
            let Value::Array(remove) = value else {
                return Err(format!("{}: {key} must be a list", child_path(path, field)));
            };
            if let Some(Value::Array(items)) = target_map.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        let field_path = child_path(path, key);
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match value {
            Value::Array(patch_items) => {
                let current = target_map.remove(key);
                let merged = smp_list(key, current, patch_items, &field_path)?;
                target_map.insert(key.clone(), merged);
            }
            Value::Object(_) => {
                let slot = target_map.entry(key.clone()).or_insert(Value::Null);
                smp_value(slot, value, &field_path)?;
                if slot.is_null() {
                    target_map.remove(key);
                }
            }
            _ => {
                target_map.insert(key.clone(), value.clone());
            }
        }
    }
    for (field, order) in orders {
        let Value::Array(order) = order else {
            return Err(format!(
                "{}: {SET_ORDER_PREFIX}{field} must be a list",
                child_path(path, field)
            ));
        };
        if let Some(Value::Array(items)) = target_map.get_mut(field) {
            reorder(field, items, order);
        }
    }
    if let Some(retain) = patch_map.get(RETAIN_KEYS) {
        let Value::Array(retain) = retain else {
            return Err(format!(
                "{}: $retainKeys must be a list of field names",
                if path.is_empty() { "<root>" } else { path }
            ));
        };
        let keep: BTreeSet<&str> = retain.iter().filter_map(Value::as_str).collect();
        target_map.retain(|k, _| keep.contains(k.as_str()));
    }
    Ok(())
}

/// Removes `$`-directives from a value that is stored as-is (a `$patch: replace` body).
fn strip_directives(map: &mut Map<String, Value>) {
    map.retain(|k, _| !k.starts_with('$'));
    for value in map.values_mut() {
        match value {
            Value::Object(m) => strip_directives(m),
            Value::Array(items) => {
                items.retain(|i| i.get(DIRECTIVE).is_none());
                for item in items {
                    if let Value::Object(m) = item {
                        strip_directives(m);
                    }
                }
            }
            _ => {}
        }
    }
}

fn reorder(field: &str, items: &mut Vec<Value>, order: &[Value]) {
    let sample: Vec<&Value> = items.iter().chain(order.iter()).collect();
    let strategy = list_strategy(field, &sample);
    let identity = |item: &Value| -> Value {
        match strategy {
            ListStrategy::MergeByKey(k) => item.get(k).cloned().unwrap_or(Value::Null),
            _ => item.clone(),
        }
    };
    let wanted: Vec<Value> = order.iter().map(&identity).collect();
    let mut rest = std::mem::take(items);
    for want in &wanted {
        if let Some(pos) = rest.iter().position(|i| identity(i) == *want) {
            items.push(rest.remove(pos));
        }
    }
    items.extend(rest);
}

fn smp_list(
    field: &str,
    current: Option<Value>,
    patch_items: &[Value],
    path: &str,
) -> Result<Value, String> {
    let mut current = match current {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    // `{"$patch": "replace"}` as an element: the rest of the patch list is the new list.
    let replace = patch_items.iter().any(|i| {
        i.get(DIRECTIVE).and_then(Value::as_str) == Some("replace")
            && i.as_object().is_some_and(|m| m.len() == 1)
    });
    if replace {
        return Ok(Value::Array(
            patch_items
                .iter()
                .filter(|i| i.get(DIRECTIVE).is_none())
                .cloned()
                .collect(),
        ));
    }
    let sample: Vec<&Value> = current.iter().chain(patch_items.iter()).collect();
    match list_strategy(field, &sample) {
        ListStrategy::Replace => {
            let mut items = patch_items.to_vec();
            for item in &mut items {
                if let Value::Object(m) = item {
                    strip_directives(m);
                }
            }
            Ok(Value::Array(items))
        }
        ListStrategy::PrimitiveSet => {
            for item in patch_items {
                if !current.contains(item) {
                    current.push(item.clone());
                }
            }
            Ok(Value::Array(current))
        }
        ListStrategy::MergeByKey(key) => {
            for (i, item) in patch_items.iter().enumerate() {
                let Some(id) = item.get(key) else {
                    return Err(format!(
                        "{path}[{i}]: element has no merge key {key:?}, which list {field:?} is merged by"
                    ));
                };
                let pos = current.iter().position(|c| c.get(key) == Some(id));
                let directive = item.get(DIRECTIVE).and_then(Value::as_str);
                match (directive, pos) {
                    (Some("delete"), Some(p)) => {
                        current.remove(p);
                    }
                    (Some("delete"), None) => {}
                    (Some("replace"), _) | (None | Some("merge"), None) => {
                        let mut new = item.clone();
                        if let Value::Object(m) = &mut new {
                            m.remove(DIRECTIVE);
                            strip_directives(m);
                        }
                        match pos {
                            Some(p) => current[p] = new,
                            None => current.push(new),
                        }
                    }
                    (None | Some("merge"), Some(p)) => {
                        let elem_path = format!("{path}[{key}={}]", render_scalar(id));
                        smp_value(&mut current[p], item, &elem_path)?;
                    }
                    (Some(other), _) => {
                        return Err(format!("{path}[{i}]: unknown patch directive {other:?}"));
                    }
                }
            }
            Ok(Value::Array(current))
        }
    }
}

fn render_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

// ------------------------------------------------------------------------------------------------
// Server-side apply
// ------------------------------------------------------------------------------------------------

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The applied configuration is unusable (not an object, wrong kind, ...): a 400/422.
    Invalid(String),
    /// Fields owned by other appliers would change: a 409 Conflict. `conflicts` holds
    /// `(manager, field)` pairs, the field rendered like `.spec.replicas`.
    Conflict {
        /// `Apply failed with N conflict(s): ...`, the real server's message.
        message: String,
        /// Each conflicting field and the manager that owns it.
        conflicts: Vec<(String, String)>,
    },
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApplyError::Invalid(m) => f.write_str(m),
            ApplyError::Conflict { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for ApplyError {}

/// Server-side apply with the current time; see [`apply`] for the details and the error kinds.
/// The error string of a conflict starts with `Apply failed with`.
pub fn apply_patch(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, String> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    apply(current, applied, manager, force, &now).map_err(|e| e.to_string())
}

/// One element of a managed field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PathElem {
    /// `f:<name>` — a map key.
    Field(String),
    /// `k:{...}` — a merge-list element, by its key (JSON-encoded map).
    Key(String),
    /// `v:<json>` — a member of a set list.
    Val(String),
    /// `.` — the node itself.
    Itself,
}

type FieldPath = Vec<PathElem>;

/// Fields never recorded in field sets (as the real field manager strips them).
fn is_stripped(path: &[PathElem]) -> bool {
    match path {
        [PathElem::Field(f)] => f == "apiVersion" || f == "kind",
        [PathElem::Field(m), PathElem::Field(f)] if m == "metadata" => matches!(
            f.as_str(),
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "selfLink"
                | "managedFields"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "generateName"
        ),
        _ => false,
    }
}

/// Collects the leaf paths (and list-element / map self markers) of an applied configuration.
fn collect_paths(
    value: &Value,
    path: &mut FieldPath,
    field: Option<&str>,
    out: &mut BTreeSet<FieldPath>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            if matches!(field, Some("labels" | "annotations")) {
                let mut p = path.clone();
                p.push(PathElem::Itself);
                out.insert(p);
            }
            for (k, v) in map {
                path.push(PathElem::Field(k.clone()));
                if !is_stripped(path) {
                    collect_paths(v, path, Some(k), out);
                }
                path.pop();
            }
        }
        Value::Array(items) if field.is_some() => {
            let name = field.unwrap_or_default();
            let sample: Vec<&Value> = items.iter().collect();
            match list_strategy(name, &sample) {
                ListStrategy::MergeByKey(key) => {
                    for item in items {
                        let Some(id) = item.get(key) else { continue };
                        path.push(PathElem::Key(json!({ key: id }).to_string()));
                        let mut itself = path.clone();
                        itself.push(PathElem::Itself);
                        out.insert(itself);
                        collect_paths(item, path, None, out);
                        path.pop();
                    }
                }
                ListStrategy::PrimitiveSet => {
                    for item in items {
                        let mut p = path.clone();
                        p.push(PathElem::Val(item.to_string()));
                        out.insert(p);
                    }
                }
                ListStrategy::Replace => {
                    out.insert(path.clone());
                }
            }
        }
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn paths_of(applied: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    collect_paths(applied, &mut Vec::new(), None, &mut out);
    out
}

/// Renders a path set in the `FieldsV1` format.
fn fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for elem in path {
            let key = match elem {
                PathElem::Field(f) => format!("f:{f}"),
                PathElem::Key(k) => format!("k:{k}"),
                PathElem::Val(v) => format!("v:{v}"),
                PathElem::Itself => ".".to_string(),
            };
            let entry = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(next) = entry else { break };
            node = next;
        }
    }
    Value::Object(root)
}

/// Parses a `FieldsV1` value back into a path set.
fn parse_fields_v1(value: &Value) -> BTreeSet<FieldPath> {
    fn walk(node: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        if node.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, v) in node {
            let elem = if k == "." {
                PathElem::Itself
            } else if let Some(f) = k.strip_prefix("f:") {
                PathElem::Field(f.to_string())
            } else if let Some(f) = k.strip_prefix("k:") {
                PathElem::Key(f.to_string())
            } else if let Some(f) = k.strip_prefix("v:") {
                PathElem::Val(f.to_string())
            } else {
                continue;
            };
            path.push(elem);
            match v {
                Value::Object(m) => walk(m, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    if let Value::Object(m) = value {
        walk(m, &mut Vec::new(), &mut out);
    }
    out
}

/// Renders a path like the API server's conflict messages: `.spec.containers[name="web"].image`.
fn render_path(path: &[PathElem]) -> String {
    let mut out = String::new();
    for elem in path {
        match elem {
            PathElem::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            PathElem::Key(k) => {
                let inner = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_else(|_| k.clone());
                out.push_str(&format!("[{inner}]"));
            }
            PathElem::Val(v) => out.push_str(&format!("[={v}]")),
            PathElem::Itself => {}
        }
    }
    out
}

/// Reads the value a path addresses (`None` when absent).
fn value_at<'a>(obj: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = obj;
    for elem in path {
        match elem {
            PathElem::Field(f) => cur = cur.get(f)?,
            PathElem::Key(k) => {
                let want: Map<String, Value> = serde_json::from_str(k).ok()?;
                let items = cur.as_array()?;
                cur = items
                    .iter()
                    .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))?;
            }
            PathElem::Val(v) => {
                let want: Value = serde_json::from_str(v).ok()?;
                cur = cur.as_array()?.iter().find(|i| **i == want)?;
            }
            PathElem::Itself => {}
        }
    }
    Some(cur)
}

/// Removes the value a path addresses, if present.
fn remove_at(obj: &mut Value, path: &[PathElem]) {
    let path: Vec<&PathElem> = path.iter().filter(|e| **e != PathElem::Itself).collect();
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for elem in parents {
        let next = match elem {
            PathElem::Field(f) => cur.get_mut(f.as_str()),
            PathElem::Key(k) => {
                let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                    return;
                };
                cur.as_array_mut().and_then(|items| {
                    items
                        .iter_mut()
                        .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))
                })
            }
            PathElem::Val(_) | PathElem::Itself => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        PathElem::Field(f) => {
            if let Value::Object(m) = cur {
                m.remove(f.as_str());
            }
        }
        PathElem::Key(k) => {
            let Ok(want) = serde_json::from_str::<Map<String, Value>>(k) else {
                return;
            };
            if let Value::Array(items) = cur {
                items.retain(|i| !want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)));
            }
        }
        PathElem::Val(v) => {
            let Ok(want) = serde_json::from_str::<Value>(v) else {
                return;
            };
            if let Value::Array(items) = cur {
                items.retain(|i| *i != want);
            }
        }
        PathElem::Itself => {}
    }
}

/// Merges an applied configuration onto a live value: maps recursively, merge lists by key,
/// set lists by union, other lists and scalars replaced. `null` in the configuration removes.
fn apply_merge(target: &mut Value, applied: &Value, field: Option<&str>) {
    match applied {
        Value::Object(amap) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(tmap) = target {
                for (k, v) in amap {
                    if v.is_null() {
                        tmap.remove(k);
                        continue;
                    }
                    let slot = tmap.entry(k.clone()).or_insert(Value::Null);
                    apply_merge(slot, v, Some(k));
                }
            }
        }
        Value::Array(items) => {
            let Some(name) = field else {
                *target = applied.clone();
                return;
            };
            let current = match target {
                Value::Array(c) => c.clone(),
                _ => Vec::new(),
            };
            let sample: Vec<&Value> = current.iter().chain(items.iter()).collect();
            match list_strategy(name, &sample) {
                ListStrategy::Replace => *target = applied.clone(),
                ListStrategy::PrimitiveSet => {
                    let mut merged = current;
                    for i in items {
                        if !merged.contains(i) {
                            merged.push(i.clone());
                        }
                    }
                    *target = Value::Array(merged);
                }
                ListStrategy::MergeByKey(key) => {
                    let mut merged = current;
                    for item in items {
                        match item
                            .get(key)
                            .and_then(|id| merged.iter().position(|c| c.get(key) == Some(id)))
                        {
                            Some(p) => apply_merge(&mut merged[p], item, None),
                            None => merged.push(item.clone()),
                        }
                    }
                    *target = Value::Array(merged);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Server-side apply: merges `applied` onto `current` (or creates from it when `current` is
/// `None`) on behalf of `manager`, and returns the new object with `metadata.managedFields`
/// updated. `now` is the RFC 3339 time recorded in the manager's entry.
///
/// - The applied configuration must be an object with `apiVersion` and `kind`; when `current`
///   exists, the kinds must agree.
/// - Fields this manager applied last time but omits now are removed unless another manager
///   owns them too.
/// - A field owned by another `Apply` manager whose value would change is a conflict; with
///   `force` the field is taken over instead (removed from the other manager's set).
/// - Server-owned metadata (`uid`, `resourceVersion`, `creationTimestamp`, `generation`, ...)
///   of `current` is kept whatever the configuration says; the caller fills it for a create.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApplyError> {
    let Value::Object(applied_map) = applied else {
        return Err(ApplyError::Invalid(
            "the applied configuration must be a JSON or YAML object".to_string(),
        ));
    };
    let api_version = applied_map
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApplyError::Invalid("apiVersion must be set in the applied configuration".into())
        })?;
    let kind = applied_map
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ApplyError::Invalid("kind must be set in the applied configuration".into())
        })?;
    if let Some(cur_kind) = current.and_then(|c| c.get("kind")).and_then(Value::as_str)
        && cur_kind != kind
    {
        return Err(ApplyError::Invalid(format!(
            "the applied configuration has kind {kind:?}, but the object is a {cur_kind:?}"
        )));
    }
    let mut applied_clean = applied.clone();
    if let Some(Value::Object(meta)) = applied_clean.get_mut("metadata") {
        meta.remove("managedFields");
    }
    let new_paths = paths_of(&applied_clean);

    let mut entries: Vec<Value> = current
        .and_then(|c| c.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
            && e.get("subresource").is_none()
    };
    let old_paths = entries
        .iter()
        .find(|e| is_mine(e))
        .and_then(|e| e.get("fieldsV1"))
        .map(parse_fields_v1)
        .unwrap_or_default();

    let base = current.cloned().unwrap_or_else(|| json!({}));
    // Conflicts: fields other appliers own that this configuration changes.
    let mut conflicts = Vec::new();
    let mut other_sets: Vec<(usize, BTreeSet<FieldPath>)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if is_mine(e) {
            continue;
        }
        let set = e.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        if e.get("operation").and_then(Value::as_str) == Some("Apply") {
            let owner = e
                .get("manager")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            for p in set.intersection(&new_paths) {
                if p.last() == Some(&PathElem::Itself) {
                    continue;
                }
                if value_at(&base, p) != value_at(&applied_clean, p) {
                    conflicts.push((owner.clone(), render_path(p)));
                }
            }
        }
        other_sets.push((i, set));
    }
    if !conflicts.is_empty() && !force {
        let n = conflicts.len();
        let list = conflicts
            .iter()
            .map(|(m, f)| format!("conflict with {m:?}: {f}"))
            .collect::<Vec<_>>();
        let message = if n == 1 {
            format!("Apply failed with 1 conflict: {}", list[0])
        } else {
            format!("Apply failed with {n} conflicts: {}", list.join("\n"))
        };
        return Err(ApplyError::Conflict { message, conflicts });
    }

    let mut result = base;
    // Remove what this manager applied before and no longer applies, unless someone else owns
    // it or something inside it (a list element keeps living while another manager owns one of
    // its fields).
    for p in old_paths.difference(&new_paths) {
        // The key field of a list element goes with the element (its `.` entry), never alone.
        if let [.., PathElem::Key(k), PathElem::Field(f)] = p.as_slice()
            && serde_json::from_str::<Map<String, Value>>(k).is_ok_and(|m| m.contains_key(f))
        {
            continue;
        }
        let node: Vec<&PathElem> = p.iter().filter(|e| **e != PathElem::Itself).collect();
        let owned_elsewhere = other_sets.iter().any(|(_, set)| {
            set.iter()
                .any(|q| q.len() >= node.len() && q.iter().zip(&node).all(|(a, b)| a == *b))
        });
        if !owned_elsewhere {
            remove_at(&mut result, p);
        }
    }
    apply_merge(&mut result, &applied_clean, None);
    // Server-owned metadata of the live object always wins.
    if let (Some(cur), Some(Value::Object(meta))) = (current, result.get_mut("metadata")) {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "selfLink",
        ] {
            match cur.pointer(&format!("/metadata/{key}")) {
                Some(v) => {
                    meta.insert(key.to_string(), v.clone());
                }
                None => {
                    meta.remove(key);
                }
            }
        }
    }

    // Forced take-over: the fields leave the other managers' sets.
    if force {
        for (i, set) in &mut other_sets {
            let before = set.len();
            set.retain(|p| {
                !(new_paths.contains(p)
                    && p.last() != Some(&PathElem::Itself)
                    && value_at(current.unwrap_or(&Value::Null), p) != value_at(&applied_clean, p))
            });
            if set.len() != before {
                entries[*i]["fieldsV1"] = fields_v1(set);
            }
        }
        entries.retain(|e| {
            e.get("fieldsV1")
                .and_then(Value::as_object)
                .is_none_or(|m| !m.is_empty())
        });
    }
    let mine = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(&new_paths),
    });
    match entries.iter().position(is_mine) {
        Some(p) => entries[p] = mine,
        None => entries.push(mine),
    }
    if !result.get("metadata").is_some_and(Value::is_object) {
        result["metadata"] = json!({});
    }
    result["metadata"]["managedFields"] = Value::Array(entries);
    Ok(result)
}

/// Records an ordinary write (create, PUT, non-apply PATCH) in `metadata.managedFields`, as the
/// API server's field manager does for `operation: Update`: the fields this write set or changed
/// (all of them for a create, `old == None`) are added to the entry of (`manager`, `Update`,
/// `subresource`) and taken away from every other manager (an update never conflicts, it takes
/// ownership); fields that no longer exist leave every set; entries left empty disappear.
/// `time` is `now`; `apiVersion` is the object's.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let mut entries: Vec<Value> = new
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| {
            old.and_then(|o| o.pointer("/metadata/managedFields"))
                .and_then(Value::as_array)
                .cloned()
        })
        .unwrap_or_default();
    let mut body = new.clone();
    if let Some(Value::Object(meta)) = body.get_mut("metadata") {
        meta.remove("managedFields");
    }
    let new_paths = paths_of(&body);
    let changed: BTreeSet<FieldPath> = match old {
        None => new_paths.clone(),
        Some(old) => new_paths
            .iter()
            .filter(|p| {
                p.last() != Some(&PathElem::Itself) && value_at(old, p) != value_at(&body, p)
            })
            .cloned()
            .collect(),
    };
    let is_mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str) == subresource
    };
    let mut mine_found = false;
    for e in &mut entries {
        let mut set = e.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        if is_mine(e) {
            mine_found = true;
            set.extend(changed.iter().cloned());
            e["time"] = Value::String(now.to_string());
            if let Some(v) = body.get("apiVersion") {
                e["apiVersion"] = v.clone();
            }
        } else {
            set.retain(|p| !changed.contains(p));
        }
        // Fields that no longer exist are owned by nobody.
        set.retain(|p| value_at(&body, p).is_some());
        e["fieldsV1"] = fields_v1(&set);
    }
    if !mine_found && !changed.is_empty() {
        let mut entry = json!({
            "manager": manager,
            "operation": "Update",
            "apiVersion": body.get("apiVersion").cloned().unwrap_or(Value::Null),
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(&changed),
        });
        if let Some(sub) = subresource {
            entry["subresource"] = Value::String(sub.to_string());
        }
        entries.push(entry);
    }
    entries.retain(|e| {
        e.get("fieldsV1")
            .and_then(Value::as_object)
            .is_some_and(|m| !m.is_empty())
    });
    if !new.get("metadata").is_some_and(Value::is_object) {
        new["metadata"] = json!({});
    }
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = new.get_mut("metadata") {
            meta.remove("managedFields");
        }
    } else {
        new["metadata"]["managedFields"] = Value::Array(entries);
    }
}

/// The path set of an applied configuration in `FieldsV1` form (what [`apply`] records).
pub fn managed_fields_of(applied: &Value) -> Value {
    fields_v1(&paths_of(applied))
}

/// Merges the managed-field sets of several entries into one map from rendered path
/// (`.spec.replicas`) to owning managers; handy for explaining ownership in docs and tests.
pub fn field_owners(obj: &Value) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let entries = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for e in entries {
        let manager = e
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let set = e.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        for p in set {
            if p.last() == Some(&PathElem::Itself) {
                continue;
            }
            out.entry(render_path(&p))
                .or_default()
                .push(manager.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- merge patch (RFC 7386 appendix A examples) ----

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

    // ---- JSON patch ----

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

    // ---- strategic merge patch ----

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}], "args": ["x"]},
                    {"name": "side", "image": "busybox"}
                ]
            },
            "status": {"conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "Scheduled", "status": "True"}
            ]}
        })
    }

    #[test]
    fn smp_merges_lists_by_key() {
        let mut p = pod();
        strategic_merge_patch(
            &mut p,
            &json!({
                "spec": {"containers": [
                    {"name": "web", "image": "nginx:2", "env": [{"name": "B", "value": "2"}], "args": ["y"]},
                    {"name": "new", "image": "redis"}
                ]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                "metadata": {"finalizers": ["b", "a"], "labels": {"app": null, "tier": "fe"}}
            }),
        )
        .unwrap();
        let web = &p["spec"]["containers"][0];
        assert_eq!(web["image"], "nginx:2");
        assert_eq!(
            web["env"],
            json!([{"name":"A","value":"1"},{"name":"B","value":"2"}])
        );
        assert_eq!(web["args"], json!(["y"]), "non-merge lists are replaced");
        assert_eq!(web["ports"][0]["containerPort"], 80);
        assert_eq!(p["spec"]["containers"][1]["name"], "side");
        assert_eq!(p["spec"]["containers"][2]["name"], "new");
        assert_eq!(
            p["status"]["conditions"],
            json!([{"type":"Ready","status":"True"},{"type":"Scheduled","status":"True"}])
        );
        assert_eq!(p["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(p["metadata"]["labels"], json!({"tier": "fe"}));
    }

    #[test]
    fn smp_event_style_patch_is_a_map_merge() {
        let mut ev = json!({"count": 1, "message": "m", "lastTimestamp": "t1", "reason": "R"});
        strategic_merge_patch(&mut ev, &json!({"count": 2, "lastTimestamp": "t2"})).unwrap();
        assert_eq!(
            ev,
            json!({"count": 2, "message": "m", "lastTimestamp": "t2", "reason": "R"})
        );
    }

    #[test]
    fn smp_directives() {
        let mut p = pod();
        strategic_merge_patch(
            &mut p,
            &json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]},
                    "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(p["spec"]["containers"].as_array().unwrap().len(), 1);
        assert_eq!(p["metadata"]["finalizers"], json!([]));

        let mut p = pod();
        strategic_merge_patch(
            &mut p,
            &json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}),
        )
        .unwrap();
        assert_eq!(
            p["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );

        let mut p = pod();
        strategic_merge_patch(
            &mut p,
            &json!({"metadata": {"labels": {"$patch": "replace", "x": "y"}}}),
        )
        .unwrap();
        assert_eq!(p["metadata"]["labels"], json!({"x": "y"}));

        let mut p = pod();
        strategic_merge_patch(&mut p, &json!({"status": {"$patch": "delete"}})).unwrap();
        assert!(p.get("status").is_none());

        let mut p = pod();
        let err =
            strategic_merge_patch(&mut p, &json!({"spec": {"$patch": "explode"}})).unwrap_err();
        assert!(err.contains("spec") && err.contains("explode"), "{err}");
        assert_eq!(p, pod(), "failed patch leaves the object alone");
    }

    #[test]
    fn smp_set_element_order_and_retain_keys() {
        let mut p = pod();
        strategic_merge_patch(
            &mut p,
            &json!({"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}],
                "containers": [{"name": "web", "image": "nginx:3"}]
            }}),
        )
        .unwrap();
        assert_eq!(p["spec"]["containers"][0]["name"], "side");
        assert_eq!(p["spec"]["containers"][1]["image"], "nginx:3");

        let mut strategy = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}});
        strategic_merge_patch(
            &mut strategy,
            &json!({"$retainKeys": ["type"], "type": "Recreate"}),
        )
        .unwrap();
        assert_eq!(strategy, json!({"type": "Recreate"}));
    }

    #[test]
    fn smp_merge_key_errors_and_service_ports() {
        let mut p = pod();
        let err = strategic_merge_patch(&mut p, &json!({"spec": {"containers": [{"image": "x"}]}}))
            .unwrap_err();
        assert!(
            err.contains("spec.containers[0]") && err.contains("\"name\""),
            "{err}"
        );

        let mut svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        strategic_merge_patch(
            &mut svc,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        )
        .unwrap();
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
    }

    #[test]
    fn smp_owner_references_by_uid() {
        let mut obj = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}});
        strategic_merge_patch(
            &mut obj,
            &json!({"metadata": {"ownerReferences": [{"uid": "2", "$patch": "delete"}, {"uid": "3", "name": "c"}]}}),
        )
        .unwrap();
        assert_eq!(
            obj["metadata"]["ownerReferences"],
            json!([{"uid": "1", "name": "a"}, {"uid": "3", "name": "c"}])
        );
    }

    // ---- server-side apply ----

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}, "data": data})
    }

    #[test]
    fn apply_creates_and_records_managed_fields() {
        let obj = apply(
            None,
            &cm(json!({"a": "1"})),
            "kubectl",
            false,
            "2024-01-01T00:00:00Z",
        )
        .unwrap();
        assert_eq!(obj["data"], json!({"a": "1"}));
        let mf = &obj["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "kubectl");
        assert_eq!(mf["operation"], "Apply");
        assert_eq!(mf["apiVersion"], "v1");
        assert_eq!(mf["fieldsType"], "FieldsV1");
        assert_eq!(mf["time"], "2024-01-01T00:00:00Z");
        assert_eq!(mf["fieldsV1"], json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn apply_merges_and_removes_fields_dropped_by_the_same_manager() {
        let live = apply(
            None,
            &cm(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
            "t",
        )
        .unwrap();
        let mut live = live;
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("5");
        live["data"]["other"] = json!("kept"); // written by someone else through an update
        let next = apply(Some(&live), &cm(json!({"a": "9"})), "kubectl", false, "t2").unwrap();
        assert_eq!(next["data"], json!({"a": "9", "other": "kept"}));
        assert_eq!(next["metadata"]["uid"], "u1");
        assert_eq!(next["metadata"]["resourceVersion"], "5");
        assert_eq!(
            next["metadata"]["managedFields"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn apply_conflicts_between_managers_and_force() {
        let live = apply(None, &cm(json!({"a": "1"})), "alice", false, "t").unwrap();
        // Same value: shared ownership, no conflict.
        let shared = apply(Some(&live), &cm(json!({"a": "1"})), "bob", false, "t").unwrap();
        assert_eq!(field_owners(&shared)[".data.a"], vec!["alice", "bob"]);
        // Different value: conflict.
        let err = apply(Some(&live), &cm(json!({"a": "2"})), "bob", false, "t").unwrap_err();
        match &err {
            ApplyError::Conflict { message, conflicts } => {
                assert_eq!(
                    message,
                    "Apply failed with 1 conflict: conflict with \"alice\": .data.a"
                );
                assert_eq!(
                    conflicts,
                    &vec![("alice".to_string(), ".data.a".to_string())]
                );
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(
            apply_patch(Some(&live), &cm(json!({"a": "2"})), "bob", false)
                .unwrap_err()
                .starts_with("Apply failed")
        );
        // Forced: bob takes the field over, alice's now-empty entry disappears.
        let forced = apply(Some(&live), &cm(json!({"a": "2"})), "bob", true, "t").unwrap();
        assert_eq!(forced["data"]["a"], "2");
        assert_eq!(field_owners(&forced)[".data.a"], vec!["bob"]);
        assert_eq!(
            forced["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn apply_lists_by_key_and_field_set_format() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "x"}},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        let fs = managed_fields_of(&deploy);
        assert_eq!(
            fs,
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                   "f:spec": {"f:template": {"f:spec": {"f:containers": {
                       "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        let mut live = apply(None, &deploy, "kubectl", false, "t").unwrap();
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        let mut again = deploy.clone();
        again["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        let next = apply(Some(&live), &again, "kubectl", false, "t").unwrap();
        let c = &next["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "nginx:2");
        assert_eq!(
            c["imagePullPolicy"], "Always",
            "defaulted fields survive an apply"
        );
    }

    #[test]
    fn apply_rejects_bad_configurations() {
        assert!(matches!(
            apply(None, &json!([1]), "m", false, "t"),
            Err(ApplyError::Invalid(_))
        ));
        let err = apply(None, &json!({"kind": "ConfigMap"}), "m", false, "t").unwrap_err();
        assert!(err.to_string().contains("apiVersion"), "{err}");
        let live = cm(json!({}));
        let mut secret = cm(json!({}));
        secret["kind"] = json!("Secret");
        let err = apply(Some(&live), &secret, "m", false, "t").unwrap_err();
        assert!(err.to_string().contains("\"Secret\""), "{err}");
    }

    #[test]
    fn updates_record_and_transfer_ownership() {
        let mut created = cm(json!({"a": "1", "b": "2"}));
        record_update(None, &mut created, "kubectl-create", None, "t1");
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": "t1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}])
        );
        // A controller changes b and adds c: it owns them now; a stays with the creator.
        let mut next = created.clone();
        next["data"]["b"] = json!("20");
        next["data"]["c"] = json!("3");
        record_update(Some(&created), &mut next, "controller", None, "t2");
        let owners = field_owners(&next);
        assert_eq!(owners[".data.a"], vec!["kubectl-create"]);
        assert_eq!(owners[".data.b"], vec!["controller"]);
        assert_eq!(owners[".data.c"], vec!["controller"]);
        // Status writes are recorded per subresource; removed fields leave every set.
        let mut status = next.clone();
        status["data"].as_object_mut().unwrap().remove("a");
        status["status"] = json!({"phase": "DONE"});
        record_update(Some(&next), &mut status, "controller", Some("status"), "t3");
        let entries = status["metadata"]["managedFields"].as_array().unwrap();
        assert!(
            entries.iter().all(|e| e["manager"] != "kubectl-create"),
            "creator owned only the removed field"
        );
        assert!(entries.iter().any(|e| e["subresource"] == "status"
            && e["fieldsV1"] == json!({"f:status": {"f:phase": {}}})));
        // An unchanged write adds nothing.
        let mut same = status.clone();
        record_update(Some(&status), &mut same, "other", None, "t4");
        assert_eq!(
            same["metadata"]["managedFields"],
            status["metadata"]["managedFields"]
        );
    }

    #[test]
    fn apply_keeps_list_elements_others_still_own() {
        let deploy = |containers: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                   "spec": {"template": {"spec": {"containers": containers}}}})
        };
        let live = apply(
            None,
            &deploy(
                json!([{"name": "web", "image": "nginx"}, {"name": "log", "image": "busybox"}]),
            ),
            "kubectl",
            false,
            "t",
        )
        .unwrap();
        // A controller adds a field to the "log" container through an ordinary update.
        let mut updated = live.clone();
        updated["spec"]["template"]["spec"]["containers"][1]["imagePullPolicy"] = json!("Always");
        record_update(Some(&live), &mut updated, "controller", None, "t2");
        // The user drops both containers but "web" from the file.
        let next = apply(
            Some(&updated),
            &deploy(json!([{"name": "web", "image": "nginx"}])),
            "kubectl",
            false,
            "t3",
        )
        .unwrap();
        let names: Vec<&str> = next["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["web", "log"],
            "log survives: the controller owns a field in it"
        );
        assert!(
            next["spec"]["template"]["spec"]["containers"][1]
                .get("image")
                .is_none(),
            "kubectl's field is gone"
        );
        // Without the controller's field, the element goes.
        let gone = apply(
            Some(&live),
            &deploy(json!([{"name": "web", "image": "nginx"}])),
            "kubectl",
            false,
            "t3",
        )
        .unwrap();
        assert_eq!(
            gone["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

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
}
