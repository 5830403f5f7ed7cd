//! batch/v1 CronJobs: their defaults at create, and a simulated CronJob controller.
//!
//! ## What kube-controller-manager does
//!
//! `SetDefaults_CronJob` (`pkg/apis/batch/v1/defaults.go`) fills `concurrencyPolicy: Allow`,
//! `suspend: false`, `successfulJobsHistoryLimit: 3` and `failedJobsHistoryLimit: 1`. The
//! CronJob controller (`pkg/controller/cronjob/cronjob_controllerv2.go`) then, for each
//! CronJob:
//!
//! * keeps `status.active` (references to its Jobs that have not finished) and
//!   `status.lastSuccessfulTime` (the latest `completionTime` of a Job that completed);
//! * unless `suspend` is set, finds the most recent time the `schedule` (standard cron: minute,
//!   hour, day of month, month, day of week, with `*`, lists, ranges, steps, month and day
//!   names, and the `@hourly`-style macros) fell due since `status.lastScheduleTime` (or the
//!   CronJob's creation); a time older than `startingDeadlineSeconds` is missed;
//! * applies `concurrencyPolicy`: `Allow` starts the Job, `Forbid` skips the time while a Job
//!   is still active, `Replace` deletes the active Jobs and starts the new one;
//! * creates the Job `<cronjob>-<scheduled time in minutes since the epoch>` from
//!   `jobTemplate` (its labels and annotations, the annotation
//!   `batch.kubernetes.io/cronjob-scheduled-timestamp`, a controlling `ownerReference`),
//!   records it in `status.active` and sets `status.lastScheduleTime`;
//! * deletes the oldest finished Jobs beyond the history limits (their pods go with them);
//! * wakes up again at the schedule's next time.
//!
//! ## What the simulation keeps (with `ClusterBuilder::simulate` (crate `embedded-cluster`))
//!
//! All of the above, with the Job controller ([`crate::jobs`]) running the Jobs.
//! [`CronJobController`] runs on the crate's worker loop ([`crate::worker`]): its informer follows
//! CronJobs and the Jobs they control; a change of either syncs the CronJob, and each sync asks
//! to be woken again at the schedule's next time. Times come
//! from the server's virtual clock, so a test with a paused tokio clock can run a schedule an
//! hour ahead in a millisecond. Left out: `timeZone` other than `UTC`/`Etc/UTC` and the
//! `CRON_TZ=`/`TZ=` prefixes (such a CronJob is left alone, as are schedules that do not
//! parse: the real server's validation would refuse them at create), the warnings about too
//! many missed start times, and events.

use std::time::Duration;

use apimachinery::clock::Clock;
use apimachinery::cron::Schedule;
use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control;
use crate::worker::Controller;

fn cronjobs() -> Resource {
    Resource::batch("cronjobs")
}

fn jobs() -> Resource {
    Resource::batch("jobs")
}

/// The annotation with the time a Job was scheduled for.
const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// The CronJob controller (`cronjob-controller`), acting through `lb`.
#[derive(Debug)]
pub struct CronJobController {
    lb: Loopback,
    clock: Clock,
}

impl CronJobController {
    /// A CronJob controller writing through `lb`, telling time by `clock`.
    pub fn new(lb: Loopback, clock: Clock) -> Self {
        CronJobController { lb, clock }
    }
}

/// The CronJob that controls `job`, by its controller reference.
fn controller_cronjob(job: &Value) -> Option<String> {
    controller_ref_of(job)
        .filter(|r| r["kind"] == "CronJob" && r["apiVersion"] == "batch/v1")
        .and_then(|r| r["name"].as_str())
        .map(str::to_owned)
}

fn cronjob_job(job: &Value) -> bool {
    controller_cronjob(job).is_some()
}

impl Controller for CronJobController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "cronjob-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![Kind::all(cronjobs()), Kind::only(jobs(), cronjob_job)]
    }

    fn keys_for(&self, ev: &WatchEvent, _: &Informer) -> Vec<Key> {
        if ev.resource == cronjobs() {
            vec![key_of(&ev.object)]
        } else {
            controller_cronjob(&ev.object)
                .map(|c| (meta_str(&ev.object, "namespace").to_owned(), c))
                .into_iter()
                .collect()
        }
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&cronjobs()).map(|c| key_of(c)).collect()
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(cj) = cache.get(&cronjobs(), &key.0, &key.1) else {
            return Ok(None);
        };
        let jobs: Vec<Value> = cache
            .controlled_by(&jobs(), meta_str(cj, "uid"))
            .into_iter()
            .map(|j| j.to_value())
            .collect();
        let now = self.clock.now();
        let next = sync(&self.lb, &cj.to_value(), jobs, now).await?;
        Ok(next.map(|t| self.clock.until(t)))
    }
}

fn parse_time(v: &Value) -> Option<Timestamp> {
    v.as_str()?.parse().ok()
}

fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn finished(job: &Value) -> Option<&'static str> {
    let conds = job["status"]["conditions"].as_array()?;
    ["Complete", "Failed"].into_iter().find(|ty| {
        conds
            .iter()
            .any(|c| c["type"] == *ty && c["status"] == "True")
    })
}

/// One pass over one CronJob and the Jobs it controls (see the module docs); returns when it
/// is due next.
async fn sync(
    lb: &Loopback,
    cj: &Value,
    mut jobs: Vec<Value>,
    now: Timestamp,
) -> Result<Option<Timestamp>, ApiError> {
    if is_deleting(cj) {
        return Ok(None);
    }
    let ns = meta_str(cj, "namespace");
    let spec = &cj["spec"];
    if spec["timeZone"]
        .as_str()
        .is_some_and(|z| !matches!(z, "UTC" | "Etc/UTC"))
    {
        return Ok(None);
    }
    let Ok(schedule) = Schedule::parse(spec["schedule"].as_str().unwrap_or_default()) else {
        return Ok(None);
    };
    let mut status = cj["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let last_success = jobs
        .iter()
        .filter(|j| finished(j) == Some("Complete"))
        .filter_map(|j| parse_time(&j["status"]["completionTime"]))
        .max();
    if let Some(t) = last_success
        && parse_time(&status["lastSuccessfulTime"]).is_none_or(|old| t > old)
    {
        status["lastSuccessfulTime"] = json!(format_time(t));
    }
    let mut active: Vec<Value> = jobs
        .iter()
        .filter(|j| finished(j).is_none() && !is_deleting(j))
        .cloned()
        .collect();

    let since = parse_time(&status["lastScheduleTime"])
        .or_else(|| parse_time(&cj["metadata"]["creationTimestamp"]))
        .unwrap_or(now);
    let suspended = spec["suspend"] == true;
    if !suspended && let Some(due) = schedule.last_between(since, now) {
        let deadline = spec["startingDeadlineSeconds"].as_i64();
        let missed = deadline.is_some_and(|d| {
            due.checked_add(jiff::SignedDuration::from_secs(d))
                .is_ok_and(|end| end < now)
        });
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
        let forbidden = policy == "Forbid" && !active.is_empty();
        if !missed && !forbidden {
            if policy == "Replace" {
                for j in active.drain(..) {
                    delete_job(lb, &j).await?;
                }
            }
            if let Some(job) = create_job(lb, cj, due).await? {
                jobs.push(job.clone());
                active.push(job);
            }
            status["lastScheduleTime"] = json!(format_time(due));
        }
    }
    let refs: Vec<Value> = active
        .iter()
        .map(|j| {
            json!({"kind": "Job", "namespace": ns, "name": meta_str(j, "name"),
                   "uid": meta_str(j, "uid"), "apiVersion": "batch/v1",
                   "resourceVersion": meta_str(j, "resourceVersion")})
        })
        .collect();
    match status.as_object_mut() {
        Some(o) if refs.is_empty() => {
            o.remove("active");
        }
        Some(o) => {
            o.insert("active".into(), json!(refs));
        }
        None => {}
    }
    for (kind, limit_field) in [
        ("Complete", "successfulJobsHistoryLimit"),
        ("Failed", "failedJobsHistoryLimit"),
    ] {
        let Some(limit) = spec[limit_field].as_i64() else {
            continue;
        };
        let mut done: Vec<&Value> = jobs
            .iter()
            .filter(|j| finished(j) == Some(kind) && !is_deleting(j))
            .collect();
        let keep = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        if done.len() > keep {
            // Oldest first: by the time each was scheduled for (the real controller sorts by
            // `status.startTime`, which follows it).
            done.sort_by_key(|j| {
                (
                    parse_time(&j["metadata"]["annotations"][SCHEDULED_ANNOTATION])
                        .or_else(|| parse_time(&j["status"]["startTime"])),
                    meta_str(j, "name").to_owned(),
                )
            });
            let surplus = done.len() - keep;
            for j in done.into_iter().take(surplus) {
                delete_job(lb, j).await?;
            }
        }
    }
    pod_control::update_status(lb, &cronjobs(), cj, status).await?;
    if suspended {
        return Ok(None);
    }
    Ok(schedule.next_after(now))
}

/// Creates the Job of the time `due` from the CronJob's `jobTemplate`: the stored Job, or
/// `None` when a Job of that name exists already (an earlier pass created it and its status
/// write did not land).
async fn create_job(lb: &Loopback, cj: &Value, due: Timestamp) -> Result<Option<Value>, ApiError> {
    let ns = meta_str(cj, "namespace");
    let name = meta_str(cj, "name");
    let template = &cj["spec"]["jobTemplate"];
    let job_name = format!("{name}-{}", due.as_second() / 60);
    let mut annotations = template["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations[SCHEDULED_ANNOTATION] = json!(format_time(due));
    let mut metadata = json!({
        "name": job_name,
        "namespace": ns,
        "annotations": annotations,
        "ownerReferences": [pod_control::controller_ref(cj, "batch/v1", "CronJob")],
    });
    if let Some(l) = template["metadata"]["labels"].as_object() {
        metadata["labels"] = json!(l);
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                     "spec": template["spec"].clone()});
    match lb.create(&jobs(), ns, job).await {
        Ok(created) => Ok(Some(created)),
        Err(e) if e.is_already_exists() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a Job with background propagation (the garbage collector removes its pods).
async fn delete_job(lb: &Loopback, job: &Value) -> Result<(), ApiError> {
    pod_control::delete(lb, &jobs(), job, Some("Background")).await
}
