//! Exec, attach and port-forward sessions: the layer every streaming transport calls.
//!
//! ## What a real cluster does
//!
//! `kubectl exec POD -- CMD`, `kubectl attach POD` and `kubectl port-forward POD 8080:80` ask
//! kube-apiserver for the `exec`, `attach` and `portforward` subresources of a pod. The API
//! server does not run anything: its `ExecREST`, `AttachREST` and `PortForwardREST`
//! (`pkg/registry/core/pod/rest/subresources.go`) look the pod up, pick the container
//! (`streamLocation` in `pkg/registry/core/pod/strategy.go`: the only one, or the one named by
//! `container`, else `400 a container name must be specified for pod p, choose one of: [a
//! b]`), refuse a pod with no node (`400 pod p does not have a host assigned`), and proxy the
//! connection to the kubelet of the pod's node. The kubelet (`pkg/kubelet/server/server.go`,
//! `pkg/kubelet/cri/streaming/...`) asks the container runtime to run the command (or to
//! attach to the container's own streams, or to dial the pod's port) and copies bytes between
//! the client's streams and the process.
//!
//! The bytes travel in one of two framings, both multiplexing several byte streams over one
//! upgraded connection: SPDY/3.1 streams (what kubectl ≤ 1.29 speaks; the `spdy` module) or the
//! channel protocols over a WebSocket (the `wsstream` module). Whatever the framing, the session
//! is the same: up to five streams (stdin, stdout, stderr, an error stream that carries one
//! `v1.Status` at the end, and terminal resize events), chosen by the query parameters
//! `stdin`, `stdout`, `stderr` and `tty` ([`StreamOptions`]).
//!
//! The Status at the end says how the command ended (`pkg/kubelet/cri/streaming/remotecommand/
//! exec.go`): `{"metadata":{},"status":"Success"}` when it exited 0; for a non-zero exit
//! `status: Failure, reason: NonZeroExitCode`, `details.causes: [{reason: ExitCode, message:
//! "<code>"}]` and the message `command terminated with non-zero exit code: <runtime's
//! error>`, which for containerd is `error executing command [sh -c exit 3], exit code 3`.
//! kubectl reads the cause and prints `command terminated with exit code 3`, exiting 3. Since
//! 1.30 kube-apiserver answers a `v5.channel.k8s.io` WebSocket itself and speaks SPDY to the
//! kubelet (its `StreamTranslatorHandler`, `staging/src/k8s.io/apiserver/pkg/util/proxy/
//! streamtranslator.go`); it re-wraps the kubelet's exit into a Status of its own whose
//! message is `command terminated with non-zero exit code: command terminated with exit code
//! 3` ([`translated`]).
//!
//! ## What this layer does
//!
//! There is no kubelet here: the process node ([`crate::runtime`]) runs the pods' containers
//! as host processes, and this module reaches into it. A transport:
//!
//! 1. calls `Session::resolve` before it upgrades the connection: the pod, the container,
//!    the options and the command, with the real server's errors (a transport answers them
//!    as an HTTP error instead of upgrading), and a session slot (at most
//!    [`crate::runtime::DEFAULT_MAX_SESSIONS`] sessions are open at once; more get `429`);
//! 2. upgrades, then runs the session with its streams as tokio byte streams: [`run`] for
//!    exec and attach, which returns the Status to write on the error stream, or [`dial`] for
//!    each forwarded port, whose TCP stream it copies bytes to and from;
//! 3. runs all of it under [`Target::spawn`], on the server's task tracker, so a session
//!    never outlives the server.
//!
//! A transport that sees its client vanish **drops the [`run`] future**: the process it
//! started is then killed (its whole process group, as [`crate::runtime`] kills a
//! container's), and nothing is left running. A failed write to stdout or stderr (the client
//! went away) does the same from inside.
//!
//! The process side (how a command gets the container's environment, how attach reaches a
//! running container's stdin and output) is in [`process_exec`]; the host-network
//! note for port-forward is there too.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::OwnedSemaphorePermit;

use embedded_apiserver::ApiError;
use embedded_apiserver::kubelet::StreamRequest;
pub use embedded_apiserver::kubelet::{SessionKind, StreamOptions};

use crate::runtime::{NodeHandle, RunningContainer};

pub mod process_exec;

/// The reading half of one stream of a session (the client's stdin, resize events).
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of one stream of a session (the client's stdout, stderr).
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The byte streams of one exec or attach, as the transport presents them. A stream the
/// options did not ask for is `None`. `stdin` ending (`Ok(0)`) is the client's half-close:
/// the process's stdin is closed and the session goes on.
#[derive(Default)]
pub struct Streams {
    /// The client's input.
    pub stdin: Option<Reader>,
    /// Where standard output goes (with `tty`, standard error too).
    pub stdout: Option<Writer>,
    /// Where standard error goes.
    pub stderr: Option<Writer>,
    /// [`TerminalSize`] JSON objects, one after another. Read and discarded: the process node
    /// gives no terminal (see [`process_exec`]).
    pub resize: Option<Reader>,
}

/// What a session does with its container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run a new process in the container's context.
    Exec {
        /// The argv (`command` query parameters, in order).
        command: Vec<String>,
    },
    /// Join the container's own process: its live output, and its stdin when it has one.
    Attach,
}

/// The pod (and, for exec and attach, the running container) a session works on, with the
/// session slot it holds until it is dropped.
pub struct Target {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container (empty for port-forward, which works on the pod).
    pub container: String,
    node: NodeHandle,
    running: Option<Arc<RunningContainer>>,
    _slot: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("namespace", &self.namespace)
            .field("pod", &self.pod)
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// Runs `session` on the server's task tracker: it is cancelled (dropped) when the server
    /// shuts down, and the server's shutdown waits for it to end.
    pub fn spawn<F>(&self, session: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.spawner().spawn(session);
    }

    /// A [`Spawner`] for a session that takes this target along (so cannot call
    /// [`Target::spawn`] on it any more).
    pub fn spawner(&self) -> Spawner {
        Spawner {
            tracker: self.node.tracker().clone(),
            shutdown: self.node.shutdown().clone(),
        }
    }
}

/// Runs sessions on the server's task tracker, as [`Target::spawn`] does.
#[derive(Clone, Debug)]
pub struct Spawner {
    tracker: tokio_util::task::TaskTracker,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Spawner {
    /// Runs `session` until it ends or the server shuts down (then it is dropped); the
    /// server's shutdown waits for it.
    pub fn spawn<F>(&self, session: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = session => {}
                () = shutdown.cancelled() => {}
            }
        });
    }
}

/// A resolved request for one of the streaming subresources, before the upgrade.
#[derive(Debug)]
pub struct Session {
    /// What it works on.
    pub target: Target,
    /// What it does.
    pub kind: SessionKind,
}

impl Session {
    /// The kubelet's half of opening a session the API server has checked
    /// ([`embedded_apiserver::kubelet::StreamRequest`]):
    ///
    /// * the node must run pods as processes (the simulated node runs nothing: `400`);
    /// * exec and attach: the container must be running now. The kubelet answers `500`
    ///   `container not found ("c")` (plain text, passed through by kube-apiserver) when the
    ///   runtime has no running container of that name; so does this. Port-forward: the pod
    ///   must be `Running`;
    /// * a session slot must be free (`429` with `Retry-After: 1` otherwise).
    pub fn open(node: Option<&NodeHandle>, request: &StreamRequest) -> Result<Session, ApiError> {
        let obj = &request.pod;
        let pod = obj["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        let container = request.container.clone();
        let kind = request.kind.clone();
        let Some(node) = node.cloned() else {
            let subresource = match kind {
                SessionKind::Exec { .. } => "exec",
                SessionKind::Attach { .. } => "attach",
                SessionKind::PortForward { .. } => "portforward",
            };
            return Err(ApiError::bad_request(format!(
                "pods/{subresource} needs the process node runtime (`--node-runtime process`, \
                 ClusterBuilder::node_runtime): the simulated node runs no processes"
            )));
        };
        let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
        let running = match kind {
            SessionKind::PortForward { .. } => {
                let phase = obj["status"]["phase"].as_str().unwrap_or("Pending");
                if phase != "Running" {
                    return Err(ApiError::bad_request(format!(
                        "unable to forward port because pod is not running. Current status={phase}"
                    )));
                }
                None
            }
            _ => Some(
                node.running(namespace, pod, uid, &container)
                    .ok_or_else(|| plain(500, &format!("container not found ({container:?})")))?,
            ),
        };
        let slot = node.session_permit().ok_or_else(|| {
            let mut e = ApiError::new(
                429,
                "TooManyRequests",
                "too many exec, attach and port-forward sessions are open on the node; try again later",
            );
            e.retry_after = Some(1);
            e
        })?;
        Ok(Session {
            target: Target {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
                container,
                node,
                running,
                _slot: slot,
            },
            kind,
        })
    }
}

/// A plain-text error (what the kubelet writes, passed through by kube-apiserver's proxy).
fn plain(code: u16, message: &str) -> ApiError {
    ApiError {
        plain_text: true,
        ..ApiError::new(code, "", message)
    }
}

/// Runs an exec or an attach with the client's streams until it ends; returns the `v1.Status`
/// for the error stream (see the module doc). Dropping the future ends the session and kills
/// the process an exec started.
pub async fn run(target: Target, action: Action, opts: StreamOptions, streams: Streams) -> Value {
    let Some(running) = target.running.clone() else {
        return internal_error("exec and attach need a container; this target names a pod only");
    };
    let key = (target.namespace.clone(), target.pod.clone());
    match action {
        Action::Exec { command } => {
            process_exec::exec(&target.node, &key, &running, &command, opts, streams).await
        }
        Action::Attach => process_exec::attach(&running, opts, streams).await,
    }
}

/// Opens a TCP connection to the pod's `port`, for port-forward. Pods of the process node run
/// on the host's network, so the pod's port `P` is the host's `localhost:P` (IPv4 first, then
/// IPv6, as containerd dials `localhost` in the pod's network namespace).
pub async fn dial(target: &Target, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let _ = target;
    process_exec::dial(port).await
}

/// `{"metadata":{},"status":"Success"}`: the command exited 0 (or the attach ended).
pub fn success() -> Value {
    json!({"metadata": {}, "status": "Success"})
}

/// The Status of a command that exited with a non-zero `code`, as the kubelet writes it with
/// containerd's error text (`error executing command [sh -c exit 3], exit code 3`).
pub fn exit_failure(code: i32, command: &[String]) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The Status of a session that failed for another reason (`apierrors.NewInternalError`).
pub fn internal_error(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

/// The exit code a Status carries: 0 for Success, the `ExitCode` cause for a non-zero exit,
/// `None` for any other failure.
pub fn exit_code(status: &Value) -> Option<i32> {
    if status["status"] == "Success" {
        return Some(0);
    }
    if status["reason"] != "NonZeroExitCode" {
        return None;
    }
    status["details"]["causes"]
        .as_array()?
        .iter()
        .find(|c| c["reason"] == "ExitCode")?["message"]
        .as_str()?
        .parse()
        .ok()
}

/// The Status as kube-apiserver's stream translator re-wraps it for a `v5.channel.k8s.io`
/// client: a non-zero exit's message becomes `command terminated with non-zero exit code:
/// command terminated with exit code N` (client-go's words for the kubelet's Status, wrapped
/// again by `codeExitToStatusError`); other Statuses pass unchanged.
pub fn translated(status: &Value) -> Value {
    match (exit_code(status), status["status"].as_str()) {
        (Some(code), Some("Failure")) => {
            let mut s = status.clone();
            s["message"] = json!(format!(
                "command terminated with non-zero exit code: command terminated with exit code {code}"
            ));
            s
        }
        _ => status.clone(),
    }
}

/// The Status as JSON bytes in Go's field order (`metadata`, `status`, `message`, `reason`,
/// `details`, `code`), what `json.Marshal(metav1.Status)` writes.
pub fn status_bytes(status: &Value) -> Vec<u8> {
    let mut out = String::from("{\"metadata\":{}");
    for field in ["status", "message", "reason", "details", "code"] {
        let v = &status[field];
        if v.is_null() || v == "" {
            continue;
        }
        let v = if field == "details" {
            details_json(v)
        } else {
            v.to_string()
        };
        out.push_str(&format!(",\"{field}\":{v}"));
    }
    out.push('}');
    out.into_bytes()
}

/// `StatusDetails` in Go's order (`name`, `group`, `kind`, `uid`, `causes` each `reason`,
/// `message`, `field`; then `retryAfterSeconds`).
fn details_json(d: &Value) -> String {
    let mut parts = vec![];
    for f in ["name", "group", "kind", "uid"] {
        if let Some(v) = d[f].as_str().filter(|v| !v.is_empty()) {
            parts.push(format!("\"{f}\":{}", json!(v)));
        }
    }
    if let Some(causes) = d["causes"].as_array() {
        let causes: Vec<String> = causes
            .iter()
            .map(|c| {
                let fields: Vec<String> = ["reason", "message", "field"]
                    .iter()
                    .filter_map(|f| {
                        c[*f]
                            .as_str()
                            .filter(|v| !v.is_empty())
                            .map(|v| format!("\"{f}\":{}", json!(v)))
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            })
            .collect();
        parts.push(format!("\"causes\":[{}]", causes.join(",")));
    }
    if let Some(n) = d["retryAfterSeconds"].as_i64() {
        parts.push(format!("\"retryAfterSeconds\":{n}"));
    }
    format!("{{{}}}", parts.join(","))
}

/// What the protocols before v4 write on the error stream: nothing on success, the Status's
/// message (Go's `StatusError.Error()`) otherwise (`v1WriteStatusFunc`).
pub fn v1_error_text(status: &Value) -> Option<String> {
    (status["status"] != "Success").then(|| status["message"].as_str().unwrap_or("").to_owned())
}

/// What a transport gets to serve an upgrade: the request's headers, hyper's handle on the
/// upgraded connection, and the resolved session.
pub struct UpgradeRequest {
    /// The request's headers (`Upgrade`, `Connection`, `Sec-WebSocket-*`,
    /// `X-Stream-Protocol-Version`, ...).
    pub headers: http::HeaderMap,
    /// Resolves to the connection once the `101 Switching Protocols` answer has been sent.
    pub on_upgrade: hyper::upgrade::OnUpgrade,
    /// The session.
    pub session: Session,
}

impl std::fmt::Debug for UpgradeRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpgradeRequest")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_of_a_non_zero_exit_is_the_kubelets() {
        let s = exit_failure(3, &["sh".into(), "-c".into(), "exit 3".into()]);
        assert_eq!(
            String::from_utf8(status_bytes(&s)).unwrap(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        assert_eq!(exit_code(&s), Some(3));
        assert_eq!(
            translated(&s)["message"],
            "command terminated with non-zero exit code: command terminated with exit code 3"
        );
        assert_eq!(
            String::from_utf8(status_bytes(&success())).unwrap(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(v1_error_text(&success()), None);
        assert_eq!(exit_code(&internal_error("x")), None);
    }
}
