//! The Kubernetes channel protocols over WebSocket: exec, attach and port-forward.
//!
//! ## What the real components speak
//!
//! A WebSocket ([`super::websocket`]) carries messages, but a session has several byte
//! streams. Kubernetes multiplexes them with a **channel byte** in front of every message
//! (`k8s.io/apiserver/pkg/util/wsstream/conn.go`, client side
//! `k8s.io/client-go/tools/remotecommand/websocket.go`):
//!
//! | subprotocol | framing | error channel | spoken by |
//! |---|---|---|---|
//! | `channel.k8s.io` (or none) | binary: `[channel, data...]` | the error's text | old clients |
//! | `base64.channel.k8s.io` | text: `'0'+channel`, then base64 of the data | the error's text | browsers |
//! | `v4.channel.k8s.io` | binary | a `v1.Status` as JSON | the Python client, kubelet ≥ 1.5 |
//! | `v4.base64.channel.k8s.io` | text, base64 | a `v1.Status` as JSON | |
//! | `v5.channel.k8s.io` | binary, plus a **close signal**: the message `[255, channel]` half-closes that channel | a `v1.Status` as JSON | kubectl ≥ 1.30 |
//!
//! (`v2.channel.k8s.io` and `v3.channel.k8s.io` are names of the SPDY protocol versions, not
//! WebSocket subprotocols; a WebSocket offering only them is refused like any unknown one.)
//!
//! For **exec and attach** the channels are `0` stdin (client to server), `1` stdout, `2`
//! stderr, `3` error (the Status at the end), `4` resize (client to server, `TerminalSize`
//! JSON). Right after the upgrade the server sends an empty message on the lowest channel
//! the client reads (stdout, else stderr, else error) to say the streams are ready
//! (`createWebSocketStreams` in the kubelet's `remotecommand/websocket.go`). When the command
//! ends the server writes the Status on channel 3 and closes the connection. Only the v5
//! protocol can say "end of stdin" without closing the whole connection, which is why
//! `kubectl exec -i` needs it (before 1.30 kubectl used SPDY). kube-apiserver answers v5
//! itself and speaks SPDY to the kubelet (`StreamTranslatorHandler`); the other subprotocols
//! are proxied to the kubelet, which answers them (`pkg/kubelet/cri/streaming/
//! remotecommand/websocket.go`).
//!
//! One client race shows here and not on a real cluster: client-go's WebSocket executor starts
//! its reading goroutine before the goroutine beside it has registered the session's streams,
//! and drops a message for a stream it has not registered yet (`Unknown stream id 1,
//! discarding message`). On a real cluster the first output comes tens of milliseconds after
//! the upgrade (the SPDY round trips to the kubelet, the runtime's exec), which hides it; the
//! process node runs the command at once. So an exec or attach holds every message after
//! its "ready" message until [`FIRST_OUTPUT_HOLD`] (20 ms) has passed since it was written;
//! the command runs meanwhile, its output waits. A client starved of CPU for longer than
//! that can still lose a first message; a command that reads its stdin first is never cut,
//! since the client sends stdin only after registering every stream.
//!
//! For **port-forward** (`pkg/kubelet/cri/streaming/portforward/websocket.go`, subprotocols
//! `v4.channel.k8s.io`, `v4.base64.channel.k8s.io` or none) the query names the ports
//! (`ports=80,443`); port `i` has the data channel `2i` (both ways) and the error channel
//! `2i+1` (server to client). The server's first message on each channel is the port as two
//! little-endian bytes. The node connects to each port at once; the bytes of the data channel
//! are the TCP stream; an error (the connection refused) is written as text on the error
//! channel; a port's forwarding ends when either side of its TCP connection ends, and the
//! WebSocket closes when every port's has. kubectl ≥ 1.31 instead tunnels a whole SPDY
//! connection through a WebSocket with the subprotocol `SPDY/3.1+portforward.k8s.io` (binary
//! messages as a byte stream, [`super::websocket::byte_stream`]); that is served when the
//! SPDY transport is ([`SpdyTunnel`]).
//!
//! ## Bounds
//!
//! Frames and messages are bounded by [`super::websocket::config`]; each stream is copied through a
//! 64 KiB buffer, and at most 32 messages wait to be written, so a client that stops reading
//! stops the command's output (the process blocks on its pipe) instead of filling memory. A
//! connection that sends nothing for [`IDLE_TIMEOUT`] (the kubelet's default
//! `--streaming-connection-idle-timeout`) is closed. A client that goes away (its connection
//! ends, or it sends a close frame) ends the session at once: the exec'd process is killed.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use http::Response;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

use super::remotecommand::{
    self, Action, Reader, Session, SessionKind, StreamOptions, Streams, Target, UpgradeRequest,
    Writer,
};
use super::websocket::{self, CloseCode, Message, WebSocket};
use embedded_apiserver::ApiError;
use embedded_apiserver::kubelet::Body;

/// `v5.channel.k8s.io`: binary, Status JSON, close signals.
pub const V5_BINARY: &str = "v5.channel.k8s.io";
/// `v4.channel.k8s.io`: binary, Status JSON.
pub const V4_BINARY: &str = "v4.channel.k8s.io";
/// `v4.base64.channel.k8s.io`: text, base64, Status JSON.
pub const V4_BASE64: &str = "v4.base64.channel.k8s.io";
/// `channel.k8s.io`: binary, error text.
pub const V1_BINARY: &str = "channel.k8s.io";
/// `base64.channel.k8s.io`: text, base64, error text.
pub const V1_BASE64: &str = "base64.channel.k8s.io";
/// The subprotocol of kubectl's SPDY-over-WebSocket port-forward.
pub const SPDY_PORTFORWARD_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

/// A connection that sends nothing for this long is closed (the kubelet's default
/// streaming idle timeout, 4 hours).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// The close signal channel of `v5.channel.k8s.io`.
const CLOSE_SIGNAL: u8 = 255;

/// Bytes copied at once from a stream into one message.
const CHUNK: usize = 32 * 1024;

/// Buffer of each stream between the session and the connection.
const STREAM_BUFFER: usize = 64 * 1024;

/// Messages waiting to be written.
const QUEUE: usize = 32;

/// How long the server waits for a client's close frame (and for its last frames to be
/// written) after it closed.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// How long an exec or attach holds what follows its "ready" message (see the module doc):
/// about what a real cluster's API server, kubelet and runtime take before a command's first
/// output, so client-go's executor has registered its streams when the output comes.
const FIRST_OUTPUT_HOLD: Duration = Duration::from_millis(20);

/// A transport that serves a SPDY connection tunnelled through a WebSocket's binary messages
/// (kubectl's `SPDY/3.1+portforward.k8s.io`): given the byte stream and the session, it runs
/// the session to its end.
pub type SpdyTunnel = fn(DuplexStream, Session) -> BoxFuture<'static, ()>;

/// How one subprotocol frames channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Framing {
    base64: bool,
    /// The error channel carries a Status as JSON (v4, v5) rather than the error's text.
    status_json: bool,
    /// The client may half-close channels (v5).
    close_signal: bool,
    /// The Status is kube-apiserver's stream translator's (v5).
    translated: bool,
}

fn framing(protocol: &str) -> Framing {
    let f = |base64, status_json, close_signal| Framing {
        base64,
        status_json,
        close_signal,
        translated: close_signal,
    };
    match protocol {
        V5_BINARY => f(false, true, true),
        V4_BINARY => f(false, true, false),
        V4_BASE64 => f(true, true, false),
        V1_BASE64 => f(true, false, false),
        _ => f(false, false, false),
    }
}

/// One message on `channel` in `framing`.
fn encode(framing: Framing, channel: u8, data: &[u8]) -> Message {
    if framing.base64 {
        use base64::Engine;
        let mut text = String::with_capacity(1 + data.len().div_ceil(3) * 4);
        text.push(char::from(b'0' + channel % 10));
        base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
        return Message::Text(text.into());
    }
    let mut out = BytesMut::with_capacity(data.len() + 1);
    out.extend_from_slice(&[channel]);
    out.extend_from_slice(data);
    Message::Binary(out.freeze())
}

/// The channel and data of a client message in `framing`; `None` for a message that carries
/// no channel (empty) or is not valid in the framing (ignored, as `wsstream` ignores them).
/// In the binary framings a text message counts as bytes too: Go's `websocket.Message`
/// receives either, and the Python client sends `str` input as text frames.
fn decode(framing: Framing, msg: &Message) -> Option<(u8, Bytes)> {
    let bytes = match msg {
        Message::Binary(b) => b.clone(),
        Message::Text(t) => Bytes::from(t.clone()),
        _ => return None,
    };
    match (msg, framing.base64) {
        (_, false) if !bytes.is_empty() => Some((bytes[0], bytes.slice(1..))),
        (Message::Text(_), true) if !bytes.is_empty() => {
            use base64::Engine;
            let channel = bytes[0].checked_sub(b'0')?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(&bytes[1..])
                .ok()?;
            Some((channel, Bytes::from(data)))
        }
        _ => None,
    }
}

/// The subprotocols a session of `kind` accepts.
fn supported(kind: &SessionKind, tunnel: bool) -> Vec<&'static str> {
    match kind {
        SessionKind::PortForward { .. } => {
            let mut p = vec![V4_BINARY, V4_BASE64, ""];
            if tunnel {
                p.insert(0, SPDY_PORTFORWARD_TUNNEL);
            }
            p
        }
        _ => vec![V5_BINARY, V4_BINARY, V4_BASE64, V1_BINARY, V1_BASE64, ""],
    }
}

/// Serves a WebSocket upgrade of `pods/exec`, `pods/attach` or `pods/portforward`: the
/// handshake (an error answer when it fails), then the session on the upgraded connection,
/// spawned on the server's tracker. `tunnel` serves `SPDY/3.1+portforward.k8s.io` when the
/// SPDY transport is there.
pub fn serve(
    method: &http::Method,
    up: UpgradeRequest,
    tunnel: Option<SpdyTunnel>,
) -> Result<Response<Body>, ApiError> {
    let UpgradeRequest {
        headers,
        on_upgrade,
        session,
    } = up;
    let protocols = supported(&session.kind, tunnel.is_some());
    let (resp, protocol) = match websocket::handshake(method, &headers, &protocols) {
        Ok(ok) => ok,
        Err(refused) => return Ok(*refused),
    };
    if let SessionKind::PortForward { ports } = &session.kind
        && ports.is_empty()
        && protocol != SPDY_PORTFORWARD_TUNNEL
    {
        return Err(ApiError {
            plain_text: true,
            ..ApiError::new(400, "", "query parameter \"port\" is required")
        });
    }
    let Session { target, kind } = session;
    let spawner = target.spawner();
    spawner.spawn(async move {
        let io = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket upgrade failed");
                return;
            }
        };
        if protocol == SPDY_PORTFORWARD_TUNNEL {
            if let Some(tunnel) = tunnel {
                let (stream, pump) = websocket::byte_stream(io);
                tokio::join!(pump, tunnel(stream, Session { target, kind }));
            }
            return;
        }
        let framing = framing(&protocol);
        let io = websocket::accept(io).await;
        match kind {
            SessionKind::Exec { command, opts } => {
                remote_command(io, framing, target, Action::Exec { command }, opts).await;
            }
            SessionKind::Attach { opts } => {
                remote_command(io, framing, target, Action::Attach, opts).await;
            }
            SessionKind::PortForward { ports } => port_forward(io, framing, target, ports).await,
        }
    });
    Ok(resp)
}

/// The writing side of a connection: one task writes the queued messages in order, each
/// flushed, up to and including a close. The messages after the first wait until `hold` has
/// passed since the first was written ([`FIRST_OUTPUT_HOLD`] for exec and attach).
fn frame_writer<Si>(
    mut sink: Si,
    hold: Duration,
) -> (
    mpsc::Sender<Message>,
    impl std::future::Future<Output = ()> + Send,
)
where
    Si: futures_util::Sink<Message> + Send + Unpin,
{
    let (tx, mut rx) = mpsc::channel::<Message>(QUEUE);
    let task = async move {
        // The hold still to start (after the first message), then the time it ends.
        let mut hold = Some(hold).filter(|h| !h.is_zero());
        let mut held_until = None;
        while let Some(msg) = rx.recv().await {
            if let Some(until) = held_until.take() {
                tokio::time::sleep_until(until).await;
            }
            let last = msg.is_close();
            if sink.send(msg).await.is_err() || last {
                return;
            }
            held_until = hold.take().map(|h| tokio::time::Instant::now() + h);
        }
    };
    (tx, task)
}

/// Reads the client's messages and passes each channel message to `events` (`Some(data)`; a
/// v5 close signal is `None`) until the client closes (answered by tungstenite, which also
/// answers pings), the connection ends, the client breaks the protocol (answered with a
/// close) or it is idle for [`IDLE_TIMEOUT`]. Returns when the client is gone.
async fn read_client<S>(
    mut stream: SplitStream<WebSocket<S>>,
    framing: Framing,
    tx: mpsc::Sender<Message>,
    events: mpsc::Sender<(u8, Option<Bytes>)>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let msg = match tokio::time::timeout(IDLE_TIMEOUT, stream.next()).await {
            Err(_) => {
                let _ = tx
                    .send(websocket::close(CloseCode::Normal, "idle timeout"))
                    .await;
                return;
            }
            Ok(Some(Ok(m))) => m,
            Ok(None) => return,
            Ok(Some(Err(e))) => {
                if let Some(close) = websocket::close_for(&e) {
                    tracing::debug!(error = %e, "WebSocket client broke the protocol");
                    let _ = tx.send(close).await;
                }
                return;
            }
        };
        match &msg {
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            Message::Close(_) => {
                // Reading on writes the answer tungstenite queued, then ends.
                while let Some(Ok(_)) = stream.next().await {}
                return;
            }
            Message::Binary(b) if framing.close_signal && b.len() == 2 && b[0] == CLOSE_SIGNAL => {
                let _ = events.send((b[1], None)).await;
            }
            _ => {
                if let Some((channel, data)) = decode(framing, &msg) {
                    let _ = events.send((channel, Some(data))).await;
                }
            }
        }
    }
}

/// An exec or attach over the channel protocol (see the module doc).
async fn remote_command<S>(
    io: WebSocket<S>,
    framing: Framing,
    target: Target,
    action: Action,
    opts: StreamOptions,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (write, read) = io.split();
    let (tx, writer) = frame_writer(write, FIRST_OUTPUT_HOLD);
    let mut writer = std::pin::pin!(writer);
    let pair = || tokio::io::duplex(STREAM_BUFFER);
    // Each stream is a pipe: the session's end goes into `Streams`, ours is copied to or
    // from its channel.
    let (stdin, mut stdin_feed) = split_opt(opts.stdin, pair);
    let (stdout, stdout_drain) = split_opt(opts.stdout, pair);
    let (stderr, stderr_drain) = split_opt(opts.stderr, pair);
    let (resize, mut resize_feed) = split_opt(opts.tty, pair);
    let streams = Streams {
        stdin: stdin.map(|s| Box::new(s) as Reader),
        stdout: stdout.map(|s| Box::new(s) as Writer),
        stderr: stderr.map(|s| Box::new(s) as Writer),
        resize: resize.map(|s| Box::new(s) as Reader),
    };
    // The streams are ready: an empty message on the lowest channel the client reads.
    let ready = if opts.stdout {
        1
    } else if opts.stderr {
        2
    } else {
        3
    };
    let _ = tx.send(encode(framing, ready, &[])).await;
    let (out_tx, err_tx) = (tx.clone(), tx.clone());
    let work = async move {
        let (status, (), ()) = tokio::join!(
            remotecommand::run(target, action, opts, streams),
            drain_to_channel(stdout_drain, framing, 1, out_tx),
            drain_to_channel(stderr_drain, framing, 2, err_tx),
        );
        status
    };
    let (events, mut from_client) = mpsc::channel::<(u8, Option<Bytes>)>(QUEUE);
    let client = read_client(read, framing, tx.clone(), events);
    let dispatch = async move {
        while let Some((channel, data)) = from_client.recv().await {
            let feed = match channel {
                0 => stdin_feed.as_mut(),
                4 => resize_feed.as_mut(),
                _ => None,
            };
            let Some(feed) = feed else {
                continue;
            };
            // A failed write: the session stopped reading this stream; nothing to do.
            let _ = match data {
                Some(data) => feed.write_all(&data).await,
                None => feed.shutdown().await,
            };
        }
        std::future::pending::<()>().await;
    };
    let mut client = std::pin::pin!(client);
    let status = tokio::select! {
        s = work => s,
        () = dispatch => return,
        () = &mut client => {
            // The client went away: dropping `work` kills the command.
            tracing::debug!("WebSocket client gone; ending the session");
            drop(tx);
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut writer).await;
            return;
        }
        () = &mut writer => return,
    };
    let status = if framing.translated {
        remotecommand::translated(&status)
    } else {
        status
    };
    if let Some(bytes) = error_channel_bytes(framing, &status) {
        let _ = tx.send(encode(framing, 3, &bytes)).await;
    }
    let _ = tx.send(websocket::close(CloseCode::Normal, "")).await;
    drop(tx);
    // Write everything queued, then give the client a moment to answer the close.
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        writer.await;
        client.await;
    })
    .await;
}

/// What the error channel carries at the end: the Status as JSON (v4, v5), or the error's
/// text on failure only (older protocols).
fn error_channel_bytes(framing: Framing, status: &Value) -> Option<Vec<u8>> {
    if framing.status_json {
        Some(remotecommand::status_bytes(status))
    } else {
        remotecommand::v1_error_text(status).map(String::into_bytes)
    }
}

/// `Some` pipe ends when `wanted`.
fn split_opt(
    wanted: bool,
    pair: impl Fn() -> (DuplexStream, DuplexStream),
) -> (Option<DuplexStream>, Option<DuplexStream>) {
    if wanted {
        let (a, b) = pair();
        (Some(a), Some(b))
    } else {
        (None, None)
    }
}

/// Copies what the session writes into a pipe to `channel`, until the session drops its end.
async fn drain_to_channel(
    from: Option<DuplexStream>,
    framing: Framing,
    channel: u8,
    tx: mpsc::Sender<Message>,
) {
    let Some(mut from) = from else {
        return;
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(encode(framing, channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A port-forward over the channel protocol (see the module doc).
async fn port_forward<S>(io: WebSocket<S>, framing: Framing, target: Target, ports: Vec<u16>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (write, read) = io.split();
    let (tx, writer) = frame_writer(write, Duration::ZERO);
    let mut writer = std::pin::pin!(writer);
    let mut feeds: Vec<mpsc::Sender<Bytes>> = vec![];
    let mut forwards = vec![];
    for (i, port) in ports.into_iter().enumerate() {
        let data = (2 * i) as u8;
        let error = data + 1;
        // The first message of each channel is its port, little-endian.
        let _ = tx.send(encode(framing, data, &port.to_le_bytes())).await;
        let _ = tx.send(encode(framing, error, &port.to_le_bytes())).await;
        let (feed, from_client) = mpsc::channel::<Bytes>(QUEUE);
        feeds.push(feed);
        forwards.push(forward_port(
            &target,
            port,
            framing,
            data,
            error,
            from_client,
            tx.clone(),
        ));
    }
    let all = futures_util::future::join_all(forwards);
    let (events, mut from_client) = mpsc::channel::<(u8, Option<Bytes>)>(QUEUE);
    let client = read_client(read, framing, tx.clone(), events);
    let dispatch = async move {
        while let Some((channel, data)) = from_client.recv().await {
            let feed = feeds
                .get(usize::from(channel / 2))
                .filter(|_| channel % 2 == 0);
            if let (Some(feed), Some(data)) = (feed, data) {
                let _ = feed.send(data).await;
            }
        }
        std::future::pending::<()>().await;
    };
    let mut client = std::pin::pin!(client);
    tokio::select! {
        _ = all => {}
        () = dispatch => return,
        () = &mut client => {
            drop(tx);
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut writer).await;
            return;
        }
        () = &mut writer => return,
    }
    let _ = tx.send(websocket::close(CloseCode::Normal, "")).await;
    drop(tx);
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        writer.await;
        client.await;
    })
    .await;
}

/// One forwarded port: connect, then copy both ways until either side ends. A failed
/// connection is reported on the error channel with the kubelet's words.
async fn forward_port(
    target: &Target,
    port: u16,
    framing: Framing,
    data: u8,
    error: u8,
    mut from_client: mpsc::Receiver<Bytes>,
    tx: mpsc::Sender<Message>,
) {
    let conn = match remotecommand::dial(target, port).await {
        Ok(c) => c,
        Err(e) => {
            let msg = format!(
                "error forwarding port {port} to pod {}, uid : failed to connect to localhost:{port}: {e}",
                target.pod
            );
            let _ = tx.send(encode(framing, error, msg.as_bytes())).await;
            return;
        }
    };
    let (mut conn_read, mut conn_write) = conn.into_split();
    let to_client = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match conn_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send(encode(framing, data, &buf[..n])).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let to_pod = async {
        while let Some(b) = from_client.recv().await {
            if conn_write.write_all(&b).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = to_client => {}
        () = to_pod => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_framed_by_subprotocol() {
        let v4 = framing(V4_BINARY);
        assert_eq!(
            encode(v4, 1, b"hi"),
            Message::Binary(Bytes::from_static(b"\x01hi"))
        );
        let b64 = framing(V4_BASE64);
        assert_eq!(encode(b64, 1, b"hi"), Message::Text("1aGk=".into()));
        assert_eq!(
            decode(b64, &Message::Text("0aGk=".into())),
            Some((0, Bytes::from_static(b"hi")))
        );
        assert_eq!(
            decode(v4, &Message::Binary(Bytes::from_static(b"\x00in"))),
            Some((0, Bytes::from_static(b"in")))
        );
        assert_eq!(decode(v4, &Message::Binary(Bytes::new())), None);
        assert_eq!(
            decode(v4, &Message::Text("\x00x".into())),
            Some((0, Bytes::from_static(b"x")))
        );
        assert_eq!(
            decode(b64, &Message::Binary(Bytes::from_static(b"0x"))),
            None
        );
        assert!(framing(V5_BINARY).close_signal);
        assert!(!framing(V4_BINARY).close_signal);
        assert!(!framing("").status_json);
    }

    #[test]
    fn the_error_channel_carries_json_from_v4_and_text_before() {
        let failed = remotecommand::exit_failure(2, &["false".into()]);
        let json = error_channel_bytes(framing(V4_BINARY), &failed).unwrap();
        assert!(json.starts_with(b"{\"metadata\":{},\"status\":\"Failure\""));
        let text = error_channel_bytes(framing(V1_BINARY), &failed).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "command terminated with non-zero exit code: error executing command [false], exit code 2"
        );
        assert_eq!(
            error_channel_bytes(framing(V1_BINARY), &remotecommand::success()),
            None
        );
    }

    /// What a writer wrote, with when (paused time, so exact).
    async fn written_at(hold: Duration, messages: Vec<Message>) -> Vec<(Duration, Message)> {
        let start = tokio::time::Instant::now();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let sink = futures_util::sink::unfold(seen.clone(), move |seen, msg: Message| async move {
            seen.lock().unwrap().push((start.elapsed(), msg));
            Ok::<_, std::convert::Infallible>(seen)
        });
        let (tx, task) = frame_writer(Box::pin(sink), hold);
        let send = async move {
            for m in messages {
                tx.send(m).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::join!(task, send);
        std::mem::take(&mut *seen.lock().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn messages_after_the_first_wait_for_the_hold_in_order() {
        let msg = |b: &'static [u8]| Message::Binary(Bytes::from_static(b));
        let got = written_at(
            FIRST_OUTPUT_HOLD,
            vec![
                msg(b"\x01"),
                msg(b"\x01out"),
                msg(b"\x02err"),
                msg(b"\x01late"),
            ],
        )
        .await;
        let times: Vec<u128> = got.iter().map(|(t, _)| t.as_millis()).collect();
        // The ready message at once; the output held to 20 ms, then in order; what comes
        // after the hold is not held again (the last was sent at 3 ms, written after the rest).
        assert_eq!(times, [0, 20, 20, 20]);
        let order: Vec<Message> = got.into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            order,
            [
                msg(b"\x01"),
                msg(b"\x01out"),
                msg(b"\x02err"),
                msg(b"\x01late")
            ]
        );
        let got = written_at(Duration::ZERO, vec![msg(b"\x00"), msg(b"\x01")]).await;
        let times: Vec<u128> = got.iter().map(|(t, _)| t.as_millis()).collect();
        assert_eq!(times, [0, 1]);
    }

    #[test]
    fn port_forward_offers_the_tunnel_only_when_served() {
        let pf = SessionKind::PortForward { ports: vec![80] };
        assert!(!supported(&pf, false).contains(&SPDY_PORTFORWARD_TUNNEL));
        assert_eq!(supported(&pf, true)[0], SPDY_PORTFORWARD_TUNNEL);
        let exec = SessionKind::Attach {
            opts: StreamOptions::default(),
        };
        assert_eq!(supported(&exec, true)[0], V5_BINARY);
    }
}
