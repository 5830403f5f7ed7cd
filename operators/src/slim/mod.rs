//! # Caches that fit: watch only what the operators made, keep only what they read
//!
//! An informer caches every object its list+watch returns. Left cluster-wide, the pod informer
//! of the At controller holds every pod of the cluster, ours or not, at ~6.5 KB each: a
//! cluster with a few thousand pods is enough to run the manager out of a 30 MiB limit. This
//! module narrows the caches of the objects the operators *create* in two ways, both applied by
//! [`scope_owned_caches`](crate::registry::scope_owned_caches) to the manager's [`SharedInformerFactory`](sample_client_go::cache::SharedInformerFactory):
//!
//! 1. **A server-side `labelSelector` per type** (controller-runtime's `cache.Options.ByObject`
//!    with a `Label`; client-go's `WithTweakListOptions`, here per type through
//!    [`SharedInformerFactory::with_label_selector_for`](sample_client_go::cache::SharedInformerFactory::with_label_selector_for)). Pods, Deployments, StatefulSets and
//!    Services are watched with [`managed_by_selector`](crate::controllers::managed_by_selector):
//!
//!    ```text
//!    app.kubernetes.io/managed-by in (at-controller,myapp-controller,rediscluster-controller,
//!                                     sample-controller,tdset-controller)
//!    ```
//!
//!    *Why this label.* `app.kubernetes.io/managed-by` is the recommended Kubernetes label for
//!    "the tool managing this object", and TDSet, MyApp and RedisCluster already set it (through
//!    [`sample_controller_runtime::ownership::standard_labels`]; TDSet's and RedisCluster's pod templates too, so
//!    RedisCluster's StatefulSet pods carry it; MyApp's pods carry the track's `app` and
//!    `version` only, and no operator reads them). One key with each operator's own value keeps the objects of different
//!    operators apart for `kubectl get -l`, while one set-based selector lets all operators share
//!    *one* informer per type (TDSet, MyApp and Foo all watch Deployments: per-operator keys
//!    would mean three Deployment watches and three caches). Objects that now carry it besides:
//!    the At's pod (`app.kubernetes.io/managed-by: at-controller`, next to the book's
//!    `app: <name>`) and Foo's Deployment (`sample-controller`, on the Deployment's own labels
//!    only: its selector and template labels are sample-controller's, and a Deployment's
//!    selector is immutable, so changing them would break every existing Foo; no operator reads
//!    the pods of a Foo's Deployment).
//!
//!    *Objects made before this label.* An At pod or a Foo Deployment created by an older
//!    version carries no label, so the cache never sees it and the operator tries to create it
//!    again: the create answers 409 AlreadyExists. [`get_existing`](crate::controllers::get_existing) resolves that with one GET:
//!    an object whose controller ownerReference is the owner's is *ours*: it gets the label (one
//!    merge PATCH; the watch then delivers it as ADDED, since the API server turns an update that
//!    starts matching a selector into ADDED) and the sync goes on with it; any other object is
//!    reported as it was before (`ErrResourceExists`). Neither a duplicate nor a hot loop:
//!    the object is never created twice (the name is fixed), and the error path is not retried
//!    when the GET has answered.
//!
//! 2. **A slim, typed pod cache.** A `k8s_openapi` [`Pod`] is 2,176 bytes *before* any heap
//!    allocation (`PodSpec` 1,416 and `PodStatus` 400 bytes of inline `Option`s; `ObjectMeta`
//!    alone is 360), so clearing fields with a transform would still leave ≥ 2.2 KB per pod, 21
//!    MiB for 10,000 pods. The operators read only a pod's metadata, phase, reason, message,
//!    `Ready` condition and each container's terminated state, so the pod informer is an
//!    informer of [`PodSummary`]: a small struct with exactly those fields (264 bytes),
//!    deserialized straight from the list and watch stream of `/api/v1/pods` (serde skips
//!    every other field, so no full `Pod` is ever built). Even its metadata is not an
//!    `ObjectMeta` but a [`MetaSummary`] (184 bytes, the ten fields a handler reads, where
//!    `ObjectMeta` is 360): the cache reads metadata through an accessor
//!    ([`ObjectMetaAccess`], client-go's `meta.Accessor`), not a struct. The lister stays
//!    typed (`Lister<PodSummary>`), and [`PodSummary::to_pod`] rebuilds the few-field `Pod`
//!    the At's pure decision function takes, for one sync at a time. Its transform
//!    ([`ObjectMetaAccess::trim_for_cache`], [`keep_labels`], [`keep_conditions`]) drops every
//!    label but those in [`POD_LABELS_READ`](crate::registry::POD_LABELS_READ) (a lister label selector over the pod cache sees
//!    only those: select on the server instead) and every condition but `Ready` (that one too
//!    when no controller of [`POD_CONDITIONS_READERS`](crate::registry::POD_CONDITIONS_READERS) runs); the lists it
//!    keeps are shrunk to their length (a decoder grows a list by doubling, from room for
//!    four).
//!
//!    The At cache is typed the same way: an informer of [`AtSummary`], the At's spec and
//!    status with a [`MetaSummary`] instead of an `ObjectMeta` (managed fields and annotations,
//!    such as `kubectl.kubernetes.io/last-applied-configuration` with its second copy of the
//!    spec, are skipped while parsing). A sync turns the one At it works on back into an `At`
//!    ([`AtSummary::to_at`]) and builds its status write from it: the API server's `/status`
//!    endpoint takes only `.status` from the request, so what the cache dropped is never
//!    written back. A `DONE` At is kept slimmer still ([`slim_at`]): its status loses the
//!    message, the conditions and the pod name, its spec the schedule, command and image, none
//!    of which a decision reads once the At is final, and a `DONE` At's status is never written
//!    again (see [`slim_done_status`] and [`slim_done_spec`]). At the
//!    end of a burst every cached At is `DONE`.
//!
//!    Deployments, StatefulSets and Services are *not* slimmed: the operators update them with a
//!    PUT of the cached copy (drift correction), and a PUT of a slimmed copy would erase on the
//!    server whatever the cache dropped. The label selector is what bounds them: there is one
//!    per owner.
//!
//! ## Figures
//!
//! See docs/13-performance.md, "Memory: what the manager caches" (`../shared/bench/at-vs-kube-rs.sh`, peak RSS of
//! the manager for 10,000 Ats due at once, with and without 50,000 foreign pods).

pub mod meta_summary;

pub use meta_summary::{MetaSummary, OwnerRefSummary};

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::{ListableResource, Metadata, Resource};
use serde::{Deserialize, Serialize};

use crate::apis::At;
use crate::apis::at::v1::{AtPhase, AtSpec, AtStatus};
use sample_client_go::cache::{ObjectMetaAccess, SmallString};

/// The At cache's transform: the informer's default one (which it replaces) and a `DONE` At
/// slimmed ([`slim_done_status`], [`slim_done_spec`]: no decision reads
/// its status message, conditions or pod name, nor its schedule, command or image).
pub fn slim_at(at: &mut AtSummary) {
    at.metadata.trim_for_cache();
    if at.phase() == AtPhase::Done {
        slim_done_spec(&mut at.spec);
    }
    if let Some(status) = at.status.as_mut() {
        slim_done_status(status);
        status.conditions.shrink_to_fit();
    }
}

/// Keeps only the conditions whose type is named in `keep` (and no list when none is left).
pub fn keep_conditions(pod: &mut PodSummary, keep: &[&str]) {
    if let Some(conditions) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conditions.retain(|c| keep.contains(&c.type_.as_str()));
        conditions.shrink_to_fit();
        if conditions.is_empty()
            && let Some(status) = pod.status.as_mut()
        {
            status.conditions = None;
        }
    }
}

/// Keeps only the labels named in `keep` (and no map at all when none is left). A `BTreeMap`
/// of strings costs one 540-byte node even for a single label, plus its strings: ~680 bytes
/// for an At's pod with its two labels, the largest part of a cached `PodSummary`.
pub fn keep_labels(labels: &mut Option<BTreeMap<String, String>>, keep: &[&str]) {
    if let Some(map) = labels.as_mut() {
        map.retain(|k, _| keep.contains(&k.as_str()));
        if map.is_empty() {
            *labels = None;
        }
    }
}

/// A pod as the operators' caches hold it: its metadata and the few status fields a sync
/// reads. Deserialized from the pods endpoint (every other field is skipped while parsing);
/// never written to the server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSummary {
    /// The pod's metadata: the ten fields a handler or sync reads ([`MetaSummary`]).
    #[serde(default)]
    pub metadata: MetaSummary,
    /// What the kubelet reported, reduced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodSummaryStatus>,
}

/// `PodStatus`, reduced to what a sync reads.
///
/// The phase's reason and message are set on few pods (an evicted or failed one), so they sit
/// in a box of their own, read through [`PodSummaryStatus::reason`] and
/// [`PodSummaryStatus::message`]: 8 bytes in every cached pod instead of 48 (the
/// [`MetaSummary`]'s rare fields are kept the same way). The JSON form is `PodStatus`'s.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "PodStatusWire", into = "PodStatusWire")]
pub struct PodSummaryStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    pub phase: Option<SmallString>,
    /// The reason and message, when either is set.
    detail: Option<Box<PhaseDetail>>,
    /// The pod's conditions, each reduced to its type and status.
    pub conditions: Option<Vec<ConditionSummary>>,
    /// Each container's name and terminated state.
    pub container_statuses: Option<Vec<ContainerSummary>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct PhaseDetail {
    reason: Option<SmallString>,
    message: Option<SmallString>,
}

impl PodSummaryStatus {
    /// A CamelCase reason for the phase (`Evicted`, ...).
    pub fn reason(&self) -> Option<&str> {
        self.detail.as_ref()?.reason.as_deref()
    }

    /// A human-readable message for the phase.
    pub fn message(&self) -> Option<&str> {
        self.detail.as_ref()?.message.as_deref()
    }

    /// Sets the reason and the message (no box when both are `None`).
    pub fn set_reason_and_message(
        &mut self,
        reason: Option<SmallString>,
        message: Option<SmallString>,
    ) {
        self.detail = (reason.is_some() || message.is_some())
            .then(|| Box::new(PhaseDetail { reason, message }));
    }
}

/// [`PodSummaryStatus`] as it is written: `PodStatus`'s field names, flat.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatusWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<SmallString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<ConditionSummary>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_statuses: Option<Vec<ContainerSummary>>,
}

impl From<PodStatusWire> for PodSummaryStatus {
    fn from(w: PodStatusWire) -> Self {
        let mut status = PodSummaryStatus {
            phase: w.phase,
            detail: None,
            conditions: w.conditions,
            container_statuses: w.container_statuses,
        };
        status.set_reason_and_message(w.reason, w.message);
        status
    }
}

impl From<PodSummaryStatus> for PodStatusWire {
    fn from(s: PodSummaryStatus) -> Self {
        let (reason, message) = s.detail.map_or((None, None), |d| (d.reason, d.message));
        PodStatusWire {
            phase: s.phase,
            reason,
            message,
            conditions: s.conditions,
            container_statuses: s.container_statuses,
        }
    }
}

/// A pod condition's `type` and `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConditionSummary {
    /// `Ready`, `PodScheduled`, ...
    #[serde(rename = "type")]
    pub type_: SmallString,
    /// `True`, `False`, `Unknown`.
    pub status: SmallString,
}

/// A container's name and, once it ended, how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerSummary {
    /// The container's name in the pod spec.
    pub name: SmallString,
    /// The container's current state, reduced to `terminated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateSummary>,
}

/// `ContainerState`, reduced to `terminated`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateSummary {
    /// Set once the container exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<TerminatedSummary>,
}

/// `ContainerStateTerminated`, reduced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TerminatedSummary {
    /// The process's exit code.
    pub exit_code: i32,
    /// A CamelCase reason (`Error`, `OOMKilled`, `Completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SmallString>,
    /// A message about the termination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<SmallString>,
}

/// Served at the pods endpoint: `/api/v1/pods`, kind `Pod`.
impl Resource for PodSummary {
    const API_VERSION: &'static str = Pod::API_VERSION;
    const GROUP: &'static str = Pod::GROUP;
    const KIND: &'static str = Pod::KIND;
    const VERSION: &'static str = Pod::VERSION;
    const URL_PATH_SEGMENT: &'static str = Pod::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl Metadata for PodSummary {
    type Ty = MetaSummary;
    fn metadata(&self) -> &MetaSummary {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut MetaSummary {
        &mut self.metadata
    }
}

/// An At as the At controller's cache holds it: the spec and status of an [`At`], with the
/// metadata a handler or sync reads ([`MetaSummary`]) instead of a whole `ObjectMeta`.
/// Deserialized from the Ats endpoint (the metadata's other fields are skipped while parsing);
/// a sync turns the one it works on into an `At` ([`AtSummary::to_at`]).
///
/// Why: an `At` is 608 bytes before it allocates, 360 of them its `ObjectMeta`, and its name,
/// namespace, UID and resourceVersion take an allocation each; an `AtSummary` is 432 bytes
/// and keeps those strings inline. At 10,000 Ats that, with the correlator's slimmer records, took
/// the manager's anonymous memory from 36.9 to 33.1 MiB (see docs/13-performance.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AtSummary {
    /// The At's metadata: the fields a handler or sync reads.
    #[serde(default)]
    pub metadata: MetaSummary,
    /// The At's spec, whole.
    pub spec: AtSpec,
    /// The At's status, whole (a `DONE` one slimmed by [`slim_at`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AtStatus>,
}

/// Served at the Ats endpoint, in the At's storage version.
impl Resource for AtSummary {
    const API_VERSION: &'static str = At::API_VERSION;
    const GROUP: &'static str = At::GROUP;
    const KIND: &'static str = At::KIND;
    const VERSION: &'static str = At::VERSION;
    const URL_PATH_SEGMENT: &'static str = At::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl ListableResource for AtSummary {
    const LIST_KIND: &'static str = At::LIST_KIND;
}

impl Metadata for AtSummary {
    type Ty = MetaSummary;
    fn metadata(&self) -> &MetaSummary {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut MetaSummary {
        &mut self.metadata
    }
}

impl AtSummary {
    /// The summary of a whole At.
    pub fn from_at(at: &At) -> AtSummary {
        AtSummary {
            metadata: MetaSummary::from_meta(&at.metadata),
            spec: at.spec.clone(),
            status: at.status.clone(),
        }
    }

    /// The `At` with the summary's fields set (its metadata: [`MetaSummary::to_meta`]).
    pub fn to_at(&self) -> At {
        At {
            metadata: self.metadata.to_meta(),
            spec: self.spec.clone(),
            status: self.status.clone(),
        }
    }

    /// The phase, treating a missing status or phase as `PENDING` (as [`At::phase`]).
    pub fn phase(&self) -> AtPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }
}

impl PodSummary {
    /// The `Pod` with exactly the summary's fields set (metadata, phase, reason, message,
    /// conditions' type and status, containers' name and terminated state).
    pub fn to_pod(&self) -> Pod {
        let status = self.status.as_ref().map(|s| PodStatus {
            phase: s.phase.as_deref().map(str::to_owned),
            reason: s.reason().map(str::to_owned),
            message: s.message().map(str::to_owned),
            conditions: s.conditions.as_ref().map(|cs| {
                cs.iter()
                    .map(|c| PodCondition {
                        type_: c.type_.to_string(),
                        status: c.status.to_string(),
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            container_statuses: s.container_statuses.as_ref().map(|cs| {
                cs.iter()
                    .map(|c| ContainerStatus {
                        name: c.name.to_string(),
                        state: c.state.as_ref().map(|st| ContainerState {
                            terminated: st.terminated.as_ref().map(|t| ContainerStateTerminated {
                                exit_code: t.exit_code,
                                reason: t.reason.as_deref().map(str::to_owned),
                                message: t.message.as_deref().map(str::to_owned),
                                ..ContainerStateTerminated::default()
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
        Pod {
            metadata: self.metadata.to_meta(),
            spec: None,
            status,
        }
    }

    /// The summary of a full `Pod` (what the pods endpoint would have deserialized into it).
    pub fn from_pod(pod: &Pod) -> PodSummary {
        // Through the wire form, as the pods endpoint's JSON would come in.
        let status = pod.status.as_ref().map(|s| {
            PodStatusWire {
                phase: s.phase.as_deref().map(SmallString::from),
                reason: s.reason.as_deref().map(SmallString::from),
                message: s.message.as_deref().map(SmallString::from),
                conditions: s.conditions.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| ConditionSummary {
                            type_: c.type_.as_str().into(),
                            status: c.status.as_str().into(),
                        })
                        .collect()
                }),
                container_statuses: s.container_statuses.as_ref().map(|cs| {
                    cs.iter()
                        .map(|c| ContainerSummary {
                            name: c.name.as_str().into(),
                            state: c.state.as_ref().map(|st| StateSummary {
                                terminated: st.terminated.as_ref().map(|t| TerminatedSummary {
                                    exit_code: t.exit_code,
                                    reason: t.reason.as_deref().map(SmallString::from),
                                    message: t.message.as_deref().map(SmallString::from),
                                }),
                            }),
                        })
                        .collect()
                }),
            }
            .into()
        });
        PodSummary {
            metadata: MetaSummary::from_meta(&pod.metadata),
            status,
        }
    }
}

/// Forgets what no decision reads once an At is `DONE`: `status.message`, `status.conditions`
/// and `status.podName` (its most allocated parts: the `Ready` condition alone is four strings
/// and a list). Kept: phase, result, exit code, start and completion time, observed
/// generation. (The spec's counterpart is [`slim_done_spec`].)
///
/// The manager's At cache applies it ([`crate::registry::scope_owned_caches`]), and so do the
/// [`WrittenStatuses`](crate::controllers::at::WrittenStatuses) records: at the end of a burst every cached At is `DONE`, and these
/// parts were ~320 bytes an At, ~3 MB of the heap at 10,000 Ats. It is safe because `DONE` is
/// final: [`plan`](crate::controllers::at::plan) never writes the status of a `DONE` At (its `DONE` rows only
/// delete the finished pod), so a slim copy is never sent back to the server, and
/// the `/status` endpoint would take nothing but `.status` from it anyway. A reader of this
/// cache sees a `DONE` At without those three fields; the API server still has them.
pub fn slim_done_status(status: &mut AtStatus) {
    if status.phase == Some(AtPhase::Done) {
        status.message = None;
        status.pod_name = None;
        status.conditions = Vec::new();
    }
}

/// Forgets the parts of a `DONE` At's spec no decision reads: the schedule, the command and
/// the image (each a string). Kept: `spec.run.ttlSecondsAfterFinished`, which the `DONE` rows
/// of [`plan`](crate::controllers::at::plan) read to delete the finished pod, and `activeDeadlineSeconds` (a number).
///
/// The manager's At cache applies it to a `DONE` At alongside [`slim_done_status`]
/// ([`crate::slim::slim_at`]), for the same reasons: `DONE` is final, and [`plan`](crate::controllers::at::plan)'s
/// `DONE` rows read nothing else of the spec; an At's spec is never written by this
/// controller at all (its status writes go to `/status`, which takes only `.status`). About 70
/// bytes an At with its malloc chunks, 0.7 MB at 10,000 Ats. Call it only for a `DONE` At.
pub fn slim_done_spec(spec: &mut AtSpec) {
    spec.schedule = String::new();
    spec.run.command = String::new();
    spec.run.image = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::POD_CONDITIONS_READ;
    use serde_json::json;

    /// The slim types skip `managedFields` as they parse (so the informers' client does not cut
    /// it from their text first, `ObjectMetaAccess::DECODES_MANAGED_FIELDS`): decoding the text
    /// as it came equals decoding it with the member cut out.
    #[test]
    fn slim_types_decode_the_same_with_or_without_managed_fields_in_the_text() {
        use sample_client_go::cache::ObjectMetaAccess;
        use sample_client_go::client::skip_managed_fields::without_managed_fields;
        const { assert!(!<MetaSummary as ObjectMetaAccess>::DECODES_MANAGED_FIELDS) };
        let managed = json!([{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]);
        let at = json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
            "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "7",
                "managedFields": managed, "labels": {"app": "a"}},
            "spec": {"schedule": "2030-06-01T11:00:00Z", "run": {"command": "echo hi"}},
            "status": {"phase": "RUNNING"}});
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a-pod", "namespace": "default", "uid": "p", "managedFields": managed,
                "ownerReferences": [{"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
                    "name": "a", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Succeeded"}});
        let text = serde_json::to_vec(&at).unwrap();
        let cut = without_managed_fields(&text).expect("a member to cut");
        assert_eq!(
            serde_json::from_slice::<AtSummary>(&text).unwrap(),
            serde_json::from_slice::<AtSummary>(&cut).unwrap()
        );
        let text = serde_json::to_vec(&pod).unwrap();
        let cut = without_managed_fields(&text).expect("a member to cut");
        assert_eq!(
            serde_json::from_slice::<PodSummary>(&text).unwrap(),
            serde_json::from_slice::<PodSummary>(&cut).unwrap()
        );
    }

    #[test]
    fn the_at_cache_keeps_an_ats_spec_status_and_summary_and_slims_a_done_at_only() {
        let json = json!({
            "apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
            "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "7",
                "generation": 2, "labels": {"team": "x"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"schedule": "2030-06-01T11:00:00Z", "run": {"command": "echo hi"}},
            "status": {"phase": "DONE", "podName": "a-pod", "result": "Succeeded", "exitCode": 0,
                "completionTime": "2030-06-01T11:00:05Z", "message": "the command exited 0",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                    "message": "the command exited 0", "lastTransitionTime": "2030-06-01T11:00:05Z"}]}
        });
        let done: At = serde_json::from_value(json.clone()).expect("an At");
        // Decoded straight from the At's JSON, it is the summary of the whole At.
        let summary: AtSummary = serde_json::from_value(json).expect("an AtSummary");
        assert_eq!(summary, AtSummary::from_at(&done));
        assert_eq!(summary.metadata.generation, Some(2));
        assert_eq!(summary.phase(), done.phase());
        // Back to an At: spec, status and the kept metadata; no annotations, no managed fields.
        let back = summary.to_at();
        assert_eq!((&back.spec, &back.status), (&done.spec, &done.status));
        assert_eq!(back.metadata.annotations, None);
        assert_eq!(back.metadata.managed_fields, None);
        assert_eq!(back.metadata.labels, done.metadata.labels);
        assert_eq!(
            (
                back.metadata.name,
                back.metadata.uid,
                back.metadata.resource_version
            ),
            (
                done.metadata.name,
                done.metadata.uid,
                done.metadata.resource_version
            )
        );

        let mut cached = summary.clone();
        slim_at(&mut cached);
        let (was, now) = (done.status.clone().unwrap(), cached.status.clone().unwrap());
        assert_eq!(
            (now.message, now.pod_name, now.conditions.len()),
            (None, None, 0)
        );
        assert_eq!(
            (now.phase, now.result, now.exit_code, now.completion_time),
            (was.phase, was.result, was.exit_code, was.completion_time)
        );
        let mut slim_spec = done.spec.clone();
        slim_done_spec(&mut slim_spec);
        assert_eq!(cached.spec, slim_spec);
        assert_eq!(cached.spec.schedule, "");

        let mut running = summary.clone();
        running.status.as_mut().unwrap().phase = Some(crate::apis::AtPhase::Running);
        let mut cached = running.clone();
        slim_at(&mut cached);
        assert_eq!(cached.status, running.status, "only DONE is slimmed");
        assert_eq!(cached.spec, running.spec, "only DONE is slimmed");
    }

    /// An evicted pod's reason and message come through the pods endpoint's JSON and go back
    /// out the same; a pod without them carries no box for them.
    #[test]
    fn a_pods_phase_reason_and_message_are_kept_apart_and_written_flat() {
        let evicted: PodSummary = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory. Threshold quantity: 100Mi."
            }
        }))
        .expect("a pod");
        let status = evicted.status.as_ref().expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason(), Some("Evicted"));
        assert_eq!(
            status.message(),
            Some("The node was low on resource: memory. Threshold quantity: 100Mi.")
        );
        let written = serde_json::to_value(&evicted).expect("json");
        assert_eq!(written["status"]["reason"], "Evicted");
        assert_eq!(written["status"]["phase"], "Failed");
        assert_eq!(PodSummary::from_pod(&evicted.to_pod()), evicted);

        let done: PodSummary = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "q"}, "status": {"phase": "Succeeded"}}),
        )
        .expect("a pod");
        let status = done.status.as_ref().expect("a status");
        assert!(status.detail.is_none() && status.reason().is_none());
        assert_eq!(
            serde_json::to_value(status).expect("json"),
            serde_json::json!({"phase": "Succeeded"})
        );
        assert_eq!(std::mem::size_of::<PodSummaryStatus>(), 80);
    }

    #[test]
    fn the_pod_transform_keeps_only_the_ready_condition() {
        let summary = |types: &[&str]| PodSummary {
            status: Some(PodSummaryStatus {
                phase: Some("Running".into()),
                conditions: Some(
                    types
                        .iter()
                        .map(|t| ConditionSummary {
                            type_: (*t).into(),
                            status: "True".into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut pod = summary(&["PodScheduled", "Initialized", "ContainersReady", "Ready"]);
        keep_conditions(&mut pod, &POD_CONDITIONS_READ);
        let kept = pod.status.as_ref().and_then(|s| s.conditions.clone());
        assert_eq!(kept.map(|c| c.len()), Some(1));
        assert_eq!(
            pod.status.as_ref().map(|s| s.phase.clone()),
            Some(Some("Running".into()))
        );

        let mut scheduled_only = summary(&["PodScheduled"]);
        keep_conditions(&mut scheduled_only, &POD_CONDITIONS_READ);
        assert_eq!(scheduled_only.status.and_then(|s| s.conditions), None);
        let mut no_status = PodSummary::default();
        keep_conditions(&mut no_status, &POD_CONDITIONS_READ);
        assert_eq!(no_status, PodSummary::default());
    }

    #[test]
    fn a_pod_summary_keeps_what_the_at_decision_reads() {
        let wire = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a-pod", "namespace": "default", "uid": "u1",
                "resourceVersion": "7", "labels": {"app": "a"},
                "annotations": {"big": "x"},
                "managedFields": [{"manager": "m", "operation": "Update"}],
                "ownerReferences": [{"apiVersion": "cnat.programming-kubernetes.info/v1alpha1",
                    "kind": "At", "name": "a", "uid": "at-uid", "controller": true}]},
            "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36"}]},
            "status": {"phase": "Failed", "hostIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
                "containerStatuses": [{"name": "busybox", "image": "busybox:1.36", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}
        });
        let full: Pod = serde_json::from_value(wire.clone()).expect("a pod");
        let summary: PodSummary = serde_json::from_value(wire).expect("a summary");
        assert_eq!(summary, PodSummary::from_pod(&full));
        let rebuilt = summary.to_pod();
        assert_eq!(
            crate::controllers::at::finished(&rebuilt),
            crate::controllers::at::finished(&full)
        );
        assert_eq!(
            crate::controllers::at::finished(&rebuilt).map(|o| o.exit_code),
            Some(Some(3))
        );
        assert_eq!(
            rebuilt.metadata.owner_references,
            full.metadata.owner_references
        );
    }
}
