//! # The MyApp controller: a plain owned Deployment
//!
//! The smallest useful operator, and the best one to read first after At. A [`MyApp`] says
//! "run `spec.replicas` copies of `spec.image`"; the controller keeps one Deployment, named
//! like the MyApp and carrying a controller ownerReference to it, in exactly that shape, and
//! reports the Deployment's `availableReplicas` back in `status`.
//!
//! ## The sync handler, step by step
//!
//! 1. **Read the MyApp from the lister.** Gone: nothing to do; the garbage collector deletes
//!    the Deployment through its ownerReference, so there is no delete handler to write.
//! 2. **Build the desired Deployment** ([`new_deployment`]), the one the MyApp operator guide
//!    builds (`deploymentForMyApp`): the labels `app: <name>` and `version: v1` on the
//!    Deployment, its selector and its pods, and one container `myapp` running the image with
//!    port 8080 named `http`. The Deployment itself also carries the `app.kubernetes.io/*`
//!    labels, `managed-by: myapp-controller` among them, which the manager's Deployment cache
//!    selects on ([`crate::slim`]).
//! 3. **Read the Deployment from the lister.** Absent: if this controller created it a moment
//!    ago and the informer has not delivered it yet ([`Expectations`]), wait for that event;
//!    otherwise create it. Present but controlled by someone else: a Warning
//!    `ErrResourceExists` and the `Ready=False` condition, and no retry (it is not a transient
//!    error; the next change of either object brings the key back).
//! 4. **Correct drift** ([`deployment_drift`]): a hand-scaled or re-imaged Deployment is put
//!    back with an update of just those fields, carrying the cached `resourceVersion` (a 409
//!    Conflict means the cache was behind; the retry reads the newer copy). A Deployment made
//!    by an earlier version of this operator (selector `app.kubernetes.io/*`, container `app`)
//!    keeps its selector, which is immutable, gains the guide's pod labels, and has its
//!    container renamed `myapp` ([`rename_legacy_container`]) rather than given a second one.
//! 5. **Write the status** through the `/status` subresource, only when it changed:
//!    `availableReplicas` and a `Ready` condition (`True` when every replica is available).
//!
//! Events bring the key back: any change to the MyApp (its spec; the controller's own status
//! writes are filtered out) or to a Deployment it controls (sample-controller's
//! `handleObject`, in [`owner_handlers`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::apis::MyApp;
use crate::apis::conditions::{Condition, ConditionStatus, set_condition};
use sample_client_go::cache::{
    EventHandlerFns, Lister, ListerWatcherSource, SharedInformerFactory, key_of, split_key,
};
use sample_client_go::client::{Api, Client, PostParams};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::QueueKey;
use sample_controller_runtime::controller::{
    Clock, Expectations, Operator, RunError, SyncHandler, SyncStats, Workers, object_to_sync,
};
use sample_controller_runtime::ownership::{
    SyncError, dependent_metadata, deployment_drift, is_controlled_by, owner_handlers,
    standard_labels, update_status,
};

/// The recorder's source component and the field manager of every write.
pub const CONTROLLER_NAME: &str = "myapp-controller";

/// The name of the Deployment's only container (the guide's).
pub const CONTAINER_NAME: &str = "myapp";

/// What earlier versions of this operator named the container; renamed on sight.
pub const LEGACY_CONTAINER_NAME: &str = "app";

/// The container's port and its name (the guide's `ContainerPort: 8080, Name: "http"`).
pub const CONTAINER_PORT: i32 = 8080;
/// See [`CONTAINER_PORT`].
pub const CONTAINER_PORT_NAME: &str = "http";

/// The label naming the MyApp on its Deployment and pods (`app: <name>`).
pub const LABEL_APP: &str = "app";
/// The label with the application's version on its Deployment and pods (`version: v1`).
pub const LABEL_VERSION: &str = "version";
/// The value of [`LABEL_VERSION`].
pub const VERSION: &str = "v1";

/// Condition type: `True` when every desired replica is available.
pub const CONDITION_READY: &str = "Ready";

/// Event and condition reasons.
pub mod reason {
    /// Normal: the Deployment was created.
    pub const CREATED: &str = "Created";
    /// Normal: the Deployment had drifted and was put back.
    pub const DRIFT_CORRECTED: &str = "DriftCorrected";
    /// Warning: a Deployment of that name exists and is not controlled by this MyApp.
    pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// Condition: every replica is available.
    pub const AVAILABLE: &str = "Available";
    /// Condition: replicas are still starting.
    pub const SCALING: &str = "Scaling";
}

/// The MyApp controller. Build it with [`MyAppController::new`], start the factory, then
/// [`run`](sample_controller_runtime::controller::run) it (the manager does both).
pub struct MyAppController {
    client: Client,
    myapp_lister: Lister<MyApp>,
    deployment_lister: Lister<Deployment>,
    workers: Workers,
    recorder: EventRecorder,
    /// Deployments created and not yet seen by the Deployment informer.
    expectations: Arc<Expectations>,
    clock: Clock,
}

impl MyAppController {
    /// `NewController`: wires the MyApp and Deployment informers of the shared factory to the
    /// queue. Nothing runs until the factory is started.
    pub fn new<S: ListerWatcherSource>(
        client: Client,
        factory: &SharedInformerFactory<S>,
        recorder: EventRecorder,
        queue: RateLimitingQueue<QueueKey>,
        clock: Clock,
        stats: SyncStats,
    ) -> Result<Arc<Self>, RunError> {
        let myapp_informer = factory.informer::<MyApp>();
        let deployment_informer = factory.informer::<Deployment>();
        let expectations = Arc::new(Expectations::default());

        // MyApps: adds, and updates that changed the spec (or began the deletion). Our own
        // status writes change neither, so they do not bring the key straight back.
        let myapp_handler = {
            let (q1, q2) = (queue.clone(), queue.clone());
            let e = Arc::clone(&expectations);
            EventHandlerFns::<MyApp>::new()
                .on_add(move |m, _initial| q1.add(key_of(m.as_ref()).into()))
                .on_update(move |old, new| {
                    if old.spec != new.spec
                        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                    {
                        q2.add(key_of(new.as_ref()).into());
                    }
                })
                .on_delete(move |gone| e.forget(&gone.key()))
        };
        let myapp_synced = myapp_informer
            .add_event_handler(myapp_handler)
            .map_err(RunError::informer::<Self>)?;
        let deployment_synced = deployment_informer
            .add_event_handler(owner_handlers::<MyApp, Deployment>(
                &queue,
                Some(Arc::clone(&expectations)),
            ))
            .map_err(RunError::informer::<Self>)?;

        let myapp_lister = myapp_informer.lister();
        let workers = Workers::new(queue, stats, vec![myapp_synced, deployment_synced])
            .release_drained(&myapp_lister, &client, Some(Arc::clone(&expectations)))
            .replay_from(&myapp_lister);
        Ok(Arc::new(MyAppController {
            client,
            myapp_lister,
            deployment_lister: deployment_informer.lister(),
            workers,
            recorder,
            expectations,
            clock,
        }))
    }
}

/// `Run` is the shared [`sample_controller_runtime::controller::run`]: it waits for both caches, then starts the workers.
impl Operator for MyAppController {
    const NAME: &'static str = "myapp";

    fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl SyncHandler for MyAppController {
    type Error = SyncError;

    /// `syncHandler` (see the module documentation for the steps).
    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, SyncError> {
        // 1. The MyApp, from the cache (none when deleted, or released to the sharder).
        let Some(app) = object_to_sync(&self.myapp_lister, &self.expectations, key) else {
            return Ok(None);
        };
        if app.metadata.deletion_timestamp.is_some() {
            // Being deleted: the garbage collector takes the Deployment with it.
            return Ok(None);
        }
        // 2. What the Deployment should be.
        let Some(desired) = new_deployment(&app) else {
            return Err(SyncError::missing_uid::<MyApp, Deployment>(key));
        };
        let (namespace, name) = split_key(key);
        let namespace = namespace.unwrap_or_default();
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), namespace);
        let pp = PostParams::with_field_manager(CONTROLLER_NAME);

        // 3. The Deployment, from the cache; created when absent (and not already on its way).
        let deployment = match self.deployment_lister.get_by_key(key) {
            Some(d) => d,
            None if !self.expectations.satisfied(key) => return Ok(None),
            None => {
                self.expectations
                    .expecting(key, deployments.create(&pp, &desired))
                    .await
                    .map_err(|e| SyncError::api::<MyApp>(key, "creating the Deployment", e))?;
                self.recorder.event(
                    app.as_ref(),
                    EventType::Normal,
                    reason::CREATED,
                    &format!("created Deployment {name}"),
                );
                // The informer's add brings the key back to write the status.
                return Ok(None);
            }
        };
        if !is_controlled_by(&deployment.metadata, app.as_ref()) {
            let message = format!("Resource {name:?} already exists and is not managed by MyApp");
            let mut status = app.status.clone().unwrap_or_default();
            let changed = set_condition(
                &mut status.conditions,
                Condition::new(
                    CONDITION_READY,
                    ConditionStatus::False,
                    reason::ERR_RESOURCE_EXISTS,
                    message.as_str(),
                    app.metadata.generation,
                    self.clock.now(),
                ),
            );
            if changed {
                self.recorder.event(
                    app.as_ref(),
                    EventType::Warning,
                    reason::ERR_RESOURCE_EXISTS,
                    &message,
                );
                let updated = MyApp {
                    status: Some(status),
                    ..app.as_ref().clone()
                };
                update_status(&self.client, &pp, &updated).await?;
            }
            return Ok(None);
        }

        // 4. Drift: put back what the MyApp decides, keep everything else.
        let renamed = rename_legacy_container(&deployment);
        let drifted = deployment_drift(renamed.as_ref().unwrap_or(&deployment), &desired);
        if let Some(fixed) = drifted.or(renamed) {
            deployments
                .update(&pp, &fixed)
                .await
                .map_err(|e| SyncError::api::<MyApp>(key, "correcting the Deployment", e))?;
            self.recorder.event(
                app.as_ref(),
                EventType::Normal,
                reason::DRIFT_CORRECTED,
                &format!(
                    "Deployment {name} set to {} replica(s) of {}",
                    app.spec.replicas, app.spec.image
                ),
            );
        }

        // 5. Status, from the Deployment's.
        let available = deployment
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        let mut status = app.status.clone().unwrap_or_default();
        status.available_replicas = available;
        let (ready, why) = if available >= app.spec.replicas {
            (ConditionStatus::True, reason::AVAILABLE)
        } else {
            (ConditionStatus::False, reason::SCALING)
        };
        set_condition(
            &mut status.conditions,
            Condition::new(
                CONDITION_READY,
                ready,
                why,
                format!("{available} of {} replica(s) available", app.spec.replicas),
                app.metadata.generation,
                self.clock.now(),
            ),
        );
        if Some(&status) != app.status.as_ref() {
            let updated = MyApp {
                status: Some(status),
                ..app.as_ref().clone()
            };
            update_status(&self.client, &pp, &updated).await?;
        }
        Ok(None)
    }

    fn is_conflict(err: &SyncError) -> bool {
        err.is_conflict()
    }

    /// A Warning `ReconciliationFailed` event on the object with the error (see
    /// [`sample_controller_runtime::controller::record_reconcile_error`]).
    fn on_sync_error(&self, key: &str, message: &str) {
        sample_controller_runtime::controller::record_reconcile_error(
            &self.myapp_lister,
            &self.recorder,
            key,
            message,
        );
    }
}

/// The labels of a MyApp's Deployment selector and pods: `app: <name>`, `version: v1`.
pub fn app_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_APP.to_string(), name.to_string()),
        (LABEL_VERSION.to_string(), VERSION.to_string()),
    ])
}

/// The Deployment a MyApp wants: named like it, in its namespace, controlled by it, with
/// [`app_labels`] on itself, its selector and its pods (the Deployment also carries the
/// `app.kubernetes.io/*` labels), and one container `myapp` with port 8080 `http`. `None` if
/// the MyApp has no uid.
pub fn new_deployment(app: &MyApp) -> Option<Deployment> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let labels = app_labels(&name);
    let mut own_labels = standard_labels("myapp", &name, CONTROLLER_NAME);
    own_labels.extend(labels.clone());
    Some(Deployment {
        metadata: dependent_metadata(app, &name, own_labels)?,
        spec: Some(DeploymentSpec {
            replicas: Some(app.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
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
                        image: Some(app.spec.image.clone()),
                        ports: Some(vec![ContainerPort {
                            container_port: CONTAINER_PORT,
                            name: Some(CONTAINER_PORT_NAME.to_string()),
                            ..ContainerPort::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// A copy of `existing` with the container of an earlier version of this operator
/// ([`LEGACY_CONTAINER_NAME`]) renamed [`CONTAINER_NAME`], when it has that container and not
/// the new one; `None` otherwise. Without it, drift correction would add a second container
/// running the same image beside the old one.
pub fn rename_legacy_container(existing: &Deployment) -> Option<Deployment> {
    let containers = &existing.spec.as_ref()?.template.spec.as_ref()?.containers;
    if containers.iter().any(|c| c.name == CONTAINER_NAME)
        || !containers.iter().any(|c| c.name == LEGACY_CONTAINER_NAME)
    {
        return None;
    }
    let mut out = existing.clone();
    let legacy = out
        .spec
        .as_mut()?
        .template
        .spec
        .as_mut()?
        .containers
        .iter_mut()
        .find(|c| c.name == LEGACY_CONTAINER_NAME)?;
    legacy.name = CONTAINER_NAME.to_string();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::MyAppSpec;

    #[test]
    fn the_deployment_is_owned_labelled_and_shaped_by_the_spec() {
        let app = MyApp {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: MyAppSpec {
                replicas: 4,
                image: "nginx:1.27".into(),
            },
            status: None,
        };
        let d = new_deployment(&app).unwrap();
        assert!(is_controlled_by(&d.metadata, &app));
        let own = d.metadata.labels.clone().unwrap();
        assert_eq!(
            (own["app"].as_str(), own["version"].as_str()),
            ("web", "v1")
        );
        assert_eq!(own["app.kubernetes.io/managed-by"], CONTROLLER_NAME);
        let spec = d.spec.clone().unwrap();
        assert_eq!(spec.replicas, Some(4));
        let sel = spec.selector.match_labels.unwrap();
        assert_eq!(
            sel,
            app_labels("web"),
            "the guide's selector: app and version"
        );
        assert_eq!(
            spec.template.metadata.unwrap().labels.unwrap(),
            sel,
            "the selector matches the pods"
        );
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!(c.name, "myapp");
        assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.container_port, port.name.as_deref()),
            (8080, Some("http"))
        );
        assert!(new_deployment(&MyApp::default()).is_none());
        assert!(rename_legacy_container(&d).is_none(), "nothing to rename");
    }

    #[test]
    fn a_deployment_of_an_earlier_version_gets_its_container_renamed_not_doubled() {
        let app = MyApp {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: MyAppSpec {
                replicas: 2,
                image: "nginx:1.27".into(),
            },
            status: None,
        };
        let desired = new_deployment(&app).unwrap();
        // What the earlier version made: its own selector, a container `app` without ports.
        let mut old = desired.clone();
        let old_labels = standard_labels("myapp", "web", CONTROLLER_NAME);
        let spec = old.spec.as_mut().unwrap();
        spec.selector.match_labels = Some(old_labels.clone());
        spec.template.metadata.as_mut().unwrap().labels = Some(old_labels.clone());
        let c = &mut spec.template.spec.as_mut().unwrap().containers[0];
        c.name = LEGACY_CONTAINER_NAME.into();
        c.ports = None;

        let renamed = rename_legacy_container(&old).unwrap();
        let fixed = deployment_drift(&renamed, &desired).unwrap();
        let spec = fixed.spec.unwrap();
        assert_eq!(
            spec.selector.match_labels,
            Some(old_labels),
            "immutable, kept"
        );
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        for (k, v) in app_labels("web") {
            assert_eq!(pod_labels.get(&k), Some(&v), "the guide's {k} label added");
        }
        let containers = spec.template.spec.unwrap().containers;
        assert_eq!(containers.len(), 1, "{containers:?}");
        assert_eq!(containers[0].name, CONTAINER_NAME);
        assert_eq!(
            containers[0].ports.as_ref().unwrap()[0].container_port,
            8080
        );
    }
}
