//! # `MetaSummary`: the metadata a slim cached type keeps
//!
//! `ObjectMeta` is 360 bytes before it allocates anything: fifteen optional fields, most of
//! them empty in a cached object (`generateName`, `selfLink`, `deletionGracePeriodSeconds`,
//! `managedFields` once dropped, ...). A cache of 10,000 pods pays 3.6 MB for those inline
//! fields alone. [`MetaSummary`] has the ten fields a handler or sync of these operators reads
//! (184 bytes: its name, namespace and resourceVersion are [`SmallString`]s and its UID a
//! [`UidString`], so none of them takes an allocation, and the three fields most objects lack
//! are boxed apart), and it is decoded straight from the object's JSON (serde skips the rest),
//! so no `ObjectMeta` is ever built for it. The cache reads it through
//! [`ObjectMetaAccess`], client-go's `meta.Accessor`.
//!
//! When to use it: for a kind cached in the thousands that is only read (the At's pods). A type
//! with a `MetaSummary` is for caches only: what it does not hold cannot be written back, so
//! it is never sent to the server (an operator that updates a cached object with a PUT must
//! cache the whole type).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use sample_client_go::cache::{ObjectMetaAccess, OwnerRef, SmallString, UidString};
use sample_client_go::keytrace::TRACEPARENT_ANNOTATION;
use serde::{Deserialize, Serialize};

use crate::apis::API_VERSIONS;

/// The accessors of the five fields `ObjectMeta` and [`MetaSummary`] hold alike (same names,
/// types that read as `Option<&str>`); the rest differ in where the summary keeps them.
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

/// The metadata a cache of this crate's operators keeps of an object it only reads: name,
/// namespace, uid, resourceVersion, generation, ownerReferences and creationTimestamp as
/// fields with `ObjectMeta`'s names (name, namespace and resourceVersion as [`SmallString`]s,
/// the UID as a [`UidString`]; all read as a `&str`), and labels, deletionTimestamp and
/// finalizers behind accessors ([`labels`], [`deletion_timestamp`],
/// [`MetaSummary::finalizers`], and a setter each).
///
/// Why the last three are apart: most cached objects have none of them (an At's pod keeps no
/// label, see `controllers::caches::keep_labels`, and is rarely being deleted), and inline
/// they would cost 80 bytes an object; here they cost 8 bytes (an empty box) until one is set.
///
/// Deserialized from an object's `metadata` JSON (the other fields are skipped while parsing,
/// so `managedFields` and annotations cost nothing, but for the one annotation kept: the W3C
/// `tracing.k8s.io/traceparent`, rare, in the boxed fields); serialized in the same shape. It is 184
/// bytes where `ObjectMeta` is 360 (see the module documentation).
///
/// [`labels`]: ObjectMetaAccess::labels
/// [`deletion_timestamp`]: ObjectMetaAccess::deletion_timestamp
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "MetaWire", into = "MetaWire")]
pub struct MetaSummary {
    /// `metadata.name`.
    pub name: Option<SmallString>,
    /// `metadata.namespace`.
    pub namespace: Option<SmallString>,
    /// `metadata.uid` (inline: a UID is 36 characters).
    pub uid: Option<UidString>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<SmallString>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.ownerReferences`.
    pub owner_references: Option<Vec<OwnerRefSummary>>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// Labels, deletionTimestamp and finalizers, when any is set (see above).
    rare: Option<Box<RareMeta>>,
}

/// An owner reference as [`MetaSummary`] keeps it: `OwnerReference`'s fields with
/// [`SmallString`]s and a [`UidString`], the `apiVersion` of this crate's own kinds not copied
/// at all ([`crate::apis::API_VERSIONS`], [`SmallString::known`]). A pod of an At names its owner in
/// four strings, and none of them takes an allocation now.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRefSummary {
    /// `apiVersion`.
    #[serde(deserialize_with = "known_api_version")]
    pub api_version: SmallString,
    /// `kind`.
    pub kind: SmallString,
    /// `name`.
    pub name: SmallString,
    /// `uid` (inline: a UID is 36 characters).
    pub uid: UidString,
    /// `controller`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// `blockOwnerDeletion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Decodes an `apiVersion`, looked up among [`crate::apis::API_VERSIONS`] before anything is
/// copied.
fn known_api_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SmallString, D::Error> {
    struct Known;
    impl serde::de::Visitor<'_> for Known {
        type Value = SmallString;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an apiVersion string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SmallString, E> {
            Ok(SmallString::known(v, &API_VERSIONS))
        }
    }
    d.deserialize_str(Known)
}

impl OwnerRefSummary {
    /// The summary of a whole `OwnerReference`.
    pub fn from_reference(r: &OwnerReference) -> Self {
        OwnerRefSummary {
            api_version: SmallString::known(&r.api_version, &API_VERSIONS),
            kind: r.kind.as_str().into(),
            name: r.name.as_str().into(),
            uid: r.uid.as_str().into(),
            controller: r.controller,
            block_owner_deletion: r.block_owner_deletion,
        }
    }

    /// The whole `OwnerReference` again.
    pub fn to_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }

    /// The reference as the cache reads it.
    pub fn view(&self) -> OwnerRef<'_> {
        OwnerRef {
            api_version: &self.api_version,
            kind: &self.kind,
            name: &self.name,
            uid: &self.uid,
            controller: self.controller == Some(true),
        }
    }
}

/// The fields of [`MetaSummary`] most cached objects do not have.
#[derive(Clone, Debug, Default, PartialEq)]
struct RareMeta {
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    /// The one annotation kept: [`TRACEPARENT_ANNOTATION`], the W3C trace context of the write
    /// that made this version (read for the span link of the reconcile it causes).
    traceparent: Option<String>,
}

impl RareMeta {
    fn is_empty(&self) -> bool {
        self.labels.is_none()
            && self.deletion_timestamp.is_none()
            && self.finalizers.is_none()
            && self.traceparent.is_none()
    }
}

/// `metadata.annotations` as the summary reads it: only [`TRACEPARENT_ANNOTATION`] is kept;
/// every other value is skipped while parsing, never copied.
#[derive(Clone, Default)]
struct KeptAnnotations {
    traceparent: Option<String>,
}

impl<'de> Deserialize<'de> for KeptAnnotations {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = KeptAnnotations;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KeptAnnotations, A::Error> {
                let mut kept = KeptAnnotations::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == TRACEPARENT_ANNOTATION {
                        kept.traceparent = Some(map.next_value()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(kept)
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Serialize for KeptAnnotations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(usize::from(self.traceparent.is_some())))?;
        if let Some(t) = &self.traceparent {
            map.serialize_entry(TRACEPARENT_ANNOTATION, t)?;
        }
        map.end()
    }
}

/// [`MetaSummary`] as it is written in JSON: every field flat, as in `ObjectMeta`.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<UidString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource_version: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_references: Option<Vec<OwnerRefSummary>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    creation_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finalizers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<KeptAnnotations>,
}

impl From<MetaWire> for MetaSummary {
    fn from(w: MetaWire) -> Self {
        let rare = RareMeta {
            labels: w.labels,
            deletion_timestamp: w.deletion_timestamp,
            finalizers: w.finalizers,
            traceparent: w.annotations.and_then(|a| a.traceparent),
        };
        MetaSummary {
            name: w.name,
            namespace: w.namespace,
            uid: w.uid,
            resource_version: w.resource_version,
            generation: w.generation,
            owner_references: w.owner_references,
            creation_timestamp: w.creation_timestamp,
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
        }
    }
}

impl From<MetaSummary> for MetaWire {
    fn from(m: MetaSummary) -> Self {
        let rare = m.rare.map(|r| *r).unwrap_or_default();
        MetaWire {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            labels: rare.labels,
            owner_references: m.owner_references,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: rare.deletion_timestamp,
            finalizers: rare.finalizers,
            annotations: rare.traceparent.map(|t| KeptAnnotations {
                traceparent: Some(t),
            }),
        }
    }
}

impl MetaSummary {
    /// The summary of a whole `ObjectMeta` (the fields above, copied).
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        MetaWire {
            name: meta.name.as_deref().map(SmallString::from),
            namespace: meta.namespace.as_deref().map(SmallString::from),
            uid: meta.uid.as_deref().map(UidString::from),
            resource_version: meta.resource_version.as_deref().map(SmallString::from),
            generation: meta.generation,
            labels: meta.labels.clone(),
            owner_references: meta
                .owner_references
                .as_ref()
                .map(|refs| refs.iter().map(OwnerRefSummary::from_reference).collect()),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            finalizers: meta.finalizers.clone(),
            annotations: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(TRACEPARENT_ANNOTATION))
                .map(|t| KeptAnnotations {
                    traceparent: Some(t.clone()),
                }),
        }
        .into()
    }

    /// An `ObjectMeta` with exactly the summary's fields set.
    pub fn to_meta(&self) -> ObjectMeta {
        let rare = self.rare.as_deref();
        ObjectMeta {
            name: self.name.as_deref().map(str::to_owned),
            namespace: self.namespace.as_deref().map(str::to_owned),
            uid: self.uid.as_deref().map(str::to_owned),
            resource_version: self.resource_version.as_deref().map(str::to_owned),
            generation: self.generation,
            labels: rare.and_then(|r| r.labels.clone()),
            owner_references: self
                .owner_references
                .as_ref()
                .map(|refs| refs.iter().map(OwnerRefSummary::to_reference).collect()),
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_timestamp: rare.and_then(|r| r.deletion_timestamp.clone()),
            finalizers: rare.and_then(|r| r.finalizers.clone()),
            annotations: rare
                .and_then(|r| r.traceparent.clone())
                .map(|t| BTreeMap::from([(TRACEPARENT_ANNOTATION.to_owned(), t)])),
            ..ObjectMeta::default()
        }
    }

    /// `metadata.finalizers`.
    pub fn finalizers(&self) -> Option<&[String]> {
        self.rare.as_deref().and_then(|r| r.finalizers.as_deref())
    }

    /// Sets `metadata.labels`.
    pub fn set_labels(&mut self, labels: Option<BTreeMap<String, String>>) {
        self.edit_rare(|r| r.labels = labels);
    }

    /// Takes `metadata.labels` out (to edit them and [`MetaSummary::set_labels`] them back).
    pub fn take_labels(&mut self) -> Option<BTreeMap<String, String>> {
        let mut labels = None;
        self.edit_rare(|r| labels = r.labels.take());
        labels
    }

    /// Sets `metadata.deletionTimestamp`.
    pub fn set_deletion_timestamp(&mut self, at: Option<Time>) {
        self.edit_rare(|r| r.deletion_timestamp = at);
    }

    /// Sets `metadata.finalizers`.
    pub fn set_finalizers(&mut self, finalizers: Option<Vec<String>>) {
        self.edit_rare(|r| r.finalizers = finalizers);
    }

    /// Edits the rare fields, keeping their box only while it holds something.
    fn edit_rare(&mut self, edit: impl FnOnce(&mut RareMeta)) {
        let rare = self.rare.get_or_insert_default();
        edit(rare);
        if rare.is_empty() {
            self.rare = None;
        }
    }
}

impl ObjectMetaAccess for MetaSummary {
    /// Its decoder skips `managedFields` while parsing: nothing to cut from the text first.
    const DECODES_MANAGED_FIELDS: bool = false;
    plain_field_accessors!();
    /// Only [`TRACEPARENT_ANNOTATION`] is kept (see [`MetaSummary`]).
    fn annotation(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT_ANNOTATION)
            .then(|| self.rare.as_deref()?.traceparent.as_deref())
            .flatten()
    }
    fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.rare.as_deref().and_then(|r| r.labels.as_ref())
    }
    fn owner_references(&self) -> impl Iterator<Item = OwnerRef<'_>> {
        self.owner_references
            .iter()
            .flatten()
            .map(OwnerRefSummary::view)
    }
    fn deletion_timestamp(&self) -> Option<&Time> {
        self.rare
            .as_deref()
            .and_then(|r| r.deletion_timestamp.as_ref())
    }
    fn set_resource_version(&mut self, rv: String) {
        self.resource_version = Some(rv.into());
    }
    fn trim_for_cache(&mut self) {
        if let Some(v) = self.owner_references.as_mut() {
            v.shrink_to_fit();
        }
        if let Some(v) = self.rare.as_mut().and_then(|r| r.finalizers.as_mut()) {
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
    fn only_the_traceparent_annotation_is_kept() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let summary: MetaSummary = serde_json::from_value(serde_json::json!({
            "name": "a",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                TRACEPARENT_ANNOTATION: tp,
            },
        }))
        .expect("MetaSummary");
        assert_eq!(summary.annotation(TRACEPARENT_ANNOTATION), Some(tp));
        assert_eq!(
            summary.annotation("kubectl.kubernetes.io/last-applied-configuration"),
            None
        );
        let back = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            back["annotations"],
            serde_json::json!({TRACEPARENT_ANNOTATION: tp})
        );
        assert_eq!(summary, MetaSummary::from_meta(&summary.to_meta()));
        let plain: MetaSummary = serde_json::from_value(serde_json::json!({
            "name": "b", "annotations": {"x": "y"}
        }))
        .unwrap();
        assert_eq!(plain.annotation(TRACEPARENT_ANNOTATION), None);
        assert!(plain.rare.is_none(), "no box for what is not kept");
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
        assert_eq!(
            summary.owner_references().collect::<Vec<_>>(),
            whole.owner_references().collect::<Vec<_>>()
        );
        let owner = summary.owner_references().next().expect("one owner");
        assert_eq!(
            (
                owner.api_version,
                owner.kind,
                owner.name,
                owner.uid,
                owner.controller
            ),
            ("apps/v1", "ReplicaSet", "web", "rs-1", true)
        );
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
        let finalizers = summary.rare.as_ref().and_then(|r| r.finalizers.as_ref());
        let finalizers = finalizers.expect("kept");
        assert_eq!(finalizers.capacity(), finalizers.len());
    }

    #[test]
    fn labels_deletion_and_finalizers_are_boxed_only_while_one_is_set() {
        assert_eq!(std::mem::size_of::<MetaSummary>(), 184);
        let mut json = full();
        for field in ["labels", "deletionTimestamp", "finalizers"] {
            json.as_object_mut().expect("an object").remove(field);
        }
        let mut plain: MetaSummary = serde_json::from_value(json).expect("MetaSummary");
        assert!(plain.rare.is_none(), "nothing to box");
        assert_eq!(plain.finalizers(), None);

        plain.set_labels(Some(BTreeMap::from([("a".into(), "1".into())])));
        plain.set_finalizers(Some(vec!["example.com/keep".into()]));
        assert_eq!(plain.labels().map(|l| l["a"].as_str()), Some("1"));
        assert_eq!(
            plain.finalizers(),
            Some(&["example.com/keep".to_string()][..])
        );
        let labels = plain.take_labels();
        assert_eq!(labels.map(|l| l.len()), Some(1));
        assert_eq!(plain.labels(), None);
        assert!(plain.rare.is_some(), "the finalizers are still set");
        plain.set_finalizers(None);
        assert!(plain.rare.is_none(), "the box goes with the last field");

        // A summary with them round-trips through JSON like the ObjectMeta it came from.
        let mut deleting = plain.clone();
        let when: Time = serde_json::from_value(json!("2030-06-01T12:05:00Z")).expect("a time");
        deleting.set_deletion_timestamp(Some(when.clone()));
        assert_eq!(deleting.deletion_timestamp(), Some(&when));
        let again: MetaSummary =
            serde_json::from_value(serde_json::to_value(&deleting).expect("json")).expect("back");
        assert_eq!(again, deleting);
        assert_eq!(deleting.to_meta().deletion_timestamp, Some(when));
    }

    #[test]
    fn an_owner_of_this_crates_kinds_is_kept_without_copying_its_api_version() {
        let at_pod: MetaSummary = serde_json::from_value(json!({
            "name": "a-pod", "namespace": "default",
            "ownerReferences": [
                {"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At", "name": "a",
                 "uid": "0f5d3c9e-1b7a-4e4f-9a57-5c1f0c1e2d3f", "controller": true,
                 "blockOwnerDeletion": true},
                {"apiVersion": "example.com/v1beta1-something-long", "kind": "Other",
                 "name": "o", "uid": "u-2"}
            ]
        }))
        .expect("MetaSummary");
        let refs = at_pod.owner_references.as_deref().expect("kept");
        assert!(refs[0].api_version.is_inline(), "a known apiVersion");
        assert!(refs[0].kind.is_inline() && refs[0].name.is_inline());
        assert!(!refs[1].api_version.is_inline(), "any other is copied");
        // Back to OwnerReferences (and to JSON) exactly as they came.
        let meta = at_pod.to_meta();
        let back = meta.owner_references.as_deref().expect("kept");
        assert_eq!(back[0].api_version, "cnat.programming-kubernetes.info/v1");
        assert_eq!(back[0].block_owner_deletion, Some(true));
        assert_eq!(back[1].controller, None);
        assert_eq!(MetaSummary::from_meta(&meta), at_pod);
        let again: MetaSummary =
            serde_json::from_value(serde_json::to_value(&at_pod).expect("json")).expect("back");
        assert_eq!(again, at_pod);
    }

    #[test]
    fn missing_lists_read_as_empty() {
        let bare = MetaSummary::default();
        assert_eq!(bare.owner_references().count(), 0);
        assert_eq!(bare.labels(), None);
        assert_eq!(ObjectMeta::default().owner_references().count(), 0);
    }
}
