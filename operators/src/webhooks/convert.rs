//! `/convert`: the CRD conversion webhook (controller-runtime's `pkg/webhook/conversion`).
//!
//! A CRD with `conversion: {strategy: Webhook}` makes the API server call this endpoint
//! whenever an object must change version: a read or watch in `v1alpha1` of an object stored
//! in `v1`, a write in `v1alpha1` (converted to the storage version `v1` before it is stored),
//! and so on. The work is done by [`crate::apis::at::conversion`]; this file is the wire
//! protocol, as the API server's `webhook_converter.go` speaks it:
//!
//! ```text
//! POST /convert  {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
//!                 "request": {"uid": "705ab4f5-...", "desiredAPIVersion": "cnat.../v1alpha1",
//!                             "objects": [{"apiVersion": "cnat.../v1", "kind": "At", ...}, ...]}}
//! 200            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
//!                 "response": {"uid": "705ab4f5-...", "result": {"status": "Success"},
//!                              "convertedObjects": [{"apiVersion": "cnat.../v1alpha1", ...}, ...]}}
//! ```
//!
//! * `convertedObjects` are in the order of `objects`, each in `desiredAPIVersion`; the
//!   response's `uid` is the request's. The API server checks all three (and that only labels
//!   and annotations of `metadata` changed; the annotation this conversion uses is one).
//! * If any object cannot be converted, nothing is: `result: {status: Failure, message}`, the
//!   message naming the object (`At ns/name: ...`), and no `convertedObjects`; the API server
//!   then fails the request with `conversion webhook for cnat.../v1, Kind=At failed: <message>`.
//! * The review is answered in the version it came in (`apiextensions.k8s.io/v1`, or `v1beta1`
//!   from an old server); a body that is not a ConversionReview with a `request` gets HTTP 400,
//!   as controller-runtime answers it (there is no uid to answer to).

use serde_json::{Value, json};

use crate::apis::at::conversion;

/// The ConversionReview versions served.
const VERSIONS: &[&str] = &["apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"];

pub use sample_controller_runtime::webhook::ConvertAnswer;

/// Answers one ConversionReview body.
pub fn answer(content_type: Option<&str>, body: &[u8]) -> ConvertAnswer {
    let media = content_type.map(|c| c.split(';').next().unwrap_or_default().trim());
    if media != Some("application/json") {
        return ConvertAnswer::BadRequest(format!(
            "contentType={}, expected application/json",
            content_type.unwrap_or_default()
        ));
    }
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return ConvertAnswer::BadRequest(format!("couldn't decode the ConversionReview: {e}"));
        }
    };
    let version = match review["apiVersion"].as_str() {
        Some(v) if VERSIONS.contains(&v) => v.to_owned(),
        other => {
            return ConvertAnswer::BadRequest(format!(
                "unsupported ConversionReview apiVersion {other:?}; expected one of {VERSIONS:?}"
            ));
        }
    };
    if review["kind"] != "ConversionReview" {
        return ConvertAnswer::BadRequest(format!(
            "expected kind \"ConversionReview\", got {}",
            review["kind"]
        ));
    }
    let request = &review["request"];
    if !request.is_object() {
        return ConvertAnswer::BadRequest("conversion request is nil".into());
    }
    let uid = request["uid"].as_str().unwrap_or_default();
    let response = match convert_all(request) {
        Ok(objects) => json!({
            "uid": uid,
            "convertedObjects": objects,
            "result": {"status": "Success"},
        }),
        Err(message) => json!({
            "uid": uid,
            "result": {"status": "Failure", "message": message},
        }),
    };
    ConvertAnswer::Review(json!({
        "apiVersion": version,
        "kind": "ConversionReview",
        "response": response,
    }))
}

/// Converts every object of `request` to its `desiredAPIVersion`, or says why one cannot be.
fn convert_all(request: &Value) -> Result<Vec<Value>, String> {
    let Some(desired) = request["desiredAPIVersion"].as_str() else {
        return Err("request.desiredAPIVersion is missing".into());
    };
    let Some(objects) = request["objects"].as_array() else {
        return Err("request.objects is missing or not a list".into());
    };
    objects
        .iter()
        .enumerate()
        .map(|(i, obj)| {
            conversion::convert(obj.clone(), desired)
                .map_err(|e| format!("converting objects[{i}] to {desired}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    fn review(desired: &str, objects: Vec<Value>) -> Vec<u8> {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects}})
        .to_string()
        .into_bytes()
    }

    fn at(v: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": v, "kind": "At",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn objects_are_converted_in_order_with_the_same_uid() {
        let body = review(
            conversion::V1ALPHA1,
            vec![
                at(
                    conversion::V1,
                    "a",
                    json!({"schedule": "s", "run": {"command": "echo a"}}),
                ),
                at(
                    conversion::V1,
                    "b",
                    json!({"schedule": "s", "run": {"command": "echo b", "image": "alpine:3"}}),
                ),
            ],
        );
        let ConvertAnswer::Review(r) = answer(Some("application/json"), &body) else {
            panic!("not a review")
        };
        assert_eq!(r["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(r["kind"], "ConversionReview");
        assert_eq!(r["response"]["uid"], "u-1");
        assert_eq!(r["response"]["result"]["status"], "Success");
        let out = r["response"]["convertedObjects"].as_array().unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["metadata"]["name"], "a");
        assert_eq!(out[0]["spec"]["command"], "echo a");
        assert_eq!(out[1]["metadata"]["name"], "b");
        assert_eq!(out[1]["apiVersion"], conversion::V1ALPHA1);
        assert!(out[1]["metadata"]["annotations"][conversion::ANNOTATION].is_string());
    }

    #[test]
    fn one_bad_object_fails_the_review_naming_it() {
        let body = review(
            conversion::V1,
            vec![
                at(
                    conversion::V1ALPHA1,
                    "fine",
                    json!({"schedule": "s", "command": "x"}),
                ),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}),
            ],
        );
        let ConvertAnswer::Review(r) = answer(Some("application/json; charset=utf-8"), &body)
        else {
            panic!("not a review")
        };
        assert_eq!(r["response"]["uid"], "u-1");
        assert_eq!(r["response"]["result"]["status"], "Failure");
        assert!(r["response"].get("convertedObjects").is_none());
        let msg = r["response"]["result"]["message"].as_str().unwrap();
        assert!(
            msg.contains("objects[1]") && msg.contains("At default/p"),
            "{msg}"
        );
    }

    #[test]
    fn what_is_not_a_review_is_a_bad_request() {
        for (ct, body) in [
            (Some("text/plain"), b"{}".to_vec()),
            (Some("application/json"), b"{not json".to_vec()),
            (
                Some("application/json"),
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"ConversionReview","request":{}}"#
                    .to_vec(),
            ),
            (
                Some("application/json"),
                br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#.to_vec(),
            ),
        ] {
            let a = answer(ct, &body);
            assert_eq!(a.status(), StatusCode::BAD_REQUEST, "{a:?}");
        }
        let no_desired = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"x","objects":[]}}"#;
        let ConvertAnswer::Review(r) = answer(Some("application/json"), no_desired) else {
            panic!()
        };
        assert_eq!(r["response"]["result"]["status"], "Failure");
        assert_eq!(r["response"]["uid"], "x");
    }
}
