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
//! [`k8s_openapi::Metadata`], so the generic client ([`sample_client_go::client`]) and cache
//! ([`sample_client_go::cache`]) treat them exactly like `Pod` or `Deployment`. Serialising one always writes `apiVersion` and `kind`;
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
pub(crate) use sample_controller_runtime::custom_resource;
pub use sample_controller_runtime::resource::{
    AGE_COLUMN, CustomResourceExt, HasStatus, PrinterColumn, ScaleSubresource,
};
pub use tdset::{SchedulingWindow, TDSet, TDSetContainer, TDSetService, TDSetSpec, TDSetStatus};

/// The `apiVersion` of every kind this crate defines, in each version it serves. The owner
/// reference of every object an operator creates names one of them, and they are longer than a
/// [`SmallString`](sample_client_go::cache::SmallString) keeps inline, so the caches store them as
/// pointers to these constants ([`sample_client_go::cache::SmallString::known`]).
pub const API_VERSIONS: [&str; 6] = [
    <At as k8s_openapi::Resource>::API_VERSION,
    <at::v1alpha1::At as k8s_openapi::Resource>::API_VERSION,
    <Foo as k8s_openapi::Resource>::API_VERSION,
    <MyApp as k8s_openapi::Resource>::API_VERSION,
    <RedisCluster as k8s_openapi::Resource>::API_VERSION,
    <TDSet as k8s_openapi::Resource>::API_VERSION,
];

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
