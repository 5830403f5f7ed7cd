//! The generic store's write rules, and the [`Strategy`] through which each resource adds its own.
//!
//! kube-apiserver serves every resource with one generic store
//! (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`) and gives it, per
//! resource, a *strategy* (`pkg/registry/<group>/<resource>/strategy.go`: "podStrategy implements
//! behavior for Pods") whose `PrepareForCreate`, `PrepareForUpdate`, `Validate`, ... the store
//! calls at fixed points of a write. This module is both halves' meeting point: the rules every
//! resource shares (below) and the [`Strategy`] trait, whose hooks the generic store
//! ([`crate::registry::generic`]) calls. A resource's definition in the table
//! ([`crate::registry::resources`]) carries its strategy; the built-in ones live one file per
//! resource under `registry/<group>/` (`core/pods.rs`, `apps/replicas.rs`, `rbac/roles.rs`,
//! ...), custom resources' and CRDs' in [`crate::apiextensions`]. Every hook does nothing by
//! default, so a resource without a strategy gets the shared rules alone.
//!
//! The shared rules:
//!
//! * **create** — name from `generateName`, the name rule of the kind (422,
//!   [`Strategy::validate_name`]), namespace filled from the URL (400 on mismatch) and required
//!   to exist (404) and not be terminating (403), `uid`, `creationTimestamp`, `generation: 1` for
//!   kinds that track it, then the kind's [`Strategy::prepare_for_create`] (by default the status
//!   reset of kinds with a status subresource: a client cannot create an object with a made-up
//!   status).
//! * **update** — identity (`uid`, `creationTimestamp`, `generation`, `deletionTimestamp`) copied
//!   from the stored object; optimistic concurrency (409 on a stale `resourceVersion`, 422 when a
//!   kind demands one and none was sent); the **status subresource split**: the main endpoint
//!   keeps the stored `.status` and takes everything else from the request, while `/status` keeps
//!   everything *but* `.status` from the stored object (a subresource of the kind's own is merged
//!   by [`Strategy::prepare_subresource_update`]); and the `generation` bump whenever the spec
//!   part changed.
//! * **finalizers** — no new finalizer may be added once an object is being deleted; an update
//!   that removes the last finalizer of an object with a `deletionTimestamp` deletes it
//!   ([`should_delete`]).
//!
//! The order in which the generic store calls the hooks, for a create (POST, a PUT that
//! creates, an apply on a missing object):
//!
//! ```text
//! validate_create_request → decode (set_defaults) → shared create rules (validate_name,
//! prepare_for_create) → begin_create → validate → field_errors (with the metadata rules)
//! → authorize_write → before_store → stored
//! ```
//!
//! for an update (PUT, PATCH, apply, `/status`, `/scale`):
//!
//! ```text
//! update_subresource? → decode (set_defaults) → shared update rules
//! (prepare_subresource_update) → begin_update → validate_subresource_update → validate
//! → field_errors → authorize_write → before_store → stored (or removed: should_delete)
//! ```
//!
//! and for a DELETE:
//!
//! ```text
//! preconditions → check_delete → graceful_delete_period, holds_deletion → either removed
//! (after_remove) or marked (prepare_for_delete, stored, after_delete_marked)
//! ```

use apimachinery::validation::{self as v, FieldError};
use serde_json::{Value, json};

use crate::api::json_order;
use crate::api::object_meta::{self as meta, finalizers_of, meta_str};
use crate::api::status::{self, ApiError, Cause};
use crate::api::user::UserInfo;
use crate::registry::State;
use crate::registry::core::events;
use crate::registry::generic::{Answer, Target, WriteOptions};
use crate::registry::resources::{ResourceDef, View};
use crate::registry::typed;
use crate::registry::validation;
use crate::storage::store::rv_of;

/// What one resource adds to the generic store's create, update and delete, beyond the rules
/// every resource shares (the rest of this module): kube's `RESTCreateStrategy`,
/// `RESTUpdateStrategy`, `RESTDeleteStrategy`, `RESTGracefulDeleteStrategy` and the store's
/// `BeginCreate`/`BeginUpdate`/`AfterDelete` hooks. A resource's definition carries its strategy
/// ([`crate::registry::resources::ResourceDef::strategy`]); a strategy is also how a layer above
/// the generic store (apiextensions: CRDs and their custom resources) plugs in without the store
/// knowing it. Every hook does nothing by default (the default [`Strategy::validate_name`] and
/// [`Strategy::prepare_for_create`] are the rules most kinds share); the module docs show when
/// each one runs.
pub trait Strategy: Send + Sync + std::fmt::Debug {
    /// Fills the kind's defaults into a decoded body, on every create, update, patch and apply:
    /// the `SetDefaults_<Kind>` functions kube-apiserver's scheme runs whenever it decodes a
    /// body (`pkg/apis/<group>/v1/defaults.go`).
    fn set_defaults(&self, _obj: &mut Value) {}

    /// Checks a create's body in the version it was sent in, before it is decoded into the
    /// stored shape: events.k8s.io/v1's stricter `ValidateEventCreate` (kube's event strategy
    /// validates by the request's group version).
    fn validate_create_request(&self, _def: &ResourceDef, _body: &Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// The name rule of the kind, as the messages of `ValidateObjectMeta`'s name function:
    /// DNS-1123 subdomain unless the kind says otherwise (`ValidateNamespaceName`,
    /// `ValidateServiceName`, `ValidateRBACName`, ...).
    fn validate_name(&self, name: &str) -> Vec<String> {
        v::is_dns1123_subdomain(name)
    }

    /// `PrepareForCreate`: what the server sets or clears on a new object once its name,
    /// `uid` and `creationTimestamp` are known. By default a kind with a status subresource
    /// starts with no status ([`clear_status`]), as most kube strategies' `PrepareForCreate`
    /// do; a strategy that overrides this decides its status itself.
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        clear_status(def, obj);
    }

    /// Whether this kind's writes may be computed outside the store's lock: true unless one of
    /// the hooks that get the stored objects ([`Strategy::begin_create`],
    /// [`Strategy::begin_update`], [`Strategy::authorize_write`], [`Strategy::before_store`])
    /// reads or changes them. A strategy that overrides one of those returns `false` here, and
    /// its creates and updates run wholly under the lock; for the others the validation,
    /// defaults and managed-fields record run outside it, against the stored object as read,
    /// and the result is stored with a compare-and-swap ([`crate::registry::generic`],
    /// "Outside the lock").
    fn store_free_writes(&self) -> bool {
        true
    }

    /// The store's `BeginCreate`: runs under the store's lock with the stored objects at hand,
    /// after [`Strategy::prepare_for_create`] (a Service's cluster IP and node ports are
    /// allocated here, from the addresses the stored Services hold).
    fn begin_create(&self, _st: &State, _obj: &mut Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// A PUT on a subresource the resource serves with a REST storage of its own rather than
    /// the generic update (the namespace's `FinalizeREST`): its answer, or `None` when the
    /// resource has no such subresource by that name.
    fn update_subresource(
        &self,
        _st: &mut State,
        _target: &Target,
        _subresource: &str,
        _body: &Value,
        _opts: &WriteOptions,
    ) -> Option<Result<Answer, ApiError>> {
        None
    }

    /// The `PrepareForUpdate` of a subresource strategy of the kind's own: what an update
    /// through `subresource` takes from the request (`new`) and what it keeps of the stored
    /// object (`old`), as `podEphemeralContainersStrategy` or `csrApprovalStrategy` do. `None`:
    /// not one of the kind's subresources, the main endpoint's rules apply (`/status` is the
    /// shared rule's).
    fn prepare_subresource_update(
        &self,
        _subresource: &str,
        _old: &Value,
        _new: &Value,
    ) -> Option<Value> {
        None
    }

    /// The store's `BeginUpdate`: runs under the store's lock after the shared update rules
    /// (a Service keeps the cluster IP and node ports the client left out, and gets new ones
    /// for new ports or a new type).
    fn begin_update(&self, _st: &State, _old: &Value, _obj: &mut Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// The `ValidateUpdate` of a subresource strategy of the kind's own (see
    /// [`Strategy::prepare_subresource_update`]), reported as one 422 of its own.
    fn validate_subresource_update(
        &self,
        _subresource: &str,
        _new: &Value,
        _old: &Value,
    ) -> Vec<FieldError> {
        vec![]
    }

    /// Validates (and, as a custom resource's schema does, defaults and prunes) an object
    /// about to be created (`old` is `None`) or updated; `strict` is `fieldValidation=Strict`.
    /// Its error is the answer as it stands (a 400 for a field Go's decoding refuses, or a 422
    /// of the kind's own), before the metadata rules are checked.
    fn validate(
        &self,
        _def: &ResourceDef,
        _obj: &mut Value,
        _old: Option<&Value>,
        _strict: bool,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// `Validate` (`old` is `None`) and `ValidateUpdate`: the kind's own field rules
    /// (`pkg/apis/<group>/validation`), reported in one 422 after the metadata rules every
    /// object shares ([`crate::registry::validation::validate_object`]).
    fn field_errors(
        &self,
        _def: &ResourceDef,
        _obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        vec![]
    }

    /// Checks a write by an identified user (RBAC enforced) beyond the authorizer's verb
    /// check, under the store's lock: RBAC's roles and bindings may only grant what the user
    /// holds (`pkg/registry/rbac/*/policybased/storage.go`, `ConfirmNoEscalation`).
    fn authorize_write(
        &self,
        _st: &State,
        _def: &ResourceDef,
        _user: &UserInfo,
        _obj: &Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Runs under the store's lock once a create or update has been decided, before it is
    /// stored (or, with `dry_run`, instead of storing it): a CRD is established here.
    fn before_store(
        &self,
        _st: &mut State,
        _obj: &mut Value,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Refuses a DELETE before anything changes (after the client's preconditions): the
    /// namespaces that may never go (kube's `NamespaceLifecycle` admission).
    fn check_delete(&self, _def: &ResourceDef, _name: &str, _obj: &Value) -> Result<(), ApiError> {
        Ok(())
    }

    /// `CheckGracefulDelete`: the grace period of a DELETE (`requested` is the client's
    /// `gracePeriodSeconds`); 0 deletes at once unless finalizers hold the object.
    fn graceful_delete_period(&self, _obj: &Value, _requested: Option<i64>) -> i64 {
        0
    }

    /// Whether something other than `metadata.finalizers` holds a deleted object: a
    /// namespace's `spec.finalizers`.
    fn holds_deletion(&self, _obj: &Value) -> bool {
        false
    }

    /// Whether a deleted object's grace period has run out ([`should_delete`]): a pod waits
    /// for its kubelet unless the period is zero.
    fn grace_period_over(&self, _obj: &Value) -> bool {
        true
    }

    /// What marking an object for deletion (setting its `deletionTimestamp`) changes besides:
    /// a namespace turns `Terminating`.
    fn prepare_for_delete(&self, _obj: &mut Value) {}

    /// Runs under the store's lock once an object marked for deletion is stored: a
    /// terminating namespace's contents are deleted (the namespace controller's work, done at
    /// once here). The DELETE answers with the object as it then is, or as marked if it went.
    fn after_delete_marked(&self, _st: &mut State, _obj: &Value) {}

    /// Runs under the store's lock after an object was removed: a CRD's custom resources go
    /// with it.
    fn after_remove(&self, _st: &mut State, _removed: &Value) {}
}

/// The strategy of a resource that has none of its own: every hook's default.
#[derive(Debug, Default)]
pub struct GenericStrategy;

impl Strategy for GenericStrategy {}

/// The [`Strategy::prepare_for_create`] most kinds share: a kind with a status subresource
/// starts with no `.status`.
pub fn clear_status(def: &ResourceDef, obj: &mut Value) {
    if def.status_subresource
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
}

/// The stored object with the request's `.status` and nothing else of it: what an update
/// through `/status` keeps (a subresource that writes status, such as a CSR's `/approval`, uses
/// it too).
pub fn take_status(old: &Value, new: &Value) -> Value {
    with_status(old, new.get("status").cloned())
}

/// A copy of `old` with `status` as its status (none: without one). The old status is not
/// copied only to be replaced: a status write's copy of a pod is mostly its status.
fn with_status(old: &Value, status: Option<Value>) -> Value {
    let Some(fields) = old.as_object() else {
        return old.clone();
    };
    let mut r: serde_json::Map<String, Value> = fields
        .iter()
        .filter(|(k, _)| k.as_str() != "status")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(s) = status {
        r.insert("status".into(), s);
    }
    Value::Object(r)
}

/// A request body as the storage shape (events.k8s.io/v1 bodies are renamed to core/v1),
/// with a 400 when it is not an object of this resource's kind.
pub fn intake(def: &ResourceDef, body: Value) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    }
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && av != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            def.kind
        )));
    }
    // Built-in kinds are typed on the real server: a `metadata`, `spec` or `status` that is not
    // an object fails decoding there, so it does here (custom resources meet their schema).
    if def.custom.is_none() {
        for field in ["metadata", "spec", "status"] {
            if let Some(v) = body.get(field).filter(|v| !v.is_object() && !v.is_null()) {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go struct field {}.{field} of type object",
                    json_type(v),
                    def.kind
                )));
            }
        }
    }
    // Fields of the wrong JSON type fail the real server's typed decoding ([`crate::registry::typed`]).
    if let Some(e) = typed::decode_error(def, &body) {
        return Err(typed::body_error(def, &e));
    }
    let mut obj = match def.view {
        View::EventsV1 => events::from_events_v1(&body),
        View::Native => body,
    };
    if obj.get("metadata").is_none_or(|m| !m.is_object())
        && let Some(m) = obj.as_object_mut()
    {
        m.insert("metadata".into(), json!({}));
    }
    if def.view == View::Native
        && let Some(m) = obj.as_object_mut()
    {
        m.insert("apiVersion".into(), Value::String(def.api_version()));
        m.insert("kind".into(), Value::String(def.kind.clone()));
    }
    def.strategy.get().set_defaults(&mut obj);
    crate::api::folded::fold(&mut obj);
    Ok(obj)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A stored object as this definition serves it, its field sets unfolded
/// ([`crate::api::folded`]).
pub fn present(def: &ResourceDef, stored: &Value) -> Value {
    let mut shown = present_folded(def, stored);
    crate::api::folded::unfold(&mut shown);
    shown
}

/// [`present`] without unfolding the field sets (what [`Presented`] serializes from, and what
/// the loopback clients read).
pub fn present_folded(def: &ResourceDef, stored: &Value) -> Value {
    match def.view {
        View::EventsV1 => events::to_events_v1(stored),
        // A CRD with a conversion webhook: the object keeps the version it is stored in, and
        // is converted to the served one on its way out ([`crate::apiextensions::conversion`]).
        View::Native if def.custom.as_ref().is_some_and(|c| c.conversion.is_some()) => {
            stored.clone()
        }
        View::Native => {
            let mut o = stored.clone();
            if let Some(m) = o.as_object_mut() {
                m.insert("apiVersion".into(), Value::String(def.api_version()));
                m.insert("kind".into(), Value::String(def.kind.clone()));
            }
            o
        }
    }
}

/// A stored object as [`present`] serves it, serialized straight from the stored value: the
/// same bytes as `serde_json::to_vec(&def.ordered(&present(def, stored)))` (the
/// byte layout of [`crate::api::json_order`]) without first copying the object to set `apiVersion`
/// and `kind`. Watch events encode every change this way once, for all their watchers.
pub struct Presented<'a> {
    def: &'a ResourceDef,
    stored: &'a Value,
    list_item: bool,
}

impl<'a> Presented<'a> {
    /// The stored object `stored` of `def`, for serializing.
    pub fn new(def: &'a ResourceDef, stored: &'a Value) -> Self {
        Presented {
            def,
            stored,
            list_item: false,
        }
    }

    /// The same object as an item of a list: a built-in kind's item carries no `kind` and
    /// `apiVersion` (a typed list's items leave their `TypeMeta` out, as kube-apiserver writes
    /// them); a custom resource's item keeps both (unstructured items are whole objects).
    pub fn list_item(def: &'a ResourceDef, stored: &'a Value) -> Self {
        Presented {
            def,
            stored,
            list_item: true,
        }
    }
}

impl serde::Serialize for Presented<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let converted = self.def.custom.as_ref().map(|c| c.conversion.is_some());
        let plain_native = self.def.view == View::Native && converted != Some(true);
        let untyped_item = self.list_item && self.def.custom.is_none();
        let Some(fields) = self.stored.as_object().filter(|_| plain_native) else {
            let served = present_folded(self.def, self.stored);
            if untyped_item && let Some(o) = served.as_object() {
                let (kind, api_version) = (&self.def.kind, self.def.api_version());
                return crate::api::json_order::list_item(s, o, kind, &api_version);
            }
            return serde::Serialize::serialize(&self.def.ordered(&served), s);
        };
        if untyped_item {
            return crate::api::json_order::list_item(
                s,
                fields,
                &self.def.kind,
                &self.def.api_version(),
            );
        }
        let api_version = Value::String(self.def.api_version());
        let kind = Value::String(self.def.kind.clone());
        let overrides = [("apiVersion", &api_version), ("kind", &kind)];
        if self.def.custom.is_some() {
            return sorted_with(s, fields, &overrides);
        }
        json_order::object(s, fields, &overrides)
    }
}

/// A custom resource's top level with `overrides` in their sorted place among the stored
/// fields (custom resources are unstructured: every level sorted, as on a real server).
fn sorted_with<S: serde::Serializer>(
    s: S,
    fields: &serde_json::Map<String, Value>,
    overrides: &[(&str, &Value)],
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let added = overrides
        .iter()
        .filter(|(key, _)| !fields.contains_key(*key))
        .count();
    let mut set = overrides.iter().copied().peekable();
    let mut map = s.serialize_map(Some(fields.len() + added))?;
    for (k, v) in fields {
        while let Some((key, value)) = set.next_if(|(key, _)| *key < k.as_str()) {
            map.serialize_entry(key, value)?;
        }
        match set.next_if(|(key, _)| *key == k.as_str()) {
            Some((key, value)) => map.serialize_entry(key, value)?,
            None if k == "metadata" => {
                map.serialize_entry(k, &crate::api::folded::SortedMeta(v))?
            }
            None => map.serialize_entry(k, v)?,
        }
    }
    for (key, value) in set {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

fn meta_mut(obj: &mut Value) -> Result<&mut serde_json::Map<String, Value>, ApiError> {
    if let Some(o) = obj.as_object_mut()
        && !o.get("metadata").is_some_and(Value::is_object)
    {
        o.insert("metadata".into(), json!({}));
    }
    obj.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApiError::bad_request("the request body must be a JSON or YAML object"))
}

fn check_namespace(
    def: &ResourceDef,
    obj: &mut Value,
    url_ns: Option<&str>,
) -> Result<(), ApiError> {
    let m = meta_mut(obj)?;
    if !def.namespaced {
        m.remove("namespace");
        return Ok(());
    }
    let body_ns = m
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let url_ns = url_ns.unwrap_or_default();
    if body_ns.is_empty() {
        m.insert("namespace".into(), Value::String(url_ns.to_owned()));
    } else if body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// Prepares a new object for storage (see the module docs). The caller checks existence.
pub fn prepare_create(
    st: &State,
    def: &ResourceDef,
    mut obj: Value,
    url_ns: Option<&str>,
) -> Result<Value, ApiError> {
    check_namespace(def, &mut obj, url_ns)?;
    let name = meta_str(&obj, "name").to_owned();
    let generate = meta_str(&obj, "generateName").to_owned();
    let name = if name.is_empty() {
        if generate.is_empty() {
            return Err(ApiError::invalid(
                &def.kind,
                &def.group,
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )],
            ));
        }
        meta::generate_name(&generate)
    } else {
        name
    };
    validation::check(def, &name, validation::validate_name(def, &name))?;
    if !meta_str(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    let ns = meta_str(&obj, "namespace").to_owned();
    if def.namespaced {
        match st.get("core/namespaces", "", &ns) {
            None => return Err(ApiError::not_found("namespaces", "", &ns)),
            Some(n) if !meta_str(n, "deletionTimestamp").is_empty() => {
                let mut e = ApiError::forbidden(
                    &def.plural,
                    &def.group,
                    &name,
                    &format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    ),
                );
                if let Some(d) = e.details.as_mut() {
                    d["causes"] = json!([{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                        "message": format!("namespace {ns} is being terminated")}]);
                }
                e.message = format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    status::qualified(&def.plural, &def.group)
                );
                return Err(e);
            }
            Some(_) => {}
        }
    }
    check_finalizers(def, &obj, None)?;
    let m = meta_mut(&mut obj)?;
    m.insert("name".into(), Value::String(name));
    m.insert("uid".into(), Value::String(meta::new_uid()));
    m.insert("creationTimestamp".into(), Value::String(meta::now_time()));
    for f in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        m.remove(f);
    }
    if def.tracks_generation || def.custom.is_some() {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    def.strategy.get().prepare_for_create(def, &mut obj);
    Ok(obj)
}

fn check_finalizers(def: &ResourceDef, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let fins = finalizers_of(new);
    let name = meta_str(new, "name");
    if let Some(old) = old
        && !meta_str(old, "deletionTimestamp").is_empty()
    {
        let before = finalizers_of(old);
        if let Some(added) = fins.iter().find(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                &def.kind,
                &def.group,
                name,
                vec![Cause::new(
                    "FieldValueForbidden",
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                    ),
                )],
            ));
        }
    }
    Ok(())
}

/// Merges a requested update with the stored object (see the module docs) and checks
/// optimistic concurrency. `subresource` is the one the update came through (`None` for the
/// object itself). Returns the object to store.
pub fn prepare_update(
    def: &ResourceDef,
    old: &Value,
    mut new: Value,
    url_ns: Option<&str>,
    url_name: &str,
    subresource: Option<&str>,
) -> Result<Value, ApiError> {
    let body_name = meta_str(&new, "name").to_owned();
    if body_name != url_name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
        )));
    }
    check_namespace(def, &mut new, url_ns)?;
    let sent_rv = meta_str(&new, "resourceVersion").to_owned();
    if sent_rv.is_empty() {
        if !def.unconditional_update {
            return Err(ApiError::invalid(
                &def.kind,
                &def.group,
                url_name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                )],
            ));
        }
    } else if sent_rv.parse::<u64>().ok() != Some(rv_of(old)) {
        return Err(ApiError::conflict(&def.plural, &def.group, url_name));
    }
    let sent_uid = meta_str(&new, "uid").to_owned();
    if !sent_uid.is_empty() && sent_uid != meta_str(old, "uid") {
        return Err(ApiError::invalid(
            &def.kind,
            &def.group,
            url_name,
            vec![Cause::new(
                "FieldValueInvalid",
                "metadata.uid",
                format!("Invalid value: \"{sent_uid}\": field is immutable"),
            )],
        ));
    }
    // The main endpoint's rules, unless `/status` or a subresource of the kind's own writes.
    let merged = match subresource {
        // The status is moved over from the request, not copied.
        Some("status") => Some(with_status(
            old,
            new.as_object_mut().and_then(|o| o.remove("status")),
        )),
        Some(sub) => def
            .strategy
            .get()
            .prepare_subresource_update(sub, old, &new),
        None => None,
    };
    let mut result = match merged {
        Some(r) => r,
        None => {
            let mut r = new;
            if def.status_subresource
                && let Some(o) = r.as_object_mut()
            {
                match old.get("status") {
                    Some(s) => {
                        o.insert("status".into(), s.clone());
                    }
                    None => {
                        o.remove("status");
                    }
                }
            }
            check_finalizers(def, &r, Some(old))?;
            r
        }
    };
    let no_meta = serde_json::Map::new();
    let old_meta = old["metadata"].as_object().unwrap_or(&no_meta);
    let m = meta_mut(&mut result)?;
    for f in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "resourceVersion",
    ] {
        match old_meta.get(f) {
            Some(v) => {
                m.insert(f.into(), v.clone());
            }
            None => {
                m.remove(f);
            }
        }
    }
    m.remove("selfLink");
    // A write that leaves managedFields out keeps the recorded ownership (an explicit empty
    // list would reset it).
    if !m.contains_key("managedFields")
        && let Some(mf) = old_meta.get("managedFields")
    {
        m.insert("managedFields".into(), mf.clone());
    }
    if (def.tracks_generation || def.custom.is_some()) && !same_spec_part(def, old, &result) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        result["metadata"]["generation"] = json!(g);
    }
    Ok(result)
}

/// True when a stored object should disappear: it is being deleted, no finalizer holds it
/// ([`Strategy::holds_deletion`] for the kind's own) and its grace period has run out
/// ([`Strategy::grace_period_over`]).
pub fn should_delete(def: &ResourceDef, obj: &Value) -> bool {
    if meta_str(obj, "deletionTimestamp").is_empty() || !finalizers_of(obj).is_empty() {
        return false;
    }
    let strategy = def.strategy.get();
    !strategy.holds_deletion(obj) && strategy.grace_period_over(obj)
}

/// The part of an object whose change bumps `generation`: everything but `metadata` and, when
/// the resource has a status subresource, `status` (the definition [`same_spec_part`] is tested
/// against).
#[cfg(test)]
pub fn spec_part(def: &ResourceDef, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("kind");
        m.remove("apiVersion");
        if def.status_subresource {
            m.remove("status");
        }
    }
    o
}

/// Whether `a` and `b` have the same [`spec_part`], compared in place (an update's old and new
/// objects, whose metadata and status are not copied to find out).
pub fn same_spec_part(def: &ResourceDef, a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let counted = |k: &str| {
        let own = matches!(k, "metadata" | "kind" | "apiVersion");
        !(own || (def.status_subresource && k == "status"))
    };
    let len = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| counted(k)).count();
    len(a) == len(b)
        && a.iter()
            .filter(|(k, _)| counted(k))
            .all(|(k, v)| b.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    #[test]
    fn the_spec_part_compares_in_place_as_it_does_copied() {
        let registry = Registry::builtins();
        let pods = registry.lookup("", "v1", "pods").unwrap();
        let cms = registry.lookup("", "v1", "configmaps").unwrap();
        let objects = [
            json!({"metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"p": 1}}),
            json!({"metadata": {"name": "b"}, "spec": {"x": 1}, "status": {"p": 2}}),
            json!({"kind": "Pod", "spec": {"x": 1}}),
            json!({"spec": {"x": 2}, "extra": true}),
            json!({"spec": {"x": 1}, "data": {"a": "1"}}),
            json!({"data": {"a": "1"}}),
            json!("not an object"),
        ];
        for def in [&pods, &cms] {
            for a in &objects {
                for b in &objects {
                    assert_eq!(
                        same_spec_part(def, a, b),
                        spec_part(def, a) == spec_part(def, b),
                        "{a} {b}"
                    );
                }
            }
        }
    }

    /// [`Presented`] writes exactly the bytes of serializing [`present`]'s copy, whatever
    /// the stored object already says of `apiVersion` and `kind` and wherever its other keys
    /// sort, and for the views it does not handle itself (events.k8s.io/v1).
    #[test]
    fn presented_serializes_like_the_presented_copy() {
        let registry = Registry::builtins();
        let pods = registry.lookup("", "v1", "pods").unwrap();
        let events = registry.lookup("events.k8s.io", "v1", "events").unwrap();
        let objects = [
            json!({"metadata": {"name": "a"}, "spec": {}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
            json!({"apiVersion": "old/v0", "kind": "Old", "zzz": 1}),
            json!({"AAA": 1, "apiVersionX": 2, "b": 3, "kind": "X", "kinda": 4}),
            json!({"a": 1}),
            json!({}),
            json!({"zzz": [1, 2]}),
            json!({"type": "Normal", "involvedObject": {"name": "p"}, "metadata": {"name": "e"}}),
            json!("not an object"),
        ];
        for def in [&pods, &events] {
            for stored in &objects {
                assert_eq!(
                    serde_json::to_string(&Presented::new(def, stored)).unwrap(),
                    serde_json::to_string(&def.ordered(&present(def, stored))).unwrap(),
                    "{} {stored}",
                    def.kind
                );
            }
        }
    }
}
