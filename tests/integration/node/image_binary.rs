//! `ClusterBuilder::image_binary` (standalone: `--image-binary IMAGE=PATH`): a container of a
//! mapped image without `command` runs the host binary as its image's entrypoint, with
//! `$(VAR)` references expanded, `fieldRef` variables, `KUBERNETES_SERVICE_HOST`/`_PORT`, and
//! its ServiceAccount's token, CA and namespace mounted, so a client in the pod (here the real
//! kubectl) authenticates as `system:serviceaccount:<namespace>:<name>` under RBAC.

use crate::support::apiserver::TestClient;
use crate::support::cluster::*;

use embedded_cluster::{Cluster, ClusterHandle, NodeRuntime};
use http_body_util::BodyExt;
use serde_json::{Value, json};

async fn cluster(kubectl: Option<&std::path::Path>) -> ClusterHandle {
    let mut b = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .enforce_rbac(true)
        .image_binary("shell:test", "/bin/sh");
    if let Some(k) = kubectl {
        b = b.image_binary("kubectl:test", k);
    }
    b.start().await.unwrap()
}

/// A one-shot pod of `image` with `args` only (no `command`).
fn image_pod(name: &str, image: &str, args: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": image, "args": args}]},
    })
}

/// A pod running kubectl with `args`, its discovery cache in an `emptyDir` (the process's
/// `HOME` is `/`, where it must not write).
fn kubectl_pod(name: &str, args: Value) -> Value {
    let mut p = image_pod(name, "kubectl:test", args);
    p["spec"]["volumes"] = json!([{"name": "cache", "emptyDir": {}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "cache", "mountPath": "/cache"}]);
    p["spec"]["containers"][0]["env"] = json!([{"name": "KUBECACHEDIR", "value": "/cache"}]);
    p
}

async fn log(h: &ClusterHandle, name: &str) -> String {
    let resp = TestClient::new(h)
        .raw(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}/log"),
            &[],
            vec![],
            true,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn default_service_account(h: &ClusterHandle) {
    wait_until(h, "the default ServiceAccount", |s| {
        s.get("core/serviceaccounts", "default", "default")
            .is_some()
    })
    .await;
}

#[tokio::test]
async fn a_mapped_image_runs_its_binary_with_the_pods_environment_and_token() {
    let h = cluster(None).await;
    default_service_account(&h).await;
    let mut p = image_pod(
        "env",
        "shell:test",
        json!([
            "-c",
            "echo $(POD_NAMESPACE) '$(MISSING)' $$HOME $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; \
                cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo; \
                test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token; \
                grep -c 'BEGIN CERTIFICATE' /var/run/secrets/kubernetes.io/serviceaccount/ca.crt; \
                test -f \"$KUBECONFIG\" && echo kubeconfig"
        ]),
    );
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]);
    create(&h, "", "pods", "default", p);
    let done = wait_phase(&h, "default", "env", "Succeeded").await;
    assert_eq!(
        done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );
    let port = h.url().rsplit(':').next().unwrap().to_owned();
    assert_eq!(
        log(&h, "env").await,
        format!("default $(MISSING) / 127.0.0.1:{port}\ndefault\ntoken\n1\nkubeconfig\n")
    );
    let pulled = h.store().read(|s| {
        s.list("core/events", Some("default"))
            .iter()
            .filter(|e| e["involvedObject"]["name"] == "env" && e["reason"] == "Pulled")
            .filter_map(|e| e["message"].as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    });
    assert!(
        pulled.iter().any(|m| m.contains("runs /bin/sh for it")),
        "{pulled:?}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn a_client_in_the_pod_is_its_service_account_under_rbac() {
    let Some(kubectl) = kubectl_bin(None) else {
        eprintln!("SKIPPED: kubectl not found on the PATH");
        return;
    };
    let h = cluster(Some(&kubectl)).await;
    default_service_account(&h).await;
    create(
        &h,
        "",
        "pods",
        "default",
        kubectl_pod(
            "whoami",
            json!([
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}"
            ]),
        ),
    );
    // Listing secrets is not granted to the ServiceAccount: RBAC refuses it.
    create(
        &h,
        "",
        "pods",
        "default",
        kubectl_pod("secrets", json!(["get", "secrets"])),
    );
    wait_phase(&h, "default", "whoami", "Succeeded").await;
    assert_eq!(
        log(&h, "whoami").await,
        "system:serviceaccount:default:default"
    );
    wait_phase(&h, "default", "secrets", "Failed").await;
    let refused = log(&h, "secrets").await;
    assert!(
        refused
            .contains("\"system:serviceaccount:default:default\" cannot list resource \"secrets\""),
        "{refused}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn without_a_service_account_or_with_automount_off_no_token_is_mounted() {
    let h = cluster(None).await;
    default_service_account(&h).await;
    let script = json!([
        "-c",
        "echo ${KUBECONFIG:-none}; \
        test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token"
    ]);
    let mut ghost = image_pod("ghost", "shell:test", script.clone());
    ghost["spec"]["serviceAccountName"] = json!("ghost");
    create(&h, "", "pods", "default", ghost);
    let mut off = image_pod("off", "shell:test", script);
    off["spec"]["automountServiceAccountToken"] = json!(false);
    create(&h, "", "pods", "default", off);
    for name in ["ghost", "off"] {
        wait_phase(&h, "default", name, "Succeeded").await;
        assert_eq!(log(&h, name).await, "none\nno-token\n", "{name}");
    }
    let warnings: Vec<(String, String)> = h.store().read(|s| {
        s.list("core/events", Some("default"))
            .iter()
            .filter(|e| e["reason"] == "FailedMount")
            .map(|e| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (text(&e["involvedObject"]["name"]), text(&e["message"]))
            })
            .collect()
    });
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "ghost");
    assert!(
        warnings[0]
            .1
            .contains("serviceaccounts \"ghost\" not found"),
        "{warnings:?}"
    );
    h.shutdown().await;
}
