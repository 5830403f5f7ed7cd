//! The shard's side of a move: acknowledging a drain.
//!
//! When the sharder wants an object off a live shard it adds
//! `drain.shard.sample-controller.dev/<ring>=true` (see the [module documentation](super)). The
//! shard sees the label through its watch; the operator's sync of that object, instead of
//! working on it, calls [`release_if_draining`]: one merge PATCH that removes both the shard
//! label and the drain label, carrying the `resourceVersion` the sync read (a precondition:
//! 409 Conflict if the object changed since, and the sync is retried from a fresh cache). The
//! sync runs on the worker that owns the key, and the workqueue never hands a key to two
//! workers, so no other sync of the object is in flight when the release is written: the
//! shard has stopped working on it before it lets go. After the write the object no longer
//! matches the shard's selector, so its watch delivers a deletion and the object leaves the
//! cache; the sharder then assigns it to its new shard.

use k8s_openapi::{Metadata, Resource};
use serde_json::{Map, Value, json};

use super::labels::{DRAIN_LABEL_PREFIX, SHARD_LABEL_PREFIX};
use sample_client_go::cache::{CacheObject, ObjectMetaAccess};
use sample_client_go::client::{self, Api, Client, Patch, PatchParams};

/// The rings whose drain label `meta` carries.
pub fn draining_rings(meta: &impl ObjectMetaAccess) -> Vec<&str> {
    meta.labels()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix(DRAIN_LABEL_PREFIX))
        .collect()
}

/// The merge patch that releases `meta` from every ring it is drained from: the shard and
/// drain labels set to null, under a `resourceVersion` precondition. `None` when it is not
/// draining.
pub fn release_patch(meta: &impl ObjectMetaAccess) -> Option<Value> {
    let rings = draining_rings(meta);
    if rings.is_empty() {
        return None;
    }
    let mut labels = Map::new();
    for ring in rings {
        labels.insert(format!("{DRAIN_LABEL_PREFIX}{ring}"), Value::Null);
        labels.insert(format!("{SHARD_LABEL_PREFIX}{ring}"), Value::Null);
    }
    Some(json!({"metadata": {
        "resourceVersion": meta.resource_version(),
        "labels": labels,
    }}))
}

/// If `obj` carries a drain label, removes its shard and drain labels in one write (see the
/// module doc) and returns the write's outcome; `None` when there is nothing to release.
pub async fn release_if_draining<K>(client: &Client, obj: &K) -> Option<Result<(), client::Error>>
where
    K: CacheObject + Resource + Metadata,
{
    let meta = obj.metadata();
    let patch = release_patch(meta)?;
    let name = meta.name().unwrap_or_default();
    let api: Api<K> = match meta.namespace() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tracing::info!(
        kind = K::KIND,
        namespace = meta.namespace().unwrap_or(""),
        name,
        "draining: released to the sharder"
    );
    let pp = PatchParams::default();
    Some(api.patch(name, &pp, &Patch::Merge(patch)).await.map(drop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    #[test]
    fn only_a_draining_object_is_released_and_under_its_resource_version() {
        let mut meta = ObjectMeta {
            resource_version: Some("42".into()),
            labels: Some(BTreeMap::from([(
                "shard.sample-controller.dev/r".to_string(),
                "a".to_string(),
            )])),
            ..ObjectMeta::default()
        };
        assert_eq!(release_patch(&meta), None);
        meta.labels
            .as_mut()
            .unwrap()
            .insert("drain.shard.sample-controller.dev/r".into(), "true".into());
        assert_eq!(
            release_patch(&meta),
            Some(json!({"metadata": {"resourceVersion": "42", "labels": {
                "drain.shard.sample-controller.dev/r": null,
                "shard.sample-controller.dev/r": null,
            }}}))
        );
    }
}
