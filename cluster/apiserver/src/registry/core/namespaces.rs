//! core/v1 Namespaces: what their strategy and REST storage add to the generic store, and the
//! namespace controller's deletion of their contents.
//!
//! kube-apiserver's `pkg/registry/core/namespace/strategy.go` and `storage/storage.go` do, and
//! so does [`NamespaceStrategy`]:
//!
//! * **names** are DNS-1123 labels (`ValidateNamespaceName`: no dots);
//! * **create** (`PrepareForCreate`): the status is `phase: Active`, and a namespace without
//!   `spec.finalizers` gets `[kubernetes]` (the real server adds `kubernetes` to any list; here
//!   a list the client sent is kept as sent);
//! * **DELETE** (the namespace REST storage's `Delete`): a namespace is only marked, its
//!   `deletionTimestamp` set and its phase `Terminating`, while `spec.finalizers` are left; once
//!   marked, everything in it is deleted (kube's namespace controller in
//!   kube-controller-manager does this, here it is done at once under the same lock), objects
//!   with finalizers are marked and stay until released. When the last object has gone
//!   ([`finish_if_empty`], called by the generic store whenever a namespaced object is removed)
//!   the `kubernetes` finalizer is removed and, with no other finalizers, the namespace goes;
//! * `default`, `kube-system` and `kube-public` may never be deleted (`403 this namespace may
//!   not be deleted`, kube's `NamespaceLifecycle` admission plugin);
//! * **`PUT .../finalize`** (`FinalizeREST`): the only way to change `spec.finalizers` of a
//!   namespace; a terminating namespace left with none disappears.

use std::collections::HashSet;
use std::sync::Arc;

use apimachinery::validation as v;
use serde_json::{Value, json};

use crate::api::object_meta::{self as meta, finalizers_of, meta_str};
use crate::api::status::ApiError;
use crate::registry::State;
use crate::registry::generic::{
    Answer, DeleteOptions, Target, WriteOptions, delete_one, remove_object,
};
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::{Strategy, intake, present, should_delete};
use crate::storage::store::rv_of;

/// Where namespaces are stored.
const STORAGE: &str = "core/namespaces";

/// The namespaces that may never be deleted.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The finalizer the namespace controller removes once a terminating namespace is empty.
const KUBERNETES_FINALIZER: &str = "kubernetes";

/// The strategy of `namespaces` (see the module docs).
#[derive(Debug, Default)]
pub struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn validate_name(&self, name: &str) -> Vec<String> {
        v::is_dns1123_label(name)
    }

    fn prepare_for_create(&self, _def: &ResourceDef, obj: &mut Value) {
        let Some(o) = obj.as_object_mut() else {
            return;
        };
        o.insert("status".into(), json!({"phase": "Active"}));
        if o.get("spec").and_then(|s| s.get("finalizers")).is_none() {
            meta::set_path(obj, ".spec.finalizers", json!([KUBERNETES_FINALIZER]));
        }
    }

    fn update_subresource(
        &self,
        st: &mut State,
        target: &Target,
        subresource: &str,
        body: &Value,
        opts: &WriteOptions,
    ) -> Option<Result<Answer, ApiError>> {
        (subresource == "finalize").then(|| finalize(st, target, body.clone(), opts))
    }

    fn check_delete(&self, def: &ResourceDef, name: &str, _obj: &Value) -> Result<(), ApiError> {
        if IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                &def.plural,
                &def.group,
                name,
                "this namespace may not be deleted",
            ));
        }
        Ok(())
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        obj["spec"]["finalizers"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        meta::set_path(obj, ".status.phase", json!("Terminating"));
    }

    fn after_delete_marked(&self, st: &mut State, obj: &Value) {
        empty(st, meta_str(obj, "name"));
    }
}

/// `PUT /api/v1/namespaces/{name}/finalize`: the namespace controller's way of removing its
/// `kubernetes` entry from `spec.finalizers` (nothing else of the body is used). A terminating
/// namespace left with no finalizers disappears.
fn finalize(
    st: &mut State,
    t: &Target,
    body: Value,
    opts: &WriteOptions,
) -> Result<Answer, ApiError> {
    let def = t.def.clone();
    let body = intake(&def, body)?;
    let old = st
        .get(&def.storage, "", t.name())
        .cloned()
        .ok_or_else(|| t.not_found())?;
    let sent_rv = meta_str(&body, "resourceVersion");
    if !sent_rv.is_empty() && sent_rv.parse::<u64>().ok() != Some(rv_of(&old)) {
        return Err(ApiError::conflict(&def.plural, &def.group, t.name()));
    }
    let mut new = old.clone();
    let finalizers = body["spec"]["finalizers"]
        .as_array()
        .map(|a| Value::Array(a.clone()))
        .unwrap_or_else(|| json!([]));
    meta::set_path(&mut new, ".spec.finalizers", finalizers);
    if new == old || opts.dry_run {
        return Ok((200, present(&def, &new).into()));
    }
    if should_delete(&def, &new) {
        let removed = remove_object(st, &def, "", t.name(), Some(new.clone())).unwrap_or(new);
        return Ok((200, present(&def, &removed).into()));
    }
    let stored = st.write(&def.storage, new);
    Ok((200, present(&def, &stored).into()))
}

/// Deletes everything in a namespace that is being terminated (the namespace controller's job,
/// done synchronously here). Objects with finalizers are marked and stay until released.
fn empty(st: &mut State, ns: &str) {
    let defs: Vec<Arc<ResourceDef>> = {
        let mut seen = HashSet::new();
        st.registry
            .all()
            .iter()
            .filter(|d| d.namespaced && seen.insert(d.storage.clone()))
            .cloned()
            .collect()
    };
    for def in defs {
        let names: Vec<String> = st
            .list(&def.storage, Some(ns))
            .iter()
            .map(|o| meta_str(o, "name").to_owned())
            .collect();
        for name in names {
            let t = Target {
                def: def.clone(),
                namespace: Some(ns.to_owned()),
                name: Some(name),
                subresource: None,
            };
            let opts = DeleteOptions {
                grace_period: Some(0),
                ..Default::default()
            };
            // Errors cannot happen without preconditions; an object that vanished meanwhile is fine.
            let _ = delete_one(st, &t, &opts);
        }
    }
    finish_if_empty(st, ns);
}

fn is_empty(st: &State, ns: &str) -> bool {
    let storages: Vec<String> = st
        .registry
        .all()
        .iter()
        .filter(|d| d.namespaced)
        .map(|d| d.storage.clone())
        .collect();
    storages.iter().all(|s| st.list(s, Some(ns)).is_empty())
}

/// The namespace controller's last step: once a terminating namespace is empty, its
/// `kubernetes` finalizer is removed and, with no other finalizers (in `spec` or `metadata`),
/// the namespace disappears. Other `spec.finalizers` keep it until released through
/// `PUT .../finalize`.
pub fn finish_if_empty(st: &mut State, ns: &str) {
    let Some(nsobj) = st.get(STORAGE, "", ns).cloned() else {
        return;
    };
    if meta_str(&nsobj, "deletionTimestamp").is_empty() || !is_empty(st, ns) {
        return;
    }
    let mut done = nsobj.clone();
    let remaining: Vec<Value> = nsobj["spec"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|f| *f != KUBERNETES_FINALIZER)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let released = remaining.is_empty();
    meta::set_path(&mut done, ".spec.finalizers", Value::Array(remaining));
    if released && finalizers_of(&done).is_empty() {
        st.write(STORAGE, done);
        st.delete(STORAGE, "", ns);
    } else if done != nsobj {
        st.write(STORAGE, done);
    }
}
