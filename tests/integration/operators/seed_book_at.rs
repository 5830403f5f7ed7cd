//! The book's chapter 6, as a reader runs it (*Programming Kubernetes*, "cnat" with
//! sample-controller): install the CRDs with a plain `kubectl apply -f artifacts/crds/` (no
//! webhook, no cert-manager), start the controller, apply the book's `cnat-example.yaml`
//! (`v1alpha1`, `spec.command: "echo YAY"`), and see `kubectl get at,pods` show the At and its
//! pod `example-at-pod`, and `kubectl logs example-at-pod` print `YAY`. On the way the At goes
//! PENDING → RUNNING → DONE (a watch sees RUNNING before DONE), kubectl 1.28 and 1.33 patch it,
//! and it reads back in both versions without losing a field; the `v1` example runs beside it.
//!
//! The embedded server runs pods with its process runtime: `/bin/sh -c "echo YAY"` really runs,
//! and its output is the pod's log.

use crate::support::at::NS;
use crate::support::cluster::kubectl_bin;
use crate::support::seeds::{Walkthrough, row_of};

use embedded_cluster::Cluster;
use embedded_cluster::NodeRuntime;
use futures_util::StreamExt;
use sample_client_go::client::{Api, WatchEvent, WatchParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::{At, AtPhase};
use serde_json::Value;

/// The phases a watch on `name` sees, in order, until DONE (at most two minutes).
async fn phases_until_done(api: Api<At>, name: &'static str) -> Vec<AtPhase> {
    let mut seen: Vec<AtPhase> = Vec::new();
    let params = WatchParams {
        field_selector: Some(format!("metadata.name={name}")),
        timeout_seconds: Some(120),
        ..WatchParams::default()
    };
    let mut stream = api.watch(&params).await.expect("watch ats");
    while let Some(event) = stream.next().await {
        let at = match event {
            Ok(WatchEvent::Added(at) | WatchEvent::Modified(at)) => at,
            Ok(_) => continue,
            Err(e) => panic!("watch failed: {e}"),
        };
        if at.status.is_none() {
            continue;
        }
        let phase = at.phase();
        if seen.last() != Some(&phase) {
            seen.push(phase);
        }
        if phase == AtPhase::Done {
            break;
        }
    }
    seen
}

/// `kubectl get <resource> <name> -o json`, parsed.
async fn get_json(w: &Walkthrough, resource: &str, name: &str) -> Value {
    serde_json::from_str(&w.kubectl(&["get", resource, name, "-o", "json"]).await)
        .expect("kubectl printed JSON")
}

#[tokio::test]
async fn chapter_6_the_books_example_runs_on_a_plain_crd_install() {
    let builder = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process);
    let Some(w) = Walkthrough::start_with("the book's chapter 6", builder).await else {
        return;
    };
    let manager = w.manager("at", Clock::new()).await;
    let ats = Api::<At>::namespaced(w.client.clone(), NS);
    let watch = tokio::spawn(phases_until_done(ats.clone(), "example-at"));

    // $ kubectl apply -f artifacts/examples/cnat-example.yaml
    let out = w
        .kubectl_all(&["apply", "-f", "artifacts/examples/cnat-example.yaml"])
        .await;
    assert!(
        out.contains("at.cnat.programming-kubernetes.info/example-at created"),
        "{out}"
    );
    // The served-but-deprecated version says so on every use.
    assert!(out.contains("v1alpha1 At is deprecated"), "{out}");

    // PENDING → RUNNING → DONE, RUNNING seen on a watch before DONE.
    let phases = watch.await.expect("the watch task");
    assert_eq!(
        phases
            .iter()
            .filter(|p| **p != AtPhase::Pending)
            .collect::<Vec<_>>(),
        [&AtPhase::Running, &AtPhase::Done],
        "{phases:?}"
    );

    // $ kubectl get at,pods
    let table = w.kubectl(&["get", "at,pods"]).await;
    assert!(
        row_of(&table, "at.cnat.programming-kubernetes.info/example-at").is_some(),
        "{table}"
    );
    let pod = row_of(&table, "pod/example-at-pod").expect("the At's pod");
    assert_eq!(pod[2], "Completed", "{table}");

    // $ kubectl logs example-at-pod
    let logs = w.kubectl(&["logs", "example-at-pod"]).await;
    assert_eq!(logs.trim(), "YAY");

    // The events tell the same story, in order.
    let started = w.event(NS, "example-at", "Started").await;
    let completed = w.event(NS, "example-at", "Completed").await;
    assert!(started.first_timestamp <= completed.first_timestamp);

    // kubectl 1.28 and 1.33 patch and read the book's object (it is stored as v1 with the
    // book's `spec.command`, which v1 accepts as the alias of `spec.run.command`).
    for version in ["1.28", "1.33"] {
        let Some(bin) = kubectl_bin(Some(version)) else {
            eprintln!("kubectl.{version} not installed beside kubectl: skipping its patch");
            continue;
        };
        let patch = format!(r#"{{"metadata":{{"labels":{{"patched-by":"kubectl-{version}"}}}}}}"#);
        let out = w
            .kubectl_with(
                bin,
                &["patch", "at", "example-at", "--type", "merge", "-p", &patch],
            )
            .await;
        assert!(out.contains("example-at patched"), "{out}");
    }

    // Read back in both versions, nothing lost.
    let alpha = get_json(
        &w,
        "ats.v1alpha1.cnat.programming-kubernetes.info",
        "example-at",
    )
    .await;
    assert_eq!(alpha["spec"]["command"], "echo YAY");
    assert_eq!(alpha["spec"]["schedule"], "2019-04-12T10:12:00Z");
    assert_eq!(alpha["status"]["phase"], "DONE");
    assert_eq!(alpha["metadata"]["labels"]["patched-by"], "kubectl-1.33");
    let v1 = get_json(&w, "ats.v1.cnat.programming-kubernetes.info", "example-at").await;
    assert_eq!(v1["spec"], alpha["spec"]);
    assert_eq!(v1["status"], alpha["status"]);

    // The v1 example beside it: `spec.run`, its image kept through a v1alpha1 read.
    let out = w
        .kubectl(&["apply", "-f", "artifacts/examples/cnat-example-v1.yaml"])
        .await;
    assert!(out.contains("example-at-v1 created"), "{out}");
    w.wait("example-at-v1 DONE", || async {
        ats.get("example-at-v1")
            .await
            .is_ok_and(|a| a.phase() == AtPhase::Done)
    })
    .await;
    let alpha = get_json(
        &w,
        "ats.v1alpha1.cnat.programming-kubernetes.info",
        "example-at-v1",
    )
    .await;
    assert_eq!(alpha["spec"]["run"]["command"], "echo YAY");
    assert_eq!(alpha["spec"]["run"]["image"], "busybox:1.36");
    let logs = w.kubectl(&["logs", "example-at-v1-pod"]).await;
    assert_eq!(logs.trim(), "YAY");

    // `kubectl get ats` lists both, DONE.
    let table = w.kubectl(&["get", "ats"]).await;
    for name in ["example-at", "example-at-v1"] {
        let row = row_of(&table, name).unwrap_or_else(|| panic!("{name} in {table}"));
        assert!(row.iter().any(|c| c == "DONE"), "{table}");
    }
    manager.stop().await.unwrap();
    w.shutdown().await;
}
