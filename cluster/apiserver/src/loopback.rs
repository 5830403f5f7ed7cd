//! # The loopback interface: how the controller manager and the node reach the server
//!
//! In a real cluster kube-controller-manager and the kubelet are separate programs. They reach
//! kube-apiserver the way every client does: over HTTPS, as an authenticated user
//! (`system:kube-controller-manager`, `system:node:<name>`), and every request they make goes
//! through authorization, admission (the webhooks included) and validation like anyone else's.
//! They never touch etcd.
//!
//! The embedded cluster keeps that seam with [`Loopback`]: a handle on one running server, for
//! one identified user, that speaks the API's verbs — `get` (or `get_metadata`, what a
//! metadata client reads), `list`, `watch`, `create`,
//! `update` (of an object or of a subresource such as `status`), `patch` and `delete` — in
//! process. It is what kube-apiserver calls its *loopback client*, without the bytes: objects
//! cross as `serde_json::Value`s instead of HTTP bodies, so a simulated node that reports the
//! phases of ten thousand pods costs the server no encoding or TLS. Everything else is the
//! request path of an HTTP client:
//!
//! ```text
//! Loopback::update(pods, "default", pod)            (as system:node:embedded-node)
//!   → authorization (RBAC, when enforced)  → admission (mutating webhooks, defaults and
//!   validation, validating webhooks)  → the generic store (resourceVersion precondition:
//!   409 Conflict when the object moved on)  → watches (every client sees the change)
//! ```
//!
//! What a loopback request skips, and why: API Priority and Fairness (a loopback user is
//! exempt, as kube-apiserver's `system:masters` loopback is), the request log and `/metrics`
//! (they count what came over the network, which is what tests and benchmarks measure of the
//! clients they drive), and injected faults ([`crate::filters::faults`]: they are aimed at the client
//! under test, not at the cluster's own components).
//!
//! ## Watching
//!
//! [`Loopback::watch`] follows one resource (or, for the garbage collector, every resource:
//! [`Loopback::watch_all`]) from a resourceVersion, typically the one a [`Loopback::list`]
//! answered with. [`Watch::next`] hands over every change since the last call, oldest first,
//! as the server's watch history holds them; when the history no longer reaches back that far
//! (compacted by its window or by a fault) it answers [`WatchError::Gone`], the 410 an
//! informer answers with a relist. Objects are shared with the store, not copied
//! ([`Object`]).
//!
//! Every object a loopback request reads or is answered holds its `managedFields` as the store
//! does, each field set folded into its JSON text (the server's `api::folded` module): the cluster's
//! components never look inside, and what they write back is folded already.
//!
//! ## Writing like a controller
//!
//! A loopback write is a client's write: conditional on the `metadata.resourceVersion` it
//! carries, so a component reads, decides and writes, and on `409 Conflict` reads again —
//! the optimistic concurrency every Kubernetes controller lives with. [`ApiError::is_conflict`]
//! and [`ApiError::is_not_found`] tell the usual outcomes apart.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use crate::admission::{self, Write};
use crate::api::query::{ListOptions, Query};
use crate::api::status::ApiError;
use crate::auth::rbac::{Attributes, UserInfo};
use crate::endpoints::Shared;
use crate::registry::generic::{self as verbs, DeleteOptions, PatchType, Target};
use crate::registry::resources::ResourceDef;
use crate::storage::store::{Change, ChangeType, Stored};

/// A resource as a loopback request names it: API group (`""` for core), version and plural
/// (`apps`, `v1`, `deployments`), kube's `GroupVersionResource`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource {
    /// API group, `""` for the core group.
    pub group: String,
    /// Version (`v1`).
    pub version: String,
    /// Plural name (`pods`).
    pub plural: String,
}

impl Resource {
    /// `group/version/plural`.
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Resource {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
        }
    }

    /// A core/v1 resource (`pods`, `nodes`, `configmaps`, ...).
    pub fn core(plural: &str) -> Self {
        Resource::new("", "v1", plural)
    }

    /// An apps/v1 resource (`deployments`, `replicasets`, ...).
    pub fn apps(plural: &str) -> Self {
        Resource::new("apps", "v1", plural)
    }

    /// A batch/v1 resource (`jobs`, `cronjobs`).
    pub fn batch(plural: &str) -> Self {
        Resource::new("batch", "v1", plural)
    }

    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// What discovery says of a served resource ([`Loopback::resources`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The resource, in its preferred (storage) version.
    pub resource: Resource,
    /// Its kind (`Pod`).
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

/// A stored object, shared with the store rather than copied: read it as a `&Value` (it
/// derefs to one), take an owned copy with [`Object::to_value`] to change and write it back.
#[derive(Clone)]
pub struct Object(Arc<Stored>);

impl Object {
    /// An owned copy of the object.
    pub fn to_value(&self) -> Value {
        self.0.value().clone()
    }

    /// The object's owned tree: moved out when this is the last reference, else copied.
    pub fn into_value(self) -> Value {
        Stored::into_value(self.0)
    }

    /// Runs `f` on the object without keeping a decoded tree it did not have (an object the
    /// server rests as bytes is decoded for `f` and dropped after): how a component that reads
    /// a few fields of every object (the garbage collector, its owner references) looks at
    /// them without holding them all decoded.
    pub fn with_value<R>(&self, f: impl FnOnce(&Value) -> R) -> R {
        self.0.with_value(f)
    }
}

impl std::ops::Deref for Object {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.0.value()
    }
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0.value(), f)
    }
}

/// A LIST's answer: the matching objects and the revision to watch from.
#[derive(Clone, Debug)]
pub struct ObjectList {
    /// The objects, in key order (namespace, then name).
    pub items: Vec<Object>,
    /// The list's resourceVersion: [`Loopback::watch`] from here misses nothing.
    pub resource_version: u64,
}

/// What a change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Removed.
    Deleted,
}

/// One change a [`Watch`] reports.
#[derive(Clone, Debug)]
pub struct WatchEvent {
    /// What happened.
    pub kind: EventType,
    /// The resource the object belongs to (for [`Loopback::watch_all`]; the watched one
    /// otherwise).
    pub resource: Resource,
    /// The object after the change; for `Deleted`, its last state.
    pub object: Object,
    /// The object before the change (`Modified` and `Deleted`).
    pub previous: Option<Object>,
    /// The revision the change produced.
    pub resource_version: u64,
}

/// Why a [`Watch`] has nothing more to say.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WatchError {
    /// The history no longer holds the revision the watch stood at: list again (410 Gone).
    #[error("too old resource version: {0}")]
    Gone(u64),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Closed,
}

/// Label and field selectors of a [`Loopback::list`], as a client's query would carry them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    /// `labelSelector` (`app=web,tier!=db`).
    pub label_selector: String,
    /// `fieldSelector` (`spec.nodeName=embedded-node`).
    pub field_selector: String,
}

impl ListParams {
    /// Objects whose labels match `selector`.
    pub fn labels(selector: &str) -> Self {
        ListParams {
            label_selector: selector.to_owned(),
            ..Default::default()
        }
    }

    /// Objects whose fields match `selector`.
    pub fn fields(selector: &str) -> Self {
        ListParams {
            field_selector: selector.to_owned(),
            ..Default::default()
        }
    }
}

/// The options of a DELETE: grace period, propagation policy and preconditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// `gracePeriodSeconds` (`Some(0)`: at once, as the kubelet finishes a pod's deletion).
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`: `Background`, `Foreground` or `Orphan`.
    pub propagation_policy: Option<String>,
    /// `preconditions.uid`: delete only this incarnation of the name.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only this version.
    pub resource_version: Option<String>,
}

/// A patch document and its type.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json` (RFC 7386).
    Merge(Value),
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic(Value),
    /// `application/json-patch+json` (RFC 6902).
    Json(Value),
}

/// One running server, as one user (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct Loopback {
    shared: Arc<Shared>,
    user: UserInfo,
    field_manager: String,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loopback")
            .field("user", &self.user.name)
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl Loopback {
    pub(crate) fn new(
        shared: Arc<Shared>,
        user: &str,
        groups: &[&str],
        field_manager: &str,
    ) -> Self {
        let mut info = shared.rbac.user(user);
        for g in groups {
            if !info.groups.iter().any(|have| have == g) {
                info.groups.push((*g).to_owned());
            }
        }
        Loopback {
            shared,
            user: info,
            field_manager: field_manager.to_owned(),
        }
    }

    /// The user requests are made as.
    pub fn user(&self) -> &str {
        &self.user.name
    }

    /// The groups of that user.
    pub fn groups(&self) -> &[String] {
        &self.user.groups
    }

    /// Cancelled when the server shuts down: a component's tasks end with it.
    pub fn shutdown(&self) -> tokio_util::sync::CancellationToken {
        self.shared.shutdown.clone()
    }

    /// The server's current revision (the newest resourceVersion written).
    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }

    /// Every resource the server serves, each once, in its storage version (what a garbage
    /// collector discovers to know what may own what), custom resources included.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.shared.store.read(|st| {
            let mut seen = std::collections::HashSet::new();
            st.registry
                .all()
                .iter()
                .filter(|d| !d.is_component_status() && seen.insert(d.storage.clone()))
                .map(|d| ResourceInfo {
                    resource: storage_resource(&st.registry, &d.storage)
                        .unwrap_or_else(|| resource_of(d)),
                    kind: d.kind.clone(),
                    namespaced: d.namespaced,
                })
                .collect()
        })
    }

    /// The resource whose objects have this `apiVersion` and `kind` (an owner reference's),
    /// if the server serves it.
    pub fn resource_for_kind(&self, api_version: &str, kind: &str) -> Option<ResourceInfo> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.shared.store.read(|st| {
            st.registry
                .in_group_version(group, version)
                .into_iter()
                .find(|d| d.kind == kind && !d.plural.contains('/'))
                .map(|d| ResourceInfo {
                    resource: resource_of(&d),
                    kind: d.kind.clone(),
                    namespaced: d.namespaced,
                })
        })
    }

    // -----------------------------------------------------------------------------------------
    // reads

    /// GET of one object (`namespace` is ignored for cluster-scoped resources).
    pub async fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let (target, obj) = self.read_one(resource, namespace, name)?;
        crate::apiextensions::conversion::answer_to_served(&self.shared.backend, &target.def, obj)
            .await
            .map(|served| served.into_folded_value(&target.def))
    }

    /// The GET both [`Loopback::get`] and [`Loopback::get_metadata`] make: the target, authorized,
    /// and the object as the store answers it.
    fn read_one(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<(Target, verbs::Served), ApiError> {
        let target = self.target(resource, namespace, Some(name), None)?;
        self.authorize("get", &target)?;
        let query = Query::default();
        let (_, obj) = self
            .shared
            .store
            .read(|st| verbs::get(st, &target, &query))?;
        Ok((target, obj))
    }

    /// GET of one object's metadata alone, as a metadata client reads it (`Accept:
    /// application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`): a `meta.k8s.io/v1`
    /// `PartialObjectMetadata` with the object's `metadata`. kube-controller-manager's garbage
    /// collector reads objects so (`getObject`, its metadata client); only the metadata is
    /// copied, not the object (an object the server rests as bytes is decoded for the copy
    /// and not kept decoded).
    pub async fn get_metadata(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let (target, obj) = self.read_one(resource, namespace, name)?;
        let def = &target.def;
        let as_stored = matches!(def.view, crate::registry::resources::View::Native)
            && def.custom.as_ref().is_none_or(|c| c.conversion.is_none());
        match obj {
            verbs::Served::Stored(s) if as_stored => {
                Ok(s.with_value(crate::endpoints::partial::metadata_of))
            }
            obj => {
                // Served in another shape or version than stored (a conversion webhook may
                // change labels and annotations): the object as served, then its metadata.
                let served = crate::apiextensions::conversion::answer_to_served(
                    &self.shared.backend,
                    def,
                    obj,
                )
                .await?;
                Ok(crate::endpoints::partial::metadata_of(
                    &served.into_folded_value(def),
                ))
            }
        }
    }

    /// LIST of a resource, in one namespace (`Some`) or all of them (`None`, or a
    /// cluster-scoped resource), filtered by `params`.
    pub async fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList, ApiError> {
        let target = self.target(resource, namespace.unwrap_or_default(), None, None)?;
        self.authorize("list", &target)?;
        let opts = ListOptions {
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
            ..Default::default()
        };
        let result = self
            .shared
            .store
            .read(|st| verbs::list(st, &target, &opts))?;
        Ok(ObjectList {
            items: result.items.into_iter().map(Object).collect(),
            resource_version: result.resource_version,
        })
    }

    /// A watch of one resource (in `namespace`, or everywhere), starting after `since`.
    pub fn watch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        since: u64,
    ) -> Result<Watch, ApiError> {
        let target = self.target(resource, namespace.unwrap_or_default(), None, None)?;
        self.authorize("watch", &target)?;
        Ok(Watch {
            shared: self.shared.clone(),
            rx: self.shared.store.subscribe(),
            seen: since,
            filter: Some(Filter {
                storage: target.def.storage.clone(),
                namespace: target.namespace.clone().filter(|_| target.def.namespaced),
                resource: resource.clone(),
            }),
        })
    }

    /// A watch of every resource at once, starting after `since` (the garbage collector's
    /// view: kube's collector runs one metadata informer per discovered resource). Needs
    /// `watch` on `*` when RBAC is enforced.
    pub fn watch_all(&self, since: u64) -> Result<Watch, ApiError> {
        if self.shared.rbac.enforced() {
            let attrs = Attributes {
                verb: "watch".into(),
                group: "*".into(),
                resource: "*".into(),
                resource_request: true,
                ..Default::default()
            };
            self.shared
                .rbac
                .check(&self.shared.store, &self.user, &attrs)?;
        }
        Ok(Watch {
            shared: self.shared.clone(),
            rx: self.shared.store.subscribe(),
            seen: since,
            filter: None,
        })
    }

    // -----------------------------------------------------------------------------------------
    // writes

    /// POST of a new object into `namespace`; answers the object as stored.
    pub async fn create(
        &self,
        resource: &Resource,
        namespace: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let target = self.target(resource, namespace, None, None)?;
        self.write("create", &target, Write::Create(object)).await
    }

    /// POST to a subresource of an object: the actions `pods/NAME/binding` (a scheduler's
    /// assignment: a core/v1 Binding whose `target.name` is the node) and
    /// `pods/NAME/eviction` (a policy/v1 Eviction), answered as over HTTP (a `Success`
    /// Status), and `serviceaccounts/NAME/token` (a TokenRequest, answered with the token in
    /// its `status`, as a kubelet asks for a pod's projected token); other subresources are
    /// not created (405).
    pub async fn create_subresource(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        let target = self.target(resource, namespace, Some(name), Some(subresource))?;
        let is_pod_action = target.def.group.is_empty()
            && target.def.plural == "pods"
            && matches!(subresource, "binding" | "eviction");
        if target.def.group.is_empty()
            && target.def.plural == "serviceaccounts"
            && subresource == "token"
        {
            self.authorize("create", &target)?;
            let (_, answer) = self.shared.store.read(|st| {
                crate::registry::core::pod_actions::token_request(
                    st,
                    &self.shared.authn.tokens,
                    namespace,
                    name,
                    &object,
                )
            })?;
            return Ok(answer);
        }
        if is_pod_action {
            self.authorize("create", &target)?;
            let (_, answer) =
                crate::endpoints::handlers::pod_action(&self.shared, &target, &object)?;
            return Ok(answer);
        }
        self.write("create", &target, Write::Create(object)).await
    }

    /// PUT of an object (its `metadata.name` and `metadata.resourceVersion` say which and which
    /// version: 409 when the stored one moved on).
    pub async fn update(
        &self,
        resource: &Resource,
        namespace: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_subresource(resource, namespace, None, object)
            .await
    }

    /// PUT of an object's `status`.
    pub async fn update_status(
        &self,
        resource: &Resource,
        namespace: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.update_subresource(resource, namespace, Some("status"), object)
            .await
    }

    /// PUT of an object or of one of its subresources (`status`, `scale`, ...).
    pub async fn update_subresource(
        &self,
        resource: &Resource,
        namespace: &str,
        subresource: Option<&str>,
        object: Value,
    ) -> Result<Value, ApiError> {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let target = self.target(resource, namespace, Some(&name), subresource)?;
        self.write("update", &target, Write::Update(object)).await
    }

    /// PATCH of an object or of a subresource.
    pub async fn patch(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: Option<&str>,
        patch: Patch,
    ) -> Result<Value, ApiError> {
        let target = self.target(resource, namespace, Some(name), subresource)?;
        let (ty, body) = match patch {
            Patch::Merge(v) => (PatchType::Merge, v),
            Patch::Strategic(v) => (PatchType::Strategic, v),
            Patch::Json(v) => (PatchType::Json, v),
        };
        self.write("patch", &target, Write::Patch(ty, body)).await
    }

    /// DELETE of one object; answers what the server answers (the object while it waits for
    /// finalizers or a grace period, else a Success Status or the deleted object).
    pub async fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Value, ApiError> {
        let target = self.target(resource, namespace, Some(name), None)?;
        let opts = DeleteOptions {
            grace_period: params.grace_period_seconds,
            propagation: params.propagation_policy.clone(),
            precondition_uid: params.uid.clone(),
            precondition_rv: params.resource_version.clone(),
            dry_run: false,
        };
        self.write("delete", &target, Write::Delete(opts)).await
    }

    // -----------------------------------------------------------------------------------------

    /// The target a request names, resolved as the HTTP router resolves a URL.
    fn target(
        &self,
        resource: &Resource,
        namespace: &str,
        name: Option<&str>,
        subresource: Option<&str>,
    ) -> Result<Target, ApiError> {
        let def = self
            .shared
            .store
            .read(|s| {
                s.registry
                    .lookup(&resource.group, &resource.version, &resource.plural)
            })
            .ok_or_else(|| {
                ApiError::not_found_message(format!(
                    "the server could not find the requested resource ({resource})"
                ))
            })?;
        let namespace = (def.namespaced && !namespace.is_empty()).then(|| namespace.to_owned());
        if def.namespaced && namespace.is_none() && name.is_some() {
            return Err(ApiError::bad_request(format!(
                "{resource} {:?}: a namespaced object needs a namespace",
                name.unwrap_or_default()
            )));
        }
        Ok(Target {
            def,
            namespace,
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
        })
    }

    fn authorize(&self, verb: &str, target: &Target) -> Result<(), ApiError> {
        if !self.shared.rbac.enforced() {
            return Ok(());
        }
        self.shared.rbac.check(
            &self.shared.store,
            &self.user,
            &target.attributes(verb, None),
        )
    }

    async fn write(&self, verb: &str, target: &Target, write: Write) -> Result<Value, ApiError> {
        self.authorize(verb, target)?;
        let mut query = Query::parse(None).with_user_agent(&self.field_manager);
        if self.shared.rbac.enforced() {
            query = query.with_requester(self.user.clone());
        }
        let (_, answer) =
            admission::write(&self.shared.backend, target, &self.user, write, &query).await?;
        Ok(answer.into_folded_value(&target.def))
    }
}

/// The `Resource` of a definition.
fn resource_of(def: &ResourceDef) -> Resource {
    Resource::new(&def.group, &def.version, &def.plural)
}

/// The resource a storage key is served as in its storage version: the definition whose
/// objects are stored in that version (a CRD's storage version; the first view of a shared
/// storage such as events).
fn storage_resource(
    registry: &crate::registry::resources::Registry,
    storage: &str,
) -> Option<Resource> {
    let defs = registry.by_storage(storage);
    defs.iter()
        .find(|d| {
            d.custom
                .as_ref()
                .is_some_and(|c| c.storage_version == d.version)
        })
        .or_else(|| defs.first())
        .map(|d| resource_of(d))
}

/// What a [`Watch`] of one resource keeps.
struct Filter {
    storage: String,
    namespace: Option<String>,
    resource: Resource,
}

/// A watch over the loopback interface (see the module docs).
pub struct Watch {
    shared: Arc<Shared>,
    rx: watch::Receiver<u64>,
    seen: u64,
    filter: Option<Filter>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// The revision the watch has reported up to.
    pub fn resource_version(&self) -> u64 {
        self.seen
    }

    /// The changes since the last call (waiting until there is at least one), oldest first;
    /// [`WatchError::Gone`] once the history was compacted past the watch's revision (list
    /// again and watch from the list's revision), [`WatchError::Closed`] at shutdown.
    pub async fn next(&mut self) -> Result<Vec<WatchEvent>, WatchError> {
        loop {
            let events = self.poll()?;
            if !events.is_empty() {
                return Ok(events);
            }
            tokio::select! {
                changed = self.rx.changed() => {
                    if changed.is_err() {
                        return Err(WatchError::Closed);
                    }
                }
                () = self.shared.shutdown.cancelled() => return Err(WatchError::Closed),
            }
        }
    }

    /// The changes since the last call, without waiting (possibly none).
    pub fn poll(&mut self) -> Result<Vec<WatchEvent>, WatchError> {
        let seen = self.seen;
        let (changes, now) = self
            .shared
            .store
            .read(|s| (s.changes_since(seen), s.resource_version()));
        let changes = changes.map_err(|_| WatchError::Gone(seen))?;
        self.seen = changes.last().map_or(now.max(seen), |c| c.rv.max(seen));
        let registry = match self.filter {
            None => Some(self.shared.store.read(|s| s.registry.clone())),
            Some(_) => None,
        };
        Ok(changes
            .into_iter()
            .filter_map(|c| self.event(&c, registry.as_ref()))
            .collect())
    }

    fn event(
        &self,
        c: &Change,
        registry: Option<&crate::registry::resources::Registry>,
    ) -> Option<WatchEvent> {
        let resource = match (&self.filter, registry) {
            (Some(f), _) => {
                if c.storage != f.storage {
                    return None;
                }
                if let Some(ns) = &f.namespace
                    && crate::api::object_meta::meta_str(&c.object, "namespace") != ns
                {
                    return None;
                }
                f.resource.clone()
            }
            (None, Some(registry)) => storage_resource(registry, &c.storage)?,
            (None, None) => return None,
        };
        Some(WatchEvent {
            kind: match c.kind {
                ChangeType::Added => EventType::Added,
                ChangeType::Modified => EventType::Modified,
                ChangeType::Deleted => EventType::Deleted,
            },
            resource,
            object: Object(c.object.clone()),
            previous: c.prev.clone().map(Object),
            resource_version: c.rv,
        })
    }
}
