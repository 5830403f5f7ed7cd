//! Events stored once, served through two schemas, each with its strategy
//! (`pkg/registry/core/event/strategy.go`).
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
//!
//! Creating through events.k8s.io/v1 is stricter than through core/v1 (the new API's
//! `ValidateEventCreate`): `eventTime`, `reportingController`, `reportingInstance`, `action` and
//! `reason` are required, `type` must be `Normal` or `Warning`, the deprecated fields must be
//! unset, and a `series` needs `count >= 2` ([`validate_v1_create`], [`EventsV1Strategy`]).
//! Creating or updating through core/v1 checks only that the involved object's namespace
//! agrees with the event's (`legacyValidateEvent`, [`CoreEventStrategy`]): an old-style event
//! (no `eventTime`) about a cluster-scoped object lives in `default` (or no namespace), a
//! new-style one in `default` or `kube-system`.

use apimachinery::validation::FieldError;
use serde_json::{Map, Value};

use crate::api::status::{ApiError, Cause};
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::str_at;

/// The strategy of core/v1 `events` (see the module docs).
#[derive(Debug, Default)]
pub struct CoreEventStrategy;

impl Strategy for CoreEventStrategy {
    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_core_event(obj)
    }
}

/// The strategy of events.k8s.io/v1 `events` (see the module docs).
#[derive(Debug, Default)]
pub struct EventsV1Strategy;

impl Strategy for EventsV1Strategy {
    fn validate_create_request(&self, def: &ResourceDef, body: &Value) -> Result<(), ApiError> {
        let causes = validate_v1_create(body);
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(
            &def.kind,
            &def.group,
            body["metadata"]["name"].as_str().unwrap_or_default(),
            causes,
        ))
    }
}

/// The core/v1 event rule (`legacyValidateEvent`): the involved object's namespace agrees with
/// the event's (see the module docs).
fn validate_core_event(obj: &Value) -> Vec<FieldError> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let involved = str_at(&obj["involvedObject"], "namespace");
    let old_style = str_at(obj, "eventTime").is_empty();
    let ok = match (old_style, involved.is_empty()) {
        (true, true) => ns.is_empty() || ns == "default",
        (false, true) => ns == "default" || ns == "kube-system",
        (_, false) => ns == involved,
    };
    if ok {
        return vec![];
    }
    vec![FieldError::invalid(
        "involvedObject.namespace",
        involved,
        "does not match event.namespace",
    )]
}

fn required(field: &str) -> Cause {
    Cause::new("FieldValueRequired", field, "Required value")
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {value:?}: {detail}"),
    )
}

fn too_long(field: &str, max: usize) -> Cause {
    Cause::new(
        "FieldValueTooLong",
        field,
        format!("Too long: may not be more than {max} bytes"),
    )
}

/// The failures of an events.k8s.io/v1 Event on create (empty when it is valid).
pub fn validate_v1_create(ev: &Value) -> Vec<Cause> {
    let mut out = vec![];
    let s = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or_default();
    if s("eventTime").is_empty() {
        out.push(required("eventTime"));
    }
    let ty = s("type");
    if ty != "Normal" && ty != "Warning" {
        out.push(invalid("type", "", &format!("has invalid value: {ty}")));
    }
    for (field, max) in [
        ("reportingController", 253),
        ("reportingInstance", 128),
        ("action", 128),
        ("reason", 128),
    ] {
        let v = s(field);
        if v.is_empty() {
            out.push(required(field));
        } else if v.len() > max {
            out.push(too_long(field, max));
        }
    }
    if s("note").len() > 1024 {
        out.push(too_long("note", 1024));
    }
    for (v1, core) in [
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
    ] {
        if !s(v1).is_empty() {
            out.push(invalid(core, "", "needs to be unset"));
        }
    }
    if ev
        .get("deprecatedCount")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        != 0
    {
        out.push(invalid("count", "", "needs to be unset"));
    }
    let src = &ev["deprecatedSource"];
    if src
        .get("component")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
        || src
            .get("host")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty())
    {
        out.push(invalid("source", "", "needs to be unset"));
    }
    if let Some(series) = ev.get("series").filter(|v| v.is_object())
        && series["count"].as_i64().unwrap_or(0) < 2
    {
        out.push(invalid("series.count", "", "should be at least 2"));
    }
    out
}

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
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    #[test]
    fn v1_creates_need_the_new_fields() {
        let ok = json!({"eventTime": "2024-05-01T10:00:00.000000Z", "type": "Normal",
            "reportingController": "c", "reportingInstance": "i", "action": "A", "reason": "R"});
        assert!(validate_v1_create(&ok).is_empty());
        let mut bad = ok.clone();
        bad["type"] = json!("Odd");
        bad["deprecatedCount"] = json!(3);
        bad.as_object_mut().unwrap().remove("eventTime");
        let fields: Vec<String> = validate_v1_create(&bad)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["eventTime", "type", "count"]);
    }

    #[test]
    fn core_events_live_in_the_namespace_of_their_object() {
        let e = kind_errors(
            "",
            "events",
            json!({"metadata": {"namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "b"}}),
        );
        assert_eq!(
            e[0].full(),
            "involvedObject.namespace: Invalid value: \"b\": does not match event.namespace"
        );
    }

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
