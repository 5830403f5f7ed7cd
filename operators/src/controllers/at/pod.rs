//! The At's pod: its template, and who controls it.

use super::*;

/// The book's `newPodForCR`, fixed: the command runs through a shell (the book split it on
/// spaces), `restartPolicy: Never` (the book's `OnFailure` restarted a failing command in place
/// for ever, so its pod never became Failed), and the pod carries a controller ownerReference
/// so the garbage collector deletes it with its At and its events find their way back.
pub fn new_pod(at: &At) -> Pod {
    let name = at.metadata.name.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(at.pod_name()),
            namespace: at.metadata.namespace.clone(),
            labels: Some(BTreeMap::from_iter(
                [
                    ("app".to_string(), name),
                    (LABEL_MANAGED_BY.to_string(), CONTROLLER_NAME.to_string()),
                ]
                .into_iter()
                // A shard's pod cache sees the pod only with the At's shard label.
                .chain(sample_controller_runtime::sharding::shard_labels(
                    &at.metadata,
                )),
            )),
            owner_references: Some(vec![controller_ref(at)]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: POD_CONTAINER_NAME.to_string(),
                image: Some(at.spec.run.image().to_string()),
                command: Some(vec![
                    "/bin/sh".to_string(),
                    "-c".to_string(),
                    at.spec.run.command.clone(),
                ]),
                ..Container::default()
            }],
            restart_policy: Some("Never".to_string()),
            active_deadline_seconds: at.spec.run.active_deadline_seconds,
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// `metav1.NewControllerRef(at, At GVK)`: the ownerReference that makes the At the pod's
/// controller (`controller: true`; `blockOwnerDeletion: true` so a foreground deletion of the
/// At waits for its pod).
pub fn controller_ref(at: &At) -> OwnerReference {
    OwnerReference {
        api_version: <At as k8s_openapi::Resource>::API_VERSION.to_string(),
        kind: <At as k8s_openapi::Resource>::KIND.to_string(),
        name: at.metadata.name.clone().unwrap_or_default(),
        uid: at.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The pod's controller ownerReference if it points at an At of our API group (any version):
/// [`ownership::controller_ref_of`].
pub fn at_controller_of(pod: &Pod) -> Option<OwnerRef<'_>> {
    controller_ref_of::<At>(&pod.metadata)
}

/// `metav1.IsControlledBy`: the pod's controller ownerReference carries this At's UID.
pub fn is_controlled_by(pod: &Pod, at: &At) -> bool {
    ownership::is_controlled_by(&pod.metadata, at)
}
