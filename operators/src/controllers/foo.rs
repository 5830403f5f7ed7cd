//! # The Foo controller: sample-controller itself, and adoption conflicts
//!
//! This is the controller of kubernetes/sample-controller's `controller.go`, step for step,
//! with the weaknesses the reference lists fixed. A [`Foo`] asks for a Deployment named
//! `spec.deploymentName` running `nginx:latest` with `spec.replicas` replicas. What it teaches
//! beyond MyApp is the **adoption conflict**: the name is chosen by the user, so a Deployment of
//! that name may already exist and belong to someone else. A controller must never take over
//! (adopt) an object it did not create: it reports the conflict and leaves the object alone.
//!
//! ## The sync handler, step by step (numbers as in sample-controller's `syncHandler`)
//!
//! 1. **Get the Foo from the lister.** Not found: it was deleted; the Deployment goes with it
//!    through its ownerReference (there is no Foo delete handler, as in sample-controller).
//! 2. **No `spec.deploymentName`**: logged, not retried (the next spec change brings it back).
//! 3. **Get the Deployment from the lister**; if absent, create [`new_deployment`] with the
//!    field manager `sample-controller` (unless a create is already on its way: see
//!    [`Expectations`]).
//! 4. **Not controlled by this Foo** (no controller ownerReference with the Foo's uid): a
//!    **Warning** event `ErrResourceExists` with sample-controller's message
//!    `Resource "<name>" already exists and is not managed by Foo`, and **no retry**.
//!    sample-controller returned the message as an error, so a permanent conflict was retried
//!    with backoff for ever (up to every 1000 s). Here the key comes back only when something
//!    changes: the Foo's spec, or the Deployment of that name (the Deployment handler also
//!    enqueues the Foos that *name* a Deployment, not only the one that controls it, so
//!    deleting a squatter the cache shows resolves the conflict at once). The Deployment cache
//!    holds only Deployments labelled `app.kubernetes.io/managed-by` by an operator of this
//!    crate ([`crate::slim`]); a squatter without that label is found through the create's
//!    409 and one GET, and since its deletion cannot be watched, the Foo is looked at again
//!    every [`FOREIGN_RECHECK`] (one refused create and one GET each time) until it is gone.
//! 5. **Replicas (and image, labels) differ**: put back on a copy of the cached Deployment and
//!    updated with its `resourceVersion`. sample-controller replaced the whole object with
//!    `newDeployment(foo)`, dropping every field the server or other clients had set.
//! 6. **Status**: `availableReplicas` from the Deployment, through the `/status` subresource,
//!    only when it changed.
//! 7. **Event**: Normal `Synced`, `Foo synced successfully`.
//!
//! The other fix: the Foo update handler ignores updates that did not change the spec.
//! sample-controller enqueued every update, including the 30 s resync and the controller's own
//! status write, so every Foo produced a `Synced` event every 30 s.

// Here `foo` is the name of the resource, not a placeholder.
#![allow(clippy::disallowed_names)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::get_existing;
use crate::apis::{Foo, FooStatus};
use sample_client_go::cache::{
    Deleted, EventHandlerFns, Lister, ListerWatcherSource, Selector, SharedInformerFactory, key_of,
    split_key,
};
use sample_client_go::client::{Api, Client, PostParams};
use sample_client_go::record::{EventRecorder, EventType};
use sample_client_go::workqueue::RateLimitingQueue;
use sample_controller_runtime::controller::QueueKey;
use sample_controller_runtime::controller::{
    Expectations, Operator, RunError, SyncHandler, SyncStats, Workers, object_to_sync,
};
use sample_controller_runtime::ownership::{
    LABEL_MANAGED_BY, SyncError, controller_reference, deployment_drift, is_controlled_by,
    owner_key,
};

/// The field manager of every write (sample-controller's).
pub const CONTROLLER_NAME: &str = "sample-controller";

/// How often a Foo whose Deployment name is taken by an object the cache cannot show (not
/// labelled by an operator of this crate) checks whether the name is free again.
pub const FOREIGN_RECHECK: Duration = Duration::from_secs(300);

/// The image of the Deployment's container (sample-controller's).
pub const IMAGE: &str = "nginx:latest";

/// Event reasons and messages, exactly sample-controller's.
pub mod reason {
    /// Normal: the Foo was synced.
    pub const SUCCESS_SYNCED: &str = "Synced";
    /// Warning: the Deployment exists and is not controlled by this Foo.
    pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";
    /// The `Synced` message.
    pub const MESSAGE_RESOURCE_SYNCED: &str = "Foo synced successfully";
}

/// sample-controller's `MessageResourceExists`, for the Deployment `name`.
pub fn message_resource_exists(name: &str) -> String {
    format!("Resource {name:?} already exists and is not managed by Foo")
}

/// sample-controller's `Controller`. Build it with [`FooController::new`], start the factory,
/// then [`run`](sample_controller_runtime::controller::run) it (the manager does both).
pub struct FooController {
    client: Client,
    foo_lister: Lister<Foo>,
    deployment_lister: Lister<Deployment>,
    workers: Workers,
    recorder: EventRecorder,
    expectations: Arc<Expectations>,
}

impl FooController {
    /// `NewController`: Foo adds and spec changes enqueue the Foo; Deployment events enqueue
    /// the Foo that controls the Deployment and every Foo that names it (`handleObject`).
    pub fn new<S: ListerWatcherSource>(
        client: Client,
        factory: &SharedInformerFactory<S>,
        recorder: EventRecorder,
        queue: RateLimitingQueue<QueueKey>,
        stats: SyncStats,
    ) -> Result<Arc<Self>, RunError> {
        let foo_informer = factory.informer::<Foo>();
        let deployment_informer = factory.informer::<Deployment>();
        let expectations = Arc::new(Expectations::default());
        let foo_lister = foo_informer.lister();

        let foo_handler = {
            let (q1, q2) = (queue.clone(), queue.clone());
            let e = Arc::clone(&expectations);
            EventHandlerFns::<Foo>::new()
                .on_add(move |foo, _initial| q1.add(key_of(foo.as_ref()).into()))
                .on_update(move |old, new| {
                    // The resync filter sample-controller lacks: our own status write and the
                    // periodic resync leave the spec alone and need no sync.
                    if old.spec != new.spec {
                        q2.add(key_of(new.as_ref()).into());
                    }
                })
                .on_delete(move |gone: Deleted<Foo>| e.forget(&gone.key()))
        };
        let foos_synced = foo_informer
            .add_event_handler(foo_handler)
            .map_err(RunError::informer::<Self>)?;

        let deployment_handler = {
            let handle = {
                let (queue, lister) = (queue.clone(), foo_lister.clone());
                move |d: &Deployment| {
                    for key in foos_for(&lister, d) {
                        queue.add(key.into());
                    }
                }
            };
            let (h1, h2, h3) = (handle.clone(), handle.clone(), handle);
            let e = Arc::clone(&expectations);
            EventHandlerFns::<Deployment>::new()
                .on_add(move |d, _initial| {
                    if let Some(key) = owner_key::<Foo>(&d.metadata) {
                        e.creation_observed(&key);
                    }
                    h1(&d);
                })
                .on_update(move |old, new| {
                    if old.metadata.resource_version != new.metadata.resource_version {
                        h2(&new);
                    }
                })
                .on_delete(move |gone: Deleted<Deployment>| h3(gone.object()))
        };
        let deployments_synced = deployment_informer
            .add_event_handler(deployment_handler)
            .map_err(RunError::informer::<Self>)?;

        let workers = Workers::new(queue, stats, vec![foos_synced, deployments_synced])
            .release_drained(&foo_lister, &client, Some(Arc::clone(&expectations)))
            .replay_from(&foo_lister);
        Ok(Arc::new(FooController {
            client,
            foo_lister,
            deployment_lister: deployment_informer.lister(),
            workers,
            recorder,
            expectations,
        }))
    }
}

/// `Run` is the shared [`sample_controller_runtime::controller::run`]: it waits for both caches, then starts the workers.
impl Operator for FooController {
    const NAME: &'static str = "foo";

    fn workers(&self) -> &Workers {
        &self.workers
    }
}

impl SyncHandler for FooController {
    type Error = SyncError;

    /// `syncHandler` (see the module documentation for the seven steps).
    async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, SyncError> {
        // 1. (none when deleted, or released to the sharder)
        let Some(foo) = object_to_sync(&self.foo_lister, &self.expectations, key) else {
            return Ok(None);
        };
        // 2.
        let deployment_name = foo.spec.deployment_name.as_str();
        if deployment_name.is_empty() {
            tracing::info!(key, "Deployment name missing from object reference");
            return Ok(None);
        }
        let (namespace, _) = split_key(key);
        let namespace = namespace.unwrap_or_default();
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), namespace);
        let pp = PostParams::with_field_manager(CONTROLLER_NAME);
        let Some(desired) = new_deployment(&foo) else {
            return Err(SyncError::missing_uid::<Foo, Deployment>(key));
        };

        // 3.
        let deployment_key = format!("{namespace}/{deployment_name}");
        let mut uncached = false;
        let deployment = match self.deployment_lister.get_by_key(&deployment_key) {
            Some(d) => d,
            None if !self.expectations.satisfied(key) => return Ok(None),
            None => {
                self.expectations.expect_creations(key, 1);
                match deployments.create(&pp, &desired).await {
                    Ok(created) => Arc::new(created),
                    Err(e) if e.is_already_exists() => {
                        // Not in the cache: made before the managed-by label (one GET, and
                        // labelled if ours), or someone else's (step 4 reports it).
                        self.expectations.creation_observed(key);
                        let existing = get_existing(
                            &deployments,
                            foo.as_ref(),
                            deployment_name,
                            CONTROLLER_NAME,
                        )
                        .await
                        .map_err(|e| {
                            SyncError::api::<Foo>(key, "reading the existing Deployment", e)
                        })?;
                        uncached = true;
                        Arc::new(existing)
                    }
                    Err(e) => {
                        self.expectations.creation_observed(key);
                        return Err(SyncError::api::<Foo>(key, "creating the Deployment", e));
                    }
                }
            }
        };

        // 4. Never adopt: report, and wait for a change instead of retrying.
        if !is_controlled_by(&deployment.metadata, foo.as_ref()) {
            let message = message_resource_exists(deployment_name);
            tracing::info!(key, deployment = deployment_name, "{message}");
            self.recorder.event(
                foo.as_ref(),
                EventType::Warning,
                reason::ERR_RESOURCE_EXISTS,
                &message,
            );
            // The cache shows the squatter's deletion only if it carries our label.
            return Ok(uncached.then_some(FOREIGN_RECHECK));
        }

        // 5.
        let deployment = match deployment_drift(&deployment, &desired) {
            Some(fixed) => Arc::new(
                deployments
                    .update(&pp, &fixed)
                    .await
                    .map_err(|e| SyncError::api::<Foo>(key, "updating the Deployment", e))?,
            ),
            None => deployment,
        };

        // 6.
        let status = FooStatus {
            available_replicas: deployment
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0),
        };
        if foo.status.as_ref() != Some(&status) {
            let mut copy = foo.as_ref().clone();
            copy.status = Some(status);
            match Api::<Foo>::all(self.client.clone())
                .update_status(&pp, &copy)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(SyncError::api::<Foo>(key, "updating the status", e)),
            }
        }

        // 7.
        self.recorder.event(
            foo.as_ref(),
            EventType::Normal,
            reason::SUCCESS_SYNCED,
            reason::MESSAGE_RESOURCE_SYNCED,
        );
        Ok(None)
    }

    fn is_conflict(err: &SyncError) -> bool {
        err.is_conflict()
    }

    /// A Warning `ReconciliationFailed` event on the object with the error (see
    /// [`sample_controller_runtime::controller::record_reconcile_error`]).
    fn on_sync_error(&self, key: &str, message: &str) {
        sample_controller_runtime::controller::record_reconcile_error(
            &self.foo_lister,
            &self.recorder,
            key,
            message,
        );
    }
}

/// The keys of the Foos a Deployment event concerns: the Foo that controls it, and every Foo
/// in its namespace whose `spec.deploymentName` is its name (they may be waiting on a conflict).
fn foos_for(lister: &Lister<Foo>, d: &Deployment) -> Vec<String> {
    let mut keys: Vec<String> = owner_key::<Foo>(&d.metadata).into_iter().collect();
    let (Some(ns), Some(name)) = (d.metadata.namespace.as_deref(), d.metadata.name.as_deref())
    else {
        return keys;
    };
    for foo in lister.namespace(ns).list(&Selector::everything()) {
        let key = key_of(foo.as_ref());
        if foo.spec.deployment_name == name && !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// sample-controller's `newDeployment`: named `spec.deploymentName`, controlled by the Foo,
/// labels `{app: nginx, controller: <foo name>}`, one `nginx` container running `nginx:latest`.
/// The Deployment itself also carries `app.kubernetes.io/managed-by: sample-controller`, which
/// the manager's Deployment cache selects on ([`crate::slim`]); the selector and template keep
/// sample-controller's labels (a Deployment's selector is immutable). `None` if the Foo has no
/// uid.
pub fn new_deployment(foo: &Foo) -> Option<Deployment> {
    let foo_name = foo.metadata.name.clone().unwrap_or_default();
    let labels = BTreeMap::from([
        ("app".to_string(), "nginx".to_string()),
        ("controller".to_string(), foo_name),
    ]);
    Some(Deployment {
        metadata: ObjectMeta {
            name: Some(foo.spec.deployment_name.clone()),
            namespace: foo.metadata.namespace.clone(),
            labels: Some(BTreeMap::from_iter(
                [(LABEL_MANAGED_BY.to_string(), CONTROLLER_NAME.to_string())]
                    .into_iter()
                    // A shard's caches see the Deployment only with the Foo's shard label.
                    .chain(sample_controller_runtime::sharding::shard_labels(
                        &foo.metadata,
                    )),
            )),
            owner_references: Some(vec![controller_reference(foo)?]),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: foo.spec.replicas,
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
                        name: "nginx".to_string(),
                        image: Some(IMAGE.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::FooSpec;

    #[test]
    fn new_deployment_is_sample_controllers() {
        let foo = Foo {
            metadata: ObjectMeta {
                name: Some("example-foo".into()),
                namespace: Some("default".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: FooSpec {
                deployment_name: "example-foo".into(),
                replicas: Some(1),
            },
            status: None,
        };
        let d = new_deployment(&foo).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("example-foo"));
        let r = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.controller, r.block_owner_deletion),
            ("Foo", Some(true), Some(true))
        );
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(1));
        let labels = spec.selector.match_labels.unwrap();
        assert_eq!(labels["app"], "nginx");
        assert_eq!(labels["controller"], "example-foo");
        let c = &spec.template.spec.unwrap().containers[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("nginx", Some(IMAGE))
        );
        assert_eq!(
            message_resource_exists("example-foo"),
            "Resource \"example-foo\" already exists and is not managed by Foo"
        );
    }
}
