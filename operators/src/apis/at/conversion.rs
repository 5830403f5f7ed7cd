//! Lossless conversion of `At` objects between `v1alpha1` and `v1`, on plain JSON.
//!
//! This is the function behind the manager's `/convert` webhook (`crate::webhooks::convert`).
//! It works on `serde_json::Value` objects, not on the Rust types, for the same reason the API
//! server sends whole objects: everything the function does not know about (metadata, fields a
//! newer version added, fields of an object the schema would prune) must come back exactly as
//! it went in. Only the handful of paths that differ between the versions are touched.
//!
//! ## The mapping (`v1` is the hub)
//!
//! | `v1` | `v1alpha1` |
//! |---|---|
//! | `spec.schedule` | `spec.schedule` |
//! | `spec.run.command` | `spec.command` |
//! | `spec.run.image`, `.activeDeadlineSeconds`, `.ttlSecondsAfterFinished` (and any other key of `spec.run`) | kept in the annotation [`ANNOTATION`] |
//! | `status.result: DeadlineExceeded` | `status.result: Failed`, the original kept in [`ANNOTATION`] |
//! | everything else (metadata, status, unknown fields) | unchanged |
//!
//! `v1alpha1` cannot hold the new fields, so, as Kubernetes' own conversions do (the
//! `autoscaling/v1` HorizontalPodAutoscaler keeps `v2` metrics in the
//! `autoscaling.alpha.kubernetes.io/metrics` annotation), [`to_v1alpha1`] writes them as JSON
//! into one annotation, and [`to_v1`] reads them back and removes the annotation. So:
//!
//! * `v1 → v1alpha1 → v1` is the identity: a `v1` client's `image` survives a `kubectl edit`
//!   through `v1alpha1` (an edit that keeps the annotation, as kubectl does);
//! * `v1alpha1 → v1 → v1alpha1` is the identity: a `v1alpha1` object has no annotation to
//!   read, and `v1` writes none for a run that has only a command.
//!
//! Both are proven by the property tests below, over generated objects with unknown fields at
//! every level. Two details make them exact: an `annotations` map left empty by removing the
//! annotation is removed (the API server never stores an empty map: `ObjectMeta.annotations` is
//! `omitempty`), and a `spec.run` with no command is kept in the annotation even when it is
//! empty, so "no run" and "an empty run" stay apart.
//!
//! The annotation key is reserved: a `v1` object that carries it has it overwritten on the way
//! to `v1alpha1`. Conversion never fails on a well-formed `At`; it fails, with a
//! [`ConversionError`] naming the object and the problem, for an object of another group or kind,
//! an unknown version, a malformed annotation, a `spec` or `spec.run` that is not an object, or
//! a spec with both `command` and `run` (which the schema refuses).
//!
//! The two versions share one schema (the base CRD's `conversion: None` needs it: see
//! [`super::v1alpha1::AtSpec`]), so a `v1alpha1` object may already be in `v1`'s form
//! (`spec.run`) and a `v1` object in the book's (`spec.command`, the deprecated alias). Such an
//! object converts by its `apiVersion` alone: its spec already says everything in a form the
//! other version reads.

use serde_json::{Map, Value};

/// The group of both versions.
pub const GROUP: &str = "cnat.programming-kubernetes.info";
/// `cnat.programming-kubernetes.info/v1`, the hub and storage version.
pub const V1: &str = "cnat.programming-kubernetes.info/v1";
/// `cnat.programming-kubernetes.info/v1alpha1`, the book's version.
pub const V1ALPHA1: &str = "cnat.programming-kubernetes.info/v1alpha1";
/// Where a `v1alpha1` object keeps what only `v1` can express (JSON: `{"run": {...},
/// "result": "..."}`, each key present only when needed).
pub const ANNOTATION: &str = "cnat.programming-kubernetes.info/v1-fields";

/// Why an object could not be converted. The message names the object (`namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// Not an `At` of this group.
    #[error(
        "{object}: cannot convert {api_version:?} {kind:?}: only At objects of group {GROUP} are served"
    )]
    WrongKind {
        /// `namespace/name`.
        object: String,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// A version this module does not know (source or desired).
    #[error("{object}: unknown version {api_version:?}; expected {V1} or {V1ALPHA1}")]
    UnknownVersion {
        /// `namespace/name`.
        object: String,
        /// The version asked for or found.
        api_version: String,
    },
    /// The object is in the desired version already (controller-runtime refuses these too: the
    /// API server sends only objects that need converting).
    #[error("{object}: conversion is not allowed between the same version {api_version}")]
    SameVersion {
        /// `namespace/name`.
        object: String,
        /// The version.
        api_version: String,
    },
    /// The object's shape prevents a lossless conversion.
    #[error("{object}: {message}")]
    Malformed {
        /// `namespace/name`.
        object: String,
        /// What is wrong, with the field path.
        message: String,
    },
}

/// `namespace/name` of an object (or what of it is known), for messages.
pub fn object_ref(obj: &Value) -> String {
    let name = obj["metadata"]["name"]
        .as_str()
        .or_else(|| obj["metadata"]["generateName"].as_str())
        .unwrap_or("<unnamed>");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("At {ns}/{name}"),
        None => format!("At {name}"),
    }
}

/// Converts `obj` (an `At` in either version) to `desired` (`V1` or `V1ALPHA1`).
pub fn convert(obj: Value, desired: &str) -> Result<Value, ConversionError> {
    let object = object_ref(&obj);
    let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
    if kind != "At" || group != GROUP {
        return Err(ConversionError::WrongKind {
            object,
            api_version,
            kind,
        });
    }
    for v in [api_version.as_str(), desired] {
        if v != V1 && v != V1ALPHA1 {
            return Err(ConversionError::UnknownVersion {
                object,
                api_version: v.to_owned(),
            });
        }
    }
    if api_version == desired {
        return Err(ConversionError::SameVersion {
            object,
            api_version,
        });
    }
    if desired == V1 {
        to_v1(obj)
    } else {
        to_v1alpha1(obj)
    }
}

fn malformed(obj: &Value, message: impl Into<String>) -> ConversionError {
    ConversionError::Malformed {
        object: object_ref(obj),
        message: message.into(),
    }
}

/// `v1alpha1` → `v1` (controller-runtime's `Convertible.ConvertTo(hub)`): `spec.command` moves
/// to `spec.run.command`, and what [`ANNOTATION`] holds is restored and the annotation removed.
/// The `apiVersion` is not checked: [`convert`] does that.
pub fn to_v1(mut obj: Value) -> Result<Value, ConversionError> {
    let saved = take_annotation(&mut obj)?;
    let (saved_run, saved_result) = match saved {
        Some(mut m) => (m.remove("run"), m.remove("result")),
        None => (None, None),
    };
    if let Some(run) = &saved_run
        && !run.is_object()
    {
        return Err(malformed(
            &obj,
            format!("metadata.annotations[{ANNOTATION:?}]: \"run\" must be a JSON object"),
        ));
    }
    if let Some(spec) = obj.get("spec") {
        if !spec.is_object() {
            return Err(malformed(&obj, "spec must be an object"));
        }
        if spec.get("run").is_some() {
            if spec.get("command").is_some() {
                return Err(malformed(
                    &obj,
                    "spec.command and spec.run are both set; refusing to choose one",
                ));
            }
            // Already v1's form (the shared schema lets a v1alpha1 object hold it): only the
            // apiVersion changes.
            obj["apiVersion"] = Value::from(V1);
            return Ok(obj);
        }
    }
    let spec_missing = obj.get("spec").is_none();
    if spec_missing && saved_run.is_some() {
        obj["spec"] = Value::Object(Map::new());
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let command = spec.remove("command");
        let run = match (saved_run, command) {
            (Some(Value::Object(mut run)), command) => {
                if let Some(c) = command {
                    run.insert("command".into(), c);
                }
                Some(run)
            }
            (_, Some(c)) => Some(Map::from_iter([("command".to_owned(), c)])),
            (_, None) => None,
        };
        if let Some(run) = run {
            spec.insert("run".into(), Value::Object(run));
        }
    }
    if let Some(result) = saved_result
        && let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
        && status.get("result").and_then(Value::as_str) == Some("Failed")
    {
        status.insert("result".into(), result);
    }
    obj["apiVersion"] = Value::from(V1);
    Ok(obj)
}

/// `v1` → `v1alpha1` (controller-runtime's `Convertible.ConvertFrom(hub)`): `spec.run.command`
/// moves to `spec.command`; the rest of `spec.run` and a `DeadlineExceeded` result go into
/// [`ANNOTATION`] (the result reads `Failed` in `v1alpha1`).
pub fn to_v1alpha1(mut obj: Value) -> Result<Value, ConversionError> {
    let mut saved = Map::new();
    if let Some(spec) = obj.get("spec") {
        if !spec.is_object() {
            return Err(malformed(&obj, "spec must be an object"));
        }
        if spec.get("command").is_some() {
            if spec.get("run").is_some() {
                return Err(malformed(
                    &obj,
                    "spec.command and spec.run are both set; refusing to choose one",
                ));
            }
            // Already the book's form (v1's deprecated alias): only the apiVersion changes.
            obj["apiVersion"] = Value::from(V1ALPHA1);
            return Ok(obj);
        }
        if let Some(run) = spec.get("run")
            && !run.is_object()
        {
            return Err(malformed(&obj, "spec.run must be an object"));
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(Value::Object(mut run)) = spec.remove("run")
    {
        let command = run.remove("command");
        // Keep the rest; and keep even an empty run when there is no command, or the way
        // back could not tell "no run" from "an empty run".
        if !run.is_empty() || command.is_none() {
            saved.insert("run".into(), Value::Object(run));
        }
        if let Some(c) = command {
            spec.insert("command".into(), c);
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
        && status.get("result").and_then(Value::as_str) == Some("DeadlineExceeded")
        && let Some(r) = status.insert("result".into(), Value::from("Failed"))
    {
        saved.insert("result".into(), r);
    }
    // The key is reserved: whatever a v1 object carried under it is replaced (or dropped).
    take_annotation_unchecked(&mut obj);
    if !saved.is_empty() {
        let text = Value::Object(saved).to_string();
        if !obj["metadata"].is_object() {
            obj["metadata"] = Value::Object(Map::new());
        }
        let meta = &mut obj["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = Value::Object(Map::new());
        }
        meta["annotations"][ANNOTATION] = Value::from(text);
    }
    obj["apiVersion"] = Value::from(V1ALPHA1);
    Ok(obj)
}

/// Removes [`ANNOTATION`] (and an `annotations` map it leaves empty); returns its parsed value.
fn take_annotation(obj: &mut Value) -> Result<Option<Map<String, Value>>, ConversionError> {
    let Some(text) = take_annotation_unchecked(obj) else {
        return Ok(None);
    };
    let bad = |detail: String| {
        malformed(
            obj,
            format!("metadata.annotations[{ANNOTATION:?}]: {detail}"),
        )
    };
    let Value::String(text) = text else {
        return Err(bad("must be a string".into()));
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(other) => Err(bad(format!(
            "expected a JSON object such as {{\"run\":{{\"image\":\"busybox:1.36\"}}}}, got {other}"
        ))),
        Err(e) => Err(bad(format!("not JSON: {e}"))),
    }
}

fn take_annotation_unchecked(obj: &mut Value) -> Option<Value> {
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    let annotations = meta.get_mut("annotations")?.as_object_mut()?;
    let value = annotations.remove(ANNOTATION)?;
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn v1_full() -> Value {
        json!({
            "apiVersion": V1, "kind": "At",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "a"}},
            "spec": {"schedule": "2019-04-12T10:12:00Z",
                     "run": {"command": "sleep 60", "image": "alpine:3.20",
                             "activeDeadlineSeconds": 5, "ttlSecondsAfterFinished": 30}},
            "status": {"phase": "DONE", "result": "DeadlineExceeded", "podName": "a-pod"}
        })
    }

    #[test]
    fn v1_fields_travel_in_the_annotation_and_come_back() {
        let down = convert(v1_full(), V1ALPHA1).unwrap();
        assert_eq!(down["apiVersion"], V1ALPHA1);
        assert_eq!(
            down["spec"],
            json!({"schedule": "2019-04-12T10:12:00Z", "command": "sleep 60"})
        );
        assert_eq!(down["status"]["result"], "Failed");
        let saved: Value = serde_json::from_str(
            down["metadata"]["annotations"][ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            saved,
            json!({"run": {"image": "alpine:3.20", "activeDeadlineSeconds": 5,
                           "ttlSecondsAfterFinished": 30}, "result": "DeadlineExceeded"})
        );
        // The down-converted object is a valid v1alpha1 At.
        serde_json::from_value::<super::super::v1alpha1::At>(down.clone()).unwrap();
        let up = convert(down, V1).unwrap();
        assert_eq!(up, v1_full());
        assert!(up["metadata"].get("annotations").is_none());
    }

    #[test]
    fn the_books_example_gains_only_a_run() {
        let book = json!({"apiVersion": V1ALPHA1, "kind": "At", "metadata": {"name": "example-at"},
                          "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}});
        let up = convert(book.clone(), V1).unwrap();
        assert_eq!(
            up["spec"],
            json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo YAY"}})
        );
        assert_eq!(convert(up, V1ALPHA1).unwrap(), book);
    }

    #[test]
    fn a_v1alpha1_edit_keeps_the_saved_fields_and_its_own_change() {
        let mut down = convert(v1_full(), V1ALPHA1).unwrap();
        down["spec"]["command"] = json!("sleep 1");
        let up = convert(down, V1).unwrap();
        assert_eq!(up["spec"]["run"]["command"], "sleep 1");
        assert_eq!(up["spec"]["run"]["image"], "alpine:3.20");
    }

    #[test]
    fn errors_name_the_object_and_the_problem() {
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}});
        let e = convert(pod, V1).unwrap_err();
        assert!(matches!(e, ConversionError::WrongKind { .. }));
        assert!(
            e.to_string()
                .starts_with("At d/p: cannot convert \"v1\" \"Pod\""),
            "{e}"
        );

        let mut bad = convert(v1_full(), V1ALPHA1).unwrap();
        bad["metadata"]["annotations"][ANNOTATION] = json!("{not json");
        let e = convert(bad.clone(), V1).unwrap_err().to_string();
        assert!(
            e.starts_with("At ns/a: metadata.annotations[") && e.contains("not JSON"),
            "{e}"
        );
        bad["metadata"]["annotations"][ANNOTATION] = json!("[1]");
        let e = convert(bad.clone(), V1).unwrap_err().to_string();
        assert!(e.contains("expected a JSON object"), "{e}");
        bad["metadata"]["annotations"][ANNOTATION] = json!("{\"run\": 3}");
        let e = convert(bad, V1).unwrap_err().to_string();
        assert!(e.contains("\"run\" must be a JSON object"), "{e}");

        let e = convert(v1_full(), "cnat.programming-kubernetes.info/v2").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown version \"cnat.programming-kubernetes.info/v2\"")
        );
        let e = convert(v1_full(), V1).unwrap_err();
        assert!(matches!(e, ConversionError::SameVersion { .. }), "{e}");
        let mut spec_str = v1_full();
        spec_str["spec"] = json!("x");
        assert!(
            convert(spec_str, V1ALPHA1)
                .unwrap_err()
                .to_string()
                .contains("spec must be an object")
        );
        let mut run_str = v1_full();
        run_str["spec"]["run"] = json!(1);
        assert!(
            convert(run_str, V1ALPHA1)
                .unwrap_err()
                .to_string()
                .contains("spec.run must be an object")
        );
        let both = json!({"apiVersion": V1ALPHA1, "kind": "At",
                          "spec": {"command": "a", "run": {"command": "b"}}});
        let e = convert(both, V1).unwrap_err().to_string();
        assert!(e.contains("spec.command and spec.run are both set"), "{e}");
    }

    #[test]
    fn an_object_already_in_the_other_versions_form_changes_only_its_api_version() {
        // Under `conversion: None` a v1alpha1 client may have written v1's `run`, and a v1
        // client the book's `command`: the shared schema accepts both.
        let alpha_with_run = json!({"apiVersion": V1ALPHA1, "kind": "At", "metadata": {"name": "a"},
            "spec": {"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo", "image": "alpine:3"}}});
        let up = convert(alpha_with_run.clone(), V1).unwrap();
        assert_eq!(up["apiVersion"], V1);
        assert_eq!(up["spec"], alpha_with_run["spec"]);
        let v1_book = json!({"apiVersion": V1, "kind": "At", "metadata": {"name": "a"},
            "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}});
        let down = convert(v1_book.clone(), V1ALPHA1).unwrap();
        assert_eq!(down["apiVersion"], V1ALPHA1);
        assert_eq!(down["spec"], v1_book["spec"]);
        assert!(down["metadata"].get("annotations").is_none());
    }

    // ---- property tests -------------------------------------------------------------------

    /// Field names that are nobody's: unknown (future or pruned) fields at any level.
    fn unknown_key() -> impl Strategy<Value = String> {
        "x[a-z]{0,6}"
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[ -~]{0,12}".prop_map(Value::from),
        ]
    }

    fn any_json() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(unknown_key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn unknowns() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map(unknown_key(), any_json(), 0..3)
            .prop_map(|m| m.into_iter().collect())
    }

    fn opt<T: std::fmt::Debug + Clone>(
        s: impl Strategy<Value = T>,
    ) -> impl Strategy<Value = Option<T>> {
        prop::option::of(s)
    }

    fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    }

    fn metadata() -> impl Strategy<Value = Value> {
        (
            "[a-z][a-z0-9-]{0,10}",
            opt("[a-z]{1,8}"),
            opt(prop::collection::btree_map(
                "[a-z]{1,4}\\.example\\.com/[a-z]{1,4}",
                "[ -~]{0,8}",
                1..3,
            )),
            opt(prop::collection::btree_map(
                "[a-z]{1,6}",
                "[a-z0-9]{0,6}",
                1..3,
            )),
            opt("[0-9]{1,6}"),
            unknowns(),
        )
            .prop_map(|(name, ns, annotations, labels, rv, mut m)| {
                m.insert("name".into(), name.into());
                put(&mut m, "namespace", ns.map(Value::from));
                put(&mut m, "annotations", annotations.map(|a| json!(a)));
                put(&mut m, "labels", labels.map(|l| json!(l)));
                put(&mut m, "resourceVersion", rv.map(Value::from));
                Value::Object(m)
            })
    }

    fn status(results: &'static [&'static str]) -> impl Strategy<Value = Value> {
        (
            opt(prop::sample::select(vec!["PENDING", "RUNNING", "DONE"])),
            opt(prop::sample::select(results.to_vec())),
            opt(any::<i32>()),
            opt("[ -~]{0,16}"),
            opt(prop::collection::vec(any_json(), 0..2)),
            unknowns(),
        )
            .prop_map(|(phase, result, exit, message, conditions, mut m)| {
                put(&mut m, "phase", phase.map(Value::from));
                put(&mut m, "result", result.map(Value::from));
                put(&mut m, "exitCode", exit.map(Value::from));
                put(&mut m, "message", message.map(Value::from));
                put(&mut m, "conditions", conditions.map(Value::from));
                Value::Object(m)
            })
    }

    fn command() -> impl Strategy<Value = Value> {
        prop_oneof![4 => "[ -~]{0,16}".prop_map(Value::from), 1 => any_json()]
    }

    fn run() -> impl Strategy<Value = Value> {
        (
            opt(command()),
            opt("[a-z]{1,8}:[0-9.]{1,4}"),
            opt(any::<i64>()),
            opt(any::<i32>()),
            unknowns(),
        )
            .prop_map(|(command, image, deadline, ttl, mut m)| {
                put(&mut m, "command", command);
                put(&mut m, "image", image.map(Value::from));
                put(&mut m, "activeDeadlineSeconds", deadline.map(Value::from));
                put(&mut m, "ttlSecondsAfterFinished", ttl.map(Value::from));
                Value::Object(m)
            })
    }

    fn object(
        api_version: &'static str,
        spec: impl Strategy<Value = Option<Value>>,
        results: &'static [&'static str],
    ) -> impl Strategy<Value = Value> {
        (metadata(), spec, opt(status(results)), unknowns()).prop_map(
            move |(metadata, spec, status, mut m)| {
                m.insert("apiVersion".into(), api_version.into());
                m.insert("kind".into(), "At".into());
                m.insert("metadata".into(), metadata);
                put(&mut m, "spec", spec);
                put(&mut m, "status", status);
                Value::Object(m)
            },
        )
    }

    /// v1 results include the one v1alpha1 cannot hold, and a value neither version knows.
    const V1_RESULTS: &[&str] = &["Succeeded", "Failed", "DeadlineExceeded", "Someday"];
    const V1ALPHA1_RESULTS: &[&str] = &["Succeeded", "Failed", "Someday"];

    fn v1_object() -> impl Strategy<Value = Value> {
        let spec = opt((opt("[ -~]{0,20}"), opt(run()), unknowns()).prop_map(
            |(schedule, run, mut m)| {
                put(&mut m, "schedule", schedule.map(Value::from));
                put(&mut m, "run", run);
                Value::Object(m)
            },
        ));
        object(V1, spec, V1_RESULTS)
    }

    fn v1alpha1_object() -> impl Strategy<Value = Value> {
        let spec = opt((opt("[ -~]{0,20}"), opt(command()), unknowns()).prop_map(
            |(schedule, command, mut m)| {
                put(&mut m, "schedule", schedule.map(Value::from));
                put(&mut m, "command", command);
                Value::Object(m)
            },
        ));
        // Plain v1alpha1 objects, and v1alpha1 objects that came from v1 (with the annotation).
        prop_oneof![
            object(V1ALPHA1, spec, V1ALPHA1_RESULTS),
            v1_object().prop_map(|o| convert(o, V1ALPHA1).expect("v1 → v1alpha1")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn v1_to_v1alpha1_to_v1_is_the_identity(obj in v1_object()) {
            let down = convert(obj.clone(), V1ALPHA1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&down["apiVersion"], V1ALPHA1);
            prop_assert!(down["spec"].get("run").is_none());
            let up = convert(down, V1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(up, obj);
        }

        #[test]
        fn v1alpha1_to_v1_to_v1alpha1_is_the_identity(obj in v1alpha1_object()) {
            let up = convert(obj.clone(), V1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&up["apiVersion"], V1);
            prop_assert!(up["metadata"]["annotations"].get(ANNOTATION).is_none());
            prop_assert!(up["spec"].get("command").is_none());
            let down = convert(up, V1ALPHA1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(down, obj);
        }

        /// A valid typed v1 At converts to a valid typed v1alpha1 At and back to itself.
        #[test]
        fn typed_v1_objects_survive_v1alpha1(
            schedule in "[ -~]{0,20}",
            command in "[ -~]{1,20}",
            image in opt("[a-z]{1,8}:[0-9.]{1,4}"),
            deadline in opt(1i64..100_000),
            ttl in opt(0i32..100_000),
            result in opt(prop::sample::select(vec![
                super::super::v1::AtResult::Succeeded,
                super::super::v1::AtResult::Failed,
                super::super::v1::AtResult::DeadlineExceeded,
            ])),
        ) {
            use super::super::{v1, v1alpha1};
            let mut at = v1::At::default();
            at.metadata.name = Some("a".into());
            at.spec = v1::AtSpec::new(schedule, command);
            at.spec.run.image = image;
            at.spec.run.active_deadline_seconds = deadline;
            at.spec.run.ttl_seconds_after_finished = ttl;
            at.status = result.map(|r| v1::AtStatus { result: Some(r), ..Default::default() });
            let v = serde_json::to_value(&at).unwrap();
            let down = convert(v, V1ALPHA1).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let alpha: v1alpha1::At = serde_json::from_value(down.clone())
                .map_err(|e| TestCaseError::fail(format!("{e}: {down}")))?;
            prop_assert_eq!(alpha.spec.command.as_deref(), Some(at.spec.run.command.as_str()));
            let up = convert(serde_json::to_value(&alpha).unwrap(), V1)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: v1::At = serde_json::from_value(up).unwrap();
            prop_assert_eq!(back, at);
        }
    }
}
