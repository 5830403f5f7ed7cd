//! `/validate-at` and `/mutate-at`: admission for `At` objects, in both versions.
//!
//! Without these, a bad At is stored and only the controller notices (an `InvalidSpec`
//! condition and event after the fact). With them, `kubectl apply` is refused at the door.
//!
//! **Versions.** The webhook configurations (`artifacts/deploy/webhook/webhooks.yaml`) match
//! `apiVersions: ["v1"]` with `matchPolicy: Equivalent`, so the API server converts a
//! `v1alpha1` request to `v1` (through the CRD's `/convert`) before calling, and converts a
//! mutation back: with those configurations every request arrives as `v1`, and refusals name
//! `v1`'s fields (`spec.run.command`). A configuration that matches `v1alpha1` itself (or
//! `["*"]`) still works: a `v1alpha1` object is read through
//! [`crate::apis::at::conversion::to_v1`] and checked as `v1`, and the field paths in the
//! answer are then the request's (`spec.command`).
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
//! * `v1`: a missing `spec.run.image` becomes [`DEFAULT_IMAGE`] on CREATE, and on UPDATE when
//!   the stored object had an image (an At stored without one, through `v1alpha1` or before
//!   the default existed, keeps its spec as it is, so a frozen spec stays unchanged; the
//!   controller runs such an At in the default image). `v1alpha1` has no image field;
//! * a schedule given with an offset (`2019-04-12T12:12:00+02:00`) is stored in UTC
//!   (`2019-04-12T10:12:00Z`), the form the printer column and the controller's messages show.
//!
//! [`controllers::at::validate_spec`]: crate::controllers::at::validate_spec

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::apis::at::conversion::{self, V1ALPHA1};
use crate::apis::at::{AtPhase, AtSpec, DEFAULT_IMAGE};
use crate::controllers::at::validate_spec;
use sample_controller_runtime::webhook::Decision;

const GROUP_KIND: &str = "At.cnat.programming-kubernetes.info";

/// The object's spec as `v1` (a `v1alpha1` object is converted first), read leniently: a
/// missing or mistyped field reads as empty and fails [`validate_spec`] with its name.
fn spec_of(obj: &Value) -> Result<AtSpec, String> {
    let v1 = if is_v1alpha1(obj) {
        conversion::to_v1(obj.clone()).map_err(|e| e.to_string())?
    } else {
        obj.clone()
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    // The book's `spec.command` is `v1`'s deprecated alias of `spec.run.command`.
    Ok(match v1["spec"]["command"].as_str() {
        Some(command) if v1["spec"]["run"].is_null() => {
            AtSpec::book(text(&v1["spec"]["schedule"]), command)
        }
        _ => AtSpec::new(
            text(&v1["spec"]["schedule"]),
            text(&v1["spec"]["run"]["command"]),
        ),
    })
}

fn is_v1alpha1(obj: &Value) -> bool {
    obj["apiVersion"].as_str() == Some(V1ALPHA1)
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
    let spec = match spec_of(obj) {
        Ok(spec) => spec,
        Err(e) => {
            return invalid(
                name,
                "FieldValueInvalid",
                "metadata.annotations",
                &format!("Invalid value: {e}"),
            );
        }
    };
    if let Err(e) = validate_spec(&spec) {
        // "spec.run.command: <detail>" or "spec.schedule: <detail>", named as the request's
        // version names the field.
        let (field, detail) = e.split_once(": ").unwrap_or(("spec", e.as_str()));
        let field = if is_v1alpha1(obj) && field == "spec.run.command" {
            "spec.command"
        } else {
            field
        };
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
    if !is_v1alpha1(obj) && obj["spec"]["run"].is_object() && obj["spec"]["run"]["image"].is_null()
    {
        let old_had_image = !request["oldObject"]["spec"]["run"]["image"].is_null();
        if op == "CREATE" || old_had_image {
            patch.push(json!({"op": "add", "path": "/spec/run/image", "value": DEFAULT_IMAGE}));
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

    /// A `v1alpha1` request (the book's shape, `spec.command`).
    fn req(op: &str, spec: Value, old: Option<Value>) -> Value {
        json!({"uid": "u", "operation": op,
               "object": {"apiVersion": V1ALPHA1, "kind": "At", "metadata": {"name": "a"}, "spec": spec},
               "oldObject": old.unwrap_or(Value::Null)})
    }

    /// A `v1` request.
    fn req_v1(op: &str, spec: Value, old: Option<Value>) -> Value {
        json!({"uid": "u", "operation": op,
               "object": {"apiVersion": conversion::V1, "kind": "At", "metadata": {"name": "a"}, "spec": spec},
               "oldObject": old.unwrap_or(Value::Null)})
    }

    #[test]
    fn v1_requests_are_validated_with_v1_field_paths() {
        let d = validate(&req_v1(
            "CREATE",
            json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": ""}}),
            None,
        ));
        let Decision::Deny(s) = d else {
            panic!("allowed")
        };
        assert_eq!(s["details"]["causes"][0]["field"], "spec.run.command");
        let ok = json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo", "image": "alpine:3"}});
        assert_eq!(
            validate(&req_v1("CREATE", ok.clone(), None)),
            Decision::allow()
        );
        // Frozen once running, in v1 too: the image cannot change under a running pod.
        let old = json!({"apiVersion": conversion::V1, "metadata": {"name": "a"}, "spec": ok, "status": {"phase": "RUNNING"}});
        let changed = json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo", "image": "alpine:4"}});
        assert!(matches!(
            validate(&req_v1("UPDATE", changed, Some(old))),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn a_malformed_conversion_annotation_is_refused_with_its_field() {
        let mut r = req(
            "CREATE",
            json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo"}),
            None,
        );
        r["object"]["metadata"]["annotations"] = json!({conversion::ANNOTATION: "{oops"});
        let Decision::Deny(s) = validate(&r) else {
            panic!("allowed")
        };
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.annotations");
    }

    #[test]
    fn v1_defaults_fill_the_image() {
        let spec = json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "e"}});
        let Decision::Allow { patch, .. } = default(&req_v1("CREATE", spec.clone(), None)) else {
            panic!()
        };
        assert_eq!(
            patch,
            vec![json!({"op": "add", "path": "/spec/run/image", "value": "busybox:1.36"})]
        );
        // An explicit image is kept; v1alpha1 has no image to fill.
        let given = json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "e", "image": "alpine:3"}});
        assert_eq!(default(&req_v1("CREATE", given, None)), Decision::allow());
        assert_eq!(
            default(&req(
                "CREATE",
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "e"}),
                None
            )),
            Decision::allow()
        );
        // An update of an At stored without an image leaves its spec alone.
        let old = json!({"spec": spec});
        assert_eq!(
            default(&req_v1("UPDATE", spec, Some(old))),
            Decision::allow()
        );
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
