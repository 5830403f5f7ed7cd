//! How the merge-style patches treat a list: the part strategic merge patch and server-side
//! apply share.
//!
//! A merge patch replaces lists whole. Strategic merge patch ([`crate::registry::patch::strategic`]) and
//! server-side apply ([`crate::registry::patch::apply`]) know better for the lists of the built-in types: a
//! pod's `containers` is a map in disguise, keyed by `name`, and an apply that names one
//! container must not delete the others. The real server reads that knowledge from the Go
//! struct tags of the built-in types (`patchStrategy:"merge" patchMergeKey:"name"`) or from the
//! OpenAPI `x-kubernetes-list-type` / `x-kubernetes-list-map-keys`. This server serves built-in
//! kinds as JSON, so [`list_strategy`] decides by the *list's field name*; the names were chosen
//! so that no two built-in lists that share a name disagree on the key (the one exception,
//! `ports`, is `containerPort` in containers and `port` in Services, and is decided by the
//! elements). A list not in the table is atomic: replaced, as in a merge patch.

use serde_json::Value;

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
