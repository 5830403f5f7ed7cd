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
//! `k8s_openapi` and every custom resource has `M = ObjectMeta` (implemented below), and the
//! plain path (`Store<Pod>`, holding `Arc<Pod>`) is all a controller needs.
//!
//! A type made for a cache can carry a smaller metadata struct of its own: `ObjectMeta` is 360
//! bytes before it allocates anything, and a cache of 10,000 pods pays 3.6 MB for its inline
//! fields alone. `sample_operators::slim::MetaSummary` is such a struct (184 bytes, decoded
//! straight from the JSON); that module says what it saves and when it is worth it.
//!
//! ## Invariants
//!
//! * The accessor only reads; the one write, [`ObjectMetaAccess::trim_for_cache`], is what the
//!   informer's default transform does to every object before it is stored (drop
//!   `managedFields`, give back the spare room of decoded lists).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// What the cache reads from an object's metadata: apimachinery's `metav1.Object`, the
/// interface `meta.Accessor` returns. See the module documentation.
pub trait ObjectMetaAccess: Send + Sync {
    /// Whether decoding this metadata type builds `metadata.managedFields`. A slim type made
    /// for a cache that has no such field says `false`: its decoder skips the member as it
    /// parses, so the client does not cut it out of the text first
    /// ([`ClientSource`](super::ClientSource)).
    const DECODES_MANAGED_FIELDS: bool = true;
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
    /// `metadata.ownerReferences` (none when there are none), each read through an
    /// [`OwnerRef`].
    fn owner_references(&self) -> impl Iterator<Item = OwnerRef<'_>>;
    /// `metadata.deletionTimestamp`: set once the object is being deleted.
    fn deletion_timestamp(&self) -> Option<&Time>;
    /// `metadata.annotations[key]`. A metadata type made for a cache may keep only the
    /// annotations a controller reads; the default keeps none. The informer reads one,
    /// [`crate::keytrace::TRACEPARENT_ANNOTATION`], for the triggers of a queue.
    fn annotation(&self, key: &str) -> Option<&str> {
        let _ = key;
        None
    }
    /// Sets `metadata.resourceVersion` (what a server does on every write; the in-memory
    /// server of [`super::testing`] uses it).
    fn set_resource_version(&mut self, rv: String);
    /// The informer's default transform: forget `managedFields` (nothing in a controller reads
    /// them, and they are often the largest part of an object) and give back the spare
    /// capacity of the lists a decoder grew (see [`super::shrink_metadata_lists`]).
    fn trim_for_cache(&mut self);
}

/// The accessors of the five fields `ObjectMeta` and a slim summary hold alike (same names,
/// types that read as `Option<&str>`).
macro_rules! plain_field_accessors {
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
    };
}

impl ObjectMetaAccess for ObjectMeta {
    plain_field_accessors!();
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.labels.as_ref()
    }
    fn owner_references(&self) -> impl Iterator<Item = OwnerRef<'_>> {
        self.owner_references.iter().flatten().map(|r| OwnerRef {
            api_version: &r.api_version,
            kind: &r.kind,
            name: &r.name,
            uid: &r.uid,
            controller: r.controller == Some(true),
        })
    }
    fn deletion_timestamp(&self) -> Option<&Time> {
        self.deletion_timestamp.as_ref()
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
    fn set_resource_version(&mut self, rv: String) {
        self.resource_version = Some(rv);
    }
    fn trim_for_cache(&mut self) {
        self.managed_fields = None;
        super::shrink_metadata_lists(self);
    }
}

/// An owner reference as the cache reads it: apimachinery's `metav1.OwnerReference`, borrowed
/// from whichever shape holds it ([`ObjectMetaAccess::owner_references`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion` (`group/version`, or `version` for the core group).
    pub api_version: &'a str,
    /// The owner's kind.
    pub kind: &'a str,
    /// The owner's name (in the dependent's namespace).
    pub name: &'a str,
    /// The owner's UID.
    pub uid: &'a str,
    /// Whether this owner is the dependent's controller (`controller: true`).
    pub controller: bool,
}
