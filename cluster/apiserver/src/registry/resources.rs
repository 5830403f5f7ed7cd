//! The resource table: which resources the server serves and how each one behaves.
//!
//! A real kube-apiserver wires one `registry/generic/registry.Store` per resource, each with a
//! *strategy* that answers questions like "does an update without a resourceVersion go
//! through?" (`AllowUnconditionalUpdate`), "does a PUT on a missing object create it?"
//! (`AllowCreateOnUpdate`), "does DELETE answer with the object or with a Status?"
//! (`ReturnDeletedObject`), and "which parts of the object does the main endpoint own?" (status
//! subresource). Here every one of those answers is a field of [`ResourceDef`], and the
//! [`Registry`] is the list of definitions: the built-ins from [`Registry::builtins`] plus one
//! entry per served version of every registered CustomResourceDefinition.
//!
//! What a resource does beyond those answers (defaults, validation, status on create,
//! allocations, graceful deletion, subresources of its own) is its [`Strategy`], which its
//! definition carries: the built-ins' are attached here, one per resource file under
//! `registry/<group>/` ([`crate::registry::core`], [`crate::registry::apps`],
//! [`crate::registry::batch`], [`crate::registry::networking`], [`crate::registry::rbac`], ...); CRDs get theirs from
//! [`crate::apiextensions`] ([`Registry::set_strategy`]), custom resources from their CRD.
//!
//! Two definitions may share one *storage*: `events` in `v1` and `events` in `events.k8s.io/v1`
//! are one set of stored objects seen through two schemas ([`View::EventsV1`]), exactly as the
//! real server stores events once.
//!
//! Invariant: `(group, version, plural)` is unique; the registry is only mutated under the
//! store's lock, so discovery, routing and storage always agree.

use std::sync::Arc;

use serde_json::Value;

use crate::api::json_order::GoOrdered;
use crate::registry::admissionregistration::{Kind as WebhookKind, WebhookConfigurationStrategy};
use crate::registry::apps::replicas::ReplicasStrategy;
use crate::registry::batch::cronjobs::CronJobStrategy;
use crate::registry::batch::jobs::JobStrategy;
use crate::registry::certificates::CertificateSigningRequestStrategy;
use crate::registry::coordination::LeaseStrategy;
use crate::registry::core::configmaps::ConfigMapStrategy;
use crate::registry::core::events::{CoreEventStrategy, EventsV1Strategy};
use crate::registry::core::namespaces::NamespaceStrategy;
use crate::registry::core::nodes::NodeStrategy;
use crate::registry::core::pods::PodStrategy;
use crate::registry::core::resourcequotas::ResourceQuotaStrategy;
use crate::registry::core::secrets::SecretStrategy;
use crate::registry::core::services::ServiceStrategy;
use crate::registry::networking::ingressclasses::IngressClassStrategy;
use crate::registry::networking::ingresses::IngressStrategy;
use crate::registry::networking::networkpolicies::NetworkPolicyStrategy;
use crate::registry::rbac::bindings::BindingStrategy;
use crate::registry::rbac::roles::RoleStrategy;
use crate::registry::strategy::{GenericStrategy, Strategy};
use crate::webhook::endpoint::Endpoint;

/// Which schema a definition presents its stored objects through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Objects are served as stored.
    Native,
    /// `events.k8s.io/v1` Events over core/v1 storage (`regarding` ↔ `involvedObject`, ...).
    EventsV1,
}

/// Where the `/scale` subresource reads and writes replica counts (JSONPaths like `.spec.replicas`).
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleSpec {
    /// Path of the desired replica count.
    pub spec_replicas_path: String,
    /// Path of the observed replica count.
    pub status_replicas_path: String,
    /// Path of the label selector (a string, or a `LabelSelector` object for built-ins).
    pub label_selector_path: Option<String>,
}

/// What a custom resource's definition adds: its schema and printer columns.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CustomInfo {
    /// `openAPIV3Schema` of the served version, if any.
    pub schema: Option<Value>,
    /// `additionalPrinterColumns` of the served version.
    pub printer_columns: Vec<Value>,
    /// `spec.selectableFields[].jsonPath`, without the leading dot.
    pub selectable_fields: Vec<String>,
    /// Name of the owning CRD (`<plural>.<group>`).
    pub crd_name: String,
    /// The CRD's storage version (objects are converted to it before they are stored).
    pub storage_version: String,
    /// The CRD's conversion webhook (`strategy: Webhook`); `None` for `strategy: None`.
    pub conversion: Option<Arc<WebhookConversion>>,
    /// `deprecated: true` on the served version: the `Warning` every request to it carries
    /// (its `deprecationWarning`, or `<group>/<version> <Kind> is deprecated`).
    pub deprecation_warning: Option<String>,
}

/// A CRD's conversion webhook (`spec.conversion.webhook` of a `strategy: Webhook` CRD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookConversion {
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// Where the webhook is called.
    pub endpoint: Endpoint,
    /// `clientConfig.caBundle`, decoded (PEM); empty means the system roots.
    pub ca_bundle: Vec<u8>,
    /// The `ConversionReview` version sent: the first of `conversionReviewVersions` this
    /// server speaks.
    pub review_version: String,
}

/// Everything the server needs to know to serve one resource in one version.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceDef {
    /// API group, `""` for core.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name used in URLs.
    pub plural: String,
    /// Singular name (`kubectl get pod`).
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Kind of the list (`<Kind>List`).
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`po`, `deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource: the main endpoint ignores `.status`, `/status` ignores the rest.
    pub status_subresource: bool,
    /// Has a `/scale` subresource.
    pub scale: Option<ScaleSpec>,
    /// `metadata.generation` is maintained (1 on create, +1 on spec change).
    pub tracks_generation: bool,
    /// An update without `metadata.resourceVersion` is accepted (`AllowUnconditionalUpdate`).
    pub unconditional_update: bool,
    /// A PUT on a missing object creates it (`AllowCreateOnUpdate`).
    pub create_on_update: bool,
    /// DELETE answers with the deleted object instead of a Success Status (`ReturnDeletedObject`).
    pub return_deleted_object: bool,
    /// Strategic merge patch is accepted (built-ins yes, custom resources no).
    pub strategic_merge: bool,
    /// Field-selector labels beyond `metadata.name` / `metadata.namespace`.
    pub field_labels: Vec<String>,
    /// The storage key objects live under (shared by two views of events).
    pub storage: String,
    /// The schema objects are served through.
    pub view: View,
    /// Custom resources only.
    pub custom: Option<CustomInfo>,
    /// What this resource adds to the generic store's writes, if anything (see
    /// [`crate::registry::strategy::Strategy`]).
    pub strategy: StrategyRef,
}

/// A resource's [`Strategy`], if it has one ([`GenericStrategy`], every hook's default, if not).
/// Definitions compare equal when they share the same strategy object.
#[derive(Clone, Debug, Default)]
pub struct StrategyRef(pub Option<Arc<dyn Strategy>>);

impl PartialEq for StrategyRef {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl StrategyRef {
    /// The strategy ([`GenericStrategy`] when the resource has none of its own).
    pub fn get(&self) -> &dyn Strategy {
        self.0.as_deref().unwrap_or(&GenericStrategy)
    }
}

impl ResourceDef {
    /// `value` (an object or list of this resource) serialized as it is served: sorted for
    /// custom resources (unstructured, as on a real server) unless it is a Status or a Table,
    /// in Go's field order otherwise.
    pub fn ordered<'a>(&self, value: &'a Value) -> GoOrdered<'a> {
        if self.custom.is_some() && !matches!(value["kind"].as_str(), Some("Status" | "Table")) {
            GoOrdered::sorted(value)
        } else {
            GoOrdered::new(value)
        }
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `group/version` key used by discovery (`v1` for core).
    pub fn group_version(&self) -> String {
        self.api_version()
    }

    /// Whether `field` may be used in a field selector on this resource.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || field == "metadata.namespace"
            || self.field_labels.iter().any(|f| f == field)
    }

    /// Whether this is core/v1 `componentstatuses`, computed on each read and never stored
    /// ([`crate::endpoints::handlers`] answers it).
    pub fn is_component_status(&self) -> bool {
        self.group.is_empty() && self.plural == "componentstatuses" && self.custom.is_none()
    }

    /// Every verb of a full resource (`get` and `list` for ComponentStatuses).
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.is_component_status() {
            return vec!["get", "list"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// A compact builder for the built-in table.
struct B(ResourceDef);

impl B {
    fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        let storage = if group.is_empty() {
            format!("core/{plural}")
        } else {
            format!("{group}/{plural}")
        };
        B(ResourceDef {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced,
            short_names: vec![],
            categories: vec![],
            status_subresource: false,
            scale: None,
            tracks_generation: false,
            unconditional_update: true,
            create_on_update: false,
            return_deleted_object: false,
            strategic_merge: true,
            field_labels: vec![],
            storage,
            view: View::Native,
            custom: None,
            strategy: StrategyRef::default(),
        })
    }
    fn short(mut self, names: &[&str]) -> Self {
        self.0.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }
    fn categories(mut self, c: &[&str]) -> Self {
        self.0.categories = c.iter().map(|s| s.to_string()).collect();
        self
    }
    fn all(mut self) -> Self {
        self.0.categories = vec!["all".into()];
        self
    }
    fn status(mut self) -> Self {
        self.0.status_subresource = true;
        self
    }
    fn scale(mut self) -> Self {
        self.0.scale = Some(ScaleSpec {
            spec_replicas_path: ".spec.replicas".into(),
            status_replicas_path: ".status.replicas".into(),
            label_selector_path: Some(".spec.selector".into()),
        });
        self
    }
    fn generation(mut self) -> Self {
        self.0.tracks_generation = true;
        self
    }
    fn conditional(mut self) -> Self {
        self.0.unconditional_update = false;
        self
    }
    fn create_on_update(mut self) -> Self {
        self.0.create_on_update = true;
        self
    }
    fn returns_deleted(mut self) -> Self {
        self.0.return_deleted_object = true;
        self
    }
    fn fields(mut self, f: &[&str]) -> Self {
        self.0.field_labels = f.iter().map(|s| s.to_string()).collect();
        self
    }
    fn strategy(mut self, s: impl Strategy + 'static) -> Self {
        self.0.strategy = StrategyRef(Some(Arc::new(s)));
        self
    }
    fn done(self) -> Arc<ResourceDef> {
        Arc::new(self.0)
    }
}

/// Field-selector labels of core/v1 events (`pkg/registry/core/event/strategy.go`).
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The resource table. Its default is the built-in resources ([`Registry::builtins`]).
#[derive(Clone, Debug)]
pub struct Registry {
    defs: Vec<Arc<ResourceDef>>,
}

impl Default for Registry {
    /// The built-in resources ([`Registry::builtins`]).
    fn default() -> Self {
        Registry::builtins()
    }
}

/// Where core/v1 and events.k8s.io/v1 events are stored (one storage, two schemas).
pub const EVENTS_STORAGE: &str = "core/events";

impl Registry {
    /// The built-in resources every server starts with.
    pub fn builtins() -> Self {
        let mut events_v1 = B::new("events.k8s.io", "v1", "events", "Event", true)
            .short(&["ev"])
            .fields(EVENT_FIELDS)
            .strategy(EventsV1Strategy)
            .0;
        events_v1.storage = EVENTS_STORAGE.into();
        events_v1.view = View::EventsV1;
        let defs = vec![
            B::new("", "v1", "namespaces", "Namespace", false)
                .short(&["ns"])
                .status()
                .fields(&["status.phase", "name"])
                .strategy(NamespaceStrategy)
                .done(),
            B::new("", "v1", "pods", "Pod", true)
                .short(&["po"])
                .all()
                .status()
                .returns_deleted()
                .fields(&[
                    "spec.nodeName",
                    "spec.restartPolicy",
                    "spec.schedulerName",
                    "spec.serviceAccountName",
                    "spec.hostNetwork",
                    "status.phase",
                    "status.podIP",
                    "status.nominatedNodeName",
                ])
                .strategy(PodStrategy)
                .done(),
            B::new("", "v1", "events", "Event", true)
                .short(&["ev"])
                .fields(EVENT_FIELDS)
                .strategy(CoreEventStrategy)
                .done(),
            // `ReturnDeletedObject`: the Service REST storage answers DELETE with the Service.
            B::new("", "v1", "services", "Service", true)
                .short(&["svc"])
                .all()
                .status()
                .returns_deleted()
                .strategy(ServiceStrategy)
                .done(),
            B::new("", "v1", "configmaps", "ConfigMap", true)
                .short(&["cm"])
                .strategy(ConfigMapStrategy)
                .done(),
            B::new("", "v1", "secrets", "Secret", true)
                .fields(&["type"])
                .strategy(SecretStrategy)
                .done(),
            B::new("", "v1", "resourcequotas", "ResourceQuota", true)
                .short(&["quota"])
                .status()
                .strategy(ResourceQuotaStrategy)
                .done(),
            B::new("", "v1", "serviceaccounts", "ServiceAccount", true)
                .short(&["sa"])
                .returns_deleted()
                .done(),
            B::new("", "v1", "nodes", "Node", false)
                .short(&["no"])
                .status()
                .returns_deleted()
                .fields(&["spec.unschedulable"])
                .strategy(NodeStrategy)
                .done(),
            B::new("apps", "v1", "deployments", "Deployment", true)
                .short(&["deploy"])
                .all()
                .status()
                .scale()
                .generation()
                .strategy(ReplicasStrategy)
                .done(),
            B::new("apps", "v1", "statefulsets", "StatefulSet", true)
                .short(&["sts"])
                .all()
                .status()
                .scale()
                .generation()
                .strategy(ReplicasStrategy)
                .done(),
            B::new("apps", "v1", "replicasets", "ReplicaSet", true)
                .short(&["rs"])
                .all()
                .status()
                .scale()
                .generation()
                .strategy(ReplicasStrategy)
                .done(),
            B::new("apps", "v1", "daemonsets", "DaemonSet", true)
                .short(&["ds"])
                .all()
                .status()
                .generation()
                .done(),
            B::new(
                "",
                "v1",
                "replicationcontrollers",
                "ReplicationController",
                true,
            )
            .short(&["rc"])
            .all()
            .status()
            .scale()
            .generation()
            .done(),
            B::new("", "v1", "componentstatuses", "ComponentStatus", false)
                .short(&["cs"])
                .done(),
            B::new("batch", "v1", "jobs", "Job", true)
                .all()
                .status()
                .generation()
                .strategy(JobStrategy)
                .done(),
            B::new("batch", "v1", "cronjobs", "CronJob", true)
                .short(&["cj"])
                .all()
                .status()
                .generation()
                .strategy(CronJobStrategy)
                .done(),
            B::new(
                "policy",
                "v1",
                "poddisruptionbudgets",
                "PodDisruptionBudget",
                true,
            )
            .short(&["pdb"])
            .status()
            .generation()
            .done(),
            B::new("networking.k8s.io", "v1", "ingresses", "Ingress", true)
                .short(&["ing"])
                .status()
                .generation()
                .strategy(IngressStrategy)
                .done(),
            B::new(
                "networking.k8s.io",
                "v1",
                "ingressclasses",
                "IngressClass",
                false,
            )
            .generation()
            .strategy(IngressClassStrategy)
            .done(),
            B::new(
                "networking.k8s.io",
                "v1",
                "networkpolicies",
                "NetworkPolicy",
                true,
            )
            .short(&["netpol"])
            .generation()
            .strategy(NetworkPolicyStrategy)
            .done(),
            B::new(
                "apiregistration.k8s.io",
                "v1",
                "apiservices",
                "APIService",
                false,
            )
            .categories(&["api-extensions"])
            .status()
            .done(),
            B::new(
                "certificates.k8s.io",
                "v1",
                "certificatesigningrequests",
                "CertificateSigningRequest",
                false,
            )
            .short(&["csr"])
            .status()
            .fields(&["spec.signerName"])
            .strategy(CertificateSigningRequestStrategy)
            .done(),
            B::new("coordination.k8s.io", "v1", "leases", "Lease", true)
                .conditional()
                .create_on_update()
                .strategy(LeaseStrategy)
                .done(),
            Arc::new(events_v1),
            B::new(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            )
            .short(&["crd", "crds"])
            .status()
            .generation()
            .conditional()
            .done(),
            B::new(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                "flowschemas",
                "FlowSchema",
                false,
            )
            .status()
            .generation()
            .done(),
            B::new(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                "prioritylevelconfigurations",
                "PriorityLevelConfiguration",
                false,
            )
            .status()
            .generation()
            .done(),
            B::new(
                "admissionregistration.k8s.io",
                "v1",
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                false,
            )
            .categories(&["api-extensions"])
            .generation()
            .strategy(WebhookConfigurationStrategy(WebhookKind::Validating))
            .done(),
            B::new(
                "admissionregistration.k8s.io",
                "v1",
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                false,
            )
            .categories(&["api-extensions"])
            .generation()
            .strategy(WebhookConfigurationStrategy(WebhookKind::Mutating))
            .done(),
            B::new("rbac.authorization.k8s.io", "v1", "roles", "Role", true)
                .strategy(RoleStrategy)
                .done(),
            B::new(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterroles",
                "ClusterRole",
                false,
            )
            .strategy(RoleStrategy)
            .done(),
            B::new(
                "rbac.authorization.k8s.io",
                "v1",
                "rolebindings",
                "RoleBinding",
                true,
            )
            .strategy(BindingStrategy)
            .done(),
            B::new(
                "rbac.authorization.k8s.io",
                "v1",
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
            )
            .strategy(BindingStrategy)
            .done(),
        ];
        Registry { defs }
    }

    /// Every definition, in registration order (built-ins first).
    pub fn all(&self) -> &[Arc<ResourceDef>] {
        &self.defs
    }

    /// The definition serving `plural` in `group/version`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    /// Whether any resource is served in `group/version` (core is always served).
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.version == version)
    }

    /// Group names in first-registration order, core (`""`) excluded.
    pub fn groups(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for d in &self.defs {
            if !d.group.is_empty() && !out.contains(&d.group) {
                out.push(d.group.clone());
            }
        }
        out
    }

    /// Versions served for a group, in registration order (the first is preferred).
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for d in self.defs.iter().filter(|d| d.group == group) {
            if !out.contains(&d.version) {
                out.push(d.version.clone());
            }
        }
        out
    }

    /// Definitions served in one group/version.
    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
        self.defs
            .iter()
            .filter(|d| d.group == group && d.version == version)
            .cloned()
            .collect()
    }

    /// Every definition reading or writing `storage`.
    pub fn by_storage(&self, storage: &str) -> Vec<Arc<ResourceDef>> {
        self.defs
            .iter()
            .filter(|d| d.storage == storage)
            .cloned()
            .collect()
    }

    /// Gives every version of `group`/`plural` the strategy `strategy` (how a layer above the
    /// generic store plugs in: [`Strategy`]).
    pub fn set_strategy(&mut self, group: &str, plural: &str, strategy: Arc<dyn Strategy>) {
        for d in self.defs.iter_mut() {
            if d.group == group && d.plural == plural {
                let mut def = (**d).clone();
                def.strategy = StrategyRef(Some(strategy.clone()));
                *d = Arc::new(def);
            }
        }
    }

    /// Adds (or replaces, by group/version/plural) definitions.
    pub fn upsert(&mut self, def: Arc<ResourceDef>) {
        if let Some(slot) = self
            .defs
            .iter_mut()
            .find(|d| d.group == def.group && d.version == def.version && d.plural == def.plural)
        {
            *slot = def;
        } else {
            self.defs.push(def);
        }
    }

    /// Removes every definition owned by the CRD named `crd_name`.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.defs
            .retain(|d| d.custom.as_ref().is_none_or(|c| c.crd_name != crd_name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_event_views_share_one_storage() {
        let r = Registry::builtins();
        let core = r.lookup("", "v1", "events").unwrap();
        let v1 = r.lookup("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(core.storage, v1.storage);
        assert_eq!(v1.view, View::EventsV1);
        assert_eq!(r.by_storage("core/events").len(), 2);
    }

    #[test]
    fn leases_need_a_resource_version_and_create_on_put() {
        let r = Registry::builtins();
        let l = r.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        assert!(!l.unconditional_update);
        assert!(l.create_on_update);
    }
}
