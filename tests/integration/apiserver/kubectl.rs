//! Real kubectl against the embedded API server, over HTTPS with the kubeconfig it writes.
//!
//! Each test runs the same scenario — the issue's list: apply the CRDs and examples, `get`
//! with printer columns, `get -o yaml`, `get -w` seeing an API change, merge and status
//! patches, `wait --for=jsonpath`, `describe` listing events, `delete` waiting for a finalizer,
//! `apply --server-side`, and `create namespace|configmap` (protobuf bodies from kubectl 1.32)
//! — with one kubectl version. The versioned binaries (`kubectl.1.28`, `kubectl.1.33`, ...)
//! live next to the file the `kubectl` on the PATH resolves to; a missing binary skips its
//! test with a message.

use crate::support;
use crate::support::cluster;

use std::process::Stdio;
use std::time::Duration;

use cluster::{Kubectl, kubectl_bin};
use serde_json::json;
use support::apiserver::*;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The book's example is a `v1alpha1` object; `at` alone means the preferred version, `v1`,
/// whose shape (`spec.run`) it does not have until the server converts through the webhook
/// (`conversion.strategy: Webhook`). The commands about it name the version.
const AT_V1ALPHA1: &str = "ats.v1alpha1.cnat.programming-kubernetes.info";

async fn scenario(version: Option<&str>) {
    let Some(bin) = kubectl_bin(version) else {
        eprintln!(
            "SKIPPED: kubectl {} not found (looked on PATH and beside the binary it resolves to)",
            version.unwrap_or("(default)")
        );
        return;
    };
    let server = start().await;
    let api = TestClient::new(&server);
    let k = Kubectl::with_bin(bin, &server);

    // apply -f artifacts/crds/, then the examples.
    let out = k.ok(&["apply", "-f", "artifacts/crds/"]).await;
    assert!(
        out.contains("ats.cnat.programming-kubernetes.info created"),
        "{out}"
    );
    let out = k.ok(&["apply", "-f", "artifacts/examples/"]).await;
    assert!(
        out.contains("at.cnat.programming-kubernetes.info/example-at created"),
        "{out}"
    );

    // The server validates (kubectl's default --validate=strict sends fieldValidation=Strict):
    // schema violations are 422 Invalid, unknown fields a strict decoding error.
    // Every file in artifacts/examples/invalid/ (docs/10-cluster.md says the server rejects them).
    let mut invalid: Vec<String> =
        std::fs::read_dir(cluster::repo().join("artifacts/examples/invalid"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
    invalid.sort();
    assert!(invalid.len() >= 8, "{invalid:?}");
    for bad in &invalid {
        let out = k
            .run(&["create", "-f", &format!("artifacts/examples/invalid/{bad}")])
            .await;
        assert!(!out.ok, "{bad} was accepted");
        assert!(out.stderr.contains("is invalid"), "{bad}: {}", out.stderr);
    }
    let unknown = k.home().join("unknown-field.yaml");
    std::fs::write(
        &unknown,
        "apiVersion: cnat.programming-kubernetes.info/v1alpha1\nkind: At\nmetadata:\n  name: typo\nspec:\n  schedule: \"2019-04-12T10:12:00Z\"\n  command: \"echo YAY\"\n  comand: \"typo\"\n",
    )
    .unwrap();
    let out = k.run(&["apply", "-f", unknown.to_str().unwrap()]).await;
    assert!(!out.ok, "an unknown field was accepted");
    assert!(
        out.stderr.contains("unknown field \"spec.comand\""),
        "{}",
        out.stderr
    );

    // get: the CRD's printer columns.
    let out = k.ok(&["get", "ats"]).await;
    let header = out.lines().next().unwrap_or_default();
    for col in ["NAME", "SCHEDULE", "COMMAND", "PHASE"] {
        assert!(header.contains(col), "{out}");
    }
    assert!(
        out.contains("example-at") && out.contains("echo YAY"),
        "{out}"
    );
    // An At the controller marked InvalidSpec says so in the REASON column (the Ready
    // condition's reason, picked by a `[?(@.type=="Ready")]` filter).
    assert!(header.contains("REASON"), "{out}");
    let r = api
        .patch(
            &format!("{ATS}/example-at/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "PENDING", "conditions": [
                {"type": "InvalidSpec", "status": "True", "reason": "InvalidSpec",
                 "message": "command is empty", "lastTransitionTime": "2019-04-12T10:00:00Z"},
                {"type": "Ready", "status": "False", "reason": "InvalidSpec",
                 "message": "command is empty", "lastTransitionTime": "2019-04-12T10:00:00Z"}]}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let out = k.ok(&["get", AT_V1ALPHA1, "example-at"]).await;
    let row = out.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("PENDING") && row.contains("InvalidSpec"),
        "{out}"
    );
    let yaml = k
        .ok(&["get", AT_V1ALPHA1, "example-at", "-o", "yaml"])
        .await;
    assert!(
        yaml.contains("kind: At") && yaml.contains("schedule:"),
        "{yaml}"
    );

    // get -w sees a change made through the API.
    let mut watch = k.command(&["get", "ats", "-w"]);
    watch.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = watch.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert!(first.unwrap_or_default().contains("NAME"));
    // Wait until the watch is registered before changing anything.
    while server.request_log().count("watch", "ats") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = api
        .patch(
            &format!("{ATS}/example-at/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "RUNNING"}}),
        )
        .await;
    assert_eq!(r.code, 200);
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("RUNNING") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    assert!(seen, "kubectl get -w did not show the change");
    child.kill().await.unwrap();

    // patch --type=merge and patch --subresource=status. The book's example is a v1alpha1
    // object, and `at` means the preferred version, v1 (spec.run.command): the fully
    // qualified resource names the version whose shape the patch has.
    k.ok(&[
        "patch",
        AT_V1ALPHA1,
        "example-at",
        "--type=merge",
        "-p",
        r#"{"spec":{"command":"echo patched"}}"#,
    ])
    .await;
    let got = api.get(&format!("{ATS}/example-at")).await;
    assert_eq!(got.body["spec"]["command"], "echo patched");
    assert_eq!(got.body["metadata"]["generation"], 2);
    k.ok(&[
        "patch",
        AT_V1ALPHA1,
        "example-at",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"DONE"}}"#,
    ])
    .await;

    // wait --for=jsonpath.
    k.ok(&[
        "wait",
        "--for=jsonpath={.status.phase}=DONE",
        "ats.v1alpha1.cnat.programming-kubernetes.info/example-at",
        "--timeout=30s",
    ])
    .await;

    // describe lists events about the object.
    let uid = got.body["metadata"]["uid"].as_str().unwrap();
    let ev = api
        .post(
            "/api/v1/namespaces/default/events",
            &json!({"metadata": {"name": "example-at.1"},
                "involvedObject": {"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
                                   "name": "example-at", "namespace": "default", "uid": uid},
                "reason": "PhaseChange", "message": "phase changed to DONE", "type": "Normal",
                "source": {"component": "cnat-controller"}, "count": 1,
                "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:00Z"}),
        )
        .await;
    assert_eq!(ev.code, 201, "{:?}", ev.body);
    let out = k.ok(&["describe", AT_V1ALPHA1, "example-at"]).await;
    assert!(
        out.contains("PhaseChange") && out.contains("phase changed to DONE"),
        "{out}"
    );

    // delete waits for a finalizer to be removed.
    api.patch(
        &format!("{ATS}/example-at"),
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": ["cnat.programming-kubernetes.info/cleanup"]}}),
    )
    .await;
    let mut del = k.command(&["delete", AT_V1ALPHA1, "example-at", "--timeout=60s"]);
    del.stdout(Stdio::piped()).stderr(Stdio::piped());
    let del = del.spawn().unwrap();
    loop {
        let now = api.get(&format!("{ATS}/example-at")).await;
        if now.body["metadata"]["deletionTimestamp"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // kubectl is now waiting; the object stays until the finalizer goes.
    assert_eq!(api.get(&format!("{ATS}/example-at")).await.code, 200);
    api.patch(
        &format!("{ATS}/example-at"),
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(60), del.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted"));
    assert_eq!(api.get(&format!("{ATS}/example-at")).await.code, 404);

    // apply --server-side.
    let out = k
        .ok(&[
            "apply",
            "--server-side",
            "-f",
            "artifacts/examples/cnat-example.yaml",
        ])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let out = k
        .ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "artifacts/examples/foo.yaml",
        ])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");

    // create namespace / configmap: typed writes, protobuf bodies from kubectl 1.32 on.
    k.ok(&["create", "namespace", "cnat"]).await;
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "cnat",
        "--from-literal=color=blue",
    ])
    .await;
    let cm = api.get("/api/v1/namespaces/cnat/configmaps/settings").await;
    assert_eq!(cm.code, 200);
    assert_eq!(cm.body["data"]["color"], "blue");
    let ns = k
        .ok(&["get", "ns", "cnat", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(ns, "Active");

    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_1_28() {
    scenario(Some("1.28")).await;
}

#[tokio::test]
async fn kubectl_1_30() {
    scenario(Some("1.30")).await;
}

#[tokio::test]
async fn kubectl_1_33() {
    scenario(Some("1.33")).await;
}

#[tokio::test]
async fn kubectl_on_path() {
    scenario(None).await;
}

/// `kubectl scale` drives RedisCluster (`spec.size`), MyApp and Foo (`spec.replicas`) through
/// their CRDs' scale subresource, as it drives a Deployment.
#[tokio::test]
async fn kubectl_scale_works_on_the_custom_resources_with_a_replica_count() {
    let Some(bin) = kubectl_bin(None) else {
        eprintln!("SKIPPED: kubectl not found on PATH");
        return;
    };
    let server = start().await;
    let k = Kubectl::with_bin(bin, &server);
    k.ok(&["apply", "-f", "artifacts/crds/"]).await;
    for (file, resource, path, from) in [
        (
            "rediscluster.yaml",
            "rediscluster/example-rediscluster",
            "{.spec.size}",
            "3",
        ),
        ("myapp.yaml", "myapp/example-myapp", "{.spec.replicas}", "2"),
        ("foo.yaml", "foo/example-foo", "{.spec.replicas}", "1"),
    ] {
        k.ok(&["apply", "-f", &format!("artifacts/examples/{file}")])
            .await;
        assert_eq!(
            k.ok(&["get", resource, "-o", &format!("jsonpath={path}")])
                .await,
            from
        );
        let out = k.ok(&["scale", resource, "--replicas", "5"]).await;
        assert!(out.contains("scaled"), "{out}");
        assert_eq!(
            k.ok(&["get", resource, "-o", &format!("jsonpath={path}")])
                .await,
            "5",
            "{resource}"
        );
        // The Scale object itself, as an HPA reads it.
        let scale = k
            .ok(&[
                "get",
                resource,
                "--subresource=scale",
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .await;
        assert_eq!(scale, "5", "{resource}");
    }
    server.shutdown().await;
}

/// Server-side apply conflicts with every manager, `Update` ones included, as kube-apiserver's
/// field manager reports them: after `kubectl create` (manager `kubectl-create`) and a merge
/// patch (`kubectl-patch`), an apply that changes their fields is refused with a 409 naming
/// each manager and its API version, and `--force-conflicts` moves the ownership.
#[tokio::test]
async fn server_side_apply_conflicts_with_update_managers() {
    let Some(bin) = kubectl_bin(None) else {
        eprintln!("SKIPPED: kubectl not found on PATH");
        return;
    };
    let server = start().await;
    let api = TestClient::new(&server);
    let k = Kubectl::with_bin(bin, &server);
    k.ok(&["create", "configmap", "x", "--from-literal=k=1"])
        .await;
    k.ok(&[
        "patch",
        "configmap",
        "x",
        "--type=merge",
        "-p",
        r#"{"data":{"m":"1"}}"#,
    ])
    .await;
    let applied = k.home().join("x.yaml");
    std::fs::write(
        &applied,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  k: \"2\"\n",
    )
    .unwrap();
    let file = applied.to_str().unwrap();
    let out = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=ssa-test",
            "-f",
            file,
        ])
        .await;
    assert!(
        !out.ok,
        "the apply changed kubectl-create's field without --force-conflicts"
    );
    assert!(
        out.stderr
            .contains(r#"conflict with "kubectl-create" using v1: .data.k"#),
        "{}",
        out.stderr
    );
    // The same value is no conflict: both managers own the field.
    std::fs::write(
        &applied,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  k: \"1\"\n  m: \"2\"\n",
    )
    .unwrap();
    let out = k
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=ssa-test",
            "-f",
            file,
        ])
        .await;
    assert!(!out.ok, "the apply changed kubectl-patch's field");
    assert!(
        out.stderr
            .contains(r#"conflict with "kubectl-patch" using v1: .data.m"#),
        "{}",
        out.stderr
    );
    let out = k
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=ssa-test",
            "--force-conflicts",
            "-f",
            file,
        ])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let cm = api.get("/api/v1/namespaces/default/configmaps/x").await;
    assert_eq!(cm.body["data"], json!({"k": "1", "m": "2"}));
    let entries = cm.body["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .clone();
    let fields_of = |manager: &str, operation: &str| {
        entries
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
            .map(|e| e["fieldsV1"]["f:data"].clone())
    };
    // The applier owns both fields; the patcher lost `m`, so its entry is gone; kubectl-create
    // keeps `k`, which the apply set to the value it already had.
    assert_eq!(
        fields_of("ssa-test", "Apply"),
        Some(json!({"f:k": {}, "f:m": {}}))
    );
    assert_eq!(fields_of("kubectl-patch", "Update"), None);
    assert_eq!(
        fields_of("kubectl-create", "Update"),
        Some(json!({"f:k": {}}))
    );
    server.shutdown().await;
}
