//! # Owning objects: controller references, `handleObject`, and drift
//!
//! Every operator after At follows one pattern: a custom resource (the *owner*) wants some
//! built-in objects (its *dependents*: a Deployment, a StatefulSet, a Service) to exist in a
//! given shape. Four questions come up in each of them, and this module answers them once:
//!
//! 1. **Whose is this object?** A dependent names its owner in `metadata.ownerReferences`; the
//!    one entry with `controller: true` is *the* controller (at most one per object, the API
//!    server enforces it). [`dependent_metadata`] writes that entry ([`controller_reference`])
//!    into what an operator creates. [`controller_ref_of`] finds it again when it points at a
//!    given kind in a given group (checking the group too: cnat checked the kind alone), and
//!    [`is_controlled_by`] compares its `uid` with the owner's, so a dependent left behind by a
//!    deleted owner of the same name is not mistaken for one's own.
//! 2. **Which key goes on the queue when a dependent changes?** sample-controller's
//!    `handleObject`: find the controller reference, and enqueue the owner's key
//!    (`namespace/name`). [`owner_handlers`] builds that handler for any pair of types: adds
//!    also settle an [`Expectations`] entry, updates that only re-deliver the same
//!    `resourceVersion` (informer resyncs) are dropped, deletes (final state or tombstone)
//!    enqueue too, because a deleted dependent must be recreated.
//! 3. **Has the dependent drifted?** Someone scaled the Deployment by hand or edited its image.
//!    The API server fills in defaults (`imagePullPolicy`, `terminationMessagePath`, the
//!    strategy...), so comparing the whole spec with the one we would build would report drift
//!    on every sync and update for ever. [`deployment_drift`] compares only the fields the
//!    owner decides (replicas, the template's labels, each of our containers' image, ports and
//!    command) and returns the cached object with just those fields put back: an update that
//!    keeps everything else (sample-controller replaced the whole object instead).
//! 4. **What went wrong, and with which object?** A failed sync is logged by the worker loop
//!    with nothing but the key, so the error itself must say what was being done to what:
//!    [`SyncError`] names the owner's kind, its key and the action, then the API server's
//!    cause (`creating the Deployment for MyApp default/web: ...`). It is one type for all the
//!    owning operators; the kind comes from the owner's type parameter, so it cannot be
//!    misspelt. [`update_status`] is the one status write they all end with.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::QueueKey;
use crate::expectations::Expectations;
use crate::resource::HasStatus;
use crate::sharding::shard_labels;
use sample_client_go::cache::{Deleted, EventHandlerFns, ObjectMetaAccess, OwnerRef, key_of};
use sample_client_go::client::{self, Api, Client, PostParams};
use sample_client_go::workqueue::RateLimitingQueue;

/// Why a sync of an owner (a TDSet, RedisCluster, MyApp or Foo) failed. The worker loop
/// retries every variant with backoff; a 409 Conflict on a write is an expected race (see
/// [`SyncError::is_conflict`]).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A request to the API server failed, e.g.
    /// `creating the Deployment for MyApp default/web: <the server's message>`.
    #[error("{action} for {kind} {key}: {source}")]
    Api {
        /// The owner's kind (`MyApp`).
        kind: &'static str,
        /// The owner's queue key (`namespace/name`).
        key: String,
        /// What was being done (`creating the Deployment`, `updating the status`).
        action: &'static str,
        #[source]
        source: client::Error,
    },
    /// The owner in the cache has no uid, so no ownerReference can point at it (every stored
    /// object has one; this is an object that did not come from an API server).
    #[error("{kind} {key} has no metadata.uid; cannot own a {dependent}")]
    MissingUid {
        /// The owner's kind.
        kind: &'static str,
        /// The owner's queue key.
        key: String,
        /// The kind of what it should own (`Deployment`, `StatefulSet`).
        dependent: &'static str,
    },
}

impl SyncError {
    /// A failed request while syncing the `O` with queue key `key`.
    pub fn api<O: Resource>(key: &str, action: &'static str, source: client::Error) -> Self {
        SyncError::Api {
            kind: O::KIND,
            key: key.to_string(),
            action,
            source,
        }
    }

    /// The `O` with queue key `key` has no uid and so cannot own a `D`.
    pub fn missing_uid<O: Resource, D: Resource>(key: &str) -> Self {
        SyncError::MissingUid {
            kind: O::KIND,
            key: key.to_string(),
            dependent: D::KIND,
        }
    }

    /// True for a 409 Conflict from the API server: a write based on a cached copy that was
    /// already out of date. The operators' `SyncHandler::is_conflict` answers with this.
    pub fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Api { source, .. } if source.is_conflict())
    }
}

/// Writes `status` for the cached `owner` through [`update_status`], unless the cache already
/// shows exactly that status: an unchanged status costs no request, so a sync that finds
/// nothing to do writes nothing (and triggers no watch event of its own).
pub async fn write_status_if_changed<O>(
    client: &Client,
    pp: &PostParams,
    owner: &O,
    status: O::Status,
) -> Result<(), SyncError>
where
    O: HasStatus
        + Resource
        + Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    O::Status: PartialEq,
{
    if owner.status() == Some(&status) {
        return Ok(());
    }
    update_status(client, pp, &owner.with_status(status)).await
}

/// Writes `updated` (a copy of the cached owner carrying its new status) through the
/// `/status` subresource. The write carries the cached `resourceVersion`: a 409 Conflict means
/// the cache had not yet caught up (often with this controller's own previous write) and the
/// sync is retried with a fresher copy. A 404 means the owner was deleted since it was read:
/// there is nobody left to report to, so that is not an error.
pub async fn update_status<O>(
    client: &Client,
    pp: &PostParams,
    updated: &O,
) -> Result<(), SyncError>
where
    O: Resource
        + Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned
        + Clone
        + Send
        + Sync
        + 'static,
{
    match Api::<O>::all(client.clone())
        .update_status(pp, updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(SyncError::api::<O>(
            &key_of(updated),
            "updating the status",
            e,
        )),
    }
}

/// The label every operator puts on what it creates: which application this is.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// Which instance (the owner's name).
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
/// Which controller manages it.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The recommended `app.kubernetes.io/*` labels for an object created by `manager` for the
/// owner named `instance`, of application `name`.
pub fn standard_labels(name: &str, instance: &str, manager: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), name.to_string()),
        (LABEL_INSTANCE.to_string(), instance.to_string()),
        (LABEL_MANAGED_BY.to_string(), manager.to_string()),
    ])
}

/// The controller ownerReference pointing at `owner` (`controller: true`,
/// `blockOwnerDeletion: true`), or `None` when the owner has no uid yet (it was never stored).
pub fn controller_reference<O>(owner: &O) -> Option<OwnerReference>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
{
    let meta = owner.metadata();
    Some(OwnerReference {
        api_version: O::API_VERSION.to_string(),
        kind: O::KIND.to_string(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The metadata of a dependent named `name` that `owner` creates: in the owner's namespace
/// (an ownerReference cannot cross namespaces), with `labels`, and with the owner's
/// [`controller_reference`]. `None` when the owner has no uid yet.
pub fn dependent_metadata<O>(
    owner: &O,
    name: &str,
    labels: BTreeMap<String, String>,
) -> Option<ObjectMeta>
where
    O: Resource + Metadata<Ty = ObjectMeta>,
{
    Some(ObjectMeta {
        name: Some(name.to_string()),
        namespace: owner.metadata().namespace.clone(),
        // A shard's caches see an owned object only with its owner's shard label.
        labels: Some(
            labels
                .into_iter()
                .chain(shard_labels(owner.metadata()))
                .collect(),
        ),
        owner_references: Some(vec![controller_reference(owner)?]),
        ..ObjectMeta::default()
    })
}

/// The controller reference of `meta` if it points at an `O` (same kind, same group; any
/// version of the group counts, as in `metav1.GetControllerOf` callers that compare groups).
pub fn controller_ref_of<O: Resource>(meta: &impl ObjectMetaAccess) -> Option<OwnerRef<'_>> {
    let group_of = |api_version: &str| {
        api_version
            .rsplit_once('/')
            .map(|(g, _)| g.to_string())
            .unwrap_or_default()
    };
    meta.owner_references()
        .find(|r| r.controller)
        .filter(|r| r.kind == O::KIND && group_of(r.api_version) == O::GROUP)
}

/// True when `dependent`'s controller reference is `owner` itself (same uid).
pub fn is_controlled_by<O>(dependent: &impl ObjectMetaAccess, owner: &O) -> bool
where
    O: Resource + Metadata<Ty = ObjectMeta>,
{
    match (controller_ref_of::<O>(dependent), &owner.metadata().uid) {
        (Some(r), Some(uid)) => r.uid == uid,
        _ => false,
    }
}

/// The queue key (`namespace/name`) of the `O` controlling `dependent`, if one does.
pub fn owner_key<O: Resource>(dependent: &impl ObjectMetaAccess) -> Option<String> {
    let r = controller_ref_of::<O>(dependent)?;
    let ns = dependent.namespace().unwrap_or_default();
    Some(format!("{ns}/{}", r.name))
}

/// sample-controller's `handleObject` as an informer handler for dependents of type `D`
/// controlled by an `O`: every add, real update (new `resourceVersion`) and delete enqueues the
/// owner's key. An add also settles one expected creation for that key, when `expectations`
/// is given. An update whose controller changed enqueues both the old and the new owner.
pub fn owner_handlers<O, D>(
    queue: &RateLimitingQueue<QueueKey>,
    expectations: Option<Arc<Expectations>>,
) -> EventHandlerFns<D>
where
    O: Resource,
    D: Metadata<Ty: ObjectMetaAccess> + Send + Sync + 'static,
{
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    EventHandlerFns::<D>::new()
        .on_add(move |obj, _initial| {
            if let Some(key) = owner_key::<O>(obj.metadata()) {
                if let Some(e) = &expectations {
                    e.creation_observed(&key);
                }
                q1.add(key.into());
            }
        })
        .on_update(move |old, new| {
            // A resync re-delivers an unchanged object: nothing new to react to.
            if old.metadata().resource_version() == new.metadata().resource_version() {
                return;
            }
            let old_key = owner_key::<O>(old.metadata());
            let new_key = owner_key::<O>(new.metadata());
            if let Some(k) = &old_key
                && old_key != new_key
            {
                q2.add(k.clone().into());
            }
            if let Some(k) = new_key {
                q2.add(k.into());
            }
        })
        .on_delete(move |gone: Deleted<D>| {
            if let Some(key) = owner_key::<O>(gone.object().metadata()) {
                q3.add(key.into());
            }
        })
}

/// The fields of `existing` that differ from `desired` in what the owner decides, put back to
/// the desired values on a copy of `existing`; `None` when nothing drifted. Compared: the
/// replica count (when `desired` sets one), the owner's labels on the pod template (other
/// labels are kept), and, for every container of `desired`, the container of the same name:
/// its image, its ports and its command. Everything else (server defaults, other people's
/// annotations, containers injected by someone else) is left as it is.
pub fn deployment_drift(existing: &Deployment, desired: &Deployment) -> Option<Deployment> {
    let mut out = existing.clone();
    let mut changed = false;
    let (Some(want), Some(spec)) = (desired.spec.as_ref(), out.spec.as_mut()) else {
        return None;
    };
    if want.replicas.is_some() && spec.replicas != want.replicas {
        spec.replicas = want.replicas;
        changed = true;
    }
    let want_meta = want.template.metadata.clone().unwrap_or_default();
    let meta = spec
        .template
        .metadata
        .get_or_insert_with(ObjectMeta::default);
    for (k, v) in want_meta.labels.iter().flatten() {
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        if labels.get(k) != Some(v) {
            labels.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let want_containers = want
        .template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let pod_spec = spec.template.spec.get_or_insert_with(Default::default);
    for wc in want_containers {
        match pod_spec.containers.iter_mut().find(|c| c.name == wc.name) {
            Some(c) => changed |= put_back_container(c, wc),
            None => {
                pod_spec.containers.push(wc.clone());
                changed = true;
            }
        }
    }
    changed.then_some(out)
}

/// Puts `want`'s image, ports and command into `c`; true if anything changed.
fn put_back_container(c: &mut Container, want: &Container) -> bool {
    let mut changed = false;
    if c.image != want.image {
        c.image = want.image.clone();
        changed = true;
    }
    let port_numbers = |c: &Container| {
        c.ports
            .iter()
            .flatten()
            .map(|p| (p.container_port, p.name.clone()))
            .collect::<Vec<_>>()
    };
    if port_numbers(c) != port_numbers(want) {
        c.ports = want.ports.clone();
        changed = true;
    }
    if c.command != want.command {
        c.command = want.command.clone();
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test kinds: sample-controller's `Foo` and the operator guide's `MyApp`, as far as owner
    /// references go (group, version, kind).
    #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Spec {
        #[serde(default)]
        replicas: Option<i32>,
    }
    crate::custom_resource! {
        pub struct Foo { spec: Spec, status: Option<Spec> }
        group = "samplecontroller.k8s.io",
        version = "v1alpha1",
        kind = "Foo",
        plural = "foos",
    }
    crate::custom_resource! {
        pub struct MyApp { spec: Spec, status: Option<Spec> }
        group = "example.com",
        version = "v1",
        kind = "MyApp",
        plural = "myapps",
    }
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSpec, PodTemplateSpec};

    fn foo(uid: &str) -> Foo {
        Foo {
            metadata: ObjectMeta {
                name: Some("f".into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..Foo::default()
        }
    }

    fn deployment(replicas: i32, image: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta::default(),
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([("app".into(), "x".into())])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "main".into(),
                            image: Some(image.into()),
                            ports: Some(vec![ContainerPort {
                                container_port: 80,
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
        }
    }

    #[test]
    fn controller_reference_round_trips_through_the_lookups() {
        let owner = foo("u1");
        let r = controller_reference(&owner).unwrap();
        assert_eq!(r.api_version, "samplecontroller.k8s.io/v1alpha1");
        assert_eq!(r.kind, "Foo");
        let meta = ObjectMeta {
            namespace: Some("ns".into()),
            owner_references: Some(vec![r]),
            ..ObjectMeta::default()
        };
        assert!(is_controlled_by(&meta, &owner));
        assert!(!is_controlled_by(&meta, &foo("u2")), "same name, new uid");
        assert_eq!(owner_key::<Foo>(&meta).as_deref(), Some("ns/f"));
        assert!(controller_reference(&Foo::default()).is_none(), "no uid");

        let labels = standard_labels("foo", "f", "foo-controller");
        let made = dependent_metadata(&owner, "f-web", labels.clone()).unwrap();
        assert_eq!(made.name.as_deref(), Some("f-web"));
        assert_eq!(
            made.namespace.as_deref(),
            Some("ns"),
            "the owner's namespace"
        );
        assert_eq!(made.labels, Some(labels.clone()));
        assert!(is_controlled_by(&made, &owner));
        assert!(dependent_metadata(&Foo::default(), "x", labels).is_none());
    }

    #[test]
    fn only_a_controller_ref_of_the_right_group_counts() {
        let mut r = controller_reference(&foo("u1")).unwrap();
        r.api_version = "other.example.com/v1alpha1".into();
        let meta = ObjectMeta {
            owner_references: Some(vec![r.clone()]),
            ..ObjectMeta::default()
        };
        assert!(owner_key::<Foo>(&meta).is_none());
        r.api_version = "samplecontroller.k8s.io/v1".into();
        r.controller = Some(false);
        let meta = ObjectMeta {
            owner_references: Some(vec![r]),
            ..ObjectMeta::default()
        };
        assert!(owner_key::<Foo>(&meta).is_none());
    }

    #[test]
    fn sync_errors_name_the_kind_the_key_and_the_action() {
        use k8s_openapi::api::apps::v1::StatefulSet;
        let conflict = client::Error::status(409, "Conflict", "the object has been modified");
        let e = SyncError::api::<MyApp>("default/web", "updating the status", conflict);
        assert_eq!(
            e.to_string(),
            "updating the status for MyApp default/web: 409 (Conflict): the object has been modified"
        );
        assert!(e.is_conflict());
        let denied = client::Error::status(403, "Forbidden", "no");
        assert!(!SyncError::api::<Foo>("ns/f", "creating the Deployment", denied).is_conflict());
        let e = SyncError::missing_uid::<Foo, StatefulSet>("ns/f");
        assert_eq!(
            e.to_string(),
            "Foo ns/f has no metadata.uid; cannot own a StatefulSet"
        );
        assert!(!e.is_conflict());
    }

    #[test]
    fn drift_puts_back_only_what_the_owner_decides() {
        let want = deployment(3, "nginx:1.27");
        assert_eq!(deployment_drift(&want, &want), None);

        // Server defaults and foreign labels are not drift.
        let mut defaulted = want.clone();
        {
            let spec = defaulted.spec.as_mut().unwrap();
            spec.revision_history_limit = Some(10);
            let t = &mut spec.template;
            t.metadata
                .as_mut()
                .unwrap()
                .labels
                .as_mut()
                .unwrap()
                .insert("extra".into(), "kept".into());
            t.spec.as_mut().unwrap().containers[0].image_pull_policy = Some("IfNotPresent".into());
        }
        assert_eq!(deployment_drift(&defaulted, &want), None);

        // Hand-scaled and re-imaged: both come back, the defaults stay.
        let mut drifted = defaulted.clone();
        drifted.spec.as_mut().unwrap().replicas = Some(7);
        drifted
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("evil:1".into());
        let fixed = deployment_drift(&drifted, &want).unwrap();
        assert_eq!(fixed, defaulted);
    }
}
