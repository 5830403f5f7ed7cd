//! Routing and the handlers: what a request does once the handler chain
//! ([`crate::server::chain`]) has authenticated it, admitted it and read its body.
//!
//! 1. **Routing**: non-resource paths (`/version`, `/healthz`, `/metrics`, discovery, OpenAPI),
//!    the access and token reviews ([`crate::endpoints::access_review`],
//!    [`crate::endpoints::token_review`]), then resource paths, parsed into a [`Target`] (group,
//!    version, resource, namespace, name, subresource) and a Kubernetes verb from the method
//!    (`GET` on an object → `get`, on a collection → `list` or `watch`, `POST` → `create`, `PUT`
//!    → `update`, `PATCH` → `patch`, `DELETE` → `delete` or `deletecollection`). An unknown
//!    group, version, resource or subresource gets the plain-text `404 page not found`, like the
//!    real server's not-found handler.
//! 2. **Authorization and faults** ([`crate::filters::authorization`],
//!    [`crate::filters::faults`]) once the target is known.
//! 3. **Decoding**: JSON, YAML, or (for built-in kinds) the Kubernetes protobuf envelope that
//!    kubectl ≥ 1.32 sends for typed writes; patches by their media type. Anything else is `415`.
//! 4. **The verb**: reads from the store ([`crate::registry::generic`]), watches
//!    ([`crate::endpoints::watch`]), writes through admission ([`crate::admission`]), and the
//!    subresources a node serves (`log`, `exec`, `attach`, `portforward`: [`crate::kubelet`]).
//! 5. **Encoding**: JSON, or a `meta.k8s.io/v1` Table when the client's `Accept` asks for
//!    `as=Table` (what `kubectl get` does). JSON has kube-apiserver's byte layout: Go's field
//!    order for built-in objects, lists and Status ([`crate::api::json_order`]) and a `\n`
//!    after each body.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::admission::Write;
use crate::api::json_order::GoOrdered;
use crate::api::query::{ListOptions, Query};
use crate::api::status::ApiError;
use crate::endpoints::Shared;
use crate::endpoints::discovery;
use crate::endpoints::watch::{self, WatchSettings};
use crate::filters::authorization::{authorize_path, authorize_resource};
use crate::filters::request_log::RequestLabel;
use crate::registry::generic::{self as verbs, DeleteOptions, PatchType, Served, Target};
use crate::registry::resources::ResourceDef;

pub use crate::api::Body;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json_response<T: serde::Serialize + ?Sized>(
    code: u16,
    body: &T,
    content_type: &str,
) -> Response<Body> {
    // `json.Encoder` ends each document with a newline, and so does kube-apiserver's body.
    let mut bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes.push(b'\n');
    crate::storage::memory::handled(bytes.len());
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// Adds the write's warnings as `Warning: 299 - "<text>"` headers (RFC 7234, as the real server).
fn with_warnings(mut resp: Response<Body>, q: &Query) -> Response<Body> {
    for w in q.warnings() {
        let text = apimachinery::validation::go_quote(&w);
        if let Ok(v) = HeaderValue::from_bytes(format!("299 - {text}").as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

/// Media type without parameters, lower-cased. A header that is not text (so cannot name a media
/// type) becomes `unparseable/unparseable`, which nothing accepts (415); a missing one is empty,
/// which writes read as JSON like the real server (`NegotiateInputSerializer` takes the first
/// supported type).
pub(crate) fn media_type(v: Option<&HeaderValue>) -> String {
    v.map(|v| v.to_str().unwrap_or("unparseable/unparseable"))
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// An authenticated, admitted request whose body has been read: what the routing stages need.
pub(crate) struct Incoming<'a> {
    /// The URL path, as sent.
    pub(crate) path: &'a str,
    /// The path's non-empty segments.
    pub(crate) segs: Vec<&'a str>,
    /// Method, URI and headers.
    pub(crate) parts: &'a http::request::Parts,
    /// The body, at most [`MAX_BODY`] bytes.
    pub(crate) bytes: &'a Bytes,
    /// The `Accept` header (empty when absent or not text).
    pub(crate) accept: String,
    /// The body's media type, without parameters ([`media_type`]).
    pub(crate) content_type: String,
    /// The query parameters (with the requester attached when RBAC is enforced).
    pub(crate) query: Query,
    /// The user the request acts as, after impersonation.
    pub(crate) user: crate::auth::rbac::UserInfo,
    /// The connection after a `101 Switching Protocols` answer, for a request that asks to
    /// upgrade (taken by [`serve_stream`]).
    pub(crate) upgrade: std::sync::Mutex<Option<hyper::upgrade::OnUpgrade>>,
}

/// Routing (the tail of the handler chain, [`crate::server::chain`]): a non-resource endpoint,
/// an access or token review, or a resource verb.
pub(crate) async fn route(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    class.verb = "get".into();
    if let Some(resp) = serve_non_resource(shared, request)? {
        return Ok(resp);
    }
    if crate::endpoints::access_review::owns(&request.segs) {
        return serve_review(
            shared,
            &request.segs,
            request.parts,
            request.bytes,
            &request.user,
            class,
        );
    }
    if crate::endpoints::token_review::owns(&request.segs) {
        return serve_token_review(
            shared,
            &request.segs,
            request.parts,
            request.bytes,
            &request.user,
            class,
        );
    }
    if let ["api", "v1", "nodes", name, "proxy", rest @ ..] = request.segs.as_slice() {
        return serve_node_proxy(shared, request, name, rest, class).await;
    }
    serve_resource(shared, request, class).await
}

/// `/api/v1/nodes/NAME/proxy/PATH`: authorized as `nodes/proxy` with the verb of the HTTP
/// method, then handed to the node's kubelet ([`crate::kubelet`]).
async fn serve_node_proxy(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    name: &str,
    rest: &[&str],
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming { parts, user, .. } = request;
    let verb = match parts.method {
        Method::GET | Method::HEAD => "get".to_owned(),
        Method::POST => "create".to_owned(),
        Method::PUT => "update".to_owned(),
        Method::PATCH => "patch".to_owned(),
        Method::DELETE => "delete".to_owned(),
        ref other => other.as_str().to_ascii_lowercase(),
    };
    class.verb = verb.clone();
    class.resource = "nodes".into();
    class.subresource = "proxy".into();
    let def = shared
        .store
        .read(|s| s.registry.lookup("", "v1", "nodes"))
        .ok_or_else(ApiError::page_not_found)?;
    let target = Target {
        def,
        namespace: None,
        name: Some(name.to_owned()),
        subresource: Some("proxy".into()),
    };
    authorize_resource(&shared.rbac, &shared.store, user, &target, &verb, None)?;
    let mut path = format!("/{}", rest.join("/"));
    if !rest.is_empty() && request.path.ends_with('/') {
        path.push('/');
    }
    let node = shared
        .store
        .read(|st| st.get("core/nodes", "", name).cloned());
    let proxied = crate::kubelet::ProxyRequest {
        method: parts.method.clone(),
        path,
        query: parts.uri.query().unwrap_or_default().to_owned(),
    };
    crate::kubelet::serve_node_proxy(&shared.kubelets, name, node, proxied).await
}

/// The non-resource endpoints: health probes, `/metrics`, the fault-injection admin route,
/// `/version`, discovery (`/api`, `/apis`, a group, a group version) and OpenAPI. `None` when
/// the path is none of them (it may still be a review or a resource).
fn serve_non_resource(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
) -> Result<Option<Response<Body>>, ApiError> {
    let Incoming {
        path,
        parts,
        accept,
        user,
        ..
    } = request;
    let accept = accept.as_str();
    let found = |doc: Option<Value>| {
        doc.map(|d| Some(json_response(200, &d, "application/json")))
            .ok_or_else(ApiError::page_not_found)
    };
    let resp = match (&parts.method, request.segs.as_slice()) {
        (&Method::GET, ["healthz" | "livez" | "readyz"]) => {
            text_response("ok", "text/plain; charset=utf-8")
        }
        (&Method::GET, ["metrics"]) => {
            authorize_path(&shared.rbac, &shared.store, user, "get", path)?;
            let mut text = shared.log.prometheus_text();
            text.push_str(&shared.flowcontrol.prometheus_text());
            text.push_str(&shared.store.prometheus_text());
            text_response(text, "text/plain; version=0.0.4; charset=utf-8")
        }
        (method, ["admin", "faults"]) => {
            // Fault injection over HTTP (see `faults::admin`): `system:masters` only.
            if !user
                .groups
                .iter()
                .any(|g| g == crate::auth::rbac::MASTERS_GROUP)
            {
                let attrs = crate::auth::rbac::Attributes {
                    verb: method.as_str().to_ascii_lowercase(),
                    path: (*path).to_owned(),
                    ..Default::default()
                };
                return Err(crate::auth::rbac::forbidden(user, &attrs, ""));
            }
            let body = crate::filters::faults::admin(&shared.faults, method, request.bytes)?;
            json_response(200, &body, "application/json")
        }
        (&Method::GET, ["version"]) => {
            json_response(200, &discovery::version(), "application/json")
        }
        (&Method::GET, ["api"]) => {
            let reg = shared.store.read(|s| s.registry.clone());
            match discovery::negotiate_aggregated(accept) {
                Some(v) => {
                    aggregated_response(&discovery::aggregated(&reg, true, v), v, &parts.headers)
                }
                None => json_response(
                    200,
                    &discovery::api_versions(&shared.server_address),
                    "application/json",
                ),
            }
        }
        (&Method::GET, ["apis"]) => {
            let reg = shared.store.read(|s| s.registry.clone());
            match discovery::negotiate_aggregated(accept) {
                Some(v) => {
                    aggregated_response(&discovery::aggregated(&reg, false, v), v, &parts.headers)
                }
                None => json_response(200, &discovery::api_group_list(&reg), "application/json"),
            }
        }
        (&Method::GET, ["apis", group]) => {
            return found(
                shared
                    .store
                    .read(|s| discovery::api_group(&s.registry, group)),
            );
        }
        (&Method::GET, ["api", "v1"]) => {
            return found(
                shared
                    .store
                    .read(|s| discovery::api_resource_list(&s.registry, "", "v1")),
            );
        }
        (&Method::GET, ["openapi", "v2"]) => crate::endpoints::openapi::serve_v2(shared, accept),
        (&Method::GET, ["openapi", "v3", rest @ ..]) => {
            crate::endpoints::openapi::serve(shared, rest, &request.query)?
        }
        (&Method::GET, ["apis", group, version]) => {
            return found(
                shared
                    .store
                    .read(|s| discovery::api_resource_list(&s.registry, group, version)),
            );
        }
        _ => return Ok(None),
    };
    Ok(Some(resp))
}

/// A `200` plain-text answer with the given content type.
fn text_response(text: impl Into<Bytes>, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(full(text));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A resource request: resolve the URL to a [`Target`], name its verb, authorize it (RBAC),
/// apply any injected fault, then hand it to the reader ([`serve_read`]), the writers
/// ([`serve_write`]) or the deleter ([`serve_delete`]). Pod logs are text, not objects, and go
/// to [`crate::logs`].
async fn serve_resource(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming {
        parts, query, user, ..
    } = request;
    if let ["api", "v1", "namespaces", ns, discovery::BINDINGS] = request.segs[..] {
        return serve_bindings(shared, request, ns, class).await;
    }
    let target = resolve(shared, &request.segs)?;
    class.resource = target.def.plural.clone();
    class.subresource = target.subresource.clone().unwrap_or_default();
    class.namespace = target.namespace.clone().unwrap_or_default();
    let verb = crate::filters::faults::verb_of(
        &parts.method,
        target.name.is_some(),
        query.flag("watch").unwrap_or(false),
    );
    class.verb = verb.to_owned();
    authorize_resource(
        &shared.rbac,
        &shared.store,
        user,
        &target,
        verb,
        query.non_empty("fieldSelector"),
    )?;
    shared.faults.before(verb, &target).await?;
    if target.subresource.as_deref() == Some("log") {
        return serve_log(shared, request, &target);
    }
    if matches!(
        target.subresource.as_deref(),
        Some("exec" | "attach" | "portforward")
    ) {
        return serve_stream(shared, request, &target, class);
    }
    if target.def.is_component_status() {
        return serve_component_status(request, &target, class);
    }
    if matches!(
        target.subresource.as_deref(),
        Some("token" | "eviction" | "binding")
    ) {
        return serve_pod_action(shared, request, &target, class);
    }
    let def = &target.def;
    if def.namespaced && target.namespace.is_none() && parts.method != Method::GET {
        // `/api/v1/pods` exists for list and watch across namespaces only.
        class.verb = parts.method.as_str().to_ascii_lowercase();
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            &def.plural,
            &def.group,
        ));
    }
    if target.subresource.is_some() && parts.method == Method::DELETE {
        // No subresource (`status`, `scale`, `ephemeralcontainers`, ...) is deleted: only the
        // object is, through its own URL.
        class.verb = "delete".into();
        return Err(ApiError::method_not_allowed(
            "DELETE",
            &def.plural,
            &def.group,
        ));
    }
    let deprecation = def
        .custom
        .as_ref()
        .and_then(|c| c.deprecation_warning.clone());
    let answer = match (&parts.method, target.name.is_some()) {
        (&Method::GET, _) => serve_read(shared, request, &target, class).await,
        (&Method::POST, false) | (&Method::PUT, true) | (&Method::PATCH, true) => {
            serve_write(shared, request, &target, class).await
        }
        (&Method::DELETE, _) => serve_delete(shared, request, &target, class).await,
        (m, _) => {
            class.verb = m.as_str().to_ascii_lowercase();
            Err(ApiError::method_not_allowed(
                m.as_str(),
                &def.plural,
                &def.group,
            ))
        }
    };
    // A deprecated CRD version warns on every answer (kubectl prints `Warning: <text>`).
    answer.map(|mut resp| {
        if let Some(text) = deprecation {
            let text = apimachinery::validation::go_quote(&text);
            if let Ok(v) = HeaderValue::from_bytes(format!("299 - {text}").as_bytes()) {
                resp.headers_mut().append(header::WARNING, v);
            }
        }
        resp
    })
}

/// `pods/log`, read with `GET` only: the pod, then the API server's checks and the node's
/// kubelet ([`crate::kubelet::serve_logs`]).
fn serve_log(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
) -> Result<Response<Body>, ApiError> {
    let Incoming { parts, query, .. } = request;
    if parts.method != Method::GET {
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            "pods",
            "",
        ));
    }
    let pod = stored_pod(shared, target)?;
    crate::kubelet::serve_logs(&shared.kubelets, pod, query)
}

/// The pod a `pods/NAME/<subresource>` request names, or `404`.
fn stored_pod(shared: &Shared, target: &Target) -> Result<serde_json::Value, ApiError> {
    let name = target.name.as_deref().unwrap_or_default();
    shared
        .store
        .read(|st| {
            st.get(
                "core/pods",
                target.namespace.as_deref().unwrap_or_default(),
                name,
            )
            .cloned()
        })
        .ok_or_else(|| ApiError::not_found("pods", "", name))
}

/// `pods/exec`, `pods/attach` and `pods/portforward`: `GET` or `POST`, checked by the API
/// server ([`crate::kubelet::serve_stream`]: the options, the container, the node), then
/// handed, with the connection to upgrade, to the kubelet of the pod's node, which answers the
/// upgrade (WebSocket or SPDY) and serves the session.
///
/// Authorization: the request's own verb has been checked (`create` for `POST`, `get` for
/// `GET`). A WebSocket upgrade is a `GET`, so kube-apiserver (1.35 and later, feature
/// `AuthorizePodWebsocketUpgradeCreatePermission`, on by default) also requires `create` on
/// the subresource, lest a read-only role open a shell; so does this server.
fn serve_stream(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming {
        parts, query, user, ..
    } = request;
    let subresource = target.subresource.as_deref().unwrap_or_default();
    if parts.method != Method::GET && parts.method != Method::POST {
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            &format!("pods/{subresource}"),
            "",
        ));
    }
    if parts.method == Method::GET {
        shared
            .rbac
            .check(&shared.store, user, &target.attributes("create", None))?;
    }
    class.verb = if parts.method == Method::GET {
        "get"
    } else {
        "create"
    }
    .into();
    let pod = stored_pod(shared, target)?;
    let on_upgrade = request
        .upgrade
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    crate::kubelet::serve_stream(
        &shared.kubelets,
        pod,
        subresource,
        query,
        parts.method.clone(),
        parts.headers.clone(),
        on_upgrade,
    )
}

/// `componentstatuses`: `get` or `list` only (no watch), as JSON or as a Table, always with
/// the deprecation warning.
fn serve_component_status(
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming { parts, query, .. } = request;
    // Computed on each read, never stored ([`crate::registry::core::pod_actions`]).
    let watch = query.flag("watch").unwrap_or(false);
    if parts.method != Method::GET || watch || target.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            "componentstatuses",
            "",
        ));
    }
    class.verb = if target.name.is_some() { "get" } else { "list" }.into();
    let answer =
        crate::registry::core::pod_actions::component_status_answer(target.name.as_deref())?;
    let wants_table = request.accept.split(',').any(|a| a.contains("as=Table"));
    let mut resp = if wants_table {
        let include = crate::endpoints::table::include_object(query)?;
        let items = match answer["items"].as_array() {
            Some(items) => items.clone(),
            None => vec![answer.clone()],
        };
        let table = crate::endpoints::table::render(&target.def, &items, "", None, include);
        json_response(
            200,
            &GoOrdered::new(&table),
            crate::endpoints::table::CONTENT_TYPE,
        )
    } else {
        json_response(200, &GoOrdered::new(&answer), "application/json")
    };
    let text = apimachinery::validation::go_quote(
        crate::registry::core::pod_actions::COMPONENT_STATUS_WARNING,
    );
    if let Ok(v) = HeaderValue::from_bytes(format!("299 - {text}").as_bytes()) {
        resp.headers_mut().append(header::WARNING, v);
    }
    Ok(resp)
}

/// The actions `serviceaccounts/token`, `pods/eviction` and `pods/binding`: a `POST` that does
/// something and answers with its result.
fn serve_pod_action(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming { parts, .. } = request;
    // Actions, not objects ([`crate::registry::core::pod_actions`]): create only.
    class.verb = "create".into();
    if parts.method != Method::POST {
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            &target.def.plural,
            "",
        ));
    }
    let body = decode_object_any(&request.content_type, request.bytes)?;
    let ns = target.namespace.clone().unwrap_or_default();
    let name = target.name.clone().unwrap_or_default();
    let (code, answer) = if target.subresource.as_deref() == Some("token") {
        shared.store.read(|st| {
            crate::registry::core::pod_actions::token_request(
                st,
                &shared.authn.tokens,
                &ns,
                &name,
                &body,
            )
        })?
    } else {
        pod_action(shared, target, &body)?
    };
    Ok(json_response(
        code,
        &GoOrdered::new(&answer),
        "application/json",
    ))
}

/// `POST /api/v1/namespaces/NS/bindings`: the resource `bindings`, kube's `LegacyBindingREST`,
/// binds the pod the Binding's `metadata.name` names, exactly as `pods/NAME/binding` does
/// ([`pod_action`]). It is authorized as `create` on `bindings` (not on `pods/binding`), and
/// only created: any other method is `405`. Faults injected on `bindings` apply to it.
async fn serve_bindings(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    namespace: &str,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming { parts, user, .. } = request;
    class.resource = discovery::BINDINGS.into();
    class.namespace = namespace.to_owned();
    class.verb = "create".into();
    if parts.method != Method::POST {
        class.verb = parts.method.as_str().to_ascii_lowercase();
        return Err(ApiError::method_not_allowed(
            parts.method.as_str(),
            discovery::BINDINGS,
            "",
        ));
    }
    let pods = shared
        .store
        .read(|s| s.registry.lookup("", "v1", "pods"))
        .ok_or_else(ApiError::page_not_found)?;
    let mut bindings = (*pods).clone();
    bindings.plural = discovery::BINDINGS.into();
    bindings.singular = "binding".into();
    bindings.kind = "Binding".into();
    let collection = Target {
        def: Arc::new(bindings),
        namespace: Some(namespace.to_owned()),
        name: None,
        subresource: None,
    };
    authorize_resource(
        &shared.rbac,
        &shared.store,
        user,
        &collection,
        "create",
        None,
    )?;
    shared.faults.before("create", &collection).await?;
    let body = decode_object_any(&request.content_type, request.bytes)?;
    let name = body["metadata"]["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        return Err(ApiError::bad_request("Name parameter required."));
    }
    let binding = Target {
        def: pods,
        namespace: Some(namespace.to_owned()),
        name: Some(name.to_owned()),
        subresource: Some("binding".into()),
    };
    let (code, answer) = pod_action(shared, &binding, &body)?;
    Ok(json_response(
        code,
        &GoOrdered::new(&answer),
        "application/json",
    ))
}

/// `pods/eviction` or `pods/binding` on the store (the HTTP handler's and the loopback
/// interface's shared path).
pub(crate) fn pod_action(
    shared: &Shared,
    target: &Target,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    use crate::registry::core::pod_actions;
    if target.subresource.as_deref() == Some("binding") {
        let now = crate::api::object_meta::now_time();
        shared
            .store
            .write_checked(|st| pod_actions::bind(st, target, body, &now))
    } else {
        shared
            .store
            .write_checked(|st| pod_actions::evict(st, target, body))
    }
}

/// `GET` on a resource: `watch` (a stream, as Table rows when asked), `get` of one object or
/// `list` of a collection, either as JSON or as a `meta.k8s.io/v1` Table when the `Accept`
/// header says `as=Table`.
async fn serve_read(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let query = &request.query;
    let def = &target.def;
    let wants_table = request.accept.split(',').any(|a| a.contains("as=Table"));
    let partial = crate::endpoints::partial::negotiate(&request.accept).filter(|_| !wants_table);
    if query.flag("watch")? {
        class.verb = "watch".into();
        let opts = ListOptions::parse(query, true)?;
        let renderer = if wants_table {
            let include = crate::endpoints::table::include_object(query)?;
            Some(crate::endpoints::table::renderer(def.clone(), include))
        } else if let Some(w) = &partial {
            Some(crate::endpoints::partial::watch_renderer(def, w)?)
        } else {
            None
        };
        let settings = WatchSettings {
            bookmark_interval: shared.bookmark_interval,
            reject_send_initial_events: shared.reject_send_initial_events,
            shutdown: shared.faults.watch_token(),
            renderer,
            bookmark_type: partial
                .as_ref()
                .map(crate::endpoints::partial::bookmark_type),
            unresponsive: shared.watch_unresponsive,
            converter: crate::apiextensions::conversion::webhook_of(def).map(|_| {
                let shared = shared.clone();
                let def = def.clone();
                let convert: watch::Converter = Arc::new(move |obj| {
                    let shared = shared.clone();
                    let def = def.clone();
                    tokio::spawn(async move {
                        crate::apiextensions::conversion::to_served(&shared.backend, &def, obj)
                            .await
                    })
                });
                convert
            }),
        };
        let body = watch::start(shared.store.clone(), target, &opts, settings)?;
        let mut resp = Response::new(BodyExt::boxed(body));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(resp);
    }
    if target.name.is_some() {
        class.verb = "get".into();
        let (code, obj) = shared.store.read(|s| verbs::get(s, target, query))?;
        let obj =
            crate::apiextensions::conversion::answer_to_served(&shared.backend, def, obj).await?;
        if wants_table && target.subresource.is_none() {
            let obj = obj.into_value(def);
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let include = crate::endpoints::table::include_object(query)?;
            let table = crate::endpoints::table::render(def, &[obj], &rv, None, include);
            return Ok(json_response(
                code,
                &GoOrdered::new(&table),
                crate::endpoints::table::CONTENT_TYPE,
            ));
        }
        return answer_response(def, partial.as_ref(), code, obj);
    }
    class.verb = "list".into();
    let opts = ListOptions::parse(query, false)?;
    if let Some(rv) = verbs::awaited_revision(&opts) {
        // A revision the store has not reached yet: wait for it (bounded, holding no lock),
        // then list; still too large after the wait is the 504 `verbs::list` answers.
        shared
            .store
            .wait_for_revision(rv, crate::endpoints::watch::TOO_LARGE_WAIT)
            .await;
    }
    let result = shared.store.read(|s| verbs::list(s, target, &opts))?;
    let converted = crate::apiextensions::conversion::webhook_of(def).is_some();
    if !wants_table && !converted && partial.is_none() {
        // The common case, serialized from the stored objects without copying them.
        return Ok(json_response(
            200,
            &verbs::ListJson::new(def, &result),
            "application/json",
        ));
    }
    let items =
        crate::apiextensions::conversion::items_to_served(&shared.backend, def, result.served(def))
            .await?;
    if wants_table {
        let include = crate::endpoints::table::include_object(query)?;
        let table = crate::endpoints::table::render(
            def,
            &items,
            &result.resource_version.to_string(),
            result.continue_token.as_deref(),
            include,
        );
        return Ok(json_response(
            200,
            &GoOrdered::new(&table),
            crate::endpoints::table::CONTENT_TYPE,
        ));
    }
    let mut list = verbs::list_json(def, &result, items);
    if let Some(w) = &partial {
        list = crate::endpoints::partial::list(def, w, &list)?;
    }
    Ok(json_response(200, &def.ordered(&list), "application/json"))
}

/// `POST` on a collection (`create`), `PUT` on an object (`update`) or `PATCH` on an object
/// (`patch`, by the patch type its media type names): decode the body, refuse duplicate JSON
/// fields as the real server's strict decoding does, pass it through admission (the webhooks,
/// [`crate::admission::write`]) into the store, and answer
/// with the write's warnings as headers.
async fn serve_write(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming {
        parts,
        bytes,
        query,
        content_type,
        user,
        ..
    } = request;
    let (code, obj) = if parts.method == Method::PATCH {
        class.verb = "patch".into();
        let Some(ty) = PatchType::from_media_type(content_type) else {
            return Err(ApiError::unsupported_media_type(PatchType::ALL));
        };
        let body = if ty == PatchType::Apply {
            parse_yaml(bytes)?
        } else {
            crate::registry::validation::parse_json_body(bytes, query)?
        };
        crate::admission::write(&shared.backend, target, user, Write::Patch(ty, body), query)
            .await?
    } else {
        let creating = parts.method == Method::POST;
        class.verb = if creating { "create" } else { "update" }.into();
        let body = decode_object(&target.def, content_type, bytes, query)?;
        // Huge metadata collections are judged here, before the store lock is taken.
        crate::api::limits::precheck_metadata(&target.def.kind, &target.def.group, &body)?;
        let write = if creating {
            Write::Create(body)
        } else {
            Write::Update(body)
        };
        crate::admission::write(&shared.backend, target, user, write, query).await?
    };
    let partial = crate::endpoints::partial::negotiate(&request.accept);
    Ok(with_warnings(
        answer_response(&target.def, partial.as_ref(), code, obj)?,
        query,
    ))
}

/// The JSON response for a verb's answer (as a `PartialObjectMetadata` when the client asked for
/// one): an object as stored is serialized from the store's own copy
/// ([`crate::registry::strategy::Presented`]), the same bytes as its presented value.
fn answer_response(
    def: &ResourceDef,
    partial: Option<&crate::endpoints::partial::Wanted>,
    code: u16,
    obj: Served,
) -> Result<Response<Body>, ApiError> {
    if partial.is_none()
        && let Served::Stored(stored) = &obj
    {
        return Ok(json_response(
            code,
            &crate::registry::strategy::Presented::new(def, stored),
            "application/json",
        ));
    }
    let obj = crate::endpoints::partial::object(def, partial, obj.into_value(def))?;
    Ok(json_response(code, &def.ordered(&obj), "application/json"))
}

/// `DELETE` of one object (`delete`) or of a collection (`deletecollection`, by the list
/// options of the query). The optional `DeleteOptions` body is JSON from kubectl and most
/// clients, protobuf from Go typed clients.
async fn serve_delete(
    shared: &Arc<Shared>,
    request: &Incoming<'_>,
    target: &Target,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Incoming {
        bytes,
        query,
        content_type,
        user,
        ..
    } = request;
    let body = if bytes.is_empty() {
        None
    } else if content_type == PROTOBUF {
        Some(crate::endpoints::protobuf::decode_body(bytes).map_err(|e| {
            ApiError::bad_request(format!("error decoding protobuf DeleteOptions: {e}"))
        })?)
    } else {
        Some(parse_json(bytes)?)
    };
    let opts = DeleteOptions::parse(body.as_ref(), query)?;
    if target.name.is_some() {
        class.verb = "delete".into();
        let (code, obj) =
            crate::admission::write(&shared.backend, target, user, Write::Delete(opts), query)
                .await?;
        let partial = crate::endpoints::partial::negotiate(&request.accept);
        return Ok(with_warnings(
            answer_response(&target.def, partial.as_ref(), code, obj)?,
            query,
        ));
    }
    class.verb = "deletecollection".into();
    let list_opts = ListOptions::parse(query, false)?;
    let (code, obj) = shared
        .store
        .write_checked(|s| verbs::delete_collection(s, target, &list_opts, &opts))?;
    let obj = crate::apiextensions::conversion::answer_to_served(&shared.backend, &target.def, obj)
        .await?;
    answer_response(&target.def, None, code, obj)
}

/// `POST /apis/authorization.k8s.io/v1/...reviews`: an access or rules review, authorized like
/// any create and answered `201` with the review's status filled in ([`crate::endpoints::access_review`]).
fn serve_review(
    shared: &Arc<Shared>,
    segs: &[&str],
    parts: &http::request::Parts,
    bytes: &[u8],
    user: &crate::auth::rbac::UserInfo,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let target =
        crate::endpoints::access_review::route(segs).ok_or_else(ApiError::page_not_found)?;
    class.resource = target.kind.plural().to_owned();
    class.namespace = target.namespace.clone().unwrap_or_default();
    class.verb = parts.method.as_str().to_ascii_lowercase();
    if parts.method != Method::POST {
        // The reviews are create-only: no GET, PUT, PATCH or DELETE route exists for them.
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    class.verb = "create".into();
    shared
        .rbac
        .check(&shared.store, user, &target.create_attributes())?;
    let body = decode_review(parts, bytes)?;
    let answer = shared.store.read(|st| {
        crate::endpoints::access_review::create(&shared.rbac, st, user, &target, body)
    })?;
    tracing::debug!(
        review = target.kind.kind(),
        user = %user.name,
        allowed = %answer["status"]["allowed"],
        "access review answered"
    );
    Ok(json_response(
        201,
        &GoOrdered::new(&answer),
        "application/json",
    ))
}

/// The body of an access or token review: JSON, YAML or protobuf, by its content type.
fn decode_review(parts: &http::request::Parts, bytes: &[u8]) -> Result<Value, ApiError> {
    let content_type = media_type(parts.headers.get(header::CONTENT_TYPE));
    match content_type.as_str() {
        "" | "application/json" => parse_json(bytes),
        "application/yaml" => parse_yaml(bytes),
        PROTOBUF => crate::endpoints::protobuf::decode_body(bytes).map_err(|e| {
            ApiError::bad_request(format!("error decoding protobuf request body: {e}"))
        }),
        _ => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            PROTOBUF,
        ])),
    }
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`: who a bearer token belongs to,
/// authorized like any create and answered `201` with the review's status filled in
/// ([`crate::endpoints::token_review`]).
fn serve_token_review(
    shared: &Arc<Shared>,
    segs: &[&str],
    parts: &http::request::Parts,
    bytes: &[u8],
    user: &crate::auth::rbac::UserInfo,
    class: &mut RequestLabel,
) -> Result<Response<Body>, ApiError> {
    let Some(resource) = crate::endpoints::token_review::collection(segs) else {
        return Err(ApiError::page_not_found());
    };
    class.resource = resource.to_owned();
    class.verb = parts.method.as_str().to_ascii_lowercase();
    if parts.method != Method::POST {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ));
    }
    class.verb = "create".into();
    shared.rbac.check(
        &shared.store,
        user,
        &crate::endpoints::token_review::create_attributes(resource),
    )?;
    if resource == crate::endpoints::token_review::SELF_PLURAL {
        let body = decode_review(parts, bytes)?;
        let answer = crate::endpoints::token_review::create_self(user, body)?;
        return Ok(json_response(
            201,
            &GoOrdered::new(&answer),
            "application/json",
        ));
    }
    let body = decode_review(parts, bytes)?;
    let answer = crate::endpoints::token_review::create(
        &shared.rbac,
        |token| {
            shared
                .authn
                .tokens
                .authenticate(Some(&format!("Bearer {token}")))
        },
        body,
    )?;
    tracing::debug!(
        requester = %user.name,
        authenticated = %answer["status"]["authenticated"],
        "token review answered"
    );
    Ok(json_response(
        201,
        &GoOrdered::new(&answer),
        "application/json",
    ))
}

/// An aggregated discovery document with the real server's caching headers: `ETag` (a quoted
/// hash of the document; the real server uses SHA-512, clients only compare it), `Vary: Accept`
/// and `Cache-Control: public`, and `304 Not Modified` when `If-None-Match` already matches.
fn aggregated_response(doc: &Value, version: &str, headers: &http::HeaderMap) -> Response<Body> {
    use std::hash::{Hash, Hasher};
    let ct = format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let etag = format!("\"{:016X}\"", h.finish());
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut r = if matches {
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(full(bytes));
        if let Ok(v) = HeaderValue::from_str(&ct) {
            r.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        r
    };
    let hs = r.headers_mut();
    hs.insert(header::VARY, HeaderValue::from_static("Accept"));
    hs.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        hs.insert(header::ETAG, v);
    }
    r
}

/// A JSON or YAML body that is not one of the resource's own objects (an Eviction, a
/// TokenRequest): empty is `{}`.
fn decode_object_any(content_type: &str, bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(serde_json::json!({}));
    }
    match content_type {
        "application/yaml" => parse_yaml(bytes),
        "" | "application/json" | "*/*" => parse_json(bytes),
        // kubectl >= 1.32 sends a TokenRequest (`kubectl create token`) as protobuf.
        PROTOBUF => crate::endpoints::protobuf::decode_body(bytes).map_err(|e| {
            ApiError::bad_request(format!("error decoding protobuf request body: {e}"))
        }),
        other => Err(ApiError::unsupported_media_type(&[
            "application/json",
            "application/yaml",
            PROTOBUF,
        ])
        .with_message(format!(
            "the body of content type {other} is not supported here; send JSON"
        ))),
    }
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    crate::api::limits::json_from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding JSON request body: {e}")))
}

fn parse_yaml(bytes: &[u8]) -> Result<Value, ApiError> {
    crate::api::limits::parse_yaml(bytes)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML request body: {e}")))
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A create or update body in its content type; JSON is parsed with `fieldValidation`
/// applied to duplicate keys in the same pass.
fn decode_object(
    def: &ResourceDef,
    content_type: &str,
    bytes: &[u8],
    query: &Query,
) -> Result<Value, ApiError> {
    match content_type {
        "" | "application/json" => crate::registry::validation::parse_json_body(bytes, query),
        "application/yaml" => parse_yaml(bytes),
        // Custom resources have no protobuf form; built-ins do (kubectl >= 1.32 typed writes).
        PROTOBUF if def.custom.is_none() => {
            crate::endpoints::protobuf::decode_body(bytes).map_err(|e| {
                ApiError::bad_request(format!("error decoding protobuf request body: {e}"))
            })
        }
        _ => {
            let mut accepted = vec!["application/json", "application/yaml"];
            if def.custom.is_none() {
                accepted.push(PROTOBUF);
            }
            Err(ApiError::unsupported_media_type(&accepted))
        }
    }
}

/// Parses a resource URL (`/api/v1/namespaces/default/pods/web/status`) into a [`Target`];
/// anything unknown is the plain `404 page not found`.
fn resolve(shared: &Shared, segs: &[&str]) -> Result<Target, ApiError> {
    let (group, version, rest) = match segs {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::page_not_found()),
    };
    let (namespace, resource, name, sub) = match rest {
        ["namespaces", ns, res, tail @ ..] if *res != "status" && *res != "finalize" => {
            if tail.len() > 2 {
                return Err(ApiError::page_not_found());
            }
            (Some(*ns), *res, tail.first().copied(), tail.get(1).copied())
        }
        [res, tail @ ..] => {
            if tail.len() > 2 {
                return Err(ApiError::page_not_found());
            }
            (None, *res, tail.first().copied(), tail.get(1).copied())
        }
        [] => return Err(ApiError::page_not_found()),
    };
    let def = shared
        .store
        .read(|s| s.registry.lookup(group, version, resource))
        .ok_or_else(ApiError::page_not_found)?;
    if namespace.is_some() && !def.namespaced {
        return Err(ApiError::page_not_found());
    }
    if def.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::page_not_found());
    }
    match sub {
        None => {}
        Some("status") if def.status_subresource => {}
        Some("scale") if def.scale.is_some() => {}
        Some("finalize") if def.group.is_empty() && def.plural == "namespaces" => {}
        Some("log") if def.group.is_empty() && def.plural == "pods" && name.is_some() => {}
        Some("approval")
            if def.group == "certificates.k8s.io" && def.plural == "certificatesigningrequests" => {
        }
        Some("token")
            if def.group.is_empty() && def.plural == "serviceaccounts" && name.is_some() => {}
        Some(
            "eviction" | "binding" | "exec" | "attach" | "portforward" | "ephemeralcontainers",
        ) if def.group.is_empty() && def.plural == "pods" && name.is_some() => {}
        Some(_) => return Err(ApiError::page_not_found()),
    }
    Ok(Target {
        def,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: sub.map(str::to_owned),
    })
}
