//! # Admission webhooks
//!
//! kube-apiserver lets a cluster extend its write path with HTTPS callbacks: a
//! `MutatingWebhookConfiguration` names webhooks that may *change* an object before it is
//! stored, a `ValidatingWebhookConfiguration` webhooks that may only *refuse* it. Operators use
//! them to default and validate their custom resources at the door, before anything is stored,
//! instead of discovering a bad spec in a reconcile loop. This module is that machinery
//! (`k8s.io/apiserver/pkg/admission/plugin/webhook`), for both built-in kinds and custom
//! resources.
//!
//! ## A write, with webhooks
//!
//! ```text
//! create / update / patch / delete (after authentication, RBAC, decoding)
//!   1. which webhooks?  rules (operation, group, version, resource[/subresource], scope),
//!                       matchPolicy, namespaceSelector, objectSelector      [config]
//!   2. mutating webhooks, one after another (configurations by name, webhooks in order):
//!        AdmissionReview{request: {object, oldObject, operation, userInfo, dryRun, ...}}
//!        → allowed + JSONPatch, applied to the object before the next webhook sees it;
//!        then once more each `reinvocationPolicy: IfNeeded` webhook that saw an object a later
//!        webhook changed
//!   3. the write as a dry run: defaults, schema and kind validation (422 comes from here)
//!   4. validating webhooks, all at once, shown the object exactly as it would be stored
//!   5. the write for real (for a mutated object: the mutated object, conditional on the
//!      resourceVersion the webhooks saw, retried on a conflict as the real server retries)
//! ```
//!
//! Requests no webhook matches take the plain path ([`crate::registry::generic`]) untouched.
//!
//! ## The rules the real server follows, and so does this one
//!
//! * **Matching** ([`config`]): `*` in operations, groups and versions; `*` resources are
//!   every main resource, `*/*` everything, `*/status` every status subresource; `scope`
//!   `Cluster` / `Namespaced` / `*`. `matchPolicy: Equivalent` (the default) also matches a
//!   request through another view of the same objects (core/v1 events and
//!   `events.k8s.io/v1` events; the served versions of one CRD), and the webhook then gets the
//!   object in the version its rule names, with `requestKind` / `requestResource` saying what the
//!   client used. `Exact` matches only the request's own group, version and resource.
//! * **Selectors.** `namespaceSelector` is matched against the labels of the object's
//!   namespace (a namespace's own labels for a namespace; never exempts a cluster-scoped
//!   object); `objectSelector` against the new *or* the old object's labels.
//! * **`failurePolicy`.** A webhook that cannot be reached, times out, or answers something that
//!   is not a valid review fails the write under `Fail` (the default) with
//!   `500 Internal error occurred: failed calling webhook "NAME": failed to call webhook: Post "URL?timeout=10s": ...`,
//!   and is skipped (logged) under `Ignore`. A *denial* is never ignored.
//! * **Denials** read `admission webhook "NAME" denied the request: MESSAGE` with the code the
//!   webhook put in `status.code` (400 when it gave none or one below 400) and its
//!   `status.details`, so field causes reach `kubectl`.
//! * **`sideEffects` and dry runs.** A `dryRun=All` request is sent with `dryRun: true`, and
//!   only to webhooks declaring `sideEffects: None` or `NoneOnDryRun` — the only values v1
//!   accepts, so in v1 every webhook is called; an object stored through an older API with
//!   another value makes a dry run fail with `400 admission webhook "NAME" does not support dry
//!   run`, as the real dispatcher does.
//! * **`timeoutSeconds`** (default 10, 1..=30) bounds each call; past it the call has failed
//!   (`context deadline exceeded`) and `failurePolicy` decides.
//! * **Warnings** in a response become `Warning: 299 - "..."` headers of the write's answer.
//! * **Validating webhooks** run in parallel; when several refuse, the first in configuration
//!   order is reported (the real server reports the first to finish).
//!
//! The transport (service endpoints, `caBundle`, connection reuse, size and time bounds) is in
//! [`call`].
//!
//! ## What is left out
//!
//! `CONNECT` operations (this server has no exec or port-forward), admission of
//! `deletecollection` item by item (the collection is deleted without calling webhooks), audit
//! annotations, and the in-tree admission plugins. A server-side apply whose object a mutating
//! webhook changes is stored as an update of the mutated object, so its managed fields record
//! that update under the request's field manager.
pub mod config;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::object_meta as meta;
use crate::api::query::Query;
use crate::api::status::ApiError;
use crate::auth::rbac::UserInfo;
use crate::registry::Backend;
use crate::registry::State;
use crate::registry::generic::{self as verbs, Answer, PatchType, Target};
use crate::registry::resources::ResourceDef;
use crate::registry::strategy;
use crate::webhook::Webhooks;

pub mod call;

pub use crate::registry::generic::Write;
pub use call::CallError;
pub use config::{Kind, Webhook};

/// Every webhook of one kind, configurations in name order (the store keeps keys sorted).
pub fn load(st: &State, kind: Kind) -> Vec<Webhook> {
    st.list(&kind.storage(), None)
        .into_iter()
        .flat_map(|c| config::webhooks_of(kind, c))
        .collect()
}

/// A webhook chosen for this request, and the definition it sees the object through
/// (another version under `matchPolicy: Equivalent`, else the request's own).
struct Chosen {
    hook: Webhook,
    def: Arc<ResourceDef>,
}

fn choose(st: &State, hooks: Vec<Webhook>, t: &Target, op: &str) -> Vec<Chosen> {
    if hooks.is_empty() {
        // Most writes of most servers: no configuration to match against.
        return vec![];
    }
    let sub = t.subresource.as_deref().unwrap_or_default();
    let ns = namespace_of(t);
    fn attrs<'a>(
        d: &'a ResourceDef,
        op: &'a str,
        sub: &'a str,
        ns: &'a str,
    ) -> config::RequestAttributes<'a> {
        config::RequestAttributes {
            operation: op,
            group: &d.group,
            version: &d.version,
            resource: &d.plural,
            subresource: sub,
            namespace: ns,
        }
    }
    let equivalents: Vec<Arc<ResourceDef>> = st
        .registry
        .by_storage(&t.def.storage)
        .into_iter()
        .filter(|d| !Arc::ptr_eq(d, &t.def) && **d != *t.def)
        .collect();
    hooks
        .into_iter()
        .filter_map(|hook| {
            if hook.matches_rules(&attrs(&t.def, op, sub, ns)) {
                return Some(Chosen {
                    hook,
                    def: t.def.clone(),
                });
            }
            if !hook.equivalent {
                return None;
            }
            let def = equivalents
                .iter()
                .find(|d| hook.matches_rules(&attrs(d, op, sub, ns)))?
                .clone();
            Some(Chosen { hook, def })
        })
        .collect()
}

fn namespace_of(t: &Target) -> &str {
    if t.def.group.is_empty() && t.def.plural == "namespaces" {
        t.name.as_deref().unwrap_or_default()
    } else if t.def.namespaced {
        t.namespace.as_deref().unwrap_or_default()
    } else {
        ""
    }
}

/// What every webhook of one request is told.
struct Request<'a> {
    target: &'a Target,
    operation: &'static str,
    user: &'a UserInfo,
    dry_run: bool,
    options: Value,
}

impl Request<'_> {
    /// The `request` of an AdmissionReview for `chosen`, with objects shown in its version.
    fn to_json(
        &self,
        chosen: &Chosen,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> (String, Value) {
        let t = self.target;
        let sub = t.subresource.as_deref().unwrap_or_default();
        let kind_of = |d: &ResourceDef| {
            if sub == "scale" {
                json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
            } else {
                json!({"group": d.group, "version": d.version, "kind": d.kind})
            }
        };
        let resource_of =
            |d: &ResourceDef| json!({"group": d.group, "version": d.version, "resource": d.plural});
        let in_hook_version =
            |o: &Value| o["apiVersion"].as_str() == Some(chosen.def.api_version().as_str());
        let show = |o: Option<&Value>| match o {
            Some(o)
                if sub != "scale" && !Arc::ptr_eq(&chosen.def, &t.def) && !in_hook_version(o) =>
            {
                strategy::intake(&t.def, o.clone())
                    .map(|stored| strategy::present(&chosen.def, &stored))
                    .unwrap_or_else(|_| o.clone())
            }
            Some(o) => o.clone(),
            None => Value::Null,
        };
        let uid = meta::new_uid();
        let name = t
            .name
            .clone()
            .or_else(|| object.and_then(|o| o["metadata"]["name"].as_str().map(str::to_owned)))
            .unwrap_or_default();
        let mut r = json!({
            "uid": uid,
            "kind": kind_of(&chosen.def),
            "resource": resource_of(&chosen.def),
            "requestKind": kind_of(&t.def),
            "requestResource": resource_of(&t.def),
            "name": name,
            "operation": self.operation,
            "userInfo": {"username": self.user.name, "groups": self.user.groups},
            "object": show(object),
            "oldObject": show(old),
            "dryRun": self.dry_run,
            "options": self.options,
        });
        if !sub.is_empty() {
            r["subResource"] = json!(sub);
            r["requestSubResource"] = json!(sub);
        }
        if t.def.namespaced
            && let Some(ns) = &t.namespace
        {
            r["namespace"] = json!(ns);
        }
        (uid, r)
    }
}

async fn call_webhook(
    webhooks: &Webhooks,
    req: &Request<'_>,
    chosen: &Chosen,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<call::Verdict, CallError> {
    let hook = &chosen.hook;
    if req.dry_run && hook.side_effects != "None" && hook.side_effects != "NoneOnDryRun" {
        return Err(CallError::Rejected(ApiError::bad_request(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        ))));
    }
    let (uid, request) = req.to_json(chosen, object, old);
    let review = call::review(&hook.review_version, &request);
    call::call(&webhooks.clients, hook, &review, &uid).await
}

/// Whether a call's outcome stops the write: `Ok(Some(verdict))` when the webhook allowed it,
/// `Ok(None)` when the call failed and `failurePolicy: Ignore` says go on, the client's error
/// otherwise.
fn settle(
    hook: &Webhook,
    r: Result<call::Verdict, CallError>,
) -> Result<Option<call::Verdict>, ApiError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(CallError::Calling { webhook, reason }) if hook.ignore_failures => {
            tracing::warn!(webhook = %webhook, %reason, "failed calling webhook, failing open");
            Ok(None)
        }
        Err(e) => Err(e.into_api_error()),
    }
}

fn selected(
    st: &State,
    chosen: Vec<Chosen>,
    t: &Target,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<Vec<Chosen>, ApiError> {
    let ns_labels: Option<BTreeMap<String, String>> =
        if t.def.group.is_empty() && t.def.plural == "namespaces" {
            Some(meta::labels_of(object.or(old).unwrap_or(&Value::Null)))
        } else if t.def.namespaced {
            let ns = t.namespace.as_deref().unwrap_or_default();
            Some(
                st.get("core/namespaces", "", ns)
                    .map(meta::labels_of)
                    .unwrap_or_default(),
            )
        } else {
            None
        };
    let mut out = vec![];
    for c in chosen {
        match c.hook.matches_selectors(ns_labels.as_ref(), object, old) {
            Ok(true) => out.push(c),
            Ok(false) => {}
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "failed calling webhook {:?}: invalid selector: {e}",
                    c.hook.name
                )));
            }
        }
    }
    Ok(out)
}

/// How many times a write whose object a mutating webhook changed is retried after losing a
/// race with another writer (the real server's `GuaranteedUpdate` retries likewise).
const CONFLICT_RETRIES: usize = 5;

/// Runs `write` on `target` through admission: mutating webhooks, validation, validating
/// webhooks, then the store. Without any matching webhook this is the plain verb.
pub async fn write(
    backend: &Backend,
    target: &Target,
    user: &UserInfo,
    write: Write,
    query: &Query,
) -> Result<Answer, ApiError> {
    // Most writes of most servers: no webhook configuration at all and no conversion webhook.
    // The verb then runs on the request's own body rather than a copy.
    let converted = target
        .def
        .custom
        .as_ref()
        .is_some_and(|c| c.conversion.is_some());
    if !converted
        && backend
            .store
            .read(|st| load(st, Kind::Mutating).is_empty() && load(st, Kind::Validating).is_empty())
    {
        return write.run_on(&backend.store, target, query);
    }
    let mut attempt = 0;
    loop {
        match admit_once(backend, target, user, &write, query).await {
            Err(Retry::Conflict(e)) => {
                attempt += 1;
                if attempt > CONFLICT_RETRIES {
                    return Err(e);
                }
            }
            Err(Retry::Final(e)) => return Err(e),
            Ok(a) => return Ok(a),
        }
    }
}

enum Retry {
    /// The precondition this module added lost a race: start over.
    Conflict(ApiError),
    /// The answer.
    Final(ApiError),
}

impl From<ApiError> for Retry {
    fn from(e: ApiError) -> Self {
        Retry::Final(e)
    }
}

/// One attempt at a write through admission: the webhooks that apply, the object they are
/// shown, the mutating webhooks, a dry run, the validating webhooks, then the write itself.
async fn admit_once(
    backend: &Backend,
    target: &Target,
    user: &UserInfo,
    write: &Write,
    query: &Query,
) -> Result<Answer, Retry> {
    let dry_run = match write {
        Write::Delete(o) => o.dry_run,
        _ => query.dry_run(),
    };
    let (old, mutating, validating) = backend.store.read(|st| candidates(st, target, write));
    if mutating.is_empty() && validating.is_empty() {
        return Ok(
            crate::apiextensions::conversion::run(backend, target, write, query, false).await?,
        );
    }
    // The current object in the request's version (stored objects of a CRD with a conversion
    // webhook may be in another).
    let old = match old {
        Some(o) => {
            Some(crate::apiextensions::conversion::to_served(backend, &target.def, o).await?)
        }
        None => None,
    };
    let operation = operation(write, old.is_some());
    let req = Request {
        target,
        operation,
        user,
        dry_run,
        options: request_options(write, operation, query, dry_run),
    };
    if let Write::Patch(ty, _) = write
        && !matches!(ty, PatchType::Apply)
        && old.is_none()
    {
        // Not found: the plain verb answers 404.
        return Ok(
            crate::apiextensions::conversion::run(backend, target, write, query, false).await?,
        );
    }
    // The object as the client asked for it, before the server's own preparation.
    let mut object = requested_object(backend, target, write, query, old.as_ref()).await?;
    // 2. Mutating webhooks, in order; then the IfNeeded ones again if a later one changed the
    // object they saw.
    let before = object.clone();
    let mutating = backend
        .store
        .read(|st| selected(st, mutating, target, object.as_ref(), old.as_ref()))?;
    run_mutating(backend, &req, &mutating, &mut object, old.as_ref(), query).await?;
    // What is written: the request as sent, or, if a webhook changed the object, the object
    // itself, conditional on the version the webhooks were shown.
    let mutated = object != before;
    let effective = if mutated {
        mutated_write(write, object.unwrap_or(Value::Null), old.as_ref())
    } else {
        write.clone()
    };
    // Our own precondition: a conflict means someone wrote in between; start over.
    let ours = mutated && !matches!(write, Write::Create(_) | Write::Update(_));
    let conflict = |e: ApiError| {
        if ours && e.code == 409 {
            Retry::Conflict(e)
        } else {
            Retry::Final(e)
        }
    };
    // 3. Defaults and validation, as a dry run: the object validating webhooks see.
    let dry = crate::apiextensions::conversion::run(backend, target, &effective, query, true)
        .await
        .map_err(conflict)?;
    // 4. Validating webhooks, in parallel.
    let shown = match write {
        Write::Delete(_) => None,
        _ => Some(dry.1.clone().into_value(&target.def)),
    };
    let validating = backend
        .store
        .read(|st| selected(st, validating, target, shown.as_ref(), old.as_ref()))?;
    run_validating(
        backend,
        &req,
        &validating,
        shown.as_ref(),
        old.as_ref(),
        query,
    )
    .await?;
    // 5. The write itself.
    if dry_run {
        return Ok(dry);
    }
    crate::apiextensions::conversion::run(backend, target, &effective, query, false)
        .await
        .map_err(conflict)
}

/// The webhooks that could apply to a write (mutating, validating) and, only when one does,
/// the current object as served at this endpoint (a copy: most writes meet no webhook and
/// need none).
fn candidates(
    st: &State,
    target: &Target,
    write: &Write,
) -> (Option<Value>, Vec<Chosen>, Vec<Chosen>) {
    let exists = target.stored(st).is_some();
    let op = operation(write, exists);
    let m = choose(st, load(st, Kind::Mutating), target, op);
    let v = choose(st, load(st, Kind::Validating), target, op);
    let old = (exists && !(m.is_empty() && v.is_empty()))
        .then(|| verbs::get(st, target, &Query::default()).ok())
        .flatten()
        .map(|(_, o)| o.into_value(&target.def));
    (old, m, v)
}

/// The object the webhooks are shown, as the client asked for it (before the server's own
/// preparation): the body of a create or update (with the URL's namespace), the result of a
/// server-side apply as a dry run, the old object with a patch applied; none for a delete.
async fn requested_object(
    backend: &Backend,
    target: &Target,
    write: &Write,
    query: &Query,
    old: Option<&Value>,
) -> Result<Option<Value>, ApiError> {
    Ok(match write {
        Write::Create(b) | Write::Update(b) => {
            let mut b = b.clone();
            if target.def.namespaced
                && let Some(ns) = &target.namespace
                && b.is_object()
                && b["metadata"]["namespace"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                b["metadata"]["namespace"] = json!(ns);
            }
            Some(b)
        }
        Write::Patch(PatchType::Apply, _) => Some(
            crate::apiextensions::conversion::run(backend, target, write, query, true)
                .await?
                .1
                .into_value(&target.def),
        ),
        // A patch needs the object it patches (the caller answered the missing one).
        Write::Patch(ty, p) => match old {
            Some(base) => {
                let mut view = base.clone();
                verbs::apply_patch_body(*ty, &mut view, p)?;
                Some(view)
            }
            None => None,
        },
        Write::Delete(_) => None,
    })
}

/// The `options` of an `AdmissionReview` request: the `DeleteOptions`, `CreateOptions` or
/// `UpdateOptions` of the write, with `dryRun: ["All"]` for a dry run.
fn request_options(write: &Write, operation: &str, query: &Query, dry_run: bool) -> Value {
    let mut options = match (write, operation) {
        (Write::Delete(o), _) => {
            let mut d = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"});
            if let Some(p) = &o.propagation {
                d["propagationPolicy"] = json!(p);
            }
            if let Some(g) = o.grace_period {
                d["gracePeriodSeconds"] = json!(g);
            }
            d
        }
        (_, "CREATE") => {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": query.field_manager()})
        }
        _ => {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": query.field_manager()})
        }
    };
    if dry_run {
        options["dryRun"] = json!(["All"]);
    }
    options
}

/// Step 2: the mutating webhooks, in order, each shown the object as the previous ones left it;
/// then, once, those with `reinvocationPolicy: IfNeeded` whose view a later webhook changed.
async fn run_mutating(
    backend: &Backend,
    req: &Request<'_>,
    mutating: &[Chosen],
    object: &mut Option<Value>,
    old: Option<&Value>,
    query: &Query,
) -> Result<(), Retry> {
    let target = req.target;
    let mut changes = 0usize;
    let mut seen_at: Vec<Option<usize>> = vec![];
    for c in mutating {
        let (verdict, seen_object) = call_mutating(backend, req, c, object.as_ref(), old).await?;
        seen_at.push(verdict.is_some().then_some(changes));
        if let Some(v) = verdict
            && apply_verdict_seen(backend, c, target, v, object, seen_object, query).await?
        {
            changes += 1;
        }
    }
    for (c, seen) in mutating.iter().zip(seen_at) {
        if c.hook.reinvoke_if_needed && seen.is_some_and(|s| s < changes) {
            let (verdict, seen_object) =
                call_mutating(backend, req, c, object.as_ref(), old).await?;
            if let Some(v) = verdict {
                apply_verdict_seen(backend, c, target, v, object, seen_object, query).await?;
            }
        }
    }
    Ok(())
}

/// Calls one mutating webhook with the object and the old object as it sees them (in the
/// version it asked for). Returns its verdict (`None` when a failure was ignored under
/// `failurePolicy: Ignore`) and the object it was shown, which its patch applies to.
async fn call_mutating(
    backend: &Backend,
    req: &Request<'_>,
    c: &Chosen,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<(Option<call::Verdict>, Option<Value>), Retry> {
    let seen_object = hook_view(backend, req.target, c, object).await?;
    let seen_old = hook_view(backend, req.target, c, old).await?;
    let answer = call_webhook(
        &backend.webhooks,
        req,
        c,
        seen_object.as_ref(),
        seen_old.as_ref(),
    )
    .await;
    Ok((settle(&c.hook, answer)?, seen_object))
}

/// The write that stores what the mutating webhooks made of `object`: a create, or an update
/// conditional on the resourceVersion of the `old` object the webhooks were shown (unless the
/// object states one itself).
fn mutated_write(write: &Write, mut obj: Value, old: Option<&Value>) -> Write {
    match (write, old) {
        (Write::Create(_), _) | (_, None) => Write::Create(obj),
        (_, Some(o)) => {
            let stated = obj["metadata"]["resourceVersion"]
                .as_str()
                .is_some_and(|s| !s.is_empty());
            if !stated && obj.is_object() {
                obj["metadata"]["resourceVersion"] = o["metadata"]["resourceVersion"].clone();
            }
            Write::Update(obj)
        }
    }
}

/// Step 4: the validating webhooks, called in parallel on the object as it would be stored;
/// any refusal is the answer, and their warnings go to the response.
async fn run_validating(
    backend: &Backend,
    req: &Request<'_>,
    validating: &[Chosen],
    shown: Option<&Value>,
    old: Option<&Value>,
    query: &Query,
) -> Result<(), Retry> {
    let target = req.target;
    let mut views = Vec::with_capacity(validating.len());
    for c in validating {
        views.push((
            hook_view(backend, target, c, shown).await?,
            hook_view(backend, target, c, old).await?,
        ));
    }
    let results =
        futures_util::future::join_all(validating.iter().zip(&views).map(|(c, (o, old))| {
            call_webhook(&backend.webhooks, req, c, o.as_ref(), old.as_ref())
        }))
        .await;
    for (c, r) in validating.iter().zip(results) {
        if let Some(v) = settle(&c.hook, r)? {
            for w in v.warnings {
                query.warn(w);
            }
        }
    }
    Ok(())
}

/// `CREATE`, `UPDATE` or `DELETE` for this write, given whether the object exists.
fn operation(write: &Write, exists: bool) -> &'static str {
    match write {
        Write::Create(_) => "CREATE",
        Write::Delete(_) => "DELETE",
        Write::Update(_) | Write::Patch(..) if exists => "UPDATE",
        Write::Update(_) | Write::Patch(..) => "CREATE",
    }
}

/// Whether `chosen` sees the objects of a CRD with a conversion webhook in another version
/// than the request's (`matchPolicy: Equivalent`): they are then converted by that webhook,
/// as the real dispatcher converts to the webhook's version.
fn converts_for(target: &Target, chosen: &Chosen) -> bool {
    !Arc::ptr_eq(&chosen.def, &target.def)
        && *chosen.def != *target.def
        && target.subresource.as_deref() != Some("scale")
        && crate::apiextensions::conversion::webhook_of(&target.def).is_some()
}

/// An object (in the request's version) as `chosen` is shown it: converted through the CRD's
/// conversion webhook when the webhook watches another version, else as is (other views are
/// rendered by [`Request::to_json`]).
async fn hook_view(
    backend: &Backend,
    target: &Target,
    chosen: &Chosen,
    object: Option<&Value>,
) -> Result<Option<Value>, ApiError> {
    match object {
        Some(o) if converts_for(target, chosen) => {
            let mut out = crate::apiextensions::conversion::convert_all(
                backend,
                &target.def,
                vec![o.clone()],
                &chosen.def.api_version(),
                false,
            )
            .await?;
            Ok(out.pop())
        }
        other => Ok(other.cloned()),
    }
}

/// [`apply_verdict`], for a webhook that was shown `seen` (the object converted to its
/// version when [`converts_for`]): the patch is applied to what it saw, and the result is
/// converted back to the request's version.
async fn apply_verdict_seen(
    backend: &Backend,
    chosen: &Chosen,
    target: &Target,
    v: call::Verdict,
    object: &mut Option<Value>,
    seen: Option<Value>,
    query: &Query,
) -> Result<bool, ApiError> {
    if !converts_for(target, chosen) {
        return apply_verdict(&chosen.hook, &chosen.def, target, v, object, query);
    }
    for w in v.warnings {
        query.warn(w);
    }
    let (Some(patch), Some(mut shown), Some(obj)) = (v.patch, seen, object.as_mut()) else {
        return Ok(false);
    };
    crate::registry::patch::json_patch(&mut shown, &patch).map_err(|e| {
        ApiError::internal(format!(
            "admission webhook {:?} returned a patch that cannot be applied: {e}",
            chosen.hook.name
        ))
    })?;
    let back = crate::apiextensions::conversion::convert_all(
        backend,
        &target.def,
        vec![shown],
        &target.def.api_version(),
        false,
    )
    .await?
    .pop()
    .unwrap_or(Value::Null);
    if back == *obj {
        return Ok(false);
    }
    *obj = back;
    Ok(true)
}

/// Applies a mutating webhook's patch (to the object in the webhook's version) and records its
/// warnings; `Ok(true)` if the object changed.
fn apply_verdict(
    hook: &Webhook,
    def: &Arc<ResourceDef>,
    target: &Target,
    v: call::Verdict,
    object: &mut Option<Value>,
    query: &Query,
) -> Result<bool, ApiError> {
    for w in v.warnings {
        query.warn(w);
    }
    let (Some(patch), Some(obj)) = (v.patch, object.as_mut()) else {
        return Ok(false);
    };
    let other_view =
        !Arc::ptr_eq(def, &target.def) && target.subresource.as_deref() != Some("scale");
    let mut shown = if other_view {
        strategy::present(def, &strategy::intake(&target.def, obj.clone())?)
    } else {
        obj.clone()
    };
    crate::registry::patch::json_patch(&mut shown, &patch).map_err(|e| {
        ApiError::internal(format!(
            "admission webhook {:?} returned a patch that cannot be applied: {e}",
            hook.name
        ))
    })?;
    let back = if other_view {
        strategy::present(&target.def, &strategy::intake(def, shown)?)
    } else {
        shown
    };
    if back == *obj {
        return Ok(false);
    }
    *obj = back;
    Ok(true)
}
