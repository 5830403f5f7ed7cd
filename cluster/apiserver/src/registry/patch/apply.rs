//! Server-side apply (`application/apply-patch+yaml`), the basic version.
//!
//! With server-side apply the client sends the fields it *owns* (its configuration file, as
//! `kubectl apply --server-side` does) rather than a change. [`apply`] merges the applied
//! configuration onto the live object (maps recursively, lists by the same keys as strategic
//! merge patch, [`crate::registry::patch::list_strategy`], other lists replaced), then records the applying
//! manager's field set in `metadata.managedFields` ([`crate::registry::patch::managed_fields`]). Because it
//! remembers what each manager applied, it can also do the two things users notice:
//!
//! - a field the same manager applied before but omits now is **removed** (unless another
//!   manager also owns it), which is how `kubectl apply --server-side` deletes a field you took
//!   out of the file;
//! - a field another manager owns and this apply sets to a different value is a **conflict**
//!   (409, `Apply failed with 1 conflict: conflict with "other": .spec.x`), unless `force` is
//!   set, in which case ownership moves to this manager. The other manager may be an applier
//!   or an `Update` manager (a `kubectl create`, an edit, a controller's PUT), named as the real
//!   server names it: `conflict with "kubectl-create" using v1: .data.k`, or `"kubelet" with
//!   subresource "status" using v1` for a subresource's writer (kube's `printManager`, whose
//!   manager identifier carries no time).
//!
//! An apply runs as a sequence of steps: check the configuration, read the managers' field sets
//! from the live object, find conflicts, remove what this manager dropped, merge, restore the
//! server-owned metadata, move forced fields, and write this manager's entry.
//!
//! Fields the endpoint resets are not applied: through the main endpoint of a kind with a
//! status subresource, `status` is left out of the applied configuration before anything is
//! computed (kube's reset-fields filter), so it neither conflicts nor is recorded.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::registry::patch::lists::{ListStrategy, list_strategy};
use crate::registry::patch::managed_fields::{
    FieldPath, PathElem, fields_v1, parse_fields_v1, paths_of, remove_at, render_path, value_at,
};

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The applied configuration is unusable (not an object, wrong kind, ...): a 400/422.
    Invalid(String),
    /// Fields owned by other managers would change: a 409 Conflict. `conflicts` holds
    /// `(manager, field)` pairs, the manager as the message names it (`"alice"`,
    /// `"kubectl-create" using v1`), the field rendered like `.spec.replicas`.
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
#[cfg(test)]
pub fn apply_patch(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, String> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    apply(current, applied, manager, force, &now, &[]).map_err(|e| e.to_string())
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
/// - A field owned by another manager (an applier, or an `Update` manager) whose value would
///   change is a conflict; with `force` the field is taken over instead (removed from the
///   other manager's set).
/// - `reset` names top-level fields this endpoint does not apply (`status` through the main
///   endpoint of a kind with a status subresource): they are dropped from the configuration.
/// - Server-owned metadata (`uid`, `resourceVersion`, `creationTimestamp`, `generation`, ...)
///   of `current` is kept whatever the configuration says; the caller fills it for a create.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
    reset: &[&str],
) -> Result<Value, ApplyError> {
    let api_version = check_configuration(current, applied)?;
    let mut applied_clean = applied.clone();
    if let Some(Value::Object(meta)) = applied_clean.get_mut("metadata") {
        meta.remove("managedFields");
    }
    if let Value::Object(top) = &mut applied_clean {
        for field in reset {
            top.remove(*field);
        }
    }
    let new_paths = paths_of(&applied_clean);

    let mut entries: Vec<Value> = current
        .and_then(|c| c.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_mine = |e: &Value| is_apply_entry_of(e, manager);
    let old_paths = entries
        .iter()
        .find(|e| is_mine(e))
        .and_then(|e| e.get("fieldsV1"))
        .map(parse_fields_v1)
        .unwrap_or_default();

    let base = current.cloned().unwrap_or_else(|| json!({}));
    let (conflicts, mut other_sets) =
        find_conflicts(&entries, manager, &base, &applied_clean, &new_paths);
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(conflicts));
    }

    let mut result = base;
    remove_dropped(&mut result, &old_paths, &new_paths, &other_sets);
    apply_merge(&mut result, &applied_clean, None);
    keep_server_metadata(&mut result, current);
    if force {
        take_over(
            &mut entries,
            &mut other_sets,
            current,
            &applied_clean,
            &new_paths,
        );
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

/// Checks that the applied configuration is an object with a non-empty `apiVersion` and `kind`,
/// and that the kind is the live object's; returns the `apiVersion`.
fn check_configuration<'a>(
    current: Option<&Value>,
    applied: &'a Value,
) -> Result<&'a str, ApplyError> {
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
    Ok(api_version)
}

/// True for the `managedFields` entry of `manager`'s applies (not a subresource's).
fn is_apply_entry_of(entry: &Value, manager: &str) -> bool {
    entry.get("manager").and_then(Value::as_str) == Some(manager)
        && entry.get("operation").and_then(Value::as_str) == Some("Apply")
        && entry.get("subresource").is_none()
}

/// The field sets of the other managers' entries, each with its index in `managedFields`.
type OtherSets = Vec<(usize, BTreeSet<FieldPath>)>;

/// The other managers' field sets (by entry index), and the conflicts: each field that another
/// manager (an applier or an `Update` manager) owns and this configuration sets to a value
/// different from `base`'s, as `(manager, rendered field)`, the manager named as
/// [`print_manager`] names it.
fn find_conflicts(
    entries: &[Value],
    manager: &str,
    base: &Value,
    applied: &Value,
    new_paths: &BTreeSet<FieldPath>,
) -> (Vec<Conflict>, OtherSets) {
    let mut conflicts = Vec::new();
    let mut other_sets = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if is_apply_entry_of(e, manager) {
            continue;
        }
        let set = e.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        for p in set.intersection(new_paths) {
            if p.last() == Some(&PathElem::Itself) {
                continue;
            }
            if value_at(base, p) != value_at(applied, p) {
                conflicts.push(Conflict {
                    order: identity_order(e),
                    manager: print_manager(e),
                    field: render_path(p),
                });
            }
        }
        other_sets.push((i, set));
    }
    (conflicts, other_sets)
}

/// One field another manager owns.
struct Conflict {
    /// Sorts managers as kube sorts their identifiers (the entry's JSON without time or
    /// fields: manager, operation, apiVersion, subresource).
    order: (String, String, String, String),
    manager: String,
    field: String,
}

fn identity_order(entry: &Value) -> (String, String, String, String) {
    let s = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        s("manager"),
        s("operation"),
        s("apiVersion"),
        s("subresource"),
    )
}

/// A manager as kube's conflict messages name it (`printManager` of its identifier, which has
/// no time): `"alice"` for an applier, `"kubectl-create" using v1` for an `Update` manager,
/// with ` with subresource "status"` after the name for a subresource's writer.
fn print_manager(entry: &Value) -> String {
    let s = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("{:?}", s("manager"));
    if !s("subresource").is_empty() {
        out.push_str(&format!(" with subresource {:?}", s("subresource")));
    }
    if s("operation") == "Update" {
        out.push_str(&format!(" using {}", s("apiVersion")));
    }
    out
}

/// The real server's `409` for an apply that meets conflicts (`NewConflictError`): one
/// conflict is `Apply failed with 1 conflict: conflict with "m": .field`; several are grouped
/// by manager, managers sorted, `Apply failed with N conflicts: conflicts with "m":` then one
/// `- .field` line per field.
fn conflict_error(mut conflicts: Vec<Conflict>) -> ApplyError {
    let n = conflicts.len();
    let message = if n == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            conflicts[0].manager, conflicts[0].field
        )
    } else {
        conflicts.sort_by(|a, b| a.order.cmp(&b.order));
        let mut lines: Vec<String> = vec![];
        let mut last: Option<&(String, String, String, String)> = None;
        for c in &conflicts {
            if last != Some(&c.order) {
                lines.push(format!("conflicts with {}:", c.manager));
                last = Some(&c.order);
            }
            lines.push(format!("- {}", c.field));
        }
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    ApplyError::Conflict {
        message,
        conflicts: conflicts
            .into_iter()
            .map(|c| (c.manager, c.field))
            .collect(),
    }
}

/// Removes from `result` what this manager applied before (`old_paths`) and no longer applies
/// (`new_paths`), unless someone else owns it or something inside it (a list element keeps
/// living while another manager owns one of its fields).
fn remove_dropped(
    result: &mut Value,
    old_paths: &BTreeSet<FieldPath>,
    new_paths: &BTreeSet<FieldPath>,
    other_sets: &OtherSets,
) {
    for p in old_paths.difference(new_paths) {
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
            remove_at(result, p);
        }
    }
}

/// Server-owned metadata of the live object always wins over the configuration: `uid`,
/// `resourceVersion`, `creationTimestamp`, `generation`, `deletionTimestamp`, `selfLink` are
/// copied from `current` (or removed when it has none). Nothing to do for a create.
fn keep_server_metadata(result: &mut Value, current: Option<&Value>) {
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
}

/// Forced take-over: the fields this apply changes leave the other managers' sets (their
/// `fieldsV1` rewritten), and entries left with an empty set disappear.
fn take_over(
    entries: &mut Vec<Value>,
    other_sets: &mut [(usize, BTreeSet<FieldPath>)],
    current: Option<&Value>,
    applied: &Value,
    new_paths: &BTreeSet<FieldPath>,
) {
    for (i, set) in other_sets.iter_mut() {
        let before = set.len();
        set.retain(|p| {
            !(new_paths.contains(p)
                && p.last() != Some(&PathElem::Itself)
                && value_at(current.unwrap_or(&Value::Null), p) != value_at(applied, p))
        });
        if set.len() != before {
            entries[*i]["fieldsV1"] = fields_v1(set);
        }
    }
    // An empty set, in either form (`{}` folded: [`crate::api::folded`]), goes.
    entries.retain(|e| match e.get("fieldsV1") {
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::String(text)) => text != "{}",
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::patch::managed_fields::{field_owners, managed_fields_of};
    use crate::registry::patch::record_update;

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
            &[],
        )
        .unwrap();
        assert_eq!(obj["data"], json!({"a": "1"}));
        let mf = &obj["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "kubectl");
        assert_eq!(mf["operation"], "Apply");
        assert_eq!(mf["apiVersion"], "v1");
        assert_eq!(mf["fieldsType"], "FieldsV1");
        assert_eq!(mf["time"], "2024-01-01T00:00:00Z");
        // Folded, as the store holds a set ([`crate::api::folded`]).
        assert_eq!(mf["fieldsV1"], json!({"f:data": {"f:a": {}}}).to_string());
    }

    #[test]
    fn apply_merges_and_removes_fields_dropped_by_the_same_manager() {
        let live = apply(
            None,
            &cm(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
            "t",
            &[],
        )
        .unwrap();
        let mut live = live;
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["resourceVersion"] = json!("5");
        live["data"]["other"] = json!("kept"); // written by someone else through an update
        let next = apply(
            Some(&live),
            &cm(json!({"a": "9"})),
            "kubectl",
            false,
            "t2",
            &[],
        )
        .unwrap();
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
        let live = apply(None, &cm(json!({"a": "1"})), "alice", false, "t", &[]).unwrap();
        // Same value: shared ownership, no conflict.
        let shared = apply(Some(&live), &cm(json!({"a": "1"})), "bob", false, "t", &[]).unwrap();
        assert_eq!(field_owners(&shared)[".data.a"], vec!["alice", "bob"]);
        // Different value: conflict.
        let err = apply(Some(&live), &cm(json!({"a": "2"})), "bob", false, "t", &[]).unwrap_err();
        match &err {
            ApplyError::Conflict { message, conflicts } => {
                assert_eq!(
                    message,
                    "Apply failed with 1 conflict: conflict with \"alice\": .data.a"
                );
                assert_eq!(
                    conflicts,
                    &vec![("\"alice\"".to_string(), ".data.a".to_string())]
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
        let forced = apply(Some(&live), &cm(json!({"a": "2"})), "bob", true, "t", &[]).unwrap();
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
        let mut live = apply(None, &deploy, "kubectl", false, "t", &[]).unwrap();
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        let mut again = deploy.clone();
        again["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        let next = apply(Some(&live), &again, "kubectl", false, "t", &[]).unwrap();
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
            apply(None, &json!([1]), "m", false, "t", &[]),
            Err(ApplyError::Invalid(_))
        ));
        let err = apply(None, &json!({"kind": "ConfigMap"}), "m", false, "t", &[]).unwrap_err();
        assert!(err.to_string().contains("apiVersion"), "{err}");
        let live = cm(json!({}));
        let mut secret = cm(json!({}));
        secret["kind"] = json!("Secret");
        let err = apply(Some(&live), &secret, "m", false, "t", &[]).unwrap_err();
        assert!(err.to_string().contains("\"Secret\""), "{err}");
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
            &[],
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
            &[],
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
            &[],
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

    #[test]
    fn update_managers_conflict_too_and_several_conflicts_are_grouped_by_manager() {
        // `kubectl create cm x --from-literal=k=1`: an Update by kubectl-create.
        let mut live = cm(json!({"k": "1", "j": "1"}));
        record_update(None, &mut live, "kubectl-create", None, "t");
        let err = apply(
            Some(&live),
            &cm(json!({"k": "2"})),
            "ssa-test",
            false,
            "t",
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-create\" using v1: .data.k"
        );
        // The same value is shared ownership, not a conflict.
        assert!(
            apply(
                Some(&live),
                &cm(json!({"k": "1"})),
                "ssa-test",
                false,
                "t",
                &[]
            )
            .is_ok()
        );
        // Two fields of two managers: grouped by manager, managers sorted.
        let both = apply(
            Some(&live),
            &cm(json!({"z": "1"})),
            "alice",
            false,
            "t",
            &[],
        )
        .unwrap();
        let err = apply(
            Some(&both),
            &cm(json!({"k": "2", "j": "2", "z": "2"})),
            "bob",
            false,
            "t",
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 3 conflicts: conflicts with \"alice\":\n- .data.z\nconflicts with \"kubectl-create\" using v1:\n- .data.j\n- .data.k"
        );
        // Forced, the applier owns the fields and the Update manager keeps what it still has.
        let forced = apply(
            Some(&live),
            &cm(json!({"k": "2"})),
            "ssa-test",
            true,
            "t",
            &[],
        )
        .unwrap();
        assert_eq!(field_owners(&forced)[".data.k"], vec!["ssa-test"]);
        assert_eq!(field_owners(&forced)[".data.j"], vec!["kubectl-create"]);
    }

    #[test]
    fn a_reset_field_is_neither_applied_nor_conflicting() {
        let mut live = cm(json!({"k": "1"}));
        live["status"] = json!({"phase": "Old"});
        record_update(None, &mut live, "kubelet", None, "t");
        let mut applied = cm(json!({"k": "1"}));
        applied["status"] = json!({"phase": "New"});
        let out = apply(Some(&live), &applied, "ssa-test", false, "t", &["status"]).unwrap();
        assert_eq!(out["status"]["phase"], "Old");
        assert!(
            !field_owners(&out).contains_key(".status.phase")
                || field_owners(&out)[".status.phase"] == vec!["kubelet"]
        );
    }
}
