//! `Foo` (`samplecontroller.k8s.io/v1alpha1`): sample-controller's own resource. A Foo owns a
//! Deployment named `spec.deploymentName` running nginx with `spec.replicas` replicas.

use serde::{Deserialize, Serialize};

use super::{CustomResourceExt, PrinterColumn, ScaleSubresource, custom_resource};

custom_resource! {
    /// sample-controller's Foo: a Deployment named `spec.deploymentName` running
    /// `spec.replicas` pods, created, owned and kept at that size by the Foo controller.
    pub struct Foo {
        spec: FooSpec,
        status: Option<FooStatus>,
    }
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    plural = "foos",
}

impl CustomResourceExt for Foo {
    const SINGULAR: &'static str = "foo";
    const SCALE: Option<ScaleSubresource> = Some(ScaleSubresource {
        spec_replicas_path: ".spec.replicas",
        status_replicas_path: ".status.availableReplicas",
    });
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[
        PrinterColumn {
            name: "Deployment",
            type_: "string",
            json_path: ".spec.deploymentName",
        },
        PrinterColumn {
            name: "Replicas",
            type_: "integer",
            json_path: ".spec.replicas",
        },
        PrinterColumn {
            name: "Available",
            type_: "integer",
            json_path: ".status.availableReplicas",
        },
    ];
}

/// What the user asks for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment the Foo owns.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub deployment_name: String,
    /// Desired replicas (sample-controller's `*int32`; absent means 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub replicas: Option<i32>,
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// Available replicas of the Deployment.
    #[serde(default)]
    pub available_replicas: i32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_util::round_trip;

    #[test]
    fn round_trip_camel_case() {
        let f: Foo = round_trip(
            r#"{"apiVersion":"samplecontroller.k8s.io/v1alpha1","kind":"Foo","metadata":{"name":"example-foo"},"spec":{"deploymentName":"example-foo","replicas":1},"status":{"availableReplicas":1}}"#,
        );
        assert_eq!(f.spec.deployment_name, "example-foo");
    }
}
