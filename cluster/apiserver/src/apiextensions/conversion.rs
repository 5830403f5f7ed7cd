//! # CRD conversion webhooks
//!
//! A CustomResourceDefinition may serve several versions of one kind whose schemas really
//! differ (`v1alpha1` with `spec.command`, `v1` with `spec.run.command`). The objects are kept
//! in **one** version, the *storage version* (`spec.versions[].storage: true`), and with
//! `spec.conversion.strategy: Webhook` the server asks an HTTPS webhook to translate between
//! versions whenever a client reads or writes in another one. This module is that machinery
//! (kube-apiserver's `apiextensions-apiserver/pkg/apiserver/conversion`: `webhook_converter.go`,
//! `converter.go`; the validation of `pkg/apis/apiextensions/validation`; the wiring of
//! `pkg/apiserver/customresource_handler.go`). `strategy: None` keeps what the server did
//! before: versions differ only in `apiVersion`, which is rewritten on the way out.
//!
//! ## The CRD's `spec.conversion` (validated as the real server does)
//!
//! ```yaml
//! conversion:
//!   strategy: Webhook            # or None (the default)
//!   webhook:
//!     conversionReviewVersions: ["v1", "v1beta1"]  # required; must include v1 or v1beta1
//!     clientConfig:              # exactly one of url / service
//!       url: https://host:port/convert
//!       service: {namespace: ns, name: svc, path: /convert, port: 443}  # port defaults to 443
//!       caBundle: <base64 PEM>   # trusted for this webhook alone (empty: the system roots)
//! ```
//!
//! Field errors carry the paths of the server's internal type, as `kubectl` shows them:
//! `spec.conversion.webhookClientConfig: Required value: required when strategy is set to
//! Webhook`, `spec.conversion.webhookClientConfig: Required value: exactly one of url or
//! service is required`, `spec.conversion.conversionReviewVersions: Invalid value:
//! []string{"v2"}: must include at least one of v1, v1beta1`, `... Invalid value: "v1":
//! duplicate version`; with `strategy: None`, a `webhook` is `Forbidden: should not be set when
//! strategy is not set to Webhook`; `spec.conversion.strategy: Unsupported value: "X":
//! supported values: "None", "Webhook"`; and `spec.conversion.strategy: Invalid value:
//! "Webhook": must be None if spec.preserveUnknownFields is true`. URL and service checks are
//! the admission webhooks' ([`crate::admission::config`]).
//!
//! ## Where conversion happens (the real server's order)
//!
//! The real server handles a request entirely **in the request's version**: the body is
//! decoded, pruned and defaulted with that version's schema, admission webhooks see it in that
//! version, validation uses that version's schema (and the old object of an update is first
//! converted *to* the request's version), and only the storage layer converts the result *to the
//! storage version* when it encodes it for etcd. Reading decodes from etcd and converts each
//! object to the version the client asked for. This server does the same:
//!
//! ```text
//! write in V (storage S):  old (stored, any version) ──webhook──▶ old in V
//!                          body in V ─▶ admission / defaults / schema of V / update rules
//!                          result in V ──webhook──▶ result in S ─▶ stored (compare-and-swap)
//!                          stored ──webhook──▶ answer in V
//! read in V:               stored (any version) ──webhook──▶ V      (GET, LIST, WATCH events)
//! ```
//!
//! * **Stored objects keep their `apiVersion`.** An object written before the CRD switched its
//!   storage version stays in the old version until it is written again, and is converted on
//!   every read whose version differs; `status.storedVersions` lists every version objects may
//!   be stored in (the storage version is added whenever the CRD is created or updated, and
//!   never removed by the server: a migration removes old entries through `/status`).
//! * **No call when the versions match**: an object already in the requested version is
//!   served as is, and an empty batch sends nothing.
//! * **LIST** sends every item that needs conversion in **one** `ConversionReview` (items
//!   already in the requested version are left out), as `webhookConverter.Convert` does for an
//!   `UnstructuredList`.
//! * **WATCH** converts each event's object; a failed conversion ends the stream (the real
//!   watch server logs `unable to encode watch object` and returns, without an `ERROR` event),
//!   and client-go's reflector then re-lists.
//! * The write's compare-and-swap: the webhook is called outside the store lock, so the stored
//!   object may change meanwhile; the write is then computed again (up to
//!   [`CONFLICT_RETRIES`] times, as `GuaranteedUpdate` retries), and a client's own stale
//!   `resourceVersion` still gets the usual 409.
//!
//! ## The webhook call and its checks
//!
//! The request is `ConversionReview` in the first of `conversionReviewVersions` this server
//! speaks (`v1`, `v1beta1`): `{request: {uid, desiredAPIVersion, objects}}`, POSTed through the
//! admission webhooks' transport ([`crate::webhook::client::ClientManager::post_json`]: the
//! `caBundle`, `--service-endpoint` resolution of `clientConfig.service`, pooled connections,
//! the 16 MiB answer bound) with a **30 s** timeout (`webhook.defaultRequestTimeout`, sent as
//! `?timeout=30s`; [`crate::ApiServerBuilder::conversion_webhook_timeout`] changes it). The
//! answer must be a `ConversionReview` of the version sent, carry the request's `uid` (v1
//! only, as the real server skips both checks for v1beta1), have `result.status: Success`,
//! and return exactly as many objects as were sent, each in the desired version, of the same
//! kind, name, namespace and uid. Metadata is the server's: the converted objects get the
//! original metadata back, except labels and annotations, which the webhook may change.
//!
//! Every failure reads as the real server's `fmt.Errorf` text, with the input's GVK:
//!
//! ```text
//! conversion webhook for cnat.programming-kubernetes.info/v1, Kind=At failed: Post "https://127.0.0.1:9443/convert?timeout=30s": dial tcp 127.0.0.1:9443: connect: connection refused
//! conversion webhook for cnat.programming-kubernetes.info/v1, Kind=At failed: <result.message>
//! conversion webhook for ..., Kind=At failed: expected response.uid="…", got "…"
//! conversion webhook for ..., Kind=At returned 2 objects, expected 1
//! conversion webhook for ..., Kind=At returned invalid object at index 0: invalid groupVersion (expected g/v1, received g/v2)
//! ```
//!
//! and is answered `500` with that message (the real server's handlers turn a conversion
//! error, which is not an API status, into a `Failure` Status with code 500), on reads and
//! writes alike.
//!
//! ## What is left out
//!
//! The `/scale` subresource of a non-storage version reads the stored object through the
//! requested version's replica paths (both versions must keep them at the same place); label
//! and field selectors are matched against the stored object; this server keeps no
//! conversion metrics (it keeps none for admission either).
//!
//! Admission webhooks whose rules name another version of a converted CRD
//! (`matchPolicy: Equivalent`) are shown the object and old object converted to that version
//! by this webhook, and a mutating webhook's patch is applied there and converted back
//! ([`crate::admission`]), as the real dispatcher does.

use std::time::Duration;

use serde_json::{Value, json};

use crate::api::object_meta::{self as meta, meta_str};
use crate::api::query::Query;
use crate::api::status::{ApiError, Cause};
use crate::registry::Backend;
use crate::registry::generic::Write;
use crate::registry::generic::{self as verbs, Answer, Served, Target};
use crate::registry::resources::ResourceDef;
pub use crate::registry::resources::WebhookConversion;
use crate::registry::strategy;
use crate::storage::store::rv_of;
use crate::webhook::client::{ClientManager, PostError};
use crate::webhook::endpoint::{self as hookconfig, Endpoint};
use apimachinery::validation::FieldError;

/// The timeout of a conversion call unless configured (`webhook.defaultRequestTimeout`).
pub const DEFAULT_TIMEOUT: Duration = crate::webhook::DEFAULT_CONVERSION_TIMEOUT;

/// How many times a write is computed again after another writer changed the object while the
/// webhook was converting it.
pub const CONFLICT_RETRIES: usize = 5;

/// The `ConversionReview` versions this server speaks, in the order it prefers them.
const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

impl WebhookConversion {
    /// The webhook of a (valid) CRD, if its strategy is `Webhook`.
    pub fn of_crd(crd: &Value) -> Option<Self> {
        let conv = &crd["spec"]["conversion"];
        if conv["strategy"].as_str() != Some("Webhook") {
            return None;
        }
        let cc = &conv["webhook"]["clientConfig"];
        let endpoint = Endpoint::from_client_config(cc);
        let versions = strings(&conv["webhook"]["conversionReviewVersions"]);
        let review_version = versions
            .iter()
            .find(|v| REVIEW_VERSIONS.contains(&v.as_str()))
            .cloned()
            .unwrap_or_else(|| "v1".to_owned());
        Some(WebhookConversion {
            crd_name: meta_str(crd, "name").to_owned(),
            endpoint,
            ca_bundle: cc
                .get("caBundle")
                .and_then(|c| hookconfig::decode_ca(c).ok())
                .unwrap_or_default(),
            review_version,
        })
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Fills the v1 defaults of `spec.conversion`: `strategy: None`, a service's `port: 443`.
pub fn set_defaults(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    if spec.get("conversion").is_none_or(Value::is_null) {
        spec["conversion"] = json!({"strategy": "None"});
    }
    let conv = &mut spec["conversion"];
    if !conv.is_object() {
        return;
    }
    if conv.get("strategy").is_none_or(Value::is_null) {
        conv["strategy"] = json!("None");
    }
    if let Some(svc) = conv
        .get_mut("webhook")
        .and_then(|w| w.get_mut("clientConfig"))
        .and_then(|c| c.get_mut("service"))
        .filter(|s| s.is_object())
        && svc.get("port").is_none_or(Value::is_null)
    {
        svc["port"] = json!(443);
    }
}

/// `validateCustomResourceConversion` (v1: a recognized review version is required): the
/// field errors of a CRD's `spec.conversion`, after defaults.
pub fn validate(spec: &Value) -> Vec<Cause> {
    let mut errs: Vec<FieldError> = vec![];
    let conv = &spec["conversion"];
    if conv.is_null() {
        return vec![];
    }
    let p = "spec.conversion";
    let strategy = conv["strategy"].as_str().unwrap_or_default();
    let webhook = conv.get("webhook").filter(|w| !w.is_null());
    let client_config = webhook
        .and_then(|w| w.get("clientConfig"))
        .filter(|c| !c.is_null());
    let review_versions = webhook
        .and_then(|w| w.get("conversionReviewVersions"))
        .filter(|v| !v.is_null());
    match strategy {
        "Webhook" => {
            match client_config {
                None => errs.push(FieldError::required(
                    format!("{p}.webhookClientConfig"),
                    "required when strategy is set to Webhook",
                )),
                Some(cc) => crate::webhook::endpoint::validate_client_config(
                    cc,
                    &format!("{p}.webhookClientConfig"),
                    &mut errs,
                ),
            }
            validate_review_versions(
                review_versions,
                &format!("{p}.conversionReviewVersions"),
                &mut errs,
            );
            if spec["preserveUnknownFields"].as_bool() == Some(true) {
                errs.push(FieldError::invalid(
                    format!("{p}.strategy"),
                    strategy,
                    "must be None if spec.preserveUnknownFields is true",
                ));
            }
        }
        "None" => {
            if client_config.is_some() {
                errs.push(FieldError::forbidden(
                    format!("{p}.webhookClientConfig"),
                    "should not be set when strategy is not set to Webhook",
                ));
            }
            if review_versions
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                errs.push(FieldError::forbidden(
                    format!("{p}.conversionReviewVersions"),
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{p}.strategy"),
            other,
            &["None", "Webhook"],
        )),
    }
    crate::registry::validation::to_causes(errs)
}

/// `validateConversionReviewVersions`: at least one, no duplicates, DNS-1035 labels, and one
/// this server speaks.
fn validate_review_versions(v: Option<&Value>, p: &str, errs: &mut Vec<FieldError>) {
    let versions: Vec<&str> = v
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::required(p.to_owned(), ""));
        return;
    }
    let mut seen: Vec<&str> = vec![];
    let mut recognized = false;
    for (i, v) in versions.iter().enumerate() {
        if seen.contains(v) {
            errs.push(FieldError::invalid(
                format!("{p}[{i}]"),
                v,
                "duplicate version",
            ));
            continue;
        }
        seen.push(v);
        for e in dns1035_label_errors(v) {
            errs.push(FieldError::invalid(format!("{p}[{i}]"), v, &e));
        }
        recognized |= REVIEW_VERSIONS.contains(v);
    }
    if !recognized {
        let shown = format!(
            "[]string{{{}}}",
            versions
                .iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: p.to_owned(),
            message: format!("Invalid value: {shown}: must include at least one of v1, v1beta1"),
        });
    }
}

/// `IsDNS1035Label`: lower-case alphanumerics and `-`, starting with a letter, ending with an
/// alphanumeric, at most 63 characters.
fn dns1035_label_errors(v: &str) -> Vec<String> {
    let mut out = vec![];
    if v.len() > 63 {
        out.push(apimachinery::validation::max_len_error(63));
    }
    let b = v.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !ok {
        out.push(apimachinery::validation::regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// converting

/// The conversion webhook serving `def`, if its CRD has one.
pub fn webhook_of(def: &ResourceDef) -> Option<&WebhookConversion> {
    def.custom.as_ref()?.conversion.as_deref()
}

fn api_version_of(o: &Value) -> &str {
    o["apiVersion"].as_str().unwrap_or_default()
}

/// An error the client gets: 500 with the conversion error's text, as the real handlers
/// answer an error that is not an API status.
fn failure(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// Converts `objects` to `desired` (`group/version`) through `hook`: one `ConversionReview`
/// for every object not already in that version (none sent when there is none), the answer
/// checked, metadata restored. `gvk` names the input in messages (`g/v, Kind=K`); `list` says
/// whether the objects are a list's items (which words the messages as the real converter's
/// list branch does).
pub async fn convert(
    clients: &ClientManager,
    hook: &WebhookConversion,
    timeout: Duration,
    mut objects: Vec<Value>,
    desired: &str,
    gvk: &str,
    list: bool,
) -> Result<Vec<Value>, ApiError> {
    let indices: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| api_version_of(o) != desired)
        .map(|(i, _)| i)
        .collect();
    if indices.is_empty() {
        return Ok(objects);
    }
    let uid = meta::new_uid();
    let sent: Vec<&Value> = indices.iter().map(|i| &objects[*i]).collect();
    let review = json!({
        "apiVersion": format!("apiextensions.k8s.io/{}", hook.review_version),
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent},
    });
    let failed = |why: String| failure(format!("conversion webhook for {gvk} failed: {why}"));
    let answer = clients
        .post_json(&hook.endpoint, &hook.ca_bundle, timeout, &review)
        .await
        .map_err(|e| match e {
            PostError::Client(e) | PostError::Call(e) => failed(e),
        })?;
    let converted = converted_objects(&answer, &hook.review_version, &uid).map_err(failed)?;
    if converted.len() != indices.len() {
        return Err(failure(format!(
            "conversion webhook for {gvk} returned {} objects, expected {}",
            converted.len(),
            indices.len()
        )));
    }
    let invalid_at = if list {
        "invalid converted object at index"
    } else {
        "invalid object at index"
    };
    for (n, (i, mut out)) in indices.into_iter().zip(converted).enumerate() {
        let original = &objects[i];
        // The real converter reports a list item's index after counting it (1-based), a
        // single object's as 0.
        let shown = if list { n + 1 } else { 0 };
        let got = api_version_of(&out).to_owned();
        if got != desired {
            return Err(failure(format!(
                "conversion webhook for {gvk} returned {invalid_at} {shown}: invalid groupVersion (expected {desired}, received {got})"
            )));
        }
        let (want_kind, got_kind) = (
            original["kind"].as_str().unwrap_or_default(),
            out["kind"].as_str().unwrap_or_default(),
        );
        if want_kind != got_kind {
            return Err(failure(format!(
                "conversion webhook for {gvk} returned {invalid_at} {shown}: invalid kind (expected {want_kind}, received {got_kind})"
            )));
        }
        let invalid = if list {
            format!("returned invalid converted object at index {shown}")
        } else {
            "returned invalid object".to_owned()
        };
        for (field, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
            let (a, b) = (meta_str(original, field), meta_str(&out, field));
            if a != b {
                return Err(failure(format!(
                    "conversion webhook for {gvk} {invalid}: must have the same {what}: {a} != {b}"
                )));
            }
        }
        restore_object_meta(original, &mut out).map_err(|e| {
            let at = if list {
                format!("returned invalid metadata in object at index {shown}")
            } else {
                "returned invalid metadata".to_owned()
            };
            failure(format!("conversion webhook for {gvk} {at}: {e}"))
        })?;
        objects[i] = out;
    }
    Ok(objects)
}

/// `getConvertedObjectsFromResponse`.
fn converted_objects(answer: &Value, version: &str, uid: &str) -> Result<Vec<Value>, String> {
    if version == "v1" {
        let (av, kind) = (
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default(),
        );
        if av != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
            return Err(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {av}, Kind={kind}"
            ));
        }
    }
    let Some(r) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".into());
    };
    if version == "v1" {
        let got = r["uid"].as_str().unwrap_or_default();
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let status = r["result"]["status"].as_str().unwrap_or_default();
    if status != "Success" {
        let message = r["result"]["message"].as_str().unwrap_or_default();
        if !message.is_empty() {
            return Err(message.to_owned());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(r["convertedObjects"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// `restoreObjectMeta`: the original metadata, with the converted object's labels and
/// annotations (which must be string maps, valid if changed).
fn restore_object_meta(original: &Value, converted: &mut Value) -> Result<(), String> {
    let Some(response_meta) = converted.get("metadata") else {
        return Err("missing metadata in converted object".into());
    };
    let Some(response_meta) = response_meta.as_object().cloned() else {
        return Err(format!(
            "invalid metadata of type {} in converted object",
            go_type(&converted["metadata"])
        ));
    };
    let mut restored = original["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        let Some(resp) = response_meta.get(field).filter(|v| !v.is_null()) else {
            restored.remove(field);
            continue;
        };
        let Some(resp_map) = resp.as_object() else {
            return Err(format!(
                "invalid metadata.{field} of type {} in converted object",
                go_type(resp)
            ));
        };
        for (k, v) in resp_map {
            if !v.is_string() {
                return Err(format!(
                    "metadata.{field}[{k}] must be a string, but is {} in converted object",
                    go_type(v)
                ));
            }
        }
        if restored.get(field) != Some(resp) {
            let errs = if field == "labels" {
                apimachinery::validation::validate_labels(resp, "metadata.labels")
            } else {
                apimachinery::validation::validate_annotations(resp, "metadata.annotation")
            };
            if !errs.is_empty() {
                let texts: Vec<String> = errs.iter().map(FieldError::full).collect();
                return Err(if texts.len() == 1 {
                    texts.concat()
                } else {
                    format!("[{}]", texts.join(", "))
                });
            }
        }
        restored.insert(field.to_owned(), resp.clone());
    }
    converted["metadata"] = Value::Object(restored);
    Ok(())
}

fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Converts objects of `def`'s resource to `desired` through its webhook (in one review; `list`:
/// they are a list's items); objects are returned as they are when the CRD has no webhook.
pub async fn convert_all(
    backend: &Backend,
    def: &ResourceDef,
    objects: Vec<Value>,
    desired: &str,
    list: bool,
) -> Result<Vec<Value>, ApiError> {
    let Some(hook) = webhook_of(def) else {
        return Ok(objects);
    };
    let Some(first) = objects.iter().find(|o| api_version_of(o) != desired) else {
        return Ok(objects);
    };
    let kind = if list {
        def.list_kind.clone()
    } else {
        def.kind.clone()
    };
    let gvk = format!("{}, Kind={kind}", api_version_of(first));
    let timeout = backend.webhooks.conversion_timeout;
    // The webhook is shown the objects as a client would be: field sets unfolded.
    let mut objects = objects;
    for o in &mut objects {
        crate::api::folded::unfold(o);
    }
    convert(
        &backend.webhooks.clients,
        hook,
        timeout,
        objects,
        desired,
        &gvk,
        list,
    )
    .await
}

/// One stored object of `def`'s resource as `def` serves it (converted when it is stored in
/// another version).
pub async fn to_served(
    backend: &Backend,
    def: &ResourceDef,
    obj: Value,
) -> Result<Value, ApiError> {
    if webhook_of(def).is_none() || api_version_of(&obj) == def.api_version() {
        return Ok(obj);
    }
    let mut out = convert_all(backend, def, vec![obj], &def.api_version(), false).await?;
    out.pop()
        .ok_or_else(|| failure("conversion webhook returned no object".into()))
}

/// Stored objects of `def`'s resource as `def` serves them, in one review.
pub async fn items_to_served(
    backend: &Backend,
    def: &ResourceDef,
    items: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    if webhook_of(def).is_none() {
        return Ok(items);
    }
    convert_all(backend, def, items, &def.api_version(), true).await
}

/// An answer body as `def` serves it: an object of its kind converted, a list's items
/// converted, anything else (a Status) unchanged.
pub async fn answer_to_served(
    backend: &Backend,
    def: &ResourceDef,
    body: Served,
) -> Result<Served, ApiError> {
    if webhook_of(def).is_none() {
        return Ok(body);
    }
    let body = body.into_value(def);
    let kind = body["kind"].as_str().unwrap_or_default();
    if kind == def.kind {
        return Ok(to_served(backend, def, body).await?.into());
    }
    if kind == def.list_kind
        && let Some(items) = body["items"].as_array().cloned()
    {
        let mut body = body;
        body["items"] = Value::Array(items_to_served(backend, def, items).await?);
        return Ok(body.into());
    }
    Ok(body.into())
}

// ---------------------------------------------------------------------------------------------
// writing

/// Runs `write` on `target` (`dry`: as a dry run). For a resource without a conversion webhook,
/// or a delete, or the `/scale` subresource, this is the plain verb under the store lock; for
/// a create, update or patch of a webhook-converted resource it is the real server's order:
/// the old object converted to the request's version, the write computed (defaulted,
/// validated) there, the result converted to the storage version and stored with a
/// compare-and-swap, and the stored object converted back for the answer.
pub async fn run(
    backend: &Backend,
    target: &Target,
    write: &Write,
    query: &Query,
    dry: bool,
) -> Result<Answer, ApiError> {
    // A trial run (admission's) keeps its warnings apart; a client's own dry run is a dry run
    // all along.
    let trial = dry;
    let dry = dry || query.dry_run();
    let plain = |st: &mut crate::registry::State| {
        if trial {
            write.run_dry(st, target, query)
        } else {
            write.run(st, target, query)
        }
    };
    let Some(storage_version) = target
        .def
        .custom
        .as_ref()
        .filter(|c| c.conversion.is_some())
        .map(|c| c.storage_version.clone())
    else {
        if trial {
            return backend.store.write_checked(plain);
        }
        return write.clone().run_on(&backend.store, target, query);
    };
    if matches!(write, Write::Delete(_)) || target.subresource.as_deref() == Some("scale") {
        let (code, body) = backend.store.write_checked(plain)?;
        return Ok((code, answer_to_served(backend, &target.def, body).await?));
    }
    let def = &target.def;
    let storage_api_version = format!("{}/{storage_version}", def.group);
    let ns = if def.namespaced {
        target.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let mut attempt = 0;
    loop {
        // 1. The current object, in the request's version.
        let (old_rv, old_view) = old_in_request_version(backend, target, write, &ns).await?;
        // 2. The write computed in the request's version, as a dry run (defaults, schema,
        // update rules).
        let dry_query = if trial {
            query.for_dry_run()
        } else {
            query.as_dry_run()
        };
        let (code, computed) = backend.store.write_checked(|st| match (write, &old_view) {
            (Write::Update(b), Some(old)) => {
                verbs::update_against(st, target, old, b.clone(), &dry_query)
            }
            (Write::Patch(ty, b), Some(old)) => {
                verbs::patch_against(st, target, old, *ty, b.clone(), &dry_query)
            }
            _ => write.run(st, target, &dry_query),
        })?;
        let computed = computed.into_value(def);
        if dry {
            return Ok((code, computed.into()));
        }
        if let Some(old) = &old_view
            && computed == *old
        {
            // A no-op write stores nothing.
            return Ok((code, computed.into()));
        }
        // 3. The result in the storage version.
        let mut converted =
            convert_all(backend, def, vec![computed], &storage_api_version, false).await?;
        let to_store = converted
            .pop()
            .ok_or_else(|| failure("conversion webhook returned no object".into()))?;
        // 4. Compare-and-swap.
        let name = meta_str(&to_store, "name").to_owned();
        let stored = compare_and_swap(backend, def, &ns, &name, old_rv, to_store);
        match stored {
            Ok(obj) => {
                return Ok((
                    code,
                    to_served(backend, def, strategy::present(def, &obj))
                        .await?
                        .into(),
                ));
            }
            Err(Swap::Lost(e)) => return Err(e),
            Err(Swap::Retry) => {
                attempt += 1;
                if attempt > CONFLICT_RETRIES {
                    return Err(ApiError::conflict(&def.plural, &def.group, &name));
                }
            }
        }
    }
}

/// Step 1 of a converted write: for an update or a patch, the object as stored now, its
/// resourceVersion and its view in the request's version (converted by the webhook).
async fn old_in_request_version(
    backend: &Backend,
    target: &Target,
    write: &Write,
    ns: &str,
) -> Result<(Option<u64>, Option<Value>), ApiError> {
    let def = &target.def;
    let old_raw: Option<Value> = match (&target.name, write) {
        (Some(name), Write::Update(_) | Write::Patch(..)) => backend
            .store
            .read(|st| st.get(&def.storage, ns, name).cloned()),
        _ => None,
    };
    let old_rv = old_raw.as_ref().map(rv_of);
    let old_view = match &old_raw {
        Some(o) => Some(to_served(backend, def, strategy::present(def, o)).await?),
        None => None,
    };
    Ok((old_rv, old_view))
}

/// Step 4 of a converted write: stores the object (or removes it, when it is being deleted
/// and nothing holds it any more), but only if the stored one is still the one the write was
/// computed from (`old_rv`; `None`: there was none).
fn compare_and_swap(
    backend: &Backend,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    old_rv: Option<u64>,
    to_store: Value,
) -> Result<Value, Swap> {
    backend.store.write_checked(|st| {
        let current = st.get(&def.storage, ns, name).map(rv_of);
        match (old_rv, current) {
            (None, Some(_)) => Err(Swap::Lost(ApiError::already_exists(
                &def.plural,
                &def.group,
                name,
            ))),
            (Some(_), None) => Err(Swap::Lost(ApiError::not_found(
                &def.plural,
                &def.group,
                name,
            ))),
            (Some(a), Some(b)) if a != b => Err(Swap::Retry),
            _ => {
                if strategy::should_delete(def, &to_store) {
                    Ok(
                        verbs::remove_object(st, def, ns, name, Some(to_store.clone()))
                            .unwrap_or(to_store.clone()),
                    )
                } else {
                    Ok(st.write(&def.storage, to_store.clone()).value().clone())
                }
            }
        }
    })
}

enum Swap {
    /// Someone else wrote in between: compute again.
    Retry,
    /// The write cannot happen any more.
    Lost(ApiError),
}

impl From<ApiError> for Swap {
    fn from(e: ApiError) -> Self {
        Swap::Lost(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd_spec(conversion: Value) -> Value {
        json!({"group": "g.example", "conversion": conversion})
    }

    fn messages(spec: &Value) -> Vec<String> {
        validate(spec)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_webhook_strategy_needs_a_client_config_and_a_known_review_version() {
        assert_eq!(
            messages(&crd_spec(json!({"strategy": "Webhook"}))),
            vec![
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
                "spec.conversion.conversionReviewVersions: Required value",
            ]
        );
        let m = messages(&crd_spec(json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "http://x/convert"},
            "conversionReviewVersions": ["v2", "v2"]}})));
        assert_eq!(
            m,
            vec![
                "spec.conversion.webhookClientConfig.url: Invalid value: \"http://x/convert\": 'https' is the only allowed URL scheme",
                "spec.conversion.conversionReviewVersions[1]: Invalid value: \"v2\": duplicate version",
                "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v2\", \"v2\"}: must include at least one of v1, v1beta1",
            ]
        );
        let both = messages(&crd_spec(json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://x/convert", "service": {"namespace": "n", "name": "s"}},
            "conversionReviewVersions": ["v1"]}})));
        assert_eq!(
            both,
            vec![
                "spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required"
            ]
        );
    }

    #[test]
    fn strategy_none_forbids_a_webhook_and_unknown_strategies_are_refused() {
        assert_eq!(
            messages(&crd_spec(json!({"strategy": "None", "webhook": {
                "clientConfig": {"url": "https://x"}, "conversionReviewVersions": ["v1"]}}))),
            vec![
                "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
                "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook",
            ]
        );
        assert_eq!(
            messages(&crd_spec(json!({"strategy": "Magic"}))),
            vec![
                "spec.conversion.strategy: Unsupported value: \"Magic\": supported values: \"None\", \"Webhook\""
            ]
        );
        assert!(messages(&crd_spec(json!({"strategy": "None"}))).is_empty());
    }

    #[test]
    fn defaults_fill_the_strategy_and_the_service_port() {
        let mut crd = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"namespace": "n", "name": "s", "path": "/convert"}},
            "conversionReviewVersions": ["v1beta1", "v1"]}}}});
        set_defaults(&mut crd);
        assert_eq!(
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            443
        );
        let hook = WebhookConversion::of_crd(&crd).expect("a webhook");
        assert_eq!(hook.review_version, "v1beta1");
        assert_eq!(hook.endpoint.url(), "https://s.n.svc:443/convert");
        let mut plain = json!({"spec": {}});
        set_defaults(&mut plain);
        assert_eq!(plain["spec"]["conversion"], json!({"strategy": "None"}));
        assert!(WebhookConversion::of_crd(&plain).is_none());
    }

    #[test]
    fn answers_are_checked_as_the_real_converter_checks_them() {
        let ok = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "u1", "result": {"status": "Success"}, "convertedObjects": [{"a": 1}]}});
        assert_eq!(
            converted_objects(&ok, "v1", "u1"),
            Ok(vec![json!({"a": 1})])
        );
        assert_eq!(
            converted_objects(&ok, "v1", "u2"),
            Err("expected response.uid=\"u2\", got \"u1\"".to_owned())
        );
        let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "u1", "result": {"status": "Failure", "message": "spec.size is gone"}}});
        assert_eq!(
            converted_objects(&failed, "v1", "u1"),
            Err("spec.size is gone".to_owned())
        );
        let bare = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "u1", "result": {"status": "Failure"}}});
        assert_eq!(
            converted_objects(&bare, "v1", "u1"),
            Err("response.result.status was 'Failure', not 'Success'".to_owned())
        );
        let wrong_kind = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
        assert_eq!(
            converted_objects(&wrong_kind, "v1", "u1"),
            Err("expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got admission.k8s.io/v1, Kind=AdmissionReview".to_owned())
        );
        // v1beta1 answers are not checked for kind or uid, as the real server skips them.
        let beta = json!({"response": {"uid": "other", "result": {"status": "Success"}, "convertedObjects": []}});
        assert_eq!(converted_objects(&beta, "v1beta1", "u1"), Ok(vec![]));
    }

    #[test]
    fn metadata_comes_back_from_the_original_except_labels_and_annotations() {
        let original = json!({"metadata": {"name": "a", "uid": "1", "resourceVersion": "7",
            "labels": {"x": "1"}}});
        let mut converted = json!({"metadata": {"name": "a", "uid": "1", "resourceVersion": "99",
            "generation": 5, "annotations": {"g.example/size": "3"}}});
        restore_object_meta(&original, &mut converted).expect("valid metadata");
        assert_eq!(
            converted["metadata"],
            json!({"name": "a", "uid": "1", "resourceVersion": "7",
                   "annotations": {"g.example/size": "3"}})
        );
        let mut bad = json!({"metadata": {"labels": {"x": 1}}});
        assert_eq!(
            restore_object_meta(&original, &mut bad),
            Err("metadata.labels[x] must be a string, but is int64 in converted object".to_owned())
        );
        let mut none = json!({"spec": {}});
        assert_eq!(
            restore_object_meta(&original, &mut none),
            Err("missing metadata in converted object".to_owned())
        );
    }
}
