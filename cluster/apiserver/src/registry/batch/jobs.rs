//! batch/v1 Jobs: their defaults and selector at create, and a simulated Job controller.
//!
//! ## Create (the Job REST strategy and `SetDefaults_Job`)
//!
//! `parallelism` and `completions` default to 1 (both, when neither is set; `parallelism`
//! alone otherwise), `backoffLimit` to 6, `completionMode` to `NonIndexed`, `suspend` to
//! `false`, `podReplacementPolicy` to `TerminatingOrFailed`, `manualSelector` stays unset.
//! Without `manualSelector: true` the selector is generated (`generateSelector`): the labels
//! `batch.kubernetes.io/controller-uid` and `controller-uid` (the Job's uid),
//! `batch.kubernetes.io/job-name` and `job-name` go into the pod template, and `spec.selector`
//! becomes `matchLabels: {batch.kubernetes.io/controller-uid: <uid>}`.
//!
//! ## The controller (with [`crate::ApiServerBuilder::simulate`])
//!
//! Like kube-controller-manager's Job controller, for each Job that is neither suspended nor
//! finished: it counts the pods it controls (`Succeeded`, `Failed`, active), creates pods named
//! `<job>-<random>` from the template (with the controller labels and a controlling
//! `ownerReference`) until `min(parallelism, completions - succeeded)` are active, and writes
//! `status` (`startTime`, `active`, `ready`, `succeeded`, `failed`, `terminating`,
//! `uncountedTerminatedPods`). Once `succeeded` reaches `completions` the Job gets the
//! conditions `SuccessCriteriaMet` and `Complete` (reason `CompletionsReached`) and a
//! `completionTime`; once more than `backoffLimit` pods failed, `FailureTarget` and `Failed`
//! (reason `BackoffLimitExceeded`, `Job has reached the specified backoff limit`) and its active
//! pods are deleted. The simulated node ([`crate::kubelet`], [`crate::runtime`]) runs the pods.
//! Left out: indexed completion mode, pod failure policies, `activeDeadlineSeconds`,
//! `ttlSecondsAfterFinished`, the job-tracking finalizer and backoff delays between retries.

use serde_json::{Value, json};

use crate::api::object_meta::meta_str;
use crate::registry::resources::ResourceDef;

fn is_job(def: &ResourceDef) -> bool {
    def.group == "batch" && def.plural == "jobs" && def.custom.is_none()
}

/// Defaults and the generated selector of a new Job (see the module docs).
pub fn prepare_create(def: &ResourceDef, obj: &mut Value) {
    if !is_job(def) {
        return;
    }
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let uid = meta_str(obj, "uid").to_owned();
    let name = meta_str(obj, "name").to_owned();
    let spec = &mut obj["spec"];
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    if spec["parallelism"].is_null() {
        spec["parallelism"] = json!(1);
    }
    if spec["backoffLimit"].is_null() {
        spec["backoffLimit"] = json!(6);
    }
    if spec["completionMode"].is_null() {
        spec["completionMode"] = json!("NonIndexed");
    }
    if spec["suspend"].is_null() {
        spec["suspend"] = json!(false);
    }
    if spec["podReplacementPolicy"].is_null() && spec["podFailurePolicy"].is_null() {
        spec["podReplacementPolicy"] = json!("TerminatingOrFailed");
    }
    if spec["manualSelector"] == json!(true) {
        return;
    }
    if !spec["template"]["metadata"].is_object() {
        spec["template"]["metadata"] = json!({});
    }
    if !spec["template"]["metadata"]["labels"].is_object() {
        spec["template"]["metadata"]["labels"] = json!({});
    }
    let labels = &mut spec["template"]["metadata"]["labels"];
    labels["batch.kubernetes.io/controller-uid"] = json!(uid);
    labels["batch.kubernetes.io/job-name"] = json!(name);
    labels["controller-uid"] = json!(uid);
    labels["job-name"] = json!(name);
    spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
}
