//! The manager as the deployment manifests' pods, without Helm: `kubectl apply` of the CRDs and
//! of `kubectl kustomize artifacts/deploy/` (the objects the Helm chart renders with its default
//! values, as tests/helm checks) against a cluster whose process node runs the image
//! `sample-controller:dev` as this build's binary (`ClusterBuilder::image_binary`, standalone
//! `--image-binary`), RBAC enforced. The Deployment's ReplicaSet's two pods are the manager's
//! processes under the manifests' ServiceAccount: the leader's Lease names one of them, an At
//! goes DONE without a 403, a refusal the pods log names `system:serviceaccount:...`, and
//! deleting the Deployment stops them.
//!
//! One change to the manifests: the two listen addresses become `0` (off) and the probes go,
//! because the process node's pods share the host's ports (two replicas, and tests running side
//! by side, cannot all bind :8443 and :8081). tests/helm covers the same with real Helm.

use crate::support::apiserver::{TestClient, at};
use crate::support::cluster::*;

use embedded_cluster::{Cluster, ClusterHandle, NodeRuntime};
use serde_json::{Value, json};

const NAMESPACE: &str = "sample-controller";
const NAME: &str = "sample-controller";
const USER: &str = "system:serviceaccount:sample-controller:sample-controller";

/// The objects of `kubectl kustomize artifacts/deploy`, the Deployment's ports off.
async fn manifests(kubectl: &Kubectl) -> String {
    let built = kubectl.ok(&["kustomize", "artifacts/deploy"]).await;
    let mut docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&built)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|d: &Value| !d.is_null())
        .collect();
    let deployment = docs
        .iter_mut()
        .find(|d| d["kind"] == "Deployment")
        .expect("artifacts/deploy has a Deployment");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "sample-controller:dev");
    let args: Vec<Value> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| *a != "--metrics-secure")
        .map(|a| match a.as_str().and_then(|s| s.split_once('=')) {
            Some((flag @ ("--metrics-bind-address" | "--health-probe-bind-address"), _)) => {
                json!(format!("{flag}=0"))
            }
            _ => a.clone(),
        })
        .collect();
    container["args"] = json!(args);
    let c = container.as_object_mut().unwrap();
    c.remove("livenessProbe");
    c.remove("readinessProbe");
    c.remove("ports");
    docs.iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn controller_of(obj: &Value) -> Option<(String, String)> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_owned(),
                r["uid"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// The pods the ReplicaSet with `rs_uid` controls.
fn pods_of(h: &ClusterHandle, rs_uid: &str) -> Vec<Value> {
    h.store().read(|s| {
        s.list("core/pods", Some(NAMESPACE))
            .into_iter()
            .filter(|p| controller_of(p) == Some(("ReplicaSet".into(), rs_uid.to_owned())))
            .cloned()
            .collect()
    })
}

async fn logs(api: &TestClient, pods: &[String]) -> String {
    let mut all = String::new();
    for p in pods {
        let a = api
            .get(&format!("/api/v1/namespaces/{NAMESPACE}/pods/{p}/log"))
            .await;
        match a.body {
            Value::String(text) => all.push_str(&text),
            // One JSON line parses as an object; its text is what the pod printed.
            other => all.push_str(&other.to_string()),
        }
    }
    all
}

#[tokio::test]
async fn the_deploy_manifests_run_the_manager_as_pods_under_their_service_account() {
    let h = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .enforce_rbac(true)
        .root_ca_publisher(true)
        .image_binary(
            "sample-controller:dev",
            env!("CARGO_BIN_EXE_sample-controller"),
        )
        .start()
        .await
        .unwrap();
    let Some(kubectl) = Kubectl::new(&h) else {
        h.shutdown().await;
        return;
    };
    kubectl.ok(&["apply", "-f", "artifacts/crds/"]).await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ])
        .await;
    let objects = manifests(&kubectl).await;
    let applied = kubectl
        .run_with_input(&["apply", "-f", "-"], Some(&objects))
        .await;
    assert!(applied.ok, "{}\n{}", applied.stdout, applied.stderr);
    let deployment = get(&h, "apps/deployments", NAMESPACE, NAME).expect("the Deployment");
    let deployment_uid = deployment["metadata"]["uid"].as_str().unwrap().to_owned();

    // Deployment -> ReplicaSet -> two pods running as processes.
    wait_until(&h, "the Deployment's ReplicaSet", |s| {
        s.list("apps/replicasets", Some(NAMESPACE))
            .iter()
            .any(|rs| controller_of(rs) == Some(("Deployment".into(), deployment_uid.clone())))
    })
    .await;
    let rs = h.store().read(|s| {
        let owned: Vec<Value> = s
            .list("apps/replicasets", Some(NAMESPACE))
            .into_iter()
            .filter(|rs| controller_of(rs) == Some(("Deployment".into(), deployment_uid.clone())))
            .cloned()
            .collect();
        assert_eq!(owned.len(), 1);
        owned[0].clone()
    });
    let rs_uid = rs["metadata"]["uid"].as_str().unwrap().to_owned();
    wait_until(&h, "two pods running as processes", |s| {
        s.list("core/pods", Some(NAMESPACE))
            .iter()
            .filter(|p| controller_of(p) == Some(("ReplicaSet".into(), rs_uid.clone())))
            .filter(|p| p["status"]["phase"] == "Running")
            .filter(|p| {
                p["status"]["containerStatuses"][0]["containerID"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("process://"))
            })
            .count()
            == 2
    })
    .await;
    let pods = pods_of(&h, &rs_uid);
    let names: Vec<String> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for p in &pods {
        assert_eq!(p["spec"]["serviceAccountName"], NAME);
    }

    // The leader is one of the pods (its identity: the pod's host name and a suffix).
    wait_until(&h, "the leader's Lease", |s| {
        s.get("coordination.k8s.io/leases", NAMESPACE, NAME)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
            .is_some_and(|holder| {
                names
                    .iter()
                    .any(|n| holder.rsplit_once('_').is_some_and(|(host, _)| host == n))
            })
    })
    .await;

    let api = TestClient::new(&h);
    let created = api
        .post(crate::support::apiserver::ATS, &at("in-pod"))
        .await;
    assert_eq!(created.code, 201, "{}", created.body);
    wait_until(&h, "At in-pod DONE", |s| {
        s.get("cnat.programming-kubernetes.info/ats", "default", "in-pod")
            .is_some_and(|a| a["status"]["phase"] == "DONE")
    })
    .await;
    let refused = h.request_log().count_where(|k| k.code == 403);
    assert_eq!(refused, 0, "{}", logs(&api, &names).await);

    // Whose requests they were: without the ClusterRoleBinding the next write is refused and
    // the pods log the refusal, naming the user.
    kubectl.ok(&["delete", "clusterrolebinding", NAME]).await;
    let created = api
        .post(crate::support::apiserver::ATS, &at("refused"))
        .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let needle = format!("User \\\"{USER}\\\" cannot");
    let mut seen = String::new();
    for _ in 0..600 {
        seen = logs(&api, &names).await;
        if seen.contains(&needle) || seen.contains(&format!("User \"{USER}\" cannot")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        seen.contains(&needle) || seen.contains(&format!("User \"{USER}\" cannot")),
        "{seen}"
    );

    // Deleting the Deployment stops the pods (gone only once their processes are).
    kubectl
        .ok(&["delete", "deployment", NAME, "-n", NAMESPACE, "--wait=true"])
        .await;
    wait_until(&h, "the manager's pods gone", |s| {
        s.list("core/pods", Some(NAMESPACE)).is_empty()
    })
    .await;
    h.shutdown().await;
}
