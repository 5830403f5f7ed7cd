//! The registry: one generic store and a strategy per resource, as kube-apiserver's
//! `staging/src/k8s.io/apiserver/pkg/registry/generic` and `pkg/registry/<group>/<resource>`.
//!
//! A request the handlers ([`crate::endpoints`]) have routed and admission has let through
//! reaches the verbs of the generic store ([`generic`]), which run under the store's lock
//! against the objects of [`crate::storage`]. What every resource shares is there and in
//! [`strategy`] (the create and update rules) and [`validation`] (metadata and names); what one
//! resource does differently is its [`strategy::Strategy`], which its definition in the
//! resource table ([`resources`]) carries:
//!
//! | module | what it holds | kube-apiserver |
//! |---|---|---|
//! | [`generic`] | get, list, create, update, patch, delete, `/scale` | `registry/generic/registry/store.go`, `endpoints/handlers` |
//! | [`strategy`] | the [`strategy::Strategy`] hooks, the shared create/update rules, the served form | `registry/rest` (`BeforeCreate`, `BeforeUpdate`), `RESTCreateStrategy`, ... |
//! | [`resources`] | the resource table: every served resource, its flags and its strategy | the REST storage wiring of `pkg/controlplane` |
//! | [`validation`] | the rules every object shares, `fieldValidation` | `ValidateObjectMeta`, the decoder's strict mode |
//! | [`typed`] | the built-in kinds' Go types: wrongly typed fields, unknown fields | `runtime.Scheme` |
//! | [`patch`] | JSON, merge and strategic merge patch, server-side apply, managed fields | `endpoints/handlers/patch.go`, `structured-merge-diff` |
//! | [`core`] | namespaces, pods (and ephemeral containers), services, nodes, events, configmaps, secrets, resource quotas (with quota admission); TokenRequest, Eviction, ComponentStatus | `pkg/registry/core/*` |
//! | [`apps`] | deployments, replicasets, statefulsets | `pkg/registry/apps/*` |
//! | [`batch`] | jobs, cronjobs (and the cron schedule grammar) | `pkg/registry/batch/*` |
//! | [`rbac`] | roles, cluster roles and their bindings, with the escalation check | `pkg/registry/rbac/*` |
//! | [`networking`] | ingresses, ingress classes, network policies | `pkg/registry/networking/*` |
//! | [`coordination`] | leases | `pkg/registry/coordination/lease` |
//! | [`certificates`] | certificate signing requests' `/approval` | `pkg/registry/certificates/certificates` |
//! | [`admissionregistration`] | webhook configurations | `pkg/registry/admissionregistration/*` |
//!
//! Custom resources and CRDs get their strategies from [`crate::apiextensions`]. Printing
//! (`kubectl get`'s Table) is not a strategy's: as kube-apiserver's `pkg/printers` it is one
//! module of its own, in [`crate::endpoints::printers`].

use std::sync::Arc;

use crate::storage::store;
use crate::webhook::Webhooks;

pub mod admissionregistration;
pub mod apps;
pub mod batch;
pub mod certificates;
pub mod coordination;
pub mod core;
pub mod generic;
pub mod networking;
pub mod patch;
pub mod rbac;
pub mod resources;
pub mod strategy;
pub mod typed;
pub mod validation;

/// The store of this server: its objects, their history, and the resource table.
pub type Store = store::Store<resources::Registry>;

/// What [`Store::read`] and [`Store::write`] hand over: the objects and the resource table.
pub type State = store::State<resources::Registry>;

/// What the write path below the handlers needs: the store and the webhook clients
/// (admission and CRD conversion call webhooks). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Backend {
    /// The objects, their history and the resource table.
    pub store: Arc<Store>,
    /// The webhook clients.
    pub webhooks: Arc<Webhooks>,
}
