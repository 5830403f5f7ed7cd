//! WebSocket connections (RFC 6455): the upgrade handshake here, the frames and messages in
//! `tungstenite`.
//!
//! ## What a WebSocket is
//!
//! A WebSocket turns one HTTP/1.1 request into a long-lived, two-way message channel. The
//! client sends `GET` with `Connection: Upgrade`, `Upgrade: websocket`,
//! `Sec-WebSocket-Version: 13`, a random `Sec-WebSocket-Key`, and optionally the subprotocols
//! it speaks (`Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io`). The server
//! answers `101 Switching Protocols` with `Sec-WebSocket-Accept` (base64 of the SHA-1 of the
//! key followed by the fixed GUID `258EAFA5-E914-47DA-95CA-C5AB0DC85B11`, proof that it
//! understood the handshake) and the one subprotocol it chose. From then on both sides send
//! **frames**: text, binary, continuation (the fragments of a long message), close, ping and
//! pong; every frame from the client is masked; control frames carry at most 125 bytes.
//!
//! ## Who does what
//!
//! The upgrade is an HTTP exchange, so it is answered here, through hyper: [`handshake`]
//! checks a request as Go's `golang.org/x/net/websocket` server does for kube-apiserver and the
//! kubelet (method `GET`, version 13, a key that is 16 bytes of base64; else `400`, `405`) and
//! picks the subprotocol: the client's first that the server supports; none supported is
//! `403 Forbidden`, as the kubelet's `wsstream` handshake answers.
//!
//! The frames are `tokio-tungstenite`'s: [`accept`] wraps hyper's upgraded connection in a
//! server-side [`WebSocket`] (no second handshake), which reads frames, unmasks and
//! reassembles them into [`Message`]s, answers pings with pongs and a client's close with a
//! close, and writes the server's messages. Its bounds are the server's, set by [`config`]: a
//! frame whose declared length is above [`MAX_FRAME`] is refused from its header, before any of
//! its payload is read, and so is a message whose fragments add up past [`MAX_MESSAGE`].
//! A read that fails tells why ([`close_for`]); the owner of the connection then closes it with
//! the RFC's code: 1009 *message too big* for those two bounds, 1007 for a text message that
//! is not UTF-8, 1002 *protocol error* for the rest (an unmasked frame, a reserved bit or
//! opcode, a fragmented or oversized control frame, a continuation with nothing to continue, a
//! new message inside a fragmented one).
//!
//! [`byte_stream`] presents the binary messages of a connection as one byte stream
//! (`AsyncRead + AsyncWrite`), for protocols that tunnel a byte stream through a WebSocket
//! (kubectl 1.33 tunnels SPDY this way for port-forward). The Kubernetes channel protocols on
//! top are [`super::wsstream`].

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::{Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

pub use tokio_tungstenite::tungstenite::Message;
pub use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use embedded_apiserver::ApiError;
use embedded_apiserver::kubelet::Body;

/// A server-side WebSocket on an upgraded connection `S`.
pub type WebSocket<S> = WebSocketStream<S>;

/// Largest frame payload accepted from a client: 1 MiB.
pub const MAX_FRAME: usize = 1024 * 1024;

/// Largest message (all fragments together) accepted from a client: 4 MiB.
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// The GUID RFC 6455 appends to the client's key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Whether a request asks for a WebSocket: `Connection` has the `upgrade` token and
/// `Upgrade` is `websocket` (case-insensitive), as Go's `wsstream.IsWebSocketRequest`.
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    has_token(header::CONNECTION, "upgrade") && has_token(header::UPGRADE, "websocket")
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    let mut input = key.trim().as_bytes().to_vec();
    input.extend_from_slice(GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The subprotocols a client offers, in its order (`Sec-WebSocket-Protocol`, possibly
/// repeated, comma-separated).
pub fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Checks a WebSocket upgrade request and picks the subprotocol among `supported` (`""`
/// stands for "no subprotocol asked", allowed when listed). Returns the `101` answer to send
/// and the chosen subprotocol, or the error answer (see the module doc).
pub fn handshake(
    method: &http::Method,
    headers: &HeaderMap,
    supported: &[&str],
) -> Result<(Response<Body>, String), Box<Response<Body>>> {
    let fail = |code: StatusCode, text: String| {
        let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
        *r.status_mut() = code;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Box::new(r)
    };
    if method != http::Method::GET {
        return Err(fail(
            StatusCode::METHOD_NOT_ALLOWED,
            "bad method: a WebSocket upgrade is a GET".into(),
        ));
    }
    let version = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if version.trim() != "13" {
        let mut r = fail(
            StatusCode::BAD_REQUEST,
            "bad protocol version: this server speaks WebSocket version 13".into(),
        );
        r.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return Err(r);
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim();
    let decoded = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(key)
    };
    if !matches!(decoded, Ok(k) if k.len() == 16) {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            "missing or bad Sec-WebSocket-Key: 16 bytes of base64 expected".into(),
        ));
    }
    let offered = offered_protocols(headers);
    let wanted: Vec<&str> = if offered.is_empty() {
        vec![""]
    } else {
        offered.iter().map(String::as_str).collect()
    };
    let Some(chosen) = wanted.iter().find(|p| supported.contains(p)) else {
        let supported: Vec<&str> = supported
            .iter()
            .copied()
            .filter(|p| !p.is_empty())
            .collect();
        return Err(fail(
            StatusCode::FORBIDDEN,
            format!(
                "requested protocol(s) are not supported: [{}]; supports [{}]",
                offered.join(" "),
                supported.join(" ")
            ),
        ));
    };
    let mut r = Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept_key(key)) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if !chosen.is_empty()
        && let Ok(v) = HeaderValue::from_str(chosen)
    {
        h.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    Ok((r, (*chosen).to_owned()))
}

/// An `ApiError` for a handshake the transport refuses before looking at WebSocket headers.
pub fn upgrade_required() -> ApiError {
    ApiError::bad_request("Upgrade request required")
}

/// The server's bounds on what a client sends: [`MAX_FRAME`], [`MAX_MESSAGE`], and masked
/// frames only (RFC 6455 §5.1).
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_frame_size(Some(MAX_FRAME))
        .max_message_size(Some(MAX_MESSAGE))
        .accept_unmasked_frames(false)
}

/// The server's side of a WebSocket on `io`, a connection whose upgrade was answered by
/// [`handshake`].
pub async fn accept<S>(io: S) -> WebSocket<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    WebSocketStream::from_raw_socket(io, Role::Server, Some(config())).await
}

/// A close message with `code` and `reason` (cut to fit a control frame's 125 bytes).
pub fn close(code: CloseCode, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: reason[..end].into(),
    }))
}

/// The close message a failed read calls for: 1009 for a frame or message over the bounds,
/// 1007 for text that is not UTF-8, 1002 for a broken protocol; `None` when there is no one
/// left to tell (the connection failed, or ended without a close frame).
pub fn close_for(error: &WsError) -> Option<Message> {
    let code = match error {
        WsError::Capacity(_) => CloseCode::Size,
        WsError::Utf8(_) => CloseCode::Invalid,
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => return None,
        WsError::Protocol(_) => CloseCode::Protocol,
        _ => return None,
    };
    Some(close(code, &error.to_string()))
}

/// The bytes a [`byte_stream`] buffers in each direction.
pub const BYTE_STREAM_BUFFER: usize = 64 * 1024;

/// Presents the binary messages of an upgraded WebSocket connection `io` as one byte stream:
/// what is written to the returned stream goes out as binary messages (one per write, at most
/// [`BYTE_STREAM_BUFFER`] bytes each), and the payloads of the client's binary messages are
/// what reads return. Pings are answered; text messages are a protocol error here; a close
/// from the client (or the end of the connection) is the end of the read side, and shutting
/// down the write side of the returned stream sends a close. The returned future does the
/// copying and must be spawned (it ends when both directions have ended, or when `io` fails).
pub fn byte_stream<S>(
    io: S,
) -> (
    tokio::io::DuplexStream,
    impl std::future::Future<Output = ()> + Send,
)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (user, inner) = tokio::io::duplex(BYTE_STREAM_BUFFER);
    let pump = async move {
        let (mut sink, mut stream) = accept(io).await.split();
        let (inner_read, mut inner_write) = tokio::io::split(inner);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(16);
        let writer = async move {
            while let Some(msg) = rx.recv().await {
                let last = msg.is_close();
                if sink.send(msg).await.is_err() || last {
                    return;
                }
            }
        };
        let out_tx = tx.clone();
        let outgoing = async move {
            let mut inner_read = inner_read;
            let mut buf = vec![0u8; BYTE_STREAM_BUFFER];
            loop {
                match inner_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let chunk = Bytes::copy_from_slice(&buf[..n]);
                        if out_tx.send(Message::Binary(chunk)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = out_tx.send(close(CloseCode::Normal, "")).await;
        };
        let incoming = async move {
            loop {
                match stream.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        if inner_write.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Text(_))) => {
                        let reason = "text message on a byte stream";
                        let _ = tx.send(close(CloseCode::Protocol, reason)).await;
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Err(e)) => {
                        if let Some(close) = close_for(&e) {
                            let _ = tx.send(close).await;
                        }
                        break;
                    }
                }
            }
            let _ = inner_write.shutdown().await;
            // Sends the answer to a client's close, which tungstenite queued.
            while let Some(Ok(_)) = stream.next().await {}
        };
        tokio::join!(writer, outgoing, incoming);
    };
    (user, pump)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 65535 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    /// A close frame's payload: the code, then the reason.
    fn close_payload(code: u16, reason: &str) -> Vec<u8> {
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice(reason.as_bytes());
        p
    }

    /// An unmasked server frame, as the server must write it.
    fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => out.push(n as u8),
            n if n <= 65535 => {
                out.push(126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(payload);
        out
    }

    /// What the server reads from `bytes` (the client's side of a connection that then ends):
    /// its messages, then how the reading ended (`Ok(None)` for the end of the connection, or
    /// the close the server owes the client).
    async fn read_all(bytes: Vec<u8>) -> (Vec<Message>, Result<(), (u16, String)>) {
        let (mut client, server) = tokio::io::duplex(16 << 20);
        client.write_all(&bytes).await.unwrap();
        // The end of what the client sends; it stays open for what the server answers.
        client.shutdown().await.unwrap();
        let mut ws = accept(server).await;
        let mut got = vec![];
        loop {
            match ws.next().await {
                Some(Ok(m)) => got.push(m),
                None => return (got, Ok(())),
                Some(Err(e)) => {
                    let end = match close_for(&e) {
                        Some(Message::Close(Some(f))) => Err((f.code.into(), f.reason.to_string())),
                        _ => Ok(()),
                    };
                    return (got, end);
                }
            }
        }
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn masked_frames_fragments_and_interleaved_pings_make_messages() {
        let mut bytes = client_frame(true, 2, b"\x01hello");
        bytes.extend(client_frame(false, 1, b"frag"));
        bytes.extend(client_frame(true, 9, b"p"));
        bytes.extend(client_frame(false, 0, b"men"));
        bytes.extend(client_frame(true, 0, b"ted"));
        bytes.extend(client_frame(true, 8, &close_payload(1000, "bye")));
        let (got, end) = read_all(bytes).await;
        assert_eq!(
            got,
            vec![
                Message::Binary(Bytes::from_static(b"\x01hello")),
                Message::Ping(Bytes::from_static(b"p")),
                Message::Text("fragmented".into()),
                Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "bye".into()
                })),
            ]
        );
        assert_eq!(end, Ok(()));
    }

    #[tokio::test]
    async fn a_text_message_split_inside_a_character_is_reassembled() {
        // "é" is two bytes: the first fragment ends in the middle of it.
        let mut bytes = client_frame(false, 1, b"caf\xc3");
        bytes.extend(client_frame(true, 0, b"\xa9"));
        bytes.extend(client_frame(true, 8, &close_payload(1000, "")));
        let (got, _) = read_all(bytes).await;
        assert_eq!(got[0], Message::Text("café".into()));
    }

    #[tokio::test]
    async fn a_16_bit_length_frame_is_read() {
        let payload = vec![7u8; 300];
        let (got, _) = read_all(client_frame(true, 2, &payload)).await;
        assert_eq!(got[0], Message::Binary(Bytes::from(payload)));
    }

    #[tokio::test]
    async fn malformed_frames_are_protocol_errors() {
        let code = |end: Result<(), (u16, String)>| end.err().map(|(c, _)| c);
        // Unmasked.
        assert_eq!(code(read_all(vec![0x82, 0x01, 0x00]).await.1), Some(1002));
        // Reserved bit.
        let mut f = client_frame(true, 2, b"x");
        f[0] |= 0x40;
        assert_eq!(code(read_all(f).await.1), Some(1002));
        // Reserved opcode.
        assert_eq!(
            code(read_all(client_frame(true, 3, b"x")).await.1),
            Some(1002)
        );
        // Fragmented ping.
        assert_eq!(
            code(read_all(client_frame(false, 9, b"x")).await.1),
            Some(1002)
        );
        // A ping over 125 bytes.
        assert_eq!(
            code(read_all(client_frame(true, 9, &[0; 126])).await.1),
            Some(1002)
        );
        // Continuation of nothing.
        assert_eq!(
            code(read_all(client_frame(true, 0, b"x")).await.1),
            Some(1002)
        );
        // Text that is not UTF-8.
        assert_eq!(
            code(read_all(client_frame(true, 1, &[0xff, 0xfe])).await.1),
            Some(1007)
        );
        // A new message inside a fragmented one.
        let mut f = client_frame(false, 2, b"a");
        f.extend(client_frame(true, 2, b"b"));
        assert_eq!(code(read_all(f).await.1), Some(1002));
        // A close frame with a one-byte body.
        assert_eq!(
            code(read_all(client_frame(true, 8, &[3])).await.1),
            Some(1002)
        );
        // Cut short: the connection ended, there is no one to tell.
        let mut f = client_frame(true, 2, b"abcdef");
        f.truncate(5);
        assert_eq!(read_all(f).await, (vec![], Ok(())));
    }

    #[tokio::test]
    async fn oversized_frames_and_messages_are_refused_with_1009() {
        // The declared length alone is refused: no payload follows.
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(u64::MAX).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        let (got, end) = read_all(f).await;
        assert!(got.is_empty());
        assert_eq!(end.err().map(|(c, _)| c), Some(1009));
        // One byte over the frame bound, declared.
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(MAX_FRAME as u64 + 1).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(read_all(f).await.1.err().map(|(c, _)| c), Some(1009));
        // A frame of exactly the bound is read.
        let (got, end) = read_all(client_frame(true, 2, &vec![1; MAX_FRAME])).await;
        assert_eq!((got[0].len(), end), (MAX_FRAME, Ok(())));
        // Fragments within the frame bound that add up past the message bound.
        let mut f = vec![];
        f.extend(client_frame(false, 2, &vec![0; MAX_FRAME]));
        for _ in 0..3 {
            f.extend(client_frame(false, 0, &vec![0; MAX_FRAME]));
        }
        f.extend(client_frame(true, 0, &[0]));
        let (got, end) = read_all(f).await;
        assert!(got.is_empty());
        assert_eq!(end.err().map(|(c, _)| c), Some(1009));
    }

    #[test]
    fn a_close_reason_is_cut_to_fit_a_control_frame() {
        let Message::Close(Some(f)) = close(CloseCode::Protocol, &"é".repeat(100)) else {
            panic!("not a close");
        };
        assert_eq!(f.reason.len(), 122);
        assert_eq!(u16::from(f.code), 1002);
    }

    #[test]
    fn the_handshake_checks_version_key_and_subprotocol() {
        let mut h = HeaderMap::new();
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        h.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v9.channel.k8s.io, v4.channel.k8s.io"),
        );
        let get = http::Method::GET;
        let (resp, chosen) = handshake(&get, &h, &["v4.channel.k8s.io", ""]).unwrap();
        assert_eq!(resp.status(), 101);
        assert_eq!(chosen, "v4.channel.k8s.io");
        assert_eq!(
            resp.headers()[header::SEC_WEBSOCKET_ACCEPT],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let e = handshake(&get, &h, &["v5.channel.k8s.io"]).unwrap_err();
        assert_eq!(e.status(), 403);
        let e = handshake(&http::Method::POST, &h, &["v4.channel.k8s.io"]).unwrap_err();
        assert_eq!(e.status(), 405);
        h.insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("8"));
        assert_eq!(
            handshake(&get, &h, &["v4.channel.k8s.io"])
                .unwrap_err()
                .status(),
            400
        );
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        h.insert(header::SEC_WEBSOCKET_KEY, HeaderValue::from_static("short"));
        assert_eq!(
            handshake(&get, &h, &["v4.channel.k8s.io"])
                .unwrap_err()
                .status(),
            400
        );
        h.remove(header::SEC_WEBSOCKET_PROTOCOL);
        h.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        let (_, chosen) = handshake(&get, &h, &["v4.channel.k8s.io", ""]).unwrap();
        assert_eq!(chosen, "");
    }

    #[tokio::test]
    async fn a_byte_stream_carries_binary_messages_both_ways() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (mut stream, pump) = byte_stream(server);
        let pump = tokio::spawn(pump);
        let (client_read, mut client_write) = tokio::io::split(client);
        client_write
            .write_all(&client_frame(true, 2, b"hello "))
            .await
            .unwrap();
        client_write
            .write_all(&client_frame(true, 9, b"ping"))
            .await
            .unwrap();
        client_write
            .write_all(&client_frame(true, 2, b"world"))
            .await
            .unwrap();
        let mut got = vec![0u8; 11];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello world");
        stream.write_all(b"back").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut client_read = client_read;
        // The server's frames: the pong, the data, its close (read before the client answers).
        let mut expected = server_frame(10, b"ping");
        expected.extend_from_slice(&server_frame(2, b"back"));
        expected.extend_from_slice(&server_frame(8, &[3, 232]));
        let mut from_server = vec![0u8; expected.len()];
        client_read.read_exact(&mut from_server).await.unwrap();
        assert_eq!(from_server, expected);
        client_write
            .write_all(&client_frame(true, 8, &close_payload(1000, "")))
            .await
            .unwrap();
        // Then the connection ends.
        let mut rest = vec![];
        client_read.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{rest:?}");
        let mut rest = vec![];
        stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        pump.await.unwrap();
    }

    #[tokio::test]
    async fn a_byte_stream_answers_a_broken_client_with_a_close_code() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (stream, pump) = byte_stream(server);
        let pump = tokio::spawn(pump);
        // An oversized frame, declared.
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(MAX_FRAME as u64 + 1).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        client.write_all(&f).await.unwrap();
        let mut head = [0u8; 4];
        client.read_exact(&mut head).await.unwrap();
        assert_eq!(head[0], 0x88, "a close frame");
        assert_eq!(u16::from_be_bytes([head[2], head[3]]), 1009);
        // The user of the stream sees its end, and lets it go.
        let mut stream = stream;
        let mut rest = vec![];
        stream.read_to_end(&mut rest).await.unwrap();
        drop((stream, client));
        pump.await.unwrap();
    }

    #[tokio::test]
    async fn a_client_close_is_answered_and_ends_the_byte_stream() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (mut stream, pump) = byte_stream(server);
        let pump = tokio::spawn(pump);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write
            .write_all(&client_frame(true, 8, &close_payload(1001, "leaving")))
            .await
            .unwrap();
        let mut rest = vec![];
        stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        // The close is answered with the client's code.
        let answer = server_frame(8, &close_payload(1001, "leaving"));
        let mut got = vec![0u8; answer.len()];
        client_read.read_exact(&mut got).await.unwrap();
        assert_eq!(got, answer);
        drop(stream);
        pump.await.unwrap();
    }
}
