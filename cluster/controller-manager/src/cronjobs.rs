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
//! All of the above, with the Job controller ([`super::jobs`]) running the Jobs. Times come
//! from the server's virtual clock, so a test with a paused tokio clock can run a schedule an
//! hour ahead in a millisecond. Left out: `timeZone` other than `UTC`/`Etc/UTC` and the
//! `CRON_TZ=`/`TZ=` prefixes (such a CronJob is left alone, as are schedules that do not
//! parse: the real server's validation would refuse them at create), the warnings about too
//! many missed start times, and events.

use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed, VirtualClock};
use super::owned;
use embedded_apiserver::cronjobs::Schedule;
use embedded_apiserver::meta::meta_str;
use embedded_apiserver::store::{State, Store};

const CRONJOBS: &str = "batch/cronjobs";
const JOBS: &str = "batch/jobs";

/// The annotation with the time a Job was scheduled for.
const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Starts the CronJob controller.
pub fn spawn(
    store: Arc<Store>,
    clock: VirtualClock,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(async move {
        let mut feed = ChangeFeed::new(store.clone());
        // Every CronJob is looked at on each pass: there are few, and a pass is cheap.
        let mut next = store.write(|st| sync_all(st, clock.now()));
        loop {
            let sleep = next.map(|t| clock.until(t));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = feed.changed() => {
                    // Only CronJob and Job changes matter.
                    let relevant = match feed.poll() {
                        Batch::Changes(changes) => changes
                            .iter()
                            .any(|c| c.storage == CRONJOBS || c.storage == JOBS),
                        Batch::Resync => true,
                    };
                    if !relevant {
                        continue;
                    }
                }
                _ = async {
                    match sleep {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            next = store.write(|st| sync_all(st, clock.now()));
        }
    });
}

/// Syncs every CronJob; returns the earliest time one is due next.
fn sync_all(st: &mut State, now: Timestamp) -> Option<Timestamp> {
    let keys: Vec<(String, String)> = st
        .list(CRONJOBS, None)
        .iter()
        .map(|c| {
            (
                meta_str(c, "namespace").to_owned(),
                meta_str(c, "name").to_owned(),
            )
        })
        .collect();
    keys.iter()
        .filter_map(|(ns, name)| sync(st, ns, name, now))
        .min()
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

/// One pass over one CronJob (see the module docs); returns when it is due next.
fn sync(st: &mut State, ns: &str, name: &str, now: Timestamp) -> Option<Timestamp> {
    let cj = st.get(CRONJOBS, ns, name).cloned()?;
    if !meta_str(&cj, "deletionTimestamp").is_empty() {
        return None;
    }
    let spec = &cj["spec"];
    if spec["timeZone"]
        .as_str()
        .is_some_and(|z| !matches!(z, "UTC" | "Etc/UTC"))
    {
        return None;
    }
    let schedule = Schedule::parse(spec["schedule"].as_str().unwrap_or_default()).ok()?;
    let uid = meta_str(&cj, "uid").to_owned();
    let mut jobs: Vec<Value> = st
        .list(JOBS, Some(ns))
        .into_iter()
        .filter(|j| {
            j["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["uid"] == uid && r["controller"] == true))
        })
        .cloned()
        .collect();
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
        .filter(|j| finished(j).is_none() && meta_str(j, "deletionTimestamp").is_empty())
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
                    delete_job(st, &j);
                }
            }
            if let Some(job) = create_job(st, &cj, due) {
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
            .filter(|j| finished(j) == Some(kind) && meta_str(j, "deletionTimestamp").is_empty())
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
            for j in done.into_iter().take(surplus).cloned().collect::<Vec<_>>() {
                delete_job(st, &j);
            }
        }
    }
    if status != cj["status"] {
        let mut updated = cj.clone();
        updated["status"] = status;
        st.write(CRONJOBS, updated);
    }
    if suspended {
        return None;
    }
    schedule.next_after(now)
}

/// Creates the Job of the time `due` from the CronJob's `jobTemplate`.
fn create_job(st: &mut State, cj: &Value, due: Timestamp) -> Option<Value> {
    let ns = meta_str(cj, "namespace");
    let name = meta_str(cj, "name");
    let def = st.registry.lookup("batch", "v1", "jobs")?;
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
        "ownerReferences": [owned::controller_ref(cj, "batch/v1", "CronJob")],
    });
    if let Some(l) = template["metadata"]["labels"].as_object() {
        metadata["labels"] = json!(l);
    }
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
                     "spec": template["spec"].clone()});
    match owned::create(st, def, ns, job) {
        Ok(created) => Some(created),
        Err(e) => {
            tracing::warn!(namespace = ns, cronjob = name, job = %job_name, error = %e.message, "creating a job failed");
            None
        }
    }
}

/// Deletes a Job with background propagation (the garbage collector removes its pods).
fn delete_job(st: &mut State, job: &Value) {
    let ns = meta_str(job, "namespace");
    let name = meta_str(job, "name");
    let uid = meta_str(job, "uid");
    let jobs = ("batch", "v1", "jobs");
    if let Err(e) = owned::delete(st, jobs, ns, name, uid, Some("Background")) {
        tracing::warn!(namespace = ns, job = name, error = %e.message, "deleting a job failed");
    }
}
