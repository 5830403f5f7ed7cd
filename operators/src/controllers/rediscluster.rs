//! # The RedisCluster controller: an owned StatefulSet, and a finalizer
//!
//! A [`RedisCluster`] asks for `spec.size` Redis pods with stable identities
//! (`<name>-0`, `<name>-1`, ...) behind a headless Service. The controller owns a StatefulSet
//! and the Service, and reports the ready pods' names in `status.nodes`. It teaches two things
//! the other operators do not:
//!
//! * **Watching the grandchildren.** The pods are created by the StatefulSet controller, not by
//!   this one, but `status.nodes` is about them, so the controller watches pods too and maps a
//!   pod to its cluster through the label [`LABEL_CLUSTER`] the pod template carries. The pod's
//!   own controller reference points at the StatefulSet; only pods whose StatefulSet is the
//!   cluster's count as nodes.
//! * **A finalizer.** Deleting an object with finalizers only sets `metadata.deletionTimestamp`;
//!   the object stays until every finalizer is removed. The controller adds
//!   [`FINALIZER`] to every RedisCluster, and when one is being deleted it runs its cleanup
//!   first: it deletes the StatefulSet and the Service, waits until they and every pod of the
//!   cluster are gone, records a Normal `CleanedUp` event, and only then removes the finalizer,
//!   letting the object go. (Owner references alone would also remove the children, in the
//!   background and with nobody to tell; a finalizer is how an operator runs its own logic,
//!   such as a final backup or releasing something outside the cluster, before its object
//!   disappears.)
//!
//! ## The sync handler, step by step
//!
//! 1. **Read the RedisCluster from the lister.** Gone: nothing to do.
//!    Sharded (`--shard-mode=sharded`) and drained: release it to the sharder and stop
//!    ([`sample_controller_runtime::sharding::drain`]).
//! 2. **Being deleted** (`deletionTimestamp` set) and still carrying the finalizer: clean up
//!    (above). Without our finalizer: nothing to do.
//! 3. **No finalizer yet**: add it (an update of the object with the cached
//!    `resourceVersion`; the update event brings the key back).
//! 4. **Validate the spec** ([`validate`]): `size` at least 1, an image without spaces. A bad
//!    spec gets a Warning `InvalidSpec` event and `Degraded=True`, and is not retried.
//! 5. **The headless Service** (`clusterIP: None`, port 6379): created when absent; one
//!    without the label [`LABEL_CONTROL_PLANE`] (made by an earlier version) gets it.
//! 6. **The StatefulSet**, named like the cluster: created when absent (with
//!    [`Expectations`]), else its replicas, image and [`LABEL_CONTROL_PLANE`] label are put
//!    back to the spec. A create answered 409 AlreadyExists means the cache
//!    does not show a StatefulSet that exists (on a shard: the cluster just moved here): it is
//!    read and adopted by name ([`get_existing`]) when its controller reference is ours. Scaling is the StatefulSet controller's job: it adds pods
//!    in ordinal order and removes the highest ordinals first.
//! 7. **Status**: the names of the cluster's Running and Ready pods in ordinal order
//!    (`nodes`), their count (`readyReplicas`), and the conditions `Available` (all `size`
//!    nodes ready) and `Degraded`, written only when changed (with the cached
//!    `resourceVersion`; a 409 Conflict is retried with backoff and reads the newer copy).
//!
//! Objects of those names that this RedisCluster does not control are never taken over:
//! Warning `ErrResourceExists` and `Degraded=True`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::get_existing;
use crate::apis::conditions::{Condition, ConditionStatus, set_condition};
use crate::apis::rediscluster::{DEFAULT_IMAGE, FINALIZER};
use crate::apis::{RedisCluster, RedisClusterSpec, RedisClusterStatus};
use crate::slim::PodSummary;
use sample_client_go::cache::{
    Deleted, EventHandlerFns, Lister, ListerWatcherSource, ObjectMetaAccess, Selector,
    SharedInformerFactory, key_of, split_key,
};
use sample_client_go::client::{Api, Client, DeleteParams, PostParams, PropagationPolicy};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::QueueKey;
use sample_controller_runtime::controller::{
    Clock, Expectations, Operator, RunError, SyncHandler, SyncStats, Workers, object_to_sync,
};
use sample_controller_runtime::ownership::{
    LABEL_INSTANCE, SyncError, controller_ref_of, dependent_metadata, is_controlled_by,
    owner_handlers, standard_labels, write_status_if_changed,
};

/// The recorder's source component and the field manager of every write.
pub const CONTROLLER_NAME: &str = "rediscluster-controller";

/// The label on every pod of a cluster: its RedisCluster's name.
pub const LABEL_CLUSTER: &str = "cache.example.com/cluster";

/// The label the operator guide lists its objects by
/// (`kubectl get statefulsets,svc -l control-plane=redis-operator`), with the value
/// [`CONTROL_PLANE`], on every cluster's StatefulSet and Service (not on the Redis pods:
/// in the guide the operator's own pods carry it).
pub const LABEL_CONTROL_PLANE: &str = "control-plane";
/// See [`LABEL_CONTROL_PLANE`].
pub const CONTROL_PLANE: &str = "redis-operator";

/// The Redis port.
pub const REDIS_PORT: i32 = 6379;

/// The name of the Redis container.
pub const CONTAINER_NAME: &str = "redis";

/// Condition types.
pub const CONDITION_AVAILABLE: &str = "Available";
/// See [`CONDITION_AVAILABLE`].
pub const CONDITION_DEGRADED: &str = "Degraded";

/// Event and condition reasons.
pub mod reason {
    /// Normal: the StatefulSet or Service was created.
    pub const CREATED: &str = "Created";
    /// Normal: the StatefulSet was scaled or re-imaged to match the spec.
    pub const SCALED: &str = "Scaled";
    /// Normal: the finalizer's cleanup finished; the RedisCluster can go.
    pub const CLEANED_UP: &str = "CleanedUp";
    /// Warning: the spec cannot be acted on.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Warning: an object of the cluster's name is not controlled by it.
    pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// Condition: all is well.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Condition: every node is ready.
    pub const ALL_NODES_READY: &str = "AllNodesReady";
    /// Condition: some nodes are not ready yet.
    pub const NODES_NOT_READY: &str = "NodesNotReady";
}

/// Checks the spec; the message names the field and the value.
pub fn validate(spec: &RedisClusterSpec) -> Result<(), String> {
    if spec.size < 1 {
        return Err(format!("spec.size: {} must be at least 1", spec.size));
    }
    if let Some(image) = &spec.image
        && (image.trim().is_empty() || image.chars().any(char::is_whitespace))
    {
        return Err(format!("spec.image: {image:?} is not an image reference"));
    }
    Ok(())
}

/// The RedisCluster controller. Build it with [`RedisClusterController::new`], start the
/// factory, then [`run`](sample_controller_runtime::controller::run) it (the manager does both).
pub struct RedisClusterController {
    client: Client,
    cluster_lister: Lister<RedisCluster>,
    statefulset_lister: Lister<StatefulSet>,
    service_lister: Lister<Service>,
    /// Pods in the slim form of the shared pod cache ([`PodSummary`]).
    pod_lister: Lister<PodSummary>,
    workers: Workers,
    recorder: EventRecorder,
    expectations: Arc<Expectations>,
    clock: Clock,
}

impl RedisClusterController {
    /// `NewController`: RedisCluster adds and changes (spec, finalizers, deletion), changes to
    /// the StatefulSet and Service it controls, and changes to pods labelled with a cluster's
    /// name all enqueue that cluster.
    pub fn new<S: ListerWatcherSource>(
        client: Client,
        factory: &SharedInformerFactory<S>,
        recorder: EventRecorder,
        queue: RateLimitingQueue<QueueKey>,
        clock: Clock,
        stats: SyncStats,
    ) -> Result<Arc<Self>, RunError> {
        let cluster_informer = factory.informer::<RedisCluster>();
        let statefulset_informer = factory.informer::<StatefulSet>();
        let service_informer = factory.informer::<Service>();
        let pod_informer = factory.informer::<PodSummary>();
        let expectations = Arc::new(Expectations::default());

        let cluster_handler = {
            let (q1, q2) = (queue.clone(), queue.clone());
            let e = Arc::clone(&expectations);
            EventHandlerFns::<RedisCluster>::new()
                .on_add(move |c, _initial| q1.add(key_of(c.as_ref()).into()))
                .on_update(move |old, new| {
                    // Our own status writes change none of these.
                    if old.spec != new.spec
                        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                        || old.metadata.finalizers != new.metadata.finalizers
                    {
                        q2.add(key_of(new.as_ref()).into());
                    }
                })
                .on_delete(move |gone: Deleted<RedisCluster>| e.forget(&gone.key()))
        };
        let registered = RunError::informer::<Self>;
        let mut synced = vec![
            cluster_informer
                .add_event_handler(cluster_handler)
                .map_err(registered)?,
        ];
        synced.push(
            statefulset_informer
                .add_event_handler(owner_handlers::<RedisCluster, StatefulSet>(
                    &queue,
                    Some(Arc::clone(&expectations)),
                ))
                .map_err(registered)?,
        );
        synced.push(
            service_informer
                .add_event_handler(owner_handlers::<RedisCluster, Service>(&queue, None))
                .map_err(registered)?,
        );
        let pod_handler = {
            let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
            EventHandlerFns::<PodSummary>::new()
                .on_add(move |p, _initial| {
                    if let Some(k) = cluster_key(&p) {
                        q1.add(k.into());
                    }
                })
                .on_update(move |old, new| {
                    if old.metadata.resource_version != new.metadata.resource_version
                        && let Some(k) = cluster_key(&new)
                    {
                        q2.add(k.into());
                    }
                })
                .on_delete(move |gone: Deleted<PodSummary>| {
                    if let Some(k) = cluster_key(gone.object()) {
                        q3.add(k.into());
                    }
                })
        };
        synced.push(
            pod_informer
                .add_event_handler(pod_handler)
                .map_err(registered)?,
        );

        let cluster_lister = cluster_informer.lister();
        let workers = Workers::new(queue, stats, synced)
            .release_drained(&cluster_lister, &client, Some(Arc::clone(&expectations)))
            .replay_from(&cluster_lister);
        Ok(Arc::new(RedisClusterController {
            client,
            cluster_lister,
            statefulset_lister: statefulset_informer.lister(),
            service_lister: service_informer.lister(),
            pod_lister: pod_informer.lister(),
            workers,
            recorder,
            expectations,
            clock,
        }))
    }
}

/// `Run` is the shared [`sample_controller_runtime::controller::run`]: it waits for the four caches, then starts the workers.
impl Operator for RedisClusterController {
    const NAME: &'static str = "rediscluster";

    fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl SyncHandler for RedisClusterController {
    type Error = SyncError;

    /// `syncHandler` (see the module documentation for the seven steps).
    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, SyncError> {
        // 1. (none when deleted, or released to the sharder)
        let Some(cluster) = object_to_sync(&self.cluster_lister, &self.expectations, key) else {
            return Ok(None);
        };
        let (namespace, name) = split_key(key);
        let namespace = namespace.unwrap_or_default();
        let pp = PostParams::with_field_manager(CONTROLLER_NAME);
        let has_finalizer = cluster
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER);

        // 2.
        if cluster.metadata.deletion_timestamp.is_some() {
            if has_finalizer {
                self.finalize(&cluster, namespace, name, &pp).await?;
            }
            return Ok(None);
        }

        // 3.
        if !has_finalizer {
            self.add_finalizer(key, &cluster, &pp).await?;
            return Ok(None);
        }

        let now = self.clock.now();
        let mut status = cluster.status.clone().unwrap_or_default();

        // 4.
        if let Err(message) = validate(&cluster.spec) {
            self.degraded(&cluster, status, reason::INVALID_SPEC, message, &pp)
                .await?;
            return Ok(None);
        }
        let (Some(want_sts), Some(want_svc)) = (new_statefulset(&cluster), new_service(&cluster))
        else {
            return Err(SyncError::missing_uid::<RedisCluster, StatefulSet>(key));
        };

        // 5. and 6.
        let mut not_ours = self.sync_service(key, &cluster, &want_svc, &pp).await?;
        if not_ours.is_ok() {
            not_ours = self.sync_statefulset(key, &cluster, &want_sts, &pp).await?;
        }
        if let Err(message) = not_ours {
            self.degraded(&cluster, status, reason::ERR_RESOURCE_EXISTS, message, &pp)
                .await?;
            return Ok(None);
        }

        // 7.
        status.nodes = self.ready_nodes(namespace, name);
        status.ready_replicas = i32::try_from(status.nodes.len()).unwrap_or(i32::MAX);
        let ready = status.ready_replicas;
        let size = cluster.spec.size;
        let (available, why) = if ready >= size {
            (ConditionStatus::True, reason::ALL_NODES_READY)
        } else {
            (ConditionStatus::False, reason::NODES_NOT_READY)
        };
        let generation = cluster.metadata.generation;
        set_condition(
            &mut status.conditions,
            Condition::new(
                CONDITION_AVAILABLE,
                available,
                why,
                format!("{ready} of {size} node(s) ready"),
                generation,
                now,
            ),
        );
        set_condition(
            &mut status.conditions,
            Condition::new(
                CONDITION_DEGRADED,
                ConditionStatus::False,
                reason::AS_EXPECTED,
                "",
                generation,
                now,
            ),
        );
        write_status_if_changed(&self.client, &pp, &*cluster, status).await?;
        Ok(None)
    }

    fn is_conflict(err: &SyncError) -> bool {
        err.is_conflict()
    }

    /// A Warning `ReconciliationFailed` event on the object with the error (see
    /// [`sample_controller_runtime::controller::record_reconcile_error`]).
    fn on_sync_error(&self, key: &str, message: &str) {
        sample_controller_runtime::controller::record_reconcile_error(
            &self.cluster_lister,
            &self.recorder,
            key,
            message,
        );
    }
}

impl RedisClusterController {
    /// Step 3: adds [`FINALIZER`] with an update carrying the cached `resourceVersion` (the
    /// update event brings the key back). A cluster deleted meanwhile is no error.
    async fn add_finalizer(
        &self,
        key: &str,
        cluster: &RedisCluster,
        pp: &PostParams,
    ) -> Result<(), SyncError> {
        let mut updated = cluster.clone();
        updated
            .metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(FINALIZER.to_string());
        let namespace = split_key(key).0.unwrap_or_default();
        match Api::<RedisCluster>::namespaced(self.client.clone(), namespace)
            .update(pp, &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(SyncError::api::<RedisCluster>(
                key,
                "adding the finalizer",
                e,
            )),
        }
    }

    /// Step 5: creates the headless Service when absent (one created meanwhile is no error).
    /// `Ok(Err(message))` reports a Service of that name that this cluster does not control.
    async fn sync_service(
        &self,
        key: &str,
        cluster: &RedisCluster,
        want: &Service,
        pp: &PostParams,
    ) -> Result<Result<(), String>, SyncError> {
        let (namespace, name) = split_key(key);
        match self.service_lister.get_by_key(key) {
            Some(s) if !is_controlled_by(&s.metadata, cluster) => Ok(Err(format!(
                "Service {name:?} already exists and is not managed by RedisCluster"
            ))),
            Some(s) => {
                let Some(labelled) = with_control_plane_label(&s.metadata) else {
                    return Ok(Ok(()));
                };
                let fixed = Service {
                    metadata: labelled,
                    ..s.as_ref().clone()
                };
                Api::<Service>::namespaced(self.client.clone(), namespace.unwrap_or_default())
                    .update(pp, &fixed)
                    .await
                    .map_err(|e| SyncError::api::<RedisCluster>(key, "labelling the Service", e))?;
                Ok(Ok(()))
            }
            None => {
                let services =
                    Api::<Service>::namespaced(self.client.clone(), namespace.unwrap_or_default());
                match services.create(pp, want).await {
                    Ok(_) => Ok(Ok(())),
                    Err(e) if e.is_already_exists() => Ok(Ok(())),
                    Err(e) => Err(SyncError::api::<RedisCluster>(
                        key,
                        "creating the Service",
                        e,
                    )),
                }
            }
        }
    }

    /// Step 6: creates the StatefulSet when absent (with [`Expectations`]; while a creation is
    /// outstanding, absent means "on its way"), else puts its replicas and image back to the
    /// spec, with a Normal `Created` or `Scaled` event. `Ok(Err(message))` reports a
    /// StatefulSet of that name that this cluster does not control.
    async fn sync_statefulset(
        &self,
        key: &str,
        cluster: &RedisCluster,
        want: &StatefulSet,
        pp: &PostParams,
    ) -> Result<Result<(), String>, SyncError> {
        let (namespace, name) = split_key(key);
        let err = |action, e| SyncError::api::<RedisCluster>(key, action, e);
        let statefulsets =
            Api::<StatefulSet>::namespaced(self.client.clone(), namespace.unwrap_or_default());
        let size = cluster.spec.size;
        let image = image_of(&cluster.spec);
        let existing = match self.statefulset_lister.get_by_key(key) {
            None if !self.expectations.satisfied(key) => None,
            None => match self
                .expectations
                .expecting(key, statefulsets.create(pp, want))
                .await
            {
                Ok(_) => {
                    self.recorder.event(
                        cluster,
                        EventType::Normal,
                        reason::CREATED,
                        &format!("created StatefulSet {name} with {size} node(s) of {image}"),
                    );
                    None
                }
                // It exists but this cache does not show it: on a shard, the cluster has just
                // moved here and the sharder has not relabelled the StatefulSet yet. Adopt it
                // by name (its controller reference must be ours), with the owner's labels.
                Err(e) if e.is_already_exists() => Some(Arc::new(
                    get_existing(&statefulsets, cluster, name, CONTROLLER_NAME)
                        .await
                        .map_err(|e| err("reading the existing StatefulSet", e))?,
                )),
                Err(e) => return Err(err("creating the StatefulSet", e)),
            },
            Some(sts) => Some(sts),
        };
        match existing {
            None => {}
            Some(sts) if !is_controlled_by(&sts.metadata, cluster) => {
                return Ok(Err(format!(
                    "StatefulSet {name:?} already exists and is not managed by RedisCluster"
                )));
            }
            Some(sts) => {
                if let Some(fixed) = statefulset_drift(&sts, size, &image) {
                    statefulsets
                        .update(pp, &fixed)
                        .await
                        .map_err(|e| err("updating the StatefulSet", e))?;
                    // Not when only the label was put back.
                    if fixed.spec != sts.spec {
                        self.recorder.event(
                            cluster,
                            EventType::Normal,
                            reason::SCALED,
                            &format!("StatefulSet {name} set to {size} node(s) of {image}"),
                        );
                    }
                }
            }
        }
        Ok(Ok(()))
    }
}

impl RedisClusterController {
    /// The finalizer's cleanup: delete the StatefulSet and the Service, wait until they and
    /// every pod of the cluster are gone (their delete events bring the key back), then record
    /// `CleanedUp` and remove the finalizer.
    async fn finalize(
        &self,
        cluster: &RedisCluster,
        namespace: &str,
        name: &str,
        pp: &PostParams,
    ) -> Result<(), SyncError> {
        let key = key_of(cluster);
        let err = |action, e| SyncError::api::<RedisCluster>(&key, action, e);
        let background = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let mut waiting = false;
        if let Some(sts) = self.statefulset_lister.get_by_key(&key)
            && is_controlled_by(&sts.metadata, cluster)
        {
            waiting = true;
            if sts.metadata.deletion_timestamp.is_none() {
                match Api::<StatefulSet>::namespaced(self.client.clone(), namespace)
                    .delete(name, &background)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(err("deleting the StatefulSet", e)),
                }
            }
        }
        if let Some(svc) = self.service_lister.get_by_key(&key)
            && is_controlled_by(&svc.metadata, cluster)
        {
            waiting = true;
            if svc.metadata.deletion_timestamp.is_none() {
                match Api::<Service>::namespaced(self.client.clone(), namespace)
                    .delete(name, &background)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(err("deleting the Service", e)),
                }
            }
        }
        let pods_left = self.cluster_pods(namespace, name).len();
        if waiting || pods_left > 0 {
            tracing::debug!(key, pods_left, "cleanup in progress");
            return Ok(());
        }
        self.recorder.event(
            cluster,
            EventType::Normal,
            reason::CLEANED_UP,
            &format!("deleted StatefulSet {name}, Service {name} and their pods"),
        );
        let mut updated = cluster.clone();
        if let Some(f) = updated.metadata.finalizers.as_mut() {
            f.retain(|f| f != FINALIZER);
        }
        match Api::<RedisCluster>::namespaced(self.client.clone(), namespace)
            .update(pp, &updated)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(err("removing the finalizer", e)),
        }
    }

    /// Every pod labelled with the cluster's name, whoever created it.
    fn cluster_pods(&self, namespace: &str, name: &str) -> Vec<Arc<PodSummary>> {
        // Filtered by hand rather than with a label selector: a cluster name may be longer
        // than a label value is allowed to be, and then no pod can carry it anyway.
        self.pod_lister
            .namespace(namespace)
            .list(&Selector::everything())
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels()
                    .and_then(|l| l.get(LABEL_CLUSTER))
                    .map(String::as_str)
                    == Some(name)
            })
            .collect()
    }

    /// The names of the cluster's Running and Ready pods created by its StatefulSet, in
    /// ordinal order.
    fn ready_nodes(&self, namespace: &str, name: &str) -> Vec<String> {
        let mut nodes: Vec<(u32, String)> = self
            .cluster_pods(namespace, name)
            .iter()
            .filter(|p| {
                controller_ref_of::<StatefulSet>(&p.metadata).is_some_and(|r| r.name == name)
            })
            .filter(|p| p.metadata.deletion_timestamp().is_none() && pod_ready(p))
            .filter_map(|p| {
                let pod_name = p.metadata.name.as_deref()?.to_owned();
                let ordinal = pod_name
                    .strip_prefix(name)?
                    .strip_prefix('-')?
                    .parse()
                    .ok()?;
                Some((ordinal, pod_name))
            })
            .collect();
        nodes.sort();
        nodes.into_iter().map(|(_, n)| n).collect()
    }

    async fn degraded(
        &self,
        cluster: &RedisCluster,
        mut status: RedisClusterStatus,
        why: &'static str,
        message: String,
        pp: &PostParams,
    ) -> Result<(), SyncError> {
        let cond = Condition::new(
            CONDITION_DEGRADED,
            ConditionStatus::True,
            why,
            message.as_str(),
            cluster.metadata.generation,
            self.clock.now(),
        );
        if set_condition(&mut status.conditions, cond) {
            self.recorder
                .event(cluster, EventType::Warning, why, &message);
        }
        write_status_if_changed(&self.client, pp, cluster, status).await
    }
}

/// The key of the cluster a pod belongs to, from its [`LABEL_CLUSTER`] label.
fn cluster_key(pod: &PodSummary) -> Option<String> {
    let name = pod.metadata.labels()?.get(LABEL_CLUSTER)?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    Some(format!("{ns}/{name}"))
}

/// Running with the `Ready` condition `True`.
fn pod_ready(pod: &PodSummary) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn image_of(spec: &RedisClusterSpec) -> String {
    spec.image
        .clone()
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

fn pod_labels(cluster: &RedisCluster) -> BTreeMap<String, String> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let mut labels = standard_labels("redis", &name, CONTROLLER_NAME);
    labels.insert(LABEL_CLUSTER.to_string(), name);
    labels
}

/// The labels of the StatefulSet and the Service: the pods' and [`LABEL_CONTROL_PLANE`].
fn own_labels(cluster: &RedisCluster) -> BTreeMap<String, String> {
    let mut labels = pod_labels(cluster);
    labels.insert(LABEL_CONTROL_PLANE.to_string(), CONTROL_PLANE.to_string());
    labels
}

/// `meta` with [`LABEL_CONTROL_PLANE`] set, or `None` when it already is.
fn with_control_plane_label(meta: &ObjectMeta) -> Option<ObjectMeta> {
    let labels = meta.labels.as_ref();
    if labels
        .and_then(|l| l.get(LABEL_CONTROL_PLANE))
        .map(String::as_str)
        == Some(CONTROL_PLANE)
    {
        return None;
    }
    let mut out = meta.clone();
    out.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL_CONTROL_PLANE.to_string(), CONTROL_PLANE.to_string());
    Some(out)
}

/// The StatefulSet a RedisCluster wants: named like it, labelled
/// `control-plane: redis-operator`, `size` replicas, `serviceName` the headless Service, pods
/// labelled with [`LABEL_CLUSTER`], one `redis` container on 6379. `None` if the RedisCluster
/// has no uid.
pub fn new_statefulset(cluster: &RedisCluster) -> Option<StatefulSet> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let labels = pod_labels(cluster);
    let selector = BTreeMap::from([
        (LABEL_CLUSTER.to_string(), name.clone()),
        (LABEL_INSTANCE.to_string(), name.clone()),
    ]);
    Some(StatefulSet {
        metadata: dependent_metadata(cluster, &name, own_labels(cluster))?,
        spec: Some(StatefulSetSpec {
            replicas: Some(cluster.spec.size),
            service_name: Some(name),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER_NAME.to_string(),
                        image: Some(image_of(&cluster.spec)),
                        ports: Some(vec![ContainerPort {
                            name: Some("redis".to_string()),
                            container_port: REDIS_PORT,
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        }),
        status: None,
    })
}

/// The headless Service (`clusterIP: None`) that gives each pod its stable DNS name
/// `<pod>.<cluster>.<namespace>.svc`, labelled `control-plane: redis-operator`. `None` if the
/// RedisCluster has no uid.
pub fn new_service(cluster: &RedisCluster) -> Option<Service> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    Some(Service {
        metadata: dependent_metadata(cluster, &name, own_labels(cluster))?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(BTreeMap::from([(LABEL_CLUSTER.to_string(), name)])),
            ports: Some(vec![ServicePort {
                name: Some("redis".to_string()),
                port: REDIS_PORT,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// The StatefulSet with its replicas, image and [`LABEL_CONTROL_PLANE`] label put back, or
/// `None` when all match.
fn statefulset_drift(sts: &StatefulSet, size: i32, image: &str) -> Option<StatefulSet> {
    let mut out = sts.clone();
    let mut changed = false;
    if let Some(labelled) = with_control_plane_label(&out.metadata) {
        out.metadata = labelled;
        changed = true;
    }
    let spec = out.spec.as_mut()?;
    if spec.replicas != Some(size) {
        spec.replicas = Some(size);
        changed = true;
    }
    if let Some(c) = spec
        .template
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == CONTAINER_NAME))
        && c.image.as_deref() != Some(image)
    {
        c.image = Some(image.to_string());
        changed = true;
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(size: i32, image: Option<&str>) -> RedisCluster {
        RedisCluster {
            metadata: ObjectMeta {
                name: Some("cache".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: RedisClusterSpec {
                size,
                image: image.map(str::to_string),
            },
            status: None,
        }
    }

    #[test]
    fn the_statefulset_and_service_fit_together() {
        let c = cluster(3, None);
        let sts = new_statefulset(&c).unwrap();
        let svc = new_service(&c).unwrap();
        assert!(is_controlled_by(&sts.metadata, &c));
        for meta in [&sts.metadata, &svc.metadata] {
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(labels["control-plane"], "redis-operator");
        }
        assert_eq!(sts.metadata.name.as_deref(), Some("cache"));
        let spec = sts.spec.clone().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("cache"));
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        for (k, v) in spec.selector.match_labels.unwrap() {
            assert_eq!(
                pod_labels.get(&k),
                Some(&v),
                "the selector matches the pods"
            );
        }
        for (k, v) in svc.spec.as_ref().unwrap().selector.clone().unwrap() {
            assert_eq!(pod_labels.get(&k), Some(&v), "the Service selects the pods");
        }
        assert_eq!(
            svc.spec.unwrap().cluster_ip.as_deref(),
            Some("None"),
            "headless"
        );
        assert!(
            !pod_labels.contains_key(LABEL_CONTROL_PLANE),
            "the Redis pods are not the operator's"
        );
        let image = spec.template.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some(DEFAULT_IMAGE));

        assert_eq!(statefulset_drift(&sts, 3, DEFAULT_IMAGE), None);
        let fixed = statefulset_drift(&sts, 5, "redis:7.2").unwrap();
        assert_eq!(fixed.spec.unwrap().replicas, Some(5));
        // Made by an earlier version, without the label: it gets it back.
        let mut unlabelled = sts.clone();
        unlabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(LABEL_CONTROL_PLANE);
        let fixed = statefulset_drift(&unlabelled, 3, DEFAULT_IMAGE).unwrap();
        assert_eq!(
            fixed.metadata.labels.unwrap()["control-plane"],
            "redis-operator"
        );
    }

    #[test]
    fn validation_names_the_field() {
        assert!(validate(&cluster(3, Some("redis:7")).spec).is_ok());
        assert!(
            validate(&cluster(0, None).spec)
                .unwrap_err()
                .contains("spec.size: 0")
        );
        let e = validate(&cluster(3, Some("redis 7")).spec).unwrap_err();
        assert!(e.contains("spec.image") && e.contains("redis 7"), "{e}");
    }
}
