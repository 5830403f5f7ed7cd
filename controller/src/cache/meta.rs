//! # Reading an object's metadata through an accessor, so the cache can hold any shape
//!
//! The cache never needs a whole `ObjectMeta`. To file an object it reads the name and
//! namespace (the key), the resourceVersion (is this news?), the labels (a lister's selector),
//! the owner references (the `owner-uid` index, and which owner a handler enqueues) and the
//! UID. client-go makes the same cut: its cache calls `meta.Accessor(obj)`, which returns the
//! `metav1.Object` interface (`GetName`, `GetNamespace`, `GetUID`, `GetResourceVersion`,
//! `GetLabels`, `GetOwnerReferences`, ...), never the struct behind it. That is what lets a Go
//! informer cache `metav1.PartialObjectMetadata` (the metadata-only informers of
//! `k8s.io/client-go/metadata`) as readily as a whole `Pod`.
//!
//! [`ObjectMetaAccess`] is that interface here. A cached type `K` is
//! `k8s_openapi::Metadata<Ty = M>` for some `M: ObjectMetaAccess`: every API type of
//! `k8s_openapi` and every custom resource of this crate has `M = ObjectMeta` (implemented
//! below), and a type made for a cache can carry a smaller metadata struct of its own, such as
//! [`MetaSummary`].
//!
//! ## Why a smaller struct matters
//!
//! `ObjectMeta` is 360 bytes before it allocates anything: fifteen optional fields, most of
//! them empty in a cached object (`generateName`, `selfLink`, `deletionGracePeriodSeconds`,
//! `managedFields` once dropped, ...). A cache of 10,000 pods pays 3.6 MB for those inline
//! fields alone. [`MetaSummary`] has the ten fields a handler or sync of this crate reads
//! (240 bytes, its name, namespace, UID and resourceVersion [`SmallString`]s, so the short ones
//! take no allocation), and it is decoded straight from the object's JSON (serde skips the rest), so no
//! `ObjectMeta` is ever built for it.
//!
//! ## Invariants
//!
//! * The accessor only reads; the one write, [`ObjectMetaAccess::trim_for_cache`], is what the
//!   informer's default transform does to every object before it is stored (drop
//!   `managedFields`, give back the spare room of decoded lists).
//! * A type with a [`MetaSummary`] is for caches only: what it does not hold cannot be written
//!   back, so it is never sent to the server (an operator that updates a cached object with a
//!   PUT must cache the whole type).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use super::SmallString;

/// What the cache reads from an object's metadata: apimachinery's `metav1.Object`, the
/// interface `meta.Accessor` returns. See the module documentation.
pub trait ObjectMetaAccess: Send + Sync {
    /// `metadata.name`.
    fn name(&self) -> Option<&str>;
    /// `metadata.namespace` (`None` or empty for a cluster-scoped object).
    fn namespace(&self) -> Option<&str>;
    /// `metadata.uid`.
    fn uid(&self) -> Option<&str>;
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// `metadata.generation`: raised by the server on every change of the spec.
    fn generation(&self) -> Option<i64>;
    /// `metadata.labels`.
    fn labels(&self) -> Option<&BTreeMap<String, String>>;
    /// `metadata.ownerReferences` (empty when there are none).
    fn owner_references(&self) -> &[OwnerReference];
    /// `metadata.deletionTimestamp`: set once the object is being deleted.
    fn deletion_timestamp(&self) -> Option<&Time>;
    /// Sets `metadata.resourceVersion` (what a server does on every write; the in-memory
    /// server of [`super::testing`] uses it).
    fn set_resource_version(&mut self, rv: String);
    /// The informer's default transform: forget `managedFields` (nothing in a controller reads
    /// them, and they are often the largest part of an object) and give back the spare
    /// capacity of the lists a decoder grew (see [`super::shrink_metadata_lists`]).
    fn trim_for_cache(&mut self);
}

/// The accessors of a struct whose fields have `ObjectMeta`'s names and types: `ObjectMeta`
/// itself and [`MetaSummary`] (only what the cache does to trim them differs).
macro_rules! same_field_accessors {
    () => {
        fn name(&self) -> Option<&str> {
            self.name.as_deref()
        }
        fn namespace(&self) -> Option<&str> {
            self.namespace.as_deref()
        }
        fn uid(&self) -> Option<&str> {
            self.uid.as_deref()
        }
        fn resource_version(&self) -> Option<&str> {
            self.resource_version.as_deref()
        }
        fn generation(&self) -> Option<i64> {
            self.generation
        }
        fn labels(&self) -> Option<&BTreeMap<String, String>> {
            self.labels.as_ref()
        }
        fn owner_references(&self) -> &[OwnerReference] {
            self.owner_references.as_deref().unwrap_or_default()
        }
        fn deletion_timestamp(&self) -> Option<&Time> {
            self.deletion_timestamp.as_ref()
        }
        fn set_resource_version(&mut self, rv: String) {
            self.resource_version = Some(rv.into());
        }
    };
}

impl ObjectMetaAccess for ObjectMeta {
    same_field_accessors!();
    fn trim_for_cache(&mut self) {
        self.managed_fields = None;
        super::shrink_metadata_lists(self);
    }
}

/// The metadata a cache of this crate's operators keeps of an object it only reads: name,
/// namespace, uid, resourceVersion, generation, labels, ownerReferences, creationTimestamp,
/// deletionTimestamp and finalizers, with the same names as in `ObjectMeta` (the four strings
/// as [`SmallString`], which reads as a `&str`), so code reads
/// `summary.metadata.name.as_deref()` as it would a pod's.
///
/// Deserialized from an object's `metadata` JSON (the other fields are skipped while parsing,
/// so `managedFields` and annotations cost nothing); serialized in the same shape. It is 240
/// bytes where `ObjectMeta` is 360 (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaSummary {
    /// `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<SmallString>,
    /// `metadata.namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<SmallString>,
    /// `metadata.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<SmallString>,
    /// `metadata.resourceVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<SmallString>,
    /// `metadata.generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// `metadata.labels`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// `metadata.ownerReferences`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Vec<OwnerReference>>,
    /// `metadata.creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// `metadata.finalizers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
}

impl MetaSummary {
    /// The summary of a whole `ObjectMeta` (the fields above, copied).
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        MetaSummary {
            name: meta.name.as_deref().map(SmallString::from),
            namespace: meta.namespace.as_deref().map(SmallString::from),
            uid: meta.uid.as_deref().map(SmallString::from),
            resource_version: meta.resource_version.as_deref().map(SmallString::from),
            generation: meta.generation,
            labels: meta.labels.clone(),
            owner_references: meta.owner_references.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            finalizers: meta.finalizers.clone(),
        }
    }

    /// An `ObjectMeta` with exactly the summary's fields set.
    pub fn to_meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: self.name.as_deref().map(str::to_owned),
            namespace: self.namespace.as_deref().map(str::to_owned),
            uid: self.uid.as_deref().map(str::to_owned),
            resource_version: self.resource_version.as_deref().map(str::to_owned),
            generation: self.generation,
            labels: self.labels.clone(),
            owner_references: self.owner_references.clone(),
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_timestamp: self.deletion_timestamp.clone(),
            finalizers: self.finalizers.clone(),
            ..ObjectMeta::default()
        }
    }
}

impl ObjectMetaAccess for MetaSummary {
    same_field_accessors!();
    fn trim_for_cache(&mut self) {
        if let Some(v) = self.owner_references.as_mut() {
            v.shrink_to_fit();
        }
        if let Some(v) = self.finalizers.as_mut() {
            v.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full() -> serde_json::Value {
        json!({
            "name": "web-1", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "generateName": "web-", "selfLink": "/x",
            "labels": {"app": "web"}, "annotations": {"big": "x".repeat(1000)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "rs-1", "controller": true}],
            "creationTimestamp": "2030-06-01T12:00:00Z",
            "deletionTimestamp": "2030-06-01T12:05:00Z",
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        })
    }

    #[test]
    fn a_summary_decodes_the_fields_it_keeps_and_reads_like_object_meta() {
        let whole: ObjectMeta = serde_json::from_value(full()).expect("ObjectMeta");
        let summary: MetaSummary = serde_json::from_value(full()).expect("MetaSummary");
        assert_eq!(summary, MetaSummary::from_meta(&whole));
        // Every accessor answers the same for both shapes.
        assert_eq!(summary.name(), whole.name());
        assert_eq!(summary.namespace(), whole.namespace());
        assert_eq!(summary.uid(), whole.uid());
        assert_eq!(summary.resource_version(), whole.resource_version());
        assert_eq!(summary.generation(), Some(3));
        assert_eq!(summary.generation(), whole.generation());
        assert_eq!(summary.labels(), whole.labels());
        assert_eq!(summary.owner_references(), whole.owner_references());
        assert_eq!(summary.deletion_timestamp(), whole.deletion_timestamp());
        // Back to an ObjectMeta: the kept fields, nothing else.
        let back = summary.to_meta();
        assert_eq!(back.annotations, None);
        assert_eq!(back.generate_name, None);
        assert_eq!(back.managed_fields, None);
        assert_eq!(back.finalizers, whole.finalizers);
        assert_eq!(MetaSummary::from_meta(&back), summary);
        // Serialized, it is the ObjectMeta JSON of those fields.
        let again: ObjectMeta =
            serde_json::from_value(serde_json::to_value(&summary).expect("json")).expect("meta");
        assert_eq!(again, back);
    }

    #[test]
    fn trimming_for_the_cache_drops_managed_fields_and_spare_room() {
        let mut whole: ObjectMeta = serde_json::from_value(full()).expect("ObjectMeta");
        whole.trim_for_cache();
        assert_eq!(whole.managed_fields, None);
        let refs = whole.owner_references.as_ref().expect("kept");
        assert_eq!(refs.capacity(), refs.len());

        let mut summary: MetaSummary = serde_json::from_value(full()).expect("MetaSummary");
        summary.trim_for_cache();
        let refs = summary.owner_references.as_ref().expect("kept");
        assert_eq!(refs.capacity(), refs.len());
        let finalizers = summary.finalizers.as_ref().expect("kept");
        assert_eq!(finalizers.capacity(), finalizers.len());
    }

    #[test]
    fn missing_lists_read_as_empty() {
        let bare = MetaSummary::default();
        assert!(bare.owner_references().is_empty());
        assert_eq!(bare.labels(), None);
        assert!(ObjectMeta::default().owner_references().is_empty());
    }
}
