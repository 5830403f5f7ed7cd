//! The REST verbs: get, list, create, update, patch, delete, deletecollection.
//!
//! Each function here is the body of one of kube-apiserver's `endpoints/handlers`
//! (`get.go`, `create.go`, `update.go`, `patch.go`, `delete.go`) fused with the generic
//! registry store behind it (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`).
//! They run synchronously under the store lock (see [`crate::storage::store`]), so a
//! read-validate-write sequence is atomic exactly like etcd's compare-and-swap: two clients
//! updating the same object with the same `resourceVersion` cannot both win; the second gets
//! 409 Conflict.
//!
//! ## Outside the lock
//!
//! Most of a write's work reads nothing but the request and the object it replaces: the
//! body's unknown-field check and typed decoding, a custom resource's schema and CEL rules,
//! the metadata rules, the managed-fields record. kube-apiserver does all of it before its
//! storage's compare-and-swap (`GuaranteedUpdate` computes the new object from the one it
//! read, and etcd's transaction stores it only if that one is still the current revision,
//! else the update is computed again). POST and PUT (of an object or its `/status`) run the
//! same way here ([`Write::run_on`]), so two writes validate at once on two cores instead of
//! one after the other:
//!
//! * **create**: intake and the strategy's validation outside; a brief lock to check the
//!   namespace ([`strategy::prepare_create`]); then, under the lock, a generated name that is
//!   free, quota admission, the existence check and the write;
//! * **update**: intake once; then the stored object is read (an `Arc`, no copy), the update
//!   is decided against it outside the lock, and stored under the lock only if that object is
//!   still the stored one. If another write came in between, the update is decided again
//!   against the new object (at most five times, then under the lock), so a client's stale
//!   `resourceVersion` still gets 409, and an unconditional update applies to the newest
//!   object, as under the lock.
//!
//! The answers, errors and their order are those of the locked path. A kind whose strategy's
//! store hooks read the stored objects (a Service's IP allocation, a CRD's establishment,
//! quota and RBAC escalation checks: [`strategy::Strategy::store_free_writes`]), a dry run,
//! a patch, `/scale` and deletes run wholly under the lock.
//!
//! The store knows no resource by name. What one resource does differently (its defaults, its
//! validation, its status on create, a Service's allocations, a pod's grace period, a
//! namespace's finalization, the subresources it serves itself) is its
//! [`Strategy`](crate::registry::strategy::Strategy), whose hooks the verbs call at the points
//! [`crate::registry::strategy`] lists; the resource table's flags
//! ([`crate::registry::resources::ResourceDef`]) answer the rest (status and scale
//! subresources, `generation`, unconditional updates, create on PUT, the answer to DELETE).
//! `/scale` is served here for every resource that has one, from the paths its definition
//! names ([`to_scale`]). Two things cross resources: the namespace controller's last
//! step (removing a namespaced object may let its terminating namespace go,
//! [`crate::registry::core::namespaces::finish_if_empty`]) and resource quotas (a create is
//! checked against its namespace's quotas before it is stored,
//! [`crate::registry::core::resourcequotas::admission`], and every write or removal of a
//! namespaced object brings their `status.used` up to date,
//! [`crate::registry::core::resourcequotas::refresh`]).
//!
//! Answers follow the real server's status codes: 201 for create (and for a PUT or apply that
//! creates), 200 otherwise; DELETE answers with the deleted object for kinds whose store sets
//! `ReturnDeletedObject` (pods, service accounts, nodes), with the object still carrying its
//! finalizers when deletion is pending, and with a `Status` of `Success` otherwise.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use crate::api::json_order::GoOrdered;
use crate::api::limits;
use crate::api::object_meta::{self as meta, finalizers_of, meta_str};
use crate::api::query::{ListOptions, Query, RvMatch};
use crate::api::selectors::{FieldSelector, LabelSelector};
use crate::api::status::{ApiError, Cause, success_status};
use crate::api::user::UserInfo;
use crate::auth::rbac::{Attributes, exact_name};
use crate::registry::core::namespaces;
use crate::registry::core::resourcequotas::{self, admission as quota_admission};
use crate::registry::patch::{self, ApplyError, JsonPatchError, apply};
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::{self, Presented, intake, present};
use crate::registry::typed;
use crate::registry::validation;
use crate::registry::{State, Store};
use crate::storage::store::{Key, Stored, key_of, rv_of};

/// The resource, namespace, name and subresource a request URL names.
#[derive(Clone, Debug)]
pub struct Target {
    /// The resource definition.
    pub def: Arc<ResourceDef>,
    /// Namespace from the URL (`None` for cluster-scoped or all-namespaces requests).
    pub namespace: Option<String>,
    /// Object name from the URL (`None` for collection requests).
    pub name: Option<String>,
    /// `status`, `scale`, or `None`.
    pub subresource: Option<String>,
}

impl Target {
    /// The authorization attributes of `verb` on this target (kube's `RequestInfoFactory`). A
    /// list or watch whose field selector requires an exact `metadata.name` carries that
    /// name, so `resourceNames` rules can allow watching one object.
    pub fn attributes(&self, verb: &str, field_selector: Option<&str>) -> Attributes {
        let mut name = self.name.clone().unwrap_or_default();
        if name.is_empty()
            && matches!(verb, "list" | "watch")
            && let Some(exact) = field_selector.and_then(exact_name)
        {
            name = exact;
        }
        Attributes {
            verb: verb.to_owned(),
            group: self.def.group.clone(),
            resource: self.def.plural.clone(),
            subresource: self.subresource.clone().unwrap_or_default(),
            namespace: if self.def.namespaced {
                self.namespace.clone().unwrap_or_default()
            } else {
                String::new()
            },
            name,
            path: String::new(),
            resource_request: true,
        }
    }

    /// The object's name from the URL (`""` for a collection).
    pub(crate) fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
    /// The namespace part of the object's storage key (`""` when cluster-scoped).
    pub(crate) fn ns_key(&self) -> &str {
        if self.def.namespaced {
            self.namespace.as_deref().unwrap_or_default()
        } else {
            ""
        }
    }
    /// The 404 for the object the target names.
    pub(crate) fn not_found(&self) -> ApiError {
        ApiError::not_found(&self.def.plural, &self.def.group, self.name())
    }
    /// The stored object the target names, if any (borrowed, as stored).
    pub(crate) fn stored<'s>(&self, st: &'s State) -> Option<&'s Value> {
        self.name.as_ref()?;
        st.get(&self.def.storage, self.ns_key(), self.name())
    }
}

/// Label and field selectors of a list or watch, checked against the resource's field labels.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    label: LabelSelector,
    field: FieldSelector,
}

impl Selection {
    /// Parses the selectors (400 on syntax errors and unsupported field labels).
    pub fn parse(
        def: &ResourceDef,
        opts: &ListOptions,
        url_name: Option<&str>,
    ) -> Result<Self, ApiError> {
        let label = LabelSelector::parse(&opts.label_selector)
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let mut field =
            FieldSelector::parse(&opts.field_selector).map_err(ApiError::bad_request)?;
        let mut allowed: Vec<&str> = vec!["metadata.name", "metadata.namespace"];
        allowed.extend(def.field_labels.iter().map(String::as_str));
        if let Some(f) = field.unsupported_field(&allowed) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {f}"
            )));
        }
        if let Some(name) = url_name {
            match field.required_name() {
                Some(n) if n != name => {
                    return Err(ApiError::bad_request(
                        "fieldSelector metadata.name doesn't match requested name",
                    ));
                }
                Some(_) => {}
                None if field.is_empty() => field = FieldSelector::for_name(name),
                None => {
                    let combined = format!("{},metadata.name={name}", opts.field_selector);
                    field = FieldSelector::parse(&combined).map_err(ApiError::bad_request)?;
                }
            }
        }
        Ok(Selection { label, field })
    }

    /// Whether both selectors match everything (then no object needs reading to match).
    pub fn is_everything(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// Whether a stored object matches both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        self.label.matches(&meta::labels_of(obj)) && self.field.matches(obj)
    }
}

/// The answer of a verb: an HTTP code and its object.
pub type Answer = (u16, Served);

/// The object of an answer: one built for the answer (presented already), or an object as
/// stored, shared with the store and presented as its resource serves it ([`present`]) only
/// when it is serialized ([`strategy::Presented`], without copying it) or asked for as a value
/// ([`Served::into_value`]). A write or a GET answers the object it stored or read so: a copy of
/// every object written, made to be serialized once and dropped, was 4 % of the server's
/// instructions under the At benchmark.
#[derive(Debug, Clone)]
pub enum Served {
    /// An object built for the answer, as served.
    Value(Value),
    /// An object as stored.
    Stored(Arc<Stored>),
}

impl Served {
    /// The object as served by `def` (the answer's resource).
    pub fn into_value(self, def: &ResourceDef) -> Value {
        match self {
            Served::Value(v) => v,
            Served::Stored(s) => present(def, &s),
        }
    }

    /// [`Served::into_value`] with the field sets as the store holds them, folded
    /// ([`crate::api::folded`]): what the loopback clients read, which write them back as they
    /// are and never look inside.
    pub fn into_folded_value(self, def: &ResourceDef) -> Value {
        match self {
            Served::Value(v) => v,
            Served::Stored(s) => strategy::present_folded(def, &s),
        }
    }
}

impl From<Value> for Served {
    fn from(v: Value) -> Self {
        Served::Value(v)
    }
}

// ---------------------------------------------------------------------------------------------
// get

/// GET on an object (or its `/status` or `/scale`).
pub fn get(st: &State, t: &Target, q: &Query) -> Result<Answer, ApiError> {
    let rv = q.non_empty("resourceVersion").unwrap_or_default();
    if !rv.is_empty() && rv != "0" {
        let n = parse_rv(rv)?;
        if n > st.resource_version() {
            return Err(ApiError::too_large_resource_version(
                n,
                st.resource_version(),
            ));
        }
    }
    t.name.as_ref().ok_or_else(|| t.not_found())?;
    let obj = st
        .get_shared(&t.def.storage, t.ns_key(), t.name())
        .ok_or_else(|| t.not_found())?;
    if t.subresource.as_deref() == Some("scale") {
        return Ok((200, to_scale(&t.def, &obj).into()));
    }
    Ok((200, Served::Stored(obj)))
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))
}

// ---------------------------------------------------------------------------------------------
// list

/// What a list produced, before rendering (JSON list or Table).
pub struct ListResult {
    /// Matching objects as stored: shared with the store, not copied. [`ListResult::served`]
    /// gives them as served (the served `apiVersion` and `kind` set), [`ListJson`] serializes
    /// them that way without copying.
    pub items: Vec<Arc<Stored>>,
    /// The list's resourceVersion.
    pub resource_version: u64,
    /// Continue token for the next page, if any.
    pub continue_token: Option<String>,
    /// Items left after this page.
    pub remaining: Option<u64>,
}

/// What a `continue` token carries: the snapshot's revision, the last key served, and how many
/// objects the earlier pages served (so `remainingItemCount` needs no count of the keys before
/// the page). Opaque to clients, like the real server's base64 JSON.
///
/// `rv` is -1 in the token a 410 for a compacted snapshot offers (see [`list`]): continue after
/// the same key at the latest revision, as etcd3's `continueRV < 0` does.
#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    ns: String,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    served: Option<u64>,
}

fn encode_continue(rv: i64, key: &Key, served: Option<u64>) -> String {
    let tok = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        ns: key.0.clone(),
        name: key.1.clone(),
        served,
    };
    base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&tok).unwrap_or_default())
}

fn decode_continue(token: &str) -> Result<ContinueToken, ApiError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(token)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(token))
        .map_err(|_| ApiError::bad_request(format!("invalid continue token: {token:?}")))?;
    let tok: ContinueToken = serde_json::from_slice(&bytes)
        .map_err(|_| ApiError::bad_request(format!("invalid continue token: {token:?}")))?;
    if tok.rv == 0 {
        return Err(ApiError::bad_request(format!(
            "invalid continue token: {token:?}"
        )));
    }
    Ok(tok)
}

/// LIST: selectors, namespaces, `limit`/`continue` over a consistent snapshot, and the
/// `resourceVersion` / `resourceVersionMatch` table of the API concepts page.
///
/// Every list reads a [`Snapshot`](crate::storage::store::Snapshot): at the current revision it is the
/// stored objects themselves, at an older one (an exact `resourceVersion`, or the first page's
/// revision carried by a `continue` token) the stored objects with the writes since undone. A
/// page starts at the token's key in the ordered map and stops after `limit` matching objects,
/// so serving one page of N objects costs that page plus the writes since the first page. No
/// object is copied: the page holds the stored objects' `Arc`s, and a plain JSON list is
/// serialized straight from them ([`ListJson`]); only a Table, a converted list or a
/// `deletecollection` copies each object into its served form ([`ListResult::served`]).
///
/// As with etcd, a page that filled up gets a `continue` token when any key follows it (with
/// selectors the next page may then be empty), and `remainingItemCount` only without selectors.
///
/// A `continue` token whose snapshot has been compacted out of the history is answered as
/// etcd3's store does (`staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go`,
/// `handleCompactedErrorForPaging`, and `store.go`'s `GetList`): 410 Gone, reason `Expired`,
/// the message "The provided continue parameter is too old to display a consistent list
/// result. You can start a new list without the continue parameter, or use the continue token
/// in this response to retrieve the remainder of the results. ...", and in the Status's
/// `metadata.continue` a token with the same start key and `rv: -1`. A token with a negative
/// `rv` lists the keys after its start key at the latest revision (an inconsistent list: what
/// changed since the first page shows), and its own pages carry ordinary tokens at that
/// revision. A token with `rv: 0` is invalid (`storage.DecodeContinue`'s `ErrInvalidStartRV`).
/// A compacted exact `resourceVersion` stays the plain 410 "The resourceVersion for the
/// provided list is too old.".
///
/// A `resourceVersion` above the current revision (as a minimum, `NotOlderThan` or a plain
/// `resourceVersion=N`, or exact) is first waited for, as the watch cache's
/// `waitUntilFreshAndBlock` does
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`): the HTTP layer waits up
/// to `blockTimeout`, 3 s ([`awaited_revision`],
/// [`Store::wait_for_revision`](crate::registry::Store::wait_for_revision)), holding no store lock,
/// and lists as soon as a write reaches the revision. Past the wait, `list` answers what
/// `storage.NewTooLargeResourceVersionError` (`staging/src/k8s.io/apiserver/pkg/storage/errors.go`)
/// builds: 504 `Timeout`, "Timeout: Too large resource version: N, current: M", cause
/// `ResourceVersionTooLarge`, `retryAfterSeconds: 1`. The request keeps its flow-control seat
/// while it waits, as in kube-apiserver, where the APF filter wraps the handler that blocks.
pub fn list(st: &State, t: &Target, opts: &ListOptions) -> Result<ListResult, ApiError> {
    let sel = Selection::parse(&t.def, opts, None)?;
    let current = st.resource_version();
    let mut served_before: Option<u64> = Some(0);
    let (snapshot_rv, start_after) = if !opts.continue_token.is_empty() {
        let tok = decode_continue(&opts.continue_token)?;
        match u64::try_from(tok.rv) {
            Ok(rv) => {
                served_before = tok.served;
                (rv, Some((tok.ns, tok.name)))
            }
            // An inconsistent continue: the rest of the keys at the latest revision, where
            // the count of those served before is unknown.
            Err(_) => {
                served_before = None;
                (current, Some((tok.ns, tok.name)))
            }
        }
    } else {
        let rv = opts.resource_version.as_str();
        let exact = match (rv, opts.rv_match) {
            ("" | "0", _) => None,
            (_, Some(RvMatch::Exact)) => Some(parse_rv(rv)?),
            (_, Some(RvMatch::NotOlderThan)) => {
                let n = parse_rv(rv)?;
                check_not_too_large(n, current)?;
                None
            }
            (_, None) if opts.limit > 0 => Some(parse_rv(rv)?),
            (_, None) => {
                let n = parse_rv(rv)?;
                check_not_too_large(n, current)?;
                None
            }
        };
        match exact {
            Some(n) => {
                check_not_too_large(n, current)?;
                (n, None)
            }
            None => (current, None),
        }
    };
    if snapshot_rv > current {
        // Only a forged token can name a revision the server has not reached.
        return Err(ApiError::too_large_resource_version(snapshot_rv, current));
    }
    let snapshot = st
        .snapshot_at(&t.def.storage, snapshot_rv)
        .map_err(|_| match &start_after {
            None => ApiError::expired("The resourceVersion for the provided list is too old."),
            // A compacted page snapshot: 410, with a token for the rest at the latest revision.
            Some(key) => ApiError::inconsistent_continue(encode_continue(-1, key, None)),
        })?;
    let ns_filter = if t.def.namespaced {
        t.namespace.as_deref()
    } else {
        None
    };
    let limit = usize::try_from(opts.limit)
        .ok()
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut keys = snapshot.range(ns_filter, start_after.as_ref());
    let mut items: Vec<Arc<Stored>> = vec![];
    let mut last: Option<&Key> = None;
    let everything = sel.is_everything();
    for (key, obj) in keys.by_ref() {
        // Without selectors a rested object is not decoded here (see `Items` below); with
        // them it is decoded for the match and not kept.
        if everything || obj.with_value(|o| sel.matches(o)) {
            items.push(Arc::clone(obj));
            last = Some(key);
            if items.len() == limit {
                break;
            }
        }
    }
    let more = items.len() == limit && keys.next().is_some();
    let (continue_token, remaining) = match (more, last) {
        (true, Some(last)) => {
            let served = served_before.map(|n| n + items.len() as u64);
            // Like etcd-backed lists, the count is only known without selectors.
            let remaining = if opts.label_selector.is_empty() && opts.field_selector.is_empty() {
                Some(match served {
                    Some(served) => (snapshot.count(ns_filter) as u64).saturating_sub(served),
                    None => snapshot.range(ns_filter, Some(last)).count() as u64,
                })
            } else {
                None
            };
            let rv = i64::try_from(snapshot_rv).unwrap_or(i64::MAX);
            (Some(encode_continue(rv, last, served)), remaining)
        }
        _ => (None, None),
    };
    Ok(ListResult {
        items,
        resource_version: snapshot_rv,
        continue_token,
        remaining,
    })
}

/// The revision a list asks for by its `resourceVersion` (minimum or exact, not `0`, not a
/// `continue`), which the caller waits for up to [`TOO_LARGE_WAIT`](crate::endpoints::watch::TOO_LARGE_WAIT)
/// before listing, as the watch cache does (see [`list`]). `None` for a list that needs no
/// revision, or whose `resourceVersion` does not parse (`list` answers the 400).
pub fn awaited_revision(opts: &ListOptions) -> Option<u64> {
    if !opts.continue_token.is_empty() {
        return None;
    }
    match opts.resource_version.as_str() {
        "" | "0" => None,
        rv => rv.parse().ok(),
    }
}

fn check_not_too_large(n: u64, current: u64) -> Result<(), ApiError> {
    if n > current {
        Err(ApiError::too_large_resource_version(n, current))
    } else {
        Ok(())
    }
}

impl ListResult {
    /// The items as served (`present`: the served `apiVersion` and `kind` set), each a copy:
    /// for the renderings that work on values (Table, conversion, `deletecollection`).
    pub fn served(&self, def: &ResourceDef) -> Vec<Value> {
        // A rested object is decoded for its copy and not kept.
        self.items
            .iter()
            .map(|o| o.with_value(|v| present(def, v)))
            .collect()
    }

    /// The list's `metadata`: `resourceVersion`, and `continue` and `remainingItemCount` when
    /// the page has them.
    fn list_meta(&self) -> Value {
        let mut meta = json!({"resourceVersion": self.resource_version.to_string()});
        if let Some(c) = &self.continue_token {
            meta["continue"] = json!(c);
        }
        if let Some(n) = self.remaining {
            meta["remainingItemCount"] = json!(n);
        }
        meta
    }
}

/// A list as `<Kind>List` JSON, with `items` already in their served form (converted by a
/// webhook, say).
pub fn list_json(def: &ResourceDef, r: &ListResult, mut items: Vec<Value>) -> Value {
    if def.custom.is_none() {
        // A typed list's items leave their TypeMeta out (custom resources' items keep it).
        for item in &mut items {
            if let Some(o) = item.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
        }
    }
    let mut list = json!({
        "kind": def.list_kind,
        "apiVersion": def.api_version(),
        "metadata": r.list_meta(),
    });
    list["items"] = Value::Array(items);
    list
}

/// A list as `<Kind>List` JSON, serialized straight from the stored objects: the same bytes
/// as `serde_json::to_vec(&def.ordered(&list_json(def, r, r.served(def))))` (the
/// byte layout of [`crate::api::json_order`], each item through [`strategy::Presented`]) without
/// copying a single object. This is what
/// serves `kubectl get -o json` of a large resource, or a controller's relist: at 10,000 Ats,
/// copying each one first was a tenth of the API server's CPU while a client polled the list.
pub struct ListJson<'a> {
    def: &'a ResourceDef,
    result: &'a ListResult,
}

impl<'a> ListJson<'a> {
    /// `result`, a page of `def`'s objects, for serializing.
    pub fn new(def: &'a ResourceDef, result: &'a ListResult) -> Self {
        ListJson { def, result }
    }
}

impl serde::Serialize for ListJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Items<'a>(&'a ResourceDef, &'a [Arc<Stored>]);
        impl serde::Serialize for Items<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                // A rested object is decoded for its item and dropped again (a LIST of every
                // object keeps no tree of its own; `stored`).
                struct Item<'a>(&'a ResourceDef, &'a Stored);
                impl serde::Serialize for Item<'_> {
                    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        self.1
                            .with_value(|v| Presented::list_item(self.0, v).serialize(s))
                    }
                }
                s.collect_seq(self.1.iter().map(|o| Item(self.0, o)))
            }
        }
        // Go's order for built-in lists; sorted (unstructured) for custom resources.
        let mut map = s.serialize_map(Some(4))?;
        let meta = self.result.list_meta();
        if self.def.custom.is_some() {
            map.serialize_entry("apiVersion", &self.def.api_version())?;
            map.serialize_entry("items", &Items(self.def, &self.result.items))?;
            map.serialize_entry("kind", &self.def.list_kind)?;
            map.serialize_entry("metadata", &meta)?;
        } else {
            map.serialize_entry("kind", &self.def.list_kind)?;
            map.serialize_entry("apiVersion", &self.def.api_version())?;
            map.serialize_entry("metadata", &GoOrdered::meta(&meta))?;
            map.serialize_entry("items", &Items(self.def, &self.result.items))?;
        }
        map.end()
    }
}

// ---------------------------------------------------------------------------------------------
// create

/// How a write was asked to be carried out (`dryRun`, `fieldValidation`, field manager).
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run every check, store nothing.
    pub dry_run: bool,
    /// `fieldValidation=Strict`: unknown fields are an error instead of being dropped.
    pub strict: bool,
    /// The manager recorded in `metadata.managedFields` for this write.
    pub manager: String,
    /// Record an `operation: Update` entry (false for server-side apply, which records its own).
    pub record: bool,
    /// Who writes (RBAC enforced): roles and bindings then pass the escalation checks.
    pub requester: Option<Arc<UserInfo>>,
}

impl WriteOptions {
    /// From the query (`fieldValidation` other than `Strict` means the fields are pruned).
    pub fn from_query(q: &Query) -> Self {
        WriteOptions {
            dry_run: q.dry_run(),
            strict: q.get("fieldValidation") == Some("Strict"),
            manager: q.field_manager(),
            record: true,
            requester: q.requester(),
        }
    }
}

/// Whether two objects are equal once the timestamps of their managed-field entries are
/// ignored, so that a write changing nothing but the time of an ownership record is recognised
/// as the no-op it is. Compares in place: no copy of either object.
fn same_except_managed_times(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    same_map(a, b, |key, va, vb| match key {
        "metadata" => match (va.as_object(), vb.as_object()) {
            (Some(ma), Some(mb)) => same_map(ma, mb, |key, va, vb| match key {
                "managedFields" => match (va.as_array(), vb.as_array()) {
                    (Some(ea), Some(eb)) => {
                        ea.len() == eb.len()
                            && ea.iter().zip(eb).all(|(x, y)| {
                                match (x.as_object(), y.as_object()) {
                                    (Some(x), Some(y)) => same_map_without(x, y, "time"),
                                    _ => x == y,
                                }
                            })
                    }
                    _ => va == vb,
                },
                _ => va == vb,
            }),
            _ => va == vb,
        },
        _ => va == vb,
    })
}

/// The same keys, and `same(key, a_value, b_value)` for each.
fn same_map(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
    same: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, va)| b.get(k).is_some_and(|vb| same(k, va, vb)))
}

/// Equal maps once `skip` is ignored on both sides.
fn same_map_without(
    a: &serde_json::Map<String, Value>,
    b: &serde_json::Map<String, Value>,
    skip: &str,
) -> bool {
    let len = |m: &serde_json::Map<String, Value>| m.len() - usize::from(m.contains_key(skip));
    len(a) == len(b)
        && a.iter()
            .filter(|(k, _)| k.as_str() != skip)
            .all(|(k, va)| b.get(k) == Some(va))
}

/// Paths present in `before` but not in `after` (what pruning removed), as `spec.x`.
pub(crate) fn dropped_fields(before: &Value, after: &Value, prefix: &str, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, bv) in b {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match a.get(k) {
                    None => out.push(path),
                    Some(av) => dropped_fields(bv, av, &path, out),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                dropped_fields(bv, av, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// How many names the server generates for one create before answering 409 (the real
/// registry's `maxNameGenerationCreateAttempts`).
pub const MAX_NAME_GENERATION_ATTEMPTS: usize = 8;

/// The first of `first` and up to [`MAX_NAME_GENERATION_ATTEMPTS`]` - 1` further generated names
/// that is not taken, or `None` if every attempt collided.
fn pick_generated_name(
    first: String,
    taken: impl Fn(&str) -> bool,
    mut generate: impl FnMut() -> String,
) -> Option<String> {
    let mut name = first;
    for attempt in 1..=MAX_NAME_GENERATION_ATTEMPTS {
        if !taken(&name) {
            return Some(name);
        }
        if attempt < MAX_NAME_GENERATION_ATTEMPTS {
            name = generate();
        }
    }
    None
}

/// Prepares, validates and stores a new object; the shared tail of POST, create-on-PUT and
/// server-side apply on a missing object.
fn create_prepared(
    st: &mut State,
    t: &Target,
    obj: Value,
    opts: WriteOptions,
) -> Result<Answer, ApiError> {
    let generated = is_generated(&obj);
    let obj = strategy::prepare_create(st, &t.def, obj, t.namespace.as_deref())?;
    let obj = decide_create(Some(st), t, obj, &opts)?;
    match store_create(st, t, obj, generated, &opts)? {
        Created::Stored(stored) => Ok((201, Served::Stored(stored))),
        Created::DryRun(obj) => Ok((201, present(&t.def, &obj).into())),
    }
}

/// Whether the server chooses the name: the client sent `generateName` and no name.
fn is_generated(obj: &Value) -> bool {
    meta_str(obj, "name").is_empty() && !meta_str(obj, "generateName").is_empty()
}

/// The rules of a create that read nothing stored (with `st`, the strategy's `BeginCreate` too,
/// which may): the kind's validation and defaults, the metadata rules, the managed-fields
/// record. `obj` comes from [`strategy::prepare_create`].
fn decide_create(
    st: Option<&mut State>,
    t: &Target,
    mut obj: Value,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let def = &t.def;
    let strategy = def.strategy.get();
    if let Some(st) = st {
        strategy.begin_create(st, &mut obj)?;
    }
    strategy.validate(def, &mut obj, None, opts.strict)?;
    validation::check(
        def,
        meta_str(&obj, "name"),
        validation::validate_object(def, &obj, None),
    )?;
    if opts.record {
        let sub = t.subresource.as_deref();
        patch::record_update(None, &mut obj, &opts.manager, sub, &meta::now_time());
    }
    Ok(obj)
}

/// What a create stored, or would have (a dry run).
enum Created {
    Stored(Arc<Stored>),
    DryRun(Value),
}

/// The rest of a create, under the store's lock: a generated name that is free, quota
/// admission, the existence check, the strategy's store hooks, and the write.
fn store_create(
    st: &mut State,
    t: &Target,
    mut obj: Value,
    generated: bool,
    opts: &WriteOptions,
) -> Result<Created, ApiError> {
    let def = &t.def;
    let strategy = def.strategy.get();
    if generated {
        // KEP-4420: a generated name that collides is generated again, as the real registry
        // does (`maxNameGenerationCreateAttempts`), before giving up with 409.
        let base = meta_str(&obj, "generateName").to_owned();
        let ns = meta_str(&obj, "namespace").to_owned();
        let first = meta_str(&obj, "name").to_owned();
        let storage = def.storage.clone();
        let free = pick_generated_name(
            first,
            |n| st.get(&storage, &ns, n).is_some(),
            || meta::generate_name(&base),
        );
        if let Some(name) = free {
            obj["metadata"]["name"] = json!(name);
        }
    }
    // Quota admission, the last admission plugin: a create that would exceed a quota of its
    // namespace is refused before anything is stored.
    quota_admission::admit_create(st, def, &obj)?;
    let (ns, name) = key_of(&obj);
    if let Some(existing) = st.get(&def.storage, &ns, &name) {
        let mut e = if generated {
            ApiError::generate_name_conflict(&def.plural, &def.group, &name)
        } else {
            ApiError::already_exists(&def.plural, &def.group, &name)
        };
        if !meta_str(existing, "deletionTimestamp").is_empty() {
            e.message = format!("object is being deleted: {}", e.message);
        }
        return Err(e);
    }
    if let Some(user) = &opts.requester {
        strategy.authorize_write(st, def, user, &obj, None)?;
    }
    strategy.before_store(st, &mut obj, opts.dry_run)?;
    if opts.dry_run {
        return Ok(Created::DryRun(obj));
    }
    limits::check_stored_size(&obj)?;
    let stored = st.write(&def.storage, obj);
    if def.namespaced {
        resourcequotas::refresh(st, &ns);
    }
    Ok(Created::Stored(stored))
}

/// POST on a collection.
pub fn create(st: &mut State, t: &Target, body: Value, q: &Query) -> Result<Answer, ApiError> {
    q.check_write_options("CreateOptions")?;
    if t.subresource.is_some() || t.name.is_some() {
        return Err(ApiError::method_not_allowed(
            "create",
            &t.def.plural,
            &t.def.group,
        ));
    }
    let obj = create_intake(t, body, q)?;
    create_prepared(st, t, obj, WriteOptions::from_query(q))
}

/// A create's body in storage shape: the request-version checks, unknown fields (warnings or,
/// under `Strict`, the error), the typed decoding and defaults. Reads nothing stored.
fn create_intake(t: &Target, body: Value, q: &Query) -> Result<Value, ApiError> {
    t.def
        .strategy
        .get()
        .validate_create_request(&t.def, &body)?;
    let mut body = body;
    validation::check_unknown_fields(&t.def, &mut body, q)?;
    intake(&t.def, body)
}

// ---------------------------------------------------------------------------------------------
// update

/// Runs the update rules on `new` (already in storage shape) against the stored object and
/// writes the result. Shared by PUT and every patch type.
fn update_stored(
    st: &mut State,
    t: &Target,
    old: &Value,
    new: Value,
    opts: WriteOptions,
) -> Result<Answer, ApiError> {
    match decide_update(Some(st), t, old, new, &opts)? {
        Decided::Answer(a) => Ok(a),
        Decided::Store(result) => Ok(store_update(st, t, result).answer(&t.def)),
        Decided::Remove(result) => Ok(store_update_removal(st, t, result).answer(&t.def)),
    }
}

/// What an update decided before anything is stored.
enum Decided {
    /// The answer already: a no-op write (nothing stored, no event) or a dry run.
    Answer(Answer),
    /// The object to store.
    Store(Value),
    /// The object to remove: the last finalizer went and nothing else holds it.
    Remove(Value),
}

/// The rules of an update against `old`, the stored object: kube's `BeforeUpdate` (the shared
/// rules, the kind's validation and the metadata rules), the no-op check and the managed-fields
/// record. With `st`, the strategy's store hooks run too (`BeginUpdate`, the escalation check,
/// `before_store`); without it they are skipped, which only a strategy whose hooks read
/// nothing stored allows ([`Strategy::store_free_writes`](strategy::Strategy::store_free_writes)).
fn decide_update(
    mut st: Option<&mut State>,
    t: &Target,
    old: &Value,
    new: Value,
    opts: &WriteOptions,
) -> Result<Decided, ApiError> {
    let dry_run = opts.dry_run;
    let def = &t.def;
    let strategy = def.strategy.get();
    let mut result = strategy::prepare_update(
        def,
        old,
        new,
        t.namespace.as_deref().filter(|_| def.namespaced),
        t.name(),
        t.subresource.as_deref(),
    )?;
    if let Some(st) = st.as_deref_mut() {
        strategy.begin_update(st, old, &mut result)?;
    }
    if let Some(sub) = t.subresource.as_deref() {
        validation::check(
            def,
            t.name(),
            strategy.validate_subresource_update(sub, &result, old),
        )?;
    }
    strategy.validate(def, &mut result, Some(old), opts.strict)?;
    validation::check(
        def,
        t.name(),
        validation::validate_object(def, &result, Some(old)),
    )?;
    if let Some(st) = st {
        if let Some(user) = &opts.requester {
            strategy.authorize_write(st, def, user, &result, Some(old))?;
        }
        strategy.before_store(st, &mut result, dry_run)?;
    }
    if same_except_managed_times(&result, old) {
        // A no-op write changes nothing: same resourceVersion, no watch event.
        return Ok(Decided::Answer((200, present(def, old).into())));
    }
    if opts.record {
        let sub = t.subresource.as_deref();
        patch::record_update(
            Some(old),
            &mut result,
            &opts.manager,
            sub,
            &meta::now_time(),
        );
        if same_except_managed_times(&result, old) {
            return Ok(Decided::Answer((200, present(def, old).into())));
        }
    }
    if dry_run {
        return Ok(Decided::Answer((200, present(def, &result).into())));
    }
    if strategy::should_delete(def, &result) {
        return Ok(Decided::Remove(result));
    }
    limits::check_stored_size(&result)?;
    Ok(Decided::Store(result))
}

/// What an update wrote: the stored object, or the removed one (the caller sees its final
/// state). Presented outside the store's lock.
enum Written {
    Stored(Arc<Stored>),
    Removed(Value),
}

impl Written {
    fn answer(self, def: &ResourceDef) -> Answer {
        match self {
            Written::Stored(s) => (200, Served::Stored(s)),
            Written::Removed(v) => (200, present(def, &v).into()),
        }
    }
}

/// Stores a decided update, under the store's lock.
fn store_update(st: &mut State, t: &Target, result: Value) -> Written {
    let def = &t.def;
    let ns = meta_str(&result, "namespace").to_owned();
    let stored = st.write(&def.storage, result);
    if def.namespaced {
        resourcequotas::refresh(st, &ns);
    }
    Written::Stored(stored)
}

/// Removes an object whose update let it go, under the store's lock.
fn store_update_removal(st: &mut State, t: &Target, result: Value) -> Written {
    let (ns, name) = key_of(&result);
    Written::Removed(remove_object(st, &t.def, &ns, &name, Some(result.clone())).unwrap_or(result))
}

/// PUT on an object, its `/status` or its `/scale`.
pub fn update(st: &mut State, t: &Target, body: Value, q: &Query) -> Result<Answer, ApiError> {
    q.check_write_options("UpdateOptions")?;
    let def = t.def.clone();
    if t.subresource.as_deref() == Some("scale") {
        return update_scale(st, t, body, WriteOptions::from_query(q));
    }
    if let Some(sub) = t.subresource.as_deref()
        && let Some(answer) =
            def.strategy
                .get()
                .update_subresource(st, t, sub, &body, &WriteOptions::from_query(q))
    {
        return answer;
    }
    let mut body = body;
    validation::check_unknown_fields(&def, &mut body, q)?;
    let new = intake(&def, body)?;
    update_intaken(st, t, new, q)
}

/// The rest of a PUT once its body is in storage shape: the stored object (or create-on-PUT),
/// then the update rules.
fn update_intaken(st: &mut State, t: &Target, new: Value, q: &Query) -> Result<Answer, ApiError> {
    let def = t.def.clone();
    let Some(old) = st.get_shared(&def.storage, t.ns_key(), t.name()) else {
        if def.create_on_update && t.subresource.is_none() {
            let body_name = meta_str(&new, "name");
            if body_name != t.name() {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({})",
                    t.name()
                )));
            }
            let mut new = new;
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            return create_prepared(st, t, new, WriteOptions::from_query(q));
        }
        return Err(t.not_found());
    };
    update_stored(st, t, &old, new, WriteOptions::from_query(q))
}

/// PUT computed against `old` (the current object, already in the target's version) rather
/// than the stored object: the update of a resource whose stored objects are in another
/// version ([`crate::apiextensions::conversion`]). Not found is the caller's to decide.
pub fn update_against(
    st: &mut State,
    t: &Target,
    old: &Value,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    q.check_write_options("UpdateOptions")?;
    let mut body = body;
    validation::check_unknown_fields(&t.def, &mut body, q)?;
    let new = intake(&t.def, body)?;
    update_stored(st, t, old, new, WriteOptions::from_query(q))
}

/// PATCH computed against `old` (the current object, already in the target's version), as
/// [`update_against`] is for PUT.
pub fn patch_against(
    st: &mut State,
    t: &Target,
    old: &Value,
    ty: PatchType,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    q.check_write_options("PatchOptions")?;
    let def = t.def.clone();
    if ty == PatchType::Strategic && !def.strategic_merge {
        // The plain verb words the refusal.
        return patch(st, t, ty, body, q);
    }
    if ty == PatchType::Apply {
        return server_side_apply(st, t, Some(old.clone()), body, q);
    }
    let mut view = present(&def, old);
    apply_patch_body(ty, &mut view, &body)?;
    if let Some(e) = typed::decode_error(&def, &view) {
        return Err(typed::patch_error(&view, &e));
    }
    // A patch can grow metadata too (`copy`): huge collections are judged before the typed
    // round trip of `check_unknown_fields` expands them.
    limits::precheck_metadata(&def.kind, &def.group, &view)?;
    validation::check_unknown_fields(&def, &mut view, q)?;
    let new = intake(&def, view)?;
    update_stored(st, t, old, new, WriteOptions::from_query(q))
}

// ---------------------------------------------------------------------------------------------
// scale

/// The `autoscaling/v1` Scale view of an object.
pub fn to_scale(def: &ResourceDef, obj: &Value) -> Value {
    let Some(scale) = &def.scale else {
        return json!({});
    };
    let replicas = |p: &str| meta::get_path(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let selector = scale
        .label_selector_path
        .as_deref()
        .and_then(|p| meta::get_path(obj, p))
        .map(|s| match s {
            Value::String(s) => s.clone(),
            other => other["matchLabels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        });
    let m = &obj["metadata"];
    let mut status = json!({"replicas": replicas(&scale.status_replicas_path)});
    if let Some(s) = selector {
        status["selector"] = json!(s);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": replicas(&scale.spec_replicas_path)},
        "status": status,
    })
}

fn update_scale(
    st: &mut State,
    t: &Target,
    body: Value,
    opts: WriteOptions,
) -> Result<Answer, ApiError> {
    let def = t.def.clone();
    let Some(scale) = def.scale.clone() else {
        return Err(ApiError::page_not_found());
    };
    let old = st
        .get(&def.storage, t.ns_key(), t.name())
        .cloned()
        .ok_or_else(|| t.not_found())?;
    let sent_rv = body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !sent_rv.is_empty() && sent_rv.parse::<u64>().ok() != Some(rv_of(&old)) {
        return Err(ApiError::conflict(&def.plural, &def.group, t.name()));
    }
    if let Some(n) = body["spec"]["replicas"].as_i64()
        && i32::try_from(n).is_err()
    {
        return Err(ApiError::bad_request(format!(
            "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal number {n} into Go struct field ScaleSpec.spec.replicas of type int32"
        )));
    }
    let Some(replicas) = body["spec"]["replicas"].as_i64() else {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            t.name(),
            vec![Cause::new(
                "FieldValueRequired",
                "spec.replicas",
                "Required value",
            )],
        ));
    };
    if replicas < 0 {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            t.name(),
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            )],
        ));
    }
    let mut new = old.clone();
    meta::set_path(&mut new, &scale.spec_replicas_path, json!(replicas));
    let main = Target {
        subresource: None,
        ..t.clone()
    };
    let (code, obj) = update_stored(st, &main, &old, new, opts)?;
    let stored = st
        .get(&def.storage, t.ns_key(), t.name())
        .cloned()
        .unwrap_or_else(|| obj.into_value(&def));
    Ok((code, to_scale(&def, &stored).into()))
}

// ---------------------------------------------------------------------------------------------
// patch

/// The patch types the server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// Every accepted patch media type.
    pub const ALL: &'static [&'static str] = &[
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ];

    /// From a `Content-Type` (parameters already stripped).
    pub fn from_media_type(m: &str) -> Option<Self> {
        match m {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a JSON, merge or strategic merge patch to `base` (the object as served).
pub fn apply_patch_body(ty: PatchType, base: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let invalid = |e: String| ApiError::new(422, "Invalid", e);
    match ty {
        PatchType::Json => patch::json_patch_limited(base, patch).map_err(|e| match e {
            JsonPatchError::TooManyOperations(_) => ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: {e}"),
            ),
            // kube-apiserver answers the copy limit with a generic 422 (`NewGenericServerResponse`):
            // its message is the fixed text below; json-patch's own words are kept as the cause.
            JsonPatchError::CopyTooLarge { .. } => ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
            .with_cause_message(e.to_string()),
            JsonPatchError::Failed(m) => invalid(m),
        }),
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            patch::merge_patch(base, patch);
            Ok(())
        }
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            }
            patch::strategic_merge_patch(base, patch).map_err(invalid)
        }
        PatchType::Apply => Err(ApiError::internal("apply is handled separately")),
    }
}

/// PATCH on an object, its `/status` or its `/scale`.
pub fn patch(
    st: &mut State,
    t: &Target,
    ty: PatchType,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    q.check_write_options("PatchOptions")?;
    let def = t.def.clone();
    if ty == PatchType::Strategic && !def.strategic_merge {
        let gvk = format!("{}, Kind={}", def.api_version(), def.kind);
        return Err(ApiError::unsupported_media_type(&[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ])
        .with_message(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (strategic merge patch is not supported by {gvk})"
        )));
    }
    let current = st.get_shared(&def.storage, t.ns_key(), t.name());
    if ty == PatchType::Apply {
        return server_side_apply(
            st,
            t,
            current.as_deref().map(|c| c.value().clone()),
            body,
            q,
        );
    }
    let Some(old) = current else {
        return Err(t.not_found());
    };
    if t.subresource.as_deref() == Some("scale") {
        let mut scale = to_scale(&def, &old);
        apply_patch_body(ty, &mut scale, &body)?;
        return update_scale(st, t, scale, WriteOptions::from_query(q));
    }
    let mut view = present(&def, &old);
    apply_patch_body(ty, &mut view, &body)?;
    if let Some(e) = typed::decode_error(&def, &view) {
        return Err(typed::patch_error(&view, &e));
    }
    // A patch can grow metadata too (`copy`): huge collections are judged before the typed
    // round trip of `check_unknown_fields` expands them.
    limits::precheck_metadata(&def.kind, &def.group, &view)?;
    validation::check_unknown_fields(&def, &mut view, q)?;
    let new = intake(&def, view)?;
    update_stored(st, t, &old, new, WriteOptions::from_query(q))
}

fn server_side_apply(
    st: &mut State,
    t: &Target,
    current: Option<Value>,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    let def = t.def.clone();
    let Some(manager) = q.non_empty("fieldManager") else {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )],
        ));
    };
    let force = q.flag("force")?;
    let mut body = body;
    validation::check_unknown_fields(&def, &mut body, q)?;
    let applied = intake(&def, body)?;
    let current_view = current.as_ref().map(|c| present(&def, c));
    // Through the main endpoint, a kind with a status subresource resets `status`: it is not
    // applied (kube's reset-fields filter), so it neither conflicts nor is recorded.
    let reset: &[&str] = if def.status_subresource && t.subresource.is_none() {
        &["status"]
    } else {
        &[]
    };
    let merged = apply(
        current_view.as_ref(),
        &present(&def, &applied),
        manager,
        force,
        &meta::now_time(),
        reset,
    )
    .map_err(|e| match e {
        ApplyError::Invalid(m) => ApiError::bad_request(m),
        ApplyError::Conflict { message, conflicts } => {
            // apierrors.NewApplyConflict: 409 Conflict, one FieldManagerConflict cause per field.
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|(manager, field)| {
                    json!({"reason": "FieldManagerConflict",
                           "message": format!("conflict with {manager}"), "field": field})
                })
                .collect();
            let mut err = ApiError::new(409, "Conflict", message);
            err.details = Some(json!({"causes": causes}));
            err
        }
    })?;
    let merged = intake(&def, merged)?;
    match current {
        None => {
            if t.subresource.is_some() {
                return Err(t.not_found());
            }
            let body_name = meta_str(&merged, "name");
            if body_name != t.name() {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({})",
                    t.name()
                )));
            }
            let opts = WriteOptions {
                record: false,
                ..WriteOptions::from_query(q)
            };
            create_prepared(st, t, merged, opts)
        }
        Some(old) => {
            let mut merged = merged;
            merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            let opts = WriteOptions {
                record: false,
                ..WriteOptions::from_query(q)
            };
            update_stored(st, t, &old, merged, opts)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// delete

/// Decoded `DeleteOptions` (body and query parameters).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `propagationPolicy` (or `Orphan` from `orphanDependents=true`).
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
    /// `dryRun: ["All"]` or `?dryRun=All`.
    pub dry_run: bool,
}

impl DeleteOptions {
    /// From an optional JSON body and the query.
    pub fn parse(body: Option<&Value>, q: &Query) -> Result<Self, ApiError> {
        q.check_write_options("DeleteOptions")?;
        let mut o = DeleteOptions {
            grace_period: q.int("gracePeriodSeconds")?,
            propagation: q.non_empty("propagationPolicy").map(str::to_owned),
            dry_run: q.dry_run(),
            ..Default::default()
        };
        if q.flag("orphanDependents")? {
            o.propagation = Some("Orphan".into());
        }
        if let Some(b) = body.filter(|b| b.is_object()) {
            if let Some(g) = b["gracePeriodSeconds"].as_i64() {
                o.grace_period = Some(g);
            }
            if let Some(p) = b["propagationPolicy"].as_str() {
                o.propagation = Some(p.to_owned());
            }
            if b["orphanDependents"].as_bool() == Some(true) && o.propagation.is_none() {
                o.propagation = Some("Orphan".into());
            }
            o.precondition_uid = b["preconditions"]["uid"].as_str().map(str::to_owned);
            o.precondition_rv = b["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            if b["dryRun"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == "All"))
            {
                o.dry_run = true;
            }
        }
        if let Some(p) = &o.propagation
            && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::invalid(
                "DeleteOptions",
                "meta.k8s.io",
                "",
                vec![Cause::new(
                    "FieldValueNotSupported",
                    "propagationPolicy",
                    format!(
                        "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                    ),
                )],
            ));
        }
        Ok(o)
    }
}

/// Removes a stored object and runs what its disappearance triggers: a CRD takes its custom
/// resources with it, and the last object leaving a terminating namespace lets the namespace go.
pub fn remove_object(
    st: &mut State,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    last: Option<Value>,
) -> Option<Value> {
    let removed = st.delete_as(&def.storage, ns, name, last)?;
    def.strategy.get().after_remove(st, &removed);
    if def.namespaced && !ns.is_empty() {
        resourcequotas::refresh(st, ns);
        namespaces::finish_if_empty(st, ns);
    }
    Some(removed)
}

fn add_finalizer(obj: &mut Value, f: &str) {
    let mut fins = finalizers_of(obj);
    if !fins.iter().any(|x| x == f) {
        fins.push(f.to_owned());
    }
    obj["metadata"]["finalizers"] = json!(fins);
}

fn remove_finalizer(obj: &mut Value, f: &str) {
    let fins: Vec<String> = finalizers_of(obj).into_iter().filter(|x| x != f).collect();
    if fins.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        obj["metadata"]["finalizers"] = json!(fins);
    }
}

/// DELETE on one object (the algorithm of the generic store's `Delete`).
pub fn delete_one(st: &mut State, t: &Target, opts: &DeleteOptions) -> Result<Answer, ApiError> {
    let def = t.def.clone();
    let name = t.name().to_owned();
    let old = st
        .get(&def.storage, t.ns_key(), &name)
        .cloned()
        .ok_or_else(|| t.not_found())?;
    let strategy = def.strategy.get();
    check_delete_preconditions(&def, &name, &old, opts)?;
    let deleted_answer = |obj: &Value| -> Value {
        if def.return_deleted_object {
            present(&def, obj)
        } else {
            success_status(&name, &def.group, &def.plural, meta_str(obj, "uid"))
        }
    };
    let already_deleting = !meta_str(&old, "deletionTimestamp").is_empty();
    let mut obj = old.clone();
    if !already_deleting {
        apply_propagation(&mut obj, opts.propagation.as_deref());
    }
    let grace = strategy.graceful_delete_period(&obj, opts.grace_period);
    let holds = !finalizers_of(&obj).is_empty() || strategy.holds_deletion(&obj);
    if holds || grace > 0 {
        if already_deleting {
            let current_grace = obj["metadata"]["deletionGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(0);
            if grace < current_grace && !opts.dry_run {
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                obj["metadata"]["deletionTimestamp"] = json!(meta::time_in(grace));
                if strategy::should_delete(&def, &obj) {
                    let removed = remove_object(st, &def, t.ns_key(), &name, Some(obj));
                    return Ok((200, deleted_answer(&removed.unwrap_or(old)).into()));
                }
                let stored = st.write(&def.storage, obj);
                return Ok((200, present(&def, &stored).into()));
            }
            return Ok((200, present(&def, &old).into()));
        }
        obj["metadata"]["deletionTimestamp"] = json!(meta::time_in(grace));
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if let Some(g) = obj["metadata"]["generation"].as_i64()
            && g > 0
        {
            obj["metadata"]["generation"] = json!(g + 1);
        }
        strategy.prepare_for_delete(&mut obj);
        if opts.dry_run {
            return Ok((200, present(&def, &obj).into()));
        }
        let stored = st.write(&def.storage, obj);
        strategy.after_delete_marked(st, &stored);
        // The hook may have changed the object, or let it go.
        return Ok(match st.get(&def.storage, t.ns_key(), &name) {
            Some(now) => (200, present(&def, now).into()),
            None => (200, present(&def, &stored).into()),
        });
    }
    if opts.dry_run {
        return Ok((200, deleted_answer(&old).into()));
    }
    let removed = remove_object(st, &def, t.ns_key(), &name, None).unwrap_or(old);
    Ok((200, deleted_answer(&removed).into()))
}

/// The checks before a DELETE touches anything: the preconditions on UID and
/// resourceVersion the client sent, then the kind's own ([`Strategy::check_delete`]).
fn check_delete_preconditions(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    if let Some(uid) = &opts.precondition_uid
        && uid != meta_str(old, "uid")
    {
        return Err(ApiError::conflict_because(
            &def.plural,
            &def.group,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                meta_str(old, "uid")
            ),
        ));
    }
    if let Some(rv) = &opts.precondition_rv
        && rv != meta_str(old, "resourceVersion")
    {
        return Err(ApiError::conflict_because(
            &def.plural,
            &def.group,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                meta_str(old, "resourceVersion")
            ),
        ));
    }
    def.strategy.get().check_delete(def, name, old)
}

/// Applies the propagation policy to an object about to be deleted: `Orphan` and
/// `Foreground` each put their finalizer on it (and take the other's off).
fn apply_propagation(obj: &mut Value, propagation: Option<&str>) {
    match propagation {
        Some("Orphan") => {
            remove_finalizer(obj, "foregroundDeletion");
            add_finalizer(obj, "orphan");
        }
        Some("Foreground") => {
            remove_finalizer(obj, "orphan");
            add_finalizer(obj, "foregroundDeletion");
        }
        _ => {}
    }
}

/// DELETE on a collection: every object matching the list options, each with the rules of
/// [`delete_one`]; answers with a list of the affected objects.
pub fn delete_collection(
    st: &mut State,
    t: &Target,
    list_opts: &ListOptions,
    opts: &DeleteOptions,
) -> Result<Answer, ApiError> {
    let matching = list(st, t, list_opts)?;
    let mut affected = vec![];
    for item in matching.served(&t.def) {
        let target = Target {
            name: Some(meta_str(&item, "name").to_owned()),
            namespace: item["metadata"]["namespace"].as_str().map(str::to_owned),
            ..t.clone()
        };
        match delete_one(st, &target, opts).map(|(_, body)| body.into_value(&t.def)) {
            Ok(body) if body["kind"] == "Status" => affected.push(item),
            Ok(body) => affected.push(body),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok((
        200,
        json!({
            "kind": t.def.list_kind,
            "apiVersion": t.def.api_version(),
            "metadata": {"resourceVersion": st.resource_version().to_string()},
            "items": affected,
        })
        .into(),
    ))
}

/// A write about to be admitted.
#[derive(Clone, Debug)]
pub enum Write {
    /// POST of an object.
    Create(Value),
    /// PUT of an object.
    Update(Value),
    /// PATCH with a patch document.
    Patch(PatchType, Value),
    /// DELETE of one object.
    Delete(DeleteOptions),
}

impl Write {
    /// Runs the write on the store, unadmitted.
    pub(crate) fn run(&self, st: &mut State, t: &Target, q: &Query) -> Result<Answer, ApiError> {
        match self {
            Write::Create(b) => create(st, t, b.clone(), q),
            Write::Update(b) => update(st, t, b.clone(), q),
            Write::Patch(ty, b) => patch(st, t, *ty, b.clone(), q),
            Write::Delete(o) => delete_one(st, t, o),
        }
    }

    /// Runs the write on `store`, holding its lock only for what reads or changes stored
    /// objects (see the module docs, "Outside the lock"). A dry run, `/scale`, a subresource of
    /// the kind's own, a patch, a delete, or a kind whose strategy reads the store takes the
    /// plain verb under the lock.
    pub(crate) fn run_on(self, store: &Store, t: &Target, q: &Query) -> Result<Answer, ApiError> {
        let outside = !q.dry_run()
            && matches!(t.subresource.as_deref(), None | Some("status"))
            && t.def.strategy.get().store_free_writes();
        match self {
            Write::Create(b) if outside && t.subresource.is_none() && t.name.is_none() => {
                create_outside_lock(store, t, b, q)
            }
            Write::Update(b) if outside => update_outside_lock(store, t, b, q),
            other => store.write_checked(|st| other.run(st, t, q)),
        }
    }

    /// Runs the write on the store as a dry run.
    pub(crate) fn run_dry(
        &self,
        st: &mut State,
        t: &Target,
        q: &Query,
    ) -> Result<Answer, ApiError> {
        match self {
            Write::Delete(o) => {
                let mut o = o.clone();
                o.dry_run = true;
                delete_one(st, t, &o)
            }
            _ => self.run(st, t, &q.for_dry_run()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// outside the lock

/// How many times a write computed outside the lock is computed again when the object changed
/// before it could be stored (kube's `GuaranteedUpdate` retries the same way), before the write
/// is run under the lock instead.
const OPTIMISTIC_ATTEMPTS: usize = 5;

/// POST with the state-free work outside the store's lock: the body's intake, the kind's
/// validation and defaults, the metadata rules and the managed-fields record. The lock is taken
/// twice, briefly: to check the namespace ([`strategy::prepare_create`]) and to store.
fn create_outside_lock(
    store: &Store,
    t: &Target,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    q.check_write_options("CreateOptions")?;
    let obj = create_intake(t, body, q)?;
    let opts = WriteOptions::from_query(q);
    let generated = is_generated(&obj);
    let obj = store.read(|st| strategy::prepare_create(st, &t.def, obj, t.namespace.as_deref()))?;
    let obj = decide_create(None, t, obj, &opts)?;
    match store.write_checked(|st| store_create(st, t, obj, generated, &opts))? {
        Created::Stored(stored) => Ok((201, Served::Stored(stored))),
        Created::DryRun(obj) => Ok((201, present(&t.def, &obj).into())),
    }
}

/// PUT (of an object or its `/status`) computed outside the store's lock against the stored
/// object as it was read, then stored with a compare-and-swap: if the object changed in
/// between, the update is computed again against the new one (a client's stale
/// `resourceVersion` then gets its 409 from [`strategy::prepare_update`], as under the lock).
/// The body's intake runs once, so its warnings are given once.
fn update_outside_lock(
    store: &Store,
    t: &Target,
    body: Value,
    q: &Query,
) -> Result<Answer, ApiError> {
    update_outside_lock_then(store, t, body, q, || {})
}

/// [`update_outside_lock`], running `between` between each decision and its compare-and-swap
/// (where another writer may come in; the tests write there).
fn update_outside_lock_then(
    store: &Store,
    t: &Target,
    body: Value,
    q: &Query,
    mut between: impl FnMut(),
) -> Result<Answer, ApiError> {
    q.check_write_options("UpdateOptions")?;
    let def = &t.def;
    let mut body = body;
    validation::check_unknown_fields(def, &mut body, q)?;
    let new = intake(def, body)?;
    let opts = WriteOptions::from_query(q);
    for _ in 0..OPTIMISTIC_ATTEMPTS {
        let Some(old) = store.read(|st| st.get_shared(&def.storage, t.ns_key(), t.name())) else {
            // Not found, or created by this PUT: the plain verb decides, under the lock.
            break;
        };
        let decided = decide_update(None, t, &old, new.clone(), &opts)?;
        let (result, remove) = match decided {
            Decided::Answer(a) => return Ok(a),
            Decided::Store(r) => (r, false),
            Decided::Remove(r) => (r, true),
        };
        between();
        let written = store.write_checked(|st| {
            let current = st.get_shared(&def.storage, t.ns_key(), t.name());
            if !current.is_some_and(|c| Arc::ptr_eq(&c, &old) || rv_of(&c) == rv_of(&old)) {
                return Ok::<_, ApiError>(None);
            }
            Ok(Some(if remove {
                store_update_removal(st, t, result)
            } else {
                store_update(st, t, result)
            }))
        })?;
        if let Some(w) = written {
            return Ok(w.answer(def));
        }
    }
    store.write_checked(|st| update_intaken(st, t, new, q))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    /// [`ListJson`] writes exactly the bytes of the `<Kind>List` built from copies of the
    /// served items, with and without `continue` and `remainingItemCount`, empty or not, and
    /// for a view it does not present itself (events.k8s.io/v1).
    #[test]
    fn a_list_serialized_from_the_stored_objects_matches_the_copied_one() {
        let registry = Registry::builtins();
        let pods = registry.lookup("", "v1", "pods").unwrap();
        let events = registry.lookup("events.k8s.io", "v1", "events").unwrap();
        let stored = [
            json!({"metadata": {"name": "a", "namespace": "x"}, "spec": {"zz": 1}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}),
            json!({"type": "Normal", "involvedObject": {"name": "p"}, "metadata": {"name": "e"}}),
        ];
        let pages = [
            (vec![], None, None),
            (stored.to_vec(), None, None),
            (stored[..1].to_vec(), Some("tok".to_owned()), Some(7)),
        ];
        for def in [&pods, &events] {
            for (items, continue_token, remaining) in &pages {
                let result = ListResult {
                    items: items
                        .iter()
                        .cloned()
                        .map(|v| Arc::new(Stored::new(v)))
                        .collect(),
                    resource_version: 42,
                    continue_token: continue_token.clone(),
                    remaining: *remaining,
                };
                let copied = list_json(def, &result, result.served(def));
                assert_eq!(
                    serde_json::to_string(&ListJson::new(def, &result)).unwrap(),
                    serde_json::to_string(&def.ordered(&copied)).unwrap(),
                    "{} {continue_token:?}",
                    def.kind
                );
            }
        }
    }

    #[test]
    fn a_write_that_changes_only_managed_field_times_is_recognised() {
        let obj = |time: &str, v: &str| {
            json!({"metadata": {"name": "a", "managedFields": [
                {"manager": "m", "operation": "Update", "time": time}]}, "data": {"k": v}})
        };
        assert!(same_except_managed_times(
            &obj("2024-01-01T00:00:00Z", "1"),
            &obj("2025-01-01T00:00:00Z", "1")
        ));
        assert!(!same_except_managed_times(
            &obj("2024-01-01T00:00:00Z", "1"),
            &obj("2024-01-01T00:00:00Z", "2")
        ));
        let mut other_manager = obj("2024-01-01T00:00:00Z", "1");
        other_manager["metadata"]["managedFields"][0]["manager"] = json!("n");
        assert!(!same_except_managed_times(
            &obj("2024-01-01T00:00:00Z", "1"),
            &other_manager
        ));
        let mut extra_label = obj("2024-01-01T00:00:00Z", "1");
        extra_label["metadata"]["labels"] = json!({"x": "y"});
        assert!(!same_except_managed_times(
            &obj("2024-01-01T00:00:00Z", "1"),
            &extra_label
        ));
        let mut no_time = obj("2024-01-01T00:00:00Z", "1");
        no_time["metadata"]["managedFields"][0]
            .as_object_mut()
            .unwrap()
            .remove("time");
        assert!(same_except_managed_times(
            &obj("2024-01-01T00:00:00Z", "1"),
            &no_time
        ));
    }

    /// A store with namespace `default` and ConfigMap `default/cm` (`data.k: "0"`), and a
    /// target naming that ConfigMap.
    fn store_with_a_configmap() -> (Store, Target) {
        let store = Store::new(100);
        let def = store.read(|st| st.registry.lookup("", "v1", "configmaps").unwrap());
        store.write(|st| {
            st.create("core/namespaces", json!({"metadata": {"name": "default"}}));
            st.create(
                "core/configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "default", "uid": "u1"},
                    "data": {"k": "0"}}),
            );
        });
        let target = Target {
            def,
            namespace: Some("default".into()),
            name: Some("cm".into()),
            subresource: None,
        };
        (store, target)
    }

    fn configmap(rv: Option<u64>, value: &str) -> Value {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": value}});
        if let Some(rv) = rv {
            cm["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        cm
    }

    /// An update decided outside the lock is stored only if the object it was decided against
    /// is still the stored one: a write that came in between makes a conditional update 409
    /// (its `resourceVersion` is stale now), as under the lock, instead of overwriting it.
    #[test]
    fn an_update_whose_object_changed_meanwhile_gets_409_when_conditional() {
        let (store, target) = store_with_a_configmap();
        assert!(target.def.strategy.get().store_free_writes());
        let rv = store.read(|st| rv_of(st.get("core/configmaps", "default", "cm").unwrap()));
        let q = Query::parse(None);
        let mut interloper = Some(configmap(None, "interloper"));
        let err =
            update_outside_lock_then(&store, &target, configmap(Some(rv), "mine"), &q, || {
                if let Some(body) = interloper.take() {
                    let q = Query::parse(None);
                    store
                        .write_checked(|st| update(st, &target, body, &q))
                        .unwrap();
                }
            })
            .unwrap_err();
        assert_eq!(err.code, 409, "{err:?}");
        let stored = store.read(|st| st.get("core/configmaps", "default", "cm").cloned());
        assert_eq!(stored.unwrap()["data"]["k"], "interloper");
    }

    /// An unconditional update (no `resourceVersion`) whose object changed before it could be
    /// stored is decided again against the new object and stored on top of it: one write each,
    /// and the decision ran twice.
    #[test]
    fn an_unconditional_update_is_decided_again_against_the_new_object() {
        let (store, target) = store_with_a_configmap();
        let before = store.read(|st| st.resource_version());
        let q = Query::parse(None);
        let mut decisions = 0;
        let (code, answer) =
            update_outside_lock_then(&store, &target, configmap(None, "mine"), &q, || {
                decisions += 1;
                if decisions == 1 {
                    let q = Query::parse(None);
                    store
                        .write_checked(|st| update(st, &target, configmap(None, "other"), &q))
                        .unwrap();
                }
            })
            .unwrap();
        assert_eq!((code, decisions), (200, 2));
        let answer = answer.into_value(&target.def);
        assert_eq!(answer["data"]["k"], "mine");
        assert_eq!(
            answer["metadata"]["resourceVersion"],
            (before + 2).to_string()
        );
        let history = store.read(|st| st.changes_since(before).unwrap());
        let values: Vec<&str> = history
            .iter()
            .map(|c| c.object.value()["data"]["k"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(values, ["other", "mine"]);
    }

    #[test]
    fn generated_names_are_retried_until_one_is_free() {
        let taken = ["web-aaaaa", "web-bbbbb", "web-ccccc"];
        let mut next = ["web-bbbbb", "web-ccccc", "web-ddddd"].into_iter();
        let name = pick_generated_name(
            "web-aaaaa".into(),
            |n| taken.contains(&n),
            || next.next().unwrap_or_default().to_owned(),
        );
        assert_eq!(name.as_deref(), Some("web-ddddd"));
    }

    #[test]
    fn generation_gives_up_after_eight_attempts() {
        let mut calls = 0;
        let name = pick_generated_name(
            "x".into(),
            |_| true,
            || {
                calls += 1;
                format!("x{calls}")
            },
        );
        assert_eq!(name, None);
        assert_eq!(calls, MAX_NAME_GENERATION_ATTEMPTS - 1);
    }
}
