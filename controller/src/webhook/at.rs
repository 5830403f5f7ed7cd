//! `/validate-at` and `/mutate-at`: admission for `At` objects.
//!
//! Without these, a bad At is stored and only the controller notices (an `InvalidSpec`
//! condition and event after the fact). With them, `kubectl apply` is refused at the door.
//!
//! **Validation** (`/validate-at`, CREATE and UPDATE):
//!
//! * the spec must pass the controller's own check, [`controllers::at::validate_spec`]: a
//!   command that is not blank and a schedule that parses as RFC 3339. A failure is a
//!   `422 Invalid` naming the field, as `apierrors.NewInvalid` builds it in a kubebuilder
//!   validator: `At.cnat.programming-kubernetes.info "NAME" is invalid: spec.command: ...`,
//!   with the field in `details.causes`, so kubectl prints the field path.
//! * **the spec is frozen once the At runs**: an UPDATE that changes `spec` while the stored
//!   At is `RUNNING` or `DONE` is refused (`spec: Forbidden: ...`). A `PENDING` At may be
//!   rescheduled or given another command; a running pod cannot be changed under its feet, and
//!   a finished At describes what ran. To run again, delete and re-create it. Status writes
//!   (`/status`) are the controller's and not sent here.
//!
//! **Defaulting** (`/mutate-at`, CREATE and UPDATE), as JSON patch operations:
//!
//! * an empty or missing `spec.schedule` becomes the request time ("run now"); that is why the
//!   mutating webhook runs before the schema, which requires the field;
//! * a schedule given with an offset (`2019-04-12T12:12:00+02:00`) is stored in UTC
//!   (`2019-04-12T10:12:00Z`), the form the printer column and the controller's messages show.
//!
//! [`controllers::at::validate_spec`]: crate::controllers::at::validate_spec

use jiff::Timestamp;
use serde_json::{Value, json};

use super::Decision;
use crate::apis::at::{AtPhase, AtSpec};
use crate::controllers::at::validate_spec;

const GROUP_KIND: &str = "At.cnat.programming-kubernetes.info";

fn spec_of(obj: &Value) -> AtSpec {
    AtSpec {
        schedule: obj["spec"]["schedule"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        command: obj["spec"]["command"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// An `Invalid` Status with one cause, as `apierrors.NewInvalid` renders it.
fn invalid(name: &str, reason: &str, field: &str, message: &str) -> Decision {
    Decision::Deny(json!({
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": format!("{GROUP_KIND} {name:?} is invalid: {field}: {message}"),
        "details": {
            "name": name,
            "group": "cnat.programming-kubernetes.info",
            "kind": "At",
            "causes": [{"reason": reason, "field": field, "message": message}],
        }
    }))
}

/// `/validate-at`.
pub fn validate(request: &Value) -> Decision {
    let op = request["operation"].as_str().unwrap_or_default();
    if op != "CREATE" && op != "UPDATE" {
        return Decision::allow();
    }
    let obj = &request["object"];
    let name = obj["metadata"]["name"]
        .as_str()
        .or_else(|| request["name"].as_str())
        .unwrap_or_default();
    let spec = spec_of(obj);
    if let Err(e) = validate_spec(&spec) {
        // "spec.command: <detail>" or "spec.schedule: <detail>".
        let (field, detail) = e.split_once(": ").unwrap_or(("spec", e.as_str()));
        return invalid(
            name,
            "FieldValueInvalid",
            field,
            &format!("Invalid value: {detail}"),
        );
    }
    if op == "UPDATE" {
        let old = &request["oldObject"];
        let phase: AtPhase =
            serde_json::from_value(old["status"]["phase"].clone()).unwrap_or_default();
        if matches!(phase, AtPhase::Running | AtPhase::Done) && old["spec"] != obj["spec"] {
            return invalid(
                name,
                "FieldValueForbidden",
                "spec",
                &format!(
                    "Forbidden: the At is {}; its spec cannot change once it runs (delete and re-create it to run again)",
                    phase.as_str()
                ),
            );
        }
    }
    Decision::allow()
}

/// `/mutate-at`.
pub fn default(request: &Value) -> Decision {
    let op = request["operation"].as_str().unwrap_or_default();
    if op != "CREATE" && op != "UPDATE" {
        return Decision::allow();
    }
    let obj = &request["object"];
    let mut patch = vec![];
    if !obj["spec"].is_object() {
        patch.push(json!({"op": "add", "path": "/spec", "value": {}}));
    }
    match obj["spec"]["schedule"].as_str() {
        None | Some("") => {
            let now = Timestamp::now()
                .round(jiff::Unit::Second)
                .unwrap_or_else(|_| Timestamp::now());
            patch.push(json!({"op": "add", "path": "/spec/schedule", "value": now.to_string()}));
        }
        Some(s) => {
            if let Ok(t) = s.parse::<Timestamp>() {
                let utc = t.to_string();
                if utc != s {
                    patch.push(json!({"op": "replace", "path": "/spec/schedule", "value": utc}));
                }
            }
        }
    }
    Decision::Allow {
        patch,
        warnings: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: &str, spec: Value, old: Option<Value>) -> Value {
        json!({"uid": "u", "operation": op,
               "object": {"metadata": {"name": "a"}, "spec": spec},
               "oldObject": old.unwrap_or(Value::Null)})
    }

    #[test]
    fn a_blank_command_is_invalid_with_its_field() {
        let d = validate(&req(
            "CREATE",
            json!({"schedule": "2019-04-12T10:12:00Z", "command": "  "}),
            None,
        ));
        let Decision::Deny(s) = d else {
            panic!("allowed")
        };
        assert_eq!(s["code"], 422);
        assert_eq!(s["details"]["causes"][0]["field"], "spec.command");
        assert!(
            s["message"].as_str().unwrap().starts_with(
                "At.cnat.programming-kubernetes.info \"a\" is invalid: spec.command: Invalid value: \"  \" is empty"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_bad_schedule_is_invalid_with_its_field() {
        let d = validate(&req(
            "CREATE",
            json!({"schedule": "tomorrow", "command": "echo"}),
            None,
        ));
        let Decision::Deny(s) = d else {
            panic!("allowed")
        };
        assert_eq!(s["details"]["causes"][0]["field"], "spec.schedule");
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .contains("\"tomorrow\" is not an RFC 3339 time"),
            "{s}"
        );
        assert_eq!(
            validate(&req(
                "CREATE",
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo"}),
                None
            )),
            Decision::allow()
        );
    }

    #[test]
    fn the_spec_is_frozen_once_running() {
        let spec = json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo"});
        let changed = json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo 2"});
        for (phase, allowed) in [("PENDING", true), ("RUNNING", false), ("DONE", false)] {
            let old = json!({"metadata": {"name": "a"}, "spec": spec, "status": {"phase": phase}});
            let d = validate(&req("UPDATE", changed.clone(), Some(old.clone())));
            assert_eq!(d == Decision::allow(), allowed, "{phase}: {d:?}");
            // Unchanged specs (label edits, say) always pass.
            assert_eq!(
                validate(&req("UPDATE", spec.clone(), Some(old))),
                Decision::allow()
            );
        }
    }

    #[test]
    fn defaults_fill_the_schedule_and_normalise_it_to_utc() {
        let Decision::Allow { patch, .. } =
            default(&req("CREATE", json!({"command": "echo"}), None))
        else {
            panic!()
        };
        assert_eq!(patch[0]["path"], "/spec/schedule");
        assert!(
            patch[0]["value"]
                .as_str()
                .unwrap()
                .parse::<Timestamp>()
                .is_ok()
        );
        let Decision::Allow { patch, .. } = default(&req(
            "CREATE",
            json!({"schedule": "2019-04-12T12:12:00+02:00", "command": "e"}),
            None,
        )) else {
            panic!()
        };
        assert_eq!(
            patch,
            vec![
                json!({"op": "replace", "path": "/spec/schedule", "value": "2019-04-12T10:12:00Z"})
            ]
        );
        assert_eq!(
            default(&req(
                "CREATE",
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "e"}),
                None
            )),
            Decision::allow()
        );
    }
}
