//! # Custom resources in Rust: one macro per kind, and what the machinery needs to know
//!
//! A custom resource is a Rust struct `{ metadata, spec, status }` that the generic client and
//! cache treat like a `Pod`: it implements `k8s_openapi::Resource` (group, version, kind,
//! plural: the URL), `ListableResource` and `Metadata`, and serializes with `apiVersion` and
//! `kind`. [`custom_resource!`](crate::custom_resource) writes all of that from a struct and
//! four names, so a kind states only what is its own (kube-rs derives the same with
//! `#[derive(CustomResource)]`; client-go's users generate it with `deepcopy-gen` and
//! `client-gen`).
//!
//! A crate that uses the macro depends on `serde` and `k8s-openapi` itself (the expansion names
//! them), and may derive `schemars::JsonSchema` for its kinds by enabling a `schema` feature of
//! its own: the expansion carries `#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]`,
//! evaluated in the calling crate (this is how `sample-operators` generates its CRDs' schemas).
//!
//! [`CustomResourceExt`] adds what a CRD says beyond the URL (singular, short names, printer
//! columns, the scale subresource); [`HasStatus`] lets generic code write a new status
//! ([`crate::ownership::write_status_if_changed`]).

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
pub const AGE_COLUMN: PrinterColumn = PrinterColumn {
    name: "Age",
    type_: "date",
    json_path: ".metadata.creationTimestamp",
};

/// A custom resource with a `status` (every kind declared with this module's
/// `custom_resource!` macro, e.g. `At`): what a
/// controller needs to write a new status through the `/status` subresource without knowing the
/// concrete kind (see [`crate::ownership::write_status_if_changed`]).
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
/// The `sample-operators` crate's `apis::at` module shows the expansion for `At` in full; the
/// `configmap-controller` example declares its `Note` with it.
#[macro_export]
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

        impl $crate::resource::HasStatus for $ty {
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
