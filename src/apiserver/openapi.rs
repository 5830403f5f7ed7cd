//! `/openapi/v3`: the documents `kubectl apply -f` and `kubectl create -f` download first.
//!
//! kubectl validates manifests by default (`--validate=strict`) and, before writing, checks in
//! the OpenAPI v3 document of the object's group-version that the server accepts the
//! `fieldValidation` parameter; if so it leaves validation to the server. Without these
//! documents those commands fail with `failed to download openapi`. The documents themselves
//! are built by [`super::logic::openapi`]; this module serves them from the live resource table,
//! so a new CRD's group-version appears in the index (with a new hash, which invalidates
//! clients' caches) as soon as the CRD exists.

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
