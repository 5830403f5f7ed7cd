//! What the simulated controllers write: the objects they own.
//!
//! kube-controller-manager's controllers create what they manage through the API server like
//! any client, with a **controller reference** (`metav1.NewControllerRef`: the owner's
//! `apiVersion`, `kind`, `name`, `uid`, `controller: true`, `blockOwnerDeletion: true`), so the
//! garbage collector ([`super::gc`]) deletes the owned object with its owner and no second
//! controller adopts it; and they delete with a UID precondition, so a newer object that took
//! the same name is never removed by mistake. The Job, CronJob, ReplicationController and DaemonSet
//! ([`super::podsets`]) and StatefulSet ([`super::workloads`]) controllers here do the same
//! through [`controller_ref`], [`create`] and [`delete`], which go through [`embedded_apiserver::verbs`]
//! (defaults, validation, generated names), the path a client's request takes, and find the
//! pods they control with [`controlled_pods`].

use std::sync::Arc;

use serde_json::{Value, json};

use embedded_apiserver::meta::meta_str;
use embedded_apiserver::query::Query;
use embedded_apiserver::registry::ResourceDef;
use embedded_apiserver::status::ApiError;
use embedded_apiserver::store::State;
use embedded_apiserver::verbs::{self, DeleteOptions, Target};

/// The `ownerReferences` entry naming `owner` (an `api_version` `kind`) as the controller.
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": meta_str(owner, "name"),
        "uid": meta_str(owner, "uid"), "controller": true, "blockOwnerDeletion": true,
    })
}

/// The pods in `namespace` whose controller (the `ownerReferences` entry with
/// `controller: true`) has this UID, copied out of the store.
pub fn controlled_pods(st: &State, namespace: &str, uid: &str) -> Vec<Value> {
    st.list("core/pods", Some(namespace))
        .into_iter()
        .filter(|p| {
            p["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["uid"] == uid && r["controller"] == true)
                })
        })
        .cloned()
        .collect()
}

/// Creates `obj` of the resource `def` in `namespace`, as a POST would; the stored object.
pub fn create(
    st: &mut State,
    def: Arc<ResourceDef>,
    namespace: &str,
    obj: Value,
) -> Result<Value, ApiError> {
    let target = Target {
        def,
        namespace: Some(namespace.to_owned()),
        name: None,
        subresource: None,
    };
    verbs::create(st, &target, obj, &Query::parse(None)).map(|(_, created)| created)
}

/// Deletes `namespace/name` of `group/version/resource` if its UID is still `uid`, with the
/// given `propagationPolicy` (`None`: the resource's default).
pub fn delete(
    st: &mut State,
    (group, version, resource): (&str, &str, &str),
    namespace: &str,
    name: &str,
    uid: &str,
    propagation: Option<&str>,
) -> Result<(), ApiError> {
    let Some(def) = st.registry.lookup(group, version, resource) else {
        return Ok(());
    };
    let target = Target {
        def,
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        subresource: None,
    };
    let opts = DeleteOptions {
        precondition_uid: Some(uid.to_owned()),
        propagation: propagation.map(str::to_owned),
        ..Default::default()
    };
    verbs::delete_one(st, &target, &opts).map(|_| ())
}
