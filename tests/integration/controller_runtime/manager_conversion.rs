//! At's two versions end to end: the embedded API server calls the manager's `/convert`
//! (the CRD's `conversion: Webhook`, as `artifacts/deploy/webhook/crd-conversion-patch.yaml`
//! sets it) and its admission webhooks, and kubectl 1.28 and 1.33 read and write both shapes.
//!
//! The setup is `manager_webhook`'s: the server maps the webhook Service to the manager's port,
//! the test plays cert-manager (a CA, a serving certificate, `caBundle` injected into the CRD
//! and both webhook configurations).

use super::manager_webhook::{ATS, Setup, setup, start_manager, wait_listening};
use crate::support::cluster;

use base64::Engine;
use serde_json::{Value, json};

const ATS_V1: &str = "/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const AT_CRD: &str = "ats.cnat.programming-kubernetes.info";

/// The book's example, as shipped (only the name changes per test).
fn book_example(name: &str) -> String {
    std::fs::read_to_string("artifacts/examples/cnat-example.yaml")
        .unwrap()
        .replace("name: example-at", &format!("name: {name}"))
}

async fn kubectl_reads_and_writes_both_shapes(version: &str) {
    let Some(bin) = cluster::kubectl_bin(Some(version)) else {
        eprintln!("SKIPPED: kubectl {version} not found (looked beside the kubectl on the PATH)");
        return;
    };
    let s = setup().await;
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let k = cluster::Kubectl::with_bin(bin, &s.server);

    // Created as v1alpha1 with the book's file: kubectl prints the deprecation warning.
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(&book_example("book")))
        .await;
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cnat.programming-kubernetes.info/v1alpha1 At is deprecated"),
        "{}",
        out.stderr
    );
    // Read in v1: the command moved under spec.run, and /mutate-at defaulted the image.
    let v1: Value = serde_json::from_str(
        &k.ok(&[
            "get",
            "ats.v1.cnat.programming-kubernetes.info",
            "book",
            "-o",
            "json",
        ])
        .await,
    )
    .unwrap();
    assert_eq!(v1["apiVersion"], "cnat.programming-kubernetes.info/v1");
    assert_eq!(
        v1["spec"],
        json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo YAY", "image": "busybox:1.36"}})
    );
    // Read in v1alpha1: the book's shape, the image kept in the annotation.
    let alpha: Value = serde_json::from_str(
        &k.ok(&[
            "get",
            "ats.v1alpha1.cnat.programming-kubernetes.info",
            "book",
            "-o",
            "json",
        ])
        .await,
    )
    .unwrap();
    assert_eq!(
        alpha["apiVersion"],
        "cnat.programming-kubernetes.info/v1alpha1"
    );
    assert_eq!(
        alpha["spec"],
        json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"})
    );
    assert_eq!(
        alpha["metadata"]["annotations"]["cnat.programming-kubernetes.info/v1-fields"],
        r#"{"run":{"image":"busybox:1.36"}}"#
    );
    // Both tables list it, each with its own columns.
    let table = k
        .ok(&["get", "ats.v1alpha1.cnat.programming-kubernetes.info"])
        .await;
    assert!(
        table.contains("book") && table.contains("echo YAY"),
        "{table}"
    );
    let table = k
        .ok(&["get", "ats.v1.cnat.programming-kubernetes.info"])
        .await;
    assert!(
        table.contains("book") && table.contains("echo YAY"),
        "{table}"
    );

    // A v1 At with fields v1alpha1 has no place for; an apply in v1alpha1 (kubectl's three-way
    // merge against the v1alpha1 view) changes the command and keeps them.
    let v1_manifest = "apiVersion: cnat.programming-kubernetes.info/v1\nkind: At\nmetadata:\n  name: rich\nspec:\n  schedule: \"2099-01-01T00:00:00Z\"\n  run:\n    command: echo one\n    image: alpine:3.20\n    activeDeadlineSeconds: 30\n    ttlSecondsAfterFinished: 60\n";
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(v1_manifest))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let alpha_manifest = "apiVersion: cnat.programming-kubernetes.info/v1alpha1\nkind: At\nmetadata:\n  name: rich\nspec:\n  schedule: \"2099-01-01T00:00:00Z\"\n  command: echo two\n";
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(alpha_manifest))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let v1: Value = serde_json::from_str(
        &k.ok(&[
            "get",
            "ats.v1.cnat.programming-kubernetes.info",
            "rich",
            "-o",
            "json",
        ])
        .await,
    )
    .unwrap();
    assert_eq!(
        v1["spec"]["run"],
        json!({"command": "echo two", "image": "alpine:3.20", "activeDeadlineSeconds": 30, "ttlSecondsAfterFinished": 60})
    );

    // A blank command in v1alpha1 is refused by /validate-at (which sees it as v1), with the
    // webhook's field and message.
    let out = k
        .run_with_input(
            &["apply", "-f", "-"],
            Some(&book_example("blank").replace("echo YAY", " ")),
        )
        .await;
    assert!(!out.ok);
    // (kubectl prints a 422 from its details: the kind, the name and each cause.)
    assert!(
        out.stderr.contains(
            "The At \"blank\" is invalid: spec.run.command: Invalid value: \" \" is empty"
        ),
        "{}",
        out.stderr
    );

    // The manager stops: a read in v1alpha1 needs /convert and fails with the real message;
    // a read in the storage version needs no webhook.
    stop.cancel();
    task.await.unwrap().unwrap();
    let out = k
        .run(&[
            "get",
            "ats.v1alpha1.cnat.programming-kubernetes.info",
            "book",
        ])
        .await;
    assert!(!out.ok);
    assert!(
        out.stderr.contains(
            "conversion webhook for cnat.programming-kubernetes.info/v1, Kind=At failed: Post \"https://sample-controller-webhook.sample-controller.svc:443/convert?timeout=30s\""
        ),
        "{}",
        out.stderr
    );
    let out = k
        .run(&["get", "ats.v1.cnat.programming-kubernetes.info", "book"])
        .await;
    assert!(out.ok, "{}", out.stderr);
    s.server.shutdown().await;
}

#[tokio::test]
async fn kubectl_1_28_reads_and_writes_both_versions_through_the_managers_webhooks() {
    kubectl_reads_and_writes_both_shapes("1.28").await;
}

#[tokio::test]
async fn kubectl_1_33_reads_and_writes_both_versions_through_the_managers_webhooks() {
    kubectl_reads_and_writes_both_shapes("1.33").await;
}

#[tokio::test]
async fn a_watch_in_v1alpha1_sees_v1_writes_converted() {
    let s = setup().await;
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let mut w = s.api.watch(&format!("{ATS}?watch=true")).await;
    let r = s
        .api
        .post(
            ATS_V1,
            &json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                    "metadata": {"name": "watched"},
                    "spec": {"schedule": "2099-01-01T00:00:00Z",
                             "run": {"command": "echo hi", "activeDeadlineSeconds": 5}}}),
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let ev = w.next_change().await.expect("an ADDED event");
    assert_eq!(ev["type"], "ADDED");
    let obj = &ev["object"];
    assert_eq!(
        obj["apiVersion"],
        "cnat.programming-kubernetes.info/v1alpha1"
    );
    assert_eq!(obj["spec"]["command"], "echo hi");
    assert!(obj["spec"].get("run").is_none(), "{obj}");
    assert_eq!(
        obj["metadata"]["annotations"]["cnat.programming-kubernetes.info/v1-fields"],
        r#"{"run":{"activeDeadlineSeconds":5,"image":"busybox:1.36"}}"#
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    s.server.shutdown().await;
}

/// The CRD as it was before `v1`: `v1alpha1` only, and stored.
fn v1alpha1_only_crd() -> Value {
    let mut crd = sample_operators::apis::crds::crd_value::<sample_operators::apis::At>().unwrap();
    let versions = crd["spec"]["versions"].as_array_mut().unwrap();
    versions.retain(|v| v["name"] == "v1alpha1");
    let v = &mut versions[0];
    v["storage"] = json!(true);
    if let Some(o) = v.as_object_mut() {
        o.remove("deprecated");
        o.remove("deprecationWarning");
    }
    crd
}

#[tokio::test]
async fn ats_stored_as_v1alpha1_before_the_switch_still_read_back_in_both_versions() {
    let s: Setup = setup().await;
    // Replace the two-version CRD with the old one and store an At in v1alpha1.
    let r = s.api.delete(&format!("{CRDS}/{AT_CRD}"), None).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    cluster_wait_gone(&s).await;
    let r = s.api.post(CRDS, &v1alpha1_only_crd()).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let r = s
        .api
        .post(
            ATS,
            &json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
                    "metadata": {"name": "old"},
                    "spec": {"schedule": "2099-01-01T00:00:00Z", "command": "echo old"}}),
        )
        .await;
    // (No webhook answers yet: the admission webhooks match v1 only, which this CRD lacks.)
    assert_eq!(r.code, 201, "{:?}", r.body);

    // The switch: v1 becomes the storage version, with the manager's /convert.
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let mut crd = sample_operators::apis::crds::at_crd_with_conversion_webhook(json!({
        "service": {"namespace": "sample-controller", "name": "sample-controller-webhook", "path": "/convert"},
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&s.ca),
    }))
    .unwrap();
    let current = s.api.get(&format!("{CRDS}/{AT_CRD}")).await;
    crd["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"].clone();
    let r = s.api.put(&format!("{CRDS}/{AT_CRD}"), &crd).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(
        r.body["status"]["storedVersions"],
        json!(["v1alpha1", "v1"]),
        "{:?}",
        r.body["status"]
    );

    let v1 = s.api.get(&format!("{ATS_V1}/old")).await;
    assert_eq!(v1.code, 200, "{:?}", v1.body);
    assert_eq!(v1.body["apiVersion"], "cnat.programming-kubernetes.info/v1");
    assert_eq!(v1.body["spec"]["run"]["command"], "echo old");
    let alpha = s.api.get(&format!("{ATS}/old")).await;
    assert_eq!(alpha.code, 200, "{:?}", alpha.body);
    assert_eq!(alpha.body["spec"]["command"], "echo old");
    // A list in v1 converts it too.
    let list = s.api.get(ATS_V1).await;
    assert_eq!(list.body["items"][0]["spec"]["run"]["command"], "echo old");
    stop.cancel();
    task.await.unwrap().unwrap();
    s.server.shutdown().await;
}

async fn cluster_wait_gone(s: &Setup) {
    for _ in 0..200 {
        if s.api.get(&format!("{CRDS}/{AT_CRD}")).await.code == 404 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the At CRD was not deleted");
}

#[tokio::test]
async fn the_schedule_of_a_running_at_cannot_change_by_the_crds_cel_rule() {
    let s = setup().await;
    // No manager: no webhook is registered for this check; the CEL rule in the CRD holds alone.
    for base in [
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sample-controller-mutating",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sample-controller-validating",
    ] {
        assert_eq!(s.api.delete(base, None).await.code, 200);
    }
    let r = s
        .api
        .post(
            ATS_V1,
            &json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                    "metadata": {"name": "frozen"},
                    "spec": {"schedule": "2099-01-01T00:00:00Z", "run": {"command": "echo"}}}),
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let patch = |schedule: &str| json!({"spec": {"schedule": schedule}});
    // PENDING: the schedule may move.
    let r = s
        .api
        .patch(
            &format!("{ATS_V1}/frozen"),
            "application/merge-patch+json",
            &patch("2099-01-02T00:00:00Z"),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    // RUNNING: it may not.
    let r = s
        .api
        .patch(
            &format!("{ATS_V1}/frozen/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "RUNNING"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let r = s
        .api
        .patch(
            &format!("{ATS_V1}/frozen"),
            "application/merge-patch+json",
            &patch("2099-01-03T00:00:00Z"),
        )
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    let msg = r.body["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("At.cnat.programming-kubernetes.info \"frozen\" is invalid: spec.schedule"),
        "{msg}"
    );
    assert!(
        msg.contains("RUNNING") && msg.contains("2099-01-02T00:00:00Z"),
        "{msg}"
    );
    s.server.shutdown().await;
}
