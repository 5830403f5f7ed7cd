//! `/openapi/v3`: the documents `kubectl apply -f` and `kubectl create -f` download first.
//!
//! kubectl validates manifests by default (`--validate=strict`) and, before writing, checks in
//! the OpenAPI v3 document of the object's group-version that the server accepts the
//! `fieldValidation` parameter; if so it leaves validation to the server. Without these
//! documents those commands fail with `failed to download openapi`. The documents themselves
//! are built by [`crate::endpoints::openapi_docs`]; this module serves them from the live resource table,
//! so a new CRD's group-version appears in the index (with a new hash, which invalidates
//! clients' caches) as soon as the CRD exists.
//!
//! `/openapi/v2` serves the Swagger 2.0 document of [`crate::endpoints::openapi_v2_docs`], in protobuf
//! (what kubectl asks for) or JSON: kubectl up to 1.28 downloads it unconditionally before
//! validating a manifest, fails without it, and finds there the same `fieldValidation`
//! parameter that sends it to server-side validation.
//!

use std::sync::Arc;

use serde_json::Value;

use crate::api::query::Query;
use crate::api::status::ApiError;
use crate::endpoints::Shared;
use crate::endpoints::handlers::{Body, json_response};
use crate::endpoints::openapi_docs::{OpenApiKind, gv_document, v3_index};
use crate::endpoints::openapi_v2_docs;
use crate::registry::resources::Registry;

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

/// The OpenAPI description of every served kind.
fn kinds(defs: &[Arc<crate::registry::resources::ResourceDef>]) -> Vec<OpenApiKind> {
    defs.iter()
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
        .collect()
}

/// Serves `/openapi/v2` (protobuf when asked for it, JSON otherwise).
pub fn serve_v2(shared: &Arc<Shared>, accept: &str) -> http::Response<Body> {
    let reg = shared.store.read(|s| s.registry.clone());
    let kinds = kinds(reg.all());
    if accept.contains(openapi_v2_docs::PROTOBUF_CONTENT_TYPE) {
        let body = openapi_v2_docs::v2_document_protobuf(&kinds);
        let mut resp = http::Response::new(http_body_util::BodyExt::boxed(
            http_body_util::Full::new(bytes::Bytes::from(body)),
        ));
        // The `@` of the requested type is not valid in a response Content-Type (Go's
        // mime.ParseMediaType rejects it, and client-go then fails the request), so the
        // response uses kube-openapi's dotted spelling.
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
        &openapi_v2_docs::v2_document(&kinds),
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
    let kinds = kinds(&defs);
    let gv = defs[0].api_version();
    Ok(json_response(
        200,
        &gv_document(&gv, &kinds),
        "application/json",
    ))
}
