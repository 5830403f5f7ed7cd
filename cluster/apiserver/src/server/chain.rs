//! The handler chain: every request, in order, through the filters kube-apiserver composes in
//! `DefaultBuildHandlerChain`, then routing and the handlers ([`crate::endpoints`]):
//!
//! ```text
//! request ─▶ authentication and impersonation   filters::authentication, filters::impersonation
//!         ─▶ priority and fairness (or 429)     filters::flowcontrol
//!         ─▶ body size (or 413)                 filters::body_limit
//!         ─▶ routing                            endpoints::handlers::route: non-resource paths,
//!                                               reviews, or a resource [Target] and its verb
//!            ─▶ authorization (or 403)          filters::authorization, once the URL is resolved
//!            ─▶ injected faults                 filters::faults
//!            ─▶ the handler                     read, write (admission), delete, watch, streams
//! answer  ◀─ errors as Status, APF headers, the request log   filters::request_log
//! ```
//!
//! kube-apiserver's `WithRequestInfo` parses the URL before authorization; here routing does,
//! and the resource handler calls the authorization and fault filters first.
//!
//! [Target]: crate::registry::generic::Target

use std::convert::Infallible;
use std::sync::Arc;

use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;

use crate::api::Body;
use crate::api::json_order::GoOrdered;
use crate::api::query::{ListOptions, Query};
use crate::api::status::ApiError;
use crate::endpoints::Shared;
use crate::endpoints::handlers::{Incoming, json_response, media_type, route};
use crate::filters::authentication::{self, ClientCertIdentity};
use crate::filters::body_limit::read_body;
use crate::filters::flowcontrol;
use crate::filters::request_log::{RequestKey, RequestLabel, non_resource_label};

/// Serves one request; never fails (errors become Status responses).
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let mut class = RequestLabel {
        verb: req.method().as_str().to_ascii_lowercase(),
        resource: req.uri().path().to_owned(),
        ..Default::default()
    };
    let mut resp = match serve(&shared, req, &mut class).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    for (name, value) in [
        (flowcontrol::FLOW_SCHEMA_UID_HEADER, &class.pf.flow_schema),
        (
            flowcontrol::PRIORITY_LEVEL_UID_HEADER,
            &class.pf.priority_level,
        ),
    ] {
        if !value.is_empty()
            && let Ok(v) = HeaderValue::from_str(value)
        {
            resp.headers_mut().insert(name, v);
        }
    }
    if class.resource.starts_with('/') {
        // Not resolved to a resource: label it with its route, never with the raw path.
        class.resource = non_resource_label(&class.resource).to_owned();
    }
    tracing::debug!(
        verb = %class.verb,
        resource = %class.resource,
        subresource = %class.subresource,
        namespace = %class.namespace,
        code = resp.status().as_u16(),
        "request served"
    );
    shared.log.record(RequestKey {
        verb: class.verb,
        resource: class.resource,
        subresource: class.subresource,
        namespace: class.namespace,
        code: resp.status().as_u16(),
    });
    Ok(resp)
}

fn error_response(e: &ApiError) -> Response<Body> {
    if e.plain_text {
        let mut resp = Response::new(
            http_body_util::Full::new(bytes::Bytes::from(format!("{}\n", e.message))).boxed(),
        );
        *resp.status_mut() = StatusCode::from_u16(e.code).unwrap_or(StatusCode::NOT_FOUND);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(secs) = e.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return resp;
    }
    let status = e.to_status();
    let mut resp = json_response(e.code, &GoOrdered::new(&status), "application/json");
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// Serves one request through the stages of the module doc, in order: authenticate (and
/// impersonate), admit under API Priority and Fairness, read the body, then route to a
/// non-resource endpoint, an access review, or a resource verb.
async fn serve(
    shared: &Arc<Shared>,
    req: Request<hyper::body::Incoming>,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_owned();
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let query = Query::parse(req.uri().query()).with_user_agent(&user_agent);
    let cert = req.extensions().get::<Arc<ClientCertIdentity>>().cloned();
    let user = authentication::authenticate(
        &shared.authn,
        &shared.rbac,
        &shared.store,
        &path,
        req.headers(),
        cert.as_deref(),
    )?;
    let query = if shared.rbac.enforced() {
        query.with_requester(user.clone())
    } else {
        query
    };
    // API Priority and Fairness: classified by user and URL, then admitted, queued or
    // refused with 429. The seat is held until this function returns (for a watch: once its
    // initial events are built and the stream is handed to hyper).
    let mut digest = flowcontrol::RequestDigest::new(
        req.method(),
        &path,
        query.flag("watch").unwrap_or(false),
        &user,
    );
    if digest.verb == "list" {
        // A LIST occupies seats by the objects it will process (see `flowcontrol::list_width`).
        let opts = ListOptions::parse(&query, false).ok();
        let stored = stored_count(shared, &path, &digest.api_group, &digest.resource);
        digest.width = flowcontrol::list_width(stored, opts.as_ref());
    }
    let _ticket = shared.flowcontrol.admit(&digest, &mut class.pf).await?;
    let (mut parts, body) = req.into_parts();
    // Taken out before the body is read: an exec, attach or port-forward upgrades the
    // connection once the answer has been sent ([`serve_stream`]).
    let on_upgrade = parts
        .extensions
        .remove::<hyper::upgrade::OnUpgrade>()
        .filter(|_| parts.headers.contains_key(header::UPGRADE));
    let bytes = read_body(&parts.headers, body).await?;
    let request = Incoming {
        path: &path,
        segs: path.split('/').filter(|s| !s.is_empty()).collect(),
        parts: &parts,
        bytes: &bytes,
        accept: parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        content_type: media_type(parts.headers.get(header::CONTENT_TYPE)),
        query,
        user,
        upgrade: std::sync::Mutex::new(on_upgrade),
    };
    route(shared, &request, class).await
}

/// How many objects the resource a collection URL names stores (all namespaces), `None` when
/// the URL names no served resource.
fn stored_count(shared: &Shared, path: &str, group: &str, resource: &str) -> Option<u64> {
    let mut segs = path.split('/').filter(|s| !s.is_empty());
    let version = match (segs.next(), segs.next(), segs.next()) {
        (Some("api"), Some(v), _) => v,
        (Some("apis"), Some(_), Some(v)) => v,
        _ => return None,
    };
    shared.store.read(|s| {
        let def = s.registry.lookup(group, version, resource)?;
        Some(s.count(&def.storage) as u64)
    })
}
