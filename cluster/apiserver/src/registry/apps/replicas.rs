//! Simulated workload controllers: Deployments, ReplicaSets and StatefulSets.
//!
//! ## What these controllers do in a real cluster
//!
//! A Deployment or StatefulSet is, like an `At`, a wish: "keep N copies of this pod template
//! running". Controllers in kube-controller-manager make it so and report progress in the
//! object's `status`:
//!
//! * The **Deployment controller** creates a ReplicaSet per template revision and scales them
//!   (rolling updates move replicas from the old one to the new one); the **ReplicaSet
//!   controller** creates and deletes the pods. The Deployment's status counts what it sees:
//!   `replicas`, `updatedReplicas` (on the newest template), `readyReplicas`,
//!   `availableReplicas` (ready for `minReadySeconds`), the conditions `Available` and
//!   `Progressing`, and `observedGeneration`, the `metadata.generation` of the spec that status
//!   describes. `kubectl rollout status` waits until `observedGeneration` caught up and the
//!   counts equal `spec.replicas`.
//! * The **StatefulSet controller** gives every pod a stable identity: pods are named
//!   `<name>-<ordinal>` (0, 1, 2, ...), carry a controller `ownerReference` to the set and the
//!   labels `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`. With the
//!   default `podManagementPolicy: OrderedReady` it creates them one at a time in ordinal
//!   order, each only once the ones before it are Running and Ready, and scales down from the
//!   highest ordinal, one at a time; with `Parallel` it creates and deletes them all at once.
//!   A pod that disappears is recreated with the same name.
//!
//! ## What the simulation keeps and leaves out
//!
//! One background task (owned by the server handle, on with
//! [`crate::ApiServerBuilder::simulate`]) follows the store's change feed. Whenever a
//! Deployment or StatefulSet changes, or a pod one of them owns does, it schedules a *sync* of
//! that object after the workload delay ([`crate::ApiServerBuilder::workload_delay`], default
//! 500 ms, zero allowed; measured with `tokio::time`, so paused-clock tests control it).
//!
//! * **StatefulSets** are simulated faithfully as far as pods go: each sync takes one
//!   `OrderedReady` step (create the lowest missing ordinal once all lower ones are Running and
//!   Ready, or delete the highest extra ordinal once no pod is terminating) or, with
//!   `Parallel`, creates and deletes everything at once; a pod that ended `Failed` or
//!   `Succeeded` is deleted and recreated under its name; then it writes `status` from the pods
//!   that exist (`replicas` counts pods that are not terminating, `readyReplicas` and
//!   `availableReplicas` those Running with `Ready=True`, `currentReplicas`/`updatedReplicas`,
//!   `currentRevision`/`updateRevision`, `observedGeneration`). The simulated node runs the pods
//!   and keeps them Running and Ready (their `restartPolicy` is `Always`).
//! * **Deployments** get only their status: after the delay every count equals `spec.replicas`
//!   (default 1), `observedGeneration` catches up, and `Available`/`Progressing` are `True`.
//!   No ReplicaSets or pods are created, so a test of a controller that owns Deployments sees
//!   them "roll out" without the cost of pods. **ReplicaSets** created directly get their
//!   status the same way (`replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//!   `availableReplicas`, `observedGeneration`), without pods either. Rolling updates, `maxSurge`/`maxUnavailable`,
//!   `minReadySeconds`, paused deployments and rollbacks are left out.
//!
//! Updates of a StatefulSet's template do not roll existing pods (the real controller replaces
//! them in reverse ordinal order); PersistentVolumeClaim templates are ignored.

use serde_json::Value;

use crate::api::object_meta::meta_str;
use crate::api::status::{ApiError, Cause};
use crate::registry::resources::ResourceDef;

/// The real API server's checks of `spec.replicas` on Deployments, ReplicaSets and
/// StatefulSets (and their `/scale`, checked in `verbs`): the field is an `int32`, so a
/// fraction, a string or a number outside `-2^31..2^31` fails decoding with `400 BadRequest`
/// (`json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of
/// type int32`), and a negative count fails validation with `422 Invalid`
/// (`spec.replicas: Invalid value: -1: must be greater than or equal to 0`).
pub fn validate_replicas(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    if def.group != "apps" || def.custom.is_some() {
        return Ok(());
    }
    let kind = match def.plural.as_str() {
        "deployments" => "Deployment",
        "replicasets" => "ReplicaSet",
        "statefulsets" => "StatefulSet",
        _ => return Ok(()),
    };
    let Some(v) = obj.get("spec").and_then(|s| s.get("replicas")) else {
        return Ok(());
    };
    if v.is_null() {
        return Ok(());
    }
    let decode_error = |what: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {what} into Go struct field {kind}Spec.spec.replicas of type int32"
        ))
    };
    let n = match v {
        Value::Number(num) => match num.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => n,
            None => return Err(decode_error(format!("number {num}"))),
        },
        Value::String(_) => return Err(decode_error("string".into())),
        Value::Bool(_) => return Err(decode_error("bool".into())),
        Value::Array(_) => return Err(decode_error("array".into())),
        _ => return Err(decode_error("object".into())),
    };
    if n < 0 {
        return Err(ApiError::invalid(
            kind,
            "apps",
            meta_str(obj, "name"),
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {n}: must be greater than or equal to 0"),
            )],
        ));
    }
    Ok(())
}
