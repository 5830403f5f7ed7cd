//! # A controller of one's own: a `Note` becomes a ConfigMap
//!
//! This crate is what a builder writes on `sample-client-go` and `sample-controller-runtime`
//! alone: a custom resource, a reconcile function, and one line that registers it with the
//! manager. It depends on no operator of this repository.
//!
//! A `Note` (`notes.example.com/v1`) carries key/value pairs in `spec.data`; the controller
//! keeps a ConfigMap of the same name, in the same namespace, holding exactly that data, and
//! controlled by the Note (so the garbage collector deletes it with the Note). A ConfigMap
//! edited by hand is put back; a ConfigMap of that name owned by someone else is left alone and
//! reported (status `Conflict`, a Warning event). The Note's status says which ConfigMap it
//! wrote and for which generation of its spec.
//!
//! ```text
//! kubectl apply -f note.yaml      ──▶ Note default/greeting {spec.data: {hello: world}}
//!   informer ── key ──▶ reconcile ──▶ ConfigMap default/greeting {data: {hello: world}}
//!                                     ownerReferences: [Note greeting, controller: true]
//!                                 ──▶ Note status {configMap: greeting, observedGeneration: 1}
//! kubectl edit configmap greeting ──▶ (Owns) ── key of its Note ──▶ reconcile puts it back
//! ```
//!
//! The whole registration is [`registration`]:
//!
//! ```no_run
//! # use configmap_controller::{Note, NoteReconciler};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use sample_controller_runtime::builder::Builder;
//!
//! let registration = Builder::<Note>::new("notes")
//!     .owns::<ConfigMap>()
//!     .complete(NoteReconciler)
//!     .with_crd::<Note>();
//! ```
//!
//! and the binary (`src/main.rs`) hands it to the manager's command line, which brings flags,
//! leader election, metrics, probes and graceful shutdown. `tests/notes.rs` runs it against
//! the embedded API server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{self, Api, PostParams};
use sample_client_go::record::EventType;
use sample_controller_runtime::builder::{Builder, Context, Reconciler};
use sample_controller_runtime::manager::Registration;
use sample_controller_runtime::ownership::{controller_reference, is_controlled_by};
use sample_controller_runtime::resource::{CustomResourceExt, PrinterColumn};
use serde::{Deserialize, Serialize};

/// The Note's desired state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoteSpec {
    /// What the ConfigMap holds.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NoteStatus {
    /// `Synced`, or `Conflict` when a ConfigMap of that name belongs to someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The ConfigMap written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// The `metadata.generation` of the spec it was written from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

sample_controller_runtime::custom_resource! {
    /// Key/value pairs the controller keeps in a ConfigMap of the same name.
    pub struct Note {
        spec: NoteSpec,
        status: Option<NoteStatus>,
    }
    group = "notes.example.com",
    version = "v1",
    kind = "Note",
    plural = "notes",
}

impl CustomResourceExt for Note {
    const SINGULAR: &'static str = "note";
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[PrinterColumn {
        name: "Phase",
        type_: "string",
        json_path: ".status.phase",
    }];
}

/// The controller's name: its `--controllers` name, event source, queue and metrics label.
pub const NAME: &str = "notes";

/// The Note's CustomResourceDefinition (`kubectl apply -f` its JSON, or create it through the
/// client as the test does).
pub fn crd() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": Note::crd_name()},
        "spec": {
            "group": "notes.example.com",
            "scope": "Namespaced",
            "names": {"plural": "notes", "singular": "note", "kind": "Note", "listKind": "NoteList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "data": {"type": "object", "additionalProperties": {"type": "string"}}
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                            "configMap": {"type": "string"},
                            "observedGeneration": {"type": "integer", "format": "int64"}
                        }}
                    }
                }}
            }]
        }
    })
}

/// The controller, ready for `Manager::register`.
pub fn registration() -> Registration {
    Builder::<Note>::new(NAME)
        .owns::<ConfigMap>()
        .complete(NoteReconciler)
        .with_crd::<Note>()
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    /// A request failed.
    #[error("{action} for Note {key}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// The Note's `namespace/name`.
        key: String,
        #[source]
        source: client::Error,
    },
    /// The Note has no uid (it did not come from an API server), so nothing can point at it.
    #[error("Note {0} has no metadata.uid")]
    NoUid(String),
}

/// Keeps each Note's ConfigMap in step.
pub struct NoteReconciler;

impl Reconciler<Note> for NoteReconciler {
    type Error = NoteError;

    async fn reconcile(
        &self,
        note: Arc<Note>,
        cx: &Context<Note>,
    ) -> Result<Option<Duration>, NoteError> {
        if note.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let ns = note.metadata.namespace.clone().unwrap_or_default();
        let name = note.metadata.name.clone().unwrap_or_default();
        let key = format!("{ns}/{name}");
        let api = |action| {
            let key = key.clone();
            move |source| NoteError::Api {
                action,
                key,
                source,
            }
        };
        let owner =
            controller_reference(note.as_ref()).ok_or_else(|| NoteError::NoUid(key.clone()))?;
        let config_maps: Api<ConfigMap> = Api::namespaced(cx.client.clone(), &ns);
        let pp = PostParams::with_field_manager(NAME);
        let cached = cx.owned::<ConfigMap>().and_then(|l| l.get_by_key(&key));
        let phase = match cached {
            None => {
                let desired = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        owner_references: Some(vec![owner]),
                        ..ObjectMeta::default()
                    },
                    data: Some(note.spec.data.clone()),
                    ..ConfigMap::default()
                };
                match config_maps.create(&pp, &desired).await {
                    Ok(_) => "Synced",
                    // Made by someone else since the cache looked: the event of it brings the
                    // Note back here, with the ConfigMap in the cache.
                    Err(e) if e.is_already_exists() => return Ok(None),
                    Err(e) => return Err(api("creating the ConfigMap")(e)),
                }
            }
            Some(cm) if !is_controlled_by(&cm.metadata, note.as_ref()) => {
                cx.recorder.event(
                    note.as_ref(),
                    EventType::Warning,
                    "Conflict",
                    &format!("ConfigMap {name} exists and is not controlled by this Note"),
                );
                "Conflict"
            }
            Some(cm) => {
                let data = cm.data.clone().unwrap_or_default();
                if data != note.spec.data {
                    let mut updated = (*cm).clone();
                    updated.data = Some(note.spec.data.clone());
                    config_maps
                        .update(&pp, &updated)
                        .await
                        .map_err(api("updating the ConfigMap"))?;
                }
                "Synced"
            }
        };
        let status = NoteStatus {
            phase: Some(phase.to_string()),
            config_map: (phase == "Synced").then(|| name.clone()),
            observed_generation: note.metadata.generation,
        };
        if note.status.as_ref() != Some(&status) {
            let mut with_status = (*note).clone();
            with_status.status = Some(status);
            Api::<Note>::namespaced(cx.client.clone(), &ns)
                .update_status(&pp, &with_status)
                .await
                .map_err(api("writing the status"))?;
        }
        Ok(None)
    }

    fn is_conflict(err: &NoteError) -> bool {
        matches!(err, NoteError::Api { source, .. } if source.is_conflict())
    }
}
