//! Creating and deleting what a controller owns: controller references, pods from a
//! template, deletes with a UID precondition, and the pod predicates every workload
//! controller shares.
//!
//! kube-controller-manager's workload controllers share `pkg/controller/controller_utils.go`:
//! `PodControl` creates pods from a template (`GetPodFromTemplate`: the template's labels,
//! annotations, finalizers and spec, `generateName: <owner>-` unless the controller names the
//! pod, and a **controller reference**, `metav1.NewControllerRef`: the owner's `apiVersion`,
//! `kind`, `name`, `uid`, `controller: true`, `blockOwnerDeletion: true`), so the garbage collector
//! deletes the pod with its owner and no second controller adopts it; deletes go with a UID
//! precondition, so a newer object that took the same name is never removed by mistake; and
//! `IsPodActive` / `IsPodReady` / `IsPodAvailable` say which pods count. The Job, CronJob,
//! ReplicationController, DaemonSet, StatefulSet and ReplicaSet controllers here do the same
//! through these functions (the Deployment controller uses its references), over the
//! loopback interface: every create and delete is a client's request, through admission and
//! validation.

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{DeleteParams, Loopback, Resource};
use serde_json::{Value, json};

use crate::informer::{is_deleting, meta_str};

/// The `ownerReferences` entry naming `owner` (an `api_version` `kind`) as the controller.
pub fn controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": meta_str(owner, "name"),
        "uid": meta_str(owner, "uid"), "controller": true, "blockOwnerDeletion": true,
    })
}

/// A pod made from `owner`'s `spec.template` (`GetPodFromTemplate`: its labels, annotations,
/// finalizers and spec), controlled by it: `generateName: <owner>-`; the caller may name it,
/// add labels and change the spec.
pub fn pod_from_template(owner: &Value, api_version: &str, kind: &str) -> Value {
    let template = &owner["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    let mut metadata = json!({
        "generateName": format!("{}-", meta_str(owner, "name")),
        "namespace": meta_str(owner, "namespace"),
        "labels": labels,
        "ownerReferences": [controller_ref(owner, api_version, kind)],
    });
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(a);
    }
    if let Some(f) = template["metadata"]["finalizers"].as_array() {
        metadata["finalizers"] = json!(f);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

/// Creates `pod` in its namespace; the stored pod.
pub async fn create_pod(lb: &Loopback, pod: Value) -> Result<Value, ApiError> {
    let ns = meta_str(&pod, "namespace").to_owned();
    lb.create(&Resource::core("pods"), &ns, pod).await
}

/// Deletes `obj` of `resource` if its UID is still the one it has, with `propagation`
/// (`None`: the resource's default). Already gone counts as done.
pub async fn delete(
    lb: &Loopback,
    resource: &Resource,
    obj: &Value,
    propagation: Option<&str>,
) -> Result<(), ApiError> {
    let params = DeleteParams {
        uid: Some(meta_str(obj, "uid").to_owned()),
        propagation_policy: propagation.map(str::to_owned),
        ..Default::default()
    };
    match lb
        .delete(
            resource,
            meta_str(obj, "namespace"),
            meta_str(obj, "name"),
            &params,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Not finished and not being deleted (`controller.IsPodActive`).
pub fn is_active(p: &Value) -> bool {
    !is_deleting(p) && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// A `Ready=True` condition (`podutil.IsPodReady`).
pub fn is_ready(p: &Value) -> bool {
    ready_since(p).is_some()
}

/// The pod's `Ready=True` condition, if it has one.
fn ready_since(p: &Value) -> Option<&Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Ready for at least `min_ready_seconds` at `now` (`podutil.IsPodAvailable`: the `Ready`
/// condition's `lastTransitionTime` plus `minReadySeconds` is not after `now`).
pub fn is_available(p: &Value, min_ready_seconds: i64, now: jiff::Timestamp) -> bool {
    let Some(c) = ready_since(p) else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    let Some(since) = c["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return false;
    };
    since
        .checked_add(jiff::SignedDuration::from_secs(min_ready_seconds))
        .is_ok_and(|t| t <= now)
}

/// Running and Ready (what a StatefulSet waits for before the next ordinal).
pub fn is_running_and_ready(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && is_ready(p)
}

/// Sets `key` to `n`, or removes it when `n` is zero (Go's `omitempty`).
pub fn set_count(status: &mut Value, key: &str, n: i64) {
    if n != 0 {
        status[key] = json!(n);
    } else if let Some(o) = status.as_object_mut() {
        o.remove(key);
    }
}

/// Writes `status` into `obj` through the `status` subresource when it differs from the
/// stored one (conditional on the object's resourceVersion: 409 when it moved on).
pub async fn update_status(
    lb: &Loopback,
    resource: &Resource,
    obj: &Value,
    status: Value,
) -> Result<(), ApiError> {
    if obj["status"] == status {
        return Ok(());
    }
    let mut updated = obj.clone();
    updated["status"] = status;
    lb.update_status(resource, meta_str(obj, "namespace"), updated)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_from_a_template_is_controlled_by_its_owner() {
        let owner = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let pod = pod_from_template(&owner, "apps/v1", "DaemonSet");
        assert!(pod["metadata"].get("finalizers").is_none());
        assert_eq!(pod["metadata"]["generateName"], "web-");
        assert_eq!(pod["metadata"]["namespace"], "ns");
        assert_eq!(pod["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(pod["metadata"]["annotations"], json!({"a": "b"}));
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "web", "uid": "u1",
                    "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "i");
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert!(is_available(&p, 0, at("2024-01-01T00:00:00Z")));
        assert!(!is_available(&p, 10, at("2024-01-01T00:00:09Z")));
        assert!(is_available(&p, 10, at("2024-01-01T00:00:10Z")));
        let unready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert!(!is_available(&unready, 0, at("2024-01-01T00:00:00Z")));
    }

    #[test]
    fn template_finalizers_are_copied() {
        let owner = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"metadata": {"finalizers": ["example.com/keep"]}, "spec": {}}}});
        let pod = pod_from_template(&owner, "apps/v1", "ReplicaSet");
        assert_eq!(pod["metadata"]["finalizers"], json!(["example.com/keep"]));
    }

    #[test]
    fn zero_counts_are_omitted() {
        let mut s = json!({"replicas": 3});
        set_count(&mut s, "replicas", 0);
        set_count(&mut s, "readyReplicas", 2);
        assert_eq!(s, json!({"readyReplicas": 2}));
    }
}
