//! The Kubernetes stream protocols over SPDY: exec and attach (`channel.k8s.io` v1 to v4) and
//! port-forward (`portforward.k8s.io`), as the kubelet serves them.
//!
//! ## Exec and attach (`pkg/kubelet/cri/streaming/remotecommand/httpstream.go`)
//!
//! After the upgrade the client opens one SPDY stream per byte stream it wants, each named by its
//! `streamType` header: `error` (always), `stdin`, `stdout`, `stderr` (as the query asked) and,
//! with `tty` on v3 and v4, `resize`. The server accepts each (`SYN_REPLY`) and waits until all
//! the expected ones have been answered, at most [`STREAM_CREATION_TIMEOUT`] (the kubelet's
//! 30 s); a stream of another type is answered and not counted, as the kubelet only logs it.
//! Then the session runs; at its end the server writes the outcome on the error stream and closes
//! every stream and the connection:
//!
//! | protocol | error stream |
//! |---|---|
//! | `v4.channel.k8s.io` | the `v1.Status` as JSON, success included (`v4WriteStatusFunc`) |
//! | `v3`, `v2`, `channel.k8s.io` (v1) | nothing on success, the Status's message as text otherwise |
//!
//! v1 also closes the server's half of stdin at once (its `waitForStreams`). `v5.channel.k8s.io`
//! exists only over WebSockets; SPDY serves [`EXEC_PROTOCOLS`], the kubelet's
//! `SupportedStreamingProtocols`.
//!
//! ## Port-forward (`pkg/kubelet/cri/streaming/portforward/httpstream.go`)
//!
//! The only protocol is `portforward.k8s.io`. For every TCP connection kubectl accepts locally
//! it opens two streams with the same `requestID` header and the remote `port`: first `error`
//! (whose write side it closes at once), then `data`. A stream without a valid `port` (a number
//! in 1..=65535) or with another `streamType` is refused (`RST_STREAM`). When both streams of a
//! request are there the server dials the pod's port and copies bytes both ways; a failed dial is
//! written as text on the error stream (`error forwarding port P to pod ...: ...`), which kubectl
//! prints as `an error occurred forwarding L -> P: ...`. A pair still incomplete after
//! [`STREAM_CREATION_TIMEOUT`] is dropped with `timed out waiting for streams` on its error
//! stream. Clients too old to send `requestID` get the kubelet's fallback: the error stream's id
//! (or the data stream's id minus 2). As containerd does, forwarding stops when one direction has
//! ended and the other has had one more second, then both streams are closed: kubectl waits for
//! the end of the error stream before it closes the local connection.
//!
//! ## Where the connections come from
//!
//! [`serve`] takes a request the HTTP layer has resolved into a [`Session`] (pod, container,
//! options: [`crate::remotecommand`]) and that asked for `Upgrade: SPDY/3.1`, answers `101`, and
//! runs the session on hyper's upgraded connection. [`tunnel`] runs port-forward on the byte
//! stream of a WebSocket whose subprotocol is `SPDY/3.1+portforward.k8s.io` (kubectl 1.31+):
//! kube-apiserver's `streamtunnel.go` strips the WebSocket framing and hands the raw SPDY
//! frames to the kubelet, so inside the tunnel there is no HTTP upgrade, only the session.
//! With SPDY the Status on the error stream is the kubelet's own (kube-apiserver only proxies
//! the bytes), not the re-wrapped one of its WebSocket stream translator.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Connection, IncomingStream, Stream, rst};
use crate::remotecommand::{
    self, Action, Reader, Session, SessionKind, StreamOptions, Target, UpgradeRequest, Writer,
};
use embedded_apiserver::kubelet::Body;

/// The exec/attach protocols SPDY serves, newest first (the kubelet's list).
pub const EXEC_PROTOCOLS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];
/// The port-forward protocol.
pub const PORT_FORWARD_PROTOCOLS: [&str; 1] = ["portforward.k8s.io"];
/// How long the client has to open its streams (the kubelet's `DefaultStreamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long forwarding waits for the second direction once the first has ended (containerd).
pub const FORWARD_LINGER: Duration = Duration::from_secs(1);
/// How long closing a connection waits for the client to take the last frames.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The negotiated `channel.k8s.io` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecProtocol {
    V1,
    V2,
    V3,
    V4,
}

impl ExecProtocol {
    /// The protocol of a negotiated name (one of [`EXEC_PROTOCOLS`]; anything else is v1, as the
    /// kubelet falls back for a client that negotiated nothing).
    pub fn from_name(name: &str) -> Self {
        match name {
            "v4.channel.k8s.io" => Self::V4,
            "v3.channel.k8s.io" => Self::V3,
            "v2.channel.k8s.io" => Self::V2,
            _ => Self::V1,
        }
    }

    /// v3 and v4 carry terminal sizes on a `resize` stream.
    pub fn supports_resize(self) -> bool {
        matches!(self, Self::V3 | Self::V4)
    }
}

/// Which streams an exec or attach asked for (the query's `stdin`, `stdout`, `stderr`, `tty`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The streams of one exec or attach, once the client has opened them.
#[derive(Default)]
pub struct ExecStreams {
    pub error: Option<Stream>,
    pub stdin: Option<Stream>,
    pub stdout: Option<Stream>,
    pub stderr: Option<Stream>,
    pub resize: Option<Stream>,
}

/// Accepts the client's streams until the expected number has been answered (the kubelet's
/// `waitForStreams`), or fails after `timeout` or when the connection ends first.
pub async fn wait_for_exec_streams(
    conn: &mut Connection,
    protocol: ExecProtocol,
    wanted: Wanted,
    timeout: Duration,
) -> Result<ExecStreams, String> {
    let expected = 1
        + usize::from(wanted.stdin)
        + usize::from(wanted.stdout)
        + usize::from(wanted.stderr)
        + usize::from(wanted.tty && protocol.supports_resize());
    let deadline = Instant::now() + timeout;
    let mut streams = ExecStreams::default();
    let mut received = 0;
    while received < expected {
        let incoming = tokio::select! {
            incoming = conn.accept() => incoming,
            () = tokio::time::sleep_until(deadline) => {
                return Err("timed out waiting for client to create streams".into());
            }
        };
        let Some(incoming) = incoming else {
            return Err("the connection ended before the client created its streams".into());
        };
        let stream_type = incoming.header("streamtype").unwrap_or("").to_string();
        let slot = match stream_type.as_str() {
            "error" => &mut streams.error,
            "stdin" => &mut streams.stdin,
            "stdout" => &mut streams.stdout,
            "stderr" => &mut streams.stderr,
            "resize" if protocol.supports_resize() => &mut streams.resize,
            other => {
                tracing::debug!(stream_type = other, "unexpected stream type");
                drop(incoming.accept());
                continue;
            }
        };
        *slot = Some(incoming.accept());
        received += 1;
    }
    if protocol == ExecProtocol::V1
        && let Some(stdin) = streams.stdin.as_mut()
    {
        let _ = stdin.shutdown().await;
    }
    Ok(streams)
}

/// Writes the outcome on the error stream: `status_json` for v4, `failure_text` (the Status's
/// message, when it is a failure) for the older protocols; then ends the stream.
pub async fn write_status(
    error: &mut Stream,
    protocol: ExecProtocol,
    status_json: &[u8],
    failure_text: Option<&str>,
) {
    let bytes = match protocol {
        ExecProtocol::V4 => Some(status_json),
        _ => failure_text.map(str::as_bytes),
    };
    if let Some(bytes) = bytes {
        let _ = error.write_all(bytes).await;
    }
    let _ = error.shutdown().await;
}

/// One port-forward request: its two streams as they arrive.
struct Pair {
    error: Option<Stream>,
    data: Option<Stream>,
    deadline: Instant,
}

/// Serves port-forward streams on `conn` until the client closes it: each complete pair's data
/// stream is connected to `dial(port)`. `pod` names the pod in error messages.
pub async fn serve_port_forward<D, F, C>(mut conn: Connection, pod: String, dial: D)
where
    D: Fn(u16) -> F,
    F: Future<Output = io::Result<C>> + Send + 'static,
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut forwards = JoinSet::new();
    loop {
        let next_deadline = pairs.values().map(|p| p.deadline).min();
        let incoming = tokio::select! {
            incoming = conn.accept() => incoming,
            () = sleep_until_opt(next_deadline) => {
                let now = Instant::now();
                let expired: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| p.deadline <= now)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in expired {
                    if let Some(pair) = pairs.remove(&id) {
                        let message = format!("timed out waiting for streams of request {id}");
                        tracing::debug!(%message, "port-forward");
                        if let Some(mut error) = pair.error {
                            let _ = error.write_all(message.as_bytes()).await;
                        }
                    }
                }
                continue;
            }
            Some(_) = forwards.join_next(), if !forwards.is_empty() => continue,
        };
        let Some(incoming) = incoming else {
            break;
        };
        let port = match check_port_forward_stream(&incoming) {
            Ok(port) => port,
            Err(message) => {
                tracing::debug!(%message, "port-forward stream refused");
                incoming.refuse(rst::CANCEL);
                continue;
            }
        };
        let request_id = request_id(&incoming);
        let is_error = incoming.header("streamtype") == Some("error");
        let stream = incoming.accept();
        let pair = pairs.entry(request_id.clone()).or_insert_with(|| Pair {
            error: None,
            data: None,
            deadline: Instant::now() + STREAM_CREATION_TIMEOUT,
        });
        let slot = if is_error {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            let which = if is_error { "error" } else { "data" };
            let message = format!(
                "error processing stream for request {request_id}: {which} stream already assigned"
            );
            if let Some(error) = pair.error.as_mut() {
                let _ = error.write_all(message.as_bytes()).await;
            }
            continue;
        }
        *slot = Some(stream);
        if pair.error.is_some() && pair.data.is_some() {
            let Some(Pair {
                error: Some(error),
                data: Some(data),
                ..
            }) = pairs.remove(&request_id)
            else {
                continue;
            };
            let connect = dial(port);
            forwards.spawn(forward(error, data, port, pod.clone(), connect));
        }
    }
    forwards.shutdown().await;
    conn.close(Duration::from_secs(5)).await;
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The kubelet's `httpStreamReceived` checks: a `port` in 1..=65535 and a `streamType` of
/// `error` or `data`.
fn check_port_forward_stream(incoming: &IncomingStream) -> Result<u16, String> {
    let port = incoming
        .header("port")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| "\"port\" header is required".to_string())?;
    let port: u16 = port
        .parse()
        .map_err(|e| format!("unable to parse {port:?} as a port: {e}"))?;
    if port < 1 {
        return Err(format!("port \"{port}\" must be > 0"));
    }
    match incoming.header("streamtype") {
        None | Some("") => Err("\"streamType\" header is required".into()),
        Some("error" | "data") => Ok(port),
        Some(other) => Err(format!("invalid stream type {other:?}")),
    }
}

/// The `requestID` header, or the kubelet's guess for clients that send none.
fn request_id(incoming: &IncomingStream) -> String {
    match incoming.header("requestid") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => match incoming.header("streamtype") {
            Some("data") => incoming.id().saturating_sub(2).to_string(),
            _ => incoming.id().to_string(),
        },
    }
}

async fn forward<F, C>(mut error: Stream, mut data: Stream, port: u16, pod: String, connect: F)
where
    F: Future<Output = io::Result<C>>,
    C: AsyncRead + AsyncWrite + Unpin,
{
    let conn = match connect.await {
        Ok(conn) => conn,
        Err(e) => {
            let message = format!("error forwarding port {port} to pod {pod}: {e}");
            tracing::debug!(%message, "port-forward");
            let _ = error.write_all(message.as_bytes()).await;
            let _ = error.shutdown().await;
            return;
        }
    };
    {
        let (mut from_pod, mut to_pod) = tokio::io::split(conn);
        let (mut from_client, mut to_client) = tokio::io::split(&mut data);
        let upstream = async {
            let result = tokio::io::copy(&mut from_client, &mut to_pod).await;
            let _ = to_pod.shutdown().await;
            result
        };
        let downstream = async {
            let result = tokio::io::copy(&mut from_pod, &mut to_client).await;
            let _ = to_client.shutdown().await;
            result
        };
        tokio::pin!(upstream, downstream);
        // Stop when one direction ends and the other has had FORWARD_LINGER more (containerd's
        // portForward), so a pod that closes its socket ends the forward even if the client does not.
        tokio::select! {
            _ = &mut upstream => {
                let _ = tokio::time::timeout(FORWARD_LINGER, &mut downstream).await;
            }
            _ = &mut downstream => {
                let _ = tokio::time::timeout(FORWARD_LINGER, &mut upstream).await;
            }
        }
    }
    let _ = data.shutdown().await;
    let _ = error.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Wiring to the sessions of `remotecommand`.

/// Serves an exec, attach or port-forward request that asked for `Upgrade: SPDY/3.1`: checks the
/// upgrade headers and negotiates the protocol (`400` and `403` as apimachinery's upgrader and
/// `httpstream.Handshake` answer them), answers `101 Switching Protocols`, and runs the session
/// on the upgraded connection, on the server's task tracker.
pub fn serve(request: UpgradeRequest) -> http::Response<Body> {
    let UpgradeRequest {
        headers,
        on_upgrade,
        session,
    } = request;
    if !super::is_spdy_upgrade(&headers) {
        return refusal(
            http::StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
            &[],
        );
    }
    let server: &[&str] = match session.kind {
        SessionKind::PortForward { .. } => &PORT_FORWARD_PROTOCOLS,
        _ => &EXEC_PROTOCOLS,
    };
    let protocol = match super::negotiate_protocol(&headers, server) {
        Ok(protocol) => protocol,
        Err(refused) => return refusal(refused.status, &refused.message, &refused.accepted),
    };
    let response = super::switching_protocols(&protocol);
    let Session { target, kind } = session;
    // `spawn` borrows the target; the session owns it, so it travels through a channel.
    let (give, take) = tokio::sync::oneshot::channel::<Target>();
    target.spawn(async move {
        let Ok(target) = take.await else { return };
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "SPDY upgrade failed");
                return;
            }
        };
        let conn = Connection::new(hyper_util::rt::TokioIo::new(upgraded));
        let protocol = ExecProtocol::from_name(&protocol);
        match kind {
            SessionKind::Exec { command, opts } => {
                exec(conn, target, Action::Exec { command }, opts, protocol).await;
            }
            SessionKind::Attach { opts } => {
                exec(conn, target, Action::Attach, opts, protocol).await
            }
            SessionKind::PortForward { .. } => port_forward(conn, target).await,
        }
    });
    let _ = give.send(target);
    response
}

/// Serves port-forward on a SPDY session that arrives inside a WebSocket
/// (`SPDY/3.1+portforward.k8s.io`, kube-apiserver's `streamtunnel.go`): the same session as over
/// an upgraded connection, on the WebSocket's byte stream.
pub async fn serve_tunneled_port_forward<T>(io: T, target: Target)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    port_forward(Connection::new(io), target).await;
}

/// The tunnel transport of the WebSocket side: port-forward's SPDY session on the byte stream
/// of a `SPDY/3.1+portforward.k8s.io` WebSocket (the signature its caller expects).
pub fn tunnel(
    io: tokio::io::DuplexStream,
    session: Session,
) -> futures_util::future::BoxFuture<'static, ()> {
    Box::pin(serve_tunneled_port_forward(io, session.target))
}

fn refusal(status: http::StatusCode, message: &str, accepted: &[String]) -> http::Response<Body> {
    // Go's `http.Error`: plain text and a newline.
    use http_body_util::BodyExt;
    let body = http_body_util::Full::new(bytes::Bytes::from(format!("{message}\n")));
    let mut response = http::Response::new(body.map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    for protocol in accepted {
        if let Ok(value) = http::HeaderValue::from_str(protocol) {
            headers.append("x-accepted-stream-protocol-versions", value);
        }
    }
    response
}

/// An exec or attach: take the streams, run the session, write its Status, close (the kubelet's
/// `ServeExec`/`ServeAttach`). A client that goes away drops the session, which ends the process.
async fn exec(
    mut conn: Connection,
    target: Target,
    action: Action,
    opts: StreamOptions,
    protocol: ExecProtocol,
) {
    let wanted = Wanted {
        stdin: opts.stdin,
        stdout: opts.stdout,
        stderr: opts.stderr,
        tty: opts.tty,
    };
    let mut streams =
        match wait_for_exec_streams(&mut conn, protocol, wanted, STREAM_CREATION_TIMEOUT).await {
            Ok(streams) => streams,
            Err(message) => {
                tracing::debug!(%message, pod = %target.pod, "exec over SPDY not started");
                conn.close(CLOSE_TIMEOUT).await;
                return;
            }
        };
    let mut error = streams.error.take();
    let session = remotecommand::Streams {
        stdin: streams.stdin.take().map(|s| Box::new(s) as Reader),
        stdout: streams.stdout.take().map(|s| Box::new(s) as Writer),
        stderr: streams.stderr.take().map(|s| Box::new(s) as Writer),
        resize: streams.resize.take().map(|s| Box::new(s) as Reader),
    };
    let status = tokio::select! {
        status = remotecommand::run(target, action, opts, session) => status,
        () = conn.closed() => return,
    };
    if let Some(error) = error.as_mut() {
        let text = remotecommand::v1_error_text(&status);
        write_status(
            error,
            protocol,
            &remotecommand::status_bytes(&status),
            text.as_deref(),
        )
        .await;
    }
    drop(error);
    conn.close(CLOSE_TIMEOUT).await;
}

async fn port_forward(conn: Connection, target: Target) {
    let pod = format!("{}/{}", target.namespace, target.pod);
    let target = std::sync::Arc::new(target);
    serve_port_forward(conn, pod, move |port| {
        let target = target.clone();
        async move { remotecommand::dial(&target, port).await }
    })
    .await;
}
