//! # The custom resource types
//!
//! Kubernetes is extended with **CustomResourceDefinitions** (CRDs). A CRD tells the API
//! server "there is now a resource `ats` in the group `cnat.programming-kubernetes.info`,
//! version `v1alpha1`, and this is its schema". From that moment the server stores, validates
//! and serves `At` objects exactly like built-in Pods: `kubectl get ats`, watches, resource
//! versions, RBAC, everything. The CRD is pure data; the behaviour comes from a *controller*
//! (this crate's [`crate::controllers`]) that watches the objects and acts on them.
//!
//! This module holds the Rust side of those resources: one struct per kind, plus the
//! metadata that ties it to the API server's URL space (`k8s_openapi::Resource`). The YAML
//! CRDs under `artifacts/crds/` are *generated from these types* by the `codegen/` crate, so the
//! schema the server enforces and the struct the controller deserialises can never drift apart
//! (`hack/verify-codegen.sh` fails CI when they do). [`crds`] embeds those files, so a test or
//! the demo can install the CRDs into an API server without reading anything from disk.
//!
//! ## From Rust type to CRD schema
//!
//! A CRD carries an OpenAPI v3 schema for its objects; the API server rejects objects that do
//! not match it (with an error naming the field) and *prunes* fields the schema does not
//! mention. With the `schema` feature (used only by `codegen/`) each type derives
//! `schemars::JsonSchema`, and codegen turns that into the schema:
//!
//! * doc comments become `description`s, which `kubectl explain at.spec` prints;
//! * `#[schemars(...)]` attributes become validations: `length(min = 1)` → `minLength: 1`,
//!   `range(min = 0, max = 23)` → `minimum`/`maximum`, `extend("format" = "date-time")` →
//!   `format: date-time` (the server then rejects `schedule: tomorrow`);
//! * a field without `Option` and without `#[serde(default)]` is `required`;
//! * `Option<T>` is `nullable: true`; a Rust enum is `type: string` plus an `enum` list (an
//!   optional enum is not nullable: the server checks `enum` even against null, so `None` is
//!   written by omitting the field, as serde does here);
//! * `conditions` lists are `x-kubernetes-list-type: map` keyed by `type`, as for built-in
//!   kinds, so server-side apply merges them per condition type.
//!
//! The result is a *structural* schema, the only kind `apiextensions.k8s.io/v1` accepts:
//! every node states its `type`, and there is no `$ref` or `oneOf` in place of a shape. The
//! root says only `metadata: {type: object}`, because the server validates `ObjectMeta` itself.
//!
//! ## Spec and status
//!
//! Every object follows the same split:
//!
//! * **`spec`** is the *desired state*, written by the user (`kubectl apply`). The controller
//!   only ever reads it.
//! * **`status`** is the *observed state*, written by the controller. Users read it to learn
//!   what happened (`kubectl get ats` shows the phase; `kubectl describe` the conditions).
//!
//! `metadata.generation` counts spec changes; a controller copies the generation it acted
//! on into `status.observedGeneration`, so a reader can tell whether the status is about
//! the current spec or an older one.
//!
//! ## The status subresource
//!
//! All five CRDs enable `subresources: {status: {}}`. The API server then splits writes:
//! a `PUT .../ats/NAME` (the main endpoint) ignores any change to `.status`, and a
//! `PUT .../ats/NAME/status` ignores any change to everything *except* `.status`. Users
//! therefore cannot forge a status by editing the object, controllers cannot accidentally
//! overwrite a spec the user changed a moment ago, and RBAC can grant the controller
//! `ats/status` without granting it the right to rewrite specs. It also makes
//! `metadata.generation` meaningful: only spec changes bump it.
//!
//! ## The kinds
//!
//! | kind | group/version | what its controller teaches |
//! |---|---|---|
//! | [`At`] | `cnat.programming-kubernetes.info/v1` (and `v1alpha1`, deprecated: see [`at`]) | one-shot job at a scheduled time |
//! | [`TDSet`] | `schedule.rs/v1` | time-driven requeue (scale by time of day) |
//! | [`RedisCluster`] | `cache.example.com/v1` | owned StatefulSet with a finalizer |
//! | [`MyApp`] | `example.com/v1` | plain owned Deployment, drift correction |
//! | [`Foo`] | `samplecontroller.k8s.io/v1alpha1` | sample-controller's own: adoption conflicts |
//!
//! Each type is declared with one macro, `custom_resource!` (its expansion for `At` is shown
//! in [`at`]), which implements [`k8s_openapi::Resource`], `ListableResource` and
//! [`k8s_openapi::Metadata`], so the generic client ([`crate::client`]) and cache
//! ([`crate::cache`]) treat them exactly like `Pod` or `Deployment`. Serialising one always writes `apiVersion` and `kind`;
//! deserialising accepts them missing (as in a list item) but rejects wrong ones.

pub mod at;
pub mod conditions;
#[cfg(feature = "crds")]
pub mod crds;
pub mod foo;
pub mod myapp;
pub mod rediscluster;
pub mod tdset;

pub use at::{At, AtPhase, AtResult, AtRun, AtSpec, AtStatus};
pub use conditions::{Condition, ConditionStatus};
pub use foo::{Foo, FooSpec, FooStatus};
pub use myapp::{MyApp, MyAppSpec, MyAppStatus};
pub use rediscluster::{RedisCluster, RedisClusterSpec, RedisClusterStatus};
pub use tdset::{SchedulingWindow, TDSet, TDSetContainer, TDSetService, TDSetSpec, TDSetStatus};

/// The `apiVersion` of every kind this crate defines, in each version it serves. The owner
/// reference of every object an operator creates names one of them, and they are longer than a
/// [`SmallString`](crate::cache::SmallString) keeps inline, so the caches store them as
/// pointers to these constants ([`crate::cache::SmallString::known`]).
pub const API_VERSIONS: [&str; 6] = [
    <At as k8s_openapi::Resource>::API_VERSION,
    <at::v1alpha1::At as k8s_openapi::Resource>::API_VERSION,
    <Foo as k8s_openapi::Resource>::API_VERSION,
    <MyApp as k8s_openapi::Resource>::API_VERSION,
    <RedisCluster as k8s_openapi::Resource>::API_VERSION,
    <TDSet as k8s_openapi::Resource>::API_VERSION,
];

/// Printer column of a CRD (`additionalPrinterColumns`): what `kubectl get` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: &'static str,
    /// OpenAPI type: `string`, `integer`, `date`, ...
    pub type_: &'static str,
    /// JSONPath into the object, e.g. `.status.phase`.
    pub json_path: &'static str,
}

/// The scale subresource of a CRD (`subresources.scale`): where `/scale` reads and writes the
/// replica count, so `kubectl scale` (and a HorizontalPodAutoscaler) can drive the kind like a
/// Deployment. Paths are JSONPaths of the kind's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleSubresource {
    /// The desired count, e.g. `.spec.replicas` (`Scale.spec.replicas`).
    pub spec_replicas_path: &'static str,
    /// The observed count, e.g. `.status.availableReplicas` (`Scale.status.replicas`).
    pub status_replicas_path: &'static str,
}

/// What codegen and the embedded API server need to know about a custom resource beyond
/// `k8s_openapi::Resource`: its plural/singular names, short names and printer columns.
pub trait CustomResourceExt: k8s_openapi::Resource {
    /// Lower-case plural, the URL segment (`ats`).
    const PLURAL: &'static str = Self::URL_PATH_SEGMENT;
    /// Lower-case singular (`at`).
    const SINGULAR: &'static str;
    /// `kubectl` short names.
    const SHORT_NAMES: &'static [&'static str] = &[];
    /// The columns `kubectl get` prints, in order (Age is listed explicitly where wanted).
    const PRINTER_COLUMNS: &'static [PrinterColumn];
    /// The scale subresource, for kinds with a replica count.
    const SCALE: Option<ScaleSubresource> = None;
    /// The CRD's name: `<plural>.<group>`.
    fn crd_name() -> String {
        format!("{}.{}", Self::PLURAL, Self::GROUP)
    }
}

/// The Age column every kind ends with.
pub(crate) const AGE_COLUMN: PrinterColumn = PrinterColumn {
    name: "Age",
    type_: "date",
    json_path: ".metadata.creationTimestamp",
};

/// A custom resource with a `status` (every kind declared with this module's
/// `custom_resource!` macro, e.g. [`At`]): what a
/// controller needs to write a new status through the `/status` subresource without knowing the
/// concrete kind (see `controllers::owned::write_status_if_changed`).
pub trait HasStatus: Clone {
    /// The kind's status type.
    type Status;
    /// The status, if the object has one yet.
    fn status(&self) -> Option<&Self::Status>;
    /// A copy of the object carrying `status`.
    fn with_status(&self, status: Self::Status) -> Self;
}

/// Declares a custom resource's Rust type and everything that ties it to the API server, so
/// that each kind states only what is its own: its doc comment, its spec and status types,
/// and its group, version, kind and plural. Every kind has the same shape,
/// `{ metadata, spec, status: Option<_> }`, and the macro writes, for `$ty`:
///
/// * the struct itself, deriving `Clone, Debug, Default, PartialEq` (and, with the `schema`
///   feature, `schemars::JsonSchema`, with `metadata` described as a plain object because the
///   API server validates `ObjectMeta` itself);
/// * `k8s_openapi::Resource` (the URL: `/apis/<group>/<version>/namespaces/<ns>/<plural>`),
///   `ListableResource` (`<Kind>List`) and `Metadata` (for the generic client and cache);
/// * `Serialize` and `Deserialize` the way k8s-openapi writes them for built-in kinds:
///   `apiVersion` and `kind` are written on output, and on input they may be missing (as in a
///   list item) but not wrong.
///
/// [`at`] shows the expansion for `At` in full.
macro_rules! custom_resource {
    (
        $(#[$attr:meta])*
        pub struct $ty:ident {
            spec: $spec:ty,
            status: Option<$status:ty> $(,)?
        }
        group = $group:literal,
        version = $version:literal,
        kind = $kind:literal,
        plural = $plural:literal $(,)?
    ) => {
        #[derive(Clone, Debug, Default, PartialEq)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        $(#[$attr])*
        pub struct $ty {
            /// Standard object metadata (name, namespace, labels, resourceVersion, ...).
            #[cfg_attr(
                feature = "schema",
                schemars(with = "serde_json::Map<String, serde_json::Value>")
            )]
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// The desired state, written by the user.
            pub spec: $spec,
            /// The observed state, written by the controller through the status subresource.
            pub status: Option<$status>,
        }

        impl k8s_openapi::Resource for $ty {
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const GROUP: &'static str = $group;
            const KIND: &'static str = $kind;
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::ListableResource for $ty {
            const LIST_KIND: &'static str = concat!($kind, "List");
        }

        impl k8s_openapi::Metadata for $ty {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                #[derive(serde::Serialize)]
                #[serde(rename_all = "camelCase")]
                struct Wire<'a> {
                    api_version: &'static str,
                    kind: &'static str,
                    metadata: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                    spec: &'a $spec,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    status: &'a Option<$status>,
                }
                Wire {
                    api_version: <Self as k8s_openapi::Resource>::API_VERSION,
                    kind: <Self as k8s_openapi::Resource>::KIND,
                    metadata: &self.metadata,
                    spec: &self.spec,
                    status: &self.status,
                }
                .serialize(serializer)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Wire {
                    #[serde(default)]
                    api_version: Option<String>,
                    #[serde(default)]
                    kind: Option<String>,
                    #[serde(default)]
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                    spec: $spec,
                    #[serde(default)]
                    status: Option<$status>,
                }
                let wire = Wire::deserialize(deserializer)?;
                let want_av = <Self as k8s_openapi::Resource>::API_VERSION;
                let want_kind = <Self as k8s_openapi::Resource>::KIND;
                if let Some(av) = &wire.api_version {
                    if av != want_av {
                        return Err(serde::de::Error::custom(format!(
                            "apiVersion: expected {want_av:?}, got {av:?}"
                        )));
                    }
                }
                if let Some(kind) = &wire.kind {
                    if kind != want_kind {
                        return Err(serde::de::Error::custom(format!(
                            "kind: expected {want_kind:?}, got {kind:?}"
                        )));
                    }
                }
                Ok($ty {
                    metadata: wire.metadata,
                    spec: wire.spec,
                    status: wire.status,
                })
            }
        }

        impl $crate::apis::HasStatus for $ty {
            type Status = $status;
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn with_status(&self, status: $status) -> Self {
                $ty {
                    status: Some(status),
                    ..self.clone()
                }
            }
        }
    };
}
pub(crate) use custom_resource;

#[cfg(test)]
pub(crate) mod test_util {
    use serde::{Serialize, de::DeserializeOwned};

    /// JSON round trip: value -> JSON -> value must be identical, and JSON -> value -> JSON too.
    pub fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
        json: &str,
    ) -> T {
        let value: T = serde_json::from_str(json).expect("fixture parses");
        let again = serde_json::to_string(&value).expect("serialises");
        let back: T = serde_json::from_str(&again).expect("re-parses");
        assert_eq!(value, back);
        let a: serde_json::Value = serde_json::from_str(json).unwrap();
        let b: serde_json::Value = serde_json::from_str(&again).unwrap();
        assert_eq!(a, b, "serialised form differs from the fixture");
        value
    }
}
