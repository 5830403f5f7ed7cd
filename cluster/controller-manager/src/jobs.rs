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
//! ## The controller (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
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
//! pods are deleted. The simulated node (the node's `kubelet` module (crate `embedded-node`), the node's `runtime` module (crate `embedded-node`)) runs the pods.
//! Left out: indexed completion mode, pod failure policies, `activeDeadlineSeconds`,
//! `ttlSecondsAfterFinished`, the job-tracking finalizer and backoff delays between retries.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed};
use super::owned;
use embedded_apiserver::meta::{self, meta_str};
use embedded_apiserver::store::{State, Store};

const JOBS: &str = "batch/jobs";
const PODS: &str = "core/pods";

/// Starts the Job controller.
pub fn spawn(store: Arc<Store>, shutdown: CancellationToken, tracker: &TaskTracker) {
    tracker.spawn(async move {
        let mut feed = ChangeFeed::new(store.clone());
        sync_all(&store);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = feed.changed() => {}
            }
            loop {
                let keys: Vec<(String, String)> = match feed.poll() {
                    Batch::Changes(changes) if changes.is_empty() => break,
                    Batch::Changes(changes) => changes
                        .iter()
                        .filter_map(|c| match c.storage.as_str() {
                            JOBS => Some((
                                meta_str(&c.object, "namespace").to_owned(),
                                meta_str(&c.object, "name").to_owned(),
                            )),
                            PODS => controller_job(&c.object)
                                .map(|j| (meta_str(&c.object, "namespace").to_owned(), j)),
                            _ => None,
                        })
                        .collect(),
                    Batch::Resync => {
                        sync_all(&store);
                        continue;
                    }
                };
                let mut keys = keys;
                keys.sort();
                keys.dedup();
                if !keys.is_empty() {
                    store.write(|st| {
                        for (ns, name) in &keys {
                            sync(st, ns, name);
                        }
                    });
                }
                tokio::task::yield_now().await;
            }
        }
    });
}

fn sync_all(store: &Store) {
    store.write(|st| {
        let keys: Vec<(String, String)> = st
            .list(JOBS, None)
            .iter()
            .map(|j| {
                (
                    meta_str(j, "namespace").to_owned(),
                    meta_str(j, "name").to_owned(),
                )
            })
            .collect();
        for (ns, name) in keys {
            sync(st, &ns, &name);
        }
    });
}

/// The Job that controls `pod`, by its controller reference.
fn controller_job(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == "Job")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

fn has_condition(job: &Value, ty: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == ty && c["status"] == "True"))
}

fn condition(ty: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": ty, "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
           "reason": reason, "message": message})
}

/// One pass of the Job controller over one Job: counts its pods, then marks it complete or
/// failed, or creates the pods it is missing, and writes the status if it changed.
fn sync(st: &mut State, ns: &str, name: &str) {
    let Some(job) = st.get(JOBS, ns, name).cloned() else {
        return;
    };
    if !meta_str(&job, "deletionTimestamp").is_empty()
        || has_condition(&job, "Complete")
        || has_condition(&job, "Failed")
        || job["spec"]["suspend"] == json!(true)
    {
        return;
    }
    let uid = meta_str(&job, "uid").to_owned();
    let pods = owned::controlled_pods(st, ns, &uid);
    let PodCounts {
        succeeded,
        failed,
        terminating,
        active,
        ready,
    } = PodCounts::of(&pods);
    let spec = &job["spec"];
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let completions = spec["completions"].as_i64();
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let now = meta::now_time();
    let mut status = job["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    if status["startTime"].is_null() {
        status["startTime"] = json!(now);
    }
    let mut active_count = active.len() as i64;
    let done = match completions {
        Some(c) => succeeded >= c,
        // Without completions: done once any pod succeeded and none is active.
        None => succeeded > 0 && active.is_empty(),
    };
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    if done {
        conditions.push(condition(
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        conditions.push(condition(
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            &now,
        ));
        status["completionTime"] = json!(now);
    } else if failed > backoff_limit {
        let message = "Job has reached the specified backoff limit";
        conditions.push(condition(
            "FailureTarget",
            "BackoffLimitExceeded",
            message,
            &now,
        ));
        conditions.push(condition("Failed", "BackoffLimitExceeded", message, &now));
        for p in &active {
            delete_pod(st, ns, meta_str(p, "name"), meta_str(p, "uid"));
        }
        active_count = 0;
    } else {
        let wanted = match completions {
            Some(c) => parallelism.min(c - succeeded),
            None => parallelism,
        };
        let missing = (wanted - active_count).max(0);
        for _ in 0..missing {
            if create_pod(st, &job) {
                active_count += 1;
            }
        }
    }
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    status["active"] = json!(active_count);
    status["ready"] = json!(ready);
    status["succeeded"] = json!(succeeded);
    status["failed"] = json!(failed);
    status["terminating"] = json!(terminating);
    status["uncountedTerminatedPods"] = json!({});
    for (k, zero) in [("active", 0), ("succeeded", 0), ("failed", 0)] {
        // Go omits zero counts (`omitempty`).
        if status[k] == json!(zero)
            && let Some(o) = status.as_object_mut()
        {
            o.remove(k);
        }
    }
    if status == job["status"] {
        return;
    }
    let mut updated = job.clone();
    updated["status"] = status;
    st.update(JOBS, updated);
}

/// A Job's pods counted the way its status reports them.
struct PodCounts<'a> {
    succeeded: i64,
    failed: i64,
    /// Being deleted and not finished.
    terminating: i64,
    /// Not being deleted and not finished.
    active: Vec<&'a Value>,
    /// The active ones with a `Ready` condition.
    ready: i64,
}

impl<'a> PodCounts<'a> {
    /// Counts the pods by phase and by whether they are being deleted.
    fn of(pods: &'a [Value]) -> Self {
        let phase = |p: &Value| p["status"]["phase"].as_str().unwrap_or_default().to_owned();
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i64;
        let terminating = pods
            .iter()
            .filter(|p| {
                !meta_str(p, "deletionTimestamp").is_empty()
                    && !matches!(phase(p).as_str(), "Succeeded" | "Failed")
            })
            .count() as i64;
        let active: Vec<&Value> = pods
            .iter()
            .filter(|p| {
                meta_str(p, "deletionTimestamp").is_empty()
                    && !matches!(phase(p).as_str(), "Succeeded" | "Failed")
            })
            .collect();
        let ready = active
            .iter()
            .filter(|p| {
                p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count() as i64;
        PodCounts {
            succeeded,
            failed,
            terminating,
            active,
            ready,
        }
    }
}

fn create_pod(st: &mut State, job: &Value) -> bool {
    let ns = meta_str(job, "namespace");
    let name = meta_str(job, "name");
    let Some(def) = st.registry.lookup("", "v1", "pods") else {
        return false;
    };
    let template = &job["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "namespace": ns,
        "labels": template["metadata"]["labels"].clone(),
        "ownerReferences": [owned::controller_ref(job, "batch/v1", "Job")],
    });
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    if let Some(a) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(a);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                     "spec": template["spec"].clone()});
    match owned::create(st, def, ns, pod) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(namespace = ns, job = name, error = %e.message, "creating a job pod failed");
            false
        }
    }
}

fn delete_pod(st: &mut State, ns: &str, name: &str, uid: &str) {
    if let Err(e) = owned::delete(st, ("", "v1", "pods"), ns, name, uid, None) {
        tracing::warn!(namespace = ns, pod = name, error = %e.message, "deleting a job pod failed");
    }
}
