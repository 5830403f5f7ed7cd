//! Objects of ours made before the `managed-by` label: found with one GET, labelled, adopted.
//!
//! The manager's caches of owned kinds select on `app.kubernetes.io/managed-by` (see
//! [`crate::slim`]), so an object an operator made before that label existed is invisible to
//! them, and creating it again answers 409 AlreadyExists. [`get_existing`] resolves that once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde_json::json;

use super::MANAGERS;
use sample_client_go::cache::{CacheObject, ObjectMetaAccess};
use sample_client_go::client::{self, Api, Patch, PatchParams};
use sample_controller_runtime::ownership::{LABEL_MANAGED_BY, is_controlled_by};
use sample_controller_runtime::sharding::shard_labels;

/// After a create of `name` answered 409 AlreadyExists: one GET of the object that is in the
/// way. If its controller ownerReference is `owner`'s and it lacks the `managed-by` label (it
/// was made before the label existed, so the cache cannot see it), the label `manager` is added
/// with one merge PATCH and the patched object returned; otherwise the object is returned as it
/// is, and the caller decides (a foreign object is reported, never taken over).
pub async fn get_existing<O, D>(
    api: &Api<D>,
    owner: &O,
    name: &str,
    manager: &str,
) -> Result<D, client::Error>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
    D: CacheObject,
{
    let existing = api.get(name).await?;
    let meta = existing.metadata();
    let current = meta.labels().cloned().unwrap_or_default();
    let labelled = current
        .get(LABEL_MANAGED_BY)
        .is_some_and(|v| MANAGERS.contains(&v.as_str()));
    // In a shard, an object whose owner moved here still carries the old shard's label (or
    // none): this shard's cache sees it only once it carries the owner's.
    let mut labels: BTreeMap<String, String> = shard_labels(owner.metadata())
        .into_iter()
        .filter(|(k, v)| current.get(k) != Some(v))
        .collect();
    if !labelled {
        labels.insert(LABEL_MANAGED_BY.to_string(), manager.to_string());
    }
    if labels.is_empty() || !is_controlled_by(meta, owner) {
        return Ok(existing);
    }
    let pp = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    tracing::info!(
        kind = D::KIND,
        name,
        manager,
        ?labels,
        "adopting an object of ours the cache does not show: adding the managed-by / shard labels"
    );
    api.patch(
        name,
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
}
