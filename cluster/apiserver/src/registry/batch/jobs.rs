//! batch/v1 Jobs: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/batch/job/strategy.go` does.
//!
//! On create (`jobStrategy.PrepareForCreate`, with `SetDefaults_Job` applied at the same time:
//! the real server applies it whenever it decodes a Job) the status is cleared and:
//!
//! * `parallelism` and `completions` default to 1 (both, when neither is set; `parallelism`
//!   alone otherwise), `backoffLimit` to 6, `completionMode` to `NonIndexed`, `suspend` to
//!   `false`, `podReplacementPolicy` to `TerminatingOrFailed` (without a `podFailurePolicy`),
//!   `manualSelector` stays unset;
//! * without `manualSelector: true` the selector is generated (`generateSelector`): the labels
//!   `batch.kubernetes.io/controller-uid` and `controller-uid` (the Job's uid),
//!   `batch.kubernetes.io/job-name` and `job-name` go into the pod template, and
//!   `spec.selector` becomes `matchLabels: {batch.kubernetes.io/controller-uid: <uid>}`.
//!
//! Running the Job's pods is the Job controller's, in the controller manager.

use serde_json::{Value, json};

use crate::api::object_meta::meta_str;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::{Strategy, clear_status};

/// The strategy of `jobs` (see the module docs).
#[derive(Debug, Default)]
pub struct JobStrategy;

impl Strategy for JobStrategy {
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        clear_status(def, obj);
        set_defaults_and_selector(obj);
    }
}

/// Defaults and the generated selector of a new Job (see the module docs).
fn set_defaults_and_selector(obj: &mut Value) {
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
