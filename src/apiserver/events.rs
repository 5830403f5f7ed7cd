//! Events stored once, served through two schemas.
//!
//! `core/v1` Events (what `kubectl describe` reads and client-go's `record` package writes) and
//! `events.k8s.io/v1` Events (what client-go's `tools/events` and kube-rs' recorder write) are
//! the same stored objects: the real server converts between them field by field
//! (`pkg/apis/events/v1/conversion.go`). Storage here is the core/v1 shape; [`to_events_v1`]
//! renames on the way out and [`from_events_v1`] on the way in:
//!
//! | events.k8s.io/v1 | core/v1 |
//! |---|---|
//! | `regarding` | `involvedObject` |
//! | `note` | `message` |
//! | `deprecatedSource` | `source` |
//! | `deprecatedFirstTimestamp` | `firstTimestamp` |
//! | `deprecatedLastTimestamp` | `lastTimestamp` |
//! | `deprecatedCount` | `count` |
//! | `reportingController` | `reportingComponent` |
//!
//! `eventTime`, `series`, `action`, `reason`, `related`, `reportingInstance` and `type` keep
//! their names.

use serde_json::{Map, Value};

const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: &Value, from_v1: bool, api_version: &str) -> Value {
    let Some(map) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES.iter().find_map(|(v1, core)| {
            if from_v1 && k == v1 {
                Some(*core)
            } else if !from_v1 && k == core {
                Some(*v1)
            } else {
                None
            }
        });
        out.insert(renamed.unwrap_or(k).to_owned(), v.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

/// A stored (core/v1) Event as events.k8s.io/v1.
pub fn to_events_v1(core: &Value) -> Value {
    rename(core, false, "events.k8s.io/v1")
}

/// An events.k8s.io/v1 Event as stored (core/v1).
pub fn from_events_v1(v1: &Value) -> Value {
    rename(v1, true, "v1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_two_views_round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "regarding": {"name": "x"}, "note": "hi", "reportingController": "c", "reason": "R"});
        let core = from_events_v1(&v1);
        assert_eq!(core["involvedObject"]["name"], "x");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(to_events_v1(&core), v1);
    }
}
