//! The ReplicaSet controller: keeps `spec.replicas` pods of a ReplicaSet's template.
//!
//! ## What kube-controller-manager's controller does
//!
//! `pkg/controller/replicaset` (`ReplicaSetController.syncReplicaSet`) works from informers of
//! ReplicaSets and pods. For one ReplicaSet it
//!
//! 1. lists the pods of its namespace and keeps the *active* ones (`FilterActivePods`: not
//!    `Succeeded` or `Failed`, not being deleted);
//! 2. **claims** them (`ClaimPods`): a pod it controls (the `ownerReferences` entry with
//!    `controller: true` carries its UID) whose labels no longer match `spec.selector` is
//!    released (the reference removed); an orphan (no controller) that matches is adopted (the
//!    reference added), unless the ReplicaSet is being deleted;
//! 3. **manages replicas** (`manageReplicas`), unless the ReplicaSet is being deleted: with
//!    fewer active pods than `spec.replicas` (default 1) it creates the missing ones from
//!    `spec.template`, named by the server from `generateName: <rs>-` (`<rs>-` plus five random
//!    characters), carrying the template's labels, annotations and finalizers and a controller
//!    `ownerReference` (`blockOwnerDeletion: true`); with more it deletes the surplus, the
//!    least useful first (`ActivePodsWithRanks`: unscheduled before scheduled, `Pending`
//!    before `Unknown` before `Running`, not ready before ready, newer before older), each with
//!    a UID precondition. At most `burstReplicas` (500) pods are created or deleted per sync, in
//!    slow-start batches that stop at the first error;
//! 4. writes `status` (`calculateStatus`): `replicas` (the active pods it claimed),
//!    `fullyLabeledReplicas` (those carrying every template label), `readyReplicas` (`Ready`
//!    condition `True`), `availableReplicas` (ready for at least `spec.minReadySeconds`),
//!    `observedGeneration`, and the condition `ReplicaFailure` (`FailedCreate`/`FailedDelete`)
//!    while creating or deleting pods fails. When every pod is ready but some are not available
//!    yet, it looks again after `minReadySeconds`.
//!
//! An *expectations* cache remembers the creations and deletions it is waiting to see in its
//! informer, so a second sync does not create the same pods again.
//!
//! ## What this one keeps, and how
//!
//! All of the above, reaching the server only through the loopback interface
//! ([`embedded_apiserver::loopback`]) as `system:kube-controller-manager`: its writes go through
//! authorization, admission and validation like any client's, and a pod it creates is bound and
//! run by the cluster's node like any other. Its informers are a list and a watch per resource
//! (`Informer`); before every round of syncs it reads the watch up to the server's current
//! revision, so it always sees its own earlier writes (loopback writes are in the history when
//! they return) and needs no expectations cache. Work is a queue of keys (`Queue`).
//!
//! Departures: every change is acted on after the cluster's workload delay
//! (`ControllerManagerBuilder::workload_delay`, default 500 ms, zero allowed; measured with
//! `tokio::time`, so paused-clock tests control it), where kube-controller-manager reacts at
//! once; pods are created and deleted one after the other (stopping at the first error) rather
//! than in parallel slow-start batches; the deletion ranking leaves out the ready time,
//! restart counts and co-located pods; no Events are recorded.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use apimachinery::labels::{Operator, Requirement, Selector};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::background::VirtualClock;
use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{
    DeleteParams, EventType, ListParams, Loopback, Object, Resource, Watch, WatchError, WatchEvent,
};

/// Most pods one sync of one ReplicaSet creates or deletes (`burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// Settings shared by the Deployment and ReplicaSet controllers.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// How long after a change a controller acts on it.
    pub delay: Duration,
    /// Source of the timestamps written into conditions and of "now" for availability.
    pub clock: VirtualClock,
}

/// Starts the ReplicaSet controller on `tracker`; it stops when the server shuts down.
pub fn spawn(lb: Loopback, config: Config, tracker: &TaskTracker) {
    tracker.spawn(async move {
        match ReplicaSetController::start(lb, config).await {
            Ok(c) => c.run().await,
            Err(e) => {
                tracing::warn!(error = %e.message, "the ReplicaSet controller could not start")
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// informers and the work queue, shared with the Deployment controller

/// `(namespace, name)`.
pub(crate) type Key = (String, String);

/// A list and a watch of one resource over the loopback interface, and the objects they
/// answered, by namespace (a client-go informer with its indexer, in miniature).
pub(crate) struct Informer {
    resource: Resource,
    watch: Watch,
    by_ns: HashMap<String, BTreeMap<String, Object>>,
}

/// The server is shutting down: the controller stops.
#[derive(Debug)]
pub(crate) struct Closed;

impl Informer {
    /// Lists `resource` everywhere and watches it from the list's revision.
    pub(crate) async fn start(lb: &Loopback, resource: Resource) -> Result<Self, ApiError> {
        let list = lb.list(&resource, None, &ListParams::default()).await?;
        let watch = lb.watch(&resource, None, list.resource_version)?;
        let mut informer = Informer {
            resource,
            watch,
            by_ns: HashMap::new(),
        };
        for o in list.items {
            informer.insert(o);
        }
        Ok(informer)
    }

    fn insert(&mut self, o: Object) {
        let ns = meta(&o, "namespace").to_owned();
        let name = meta(&o, "name").to_owned();
        self.by_ns.entry(ns).or_default().insert(name, o);
    }

    fn remove(&mut self, o: &Value) {
        let ns = meta(o, "namespace");
        if let Some(m) = self.by_ns.get_mut(ns) {
            m.remove(meta(o, "name"));
            if m.is_empty() {
                self.by_ns.remove(ns);
            }
        }
    }

    /// The cached object `namespace/name`.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&Object> {
        self.by_ns.get(namespace)?.get(name)
    }

    /// The cached objects of one namespace, by name.
    pub(crate) fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = &Object> {
        self.by_ns
            .get(namespace)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// Every cached object.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Object> {
        self.by_ns.values().flat_map(|m| m.values())
    }

    /// The watch, for a `select!` on [`Watch::next`] (cancel-safe) whose answer goes to
    /// [`Informer::absorb`].
    pub(crate) fn watch(&mut self) -> &mut Watch {
        &mut self.watch
    }

    /// Reads every change up to the server's current revision into the cache; the changes.
    pub(crate) async fn catch_up(&mut self, lb: &Loopback) -> Result<Vec<WatchEvent>, Closed> {
        let events = self.watch.poll();
        self.absorb(lb, events).await
    }

    /// Applies what the watch answered to the cache and hands the changes on; after a
    /// `410 Gone` lists again and reports every object as modified (and the vanished ones as
    /// deleted), as an informer's relist does.
    pub(crate) async fn absorb(
        &mut self,
        lb: &Loopback,
        answer: Result<Vec<WatchEvent>, WatchError>,
    ) -> Result<Vec<WatchEvent>, Closed> {
        match answer {
            Ok(events) => {
                for e in &events {
                    match e.kind {
                        EventType::Deleted => self.remove(&e.object),
                        EventType::Added | EventType::Modified => self.insert(e.object.clone()),
                    }
                }
                Ok(events)
            }
            Err(WatchError::Closed) => Err(Closed),
            Err(WatchError::Gone(_)) => {
                let list = match lb.list(&self.resource, None, &ListParams::default()).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(resource = %self.resource, error = %e.message, "relist failed");
                        return Err(Closed);
                    }
                };
                let watch = lb
                    .watch(&self.resource, None, list.resource_version)
                    .map_err(|_| Closed)?;
                self.watch = watch;
                let old = std::mem::take(&mut self.by_ns);
                for o in list.items {
                    self.insert(o);
                }
                let rv = list.resource_version;
                let mut events = vec![];
                for o in old.into_values().flat_map(BTreeMap::into_values) {
                    if self.get(meta(&o, "namespace"), meta(&o, "name")).is_none() {
                        events.push(self.event(EventType::Deleted, o, rv));
                    }
                }
                let now: Vec<Object> = self.all().cloned().collect();
                for o in now {
                    events.push(self.event(EventType::Modified, o, rv));
                }
                Ok(events)
            }
        }
    }

    fn event(&self, kind: EventType, object: Object, resource_version: u64) -> WatchEvent {
        WatchEvent {
            kind,
            resource: self.resource.clone(),
            object,
            previous: None,
            resource_version,
        }
    }
}

/// Keys waiting for their sync, each with the instant it is due (a rate-limited work queue's
/// `AddAfter`, keyed so a key is queued once).
#[derive(Debug)]
pub(crate) struct Queue {
    due: HashMap<Key, Instant>,
    delay: Duration,
}

impl Queue {
    /// An empty queue whose [`Queue::add`] waits `delay`.
    pub(crate) fn new(delay: Duration) -> Self {
        Queue {
            due: HashMap::new(),
            delay,
        }
    }

    /// Queues `key` after the controller's delay (an earlier due time stays).
    pub(crate) fn add(&mut self, namespace: &str, name: &str) {
        self.add_after(namespace, name, self.delay);
    }

    /// Queues `key` after `after` (the earlier of this and an existing due time wins).
    pub(crate) fn add_after(&mut self, namespace: &str, name: &str, after: Duration) {
        let at = Instant::now() + after;
        let entry = self
            .due
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert(at);
        *entry = (*entry).min(at);
    }

    /// The keys due now, taken out of the queue.
    pub(crate) fn take_due(&mut self) -> Vec<Key> {
        let now = Instant::now();
        let mut ready: Vec<Key> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        ready.sort();
        for k in &ready {
            self.due.remove(k);
        }
        ready
    }

    /// Sleeps until the next key is due (forever when none is queued).
    pub(crate) async fn next_due(&self) {
        match self.due.values().min().copied() {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// object helpers, shared with the Deployment controller

/// `metadata.<field>` as a string (`""` when absent).
pub(crate) fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// Whether the object carries a `deletionTimestamp`.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// The owner reference with `controller: true`, if any.
pub(crate) fn controller_ref(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
}

/// The `ownerReferences` entry naming `owner` (`api_version` `kind`) as controller
/// (`metav1.NewControllerRef`).
pub(crate) fn new_controller_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind, "name": meta(owner, "name"),
        "uid": meta(owner, "uid"), "controller": true, "blockOwnerDeletion": true,
    })
}

/// An object's labels as a map (empty when absent).
pub(crate) fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    string_map(&obj["metadata"]["labels"])
}

/// A JSON object of strings as a map (other values skipped).
pub(crate) fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The selector of a `metav1.LabelSelector` (`LabelSelectorAsSelector`): `None` when it is
/// invalid; an empty or missing one selects nothing here, as the workload controllers treat it
/// (validation refuses it anyway).
pub(crate) fn selector_of(v: &Value) -> Option<Selector> {
    let mut reqs = vec![];
    for (k, val) in v["matchLabels"].as_object().into_iter().flatten() {
        reqs.push(Requirement::new(k.clone(), Operator::Equals, [val.as_str()?]).ok()?);
    }
    for e in v["matchExpressions"].as_array().into_iter().flatten() {
        let op = match e["operator"].as_str()? {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            _ => return None,
        };
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        reqs.push(Requirement::new(e["key"].as_str()?, op, values).ok()?);
    }
    if reqs.is_empty() {
        return None;
    }
    Some(Selector::from_requirements(reqs))
}

/// An `int32` field as an `i64` (`default` when absent).
pub(crate) fn int(v: &Value, default: i64) -> i64 {
    v.as_i64().unwrap_or(default)
}

/// Sets `key` to `n`, or removes it when `n` is zero (Go's `omitempty`).
pub(crate) fn set_count(status: &mut Value, key: &str, n: i64) {
    if n != 0 {
        status[key] = json!(n);
    } else if let Some(o) = status.as_object_mut() {
        o.remove(key);
    }
}

/// Whether the pod's `Ready` condition is `True` (`podutil.IsPodReady`).
pub(crate) fn is_pod_ready(p: &Value) -> bool {
    ready_condition(p).is_some_and(|c| c["status"] == "True")
}

fn ready_condition(p: &Value) -> Option<&Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Ready for at least `min_ready_seconds` at `now` (`podutil.IsPodAvailable`).
pub(crate) fn is_pod_available(p: &Value, min_ready_seconds: i64, now: jiff::Timestamp) -> bool {
    let Some(c) = ready_condition(p).filter(|c| c["status"] == "True") else {
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

/// Not finished and not being deleted (`controller.IsPodActive`).
pub(crate) fn is_pod_active(p: &Value) -> bool {
    !is_deleting(p) && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// Whether every label of `want` is among `labels`.
fn has_all_labels(labels: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// `obj` with `ownerReferences` changed by `f` (adoption and release), for an update that the
/// object's resourceVersion guards.
pub(crate) fn with_owner_refs(obj: &Value, f: impl FnOnce(&mut Vec<Value>)) -> Value {
    let mut updated = obj.clone();
    let mut refs = updated["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    f(&mut refs);
    if refs.is_empty() {
        if let Some(m) = updated["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
    } else {
        updated["metadata"]["ownerReferences"] = Value::Array(refs);
    }
    updated
}

/// A condition as the workload kinds write them.
pub(crate) fn condition(ty: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": ty, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": now})
}

// ---------------------------------------------------------------------------------------------
// the controller

const POD_PHASE_RANK: [&str; 3] = ["Pending", "Unknown", "Running"];

fn replicasets() -> Resource {
    Resource::apps("replicasets")
}

fn pods() -> Resource {
    Resource::core("pods")
}

struct ReplicaSetController {
    lb: Loopback,
    clock: VirtualClock,
    rss: Informer,
    pods: Informer,
    queue: Queue,
}

impl ReplicaSetController {
    async fn start(lb: Loopback, config: Config) -> Result<Self, ApiError> {
        let rss = Informer::start(&lb, replicasets()).await?;
        let pods = Informer::start(&lb, pods()).await?;
        let mut queue = Queue::new(config.delay);
        for rs in rss.all() {
            queue.add(meta(rs, "namespace"), meta(rs, "name"));
        }
        Ok(ReplicaSetController {
            lb,
            clock: config.clock,
            rss,
            pods,
            queue,
        })
    }

    async fn run(mut self) {
        let shutdown = self.lb.shutdown();
        loop {
            let due = self.queue.take_due();
            if !due.is_empty() {
                if self.catch_up().await.is_err() {
                    return;
                }
                for (ns, name) in due {
                    self.sync(&ns, &name).await;
                }
                continue;
            }
            let lb = self.lb.clone();
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = self.rss.watch().next() => self.rss.absorb(&lb, r).await.map(|e| (e, vec![])),
                r = self.pods.watch().next() => self.pods.absorb(&lb, r).await.map(|e| (vec![], e)),
                () = self.queue.next_due() => Ok((vec![], vec![])),
            };
            match result {
                Ok((rs_events, pod_events)) => self.enqueue(&rs_events, &pod_events),
                Err(Closed) => return,
            }
        }
    }

    async fn catch_up(&mut self) -> Result<(), Closed> {
        let rs_events = self.rss.catch_up(&self.lb).await?;
        let pod_events = self.pods.catch_up(&self.lb).await?;
        self.enqueue(&rs_events, &pod_events);
        Ok(())
    }

    /// The ReplicaSets a batch of changes concerns: the changed ones; the controller of a
    /// changed pod (and the one it had before); for an orphan pod, every ReplicaSet of its
    /// namespace whose selector matches it (`getPodReplicaSets`).
    fn enqueue(&mut self, rs_events: &[WatchEvent], pod_events: &[WatchEvent]) {
        for e in rs_events {
            self.queue
                .add(meta(&e.object, "namespace"), meta(&e.object, "name"));
        }
        for e in pod_events {
            let ns = meta(&e.object, "namespace").to_owned();
            let mut owners = vec![];
            for p in std::iter::once(&e.object).chain(e.previous.as_ref()) {
                match controller_ref(p) {
                    Some(r) if r["kind"] == "ReplicaSet" => {
                        if let Some(n) = r["name"].as_str() {
                            owners.push(n.to_owned());
                        }
                    }
                    Some(_) => {}
                    None if e.kind != EventType::Deleted && is_pod_active(p) => {
                        let labels = labels_of(p);
                        for rs in self.rss.in_namespace(&ns) {
                            if selector_of(&rs["spec"]["selector"])
                                .is_some_and(|s| s.matches(&labels))
                            {
                                owners.push(meta(rs, "name").to_owned());
                            }
                        }
                    }
                    None => {}
                }
            }
            owners.sort();
            owners.dedup();
            for o in owners {
                self.queue.add(&ns, &o);
            }
        }
    }

    async fn sync(&mut self, ns: &str, name: &str) {
        let Some(rs) = self.rss.get(ns, name).cloned() else {
            return;
        };
        let Some(selector) = selector_of(&rs["spec"]["selector"]) else {
            return;
        };
        let uid = meta(&rs, "uid").to_owned();
        let deleting = is_deleting(&rs);

        // Claim the active pods: ours that match, orphans that match (adopted), ours that no
        // longer match (released).
        let mut claimed: Vec<Value> = vec![];
        let mut adopt = vec![];
        let mut release = vec![];
        for p in self.pods.in_namespace(ns).filter(|p| is_pod_active(p)) {
            let matches = selector.matches(&labels_of(p));
            match controller_ref(p) {
                Some(r) if r["uid"] == uid.as_str() => {
                    if matches {
                        claimed.push(p.to_value());
                    } else {
                        release.push(p.clone());
                    }
                }
                Some(_) => {}
                None if matches && !deleting => adopt.push(p.clone()),
                None => {}
            }
        }
        for p in adopt {
            let owner = new_controller_ref(&rs, "apps/v1", "ReplicaSet");
            let updated = with_owner_refs(&p, |refs| refs.push(owner));
            match self.lb.update(&pods(), ns, updated).await {
                Ok(pod) => claimed.push(pod),
                Err(e) => {
                    tracing::debug!(namespace = ns, pod = meta(&p, "name"), error = %e.message, "adopting a pod failed")
                }
            }
        }
        for p in release {
            let updated = with_owner_refs(&p, |refs| refs.retain(|r| r["uid"] != uid.as_str()));
            if let Err(e) = self.lb.update(&pods(), ns, updated).await {
                tracing::debug!(namespace = ns, pod = meta(&p, "name"), error = %e.message, "releasing a pod failed");
            }
        }

        let failure = if deleting {
            None
        } else {
            self.manage_replicas(&rs, &claimed).await
        };
        self.write_status(&rs, &claimed, failure).await;
    }

    /// Creates or deletes pods towards `spec.replicas`; the `ReplicaFailure` reason and
    /// message when a write failed.
    async fn manage_replicas(&mut self, rs: &Value, active: &[Value]) -> Option<(String, String)> {
        let ns = meta(rs, "namespace");
        let replicas = int(&rs["spec"]["replicas"], 1).max(0);
        let count = active.len() as i64;
        if count < replicas {
            let missing = usize::try_from(replicas - count).unwrap_or(usize::MAX);
            for _ in 0..missing.min(BURST_REPLICAS) {
                if let Err(e) = self.lb.create(&pods(), ns, pod_from_template(rs)).await {
                    tracing::warn!(namespace = ns, replicaset = meta(rs, "name"), error = %e.message, "creating a pod failed");
                    return Some(("FailedCreate".into(), e.message));
                }
            }
        } else if count > replicas {
            let surplus = usize::try_from(count - replicas).unwrap_or(usize::MAX);
            let mut ranked: Vec<&Value> = active.iter().collect();
            ranked.sort_by_key(|p| deletion_rank(p));
            for p in ranked.into_iter().take(surplus.min(BURST_REPLICAS)) {
                let params = DeleteParams {
                    uid: Some(meta(p, "uid").to_owned()),
                    ..Default::default()
                };
                match self.lb.delete(&pods(), ns, meta(p, "name"), &params).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => {
                        tracing::warn!(namespace = ns, pod = meta(p, "name"), error = %e.message, "deleting a pod failed");
                        return Some(("FailedDelete".into(), e.message));
                    }
                }
            }
        }
        None
    }

    async fn write_status(
        &mut self,
        rs: &Value,
        active: &[Value],
        failure: Option<(String, String)>,
    ) {
        let ns = meta(rs, "namespace");
        let name = meta(rs, "name");
        let now = self.clock.now();
        let min_ready = int(&rs["spec"]["minReadySeconds"], 0);
        let template_labels = string_map(&rs["spec"]["template"]["metadata"]["labels"]);
        let fully_labeled = active
            .iter()
            .filter(|p| has_all_labels(&labels_of(p), &template_labels))
            .count() as i64;
        let ready = active.iter().filter(|p| is_pod_ready(p)).count() as i64;
        let available = active
            .iter()
            .filter(|p| is_pod_available(p, min_ready, now))
            .count() as i64;
        let mut status = rs["status"].clone();
        if !status.is_object() {
            status = json!({});
        }
        status["replicas"] = json!(active.len());
        set_count(&mut status, "fullyLabeledReplicas", fully_labeled);
        set_count(&mut status, "readyReplicas", ready);
        set_count(&mut status, "availableReplicas", available);
        set_count(
            &mut status,
            "observedGeneration",
            int(&rs["metadata"]["generation"], 0),
        );
        let mut conditions: Vec<Value> =
            status["conditions"].as_array().cloned().unwrap_or_default();
        let has_failure = conditions.iter().any(|c| c["type"] == "ReplicaFailure");
        match failure {
            Some((reason, message)) if !has_failure => conditions.push(condition(
                "ReplicaFailure",
                "True",
                &reason,
                &message,
                &self.clock.now_time(),
            )),
            None if has_failure => conditions.retain(|c| c["type"] != "ReplicaFailure"),
            _ => {}
        }
        if conditions.is_empty() {
            if let Some(o) = status.as_object_mut() {
                o.remove("conditions");
            }
        } else {
            status["conditions"] = Value::Array(conditions);
        }
        if status != rs["status"] {
            let mut updated = rs.clone();
            updated["status"] = status;
            match self.lb.update_status(&replicasets(), ns, updated).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return,
                Err(e) => {
                    tracing::debug!(namespace = ns, replicaset = name, error = %e.message, "status update failed; retrying");
                    self.queue.add_after(ns, name, Duration::ZERO);
                    return;
                }
            }
        }
        let replicas = int(&rs["spec"]["replicas"], 1);
        if min_ready > 0 && ready == replicas && available != replicas {
            self.queue.add_after(
                ns,
                name,
                Duration::from_secs(u64::try_from(min_ready).unwrap_or(0)),
            );
        }
    }
}

/// How useful a pod is, least useful first (a shortened `ActivePodsWithRanks`).
fn deletion_rank(p: &Value) -> (bool, usize, bool, std::cmp::Reverse<String>) {
    let scheduled = p["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let phase = p["status"]["phase"].as_str().unwrap_or("Pending");
    let phase_rank = POD_PHASE_RANK.iter().position(|x| *x == phase).unwrap_or(0);
    (
        scheduled,
        phase_rank,
        is_pod_ready(p),
        std::cmp::Reverse(meta(p, "creationTimestamp").to_owned()),
    )
}

/// A pod of the ReplicaSet's template (`controller.GetPodFromTemplate`).
fn pod_from_template(rs: &Value) -> Value {
    let template = &rs["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{}-", meta(rs, "name")),
        "namespace": meta(rs, "namespace"),
        "ownerReferences": [new_controller_ref(rs, "apps/v1", "ReplicaSet")],
    });
    for field in ["labels", "annotations", "finalizers"] {
        let v = &template["metadata"][field];
        if !v.is_null() {
            metadata[field] = v.clone();
        }
    }
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_match_labels_and_expressions() {
        let s = selector_of(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}))
        .unwrap();
        let labels = |v: Value| string_map(&v);
        assert!(s.matches(&labels(json!({"app": "web", "tier": "a"}))));
        assert!(!s.matches(&labels(json!({"app": "web"}))));
        assert!(selector_of(&json!({})).is_none());
        assert!(
            selector_of(&json!({"matchExpressions": [{"key": "k", "operator": "Bad"}]})).is_none()
        );
    }

    #[test]
    fn unscheduled_pending_and_unready_pods_go_first() {
        let pod = |node: &str, phase: &str, ready: bool, created: &str| {
            json!({"metadata": {"creationTimestamp": created},
                   "spec": {"nodeName": node},
                   "status": {"phase": phase, "conditions": [
                       {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
        };
        let mut pods = [
            pod("n", "Running", true, "2024-01-01T00:00:00Z"),
            pod("n", "Running", true, "2024-01-02T00:00:00Z"),
            pod("n", "Running", false, "2024-01-01T00:00:00Z"),
            pod("", "Pending", false, "2024-01-01T00:00:00Z"),
            pod("n", "Pending", false, "2024-01-01T00:00:00Z"),
        ];
        pods.sort_by_key(deletion_rank);
        assert_eq!(pods[0]["spec"]["nodeName"], "");
        assert_eq!(pods[1]["status"]["phase"], "Pending");
        assert_eq!(pods[2]["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            pods[3]["metadata"]["creationTimestamp"],
            "2024-01-02T00:00:00Z"
        );
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let p = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert!(is_pod_available(&p, 0, at("2024-01-01T00:00:00Z")));
        assert!(!is_pod_available(&p, 10, at("2024-01-01T00:00:09Z")));
        assert!(is_pod_available(&p, 10, at("2024-01-01T00:00:10Z")));
    }

    #[test]
    fn pods_from_the_template_are_owned_and_named_by_the_server() {
        let rs = json!({"metadata": {"name": "web-abc", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let p = pod_from_template(&rs);
        assert_eq!(p["metadata"]["generateName"], "web-abc-");
        assert_eq!(p["metadata"]["labels"]["app"], "web");
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(p["spec"]["containers"][0]["image"], "nginx");
    }
}
