//! The Deployment controller: rolls a Deployment's pod template out through ReplicaSets.
//!
//! ## What kube-controller-manager's controller does
//!
//! `pkg/controller/deployment` never touches pods itself: it keeps **one ReplicaSet per
//! template revision** and moves replicas between them; the ReplicaSet controller
//! ([`crate::replicasets`]) makes the pods. One sync of a Deployment (`syncDeployment`):
//!
//! 1. **claims** the ReplicaSets of its namespace (`ClaimReplicaSets`): adopts orphans its
//!    `spec.selector` matches, releases the ones it controls that no longer match;
//! 2. a Deployment being deleted only gets its status; a **paused** one (`spec.paused`) gets
//!    the `Progressing` condition `Unknown`/`DeploymentPaused` (`DeploymentResumed` when it is
//!    resumed) and is only *scaled* (`sync`): no new ReplicaSet is created while paused, and
//!    old ReplicaSets beyond the history limit are cleaned up;
//! 3. a **scaling event** (an active ReplicaSet's `deployment.kubernetes.io/desired-replicas`
//!    annotation differs from `spec.replicas`) is also only scaled: with one active
//!    ReplicaSet it gets all replicas; during a rolling update the new total (`spec.replicas`
//!    plus `maxSurge`) is spread over the active ReplicaSets in proportion to their sizes
//!    (`getReplicaSetFraction` from the `max-replicas` annotation), the leftover to the
//!    largest;
//! 4. otherwise it **rolls out** by `spec.strategy.type`:
//!    * `RollingUpdate` (`rolloutRolling`): finds the *new* ReplicaSet (the oldest whose
//!      template equals the Deployment's, ignoring the `pod-template-hash` label) or creates it,
//!      named `<deployment>-<pod-template-hash>`, the hash (`ComputeHash`: FNV-32a of the
//!      template and `status.collisionCount`, spelt with `SafeEncodeString`'s alphabet) also a
//!      label of its selector, template and itself; it carries a controller `ownerReference` and
//!      the annotations `deployment.kubernetes.io/revision` (one more than the newest old
//!      ReplicaSet's), `desired-replicas` and `max-replicas`, plus the Deployment's own
//!      annotations (`kubernetes.io/change-cause` among them). Then one step: scale the new
//!      ReplicaSet up as far as `maxSurge` allows (`spec.replicas + maxSurge` pods in all); or
//!      else scale old ReplicaSets down as far as `maxUnavailable` allows (first their
//!      unavailable pods, then available ones, oldest ReplicaSet first, never below
//!      `spec.replicas - maxUnavailable` available pods). `maxSurge` and `maxUnavailable` are
//!      counts or percentages of `spec.replicas` (default 25% each): the surge rounds up, the
//!      unavailability down, and both zero means one may be unavailable;
//!    * `Recreate` (`rolloutRecreate`): scales every old ReplicaSet to zero, waits until none of
//!      their pods is left running, then creates (or scales) the new one to `spec.replicas`;
//! 5. once the rollout is complete, deletes the oldest ReplicaSets that have no replicas left
//!    beyond `spec.revisionHistoryLimit` (default 10) (`cleanupDeployment`);
//! 6. writes `status` (`calculateStatus`, `syncRolloutStatus`) from the ReplicaSets:
//!    `replicas` (their `status.replicas`), `updatedReplicas` (the new one's), `readyReplicas`,
//!    `availableReplicas`, `unavailableReplicas` (`spec.replicas` of all minus available),
//!    `observedGeneration`, `collisionCount`, and the conditions `Available`
//!    (`MinimumReplicasAvailable` while at least `spec.replicas - maxUnavailable` pods are
//!    available) and `Progressing`: `NewReplicaSetCreated`/`FoundNewReplicaSet`, then
//!    `ReplicaSetUpdated` whenever the rollout moved, `NewReplicaSetAvailable` when it is
//!    complete, and `False`/`ProgressDeadlineExceeded` when it made no progress for
//!    `spec.progressDeadlineSeconds` (default 600; the controller looks again when that time
//!    is up). The Deployment's own `deployment.kubernetes.io/revision` annotation follows the
//!    new ReplicaSet's.
//!
//! A rollback is a client's affair: `kubectl rollout undo` copies an old ReplicaSet's template
//! (and annotations) back into the Deployment, whose controller then finds that ReplicaSet
//! as the new one and gives it the next revision (its earlier ones move to
//! `deployment.kubernetes.io/revision-history`). `kubectl rollout restart` changes a template
//! annotation, so a new ReplicaSet rolls out.
//!
//! ## What this one keeps, and how
//!
//! All of the above, reaching the server only through the loopback interface
//! ([`embedded_apiserver::loopback`]) as `system:kube-controller-manager`.
//! [`DeploymentController`] runs on the crate's worker loop ([`crate::worker`]): its informer
//! ([`crate::informer`]) follows Deployments, ReplicaSets and the pods ReplicaSets control; a
//! change of a Deployment syncs it, a change of a ReplicaSet syncs its controller (before and
//! after the change) or, for an orphan, every Deployment of its namespace whose selector
//! matches it, and a deleted pod syncs its ReplicaSet's Deployment (a `Recreate` waits for
//! those). The informer catches up before every sync, so a sync sees its own writes. Claiming
//! is [`crate::claim`]. A failed write syncs the Deployment again (at once after a conflict,
//! else with the worker's back-off), as does a hash collision once `collisionCount` is raised.
//!
//! Departures: every change is acted on after the cluster's workload delay (see
//! [`crate::replicasets`]); the server does not default built-in kinds, so the API's defaults
//! (`replicas` 1, `RollingUpdate` with 25%/25%, `revisionHistoryLimit` 10,
//! `progressDeadlineSeconds` 600) are applied here when a field is missing; templates are
//! compared as JSON with empty and null fields dropped (Go's semantic equality) and hashed from
//! their canonical JSON, so hashes differ from a real cluster's for the same template; the
//! Deployment's revision annotation is written with an update of the object before its status
//! (the real controller sends both through `/status`, which this server limits to `status`);
//! the `ReplicaFailure` condition is not copied from the ReplicaSets; no Events are recorded.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use apimachinery::labels::Selector;
use serde_json::{Map, Value, json};

use apimachinery::clock::Clock;
use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{EventType, Loopback, Resource, WatchEvent};

use crate::claim::{self, Claimed, selector_of};
use crate::informer::{Informer, Key, Kind, controller_ref_of, is_deleting, key_of, meta_str};
use crate::pod_control::{self, controller_ref, set_count};
use crate::worker::Controller;

/// The label (on a ReplicaSet, its selector and its template) naming the template's hash.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// A ReplicaSet's (and its Deployment's) revision.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions of a ReplicaSet rolled back to.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's `spec.replicas` when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Deployment annotations not copied to its ReplicaSets (`skipCopyAnnotation`).
const SKIP_COPY: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

fn deployments() -> Resource {
    Resource::apps("deployments")
}

fn replicasets() -> Resource {
    Resource::apps("replicasets")
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// Whether `pod`'s controller is a ReplicaSet (the pods the controller's informer keeps).
fn replicaset_pod(pod: &Value) -> bool {
    controller_ref_of(pod).is_some_and(|r| r["kind"] == "ReplicaSet")
}

/// An `int32` field as an `i64` (`default` when absent).
fn int(v: &Value, default: i64) -> i64 {
    v.as_i64().unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// the API's defaults and the arithmetic of rolling updates (pkg/controller/deployment/util)

/// `spec.replicas` (default 1).
pub(crate) fn replicas(d: &Value) -> i64 {
    int(&d["spec"]["replicas"], 1).max(0)
}

fn rs_replicas(rs: &Value) -> i64 {
    int(&rs["spec"]["replicas"], 1).max(0)
}

fn status_count(rs: &Value, field: &str) -> i64 {
    int(&rs["status"][field], 0)
}

/// Whether the strategy is `RollingUpdate` (the default).
pub(crate) fn is_rolling_update(d: &Value) -> bool {
    d["spec"]["strategy"]["type"]
        .as_str()
        .is_none_or(|t| t == "RollingUpdate")
}

/// An `IntOrString` scaled against `total` (`GetScaledValueFromIntOrPercent`): a percentage
/// rounds up or down as asked; `default` when absent or unreadable.
pub(crate) fn scaled_value(v: &Value, default: &str, total: i64, round_up: bool) -> i64 {
    let v = if v.is_null() {
        json!(default)
    } else {
        v.clone()
    };
    if let Some(n) = v.as_i64() {
        return n.max(0);
    }
    let s = v.as_str().unwrap_or(default);
    match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
        Some(p) => {
            let x = p.max(0) * total;
            if round_up { (x + 99) / 100 } else { x / 100 }
        }
        None => s.parse::<i64>().unwrap_or(0).max(0),
    }
}

/// `(maxSurge, maxUnavailable)` as counts (`ResolveFenceposts`): both zero means one may be
/// unavailable.
pub(crate) fn fenceposts(d: &Value) -> (i64, i64) {
    let ru = &d["spec"]["strategy"]["rollingUpdate"];
    let desired = replicas(d);
    let surge = scaled_value(&ru["maxSurge"], "25%", desired, true);
    let unavailable = scaled_value(&ru["maxUnavailable"], "25%", desired, false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

/// `MaxSurge`: zero unless rolling.
pub(crate) fn max_surge(d: &Value) -> i64 {
    if !is_rolling_update(d) {
        return 0;
    }
    fenceposts(d).0
}

/// `MaxUnavailable`: zero unless rolling or without replicas, at most `spec.replicas`.
pub(crate) fn max_unavailable(d: &Value) -> i64 {
    if !is_rolling_update(d) || replicas(d) == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas(d))
}

fn revision_history_limit(d: &Value) -> i64 {
    int(&d["spec"]["revisionHistoryLimit"], 10)
}

fn progress_deadline(d: &Value) -> Option<i64> {
    match &d["spec"]["progressDeadlineSeconds"] {
        Value::Null => Some(600),
        v => v.as_i64().filter(|s| *s != i64::from(i32::MAX)),
    }
}

/// The revision annotation as a number (0 when absent).
fn revision(obj: &Value) -> i64 {
    obj["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn annotation_i64(obj: &Value, key: &str) -> Option<i64> {
    obj["metadata"]["annotations"][key].as_str()?.parse().ok()
}

/// A value with null fields and empty objects and arrays dropped, for Go's semantic
/// equality (nil and empty are equal) and a stable hash.
pub(crate) fn normalized(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let m: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), normalized(v)?)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a
                .iter()
                .map(|v| normalized(v).unwrap_or(json!({})))
                .collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        other => Some(other.clone()),
    }
}

/// A template without the `pod-template-hash` label, normalized.
fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(l) = t["metadata"]["labels"].as_object_mut() {
        l.remove(POD_TEMPLATE_HASH);
    }
    normalized(&t).unwrap_or(json!({}))
}

/// Whether two pod templates are equal but for the hash label (`EqualIgnoreHash`).
pub(crate) fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    without_hash(a) == without_hash(b)
}

/// The `pod-template-hash` of a template (`ComputeHash`): FNV-32a of its canonical JSON and
/// the collision count, the decimal number spelt in `SafeEncodeString`'s alphabet.
pub(crate) fn compute_hash(template: &Value, collision_count: i64) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(without_hash(template).to_string().as_bytes());
    if collision_count > 0 {
        feed(&collision_count.to_le_bytes());
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

fn created_then_name(a: &Value, b: &Value) -> Ordering {
    meta_str(a, "creationTimestamp")
        .cmp(meta_str(b, "creationTimestamp"))
        .then_with(|| meta_str(a, "name").cmp(meta_str(b, "name")))
}

/// `FilterActiveReplicaSets`: the ones with replicas.
fn active(rss: &[Value]) -> Vec<usize> {
    (0..rss.len())
        .filter(|i| rs_replicas(&rss[*i]) > 0)
        .collect()
}

fn sum(rss: &[&Value], f: impl Fn(&Value) -> i64) -> i64 {
    rss.iter().map(|rs| f(rs)).sum()
}

/// `DeploymentComplete`.
fn deployment_complete(d: &Value, status: &Value) -> bool {
    let r = replicas(d);
    int(&status["updatedReplicas"], 0) == r
        && int(&status["replicas"], 0) == r
        && int(&status["availableReplicas"], 0) == r
        && int(&status["observedGeneration"], 0) >= int(&d["metadata"]["generation"], 0)
}

/// `DeploymentProgressing`: more updated, ready or available replicas, or fewer old ones.
fn deployment_progressing(d: &Value, new: &Value) -> bool {
    let old = &d["status"];
    let c = |s: &Value, f: &str| int(&s[f], 0);
    let old_old = c(old, "replicas") - c(old, "updatedReplicas");
    let new_old = c(new, "replicas") - c(new, "updatedReplicas");
    c(new, "updatedReplicas") > c(old, "updatedReplicas")
        || new_old < old_old
        || c(new, "readyReplicas") > c(old, "readyReplicas")
        || c(new, "availableReplicas") > c(old, "availableReplicas")
}

fn get_condition<'a>(status: &'a Value, ty: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

fn remove_condition(status: &mut Value, ty: &str) {
    if let Some(cs) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        cs.retain(|c| c["type"] != ty);
        if cs.is_empty()
            && let Some(o) = status.as_object_mut()
        {
            o.remove("conditions");
        }
    }
}

/// `SetDeploymentCondition`: unchanged when status and reason are; the transition time kept
/// when the status is.
fn set_condition(status: &mut Value, mut cond: Value) {
    let ty = cond["type"].as_str().unwrap_or_default().to_owned();
    if let Some(cur) = get_condition(status, &ty) {
        if cur["status"] == cond["status"] && cur["reason"] == cond["reason"] {
            return;
        }
        if cur["status"] == cond["status"] {
            cond["lastTransitionTime"] = cur["lastTransitionTime"].clone();
        }
    }
    remove_condition(status, &ty);
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    if let Some(cs) = status["conditions"].as_array_mut() {
        cs.push(cond);
    }
}

fn new_condition(ty: &str, status: &str, reason: &str, message: String, now: &str) -> Value {
    json!({"type": ty, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

// ---------------------------------------------------------------------------------------------
// the controller

/// The Deployment controller (`deployment-controller`), acting through `lb`.
#[derive(Debug)]
pub struct DeploymentController {
    lb: Loopback,
    delay: Duration,
    clock: Clock,
    /// When the Deployment being synced wants another look (its progress deadline).
    requeue_after: Option<Duration>,
}

impl DeploymentController {
    /// A Deployment controller writing through `lb`, reacting `delay` after each change, with
    /// condition timestamps and "now" (for deadlines) from `clock`.
    pub fn new(lb: Loopback, delay: Duration, clock: Clock) -> Self {
        DeploymentController {
            lb,
            delay,
            clock,
            requeue_after: None,
        }
    }
}

impl Controller for DeploymentController {
    type Key = Key;

    fn name(&self) -> &'static str {
        "deployment-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        vec![
            Kind::all(deployments()),
            Kind::all(replicasets()),
            Kind::only(pods(), replicaset_pod),
        ]
    }

    /// The changed Deployment; the controller of a changed ReplicaSet (before and after the
    /// change) or, for an orphan, every Deployment whose selector matches it; the Deployment of
    /// a deleted pod's ReplicaSet (a `Recreate` waits for those).
    fn keys_for(&self, ev: &WatchEvent, cache: &Informer) -> Vec<Key> {
        if ev.resource == deployments() {
            return vec![key_of(&ev.object)];
        }
        let ns = meta_str(&ev.object, "namespace");
        let mut owners = vec![];
        if ev.resource == replicasets() {
            for rs in std::iter::once(&ev.object).chain(ev.previous.as_ref()) {
                match controller_ref_of(rs) {
                    Some(r) if r["kind"] == "Deployment" => {
                        owners.push(r["name"].as_str().unwrap_or_default().to_owned());
                    }
                    Some(_) => {}
                    None if ev.kind != EventType::Deleted => {
                        owners.extend(claim::selecting(
                            cache.list_namespace(&deployments(), ns),
                            rs,
                        ));
                    }
                    None => {}
                }
            }
        } else if ev.kind == EventType::Deleted
            && let Some(r) = controller_ref_of(&ev.object).filter(|r| r["kind"] == "ReplicaSet")
            && let Some(rs) = cache.get(&replicasets(), ns, r["name"].as_str().unwrap_or_default())
            && let Some(name) = controller_ref_of(rs)
                .filter(|r| r["kind"] == "Deployment")
                .and_then(|r| r["name"].as_str())
        {
            owners.push(name.to_owned());
        }
        owners.sort();
        owners.dedup();
        owners
            .into_iter()
            .filter(|o| !o.is_empty())
            .map(|o| (ns.to_owned(), o))
            .collect()
    }

    fn all_keys(&self, cache: &Informer) -> Vec<Key> {
        cache.list(&deployments()).map(|o| key_of(o)).collect()
    }

    fn delay(&self) -> Duration {
        self.delay
    }

    async fn sync(&mut self, key: &Key, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        self.requeue_after = None;
        self.sync_deployment(key, cache).await?;
        Ok(self.requeue_after.take())
    }
}

impl DeploymentController {
    /// `syncDeployment` (see the module docs).
    async fn sync_deployment(&mut self, key: &Key, cache: &Informer) -> Result<(), ApiError> {
        let Some(d) = cache.get(&deployments(), &key.0, &key.1) else {
            return Ok(());
        };
        let mut d = d.to_value();
        let Some(selector) = selector_of(&d["spec"]["selector"]) else {
            return Ok(());
        };
        let mut rss = self.claim_replicasets(cache, &d, &selector).await?;
        if is_deleting(&d) {
            return self.sync_status_only(&mut d, &mut rss).await;
        }
        self.check_paused_conditions(&mut d).await?;
        if d["spec"]["paused"] == true || self.is_scaling_event(&mut d, &mut rss).await? {
            return self.sync_scale(&mut d, &mut rss).await;
        }
        if is_rolling_update(&d) {
            self.rollout_rolling(&mut d, &mut rss).await
        } else {
            self.rollout_recreate(cache, &mut d, &mut rss).await
        }
    }

    /// The ReplicaSets the Deployment controls, after adopting matching orphans and releasing
    /// the ones that no longer match (`ClaimReplicaSets`).
    async fn claim_replicasets(
        &mut self,
        cache: &Informer,
        d: &Value,
        selector: &Selector,
    ) -> Result<Vec<Value>, ApiError> {
        let ns = meta_str(d, "namespace");
        let Claimed {
            mut owned,
            adopt,
            release,
        } = claim::claim(d, selector, cache.list_namespace(&replicasets(), ns));
        for rs in adopt {
            let adopted =
                claim::adopt(&self.lb, &replicasets(), d, "apps/v1", "Deployment", &rs).await?;
            owned.push(adopted);
        }
        for rs in release {
            claim::release(&self.lb, &replicasets(), d, &rs).await?;
        }
        owned.sort_by(created_then_name);
        Ok(owned)
    }

    /// Index of the new ReplicaSet (`FindNewReplicaSet`: the oldest with the Deployment's
    /// template); `rss` is sorted by creation.
    fn find_new(d: &Value, rss: &[Value]) -> Option<usize> {
        rss.iter()
            .position(|rs| equal_ignore_hash(&rs["spec"]["template"], &d["spec"]["template"]))
    }

    /// The index of the new ReplicaSet, created when missing
    /// (`getAllReplicaSetsAndSyncRevision` with `createIfNotExisted`).
    async fn new_replica_set(
        &mut self,
        d: &mut Value,
        rss: &mut Vec<Value>,
    ) -> Result<usize, ApiError> {
        match self.sync_revision(d, rss).await? {
            Some(i) => Ok(i),
            None => self.create_replica_set(d, rss).await,
        }
    }

    /// The revision the new ReplicaSet gets: one more than the newest of the others.
    fn next_revision(rss: &[Value], new: Option<usize>) -> String {
        let max_old = rss
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new)
            .map(|(_, rs)| revision(rs))
            .max()
            .unwrap_or(0);
        (max_old + 1).to_string()
    }

    /// `getAllReplicaSetsAndSyncRevision`: the index of the new ReplicaSet, if there is one,
    /// its revision brought up to date, the Deployment's annotation following it.
    async fn sync_revision(
        &mut self,
        d: &mut Value,
        rss: &mut [Value],
    ) -> Result<Option<usize>, ApiError> {
        let new = Self::find_new(d, rss);
        let Some(i) = new else {
            return Ok(None);
        };
        let new_revision = Self::next_revision(rss, new);
        let ns = meta_str(d, "namespace").to_owned();
        let now = self.clock.now_time();
        let mut rs = rss[i].clone();
        let mut changed = set_new_rs_annotations(d, &mut rs, &new_revision, true);
        let min_ready = &d["spec"]["minReadySeconds"];
        if rs["spec"]["minReadySeconds"] != *min_ready
            && !(min_ready.is_null() && rs["spec"]["minReadySeconds"] == 0)
        {
            rs["spec"]["minReadySeconds"] = min_ready.clone();
            changed = true;
        }
        if changed {
            rss[i] = self.lb.update(&replicasets(), &ns, rs).await?;
        }
        let rs_revision = rss[i]["metadata"]["annotations"][REVISION]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.set_deployment_revision(d, &rs_revision).await?;
        if progress_deadline(d).is_some() && get_condition(&d["status"], "Progressing").is_none() {
            let msg = format!("Found new replica set {:?}", meta_str(&rss[i], "name"));
            set_condition(
                &mut d["status"],
                new_condition("Progressing", "True", "FoundNewReplicaSet", msg, &now),
            );
            self.update_status(d).await?;
        }
        Ok(Some(i))
    }

    /// Creates the new ReplicaSet (`getNewReplicaSet` when none has the template); its index.
    async fn create_replica_set(
        &mut self,
        d: &mut Value,
        rss: &mut Vec<Value>,
    ) -> Result<usize, ApiError> {
        let new_revision = Self::next_revision(rss, None);
        let ns = meta_str(d, "namespace").to_owned();
        let now = self.clock.now_time();
        let collisions = int(&d["status"]["collisionCount"], 0);
        let hash = compute_hash(&d["spec"]["template"], collisions);
        let mut template = d["spec"]["template"].clone();
        if !template["metadata"]["labels"].is_object() {
            template["metadata"]["labels"] = json!({});
        }
        template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        if !selector["matchLabels"].is_object() {
            selector["matchLabels"] = json!({});
        }
        selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
        let rs_name = format!("{}-{hash}", meta_str(d, "name"));
        let mut rs = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name, "namespace": ns,
                "labels": template["metadata"]["labels"].clone(),
                "ownerReferences": [controller_ref(d, "apps/v1", "Deployment")],
            },
            "spec": {"replicas": 0, "selector": selector, "template": template},
        });
        if let Some(m) = d["spec"]["minReadySeconds"].as_i64() {
            rs["spec"]["minReadySeconds"] = json!(m);
        }
        let replicas_now = {
            let refs: Vec<&Value> = rss.iter().chain(std::iter::once(&rs)).collect();
            new_rs_new_replicas(d, &refs, &rs)
        };
        rs["spec"]["replicas"] = json!(replicas_now);
        set_new_rs_annotations(d, &mut rs, &new_revision, false);
        let created = match self.lb.create(&replicasets(), &ns, rs).await {
            Ok(created) => created,
            Err(e) if e.is_already_exists() => {
                let existing = self.lb.get(&replicasets(), &ns, &rs_name).await?;
                let ours =
                    controller_ref_of(&existing).is_some_and(|r| r["uid"] == meta_str(d, "uid"));
                if ours && equal_ignore_hash(&existing["spec"]["template"], &d["spec"]["template"])
                {
                    existing
                } else {
                    // A hash collision: the next hash includes a higher count.
                    d["status"]["collisionCount"] = json!(collisions + 1);
                    self.update_status(d).await?;
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        };
        tracing::debug!(namespace = %ns, replicaset = meta_str(&created, "name"), "new replica set created");
        rss.push(created);
        let i = rss.len() - 1;
        self.set_deployment_revision(d, &new_revision).await?;
        if progress_deadline(d).is_some() {
            let msg = format!("Created new replica set {:?}", meta_str(&rss[i], "name"));
            set_condition(
                &mut d["status"],
                new_condition("Progressing", "True", "NewReplicaSetCreated", msg, &now),
            );
            self.update_status(d).await?;
        }
        Ok(i)
    }

    async fn set_deployment_revision(&mut self, d: &mut Value, rev: &str) -> Result<(), ApiError> {
        if rev.is_empty() || d["metadata"]["annotations"][REVISION] == rev {
            return Ok(());
        }
        let mut updated = d.clone();
        if !updated["metadata"]["annotations"].is_object() {
            updated["metadata"]["annotations"] = json!({});
        }
        updated["metadata"]["annotations"][REVISION] = json!(rev);
        let ns = meta_str(d, "namespace").to_owned();
        *d = self.lb.update(&deployments(), &ns, updated).await?;
        Ok(())
    }

    async fn update_status(&mut self, d: &mut Value) -> Result<(), ApiError> {
        let ns = meta_str(d, "namespace").to_owned();
        *d = self
            .lb
            .update_status(&deployments(), &ns, d.clone())
            .await?;
        Ok(())
    }

    /// `scaleReplicaSet`: `spec.replicas` and the desired/max annotations.
    async fn scale_rs(&mut self, d: &Value, rs: &mut Value, to: i64) -> Result<bool, ApiError> {
        let mut updated = rs.clone();
        let size_changed = rs_replicas(rs) != to;
        let annotations_changed =
            set_replicas_annotations(&mut updated, replicas(d), replicas(d) + max_surge(d));
        if !size_changed && !annotations_changed {
            return Ok(false);
        }
        updated["spec"]["replicas"] = json!(to);
        let ns = meta_str(rs, "namespace").to_owned();
        *rs = self.lb.update(&replicasets(), &ns, updated).await?;
        if size_changed {
            tracing::debug!(namespace = %ns, replicaset = meta_str(rs, "name"), replicas = to, "scaled replica set");
        }
        Ok(size_changed)
    }

    /// `checkPausedConditions`.
    async fn check_paused_conditions(&mut self, d: &mut Value) -> Result<(), ApiError> {
        if progress_deadline(d).is_none() {
            return Ok(());
        }
        let cond = get_condition(&d["status"], "Progressing");
        if cond.is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
            return Ok(());
        }
        let paused_cond = cond.is_some_and(|c| c["reason"] == "DeploymentPaused");
        let paused = d["spec"]["paused"] == true;
        let now = self.clock.now_time();
        let cond = if paused && !paused_cond {
            new_condition(
                "Progressing",
                "Unknown",
                "DeploymentPaused",
                "Deployment is paused".into(),
                &now,
            )
        } else if !paused && paused_cond {
            new_condition(
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed".into(),
                &now,
            )
        } else {
            return Ok(());
        };
        if !d["status"].is_object() {
            d["status"] = json!({});
        }
        set_condition(&mut d["status"], cond);
        self.update_status(d).await
    }

    /// `isScalingEvent`.
    async fn is_scaling_event(
        &mut self,
        d: &mut Value,
        rss: &mut [Value],
    ) -> Result<bool, ApiError> {
        self.sync_revision(d, rss).await?;
        let want = replicas(d);
        Ok(active(rss)
            .into_iter()
            .any(|i| annotation_i64(&rss[i], DESIRED_REPLICAS).is_some_and(|n| n != want)))
    }

    /// A Deployment being deleted: its status only.
    async fn sync_status_only(&mut self, d: &mut Value, rss: &mut [Value]) -> Result<(), ApiError> {
        let new = self.sync_revision(d, rss).await?;
        self.sync_status_only_with(d, rss, new).await
    }

    /// `sync`: scale (paused or a scaling event), clean up when paused, write status.
    async fn sync_scale(&mut self, d: &mut Value, rss: &mut [Value]) -> Result<(), ApiError> {
        let new = self.sync_revision(d, rss).await?;
        self.scale(d, rss, new).await?;
        if d["spec"]["paused"] == true {
            self.cleanup(d, rss, new).await?;
        }
        self.sync_status_only_with(d, rss, new).await
    }

    async fn sync_status_only_with(
        &mut self,
        d: &mut Value,
        rss: &[Value],
        new: Option<usize>,
    ) -> Result<(), ApiError> {
        let status = self.calculate_status(d, rss, new);
        if status != d["status"] {
            d["status"] = status;
            self.update_status(d).await?;
        }
        Ok(())
    }

    /// `scale`: proportional scaling of the active ReplicaSets.
    async fn scale(
        &mut self,
        d: &Value,
        rss: &mut [Value],
        new: Option<usize>,
    ) -> Result<(), ApiError> {
        let want = replicas(d);
        // One active (or, with none, the latest) ReplicaSet takes every replica.
        let act = active(rss);
        let only = match act.len() {
            0 => {
                new.or_else(|| (0..rss.len()).max_by(|a, b| created_then_name(&rss[*a], &rss[*b])))
            }
            1 => Some(act[0]),
            _ => None,
        };
        if let Some(i) = only {
            if rs_replicas(&rss[i]) != want {
                self.scale_rs(d, &mut rss[i], want).await?;
            }
            return Ok(());
        }
        // A saturated new ReplicaSet: the old ones go to zero.
        if let Some(n) = new
            && annotation_i64(&rss[n], DESIRED_REPLICAS) == Some(want)
            && status_count(&rss[n], "availableReplicas") == want
            && rs_replicas(&rss[n]) == want
        {
            for i in act.into_iter().filter(|i| *i != n) {
                self.scale_rs(d, &mut rss[i], 0).await?;
            }
            return Ok(());
        }
        if !is_rolling_update(d) {
            return Ok(());
        }
        let total: i64 = act.iter().map(|i| rs_replicas(&rss[*i])).sum();
        let allowed = if want > 0 { want + max_surge(d) } else { 0 };
        let to_add = allowed - total;
        let mut order = act.clone();
        order.sort_by(|a, b| {
            let (a, b) = (&rss[*a], &rss[*b]);
            let size = rs_replicas(b).cmp(&rs_replicas(a));
            let age = if to_add > 0 {
                created_then_name(b, a)
            } else {
                created_then_name(a, b)
            };
            size.then(age)
        });
        let mut added = 0;
        let mut sizes = BTreeMap::new();
        for &i in &order {
            let mut size = rs_replicas(&rss[i]);
            if to_add != 0 {
                let p = proportion(&rss[i], d, to_add, added);
                size += p;
                added += p;
            }
            sizes.insert(i, size);
        }
        for (k, &i) in order.iter().enumerate() {
            let mut size = sizes[&i];
            if k == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale_rs(d, &mut rss[i], size).await?;
        }
        Ok(())
    }

    /// `rolloutRolling`: one step of a rolling update.
    async fn rollout_rolling(
        &mut self,
        d: &mut Value,
        rss: &mut Vec<Value>,
    ) -> Result<(), ApiError> {
        let n = self.new_replica_set(d, rss).await?;
        // Scale the new ReplicaSet up (or down to spec.replicas).
        let want = replicas(d);
        let cur = rs_replicas(&rss[n]);
        if cur != want {
            let to = if cur > want {
                want
            } else {
                let refs: Vec<&Value> = rss.iter().collect();
                new_rs_new_replicas(d, &refs, &rss[n])
            };
            let mut rs = rss[n].clone();
            if self.scale_rs(d, &mut rs, to).await? {
                rss[n] = rs;
                return self.sync_rollout_status(d, rss, Some(n)).await;
            }
            rss[n] = rs;
        }
        // Scale old ReplicaSets down.
        if self.reconcile_old(d, rss, n).await? {
            return self.sync_rollout_status(d, rss, Some(n)).await;
        }
        if deployment_complete(d, &d["status"]) {
            self.cleanup(d, rss, Some(n)).await?;
        }
        self.sync_rollout_status(d, rss, Some(n)).await
    }

    /// `reconcileOldReplicaSets`: whether an old ReplicaSet was scaled down.
    async fn reconcile_old(
        &mut self,
        d: &Value,
        rss: &mut [Value],
        n: usize,
    ) -> Result<bool, ApiError> {
        let old: Vec<usize> = (0..rss.len()).filter(|i| *i != n).collect();
        let old_count: i64 = old.iter().map(|i| rs_replicas(&rss[*i])).sum();
        if old_count == 0 {
            return Ok(false);
        }
        let all_count: i64 = rss.iter().map(rs_replicas).sum();
        let min_available = replicas(d) - max_unavailable(d);
        let new_unavailable = rs_replicas(&rss[n]) - status_count(&rss[n], "availableReplicas");
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        // First the unhealthy replicas of old ReplicaSets, oldest first.
        let mut cleaned = 0;
        for &i in &old {
            if cleaned >= max_scaled_down {
                break;
            }
            let (spec, avail) = (
                rs_replicas(&rss[i]),
                status_count(&rss[i], "availableReplicas"),
            );
            if spec == 0 || spec == avail {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(spec - avail);
            if down < 0 {
                // More available than wanted: the ReplicaSet's status still counts pods that
                // are going (a process node ends them one by one). kube refuses the step
                // ("got invalid request to scale down") and the sync is retried once the
                // ReplicaSet's status has caught up; scaling "down" by a negative count
                // would scale it up past maxSurge.
                return Err(ApiError::internal(format!(
                    "when cleaning up unhealthy replicas, got invalid request to scale down {}/{} {spec} -> {}",
                    meta_str(&rss[i], "namespace"),
                    meta_str(&rss[i], "name"),
                    spec - down
                )));
            }
            self.scale_rs(d, &mut rss[i], spec - down).await?;
            cleaned += down;
        }
        // Then available ones, as far as minAvailable allows.
        let available: i64 = rss
            .iter()
            .map(|rs| status_count(rs, "availableReplicas"))
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for &i in &old {
                if scaled >= total {
                    break;
                }
                let spec = rs_replicas(&rss[i]);
                if spec == 0 {
                    continue;
                }
                let down = spec.min(total - scaled);
                self.scale_rs(d, &mut rss[i], spec - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// `rolloutRecreate`.
    async fn rollout_recreate(
        &mut self,
        cache: &Informer,
        d: &mut Value,
        rss: &mut Vec<Value>,
    ) -> Result<(), ApiError> {
        let new = self.sync_revision(d, rss).await?;
        let mut scaled_down = false;
        for i in active(rss) {
            if Some(i) != new {
                scaled_down |= self.scale_rs(d, &mut rss[i], 0).await?;
            }
        }
        if scaled_down || old_pods_running(cache, rss, new) {
            return self.sync_rollout_status(d, rss, new).await;
        }
        let n = match new {
            Some(n) => n,
            None => self.create_replica_set(d, rss).await?,
        };
        let new = Some(n);
        let mut rs = rss[n].clone();
        self.scale_rs(d, &mut rs, replicas(d)).await?;
        rss[n] = rs;
        if deployment_complete(d, &d["status"]) {
            self.cleanup(d, rss, new).await?;
        }
        self.sync_rollout_status(d, rss, new).await
    }

    /// `cleanupDeployment`: old ReplicaSets without replicas beyond the history limit go,
    /// lowest revision first.
    async fn cleanup(
        &mut self,
        d: &Value,
        rss: &[Value],
        new: Option<usize>,
    ) -> Result<(), ApiError> {
        let limit = revision_history_limit(d).max(0);
        let mut old: Vec<&Value> = rss
            .iter()
            .enumerate()
            .filter(|(i, rs)| Some(*i) != new && !is_deleting(rs))
            .map(|(_, rs)| rs)
            .collect();
        let diff = old.len() as i64 - limit;
        if diff <= 0 {
            return Ok(());
        }
        old.sort_by(|a, b| {
            revision(a)
                .cmp(&revision(b))
                .then_with(|| created_then_name(a, b))
        });
        let doomed: Vec<&Value> = old
            .into_iter()
            .take(usize::try_from(diff).unwrap_or(0))
            .filter(|rs| {
                status_count(rs, "replicas") == 0
                    && rs_replicas(rs) == 0
                    && int(&rs["metadata"]["generation"], 0)
                        <= status_count(rs, "observedGeneration")
            })
            .collect();
        for rs in doomed {
            pod_control::delete(&self.lb, &replicasets(), rs, None).await?;
            tracing::debug!(
                namespace = meta_str(rs, "namespace"),
                replicaset = meta_str(rs, "name"),
                "old replica set cleaned up"
            );
        }
        Ok(())
    }

    /// `calculateStatus`.
    fn calculate_status(&self, d: &Value, rss: &[Value], new: Option<usize>) -> Value {
        let all: Vec<&Value> = rss.iter().collect();
        let available = sum(&all, |rs| status_count(rs, "availableReplicas"));
        let total = sum(&all, rs_replicas);
        let mut status = d["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        set_count(
            &mut status,
            "observedGeneration",
            int(&d["metadata"]["generation"], 0),
        );
        set_count(
            &mut status,
            "replicas",
            sum(&all, |rs| status_count(rs, "replicas")),
        );
        set_count(
            &mut status,
            "updatedReplicas",
            new.map_or(0, |n| status_count(&rss[n], "replicas")),
        );
        set_count(
            &mut status,
            "readyReplicas",
            sum(&all, |rs| status_count(rs, "readyReplicas")),
        );
        set_count(&mut status, "availableReplicas", available);
        set_count(
            &mut status,
            "unavailableReplicas",
            (total - available).max(0),
        );
        let now = self.clock.now_time();
        let cond = if available >= replicas(d) - max_unavailable(d) {
            new_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                &now,
            )
        } else {
            new_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                &now,
            )
        };
        set_condition(&mut status, cond);
        status
    }

    /// `syncRolloutStatus`: status, and the `Progressing` condition by progress and deadline.
    async fn sync_rollout_status(
        &mut self,
        d: &mut Value,
        rss: &[Value],
        new: Option<usize>,
    ) -> Result<(), ApiError> {
        let mut status = self.calculate_status(d, rss, new);
        let deadline = progress_deadline(d);
        if deadline.is_none() {
            remove_condition(&mut status, "Progressing");
        }
        let current = get_condition(&d["status"], "Progressing").cloned();
        let complete_before = int(&status["replicas"], 0) == int(&status["updatedReplicas"], 0)
            && current
                .as_ref()
                .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        let now = self.clock.now_time();
        let rs_name = new.map(|n| meta_str(&rss[n], "name").to_owned());
        if let Some(secs) = deadline
            && !complete_before
        {
            if deployment_complete(d, &status) {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} has successfully progressed."),
                    None => "Deployment has successfully progressed.".into(),
                };
                set_condition(
                    &mut status,
                    new_condition("Progressing", "True", "NewReplicaSetAvailable", msg, &now),
                );
            } else if deployment_progressing(d, &status) {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} is progressing."),
                    None => format!("Deployment {:?} is progressing.", meta_str(d, "name")),
                };
                let mut cond = new_condition("Progressing", "True", "ReplicaSetUpdated", msg, &now);
                if let Some(c) = &current
                    && c["status"] == "True"
                {
                    cond["lastTransitionTime"] = c["lastTransitionTime"].clone();
                }
                remove_condition(&mut status, "Progressing");
                set_condition(&mut status, cond);
            } else if self.timed_out(current.as_ref(), secs) {
                let msg = match &rs_name {
                    Some(n) => format!("ReplicaSet {n:?} has timed out progressing."),
                    None => format!(
                        "Deployment {:?} has timed out progressing.",
                        meta_str(d, "name")
                    ),
                };
                set_condition(
                    &mut status,
                    new_condition(
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        msg,
                        &now,
                    ),
                );
            }
        }
        if status != d["status"] {
            d["status"] = status;
            self.update_status(d).await?;
        }
        // requeueStuckDeployment: look again when the deadline is up.
        if let Some(secs) = deadline
            && !deployment_complete(d, &d["status"])
            && let Some(c) = get_condition(&d["status"], "Progressing")
            && c["reason"] != "ProgressDeadlineExceeded"
            && let Some(from) = c["lastUpdateTime"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            && let Ok(at) = from.checked_add(jiff::SignedDuration::from_secs(secs))
        {
            let after = self.clock.until(at) + Duration::from_secs(1);
            self.requeue_after = Some(self.requeue_after.map_or(after, |a| a.min(after)));
        }
        Ok(())
    }

    /// `DeploymentTimedOut`.
    fn timed_out(&self, cond: Option<&Value>, secs: i64) -> bool {
        let Some(c) = cond else {
            return false;
        };
        if c["reason"] == "NewReplicaSetAvailable" {
            return false;
        }
        if c["reason"] == "ProgressDeadlineExceeded" {
            return true;
        }
        c["lastUpdateTime"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .and_then(|from| from.checked_add(jiff::SignedDuration::from_secs(secs)).ok())
            .is_some_and(|at| at < self.clock.now())
    }
}

/// `oldPodsRunning`: old ReplicaSets still report replicas, or a pod of theirs has not ended.
fn old_pods_running(cache: &Informer, rss: &[Value], new: Option<usize>) -> bool {
    let mut old = rss
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new)
        .map(|(_, rs)| rs);
    if old.clone().any(|rs| status_count(rs, "replicas") > 0) {
        return true;
    }
    old.any(|rs| {
        cache
            .controlled_by(&pods(), meta_str(rs, "uid"))
            .into_iter()
            .any(|p| !matches!(p["status"]["phase"].as_str(), Some("Failed" | "Succeeded")))
    })
}

/// `NewRSNewReplicas`: how far the new ReplicaSet may grow now.
fn new_rs_new_replicas(d: &Value, all: &[&Value], new: &Value) -> i64 {
    let want = replicas(d);
    if !is_rolling_update(d) {
        return want;
    }
    let current: i64 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let max_total = want + max_surge(d);
    if current >= max_total {
        return rs_replicas(new);
    }
    let up = (max_total - current).min((want - rs_replicas(new)).max(0));
    rs_replicas(new) + up
}

/// `GetProportion`: the share of a scaling of `to_add` replicas this ReplicaSet gets.
fn proportion(rs: &Value, d: &Value, to_add: i64, added: i64) -> i64 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = rs_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// `getReplicaSetFraction`.
fn rs_fraction(rs: &Value, d: &Value) -> i64 {
    if replicas(d) == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = replicas(d) + max_surge(d);
    let annotated = annotation_i64(rs, MAX_REPLICAS)
        .filter(|n| *n > 0)
        .unwrap_or_else(|| int(&d["status"]["replicas"], 0));
    if annotated == 0 {
        return 0;
    }
    let size = (rs_replicas(rs) * deployment_replicas) as f64 / annotated as f64;
    size.round() as i64 - rs_replicas(rs)
}

/// `SetReplicasAnnotations`: whether either changed.
fn set_replicas_annotations(rs: &mut Value, desired: i64, max: i64) -> bool {
    if !rs["metadata"]["annotations"].is_object() {
        rs["metadata"]["annotations"] = json!({});
    }
    let a = &mut rs["metadata"]["annotations"];
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a[k] != v.as_str() {
            a[k] = json!(v);
            changed = true;
        }
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: the Deployment's annotations copied, the revision raised
/// (the old one kept in the history annotation), and for a ReplicaSet about to be created the
/// replica annotations. Whether anything changed.
fn set_new_rs_annotations(d: &Value, rs: &mut Value, new_revision: &str, exists: bool) -> bool {
    if !rs["metadata"]["annotations"].is_object() {
        rs["metadata"]["annotations"] = json!({});
    }
    let mut changed = false;
    for (k, v) in d["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if SKIP_COPY.contains(&k.as_str()) || rs["metadata"]["annotations"][k] == *v {
            continue;
        }
        rs["metadata"]["annotations"][k] = v.clone();
        changed = true;
    }
    let old = rs["metadata"]["annotations"][REVISION]
        .as_str()
        .map(str::to_owned);
    let old_n = old
        .as_deref()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or(0);
    let new_n = new_revision.parse::<i64>().unwrap_or(0);
    if old_n < new_n {
        rs["metadata"]["annotations"][REVISION] = json!(new_revision);
        changed = true;
        if let Some(old) = old {
            let history = rs["metadata"]["annotations"][REVISION_HISTORY]
                .as_str()
                .filter(|h| !h.is_empty())
                .map_or(old.clone(), |h| format!("{h},{old}"));
            rs["metadata"]["annotations"][REVISION_HISTORY] = json!(history);
        }
    }
    if !exists {
        changed |= set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deploy(replicas: i64, surge: Value, unavailable: Value) -> Value {
        json!({"spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}})
    }

    #[test]
    fn surge_rounds_up_and_unavailability_down() {
        assert_eq!(fenceposts(&deploy(5, json!("25%"), json!("25%"))), (2, 1));
        assert_eq!(fenceposts(&deploy(10, json!("25%"), json!("25%"))), (3, 2));
        assert_eq!(fenceposts(&deploy(3, json!(1), json!(0))), (1, 0));
        assert_eq!(fenceposts(&deploy(3, json!(0), json!(0))), (0, 1));
        assert_eq!(fenceposts(&deploy(1, json!("0%"), json!("10%"))), (0, 1));
        // Defaults: RollingUpdate with 25% each.
        let d = json!({"spec": {"replicas": 4}});
        assert!(is_rolling_update(&d));
        assert_eq!(fenceposts(&d), (1, 1));
        let r = json!({"spec": {"replicas": 4, "strategy": {"type": "Recreate"}}});
        assert_eq!((max_surge(&r), max_unavailable(&r)), (0, 0));
    }

    #[test]
    fn templates_compare_and_hash_without_the_hash_label_and_empty_fields() {
        let a = json!({"metadata": {"labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let b = json!({"metadata": {"labels": {"app": "web", "pod-template-hash": "x"},
                                    "creationTimestamp": null},
                       "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {}}]}});
        assert!(equal_ignore_hash(&a, &b));
        assert_eq!(compute_hash(&a, 0), compute_hash(&b, 0));
        let c = json!({"metadata": {"labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
        assert!(!equal_ignore_hash(&a, &c));
        assert_ne!(compute_hash(&a, 0), compute_hash(&c, 0));
        assert_ne!(compute_hash(&a, 0), compute_hash(&a, 1));
        assert!(
            compute_hash(&a, 0)
                .bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }

    #[test]
    fn the_new_replica_set_grows_within_the_surge() {
        let d = deploy(5, json!("25%"), json!("25%"));
        let old = json!({"spec": {"replicas": 5}});
        let new = json!({"spec": {"replicas": 0}});
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 2);
        let new = json!({"spec": {"replicas": 2}});
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 2);
        let old = json!({"spec": {"replicas": 1}});
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 5);
    }

    #[test]
    fn annotations_carry_revision_history_and_replicas() {
        let d = json!({"metadata": {"annotations": {"kubernetes.io/change-cause": "why",
                                                    REVISION: "3"}},
                       "spec": {"replicas": 4}});
        let mut rs = json!({"metadata": {"annotations": {REVISION: "1"}}});
        assert!(set_new_rs_annotations(&d, &mut rs, "4", true));
        let a = &rs["metadata"]["annotations"];
        assert_eq!(a[REVISION], "4");
        assert_eq!(a[REVISION_HISTORY], "1");
        assert_eq!(a["kubernetes.io/change-cause"], "why");
        assert!(a.get(DESIRED_REPLICAS).is_none());
        let mut fresh = json!({"metadata": {}});
        set_new_rs_annotations(&d, &mut fresh, "5", false);
        assert_eq!(fresh["metadata"]["annotations"][DESIRED_REPLICAS], "4");
        assert_eq!(fresh["metadata"]["annotations"][MAX_REPLICAS], "5");
    }

    #[test]
    fn proportional_scaling_follows_the_max_replicas_annotation() {
        // 10 → 20 replicas (surge 3 → 5): a ReplicaSet of 6 annotated with 13 gets its share.
        let d = deploy(20, json!("25%"), json!("25%"));
        let rs =
            json!({"metadata": {"annotations": {MAX_REPLICAS: "13"}}, "spec": {"replicas": 6}});
        assert_eq!(rs_fraction(&rs, &d), 6);
        assert_eq!(proportion(&rs, &d, 12, 0), 6);
        assert_eq!(proportion(&rs, &d, 12, 10), 2);
    }
}
