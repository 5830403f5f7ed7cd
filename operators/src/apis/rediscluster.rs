//! `RedisCluster` (`cache.example.com/v1`): a StatefulSet of `size` Redis pods behind a
//! headless Service, cleaned up through the finalizer `cache.example.com/finalizer`.

use serde::{Deserialize, Serialize};

use super::{Condition, CustomResourceExt, PrinterColumn, ScaleSubresource, custom_resource};

/// The finalizer the RedisCluster controller puts on every RedisCluster.
pub const FINALIZER: &str = "cache.example.com/finalizer";

/// The image used when `spec.image` is not set.
pub const DEFAULT_IMAGE: &str = "redis:7-alpine";

custom_resource! {
    /// A Redis cluster: a StatefulSet of `spec.size` Redis pods behind a headless Service.
    pub struct RedisCluster {
        spec: RedisClusterSpec,
        status: Option<RedisClusterStatus>,
    }
    group = "cache.example.com",
    version = "v1",
    kind = "RedisCluster",
    plural = "redisclusters",
}

impl CustomResourceExt for RedisCluster {
    const SINGULAR: &'static str = "rediscluster";
    const SCALE: Option<ScaleSubresource> = Some(ScaleSubresource {
        spec_replicas_path: ".spec.size",
        status_replicas_path: ".status.readyReplicas",
    });
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[
        PrinterColumn {
            name: "Size",
            type_: "integer",
            json_path: ".spec.size",
        },
        PrinterColumn {
            name: "Ready",
            type_: "integer",
            json_path: ".status.readyReplicas",
        },
    ];
}

/// What the user asks for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterSpec {
    /// Number of Redis pods.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub size: i32,
    /// Container image (default `redis:7-alpine`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RedisClusterStatus {
    /// Names of the ready pods, in ordinal order.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Number of ready pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `Available`, `Degraded`.
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
        let r: RedisCluster = round_trip(
            r#"{"apiVersion":"cache.example.com/v1","kind":"RedisCluster","metadata":{"name":"r"},"spec":{"size":3},"status":{"nodes":["r-0","r-1"],"readyReplicas":2}}"#,
        );
        assert_eq!(r.status.unwrap().nodes, vec!["r-0", "r-1"]);
    }
}
