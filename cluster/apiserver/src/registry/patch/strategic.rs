//! Strategic merge patch (`application/strategic-merge-patch+json`): a merge patch that knows
//! the built-in lists.
//!
//! Like a merge patch ([`crate::registry::patch::merge_patch`]), the patch looks like the object: maps merge
//! recursively and `null` deletes a key. Unlike it, the lists the built-in types mark as
//! "merge" lists ([`crate::registry::patch::list_strategy`]: containers by `name`, conditions by `type`,
//! finalizers as a set, ...) are merged **element by element by their key**, so `kubectl patch`
//! (whose default type this is) can change one container's image by sending only that
//! container. The directives kubectl and client-go send are understood:
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
//! Custom resources never get strategic merge patch (the server answers 415, as the real one
//! does), so the list table only has to be right for built-in kinds.
//!
//! Data in: the stored object and the patch. Data out: the changed object, or an error naming
//! the offending directive or element (an unknown `$patch` value, a merge-list element without
//! its merge key); on error the target is left unchanged.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::registry::patch::lists::{ListStrategy, list_strategy};

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
