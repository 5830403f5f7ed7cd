//! CEL validation rules (`x-kubernetes-validations`) in the embedded API server, driven with the
//! files of `artifacts/examples/cel/` (docs/08-versions-and-webhooks.md teaches with them).
//!
//! - With kubectl 1.28 and 1.33 (`kubectl.1.28` / `kubectl.1.33` beside the `kubectl` on the
//!   PATH; a missing binary skips its test with a message): applying an object that breaks a
//!   rule fails with the real server's message; a transition rule lets a field be set once and
//!   then blocks changing it; two broken rules are reported together; a CRD whose rule does not
//!   compile is refused; the TDSet CRD's rule (emitted by codegen) refuses two windows starting
//!   at the same hour.
//! - Over HTTP: the 422 Status and its causes (reason, field, message), rules on the status
//!   subresource, and CRD updates recompiling the rules.

use crate::support;
use crate::support::cluster;

use cluster::{Kubectl, kubectl_bin};
use serde_json::{Value, json};
use support::apiserver::*;

const WEBAPPS: &str = "/apis/cel.example.com/v1/namespaces/default/webapps";

fn example(name: &str) -> Value {
    let path = cluster::repo().join("artifacts/examples/cel").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

async fn install_webapps(api: &TestClient) {
    let crd = api.post(CRDS, &example("crd-webapps.yaml")).await;
    assert_eq!(crd.code, 201, "{:?}", crd.body);
}

fn causes(body: &Value) -> Vec<(String, String, String)> {
    body["details"]["causes"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (s("reason"), s("field"), s("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn rules_with_kubectl(version: &str) {
    let Some(bin) = kubectl_bin(Some(version)) else {
        eprintln!(
            "SKIPPED: kubectl {version} not found (looked beside the binary `kubectl` on the PATH resolves to)"
        );
        return;
    };
    let server = start().await;
    let k = Kubectl::with_bin(bin, &server);
    let cel = "artifacts/examples/cel";

    k.ok(&["apply", "-f", &format!("{cel}/crd-webapps.yaml")])
        .await;
    let out = k.ok(&["apply", "-f", &format!("{cel}/webapp.yaml")]).await;
    assert!(out.contains("webapp.cel.example.com/web created"), "{out}");

    // A rule comparing two fields, with a messageExpression and a fieldPath.
    let out = k
        .run(&["apply", "-f", &format!("{cel}/webapp-min-above-max.yaml")])
        .await;
    assert!(!out.ok, "minReplicas above maxReplicas was accepted");
    assert!(
        out.stderr.contains(
            "The WebApp \"upside-down\" is invalid: spec.minReplicas: Invalid value: \"object\": minReplicas (5) must not exceed maxReplicas (2)"
        ),
        "{}",
        out.stderr
    );

    // Two rules broken at once: both reported in one answer.
    let out = k
        .run(&["apply", "-f", &format!("{cel}/webapp-two-violations.yaml")])
        .await;
    assert!(!out.ok, "two violations were accepted");
    for want in [
        "spec.image: Forbidden: the :latest tag is not allowed; pin a version",
        "spec.ports: Invalid value: \"array\": ports must be unique",
    ] {
        assert!(out.stderr.contains(want), "{want} not in {}", out.stderr);
    }

    // The root rule: no field path.
    let long = "a-name-that-is-longer-than-thirty-characters";
    let out = k
        .run(&[
            "patch",
            "webapp",
            "web",
            "--type=merge",
            "-p",
            &json!({"spec": {"maxReplicas": 4}}).to_string(),
        ])
        .await;
    assert!(out.ok, "{}", out.stderr);
    let manifest = k.home().join("long.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: cel.example.com/v1\nkind: WebApp\nmetadata:\n  name: {long}\nspec:\n  image: nginx:1.27\n  minReplicas: 1\n  maxReplicas: 1\n"
        ),
    )
    .unwrap();
    let out = k.run(&["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(!out.ok, "a long name was accepted");
    assert!(
        out.stderr.contains(&format!(
            "The WebApp \"{long}\" is invalid: <nil>: Invalid value: \"object\": a WebApp's name is at most 30 characters (it prefixes the names of its Services)"
        )),
        "{}",
        out.stderr
    );

    // The transition rule: setting storageClass the first time is allowed, changing it is not.
    let set = |class: &str| json!({"spec": {"storageClass": class}}).to_string();
    k.ok(&["patch", "webapp", "web", "--type=merge", "-p", &set("fast")])
        .await;
    let out = k
        .run(&["patch", "webapp", "web", "--type=merge", "-p", &set("slow")])
        .await;
    assert!(!out.ok, "storageClass changed after it was set");
    assert!(
        out.stderr.contains(
            "spec.storageClass: Invalid value: \"string\": storageClass cannot change once set"
        ),
        "{}",
        out.stderr
    );
    let got = k
        .ok(&[
            "get",
            "webapp",
            "web",
            "-o",
            "jsonpath={.spec.storageClass}",
        ])
        .await;
    assert_eq!(got, "fast");

    // A rule that does not compile makes the CRD invalid.
    let out = k
        .run(&[
            "apply",
            "-f",
            &format!("{cel}/crd-rule-does-not-compile.yaml"),
        ])
        .await;
    assert!(!out.ok, "a CRD with a broken rule was accepted");
    assert!(
        out.stderr.contains(
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicas >\""
        ) && out.stderr.contains("compilation failed: ERROR: <input>:1:"),
        "{}",
        out.stderr
    );

    // The rule codegen emits on the TDSet kind.
    k.ok(&["apply", "-f", "artifacts/crds/tdsets.schedule.rs.yaml"])
        .await;
    let out = k
        .run(&["apply", "-f", &format!("{cel}/tdset-same-start-hour.yaml")])
        .await;
    assert!(!out.ok, "two windows at the same hour were accepted");
    assert!(
        out.stderr.contains(
            "The TDSet \"twice-at-nine\" is invalid: spec.schedulingConfig: Invalid value: \"object\": two windows start at hour 9; only the first would ever apply"
        ),
        "{}",
        out.stderr
    );
    let out = k
        .ok(&["apply", "-f", "artifacts/examples/tdset-hello-world.yaml"])
        .await;
    assert!(out.contains("created"), "{out}");
}

#[tokio::test]
async fn cel_rules_with_kubectl_1_28() {
    rules_with_kubectl("1.28").await;
}

#[tokio::test]
async fn cel_rules_with_kubectl_1_33() {
    rules_with_kubectl("1.33").await;
}

#[tokio::test]
async fn failures_are_one_422_with_a_cause_per_rule() {
    let server = start().await;
    let api = TestClient::new(&server);
    install_webapps(&api).await;
    let bad = api
        .post(WEBAPPS, &example("webapp-two-violations.yaml"))
        .await;
    assert_eq!(bad.code, 422, "{:?}", bad.body);
    assert_eq!(bad.body["reason"], "Invalid");
    assert_eq!(
        bad.body["message"],
        "WebApp.cel.example.com \"careless\" is invalid: [spec.image: Forbidden: the :latest tag is not allowed; pin a version, spec.ports: Invalid value: \"array\": ports must be unique]"
    );
    assert_eq!(
        causes(&bad.body),
        [
            (
                "FieldValueForbidden".to_owned(),
                "spec.image".to_owned(),
                "Forbidden: the :latest tag is not allowed; pin a version".to_owned()
            ),
            (
                "FieldValueInvalid".to_owned(),
                "spec.ports".to_owned(),
                "Invalid value: \"array\": ports must be unique".to_owned()
            ),
        ]
    );
    // A schema error that blocks the rules (a missing required field) says they were skipped.
    let mut missing = example("webapp.yaml");
    missing["spec"].as_object_mut().unwrap().remove("image");
    let bad = api.post(WEBAPPS, &missing).await;
    assert_eq!(bad.code, 422, "{:?}", bad.body);
    let got = causes(&bad.body);
    assert_eq!(got[0].1, "spec.image", "{got:?}");
    assert_eq!(
        got.last().map(|c| c.2.as_str()),
        Some(
            "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
        )
    );
}

#[tokio::test]
async fn status_rules_run_on_the_status_subresource() {
    let server = start().await;
    let api = TestClient::new(&server);
    install_webapps(&api).await;
    let created = api.post(WEBAPPS, &example("webapp.yaml")).await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    let status = format!("{WEBAPPS}/web/status");
    let mut obj = created.body;
    obj["status"] = json!({"observedGeneration": 3});
    let put = api.put(&status, &obj).await;
    assert_eq!(put.code, 200, "{:?}", put.body);
    let mut back = put.body;
    back["status"]["observedGeneration"] = json!(2);
    let refused = api.put(&status, &back).await;
    assert_eq!(refused.code, 422, "{:?}", refused.body);
    assert_eq!(
        refused.body["message"],
        "WebApp.cel.example.com \"web\" is invalid: status.observedGeneration: Invalid value: \"integer\": observedGeneration never goes back"
    );
    // The spec rules run on status writes too, on the stored spec: still valid.
    back["status"]["observedGeneration"] = json!(4);
    let put = api.put(&status, &back).await;
    assert_eq!(put.code, 200, "{:?}", put.body);
}

#[tokio::test]
async fn a_crd_update_recompiles_its_rules() {
    let server = start().await;
    let api = TestClient::new(&server);
    install_webapps(&api).await;
    let ok = api.post(WEBAPPS, &example("webapp.yaml")).await;
    assert_eq!(ok.code, 201, "{:?}", ok.body);

    // Tighten the root rule to 2 characters: the next write of "web" is refused.
    let path = format!("{CRDS}/webapps.cel.example.com");
    let mut crd = api.get(&path).await.body;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["rule"] =
        json!("self.metadata.name.size() <= 2");
    let updated = api.put(&path, &crd).await;
    assert_eq!(updated.code, 200, "{:?}", updated.body);
    let mut web = api.get(&format!("{WEBAPPS}/web")).await.body;
    web["spec"]["maxReplicas"] = json!(5);
    let refused = api.put(&format!("{WEBAPPS}/web"), &web).await;
    assert_eq!(refused.code, 422, "{:?}", refused.body);
    assert_eq!(causes(&refused.body)[0].1, "<nil>", "{:?}", refused.body);

    // An update whose rule does not compile is refused and the old rules stay.
    let mut broken = api.get(&path).await.body;
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["rule"] =
        json!("self.metadata.name.size( <= 2");
    let refused = api.put(&path, &broken).await;
    assert_eq!(refused.code, 422, "{:?}", refused.body);
    assert_eq!(
        causes(&refused.body)[0].1,
        "spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule"
    );
}
