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
//! [`JobController`] runs on the crate's worker loop ([`crate::worker`]): its informer follows
//! Jobs and the pods a Job controls, and a change of either syncs that Job. Like
//! kube-controller-manager's Job controller, for each Job that is neither suspended nor
//! finished: it counts the pods it controls (`Succeeded`, `Failed`, active), creates pods named
//! `<job>-<random>` from the template (with the controller labels and a controlling
//! `ownerReference`) until `min(parallelism, completions - succeeded)` are active, and writes
//! `status` (`startTime`, `active`, `ready`, `succeeded`, `failed`, `terminating`,
//! `uncountedTerminatedPods`). Once `succeeded` reaches `completions` the Job gets the
//! conditions `SuccessCriteriaMet` and `Complete` (reason `CompletionsReached`) and a
//! `completionTime`; once more than `backoffLimit` pods failed, `FailureTarget` and `Failed`
//! (reason `BackoffLimitExceeded`, `Job has reached the specified backoff limit`) and its active
//! pods are deleted. The node (crate `embedded-node`) runs the pods.
//! Left out: indexed completion mode, pod failure policies, `activeDeadlineSeconds`,
//! `ttlSecondsAfterFinished`, the job-tracking finalizer and backoff delays between retries.

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control;
use crate::worker::Controller;
use apimachinery::clock::Clock;

fn jobs() -> Resource {
    Resource::batch("jobs")
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// The Job controller (`job-controller`), acting through `lb`.
#[derive(Debug)]
pub struct JobController {
    lb: Loopback,
    clock: Clock,
}

impl JobController {
    /// A Job controller writing through `lb`, timestamps from `clock`.
    pub fn new(lb: Loopback, clock: Clock) -> Self {
        JobController { lb, clock }
    }
}

/// Whether `pod`'s controller is a Job.
fn job_pod(pod: &Value) -> bool {
    controller_job(pod).is_some()
}

/// The Job that controls `pod`, by its controller reference.
fn controller_job(pod: &Value) -> Option<String> {
    controller_ref_of(pod)
        .filter(|r| r["kind"] == "Job" && r["apiVersion"] == "batch/v1")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

impl Controller for JobController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "job-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(jobs()), Kind::only(pods(), job_pod)]
    }

    fn keys_for(&self, ev: &WatchEvent, _: &Informer) -> Vec<Key> {
        if ev.resource == jobs() {
            vec![key_of(&ev.object)]
        } else {
            controller_job(&ev.object)
                .map(|j| (meta_str(&ev.object, "namespace").to_owned(), j))
                .into_iter()
                .collect()
        }
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&jobs()).map(|j| key_of(j)).collect()
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(job) = cache.get(&jobs(), &key.0, &key.1) else {
            return Ok(None);
        };
        let pods: Vec<Value> = cache
            .controlled_by(&pods(), meta_str(job, "uid"))
            .into_iter()
            .map(|p| p.to_value())
            .collect();
        sync(&self.lb, &self.clock, &job.to_value(), &pods).await?;
        Ok(None)
    }
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

/// One pass of the Job controller over one Job and the pods it controls: counts them, then
/// marks the Job complete or failed, or creates the pods it is missing, and writes the status
/// if it changed.
async fn sync(
    lb: &Loopback,
    clock: &Clock,
    job: &Value,
    controlled: &[Value],
) -> Result<(), ApiError> {
    if is_deleting(job)
        || has_condition(job, "Complete")
        || has_condition(job, "Failed")
        || job["spec"]["suspend"] == json!(true)
    {
        return Ok(());
    }
    let PodCounts {
        succeeded,
        failed,
        terminating,
        active,
        ready,
    } = PodCounts::of(controlled);
    let spec = &job["spec"];
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let completions = spec["completions"].as_i64();
    let backoff_limit = spec["backoffLimit"].as_i64().unwrap_or(6);
    let now = clock.now_time();
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
            pod_control::delete(lb, &pods(), p, None).await?;
        }
        active_count = 0;
    } else {
        let wanted = match completions {
            Some(c) => parallelism.min(c - succeeded),
            None => parallelism,
        };
        let missing = (wanted - active_count).max(0);
        for _ in 0..missing {
            let pod = pod_control::pod_from_template(job, "batch/v1", "Job");
            match pod_control::create_pod(lb, pod).await {
                Ok(_) => active_count += 1,
                Err(e) => {
                    tracing::warn!(namespace = meta_str(job, "namespace"), job = meta_str(job, "name"), error = %e.message, "creating a job pod failed");
                    break;
                }
            }
        }
    }
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    // Go omits zero `active`, `succeeded` and `failed` (`omitempty`), not the others.
    pod_control::set_count(&mut status, "active", active_count);
    status["ready"] = json!(ready);
    pod_control::set_count(&mut status, "succeeded", succeeded);
    pod_control::set_count(&mut status, "failed", failed);
    status["terminating"] = json!(terminating);
    status["uncountedTerminatedPods"] = json!({});
    pod_control::update_status(lb, &jobs(), job, status).await
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
