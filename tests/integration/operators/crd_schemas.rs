//! The generated CRDs against the examples and the Rust types.
//!
//! The API server validates every custom object against its CRD's `openAPIV3Schema` (OpenAPI
//! 3.0 with Kubernetes extensions): it prunes the fields the schema does not describe, then
//! checks what is left. These tests judge the examples and the controllers' statuses with the
//! embedded API server's own schema code ([`embedded_apiserver::apiextensions`]): the same
//! `prune` and `validate` it runs on every custom-resource write, which report kube-openapi's
//! field errors (`spec.command: Required value`). What they establish:
//!
//! * every example under `artifacts/examples/` deserialises into its Rust type *and* passes
//!   its schema, and carries no field the server would prune;
//! * every status the controllers can write (built from the Rust types) passes too, so the
//!   schema never rejects the controller's own updates;
//! * every file under `artifacts/examples/invalid/` is rejected, at the field it is about;
//! * every schema is structural, and every CRD has the names, printer columns, status
//!   subresource and single served+storage version the Rust side declares.

use std::path::{Path, PathBuf};

use embedded_apiserver::apiextensions as schema;
use jiff::Timestamp;
use sample_operators::apis::at::conversion::V1ALPHA1;
use sample_operators::apis::at::v1alpha1::At as AtV1alpha1;
use sample_operators::apis::{
    At, AtPhase, AtResult, AtStatus, Condition, ConditionStatus, CustomResourceExt, Foo, FooStatus,
    MyApp, MyAppStatus, RedisCluster, RedisClusterStatus, TDSet, TDSetStatus, crds,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The custom object of a YAML file. An example may create its namespace first (the TDSet's,
/// `temp`): documents of kind `Namespace` are skipped, and exactly one document must remain.
fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|d: &Value| !d.is_null() && d["kind"] != "Namespace")
        .collect();
    let [doc] = <[Value; 1]>::try_from(docs)
        .unwrap_or_else(|d| panic!("{}: {} objects besides namespaces", path.display(), d.len()));
    doc
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The `openAPIV3Schema` of the CRD serving `apiVersion`/`kind`.
fn schema_of(api_version: &str, kind: &str) -> Value {
    for crd in crds::all_values().unwrap() {
        let group = crd["spec"]["group"].as_str().unwrap();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let av = format!("{group}/{}", version["name"].as_str().unwrap());
            if av == api_version && crd["spec"]["names"]["kind"] == kind {
                return version["schema"]["openAPIV3Schema"].clone();
            }
        }
    }
    panic!("no CRD serves {api_version} {kind}");
}

fn schema_of_kind<K: CustomResourceExt>() -> Value {
    schema_of(K::API_VERSION, K::KIND)
}

/// Schema errors as the API server prints them (`"<field path>: <message>"`); empty when valid.
/// What the API server reports for `instance` on create: the schema's errors, then (when the
/// schema passes) the `x-kubernetes-validations` rules' (the At's spec asks for `run` or the
/// book's `command` with two rules).
fn schema_errors(openapi: &Value, instance: &Value) -> Vec<String> {
    schema::validate(openapi, instance).unwrap_or_else(|causes| panic!("rules compile: {causes:?}"))
}

/// What the API server would prune from `instance`: `instance` and its pruned copy, when they
/// differ.
fn pruned(schema: &Value, instance: &Value) -> Option<(Value, Value)> {
    let mut kept = instance.clone();
    schema::prune(schema, &mut kept);
    (kept != *instance).then(|| (instance.clone(), kept))
}

/// Deserialises into `K`, serialises back, and checks both the file and the round-tripped
/// object against `K`'s schema.
fn check_example<K: CustomResourceExt + Serialize + DeserializeOwned>(path: &Path, doc: &Value) {
    let obj: K = serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "{} does not deserialise into {}: {e}",
            path.display(),
            K::KIND
        )
    });
    let schema = schema_of_kind::<K>();
    let errors = schema_errors(&schema, doc);
    assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    let again = serde_json::to_value(&obj).unwrap();
    let errors = schema_errors(&schema, &again);
    assert!(
        errors.is_empty(),
        "{} after a round trip: {errors:#?}",
        path.display()
    );
    if let Some((before, after)) = pruned(&schema, doc) {
        panic!(
            "{}: the API server would prune fields: {before:#} became {after:#}",
            path.display()
        );
    }
}

#[test]
fn every_example_deserialises_and_validates_against_its_crd() {
    let files = yaml_files(&repo().join("artifacts/examples"));
    let mut kinds = Vec::new();
    for path in &files {
        let doc = read_yaml(path);
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "At" if doc["apiVersion"] == V1ALPHA1 => check_example::<AtV1alpha1>(path, &doc),
            "At" => check_example::<At>(path, &doc),
            "TDSet" => check_example::<TDSet>(path, &doc),
            "RedisCluster" => check_example::<RedisCluster>(path, &doc),
            "MyApp" => check_example::<MyApp>(path, &doc),
            "Foo" => check_example::<Foo>(path, &doc),
            other => panic!("{}: unexpected kind {other:?}", path.display()),
        }
        kinds.push(kind);
    }
    kinds.sort();
    assert_eq!(
        kinds,
        ["At", "At", "At", "Foo", "MyApp", "RedisCluster", "TDSet"]
    );
}

#[test]
fn the_books_example_is_unchanged() {
    let at: AtV1alpha1 = serde_json::from_value(read_yaml(
        &repo().join("artifacts/examples/cnat-example.yaml"),
    ))
    .unwrap();
    assert_eq!(at.metadata.name.as_deref(), Some("example-at"));
    assert_eq!(at.spec.schedule, "2019-04-12T10:12:00Z");
    assert_eq!(at.spec.command.as_deref(), Some("echo YAY"));
    assert_eq!(at.spec.run, None);
    assert!(at.status.is_none());
}

/// The TDSet article's example (seed 001), field for field.
#[test]
fn tdset_hello_world_has_the_five_windows() {
    let t: TDSet = serde_json::from_value(read_yaml(
        &repo().join("artifacts/examples/tdset-hello-world.yaml"),
    ))
    .unwrap();
    assert_eq!(t.metadata.name.as_deref(), Some("tdset-hello-world"));
    assert_eq!(t.metadata.namespace.as_deref(), Some("temp"));
    let windows: Vec<(i32, i32, i32)> = t
        .spec
        .scheduling_config
        .iter()
        .map(|w| (w.start_time, w.end_time, w.replica))
        .collect();
    assert_eq!(
        windows,
        [(9, 17, 5), (17, 19, 3), (19, 0, 2), (1, 7, 2), (7, 9, 3)]
    );
    assert_eq!(t.spec.default_replica, 3);
    assert_eq!(
        (t.spec.container.image.as_str(), t.spec.container.port),
        ("crccheck/hello-world", 8000)
    );
    assert_eq!((t.spec.service, t.spec.time_zone), (None, None));
}

/// Each invalid example and the field its rejection must point at. Only `spec` problems: on
/// create the API server drops `status` (the status subresource), so a bad status in a file
/// would be silently accepted; status values are checked in
/// `status_and_condition_validations_reject_bad_values`.
const INVALID: &[(&str, &str)] = &[
    ("at-without-command.yaml", "spec.run"),
    ("at-empty-command.yaml", "spec.command"),
    ("at-v1-empty-command.yaml", "spec.run.command"),
    ("at-v1-deadline-0.yaml", "spec.run.activeDeadlineSeconds"),
    ("at-schedule-not-a-date-time.yaml", "spec.schedule"),
    ("tdset-hour-24.yaml", "spec.schedulingConfig[0].endTime"),
    ("tdset-default-replica-0.yaml", "spec.defaultReplica"),
    ("myapp-negative-replicas.yaml", "spec.replicas"),
    ("foo-negative-replicas.yaml", "spec.replicas"),
    ("rediscluster-size-0.yaml", "spec.size"),
];

#[test]
fn invalid_examples_are_rejected_at_the_right_field() {
    let dir = repo().join("artifacts/examples/invalid");
    let files = yaml_files(&dir);
    let mut names: Vec<&str> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect();
    names.sort();
    let mut listed: Vec<&str> = INVALID.iter().map(|(f, _)| *f).collect();
    listed.sort();
    assert_eq!(
        names, listed,
        "every invalid example needs an expectation here"
    );

    for (file, field) in INVALID {
        let doc = read_yaml(&dir.join(file));
        let schema = schema_of(
            doc["apiVersion"].as_str().unwrap(),
            doc["kind"].as_str().unwrap(),
        );
        let errors = schema_errors(&schema, &doc);
        assert!(!errors.is_empty(), "{file} was accepted");
        assert!(
            errors.iter().all(|e| e.starts_with(&format!("{field}:"))),
            "{file}: expected errors at {field}, got {errors:#?}"
        );
    }
    // The missing command is reported as a missing required field, as kubectl would print it:
    // the rule's reason is FieldValueRequired, at `spec.run`.
    let doc = read_yaml(&dir.join("at-without-command.yaml"));
    assert_eq!(
        schema_errors(&schema_of_kind::<AtV1alpha1>(), &doc),
        [
            "spec.run: Required value: spec.run.command is required (or spec.command, the book's v1alpha1 form)"
        ]
    );
}

fn condition() -> Condition {
    Condition::new(
        "Ready",
        ConditionStatus::False,
        "PodFailed",
        "the command exited with 3",
        Some(2),
        Timestamp::from_second(1_555_063_925).unwrap(),
    )
}

fn with_status<K: Serialize>(obj: &K) -> Value {
    serde_json::to_value(obj).unwrap()
}

#[test]
fn statuses_the_controllers_write_pass_the_schemas() {
    let mut at: At = serde_json::from_value(read_yaml(
        &repo().join("artifacts/examples/at-deadline-ttl.yaml"),
    ))
    .unwrap();
    for phase in [AtPhase::Pending, AtPhase::Running, AtPhase::Done] {
        for result in [
            None,
            Some(AtResult::Succeeded),
            Some(AtResult::Failed),
            Some(AtResult::DeadlineExceeded),
        ] {
            at.status = Some(AtStatus {
                phase: Some(phase),
                pod_name: Some("example-at-pod".into()),
                start_time: Some(Timestamp::from_second(1_555_063_920).unwrap()),
                completion_time: Some(Timestamp::from_second(1_555_063_925).unwrap()),
                result,
                exit_code: Some(3),
                message: Some("the command exited with 3".into()),
                observed_generation: Some(2),
                conditions: vec![condition()],
            });
            let errors = schema_errors(&schema_of_kind::<At>(), &with_status(&at));
            assert!(errors.is_empty(), "{phase:?}/{result:?}: {errors:#?}");
        }
    }

    let mut t: TDSet = serde_json::from_value(read_yaml(
        &repo().join("artifacts/examples/tdset-hello-world.yaml"),
    ))
    .unwrap();
    t.status = Some(TDSetStatus {
        replicas: 5,
        observed_generation: Some(1),
        conditions: vec![condition()],
    });
    let errors = schema_errors(&schema_of_kind::<TDSet>(), &with_status(&t));
    assert!(errors.is_empty(), "{errors:#?}");

    let mut r: RedisCluster = serde_json::from_value(read_yaml(
        &repo().join("artifacts/examples/rediscluster.yaml"),
    ))
    .unwrap();
    r.status = Some(RedisClusterStatus {
        nodes: vec![
            "example-rediscluster-0".into(),
            "example-rediscluster-1".into(),
        ],
        ready_replicas: 2,
        conditions: vec![condition()],
    });
    let errors = schema_errors(&schema_of_kind::<RedisCluster>(), &with_status(&r));
    assert!(errors.is_empty(), "{errors:#?}");

    let mut m: MyApp =
        serde_json::from_value(read_yaml(&repo().join("artifacts/examples/myapp.yaml"))).unwrap();
    m.status = Some(MyAppStatus {
        available_replicas: 2,
        conditions: vec![condition()],
    });
    let errors = schema_errors(&schema_of_kind::<MyApp>(), &with_status(&m));
    assert!(errors.is_empty(), "{errors:#?}");

    let mut f: Foo =
        serde_json::from_value(read_yaml(&repo().join("artifacts/examples/foo.yaml"))).unwrap();
    f.status = Some(FooStatus {
        available_replicas: 1,
    });
    let errors = schema_errors(&schema_of_kind::<Foo>(), &with_status(&f));
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn status_and_condition_validations_reject_bad_values() {
    let schema = schema_of_kind::<At>();
    let base = read_yaml(&repo().join("artifacts/examples/cnat-example-v1.yaml"));
    let with = |status: Value| {
        let mut doc = base.clone();
        doc["status"] = status;
        schema_errors(&schema, &doc)
    };
    // Option fields are nullable, as `Option<T>` deserialises `null` as `None`; optional enums
    // are the exception (the server checks enum membership for null too), so they are omitted.
    assert!(with(json!({"podName": null, "exitCode": null})).is_empty());
    assert!(!with(json!({"result": null})).is_empty());
    assert!(!with(json!({"result": "Maybe"})).is_empty());
    assert!(!with(json!({"startTime": "yesterday"})).is_empty());
    let cond = json!({"type": "Ready", "status": "True", "lastTransitionTime": "2019-04-12T10:12:00Z", "reason": "PodSucceeded"});
    assert!(with(json!({"conditions": [cond]})).is_empty());
    for (field, bad) in [
        ("status", json!("Yes")),
        ("reason", json!("")),
        ("reason", json!("has spaces")),
        ("type", json!("not a type!")),
        ("lastTransitionTime", json!("now")),
        ("observedGeneration", json!(-1)),
    ] {
        let mut c = cond.clone();
        c[field] = bad.clone();
        let errors = with(json!({"conditions": [c]}));
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("status.conditions[0].{field}:"))),
            "condition {field}={bad} accepted: {errors:?}"
        );
    }
}

/// Walks a schema and returns every violation of the structural rules.
fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    const FORBIDDEN: &[&str] = &[
        "$ref",
        "$schema",
        "$defs",
        "definitions",
        "title",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "default",
        "dependencies",
        "patternProperties",
        "additionalItems",
        "id",
    ];
    let Value::Object(node) = schema else {
        out.push(format!("{path}: not an object"));
        return;
    };
    for key in node.keys() {
        if FORBIDDEN.contains(&key.as_str()) {
            out.push(format!("{path}: forbidden keyword {key}"));
        }
    }
    let flag = |k: &str| node.get(k) == Some(&Value::Bool(true));
    let ty = node.get("type").and_then(Value::as_str);
    if ty.is_none()
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        out.push(format!("{path}: no type"));
    }
    if ty == Some("array") && !node.get("items").is_some_and(Value::is_object) {
        out.push(format!("{path}: array without a single items schema"));
    }
    if node.contains_key("properties") && ty != Some("object") {
        out.push(format!("{path}: properties on a {ty:?} node"));
    }
    if let Some(Value::Object(props)) = node.get("properties") {
        for (name, sub) in props {
            structural_violations(sub, &format!("{path}.properties.{name}"), out);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = node.get(key) {
            structural_violations(sub, &format!("{path}.{key}"), out);
        }
    }
}

#[test]
fn every_schema_is_structural() {
    for crd in crds::all_values().unwrap() {
        let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut violations = Vec::new();
        structural_violations(schema, "$", &mut violations);
        assert!(violations.is_empty(), "{name}: {violations:#?}");
        // And what the API server demands of a v1 CRD before it accepts one.
        assert_eq!(schema::check_structural(schema), Ok(()), "{name}");
        assert_eq!(schema["type"], "object", "{name}");
        assert_eq!(
            schema["properties"]["metadata"],
            json!({"type": "object"}),
            "{name}"
        );
        assert_eq!(schema["required"], json!(["spec"]), "{name}");
        for field in ["apiVersion", "kind"] {
            assert_eq!(schema["properties"][field]["type"], "string", "{name}");
        }
        assert!(schema["properties"]["status"].is_object(), "{name}");
        // Doc comments travel into the schema, so `kubectl explain` has something to say.
        assert!(
            schema["properties"]["spec"]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{name}"
        );
    }
    // The walk itself catches what it is meant to catch.
    let mut v = Vec::new();
    structural_violations(
        &json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
        "$",
        &mut v,
    );
    assert_eq!(
        v,
        [
            "$.properties.a: forbidden keyword $ref",
            "$.properties.a: no type"
        ]
    );
}

#[test]
fn the_validations_the_types_declare_are_in_the_schemas() {
    // Both versions share one spec: `run` or the book's `command`, one of them (two CEL rules).
    let alpha = schema_of_kind::<AtV1alpha1>();
    let spec = &alpha["properties"]["spec"];
    assert_eq!(spec["required"], json!(["schedule"]));
    assert_eq!(spec["properties"]["schedule"]["format"], "date-time");
    assert_eq!(spec["properties"]["command"]["minLength"], 1);
    assert_eq!(
        spec["x-kubernetes-validations"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        alpha["properties"]["status"]["properties"]["result"]["enum"],
        json!(["Succeeded", "Failed", "DeadlineExceeded"])
    );
    let at = schema_of_kind::<At>();
    let spec = &at["properties"]["spec"];
    assert_eq!(spec, &alpha["properties"]["spec"]);
    assert_eq!(spec["required"], json!(["schedule"]));
    assert_eq!(spec["properties"]["schedule"]["format"], "date-time");
    let run = &spec["properties"]["run"];
    assert_eq!(run["required"], json!(["command"]));
    assert_eq!(run["properties"]["command"]["minLength"], 1);
    assert_eq!(run["properties"]["image"]["minLength"], 1);
    assert_eq!(run["properties"]["activeDeadlineSeconds"]["minimum"], 1);
    assert_eq!(run["properties"]["ttlSecondsAfterFinished"]["minimum"], 0);
    // The CEL transition rule: the schedule is frozen once the At has left PENDING.
    let rules = at["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(rules[0]["rule"].as_str().unwrap().contains("oldSelf"));
    assert_eq!(rules[0]["fieldPath"], ".spec.schedule");
    assert!(rules[0]["messageExpression"].is_string());
    let status = &at["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        json!(["PENDING", "RUNNING", "DONE"])
    );
    assert_eq!(
        status["result"]["enum"],
        json!(["Succeeded", "Failed", "DeadlineExceeded"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        json!(["type"])
    );

    let tdset = schema_of_kind::<TDSet>();
    let window = &tdset["properties"]["spec"]["properties"]["schedulingConfig"]["items"];
    for hour in ["startTime", "endTime"] {
        assert_eq!(window["properties"][hour]["minimum"], 0);
        assert_eq!(window["properties"][hour]["maximum"], 23);
    }
    assert_eq!(window["properties"]["replica"]["minimum"], 0);
    let spec = &tdset["properties"]["spec"]["properties"];
    assert_eq!(spec["defaultReplica"]["minimum"], 1);
    assert_eq!(spec["intervalMint"]["minimum"], 1);
    assert_eq!(spec["intervalMint"]["maximum"], 1440);

    let redis = schema_of_kind::<RedisCluster>();
    assert_eq!(
        redis["properties"]["spec"]["properties"]["size"]["minimum"],
        1
    );
    let myapp = schema_of_kind::<MyApp>();
    assert_eq!(
        myapp["properties"]["spec"]["properties"]["replicas"]["minimum"],
        0
    );
    let foo = schema_of_kind::<Foo>();
    assert_eq!(
        foo["properties"]["spec"]["properties"]["replicas"]["minimum"],
        0
    );
    assert_eq!(
        foo["properties"]["spec"]["required"],
        json!(["deploymentName"])
    );
}

fn check_crd_shape<K: CustomResourceExt>() {
    let crd = crds::crd::<K>().unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some(K::crd_name().as_str()));
    assert_eq!(crd.spec.group, K::GROUP);
    assert_eq!(crd.spec.scope, "Namespaced");
    let names = &crd.spec.names;
    assert_eq!(names.kind, K::KIND);
    assert_eq!(names.plural, K::PLURAL);
    assert_eq!(names.singular.as_deref(), Some(K::SINGULAR));
    assert_eq!(
        names.list_kind.as_deref(),
        Some(format!("{}List", K::KIND).as_str())
    );
    let short: Vec<&str> = names
        .short_names
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert_eq!(short, K::SHORT_NAMES);

    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == K::VERSION)
        .unwrap_or_else(|| panic!("{}: no version {}", K::KIND, K::VERSION));
    assert!(version.served);
    let status = version
        .subresources
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .unwrap_or_else(|| panic!("{}: no status subresource", K::KIND));
    assert_eq!(status.0, json!({}));
    let scale = version.subresources.as_ref().and_then(|s| s.scale.as_ref());
    assert_eq!(
        scale.map(|s| (
            s.spec_replicas_path.as_str(),
            s.status_replicas_path.as_str()
        )),
        K::SCALE.map(|s| (s.spec_replicas_path, s.status_replicas_path)),
        "{}",
        K::KIND
    );
    let columns: Vec<(&str, &str, &str)> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
        .collect();
    let want: Vec<(&str, &str, &str)> = K::PRINTER_COLUMNS
        .iter()
        .map(|c| (c.name, c.type_, c.json_path))
        .collect();
    assert_eq!(columns, want, "{}", K::KIND);
}

#[test]
fn crds_have_names_printer_columns_and_the_status_subresource() {
    check_crd_shape::<At>();
    check_crd_shape::<AtV1alpha1>();
    check_crd_shape::<TDSet>();
    check_crd_shape::<RedisCluster>();
    check_crd_shape::<MyApp>();
    check_crd_shape::<Foo>();
    let at: Vec<&str> = AtV1alpha1::PRINTER_COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(at, ["Schedule", "Command", "Phase", "Reason", "Age"]);
    let at: Vec<&str> = At::PRINTER_COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(
        at,
        ["Schedule", "Command", "Image", "Phase", "Reason", "Age"]
    );
    // One storage version per CRD: At's is v1, its v1alpha1 is served and deprecated.
    for crd in crds::all_crds().unwrap() {
        let storage: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(storage.len(), 1, "{:?}", crd.metadata.name);
    }
    let at = crds::crd::<At>().unwrap();
    assert_eq!(at.spec.versions[0].name, "v1");
    assert!(at.spec.versions[0].storage);
    assert_eq!(at.spec.versions[1].name, "v1alpha1");
    assert_eq!(at.spec.versions[1].deprecated, Some(true));
}

#[test]
fn the_embedded_crds_are_the_files_in_artifacts() {
    let dir = repo().join("artifacts/crds");
    let files = yaml_files(&dir);
    assert_eq!(files.len(), crds::ALL.len());
    for (name, yaml) in crds::ALL {
        let on_disk = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
        assert_eq!(&on_disk, yaml, "{name}");
        assert!(yaml.starts_with("# Generated by hack/update-codegen.sh; DO NOT EDIT.\n"));
    }
}

/// RFC 7386 JSON merge patch, what `kubectl patch --type=merge` sends.
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[test]
fn the_conversion_patch_turns_the_base_crd_into_the_webhook_crd() {
    let patch = read_yaml(&repo().join("artifacts/deploy/webhook/crd-conversion-patch.yaml"));
    let mut patched = crds::crd_value::<At>().unwrap();
    assert_eq!(patched["spec"]["conversion"], json!({"strategy": "None"}));
    merge_patch(&mut patched, &patch);
    // What the demo and tests install, given the same clientConfig.
    let client_config = patch["spec"]["conversion"]["webhook"]["clientConfig"].clone();
    let built = crds::at_crd_with_conversion_webhook(client_config).unwrap();
    assert_eq!(patched["spec"], built["spec"]);
    assert_eq!(
        patched["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"],
        "/convert"
    );
    assert_eq!(
        patched["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "sample-controller/sample-controller-webhook"
    );
    // The webhook configurations match the hub version, and requests in v1alpha1 through
    // matchPolicy Equivalent (converted to v1 before the webhooks see them).
    let text =
        std::fs::read_to_string(repo().join("artifacts/deploy/webhook/webhooks.yaml")).unwrap();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        for hook in v["webhooks"].as_array().unwrap() {
            assert_eq!(hook["rules"][0]["apiVersions"], json!(["v1"]), "{hook}");
            assert_eq!(hook["matchPolicy"], "Equivalent", "{hook}");
        }
    }
}
