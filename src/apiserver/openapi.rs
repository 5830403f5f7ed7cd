//! `/openapi/v3`: the documents `kubectl apply -f` and `kubectl create -f` download first.
//!
//! kubectl validates manifests by default (`--validate=strict`) and, before writing, checks in
//! the OpenAPI v3 document of the object's group-version that the server accepts the
//! `fieldValidation` parameter; if so it leaves validation to the server. Without these
//! documents those commands fail with `failed to download openapi`. The documents themselves
//! are built by [`super::logic::openapi`]; this module serves them from the live resource table,
//! so a new CRD's group-version appears in the index (with a new hash, which invalidates
//! clients' caches) as soon as the CRD exists.
//!
//! `/openapi/v2` is served as an *empty* Swagger 2.0 document (no definitions), in protobuf
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, what kubectl asks for) or
//! JSON. kubectl up to 1.29 downloads it unconditionally before validating a manifest and fails
//! if it is missing; with no definitions in it, its client-side validation skips every kind
//! ("resource is not present, let's just skip validation") and the `fieldValidation` check
//! against the v3 documents sends it to server-side validation, as with newer versions. The
//! price: `kubectl explain` has nothing to show.

use std::sync::Arc;

use serde_json::Value;

use super::Shared;
use super::http::{Body, json_response};
use super::logic::openapi::{OpenApiKind, gv_document, v3_index};
use super::query::Query;
use super::registry::Registry;
use super::status::ApiError;

fn group_versions(reg: &Registry) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for d in reg.all() {
        let gv = d.api_version();
        if !out.contains(&gv) {
            out.push(gv);
        }
    }
    out
}

/// The media type kubectl asks `/openapi/v2` for.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The empty Swagger 2.0 document `{swagger: "2.0", info: {title: "Kubernetes", version}}` as
/// an `openapi_v2.Document` protobuf message (field 1 `swagger`, field 2 `info` with its
/// field 1 `title` and field 2 `version`).
pub fn v2_protobuf() -> Vec<u8> {
    fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let mut info = field(0x0a, b"Kubernetes");
    info.extend(field(0x12, b"v1.33.0"));
    let mut doc = field(0x0a, b"2.0");
    doc.extend(field(0x12, &info));
    doc
}

/// Serves `/openapi/v2` (protobuf when asked for it, JSON otherwise).
pub fn serve_v2(accept: &str) -> http::Response<Body> {
    if accept.contains(V2_PROTOBUF) {
        let mut resp = http::Response::new(http_body_util::BodyExt::boxed(
            http_body_util::Full::new(bytes::Bytes::from(v2_protobuf())),
        ));
        // The `@` of the requested type is not valid in a response Content-Type (Go's
        // mime.ParseMediaType rejects it); kube-openapi answers with this spelling.
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            ),
        );
        return resp;
    }
    json_response(
        200,
        &serde_json::json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": {}}),
        "application/json",
    )
}

/// A fingerprint of everything the documents are built from.
fn fingerprint(reg: &Registry) -> String {
    let mut s = String::new();
    for d in reg.all() {
        s.push_str(&d.api_version());
        s.push('/');
        s.push_str(&d.plural);
        if let Some(c) = &d.custom {
            s.push_str(&c.schema.as_ref().map(Value::to_string).unwrap_or_default());
        }
        s.push(';');
    }
    s
}

/// Serves `/openapi/v3` (`rest` empty) and `/openapi/v3/api/v1`, `/openapi/v3/apis/<g>/<v>`.
pub fn serve(
    shared: &Arc<Shared>,
    rest: &[&str],
    _query: &Query,
) -> Result<http::Response<Body>, ApiError> {
    let reg = shared.store.read(|s| s.registry.clone());
    let (group, version) = match rest {
        [] => {
            let index = v3_index(&group_versions(&reg), &fingerprint(&reg));
            return Ok(json_response(200, &index, "application/json"));
        }
        ["api", "v1"] => ("", "v1"),
        ["apis", g, v] => (*g, *v),
        _ => return Err(ApiError::page_not_found()),
    };
    let defs = reg.in_group_version(group, version);
    if defs.is_empty() {
        return Err(ApiError::page_not_found());
    }
    let kinds: Vec<OpenApiKind> = defs
        .iter()
        .map(|d| {
            let mut subresources = vec![];
            if d.status_subresource {
                subresources.push("status".to_owned());
            }
            if d.scale.is_some() {
                subresources.push("scale".to_owned());
            }
            OpenApiKind {
                group: d.group.clone(),
                version: d.version.clone(),
                kind: d.kind.clone(),
                plural: d.plural.clone(),
                namespaced: d.namespaced,
                schema: d
                    .custom
                    .as_ref()
                    .and_then(|c| c.schema.clone())
                    .unwrap_or(Value::Null),
                subresources,
            }
        })
        .collect();
    let gv = defs[0].api_version();
    Ok(json_response(
        200,
        &gv_document(&gv, &kinds),
        "application/json",
    ))
}
