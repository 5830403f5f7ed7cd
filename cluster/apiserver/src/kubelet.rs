//! # What the API server asks of a node's kubelet
//!
//! Some requests kube-apiserver cannot answer from its storage: a container's log
//! (`pods/NAME/log`) and the streaming subresources `pods/NAME/exec`, `attach` and
//! `portforward`. For those it looks the pod up, checks the request (the pod exists, the
//! container is one of the pod's, the pod has a node), and hands the request to the kubelet of
//! the pod's node (`pkg/kubelet/client`, the kubelet's `/containerLogs`, `/exec`, `/attach` and
//! `/portForward` endpoints), relaying the kubelet's answer to the client.
//!
//! The embedded cluster keeps the same seam. A node registers its [`Kubelet`] with the server
//! ([`crate::ApiServerHandle::register_kubelet`]) under its node name; for those subresources
//! the server does the API server's half here (`serve_logs` and `serve_stream` here: the same
//! checks and errors as kube-apiserver's `LogLocation` and `streamLocation`) and calls the
//! kubelet of `spec.nodeName` with the result. The node does the kubelet's half: finds the
//! running container, and for a stream answers the upgrade and speaks the streaming protocol
//! (SPDY or WebSocket) on the upgraded connection, as the kubelet's streaming server does. A
//! pod whose node has no kubelet registered gets kube-apiserver's error for a node it cannot
//! reach.
//!
//! The request types carry what the kubelet's URL and query would: [`LogOptions`] (parsed and
//! validated here, as `PodLogOptions` is by the API server), [`SessionKind`] with its
//! [`StreamOptions`].
//!
//! ## The node proxy
//!
//! `/api/v1/nodes/NAME/proxy/PATH` is kube-apiserver's proxy to the kubelet of node `NAME`
//! (`pkg/registry/core/node/rest/proxy.go`): the request goes to `https://<node>:10250/PATH`
//! with its method and query, and the kubelet's answer comes back as it is — `/healthz`
//! (`ok`), `/pods` (a PodList of the pods it runs), `/configz`, `/metrics`, ... It is
//! authorized as the subresource `nodes/proxy` with the verb of the HTTP method (`get` for
//! GET, `create` for POST, `update` for PUT, `patch` for PATCH, `delete` for DELETE), so
//! `kubectl get --raw /api/v1/nodes/NAME/proxy/healthz` needs `get` on `nodes/proxy`, which the
//! bootstrap roles grant to no one but `cluster-admin`. A node that does not exist is `404`,
//! one without a kubelet the server can reach `503`. The embedded server hands the request
//! to the node's [`Kubelet::proxy`] (`serve_node_proxy` here), in process.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures_util::future::BoxFuture;
use http::{HeaderMap, Method, Response};
use serde_json::Value;

/// The body of a response the kubelet streams back (logs, proxied replies): bytes, boxed.
pub use crate::api::Body;
use crate::api::query::Query;
use crate::api::status::{ApiError, Cause};

/// A node's kubelet, as the API server reaches it (see the module docs).
pub trait Kubelet: Send + Sync + 'static {
    /// `GET /containerLogs/{namespace}/{pod}/{container}`: the container's log as `text/plain`,
    /// a stream when [`LogOptions::follow`].
    fn container_logs(&self, request: LogsRequest) -> Result<Response<Body>, ApiError>;

    /// `/exec`, `/attach` or `/portForward`: answer the upgrade (or refuse it with an error)
    /// and serve the session on the upgraded connection.
    fn stream(&self, request: StreamRequest) -> Result<Response<Body>, ApiError>;

    /// Any other path of the kubelet's server, reached through `nodes/NAME/proxy/PATH` (see
    /// the module docs): the kubelet's answer, relayed as it is. The default serves nothing
    /// (`404 page not found`, as the kubelet's mux answers an unknown path).
    fn proxy(&self, request: ProxyRequest) -> BoxFuture<'static, Response<Body>> {
        let _ = request;
        Box::pin(async { not_found_text() })
    }
}

/// A request through the node proxy, as the kubelet's server receives it.
#[derive(Clone, Debug)]
pub struct ProxyRequest {
    /// The HTTP method.
    pub method: Method,
    /// The path on the kubelet, starting with `/` (`/healthz`, `/pods`).
    pub path: String,
    /// The raw query string (without `?`; empty when none).
    pub query: String,
}

/// Go's `http.NotFound`: `404`, `text/plain`, `404 page not found`.
pub fn not_found_text() -> Response<Body> {
    text(404, "404 page not found\n")
}

/// A plain-text answer with `code`.
pub fn text(code: u16, body: impl Into<bytes::Bytes>) -> Response<Body> {
    use http_body_util::BodyExt;
    let mut r = Response::new(
        http_body_util::Full::new(body.into())
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `nodes/NAME/proxy/PATH` (see the module docs): the node must exist (`node` is the stored
/// Node, `None` for `404`) and have a kubelet registered (`503` otherwise).
pub(crate) async fn serve_node_proxy(
    kubelets: &Kubelets,
    name: &str,
    node: Option<Value>,
    request: ProxyRequest,
) -> Result<Response<Body>, ApiError> {
    if node.is_none() {
        return Err(ApiError::not_found("nodes", "", name));
    }
    let kubelet = kubelets.of_node(name).ok_or_else(|| {
        ApiError::new(
            503,
            "ServiceUnavailable",
            format!("no kubelet is reachable for node {name:?}"),
        )
    })?;
    Ok(kubelet.proxy(request).await)
}

/// A log request, checked by the API server.
#[derive(Debug)]
pub struct LogsRequest {
    /// The pod, as stored.
    pub pod: Value,
    /// The container (one of the pod's, init and ephemeral ones included).
    pub container: String,
    /// The options.
    pub options: LogOptions,
}

/// A streaming request, checked by the API server, with the connection to upgrade.
#[derive(Debug)]
pub struct StreamRequest {
    /// The pod, as stored.
    pub pod: Value,
    /// The container (empty for port-forward, which works on the pod).
    pub container: String,
    /// What the session does.
    pub kind: SessionKind,
    /// `GET` (WebSocket) or `POST` (SPDY).
    pub method: Method,
    /// The request's headers (`Upgrade`, `Connection`, `Sec-WebSocket-*`,
    /// `X-Stream-Protocol-Version`, ...).
    pub headers: HeaderMap,
    /// The connection, once the answer has been sent; `None` when the request did not ask
    /// for an upgrade (the kubelet answers `400 Upgrade request required`).
    pub on_upgrade: Option<hyper::upgrade::OnUpgrade>,
}

/// The kubelets of the nodes that registered, by node name.
#[derive(Clone, Default)]
pub struct Kubelets(Arc<RwLock<HashMap<String, Arc<dyn Kubelet>>>>);

impl Kubelets {
    /// Registers (or replaces) the kubelet of `node`.
    pub fn register(&self, node: &str, kubelet: Arc<dyn Kubelet>) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_owned(), kubelet);
    }

    /// Forgets the kubelet of `node`.
    pub fn unregister(&self, node: &str) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node);
    }

    /// The kubelet registered for `node`, if any.
    fn of_node(&self, node: &str) -> Option<Arc<dyn Kubelet>> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .cloned()
    }

    /// The kubelet of the node `pod` is bound to, or the error a client gets: 400 when the pod
    /// has no node yet (kube-apiserver's `does not have a host assigned`), 503 when its node
    /// has no kubelet the server can reach.
    fn of_pod(&self, pod: &Value) -> Result<Arc<dyn Kubelet>, ApiError> {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        if node.is_empty() {
            return Err(ApiError::bad_request(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    503,
                    "ServiceUnavailable",
                    format!("no kubelet is reachable for node {node:?} (pod {name})"),
                )
            })
    }
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_tuple("Kubelets").field(&names).finish()
    }
}

/// `GET pods/NAME/log`: the API server's checks (the options, the container, the node), then
/// the node's kubelet.
pub(crate) fn serve_logs(
    kubelets: &Kubelets,
    pod: Value,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let options = LogOptions::parse(query, &name, jiff::Timestamp::now())?;
    let container = pick_container(&pod, &name, options.container.as_deref())?;
    let kubelet = kubelets.of_pod(&pod)?;
    kubelet.container_logs(LogsRequest {
        pod,
        container,
        options,
    })
}

/// `pods/NAME/exec`, `attach` or `portforward`: the API server's checks (the options, the
/// command, the container, the node, in kube's order), then the node's kubelet with the
/// connection to upgrade.
pub(crate) fn serve_stream(
    kubelets: &Kubelets,
    pod: Value,
    subresource: &str,
    query: &Query,
    method: Method,
    headers: HeaderMap,
    on_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Result<Response<Body>, ApiError> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let kind = match subresource {
        "exec" => {
            let opts = StreamOptions::from_query(query)?;
            let command: Vec<String> = query
                .all("command")
                .into_iter()
                .map(str::to_owned)
                .collect();
            if command.is_empty() {
                return Err(ApiError::bad_request(
                    "you must specify at least one command for the container",
                ));
            }
            SessionKind::Exec { command, opts }
        }
        "attach" => SessionKind::Attach {
            opts: StreamOptions::from_query(query)?,
        },
        "portforward" => SessionKind::PortForward {
            ports: ports_of(query)?,
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "{other} is not a streaming subresource of pods"
            )));
        }
    };
    let container = match kind {
        SessionKind::PortForward { .. } => String::new(),
        _ => pick_container(&pod, &name, query.non_empty("container"))?,
    };
    let kubelet = kubelets.of_pod(&pod)?;
    kubelet.stream(StreamRequest {
        pod,
        container,
        kind,
        method,
        headers,
        on_upgrade,
    })
}

/// `PodLogOptions`, parsed and validated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    /// `container`.
    pub container: Option<String>,
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `tailLines`.
    pub tail_lines: Option<u64>,
    /// `limitBytes`.
    pub limit_bytes: Option<u64>,
    /// `sinceSeconds` or `sinceTime`, as the earliest time a line may have.
    pub since: Option<jiff::Timestamp>,
}

impl LogOptions {
    /// Parses the query of a log request (`pod` names the pod, for error messages), with the
    /// real server's validation (`ValidatePodLogOptions`).
    pub fn parse(q: &Query, pod: &str, now: jiff::Timestamp) -> Result<Self, ApiError> {
        let mut causes = vec![];
        let tail = q.int("tailLines")?;
        if tail.is_some_and(|n| n < 0) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "tailLines",
                "Invalid value: must be greater than or equal to 0",
            ));
        }
        let limit = q.int("limitBytes")?;
        if limit.is_some_and(|n| n < 1) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "limitBytes",
                "Invalid value: must be greater than 0",
            ));
        }
        let since_seconds = q.int("sinceSeconds")?;
        if since_seconds.is_some_and(|n| n < 1) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "sinceSeconds",
                "Invalid value: must be greater than 0",
            ));
        }
        let since_time = match q.non_empty("sinceTime") {
            None => None,
            Some(t) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
                ApiError::bad_request(format!("sinceTime: {t:?} is not an RFC 3339 time: {e}"))
            })?),
        };
        if since_seconds.is_some() && since_time.is_some() {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "",
                "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("PodLogOptions", "", pod, causes));
        }
        let since = match (since_seconds, since_time) {
            (Some(s), _) => now
                .checked_sub(jiff::SignedDuration::from_secs(s))
                .ok()
                .or(Some(jiff::Timestamp::MIN)),
            (None, t) => t,
        };
        Ok(LogOptions {
            container: q.non_empty("container").map(str::to_owned),
            follow: q.flag("follow")?,
            previous: q.flag("previous")?,
            timestamps: q.flag("timestamps")?,
            tail_lines: tail.and_then(|n| u64::try_from(n).ok()),
            limit_bytes: limit.and_then(|n| u64::try_from(n).ok()),
            since,
        })
    }
}

/// Which container of `pod` the request means, with the real server's errors.
pub fn pick_container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = names("containers");
    let inits = names("initContainers");
    let ephemeral = names("ephemeralContainers");
    match asked {
        Some(c)
            if containers
                .iter()
                .chain(&inits)
                .chain(&ephemeral)
                .any(|n| n == c) =>
        {
            Ok(c.to_owned())
        }
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            );
            if !inits.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    inits.join(" ")
                ));
            }
            if !ephemeral.is_empty() {
                msg.push_str(&format!(
                    " or one of the ephemeral containers: [{}]",
                    ephemeral.join(" ")
                ));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// Which streams a session has: the query parameters `stdin`, `stdout`, `stderr` and `tty`
/// (`PodExecOptions`, `PodAttachOptions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// The client sends input.
    pub stdin: bool,
    /// The client reads standard output.
    pub stdout: bool,
    /// The client reads standard error (never with `tty`: a terminal has one output).
    pub stderr: bool,
    /// The client asked for a terminal: one output stream, and resize events.
    pub tty: bool,
}

impl StreamOptions {
    /// Reads `stdin`, `stdout`, `stderr` and `tty` (each `true`/`1`/`True`, as Go's
    /// `strconv.ParseBool` that decodes the API's query parameters). As the kubelet's
    /// `NewOptions`: `tty` with `stderr` drops `stderr`, and a session with none of the three
    /// streams is refused with `400 you must specify at least 1 of stdin, stdout, stderr`
    /// (plain text, as the kubelet writes it).
    pub fn from_query(q: &Query) -> Result<Self, ApiError> {
        let flag = |k: &str| -> Result<bool, ApiError> {
            match q.get(k) {
                None | Some("") => Ok(false),
                Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
                Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
                Some(other) => Err(ApiError::bad_request(format!(
                    "invalid value {other:?} for boolean query parameter {k}"
                ))),
            }
        };
        let tty = flag("tty")?;
        let opts = StreamOptions {
            stdin: flag("stdin")?,
            stdout: flag("stdout")?,
            stderr: flag("stderr")? && !tty,
            tty,
        };
        if !opts.stdin && !opts.stdout && !opts.stderr {
            return Err(plain(
                400,
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        Ok(opts)
    }
}

/// A terminal size, as the resize stream carries it (one JSON object per event:
/// `{"Width":80,"Height":24}`, client-go's `TerminalSize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TerminalSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// Which subresource a session serves, with its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// `pods/exec`: run `command`.
    Exec {
        /// The argv.
        command: Vec<String>,
        /// The streams.
        opts: StreamOptions,
    },
    /// `pods/attach`.
    Attach {
        /// The streams.
        opts: StreamOptions,
    },
    /// `pods/portforward`: the ports of the query (`ports=80,443`, or repeated; required by
    /// the WebSocket protocol, absent with SPDY, whose streams name their port in a header).
    PortForward {
        /// The ports, in order.
        ports: Vec<u16>,
    },
}

/// A plain-text error (what the kubelet writes, passed through by kube-apiserver's proxy).
fn plain(code: u16, message: &str) -> ApiError {
    ApiError {
        plain_text: true,
        ..ApiError::new(code, "", message)
    }
}

/// The ports of a WebSocket port-forward: every `ports` value, each split at commas, each a
/// port in 1..=65535 (the kubelet's `NewV4Options`, reached through kube-apiserver's
/// `ports`). Errors are the kubelet's, as `400` plain text.
fn ports_of(q: &Query) -> Result<Vec<u16>, ApiError> {
    let mut ports = vec![];
    for value in q.all("ports") {
        if value.is_empty() {
            return Err(plain(400, "query parameter \"port\" cannot be empty"));
        }
        for p in value.split(',') {
            let port: u16 = p.trim().parse().map_err(|_| {
                plain(
                    400,
                    &format!("unable to parse {value:?} as a port: invalid syntax"),
                )
            })?;
            if port < 1 {
                return Err(plain(400, &format!("port {value:?} must be > 0")));
            }
            ports.push(port);
        }
        if ports.len() > MAX_FORWARDED_PORTS {
            return Err(plain(
                400,
                &format!("at most {MAX_FORWARDED_PORTS} ports may be forwarded at once"),
            ));
        }
    }
    Ok(ports)
}

/// Most ports one port-forward request may name (each is two channels of the connection).
pub const MAX_FORWARDED_PORTS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s))
    }

    #[test]
    fn stream_options_read_go_booleans_and_drop_stderr_with_a_tty() {
        let o = StreamOptions::from_query(&q("stdin=true&stdout=1&stderr=True&tty=t")).unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: false,
                tty: true
            }
        );
        let e = StreamOptions::from_query(&q("tty=true")).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert!(StreamOptions::from_query(&q("stdout=yes")).is_err());
    }

    #[test]
    fn ports_are_split_at_commas_and_checked() {
        assert_eq!(
            ports_of(&q("ports=80,443&ports=8080")).unwrap(),
            [80, 443, 8080]
        );
        assert!(ports_of(&q("ports=0")).is_err());
        assert!(ports_of(&q("ports=70000")).is_err());
        assert!(ports_of(&q("ports=")).is_err());
        assert!(ports_of(&q("")).unwrap().is_empty());
    }

    #[test]
    fn options_are_validated_like_the_real_server() {
        let now = t(100);
        let q = Query::parse(Some("tailLines=-1&limitBytes=0"));
        let e = LogOptions::parse(&q, "p", now).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("tailLines"), "{}", e.message);
        let q = Query::parse(Some("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z"));
        assert_eq!(LogOptions::parse(&q, "p", now).unwrap_err().code, 422);
        let q = Query::parse(Some("sinceSeconds=5&follow=true&container=c"));
        let o = LogOptions::parse(&q, "p", now).unwrap();
        assert_eq!(o.since, Some(t(95)));
        assert!(o.follow);
        assert_eq!(o.container.as_deref(), Some("c"));
    }

    #[test]
    fn container_choice_errors_match_the_real_server() {
        let pod = serde_json::json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let e = pick_container(&pod, "p", None).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        let e = pick_container(&pod, "p", Some("z")).unwrap_err();
        assert_eq!(e.message, "container z is not valid for pod p");
        assert_eq!(pick_container(&pod, "p", Some("b")).unwrap(), "b");
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
    }
}
