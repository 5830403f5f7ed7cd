//! Field ownership: `metadata.managedFields` and its `FieldsV1` sets, the field manager's half
//! of server-side apply.
//!
//! Every write records *who set which fields*: one entry per (manager, operation, subresource)
//! in `metadata.managedFields`, each with a field set in the real `FieldsV1` format
//! (`{"f:spec":{"f:replicas":{}}}`; list elements as `k:{"name":"web"}`, set members as
//! `v:"x"`, a node itself as `"."`). Server-side apply ([`crate::registry::patch::apply`]) reads these sets to
//! find conflicts and to remove what a manager stopped applying; ordinary writes
//! ([`record_update`]) add an `operation: Update` entry with the fields they set or changed,
//! taking them away from other managers, as the real field manager does for creates, PUTs and
//! non-apply PATCHes.
//!
//! Inside, a field set is a set of paths ([`FieldPath`]: `f:`, `k:`, `v:` and `.` elements);
//! this module computes the set of an object, renders and parses `FieldsV1`, reads and removes
//! the value a path addresses, and renders a path the way the real server's conflict messages
//! do (`.spec.containers[name="web"].image`).
//!
//! Left out: field sets are computed without the OpenAPI schema, so the `"."` self-marker is
//! written only for list elements and for `labels`/`annotations`, and list keys come from
//! [`crate::registry::patch::list_strategy`] rather than from `x-kubernetes-list-map-keys`; there is no
//! per-version conversion of field sets.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::api::folded::{is_nonempty_set, same_set, set_tree};
use crate::registry::patch::lists::{ListStrategy, list_strategy};

/// One element of a managed field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PathElem {
    /// `f:<name>` — a map key.
    Field(String),
    /// `k:{...}` — a merge-list element, by its key (JSON-encoded map).
    Key(String),
    /// `v:<json>` — a member of a set list.
    Val(String),
    /// `.` — the node itself.
    Itself,
}

impl PathElem {
    /// The element a `FieldsV1` key names (`f:`, `k:`, `v:` or `.`); `None` for any other key.
    fn from_key(key: &str) -> Option<PathElem> {
        if key == "." {
            return Some(PathElem::Itself);
        }
        let (prefix, rest) = (key.get(..2)?, key.get(2..)?.to_owned());
        match prefix {
            "f:" => Some(PathElem::Field(rest)),
            "k:" => Some(PathElem::Key(rest)),
            "v:" => Some(PathElem::Val(rest)),
            _ => None,
        }
    }

    /// Writes the element's `FieldsV1` key into `key`, which is cleared first.
    fn write_key(&self, key: &mut String) {
        key.clear();
        let (prefix, rest) = match self {
            PathElem::Field(f) => ("f:", f.as_str()),
            PathElem::Key(k) => ("k:", k.as_str()),
            PathElem::Val(v) => ("v:", v.as_str()),
            PathElem::Itself => (".", ""),
        };
        key.push_str(prefix);
        key.push_str(rest);
    }
}

pub(super) type FieldPath = Vec<PathElem>;

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

pub(super) fn paths_of(applied: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    collect_paths(applied, &mut Vec::new(), None, &mut out);
    out
}

/// The paths of `new` ([`paths_of`], without the `"."` self markers) whose value differs from
/// the value at the same path in `old`: what an update set or changed.
///
/// Found without listing every path of the object: below a map reached by field names alone,
/// a field whose value equals the old one's is skipped whole (every path under it reads the
/// same value in both, since reading a path is a function of that subtree), so a status
/// write walks the status and compares the rest in place. Lists, scalars and empty maps under
/// a changed field are judged path by path, with list elements found by key ([`value_at`]).
fn changed_paths(old: &Value, new: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    match new {
        Value::Object(map) if !map.is_empty() => {
            changed_fields(old, new, map, Some(old), &mut Vec::new(), &mut out);
        }
        _ => {
            let mut all = BTreeSet::new();
            collect_paths(new, &mut Vec::new(), None, &mut all);
            keep_changed(old, new, all, &mut out);
        }
    }
    out
}

/// [`changed_paths`] below the non-empty map `map` at `path` (field names only), whose old
/// counterpart is `old_here`.
fn changed_fields(
    old: &Value,
    new: &Value,
    map: &Map<String, Value>,
    old_here: Option<&Value>,
    path: &mut FieldPath,
    out: &mut BTreeSet<FieldPath>,
) {
    for (k, v) in map {
        let old_v = old_here.and_then(|o| o.get(k));
        // An unchanged field is passed over before its name is copied into the path.
        if old_v == Some(v) {
            continue;
        }
        path.push(PathElem::Field(k.clone()));
        if !is_stripped(path) {
            match v {
                Value::Object(m) if !m.is_empty() => changed_fields(old, new, m, old_v, path, out),
                _ => {
                    let mut under = BTreeSet::new();
                    collect_paths(v, path, Some(k), &mut under);
                    keep_changed(old, new, under, out);
                }
            }
        }
        path.pop();
    }
}

/// Moves into `out` the paths of `paths` (but the self markers) that read differently in `old`
/// and `new`.
fn keep_changed(
    old: &Value,
    new: &Value,
    paths: BTreeSet<FieldPath>,
    out: &mut BTreeSet<FieldPath>,
) {
    let mut keys = ListKeys::default();
    out.extend(paths.into_iter().filter(|p| {
        p.last() != Some(&PathElem::Itself)
            && value_at_with(old, p, &mut keys) != value_at_with(new, p, &mut keys)
    }));
}

/// Renders a path set in the `FieldsV1` format, folded as the store holds it
/// ([`crate::api::folded`]): a string of the set's compact JSON (a map per node, its keys
/// sorted), written straight from the sorted paths without building the tree.
pub(super) fn fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let all: Vec<&[PathElem]> = paths.iter().map(Vec::as_slice).collect();
    let mut out = Vec::with_capacity(32 * all.len() + 2);
    let mut key = String::new();
    write_node(&all, 0, &mut out, &mut key);
    Value::String(String::from_utf8(out).unwrap_or_default())
}

/// The node at `depth` of `paths` (sorted, sharing their first `depth` elements): its children
/// in the tree's key order. A map's keys sort as strings, so `"."` comes first; `f:`, `k:` and
/// `v:` keep the order of [`PathElem`]'s variants, in which [`PathElem::Itself`] is last.
fn write_node(paths: &[&[PathElem]], depth: usize, out: &mut Vec<u8>, key: &mut String) {
    out.push(b'{');
    let ended = paths.iter().take_while(|p| p.len() == depth).count();
    let rest = &paths[ended..];
    let split = rest.partition_point(|p| p[depth] != PathElem::Itself);
    let (others, itself) = rest.split_at(split);
    let mut first = true;
    if !itself.is_empty() {
        write_child(&PathElem::Itself, itself, depth, out, key, &mut first);
    }
    let mut i = 0;
    while i < others.len() {
        let elem = &others[i][depth];
        let run = others[i..].partition_point(|p| &p[depth] == elem);
        write_child(elem, &others[i..i + run], depth, out, key, &mut first);
        i += run;
    }
    out.push(b'}');
}

fn write_child(
    elem: &PathElem,
    group: &[&[PathElem]],
    depth: usize,
    out: &mut Vec<u8>,
    key: &mut String,
    first: &mut bool,
) {
    if !std::mem::take(first) {
        out.push(b',');
    }
    elem.write_key(key);
    // A string always encodes.
    let _ = serde_json::to_writer(&mut *out, key.as_str());
    out.push(b':');
    write_node(group, depth + 1, out, key);
}

/// A path set in the `FieldsV1` format, as a JSON object: what [`fields_v1`] writes the text
/// of (the tests check the two agree).
#[cfg(test)]
pub(super) fn fields_v1_tree(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    // The paths share their prefixes (they come sorted): each element's key is written into
    // one buffer and looked up, and copied only where the node is new.
    let mut key = String::new();
    for path in paths {
        let mut node = &mut root;
        for elem in path {
            elem.write_key(&mut key);
            if !node.contains_key(key.as_str()) {
                node.insert(key.clone(), Value::Object(Map::new()));
            }
            let Some(Value::Object(next)) = node.get_mut(key.as_str()) else {
                break;
            };
            node = next;
        }
    }
    Value::Object(root)
}

/// Parses a `FieldsV1` value, in either form ([`crate::api::folded`]), back into a path
/// set; anything that is no map is the empty set.
pub(super) fn parse_fields_v1(value: &Value) -> BTreeSet<FieldPath> {
    fn walk(node: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        if node.is_empty() && !path.is_empty() {
            out.insert(path.clone());
        }
        for (k, v) in node {
            let Some(elem) = PathElem::from_key(k) else {
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
    match value {
        Value::Object(m) => walk(m, &mut Vec::new(), &mut out),
        Value::String(text) => parse_folded(text, &mut out),
        _ => {}
    }
    out
}

/// [`parse_fields_v1`] of a folded set, read from its text without building its tree: the same
/// paths as walking the parsed tree, and none for text that is not one JSON value.
fn parse_folded(text: &str, out: &mut BTreeSet<FieldPath>) {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// A node of the set at `path`: a map walks its children, anything else is a member.
    struct Node<'a> {
        path: &'a mut FieldPath,
        out: &'a mut BTreeSet<FieldPath>,
    }

    impl Node<'_> {
        fn member<E>(self) -> Result<(), E> {
            if !self.path.is_empty() {
                self.out.insert(self.path.clone());
            }
            Ok(())
        }
    }

    impl<'de> DeserializeSeed<'de> for Node<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Node<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a FieldsV1 set")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut empty = true;
            while let Some(key) = map.next_key::<String>()? {
                empty = false;
                let Some(elem) = PathElem::from_key(&key) else {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                };
                self.path.push(elem);
                map.next_value_seed(Node {
                    path: &mut *self.path,
                    out: &mut *self.out,
                })?;
                self.path.pop();
            }
            if empty {
                return self.member();
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            self.member()
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            self.member()
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            self.member()
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            self.member()
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            self.member()
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            self.member()
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            self.member()
        }
    }

    let mut de = serde_json::Deserializer::from_str(text);
    let mut path = Vec::new();
    let parsed = Node {
        path: &mut path,
        out: &mut *out,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if parsed.is_err() {
        out.clear();
    }
}

/// Renders a path like the API server's conflict messages: `.spec.containers[name="web"].image`.
pub(super) fn render_path(path: &[PathElem]) -> String {
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
pub(super) fn value_at<'a>(obj: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    value_at_with(obj, path, &mut ListKeys::default())
}

/// List keys (`k:{"type":"Ready"}`) parsed once for many lookups: the paths of one changed
/// list all name its items by the same few keys, and a write looks each path up in the old
/// object and in the new.
#[derive(Default)]
pub(super) struct ListKeys(BTreeMap<String, Option<Map<String, Value>>>);

impl ListKeys {
    fn get(&mut self, key: &str) -> Option<&Map<String, Value>> {
        if !self.0.contains_key(key) {
            self.0
                .insert(key.to_owned(), serde_json::from_str(key).ok());
        }
        self.0.get(key).and_then(Option::as_ref)
    }
}

/// [`value_at`] with list keys parsed once across calls.
pub(super) fn value_at_with<'a>(
    obj: &'a Value,
    path: &[PathElem],
    keys: &mut ListKeys,
) -> Option<&'a Value> {
    let mut cur = obj;
    for elem in path {
        match elem {
            PathElem::Field(f) => cur = cur.get(f)?,
            PathElem::Key(k) => {
                let want = keys.get(k)?;
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
pub(super) fn remove_at(obj: &mut Value, path: &[PathElem]) {
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

/// Whether `path` is a member of the `FieldsV1` set `tree` (as [`parse_fields_v1`] reads it:
/// its node is there and is empty or not an object), looked up without parsing the set.
fn has_member(tree: &Map<String, Value>, path: &[PathElem], key: &mut String) -> bool {
    let mut node = tree;
    for (i, elem) in path.iter().enumerate() {
        elem.write_key(key);
        let last = i + 1 == path.len();
        match node.get(key.as_str()) {
            None => return false,
            Some(Value::Object(m)) if last => return m.is_empty(),
            Some(Value::Object(m)) => node = m,
            Some(_) => return last,
        }
    }
    false
}

/// Whether every node of the `FieldsV1` set `tree` addresses a value of `at` (so every path of
/// the set exists there, as [`value_at_with`] reads them). False for anything it cannot read,
/// which only sends the caller to the exact, slower check.
fn all_exist(tree: &Map<String, Value>, at: &Value, keys: &mut ListKeys) -> bool {
    for (k, v) in tree {
        let next = if k == "." {
            Some(at)
        } else if let Some(f) = k.strip_prefix("f:") {
            at.get(f)
        } else if let Some(item_key) = k.strip_prefix("k:") {
            let Some(want) = keys.get(item_key) else {
                return false;
            };
            at.as_array().and_then(|items| {
                items
                    .iter()
                    .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))
            })
        } else if let Some(member) = k.strip_prefix("v:") {
            let Ok(want) = serde_json::from_str::<Value>(member) else {
                return false;
            };
            at.as_array()
                .and_then(|items| items.iter().find(|i| **i == want))
        } else {
            return false;
        };
        let Some(next) = next else {
            return false;
        };
        if let Value::Object(m) = v
            && !all_exist(m, next, keys)
        {
            return false;
        }
    }
    true
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
    // The entries are taken out of the object (not copied), so that `new` itself is the body
    // whose fields are tracked; they go back in at the end.
    let taken = new
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove("managedFields"));
    let mut entries: Vec<Value> = match taken {
        Some(Value::Array(entries)) => entries,
        _ => old
            .and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    let body: &Value = new;
    let changed: BTreeSet<FieldPath> = match old {
        None => paths_of(body),
        Some(old) => changed_paths(old, body),
    };
    let is_mine = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str) == subresource
    };
    let mut mine_found = false;
    // The entries the stored object holds, rendered by this function when it was written.
    let stored_entries = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .and_then(Value::as_array);
    let mut keys = ListKeys::default();
    let mut key = String::new();
    for (i, e) in entries.iter_mut().enumerate() {
        let as_stored = stored_entries
            .and_then(|s| s.get(i))
            .is_some_and(|s| same_set(s.get("fieldsV1"), e.get("fieldsV1")));
        // Another manager's entry, as stored, that owns none of the changed fields and whose
        // fields all still exist is left as it is, without parsing it into paths (what most
        // writes meet: a status writer's write beside the creator's entry, or the other way).
        if as_stored
            && !is_mine(e)
            && let Some(tree) = e.get("fieldsV1").and_then(set_tree)
            && !changed.iter().any(|p| has_member(&tree, p, &mut key))
            && all_exist(&tree, body, &mut keys)
        {
            continue;
        }
        // The writer's own entry, as stored, that holds every changed field already and whose
        // fields all still exist keeps its set: only its time and apiVersion change (a status
        // writer writing the same fields again).
        if as_stored
            && is_mine(e)
            && let Some(tree) = e.get("fieldsV1").and_then(set_tree)
            && changed.iter().all(|p| has_member(&tree, p, &mut key))
            && all_exist(&tree, body, &mut keys)
        {
            mine_found = true;
            e["time"] = Value::String(now.to_string());
            if let Some(v) = body.get("apiVersion") {
                e["apiVersion"] = v.clone();
            }
            continue;
        }
        let mut set = e.get("fieldsV1").map(parse_fields_v1).unwrap_or_default();
        let parsed = set.len();
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
        let grown = set.len();
        // Fields that no longer exist are owned by nobody.
        set.retain(|p| value_at_with(body, p, &mut keys).is_some());
        // An entry as stored whose set neither gained nor lost a path keeps its rendering
        // (most entries of most writes: another manager's fields, or a status writer's own
        // again); any other is rendered from its set.
        if !as_stored || grown != parsed || set.len() != grown {
            e["fieldsV1"] = fields_v1(&set);
        }
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
    // Every entry not as stored was rendered above, so a set that is a string is one this
    // server folded.
    entries.retain(|e| e.get("fieldsV1").is_some_and(is_nonempty_set));
    if !new.get("metadata").is_some_and(Value::is_object) {
        new["metadata"] = json!({});
    }
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = new.get_mut("metadata") {
            meta.remove("managedFields");
        }
    } else {
        new["metadata"]["managedFields"] = Value::Array(entries);
        crate::api::folded::fold(new);
    }
}

/// The path set of an applied configuration in `FieldsV1` form (what [`crate::registry::patch::apply()`] records).
#[cfg(test)]
pub fn managed_fields_of(applied: &Value) -> Value {
    fields_v1_tree(&paths_of(applied))
}

/// Merges the managed-field sets of several entries into one map from rendered path
/// (`.spec.replicas`) to owning managers; handy for explaining ownership in docs and tests.
#[cfg(test)]
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
    use proptest::strategy::Strategy;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}, "data": data})
    }

    /// The changed paths by their definition: every path of `new` (but the self markers) that
    /// reads differently in `old`.
    fn changed_by_definition(old: &Value, new: &Value) -> BTreeSet<FieldPath> {
        paths_of(new)
            .into_iter()
            .filter(|p| p.last() != Some(&PathElem::Itself) && value_at(old, p) != value_at(new, p))
            .collect()
    }

    proptest::proptest! {
        /// The folded rendering is the compact text of the tree, whatever the paths.
        #[test]
        fn the_folded_rendering_is_the_trees_text(
            paths in proptest::collection::btree_set(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        proptest::strategy::Just(PathElem::Itself),
                        "[ab\"]{1,2}".prop_map(PathElem::Field),
                        proptest::strategy::Just(PathElem::Key(r#"{"name":"c"}"#.to_owned())),
                        "[12]".prop_map(PathElem::Val),
                    ],
                    1..4,
                ),
                0..8,
            )
        ) {
            let tree = fields_v1_tree(&paths);
            proptest::prop_assert_eq!(fields_v1(&paths), Value::String(tree.to_string()));
            proptest::prop_assert_eq!(parse_fields_v1(&fields_v1(&paths)), parse_fields_v1(&tree));
        }

        /// Read from its text, a set has the paths of its parsed tree, for any JSON; text that
        /// is not JSON has none.
        #[test]
        fn a_folded_set_reads_as_its_tree(value in json_value()) {
            let text = Value::String(value.to_string());
            proptest::prop_assert_eq!(parse_fields_v1(&text), parse_fields_v1(&value));
            let cut = value.to_string();
            let cut = Value::String(cut[..cut.len() / 2].to_owned());
            proptest::prop_assert!(cut == json!("") || parse_fields_v1(&cut).is_empty());
        }
    }

    /// JSON values whose maps have keys of every kind a set can hold, and some it cannot.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = proptest::prop_oneof![
            proptest::strategy::Just(Value::Null),
            proptest::strategy::Just(json!(1)),
            proptest::strategy::Just(json!("s")),
            proptest::strategy::Just(json!({})),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            proptest::prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map(
                    proptest::prop_oneof![
                        proptest::strategy::Just(".".to_owned()),
                        "f:[ab]".prop_map(String::from),
                        proptest::strategy::Just(r#"k:{"name":"c"}"#.to_owned()),
                        "v:[12]".prop_map(String::from),
                        "[xy]".prop_map(String::from),
                    ],
                    inner,
                    0..4,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// One set of parsed list keys serves lookups in several objects, and a key that is not
    /// JSON finds nothing, as without the cache.
    #[test]
    fn list_keys_parsed_once_find_what_a_fresh_parse_finds() {
        let old = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let new = json!({"status": {"conditions": [{"type": "Ready", "status": "True"},
                                                   {"type": "Done", "status": "True"}]}});
        let path = |key: &str| {
            vec![
                PathElem::Field("status".into()),
                PathElem::Field("conditions".into()),
                PathElem::Key(key.into()),
                PathElem::Field("status".into()),
            ]
        };
        let mut keys = ListKeys::default();
        for key in [r#"{"type":"Ready"}"#, r#"{"type":"Done"}"#, "not json"] {
            for obj in [&old, &new] {
                assert_eq!(
                    value_at_with(obj, &path(key), &mut keys),
                    value_at(obj, &path(key)),
                    "{key}"
                );
            }
        }
        assert_eq!(
            value_at_with(&new, &path(r#"{"type":"Done"}"#), &mut keys),
            Some(&json!("True"))
        );
        assert_eq!(keys.0.len(), 3);
    }

    #[test]
    fn changed_paths_skip_equal_subtrees_and_match_the_definition() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "resourceVersion": "7",
                         "labels": {"app": "web", "tier": "db"}, "finalizers": ["a", "b"],
                         "managedFields": [{"manager": "m"}]},
            "spec": {"containers": [{"name": "c", "image": "busybox", "args": ["x"]},
                                    {"name": "d", "image": "nginx"}],
                     "nodeName": "n", "tolerations": [{"key": "k"}], "empty": {}},
            "status": {"phase": "Pending",
                       "conditions": [{"type": "Ready", "status": "False"}]}
        });
        let edits: Vec<fn(&mut Value)> = vec![
            |_| {},
            |v| v["status"]["phase"] = json!("Running"),
            |v| v["status"]["conditions"][0]["status"] = json!("True"),
            |v| v["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]),
            |v| v["spec"]["containers"][1]["image"] = json!("nginx:2"),
            |v| v["spec"]["containers"] = json!([{"name": "d", "image": "nginx"}, {"name": "c", "image": "busybox", "args": ["x", "y"]}]),
            |v| v["metadata"]["labels"]["tier"] = json!("web"),
            |v| v["metadata"]["finalizers"] = json!(["b", "c"]),
            |v| v["metadata"]["resourceVersion"] = json!("8"),
            |v| v["spec"]["empty"] = json!({"now": 1}),
            |v| v["spec"]["nodeName"] = json!({"not": "a string"}),
            |v| v["spec"]["tolerations"] = json!("scalar"),
            |v| {
                v["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("managedFields");
                v["status"] = json!({});
            },
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut new = pod.clone();
            edit(&mut new);
            assert_eq!(
                changed_paths(&pod, &new),
                changed_by_definition(&pod, &new),
                "edit {i}"
            );
            assert_eq!(
                changed_paths(&new, &pod),
                changed_by_definition(&new, &pod),
                "edit {i}, reversed"
            );
        }
        // A status write is only its status.
        let mut new = pod.clone();
        new["status"]["phase"] = json!("Running");
        let changed: Vec<String> = changed_paths(&pod, &new)
            .iter()
            .map(|p| render_path(p))
            .collect();
        assert_eq!(changed, [".status.phase"]);
    }

    #[test]
    fn updates_record_and_transfer_ownership() {
        let mut created = cm(json!({"a": "1", "b": "2"}));
        record_update(None, &mut created, "kubectl-create", None, "t1");
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": "t1",
                    "fieldsType": "FieldsV1",
                    // Folded, as the store holds a set ([`crate::api::folded`]).
                    "fieldsV1": json!({"f:data": {"f:a": {}, "f:b": {}}}).to_string()}])
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
            && same_set(
                Some(&e["fieldsV1"]),
                Some(&json!({"f:status": {"f:phase": {}}}))
            )));
        // An unchanged write adds nothing.
        let mut same = status.clone();
        record_update(Some(&status), &mut same, "other", None, "t4");
        assert_eq!(
            same["metadata"]["managedFields"],
            status["metadata"]["managedFields"]
        );
    }

    /// The writer's own entry keeps its set unparsed only when the exact update would keep it:
    /// the same entries either way for a write of fields it owns already (time updated), one
    /// that adds a field, and one that removes a field it owns.
    #[test]
    fn the_writers_own_entry_is_kept_with_the_same_result_as_the_exact_update() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        record_update(None, &mut pod, "at-controller", None, "t1");
        let mut running = pod.clone();
        running["status"] =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        record_update(Some(&pod), &mut running, "kubelet", Some("status"), "t2");
        let with = |f: &dyn Fn(&mut Value)| {
            let mut w = running.clone();
            f(&mut w);
            w
        };
        let writes = [
            with(&|w| w["status"]["phase"] = json!("Succeeded")),
            with(&|w| w["status"]["hostIP"] = json!("10.0.0.1")),
            with(&|w| {
                w["status"].as_object_mut().unwrap().remove("phase");
            }),
        ];
        for (i, write) in writes.into_iter().enumerate() {
            let mut fast = write.clone();
            record_update(Some(&running), &mut fast, "kubelet", Some("status"), "t3");
            let mut unlisted = running.clone();
            unlisted["metadata"]["managedFields"] = json!([]);
            let mut exact = write.clone();
            record_update(Some(&unlisted), &mut exact, "kubelet", Some("status"), "t3");
            assert_eq!(
                fast["metadata"]["managedFields"], exact["metadata"]["managedFields"],
                "write {i}"
            );
            let mine = &fast["metadata"]["managedFields"][1];
            assert_eq!(
                (&mine["manager"], &mine["time"]),
                (&json!("kubelet"), &json!("t3"))
            );
        }
    }

    /// Another manager's entry is skipped unparsed only when the exact path-by-path update
    /// would leave it as it is: the same entries either way, for a write beside it, one that
    /// takes a field of it, and one that removes a list item it owns.
    #[test]
    fn an_untouched_entry_is_skipped_with_the_same_result_as_the_exact_update() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "command": ["sh"]},
                {"name": "d", "image": "busybox"}]}});
        record_update(None, &mut pod, "at-controller", None, "t1");
        let mut running = pod.clone();
        running["status"] =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        let writes = [
            // Beside the creator's fields: its entry is skipped.
            (running, Some("status")),
            // Takes the creator's restartPolicy.
            (
                {
                    let mut w = pod.clone();
                    w["spec"]["restartPolicy"] = json!("Always");
                    w
                },
                None,
            ),
            // Removes a container the creator owns (a keyed list item).
            (
                {
                    let mut w = pod.clone();
                    w["spec"]["containers"].as_array_mut().unwrap().pop();
                    w
                },
                None,
            ),
        ];
        // The creator's set is read in place: every node found, the status not in it.
        let tree = set_tree(&pod["metadata"]["managedFields"][0]["fieldsV1"]).unwrap();
        let tree = &*tree;
        assert!(all_exist(tree, &writes[0].0, &mut ListKeys::default()));
        let status_paths = changed_paths(&pod, &writes[0].0);
        assert!(!status_paths.is_empty());
        assert!(
            !status_paths
                .iter()
                .any(|p| has_member(tree, p, &mut String::new()))
        );
        assert!(!all_exist(tree, &writes[2].0, &mut ListKeys::default()));
        for (write, sub) in writes {
            let mut fast = write.clone();
            record_update(Some(&pod), &mut fast, "kubelet", sub, "t2");
            // The exact update: the old object's entries hidden, so none counts as stored.
            let mut unlisted = pod.clone();
            unlisted["metadata"]["managedFields"] = json!([]);
            let mut exact = write.clone();
            record_update(Some(&unlisted), &mut exact, "kubelet", sub, "t2");
            assert_eq!(
                fast["metadata"]["managedFields"],
                exact["metadata"]["managedFields"]
            );
        }
        let mut took = pod.clone();
        took["spec"]["restartPolicy"] = json!("Always");
        record_update(Some(&pod), &mut took, "kubelet", None, "t2");
        assert_eq!(field_owners(&took)[".spec.restartPolicy"], vec!["kubelet"]);
    }
}
