//! `MyApp` (`example.com/v1`): the smallest useful operator, a Deployment with `image` and
//! `replicas`, kept as specified (drift corrected).

use serde::{Deserialize, Serialize};

use super::{Condition, CustomResourceExt, PrinterColumn, ScaleSubresource, custom_resource};

custom_resource! {
    /// An application: a Deployment of `spec.replicas` pods running `spec.image`, owned by the
    /// MyApp and put back in shape whenever it drifts.
    pub struct MyApp {
        spec: MyAppSpec,
        status: Option<MyAppStatus>,
    }
    group = "example.com",
    version = "v1",
    kind = "MyApp",
    plural = "myapps",
}

impl CustomResourceExt for MyApp {
    const SINGULAR: &'static str = "myapp";
    const SCALE: Option<ScaleSubresource> = Some(ScaleSubresource {
        spec_replicas_path: ".spec.replicas",
        status_replicas_path: ".status.availableReplicas",
    });
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[
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
pub struct MyAppSpec {
    /// Desired replicas.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub replicas: i32,
    /// Container image.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub image: String,
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MyAppStatus {
    /// Available replicas of the Deployment.
    #[serde(default)]
    pub available_replicas: i32,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))
    )]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_util::round_trip;

    #[test]
    fn round_trip_camel_case() {
        let m: MyApp = round_trip(
            r#"{"apiVersion":"example.com/v1","kind":"MyApp","metadata":{"name":"m"},"spec":{"replicas":2,"image":"nginx:1.27"},"status":{"availableReplicas":2}}"#,
        );
        assert_eq!(m.spec.replicas, 2);
    }
}
