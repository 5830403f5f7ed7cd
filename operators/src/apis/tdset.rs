//! `TDSet` (`schedule.rs/v1`): a Deployment whose replica count follows the time of day.
//!
//! `spec.schedulingConfig` is a list of windows `{startTime, endTime, replica}` in whole hours
//! (0–23) of `spec.timeZone` (IANA name, default UTC). The window that contains the current
//! hour decides the replica count; outside every window, `defaultReplica` applies. A window
//! whose `endTime` is not after its `startTime` wraps past midnight: `19 → 0` means 19:00 to
//! 24:00, `22 → 6` means 22:00 to 06:00 the next morning. Start is inclusive, end exclusive.

use serde::{Deserialize, Serialize};

use super::{AGE_COLUMN, Condition, CustomResourceExt, PrinterColumn, custom_resource};

custom_resource! {
    /// A time-of-day scaled Deployment.
    pub struct TDSet {
        spec: TDSetSpec,
        status: Option<TDSetStatus>,
    }
    group = "schedule.rs",
    version = "v1",
    kind = "TDSet",
    plural = "tdsets",
}

impl CustomResourceExt for TDSet {
    const SINGULAR: &'static str = "tdset";
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[
        PrinterColumn {
            name: "Replicas",
            type_: "integer",
            json_path: ".status.replicas",
        },
        AGE_COLUMN,
    ];
}

/// The container the Deployment runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TDSetContainer {
    /// Container image.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub image: String,
    /// Container port.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 65535)))]
    pub port: i32,
}

/// An optional Service in front of the Deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TDSetService {
    /// Service port.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 65535)))]
    pub port: i32,
}

/// One window of the day.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SchedulingWindow {
    /// First hour of the window (inclusive), 0–23.
    #[cfg_attr(feature = "schema", schemars(range(min = 0, max = 23)))]
    pub start_time: i32,
    /// Hour the window ends (exclusive), 0–23; not after `startTime` means it wraps past midnight.
    #[cfg_attr(feature = "schema", schemars(range(min = 0, max = 23)))]
    pub end_time: i32,
    /// Replicas while the window is active.
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub replica: i32,
}

impl SchedulingWindow {
    /// Whether `hour` (0–23) falls in this window (start inclusive, end exclusive, wrapping).
    pub fn contains(&self, hour: i32) -> bool {
        if self.end_time > self.start_time {
            hour >= self.start_time && hour < self.end_time
        } else {
            hour >= self.start_time || hour < self.end_time
        }
    }
}

/// What the user asks for.
///
/// The API server refuses two windows that start at the same hour (a CEL rule in the CRD,
/// `x-kubernetes-validations` on `spec`): only the first of them could ever apply, so the
/// second is almost certainly a typo. At most 24 windows, one per starting hour, which also
/// keeps the rule's estimated cost (24 × 24 comparisons) far below the server's limit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.schedulingConfig) || self.schedulingConfig.all(w, self.schedulingConfig.exists_one(v, v.startTime == w.startTime))",
        "messageExpression": "'two windows start at hour ' + string(self.schedulingConfig.filter(w, self.schedulingConfig.filter(v, v.startTime == w.startTime).size() > 1)[0].startTime) + '; only the first would ever apply'",
        "message": "two windows start at the same hour; only the first would ever apply",
        "fieldPath": ".schedulingConfig"
    }]))
)]
#[serde(rename_all = "camelCase")]
pub struct TDSetSpec {
    /// The container to run.
    pub container: TDSetContainer,
    /// A Service to create, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<TDSetService>,
    /// The windows of the day, at most 24, no two starting at the same hour.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = 24)))]
    pub scheduling_config: Vec<SchedulingWindow>,
    /// Replicas outside every window.
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub default_replica: i32,
    /// Longest time between two syncs, in minutes (1–1440).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 1440)))]
    pub interval_mint: Option<i32>,
    /// IANA time zone of the hours (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

impl TDSetSpec {
    /// The replica count for `hour` (0–23): the first window that contains it, else the default.
    pub fn replicas_at_hour(&self, hour: i32) -> i32 {
        self.scheduling_config
            .iter()
            .find(|w| w.contains(hour))
            .map(|w| w.replica)
            .unwrap_or(self.default_replica)
    }
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TDSetStatus {
    /// Replicas the Deployment was last set to.
    #[serde(default)]
    pub replicas: i32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Available`, `Progressing`, `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))
    )]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::apis::test_util::round_trip;

    /// A day schedule for tests: five windows that cover the day but for 0:00–1:00 (one of
    /// them, 19 → 0, wrapping), default 3 replicas, UTC. The controller's tests reuse it.
    pub(crate) fn hello_world() -> TDSetSpec {
        let w = |s, e, r| SchedulingWindow {
            start_time: s,
            end_time: e,
            replica: r,
        };
        TDSetSpec {
            container: TDSetContainer {
                image: "nginx".into(),
                port: 80,
            },
            service: None,
            scheduling_config: vec![
                w(9, 17, 5),
                w(17, 19, 3),
                w(19, 0, 2),
                w(1, 7, 2),
                w(7, 9, 3),
            ],
            default_replica: 3,
            interval_mint: None,
            time_zone: None,
        }
    }

    #[test]
    fn windows_cover_the_day_and_19_to_0_wraps() {
        let spec = hello_world();
        let by_hour: Vec<i32> = (0..24).map(|h| spec.replicas_at_hour(h)).collect();
        // 0 → default 3 (the gap 0–1); 1..7 → 2; 7..9 → 3; 9..17 → 5; 17..19 → 3; 19..24 → 2.
        let want = [
            3, 2, 2, 2, 2, 2, 2, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 3, 3, 2, 2, 2, 2, 2,
        ];
        assert_eq!(by_hour, want);
    }

    #[test]
    fn wrap_window_22_to_6() {
        let w = SchedulingWindow {
            start_time: 22,
            end_time: 6,
            replica: 1,
        };
        assert!(w.contains(22) && w.contains(23) && w.contains(0) && w.contains(5));
        assert!(!w.contains(6) && !w.contains(21));
    }

    #[test]
    fn round_trip_camel_case() {
        let t: TDSet = round_trip(
            r#"{"apiVersion":"schedule.rs/v1","kind":"TDSet","metadata":{"name":"hello"},"spec":{"container":{"image":"nginx","port":80},"service":{"port":8080},"schedulingConfig":[{"startTime":9,"endTime":17,"replica":5}],"defaultReplica":3,"intervalMint":5,"timeZone":"Europe/Paris"},"status":{"replicas":5,"observedGeneration":1}}"#,
        );
        assert_eq!(t.spec.interval_mint, Some(5));
    }
}
