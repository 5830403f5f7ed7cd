//! A WebSocket server (RFC 6455): the upgrade handshake, frames and messages.
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
//! **frames**:
//!
//! ```text
//!  0               1               2               3
//!  FIN RSV1-3 opcode(4) | MASK len(7) | [len16 | len64] | [mask key(4)] | payload
//! ```
//!
//! * opcodes: `0` continuation, `1` text (UTF-8), `2` binary, `8` close, `9` ping, `10` pong;
//! * a **message** is one frame with `FIN` set, or a text/binary frame without `FIN` followed
//!   by continuation frames, the last with `FIN` (fragmentation); control frames (close,
//!   ping, pong) carry at most 125 bytes, are never fragmented, and may come between the
//!   fragments of a message;
//! * every frame **from the client is masked** (XORed with the 4-byte key it carries); frames
//!   from the server are not;
//! * a ping is answered with a pong carrying the same payload; a close is answered with a
//!   close (echoing the status code), after which the TCP connection ends.
//!
//! ## What this module does
//!
//! [`handshake`] checks an upgrade request as Go's `golang.org/x/net/websocket` server does
//! for kube-apiserver and the kubelet (method `GET`, version 13, a key that is 16 bytes of
//! base64; else `400`, `405`) and picks the subprotocol: the client's first that the server
//! supports; none supported is `403 Forbidden`, as the kubelet's `wsstream` handshake
//! answers. [`Receiver`] reads frames with bounded sizes (a frame's declared length above
//! [`MAX_FRAME`] or a message above [`MAX_MESSAGE`] closes the connection with 1009 *message
//! too big*; an unmasked frame, a reserved bit or opcode, a fragmented or oversized control
//! frame, a continuation with nothing to continue closes it with 1002 *protocol error*, a
//! text message that is not UTF-8 with 1007), answers nothing itself but hands pings and
//! closes to its owner. [`Sender`] writes unmasked frames. [`byte_stream`] presents the binary
//! messages of a connection as one byte stream (`AsyncRead + AsyncWrite`), for protocols
//! that tunnel a byte stream through a WebSocket (kubectl 1.33 tunnels SPDY this way for
//! port-forward). The Kubernetes channel protocols on top are [`super::wsstream`].

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use embedded_apiserver::http::Body;
use embedded_apiserver::status::ApiError;

/// Largest frame payload accepted from a client: 1 MiB.
pub const MAX_FRAME: usize = 1024 * 1024;

/// Largest message (all fragments together) accepted from a client: 4 MiB.
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// The GUID RFC 6455 appends to the client's key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Close status codes (RFC 6455 §7.4.1).
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// The endpoint is going away (the server shuts down).
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// A text message that is not UTF-8.
    pub const INVALID_DATA: u16 = 1007;
    /// A frame or message too big to process.
    pub const TOO_BIG: u16 = 1009;
}

/// Frame opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// A continuation of a fragmented message.
    Continuation,
    /// A text (UTF-8) message or its first fragment.
    Text,
    /// A binary message or its first fragment.
    Binary,
    /// Close.
    Close,
    /// Ping.
    Ping,
    /// Pong.
    Pong,
}

impl Opcode {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => return None,
        })
    }

    fn as_u8(self) -> u8 {
        match self {
            Opcode::Continuation => 0,
            Opcode::Text => 1,
            Opcode::Binary => 2,
            Opcode::Close => 8,
            Opcode::Ping => 9,
            Opcode::Pong => 10,
        }
    }

    fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

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

/// A complete message (or control frame) from the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A text message (valid UTF-8).
    Text(Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping: answer with a pong carrying the same bytes.
    Ping(Bytes),
    /// A pong (an answer to a ping, or unsolicited).
    Pong(Bytes),
    /// A close, with its status code and reason when it has one.
    Close(Option<u16>, String),
}

/// Why reading from a client stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection failed or ended without a close frame.
    #[error("reading the WebSocket: {0}")]
    Io(#[from] std::io::Error),
    /// The client broke the protocol; the connection must be closed with this code.
    #[error("WebSocket protocol error ({code}): {reason}")]
    Protocol {
        /// The close code to send.
        code: u16,
        /// What was wrong.
        reason: &'static str,
    },
}

fn protocol(reason: &'static str) -> Error {
    Error::Protocol {
        code: close_code::PROTOCOL,
        reason,
    }
}

/// Reads client frames and assembles messages, within [`MAX_FRAME`] and [`MAX_MESSAGE`].
pub struct Receiver<R> {
    io: R,
    buf: BytesMut,
    /// A fragmented message being assembled: its opcode and bytes so far.
    partial: Option<(Opcode, BytesMut)>,
    max_frame: usize,
    max_message: usize,
}

impl<R: AsyncRead + Unpin> Receiver<R> {
    /// Reads from `io` with the default bounds.
    pub fn new(io: R) -> Self {
        Self::with_limits(io, MAX_FRAME, MAX_MESSAGE)
    }

    /// Reads from `io` with other bounds (for tests).
    pub fn with_limits(io: R, max_frame: usize, max_message: usize) -> Self {
        Receiver {
            io,
            buf: BytesMut::with_capacity(8192),
            partial: None,
            max_frame,
            max_message,
        }
    }

    /// Ensures `n` bytes are buffered; `false` at a clean end of the stream before any byte.
    async fn fill(&mut self, n: usize) -> Result<bool, Error> {
        while self.buf.len() < n {
            let start_empty = self.buf.is_empty();
            let got = self.io.read_buf(&mut self.buf).await?;
            if got == 0 {
                if start_empty {
                    return Ok(false);
                }
                return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        Ok(true)
    }

    /// The next frame: FIN, opcode, unmasked payload. `None` at the end of the stream.
    async fn frame(&mut self) -> Result<Option<(bool, Opcode, Bytes)>, Error> {
        if !self.fill(2).await? {
            return Ok(None);
        }
        let b0 = self.buf[0];
        let b1 = self.buf[1];
        let fin = b0 & 0x80 != 0;
        if b0 & 0x70 != 0 {
            return Err(protocol("reserved bits set without a negotiated extension"));
        }
        let opcode = Opcode::from_u8(b0 & 0x0f).ok_or_else(|| protocol("reserved opcode"))?;
        if b1 & 0x80 == 0 {
            return Err(protocol("client frames must be masked"));
        }
        let (len, header) = match b1 & 0x7f {
            126 => {
                self.fill(4).await?;
                (u64::from(u16::from_be_bytes([self.buf[2], self.buf[3]])), 4)
            }
            127 => {
                self.fill(10).await?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[2..10]);
                (u64::from_be_bytes(b), 10)
            }
            n => (u64::from(n), 2),
        };
        if opcode.is_control() && (len > 125 || !fin) {
            return Err(protocol(
                "control frames carry at most 125 bytes, unfragmented",
            ));
        }
        if len > self.max_frame as u64 {
            return Err(Error::Protocol {
                code: close_code::TOO_BIG,
                reason: "frame too big",
            });
        }
        let len = len as usize;
        self.fill(header + 4 + len).await?;
        self.buf.advance(header);
        let mask = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
        self.buf.advance(4);
        let mut payload = self.buf.split_to(len);
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        Ok(Some((fin, opcode, payload.freeze())))
    }

    /// The next message or control frame; `None` when the stream ends without a close frame
    /// between messages.
    pub async fn recv(&mut self) -> Result<Option<Message>, Error> {
        loop {
            let Some((fin, opcode, payload)) = self.frame().await? else {
                if self.partial.is_some() {
                    return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
                return Ok(None);
            };
            match opcode {
                Opcode::Ping => return Ok(Some(Message::Ping(payload))),
                Opcode::Pong => return Ok(Some(Message::Pong(payload))),
                Opcode::Close => return close_message(payload).map(Some),
                Opcode::Text | Opcode::Binary => {
                    if self.partial.is_some() {
                        return Err(protocol("a new message began inside a fragmented one"));
                    }
                    if fin {
                        return finish(opcode, payload);
                    }
                    if payload.len() > self.max_message {
                        return Err(too_big());
                    }
                    self.partial = Some((opcode, BytesMut::from(&payload[..])));
                }
                Opcode::Continuation => {
                    let Some((first, mut acc)) = self.partial.take() else {
                        return Err(protocol("a continuation frame with nothing to continue"));
                    };
                    if acc.len() + payload.len() > self.max_message {
                        return Err(too_big());
                    }
                    acc.extend_from_slice(&payload);
                    if fin {
                        return finish(first, acc.freeze());
                    }
                    self.partial = Some((first, acc));
                }
            }
        }
    }
}

fn too_big() -> Error {
    Error::Protocol {
        code: close_code::TOO_BIG,
        reason: "message too big",
    }
}

fn finish(opcode: Opcode, payload: Bytes) -> Result<Option<Message>, Error> {
    if opcode == Opcode::Text {
        if std::str::from_utf8(&payload).is_err() {
            return Err(Error::Protocol {
                code: close_code::INVALID_DATA,
                reason: "a text message that is not UTF-8",
            });
        }
        return Ok(Some(Message::Text(payload)));
    }
    Ok(Some(Message::Binary(payload)))
}

fn close_message(payload: Bytes) -> Result<Message, Error> {
    match payload.len() {
        0 => Ok(Message::Close(None, String::new())),
        1 => Err(protocol("a close frame with a one-byte body")),
        _ => {
            let code = u16::from_be_bytes([payload[0], payload[1]]);
            let reason = std::str::from_utf8(&payload[2..])
                .map_err(|_| Error::Protocol {
                    code: close_code::INVALID_DATA,
                    reason: "a close reason that is not UTF-8",
                })?
                .to_owned();
            Ok(Message::Close(Some(code), reason))
        }
    }
}

/// Encodes one unmasked server frame with `FIN` set.
pub fn encode_frame(opcode: Opcode, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(payload.len() + 10);
    out.extend_from_slice(&[0x80 | opcode.as_u8()]);
    match payload.len() {
        n if n < 126 => out.extend_from_slice(&[n as u8]),
        n if n <= usize::from(u16::MAX) => {
            out.extend_from_slice(&[126]);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.extend_from_slice(&[127]);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out.freeze()
}

/// The payload of a close frame: the code, then the reason (cut to fit 125 bytes).
pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&reason.as_bytes()[..end]);
    p
}

/// Writes server frames.
pub struct Sender<W> {
    io: W,
}

impl<W: AsyncWrite + Unpin> Sender<W> {
    /// Writes to `io`.
    pub fn new(io: W) -> Self {
        Sender { io }
    }

    /// Sends one frame (a whole message) and flushes it.
    pub async fn send(&mut self, opcode: Opcode, payload: &[u8]) -> std::io::Result<()> {
        self.io.write_all(&encode_frame(opcode, payload)).await?;
        self.io.flush().await
    }

    /// Sends a close frame with `code` and `reason`.
    pub async fn close(&mut self, code: u16, reason: &str) -> std::io::Result<()> {
        self.send(Opcode::Close, &close_payload(code, reason)).await
    }

    /// Ends the TCP connection's writing side.
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.io.shutdown().await
    }
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
        let (ws_read, ws_write) = tokio::io::split(io);
        let (inner_read, mut inner_write) = tokio::io::split(inner);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(Opcode, Bytes)>(16);
        let writer = async move {
            let mut sender = Sender::new(ws_write);
            while let Some((op, payload)) = rx.recv().await {
                if sender.send(op, &payload).await.is_err() {
                    return;
                }
                if op == Opcode::Close {
                    let _ = sender.shutdown().await;
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
                        if out_tx.send((Opcode::Binary, chunk)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let close = close_payload(close_code::NORMAL, "");
            let _ = out_tx.send((Opcode::Close, Bytes::from(close))).await;
        };
        let incoming = async move {
            let mut receiver = Receiver::new(ws_read);
            loop {
                match receiver.recv().await {
                    Ok(Some(Message::Binary(b))) => {
                        if inner_write.write_all(&b).await.is_err() {
                            break;
                        }
                    }
                    Ok(Some(Message::Ping(p))) => {
                        if tx.send((Opcode::Pong, p)).await.is_err() {
                            break;
                        }
                    }
                    Ok(Some(Message::Pong(_))) => {}
                    Ok(Some(Message::Text(_))) => {
                        let close =
                            close_payload(close_code::PROTOCOL, "text message on a byte stream");
                        let _ = tx.send((Opcode::Close, Bytes::from(close))).await;
                        break;
                    }
                    Ok(Some(Message::Close(..)) | None) => break,
                    Err(Error::Protocol { code, reason }) => {
                        let _ = tx
                            .send((Opcode::Close, Bytes::from(close_payload(code, reason))))
                            .await;
                        break;
                    }
                    Err(Error::Io(_)) => break,
                }
            }
            let _ = inner_write.shutdown().await;
        };
        tokio::join!(writer, outgoing, incoming);
    };
    (user, pump)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    pub(crate) fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
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

    async fn read_all(bytes: Vec<u8>) -> Vec<Result<Option<Message>, String>> {
        let mut r = Receiver::with_limits(&bytes[..], 1024, 2048);
        let mut out = vec![];
        loop {
            match r.recv().await {
                Ok(Some(m)) => out.push(Ok(Some(m))),
                Ok(None) => {
                    out.push(Ok(None));
                    return out;
                }
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
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
        let got = read_all(bytes).await;
        assert_eq!(
            got,
            vec![
                Ok(Some(Message::Binary(Bytes::from_static(b"\x01hello")))),
                Ok(Some(Message::Ping(Bytes::from_static(b"p")))),
                Ok(Some(Message::Text(Bytes::from_static(b"fragmented")))),
                Ok(Some(Message::Close(Some(1000), "bye".into()))),
                Ok(None),
            ]
        );
    }

    #[tokio::test]
    async fn a_16_bit_length_frame_is_read() {
        let payload = vec![7u8; 300];
        let got = read_all(client_frame(true, 2, &payload)).await;
        assert_eq!(got[0], Ok(Some(Message::Binary(Bytes::from(payload)))));
    }

    #[tokio::test]
    async fn malformed_frames_are_protocol_errors() {
        // Unmasked.
        let got = read_all(vec![0x82, 0x01, 0x00]).await;
        assert!(matches!(&got[0], Err(e) if e.contains("masked")), "{got:?}");
        // Reserved bit.
        let mut f = client_frame(true, 2, b"x");
        f[0] |= 0x40;
        assert!(matches!(&read_all(f).await[0], Err(e) if e.contains("reserved bits")));
        // Reserved opcode.
        assert!(
            matches!(&read_all(client_frame(true, 3, b"x")).await[0], Err(e) if e.contains("opcode"))
        );
        // Fragmented ping.
        assert!(
            matches!(&read_all(client_frame(false, 9, b"x")).await[0], Err(e) if e.contains("control"))
        );
        // Continuation of nothing.
        assert!(
            matches!(&read_all(client_frame(true, 0, b"x")).await[0], Err(e) if e.contains("continuation"))
        );
        // Text that is not UTF-8.
        assert!(
            matches!(&read_all(client_frame(true, 1, &[0xff, 0xfe])).await[0], Err(e) if e.contains("(1007)"))
        );
        // A new message inside a fragmented one.
        let mut f = client_frame(false, 2, b"a");
        f.extend(client_frame(true, 2, b"b"));
        assert!(matches!(&read_all(f).await[0], Err(e) if e.contains("inside")));
        // Cut short.
        let mut f = client_frame(true, 2, b"abcdef");
        f.truncate(5);
        assert!(matches!(&read_all(f).await[0], Err(e) if e.contains("reading")));
    }

    #[tokio::test]
    async fn oversized_frames_and_messages_are_refused_before_being_read() {
        // The declared length alone is refused: no payload follows.
        let mut f = vec![0x82, 0x80 | 127];
        f.extend_from_slice(&(u64::MAX).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        assert!(matches!(&read_all(f).await[0], Err(e) if e.contains("(1009)")));
        // Fragments that add up past the message bound.
        let mut f = vec![];
        f.extend(client_frame(false, 2, &[0; 1000]));
        f.extend(client_frame(false, 0, &[0; 1000]));
        f.extend(client_frame(true, 0, &[0; 1000]));
        assert!(matches!(&read_all(f).await[0], Err(e) if e.contains("(1009)")));
    }

    #[test]
    fn server_frames_are_unmasked_with_the_right_length_form() {
        assert_eq!(
            &encode_frame(Opcode::Binary, b"ab")[..],
            &[0x82, 2, b'a', b'b']
        );
        let f = encode_frame(Opcode::Text, &[0; 200]);
        assert_eq!(&f[..4], &[0x81, 126, 0, 200]);
        let f = encode_frame(Opcode::Binary, &[0; 70000]);
        assert_eq!(&f[..2], &[0x82, 127]);
        assert_eq!(f.len(), 70000 + 10);
        assert_eq!(close_payload(1000, "").as_slice(), &[3, 232]);
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
        client_write
            .write_all(&client_frame(true, 8, &close_payload(1000, "")))
            .await
            .unwrap();
        let mut from_server = vec![];
        let mut client_read = client_read;
        client_read.read_to_end(&mut from_server).await.unwrap();
        let mut expected = encode_frame(Opcode::Pong, b"ping").to_vec();
        expected.extend_from_slice(&encode_frame(Opcode::Binary, b"back"));
        expected.extend_from_slice(&encode_frame(Opcode::Close, &[3, 232]));
        assert_eq!(from_server, expected);
        let mut rest = vec![];
        stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        pump.await.unwrap();
    }
}
