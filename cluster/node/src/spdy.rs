//! SPDY/3.1: the multiplexed byte streams under `kubectl exec`, `attach` and `port-forward`.
//!
//! ## What SPDY is, and why kubectl still speaks it
//!
//! SPDY was Google's experimental successor to HTTP/1.1 and the draft that became HTTP/2. One TCP
//! connection carries many *streams*, each a pair of byte pipes (one per direction) opened by a
//! `SYN_STREAM` frame that carries a block of name/value headers and answered by a `SYN_REPLY`.
//! Data travels in `DATA` frames; a frame with the `FIN` flag ends its sender's half of the stream;
//! `RST_STREAM` ends both halves at once. `PING` checks liveness, `GOAWAY` ends the connection,
//! `SETTINGS` and `WINDOW_UPDATE` carry flow control (SPDY/3.1 gives every stream, and the connection
//! as a whole, a 64 KiB window that the receiver opens again as it consumes data).
//!
//! Kubernetes adopted SPDY in 2014 for the streaming subresources because it needed several
//! independent byte streams (stdin, stdout, stderr, an error channel, terminal resizes, one pair per
//! forwarded TCP connection) over one upgraded HTTP/1.1 connection, and HTTP/2 was not yet
//! widespread. The client side is `k8s.io/apimachinery/pkg/util/httpstream/spdy` on top of
//! `github.com/moby/spdystream`, which vendors the old `golang.org/x/net/spdy` framer. Browsers
//! dropped SPDY in 2016, but kubectl kept it: **up to 1.29 every `exec`, `attach` and
//! `port-forward` is SPDY**; 1.30+ tries a WebSocket first for `exec`/`attach` and falls back to
//! SPDY; 1.31+ `port-forward` opens a WebSocket with the subprotocol
//! `SPDY/3.1+portforward.k8s.io` and runs a SPDY session *inside* its binary messages (client-go
//! `tools/portforward/tunneling_connection.go`, kube-apiserver
//! `staging/src/k8s.io/apiserver/pkg/util/proxy/streamtunnel.go`).
//!
//! ## The wire format (SPDY/3, draft 3.1)
//!
//! Every frame starts with 8 bytes. A control frame: `1 | version (15 bits) | type (16 bits)`,
//! then `flags (8 bits) | length (24 bits)`; a data frame: `0 | stream id (31 bits)`, then
//! `flags | length`. The payloads:
//!
//! | frame | payload |
//! |---|---|
//! | `SYN_STREAM` (1) | stream id, associated stream id, priority (3 bits) and slot, header block |
//! | `SYN_REPLY` (2) | stream id, header block |
//! | `RST_STREAM` (3) | stream id, status code |
//! | `SETTINGS` (4) | count, then (flags 8 bits, id 24 bits, value 32 bits) entries |
//! | `PING` (6) | a 32-bit id, echoed by the receiver (clients use odd ids, servers even) |
//! | `GOAWAY` (7) | last stream id accepted, status code |
//! | `HEADERS` (8) | stream id, header block |
//! | `WINDOW_UPDATE` (9) | stream id (0: the connection), delta |
//!
//! A *header block* is a count and length-prefixed names and values (lower-case names; several
//! values of one name joined by NUL bytes), compressed with zlib **primed with SPDY/3's fixed
//! dictionary** of common header words ([`header_dictionary`]). Each direction has one compression
//! context for the whole connection: every block is a continuation of the same zlib stream, ended
//! with a sync flush so the receiver can decode it at once. A receiver that skips one block loses
//! the stream, so even frames this server ignores (`HEADERS`) are decompressed.
//!
//! ## What this module does
//!
//! [`Connection::new`] runs a server-side SPDY/3.1 session over any `AsyncRead + AsyncWrite`:
//! hyper's upgraded HTTP/1.1 connection (the node's `serve`), or the byte stream of a WebSocket
//! tunnel (its `tunnel`). Two tasks, owned by the [`Connection`] and stopped when it is dropped, read and
//! write frames; the
//! application takes the peer's streams with [`Connection::accept`], looks at their headers,
//! accepts (a `SYN_REPLY`) or refuses (`RST_STREAM`) them and uses each accepted [`Stream`] as an
//! `AsyncRead + AsyncWrite`. Shutting down a stream's write side sends `FIN`; dropping a stream
//! sends `FIN` if it had not been sent. [`Connection::close`] sends `GOAWAY` after every queued
//! frame and closes the transport, as the kubelet does when an exec ends. The server never opens
//! streams of its own (no Kubernetes protocol needs it), answers every client `PING`, and sends
//! `GOAWAY` with `PROTOCOL_ERROR` before dropping a connection that breaks the rules (a frame of
//! another version, an even or decreasing stream id, a malformed frame, a bad header block).
//!
//! The Kubernetes protocols over these streams (exec, attach, port-forward, as the kubelet serves
//! them) live in the node's `spdy/protocols.rs`.
//!
//! ## Flow control, and the peer that has none
//!
//! Receiving: a stream buffers at most its window (64 KiB) of unread data; as the application
//! reads, `WINDOW_UPDATE`s for the stream and the connection reopen the peer's windows (sent once
//! half a window has been consumed). A peer that sends past the window is not reset: the reader
//! stops taking frames from the transport until the application has drained the stream, so memory
//! stays at one window plus one frame per stream. That is the only behaviour that works with
//! kubectl: moby/spdystream **implements no flow control at all**: it never sends `WINDOW_UPDATE`,
//! ignores those it gets, and blocks its own frame reader the same way when a stream's consumer is
//! slow. (An `exec -i` that pipes a large file into a process that reads slowly would otherwise be
//! reset after 64 KiB.)
//!
//! Sending: windows are tracked from the first byte (64 KiB per stream and for the connection,
//! `SETTINGS_INITIAL_WINDOW_SIZE` moves every stream's window by the difference) and **enforced
//! from the moment the peer shows it takes part in flow control**, by sending a `WINDOW_UPDATE` or
//! a `SETTINGS` frame; from then on no `DATA` goes past the peer's windows. A peer that has done
//! neither is a spdystream peer that would never open a window again; honouring windows it does
//! not maintain would freeze every `exec` after 64 KiB of output, so to it data flows as TCP lets
//! it, exactly as from the kubelet's and kube-apiserver's own spdystream.
//!
//! ## What is bounded
//!
//! | what | bound |
//! |---|---|
//! | a frame's payload | [`MAX_FRAME_PAYLOAD`] (1 MiB; spdystream writes at most 32 KiB); larger: `GOAWAY` |
//! | a decompressed header block | [`MAX_HEADER_BLOCK`] (64 KiB) and [`MAX_HEADERS`] names: a zlib bomb stops at the limit |
//! | open streams per connection | [`MAX_STREAMS`]; more: `RST_STREAM` `REFUSED_STREAM` |
//! | unread data per stream | the 64 KiB window plus one frame, then the reader waits |
//! | frames waiting to be written | [`OUTBOX_LIMIT`] bytes of data; a writer waits, the reader waits |
//! | a connection without any frame, or whose peer takes nothing | [`IDLE_TIMEOUT`] (4 hours, the kubelet's `streamingConnectionIdleTimeout`) |
//!
//! Compression itself is not this project's subject: `miniz_oxide` (pure Rust, also the default
//! backend of `flate2`) does deflate and inflate. It has no preset-dictionary call, so the
//! dictionary is given the way zlib's `deflateSetDictionary`/`inflateSetDictionary` work inside:
//! the compressor is fed the dictionary once and its output dropped (so matches may point into
//! it), and the decompressor's 32 KiB history window starts filled with it. The two zlib header
//! fields (`FDICT` and the dictionary's Adler-32, `0xe3c6a7c2`) are written and checked here.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress_to_output, create_comp_flags_from_zip_params,
};
use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

pub(crate) mod protocols;

pub(crate) use protocols::{serve, tunnel};

/// The SPDY version this module speaks (SPDY/3; 3.1 adds the connection-level window).
pub const VERSION: u16 = 3;
/// The `Upgrade` token of the HTTP/1.1 handshake.
pub const UPGRADE_TOKEN: &str = "SPDY/3.1";
/// Initial window of every stream and of the connection (SPDY/3.1 §2.6.8).
pub const INITIAL_WINDOW: u32 = 64 * 1024;
/// Largest frame payload accepted. The 24-bit length field allows 16 MiB; spdystream writes at
/// most what one `Write` hands it (kubectl copies in 32 KiB pieces).
pub const MAX_FRAME_PAYLOAD: usize = 1 << 20;
/// Largest decompressed header block accepted.
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// Most names in one header block.
pub const MAX_HEADERS: usize = 256;
/// Most streams open at once on one connection (kubectl opens at most five for an exec and two
/// per forwarded TCP connection).
pub const MAX_STREAMS: usize = 128;
/// Bytes of data frames that may wait for the writer before stream writes wait.
pub const OUTBOX_LIMIT: usize = 256 * 1024;
/// The largest data frame this side writes.
pub const MAX_WRITE_CHUNK: usize = 32 * 1024;
/// A connection on which no frame arrives for this long is closed (the kubelet's default
/// `streamingConnectionIdleTimeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

const FLAG_FIN: u8 = 0x01;
const FLAG_UNIDIRECTIONAL: u8 = 0x02;
const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// `RST_STREAM` status codes (SPDY/3 §2.4.2).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const UNSUPPORTED_VERSION: u32 = 4;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const STREAM_IN_USE: u32 = 8;
    pub const STREAM_ALREADY_CLOSED: u32 = 9;
    pub const FRAME_TOO_LARGE: u32 = 11;
}

/// `GOAWAY` status codes.
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

/// What went wrong on a SPDY connection.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SPDY transport: {0}")]
    Io(#[from] io::Error),
    #[error("SPDY protocol error: {0}")]
    Protocol(String),
    #[error("SPDY frame of {len} bytes is larger than the limit of {limit} bytes")]
    FrameTooLarge { len: usize, limit: usize },
    #[error("SPDY header block: {0}")]
    Headers(String),
}

fn protocol(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

/// A header block: lower-case names with their values (several values of one name are joined
/// by NUL bytes on the wire and kept joined here).
pub type Headers = Vec<(String, String)>;

/// The first value of header `name` (names compare case-insensitively, as Go's `http.Header.Get`).
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.split('\0').next().unwrap_or(v.as_str()))
}

/// One SPDY/3 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    /// Entries are (flags, id, value).
    Settings {
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    /// A control frame of a type SPDY/3 does not define: the specification says to ignore it.
    Unknown {
        frame_type: u16,
    },
}

// ---------------------------------------------------------------------------------------------
// The header dictionary and compression.

/// The words of SPDY/3's header compression dictionary (draft 3, §2.6.10.1), each written on the
/// wire as a 32-bit length and the word, followed by [`DICTIONARY_TAIL`].
const DICTIONARY_WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

const DICTIONARY_TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
);

/// The Adler-32 of the dictionary: the `DICTID` field of the zlib header.
pub const DICTIONARY_ID: u32 = 0xe3c6_a7c2;

/// SPDY/3's header compression dictionary (1423 bytes).
pub fn header_dictionary() -> Vec<u8> {
    let mut dict = Vec::with_capacity(1423);
    for word in DICTIONARY_WORDS {
        dict.extend_from_slice(&(word.len() as u32).to_be_bytes());
        dict.extend_from_slice(word.as_bytes());
    }
    dict.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    dict
}

#[cfg(test)]
fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// The sending side's compression context: one zlib stream for all header blocks of a connection.
pub struct HeaderCompressor {
    deflate: Box<CompressorOxide>,
    header_written: bool,
}

impl Default for HeaderCompressor {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderCompressor {
    pub fn new() -> Self {
        // Raw deflate (negative window bits): the zlib header is ours to write, with FDICT.
        let mut deflate = Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
            9, -15, 0,
        )));
        // Prime the history with the dictionary; the output is what the peer's preset dictionary
        // stands for, so it is dropped.
        let dict = header_dictionary();
        let _ = compress_to_output(&mut deflate, &dict, TDEFLFlush::Sync, |_| true);
        Self {
            deflate,
            header_written: false,
        }
    }

    /// Appends the compressed form of `block` (ended with a sync flush) to `out`.
    pub fn compress(&mut self, block: &[u8], out: &mut BytesMut) -> Result<(), Error> {
        if !self.header_written {
            // CMF 0x78: deflate, 32 KiB window. FLG 0xf9: level 3 (best), FDICT, check bits.
            out.put_slice(&[0x78, 0xf9]);
            out.put_u32(DICTIONARY_ID);
            self.header_written = true;
        }
        let (status, consumed) =
            compress_to_output(&mut self.deflate, block, TDEFLFlush::Sync, |bytes| {
                out.put_slice(bytes);
                true
            });
        if status != TDEFLStatus::Okay || consumed != block.len() {
            return Err(Error::Headers(format!(
                "compressing a header block failed ({status:?})"
            )));
        }
        Ok(())
    }
}

/// The receiving side's decompression context: one zlib stream for all header blocks.
pub struct HeaderDecompressor {
    inflate: Box<DecompressorOxide>,
    /// The 32 KiB history ring, starting with the dictionary.
    window: Box<[u8; 32 * 1024]>,
    pos: usize,
    /// Bytes of the zlib header still to check (2 + 4 with FDICT).
    header: Vec<u8>,
    header_done: bool,
    failed: bool,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderDecompressor {
    pub fn new() -> Self {
        let dict = header_dictionary();
        let mut window = Box::new([0u8; 32 * 1024]);
        window[..dict.len()].copy_from_slice(&dict);
        Self {
            inflate: Box::default(),
            window,
            pos: dict.len(),
            header: Vec::with_capacity(6),
            header_done: false,
            failed: false,
        }
    }

    /// Decompresses one header block (a continuation of the connection's zlib stream), refusing
    /// more than `limit` bytes of output.
    pub fn decompress(&mut self, mut input: &[u8], limit: usize) -> Result<Vec<u8>, Error> {
        if self.failed {
            return Err(Error::Headers("the compression context was lost".into()));
        }
        let result = self.decompress_inner(&mut input, limit);
        if result.is_err() {
            // The stream position is unknown now: every later block would be garbage.
            self.failed = true;
        }
        result
    }

    fn decompress_inner(&mut self, input: &mut &[u8], limit: usize) -> Result<Vec<u8>, Error> {
        if !self.header_done {
            while self.header.len() < 2 && !input.is_empty() {
                self.header.push(input[0]);
                *input = &input[1..];
            }
            if self.header.len() >= 2 {
                let (cmf, flg) = (self.header[0], self.header[1]);
                if cmf & 0x0f != 8 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
                    return Err(Error::Headers("not a zlib stream".into()));
                }
                let want = if flg & 0x20 != 0 { 6 } else { 2 };
                while self.header.len() < want && !input.is_empty() {
                    self.header.push(input[0]);
                    *input = &input[1..];
                }
                if self.header.len() == want {
                    if want == 6 {
                        let id = u32::from_be_bytes([
                            self.header[2],
                            self.header[3],
                            self.header[4],
                            self.header[5],
                        ]);
                        if id != DICTIONARY_ID {
                            return Err(Error::Headers(format!(
                                "zlib stream wants dictionary {id:#010x}, SPDY/3's is {DICTIONARY_ID:#010x}"
                            )));
                        }
                    }
                    self.header_done = true;
                }
            }
            if !self.header_done {
                return Ok(Vec::new());
            }
        }
        let mut out = Vec::new();
        loop {
            let (status, consumed, written) = decompress(
                &mut self.inflate,
                input,
                &mut self.window[..],
                self.pos,
                inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            *input = &input[consumed..];
            let end = self.pos + written;
            if out.len() + written > limit {
                return Err(Error::Headers(format!(
                    "decompressed header block is larger than {limit} bytes"
                )));
            }
            out.extend_from_slice(&self.window[self.pos..end]);
            self.pos = end & (self.window.len() - 1);
            match status {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput if input.is_empty() => return Ok(out),
                TINFLStatus::NeedsMoreInput if consumed > 0 || written > 0 => continue,
                TINFLStatus::Done => {
                    return Err(Error::Headers(
                        "the peer ended its header compression stream".into(),
                    ));
                }
                other => {
                    return Err(Error::Headers(format!(
                        "corrupt compressed header block ({other:?})"
                    )));
                }
            }
        }
    }
}

/// Serializes a header block (before compression).
pub fn encode_header_block(headers: &Headers) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Parses a decompressed header block.
pub fn decode_header_block(block: &[u8]) -> Result<Headers, Error> {
    let mut rest = block;
    let count = take_u32(&mut rest).ok_or_else(|| Error::Headers("truncated count".into()))?;
    if count as usize > MAX_HEADERS {
        return Err(Error::Headers(format!(
            "{count} headers, more than the limit of {MAX_HEADERS}"
        )));
    }
    let mut headers = Headers::with_capacity(count as usize);
    for _ in 0..count {
        let name = take_string(&mut rest, "name")?;
        let value = take_string(&mut rest, "value")?;
        if name.is_empty() {
            return Err(Error::Headers("empty header name".into()));
        }
        if headers.iter().any(|(n, _)| *n == name) {
            return Err(Error::Headers(format!("header {name:?} appears twice")));
        }
        headers.push((name.to_ascii_lowercase(), value));
    }
    if !rest.is_empty() {
        return Err(Error::Headers(format!(
            "{} bytes after the last header",
            rest.len()
        )));
    }
    Ok(headers)
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (head, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_be_bytes(*head))
}

fn take_string(rest: &mut &[u8], what: &str) -> Result<String, Error> {
    let len =
        take_u32(rest).ok_or_else(|| Error::Headers(format!("truncated {what} length")))? as usize;
    if len > rest.len() {
        return Err(Error::Headers(format!(
            "{what} of {len} bytes, only {} left",
            rest.len()
        )));
    }
    let (bytes, tail) = rest.split_at(len);
    *rest = tail;
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::Headers(format!("{what} is not UTF-8")))
}

// ---------------------------------------------------------------------------------------------
// Framing.

/// Reads frames from a transport, with the connection's decompression context.
pub struct FrameReader<R> {
    io: R,
    headers: HeaderDecompressor,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> Self {
        Self {
            io,
            headers: HeaderDecompressor::new(),
        }
    }

    /// The next frame; `Ok(None)` when the transport ends cleanly between frames.
    pub async fn read_frame(&mut self) -> Result<Option<Frame>, Error> {
        let mut head = [0u8; 8];
        // A clean end is only an end before the first byte of a frame.
        let n = self.io.read(&mut head[..1]).await?;
        if n == 0 {
            return Ok(None);
        }
        self.io.read_exact(&mut head[1..]).await?;
        let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let flags = head[4];
        let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
        if len > MAX_FRAME_PAYLOAD {
            return Err(Error::FrameTooLarge {
                len,
                limit: MAX_FRAME_PAYLOAD,
            });
        }
        let mut payload = vec![0u8; len];
        self.io.read_exact(&mut payload).await?;
        self.parse(word, flags, payload)
    }

    fn parse(&mut self, word: u32, flags: u8, payload: Vec<u8>) -> Result<Option<Frame>, Error> {
        if word & 0x8000_0000 == 0 {
            let stream_id = word & 0x7fff_ffff;
            if stream_id == 0 {
                return Err(protocol("data frame on stream 0"));
            }
            return Ok(Some(Frame::Data {
                stream_id,
                fin: flags & FLAG_FIN != 0,
                data: Bytes::from(payload),
            }));
        }
        let version = ((word >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(protocol(format!(
                "control frame of SPDY version {version}, this server speaks {VERSION}"
            )));
        }
        let frame_type = (word & 0xffff) as u16;
        let fin = flags & FLAG_FIN != 0;
        let mut p = payload.as_slice();
        let short = |what: &str| {
            protocol(format!(
                "{what} frame of {} bytes is too short",
                payload.len()
            ))
        };
        let frame = match frame_type {
            TYPE_SYN_STREAM => {
                let stream_id = take_u32(&mut p).ok_or_else(|| short("SYN_STREAM"))? & 0x7fff_ffff;
                let associated_to =
                    take_u32(&mut p).ok_or_else(|| short("SYN_STREAM"))? & 0x7fff_ffff;
                let (pri, rest) = p
                    .split_first_chunk::<2>()
                    .ok_or_else(|| short("SYN_STREAM"))?;
                let priority = pri[0] >> 5;
                p = rest;
                if stream_id == 0 {
                    return Err(protocol("SYN_STREAM for stream 0"));
                }
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    fin,
                    unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                    headers: self.header_block(p)?,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                let stream_id =
                    take_u32(&mut p).ok_or_else(|| short("SYN_REPLY/HEADERS"))? & 0x7fff_ffff;
                let headers = self.header_block(p)?;
                if stream_id == 0 {
                    return Err(protocol("SYN_REPLY or HEADERS for stream 0"));
                }
                if frame_type == TYPE_SYN_REPLY {
                    Frame::SynReply {
                        stream_id,
                        fin,
                        headers,
                    }
                } else {
                    Frame::Headers {
                        stream_id,
                        fin,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                if payload.len() != 8 {
                    return Err(protocol("RST_STREAM frame is not 8 bytes"));
                }
                let stream_id = take_u32(&mut p).ok_or_else(|| short("RST_STREAM"))? & 0x7fff_ffff;
                let status = take_u32(&mut p).ok_or_else(|| short("RST_STREAM"))?;
                if stream_id == 0 || status == 0 {
                    return Err(protocol("RST_STREAM with stream 0 or status 0"));
                }
                Frame::RstStream { stream_id, status }
            }
            TYPE_SETTINGS => {
                let count = take_u32(&mut p).ok_or_else(|| short("SETTINGS"))? as usize;
                if p.len() != count.saturating_mul(8) {
                    return Err(protocol(format!(
                        "SETTINGS frame says {count} entries but carries {} bytes",
                        p.len()
                    )));
                }
                let mut entries = Vec::with_capacity(count);
                while let (Some(id), Some(value)) = (take_u32(&mut p), take_u32(&mut p)) {
                    entries.push(((id >> 24) as u8, id & 0x00ff_ffff, value));
                }
                Frame::Settings { entries }
            }
            TYPE_PING => {
                if payload.len() != 4 {
                    return Err(protocol("PING frame is not 4 bytes"));
                }
                let id = take_u32(&mut p).ok_or_else(|| short("PING"))?;
                Frame::Ping { id }
            }
            TYPE_GOAWAY => {
                if payload.len() != 8 {
                    return Err(protocol("GOAWAY frame is not 8 bytes"));
                }
                let last_good_stream_id =
                    take_u32(&mut p).ok_or_else(|| short("GOAWAY"))? & 0x7fff_ffff;
                let status = take_u32(&mut p).ok_or_else(|| short("GOAWAY"))?;
                Frame::GoAway {
                    last_good_stream_id,
                    status,
                }
            }
            TYPE_WINDOW_UPDATE => {
                if payload.len() != 8 {
                    return Err(protocol("WINDOW_UPDATE frame is not 8 bytes"));
                }
                let stream_id =
                    take_u32(&mut p).ok_or_else(|| short("WINDOW_UPDATE"))? & 0x7fff_ffff;
                let delta = take_u32(&mut p).ok_or_else(|| short("WINDOW_UPDATE"))? & 0x7fff_ffff;
                Frame::WindowUpdate { stream_id, delta }
            }
            other => Frame::Unknown { frame_type: other },
        };
        Ok(Some(frame))
    }

    fn header_block(&mut self, compressed: &[u8]) -> Result<Headers, Error> {
        let block = self.headers.decompress(compressed, MAX_HEADER_BLOCK)?;
        decode_header_block(&block)
    }
}

/// Serializes frames, with the connection's compression context.
#[derive(Default)]
pub struct FrameEncoder {
    headers: HeaderCompressor,
}

impl FrameEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), Error> {
        match frame {
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                if data.len() > 0x00ff_ffff {
                    return Err(Error::FrameTooLarge {
                        len: data.len(),
                        limit: 0x00ff_ffff,
                    });
                }
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(u32::from(flag(*fin, FLAG_FIN)) << 24 | data.len() as u32);
                out.put_slice(data);
                Ok(())
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                fin,
                unidirectional,
                headers,
            } => {
                let mut payload = BytesMut::new();
                payload.put_u32(*stream_id);
                payload.put_u32(*associated_to);
                payload.put_u8((priority & 7) << 5);
                payload.put_u8(0);
                self.headers
                    .compress(&encode_header_block(headers), &mut payload)?;
                control(
                    out,
                    TYPE_SYN_STREAM,
                    flag(*fin, FLAG_FIN) | flag(*unidirectional, FLAG_UNIDIRECTIONAL),
                    &payload,
                )
            }
            Frame::SynReply {
                stream_id,
                fin,
                headers,
            }
            | Frame::Headers {
                stream_id,
                fin,
                headers,
            } => {
                let mut payload = BytesMut::new();
                payload.put_u32(*stream_id);
                self.headers
                    .compress(&encode_header_block(headers), &mut payload)?;
                let frame_type = if matches!(frame, Frame::SynReply { .. }) {
                    TYPE_SYN_REPLY
                } else {
                    TYPE_HEADERS
                };
                control(out, frame_type, flag(*fin, FLAG_FIN), &payload)
            }
            Frame::RstStream { stream_id, status } => control(
                out,
                TYPE_RST_STREAM,
                0,
                &[stream_id.to_be_bytes(), status.to_be_bytes()].concat(),
            ),
            Frame::Settings { entries } => {
                let mut payload = BytesMut::new();
                payload.put_u32(entries.len() as u32);
                for (flags, id, value) in entries {
                    payload.put_u32(u32::from(*flags) << 24 | (id & 0x00ff_ffff));
                    payload.put_u32(*value);
                }
                control(out, TYPE_SETTINGS, 0, &payload)
            }
            Frame::Ping { id } => control(out, TYPE_PING, 0, &id.to_be_bytes()),
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => control(
                out,
                TYPE_GOAWAY,
                0,
                &[last_good_stream_id.to_be_bytes(), status.to_be_bytes()].concat(),
            ),
            Frame::WindowUpdate { stream_id, delta } => control(
                out,
                TYPE_WINDOW_UPDATE,
                0,
                &[stream_id.to_be_bytes(), delta.to_be_bytes()].concat(),
            ),
            Frame::Unknown { frame_type } => control(out, *frame_type, 0, &[]),
        }
    }
}

fn flag(set: bool, bit: u8) -> u8 {
    if set { bit } else { 0 }
}

fn control(out: &mut BytesMut, frame_type: u16, flags: u8, payload: &[u8]) -> Result<(), Error> {
    if payload.len() > 0x00ff_ffff {
        return Err(Error::FrameTooLarge {
            len: payload.len(),
            limit: 0x00ff_ffff,
        });
    }
    out.put_u16(0x8000 | VERSION);
    out.put_u16(frame_type);
    out.put_u32(u32::from(flags) << 24 | payload.len() as u32);
    out.put_slice(payload);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The session.

/// Per-stream state shared by the connection's tasks and the stream's handle.
struct StreamState {
    /// Data received and not yet read.
    recv: VecDeque<Bytes>,
    recv_len: usize,
    /// Bytes read by the application and not yet announced with a `WINDOW_UPDATE`.
    recv_consumed: u32,
    remote_fin: bool,
    reset: bool,
    /// The peer's window for this stream (may go negative after a SETTINGS change).
    send_window: i64,
    local_fin: bool,
    /// The handle (or the not yet accepted stream) is gone: incoming data is dropped.
    dropped: bool,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
    /// Signalled when the application has read, so a waiting frame reader can go on.
    room: Arc<Notify>,
}

struct ConnState {
    streams: HashMap<u32, StreamState>,
    /// The highest stream id the peer has opened.
    last_peer_stream: u32,
    /// Frames waiting for the writer, in order.
    outbox: VecDeque<Frame>,
    outbox_data: usize,
    outbox_waiters: Vec<Waker>,
    /// The peer sent WINDOW_UPDATE or SETTINGS: its windows are honoured from now on.
    peer_flow_control: bool,
    peer_initial_window: i64,
    conn_send_window: i64,
    conn_recv_consumed: u32,
    /// No more frames are written after the GOAWAY in the outbox.
    closing: bool,
    /// The transport failed or was closed: every stream operation fails.
    dead: bool,
}

struct Shared {
    state: Mutex<ConnState>,
    /// Wakes the writer when the outbox gets frames.
    wake_writer: Notify,
    /// Wakes a frame reader waiting for the outbox to drain.
    drained: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ConnState> {
        // A panic while holding the lock leaves plain data behind; go on with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, state: &mut ConnState, frame: Frame) {
        if let Frame::Data { data, .. } = &frame {
            state.outbox_data += data.len();
        }
        state.outbox.push_back(frame);
        self.wake_writer.notify_one();
    }

    fn kill(&self) {
        let mut state = self.lock();
        state.dead = true;
        for stream in state.streams.values_mut() {
            stream.reset = true;
            wake(&mut stream.read_waker);
            wake(&mut stream.write_waker);
            stream.room.notify_one();
        }
        for waker in state.outbox_waiters.drain(..) {
            waker.wake();
        }
        drop(state);
        self.wake_writer.notify_one();
        self.drained.notify_one();
    }
}

fn wake(slot: &mut Option<Waker>) {
    if let Some(waker) = slot.take() {
        waker.wake();
    }
}

/// A server-side SPDY/3.1 session. Dropping it stops its tasks and drops the transport.
pub struct Connection {
    shared: Arc<Shared>,
    incoming: mpsc::Receiver<IncomingStream>,
    reader: JoinHandle<()>,
    writer: Option<JoinHandle<()>>,
}

impl Connection {
    /// Starts a session over `io` (the client side of which has just been upgraded).
    pub fn new<T>(io: T) -> Self
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(ConnState {
                streams: HashMap::new(),
                last_peer_stream: 0,
                outbox: VecDeque::new(),
                outbox_data: 0,
                outbox_waiters: Vec::new(),
                peer_flow_control: false,
                peer_initial_window: i64::from(INITIAL_WINDOW),
                conn_send_window: i64::from(INITIAL_WINDOW),
                conn_recv_consumed: 0,
                closing: false,
                dead: false,
            }),
            wake_writer: Notify::new(),
            drained: Notify::new(),
        });
        let (read_half, write_half) = tokio::io::split(io);
        let (incoming_tx, incoming) = mpsc::channel(MAX_STREAMS);
        let reader = tokio::spawn(read_loop(
            FrameReader::new(read_half),
            shared.clone(),
            incoming_tx,
        ));
        let writer = tokio::spawn(write_loop(write_half, shared.clone()));
        Self {
            shared,
            incoming,
            reader,
            writer: Some(writer),
        }
    }

    /// The next stream the peer opened; `None` once the connection has ended.
    pub async fn accept(&mut self) -> Option<IncomingStream> {
        self.incoming.recv().await
    }

    /// Sends `GOAWAY` after every frame already queued (data and `FIN`s of dropped streams
    /// included), then closes the transport. Waits at most `timeout` for the peer to take the
    /// queued frames.
    pub async fn close(mut self, timeout: Duration) {
        {
            let mut state = self.shared.lock();
            if !state.closing && !state.dead {
                let last = state.last_peer_stream;
                self.shared.push(
                    &mut state,
                    Frame::GoAway {
                        last_good_stream_id: last,
                        status: goaway::OK,
                    },
                );
                state.closing = true;
            }
        }
        if let Some(writer) = self.writer.take() {
            let abort = writer.abort_handle();
            if tokio::time::timeout(timeout, writer).await.is_err() {
                abort.abort();
            }
        }
    }

    /// Resolves when the peer has closed the connection (or it failed).
    pub async fn closed(&mut self) {
        while self.incoming.recv().await.is_some() {}
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(writer) = &self.writer {
            writer.abort();
        }
        self.shared.kill();
    }
}

/// A stream the peer opened, not yet accepted. Dropping it refuses it (`RST_STREAM` `CANCEL`, as
/// spdystream's `Reset` when apimachinery's stream handler returns an error).
pub struct IncomingStream {
    id: u32,
    headers: Headers,
    shared: Arc<Shared>,
    settled: bool,
}

impl IncomingStream {
    /// The stream's id (client streams are odd).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The headers of its `SYN_STREAM`.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The first value of one header.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Answers with `SYN_REPLY` and hands out the stream.
    pub fn accept(mut self) -> Stream {
        self.settled = true;
        {
            let mut state = self.shared.lock();
            if !state.closing && !state.dead && state.streams.contains_key(&self.id) {
                self.shared.push(
                    &mut state,
                    Frame::SynReply {
                        stream_id: self.id,
                        fin: false,
                        headers: Headers::new(),
                    },
                );
            }
        }
        Stream {
            id: self.id,
            headers: std::mem::take(&mut self.headers),
            shared: self.shared.clone(),
        }
    }

    /// Refuses the stream with `RST_STREAM` and `status` (one of [`rst`]).
    pub fn refuse(mut self, status: u32) {
        self.settled = true;
        reset_stream(&self.shared, self.id, status);
    }
}

impl Drop for IncomingStream {
    fn drop(&mut self) {
        if !self.settled {
            reset_stream(&self.shared, self.id, rst::CANCEL);
        }
    }
}

fn reset_stream(shared: &Shared, id: u32, status: u32) {
    let mut state = shared.lock();
    if let Some(mut stream) = state.streams.remove(&id) {
        stream.reset = true;
        wake(&mut stream.read_waker);
        wake(&mut stream.write_waker);
        stream.room.notify_one();
        if !state.closing && !state.dead {
            shared.push(
                &mut state,
                Frame::RstStream {
                    stream_id: id,
                    status,
                },
            );
        }
    }
}

/// An accepted stream: read what the peer sends, write what it should get. `shutdown` sends `FIN`;
/// dropping the stream sends `FIN` if it was not sent and drops whatever the peer still sends.
pub struct Stream {
    id: u32,
    headers: Headers,
    shared: Arc<Shared>,
}

impl Stream {
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Ends both directions with `RST_STREAM` `CANCEL` (spdystream's `Reset`).
    pub fn reset(self) {
        reset_stream(&self.shared, self.id, rst::CANCEL);
    }
}

fn broken(id: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        format!("SPDY stream {id} was reset or its connection closed"),
    )
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let shared = &self.shared;
        let mut guard = shared.lock();
        let state = &mut *guard;
        let Some(stream) = state.streams.get_mut(&self.id) else {
            return Poll::Ready(Err(broken(self.id)));
        };
        if stream.recv.is_empty() {
            if stream.remote_fin {
                return Poll::Ready(Ok(()));
            }
            if stream.reset || state.dead {
                return Poll::Ready(Err(broken(self.id)));
            }
            stream.read_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let mut copied = 0;
        while buf.remaining() > 0 {
            let Some(front) = stream.recv.front_mut() else {
                break;
            };
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            copied += n;
            if n == front.len() {
                stream.recv.pop_front();
            } else {
                let _ = front.split_to(n);
            }
        }
        stream.recv_len -= copied;
        stream.room.notify_one();
        stream.recv_consumed += copied as u32;
        let stream_update = (stream.recv_consumed >= INITIAL_WINDOW / 2 && !stream.remote_fin)
            .then(|| std::mem::take(&mut stream.recv_consumed));
        state.conn_recv_consumed += copied as u32;
        let conn_update = (state.conn_recv_consumed >= INITIAL_WINDOW / 2)
            .then(|| std::mem::take(&mut state.conn_recv_consumed));
        if !state.closing && !state.dead {
            if let Some(delta) = stream_update {
                shared.push(
                    state,
                    Frame::WindowUpdate {
                        stream_id: self.id,
                        delta,
                    },
                );
            }
            if let Some(delta) = conn_update {
                shared.push(
                    state,
                    Frame::WindowUpdate {
                        stream_id: 0,
                        delta,
                    },
                );
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let shared = &self.shared;
        let mut guard = shared.lock();
        let state = &mut *guard;
        if state.dead || state.closing {
            return Poll::Ready(Err(broken(self.id)));
        }
        let flow_control = state.peer_flow_control;
        let conn_window = state.conn_send_window;
        let Some(stream) = state.streams.get_mut(&self.id) else {
            return Poll::Ready(Err(broken(self.id)));
        };
        if stream.reset || stream.local_fin {
            return Poll::Ready(Err(broken(self.id)));
        }
        let mut n = buf.len().min(MAX_WRITE_CHUNK);
        if flow_control {
            let window = conn_window.min(stream.send_window);
            if window <= 0 {
                stream.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            n = n.min(window as usize);
        }
        if state.outbox_data >= OUTBOX_LIMIT {
            state.outbox_waiters.push(cx.waker().clone());
            return Poll::Pending;
        }
        if let Some(stream) = state.streams.get_mut(&self.id) {
            stream.send_window -= n as i64;
        }
        state.conn_send_window -= n as i64;
        shared.push(
            state,
            Frame::Data {
                stream_id: self.id,
                fin: false,
                data: Bytes::copy_from_slice(&buf[..n]),
            },
        );
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Frames go to the writer task at once; it flushes the transport whenever its queue runs dry.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        finish(&self.shared, self.id);
        Poll::Ready(Ok(()))
    }
}

/// Sends `FIN` for a stream once.
fn finish(shared: &Shared, id: u32) {
    let mut guard = shared.lock();
    let state = &mut *guard;
    let closed = state.closing || state.dead;
    let Some(stream) = state.streams.get_mut(&id) else {
        return;
    };
    if stream.local_fin || stream.reset {
        return;
    }
    stream.local_fin = true;
    let remove = stream.remote_fin && stream.dropped;
    if !closed {
        shared.push(
            state,
            Frame::Data {
                stream_id: id,
                fin: true,
                data: Bytes::new(),
            },
        );
    }
    if remove {
        state.streams.remove(&id);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            if let Some(stream) = state.streams.get_mut(&self.id) {
                stream.dropped = true;
                stream.recv.clear();
                stream.recv_len = 0;
                stream.room.notify_one();
            }
        }
        finish(&self.shared, self.id);
        let mut state = self.shared.lock();
        if state
            .streams
            .get(&self.id)
            .is_some_and(|s| s.remote_fin || s.reset)
        {
            state.streams.remove(&self.id);
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut io: W, shared: Arc<Shared>) {
    let mut encoder = FrameEncoder::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let (batch, closing) = {
            let mut state = shared.lock();
            if state.dead {
                break;
            }
            let batch: Vec<Frame> = state.outbox.drain(..).collect();
            state.outbox_data = 0;
            for waker in state.outbox_waiters.drain(..) {
                waker.wake();
            }
            (batch, state.closing)
        };
        shared.drained.notify_one();
        if batch.is_empty() {
            if closing {
                break;
            }
            shared.wake_writer.notified().await;
            continue;
        }
        let mut last_goaway = false;
        for frame in &batch {
            if let Err(error) = encoder.encode(frame, &mut buf) {
                tracing::debug!(%error, "SPDY frame not encodable");
                shared.kill();
                return;
            }
            last_goaway = matches!(frame, Frame::GoAway { .. });
        }
        // A peer that takes nothing for the idle timeout is gone (a slow one is only paced).
        let written = tokio::time::timeout(IDLE_TIMEOUT, write_out(&mut io, &buf))
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
        if let Err(error) = written {
            tracing::debug!(%error, "SPDY connection write failed");
            shared.kill();
            return;
        }
        buf.clear();
        if last_goaway && closing {
            break;
        }
    }
    let _ = io.shutdown().await;
    shared.kill();
}

async fn write_out<W: AsyncWrite + Unpin>(io: &mut W, buf: &[u8]) -> io::Result<()> {
    io.write_all(buf).await?;
    io.flush().await
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut frames: FrameReader<R>,
    shared: Arc<Shared>,
    incoming: mpsc::Sender<IncomingStream>,
) {
    let end = loop {
        let frame = match tokio::time::timeout(IDLE_TIMEOUT, frames.read_frame()).await {
            Err(_) => break Some("no frame for the idle timeout".to_string()),
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => break None,
            Ok(Err(Error::Io(error))) => {
                tracing::debug!(%error, "SPDY connection read failed");
                break None;
            }
            Ok(Err(error)) => break Some(error.to_string()),
        };
        match handle_frame(frame, &shared, &incoming).await {
            Ok(()) => {}
            Err(error) => break Some(error.to_string()),
        }
        wait_for_outbox(&shared).await;
    };
    let mut state = shared.lock();
    if let Some(reason) = &end {
        tracing::debug!(%reason, "SPDY connection closed with GOAWAY PROTOCOL_ERROR");
        if !state.closing && !state.dead {
            let last = state.last_peer_stream;
            shared.push(
                &mut state,
                Frame::GoAway {
                    last_good_stream_id: last,
                    status: goaway::PROTOCOL_ERROR,
                },
            );
            state.closing = true;
        }
    }
    // The peer sends nothing more: readers see the end (or a reset, if the stream was not finished).
    for stream in state.streams.values_mut() {
        if !stream.remote_fin {
            stream.reset = true;
        }
        wake(&mut stream.read_waker);
        wake(&mut stream.write_waker);
    }
    if end.is_none() && state.streams.values().all(|s| s.dropped) {
        // Nothing left to say to a peer that has gone.
        state.closing = true;
    }
    drop(state);
    shared.wake_writer.notify_one();
}

/// Lets the writer catch up when the peer makes us queue more than it takes (a PING flood).
async fn wait_for_outbox(shared: &Shared) {
    loop {
        let drained = shared.drained.notified();
        {
            let state = shared.lock();
            if state.dead || state.outbox.len() < 1024 && state.outbox_data < 2 * OUTBOX_LIMIT {
                return;
            }
        }
        drained.await;
    }
}

async fn handle_frame(
    frame: Frame,
    shared: &Arc<Shared>,
    incoming: &mpsc::Sender<IncomingStream>,
) -> Result<(), Error> {
    match frame {
        Frame::SynStream {
            stream_id,
            fin,
            headers,
            ..
        } => {
            {
                let mut state = shared.lock();
                if stream_id % 2 == 0 || stream_id <= state.last_peer_stream {
                    return Err(protocol(format!(
                        "SYN_STREAM for stream {stream_id} after {} (client streams are odd and increasing)",
                        state.last_peer_stream
                    )));
                }
                state.last_peer_stream = stream_id;
                if state.closing || state.dead {
                    return Ok(());
                }
                if state.streams.len() >= MAX_STREAMS {
                    shared.push(
                        &mut state,
                        Frame::RstStream {
                            stream_id,
                            status: rst::REFUSED_STREAM,
                        },
                    );
                    return Ok(());
                }
                let window = state.peer_initial_window;
                state.streams.insert(
                    stream_id,
                    StreamState {
                        recv: VecDeque::new(),
                        recv_len: 0,
                        recv_consumed: 0,
                        remote_fin: fin,
                        reset: false,
                        send_window: window,
                        local_fin: false,
                        dropped: false,
                        read_waker: None,
                        write_waker: None,
                        room: Arc::new(Notify::new()),
                    },
                );
            }
            let stream = IncomingStream {
                id: stream_id,
                headers,
                shared: shared.clone(),
                settled: false,
            };
            // At most MAX_STREAMS are open, so this never waits for long; a closed receiver means the
            // application stopped listening, and dropping the stream refuses it.
            let _ = incoming.send(stream).await;
        }
        Frame::Data {
            stream_id,
            fin,
            data,
        } => {
            let room = {
                let state = shared.lock();
                match state.streams.get(&stream_id) {
                    Some(stream) => stream.room.clone(),
                    // A stream that is gone (reset, or both sides finished): spdystream drops such data too.
                    None => return Ok(()),
                }
            };
            // Wait while the stream holds a window of unread data (see the module doc).
            loop {
                let notified = room.notified();
                {
                    let mut guard = shared.lock();
                    let state = &mut *guard;
                    let Some(stream) = state.streams.get_mut(&stream_id) else {
                        return Ok(());
                    };
                    if stream.remote_fin {
                        return Err(protocol(format!(
                            "DATA on stream {stream_id} after its FIN"
                        )));
                    }
                    if stream.dropped || stream.reset {
                        stream.remote_fin |= fin;
                        if stream.remote_fin && (stream.local_fin || stream.reset) {
                            state.streams.remove(&stream_id);
                        }
                        // Dropped data is consumed data: the connection's window opens again.
                        state.conn_recv_consumed += data.len() as u32;
                        if state.conn_recv_consumed >= INITIAL_WINDOW / 2
                            && !state.closing
                            && !state.dead
                        {
                            let delta = std::mem::take(&mut state.conn_recv_consumed);
                            shared.push(
                                state,
                                Frame::WindowUpdate {
                                    stream_id: 0,
                                    delta,
                                },
                            );
                        }
                        return Ok(());
                    }
                    if stream.recv_len == 0
                        || stream.recv_len + data.len() <= INITIAL_WINDOW as usize
                    {
                        stream.recv_len += data.len();
                        if !data.is_empty() {
                            stream.recv.push_back(data);
                        }
                        stream.remote_fin |= fin;
                        wake(&mut stream.read_waker);
                        return Ok(());
                    }
                }
                notified.await;
            }
        }
        Frame::RstStream { stream_id, .. } => {
            let mut state = shared.lock();
            if let Some(stream) = state.streams.get_mut(&stream_id) {
                stream.reset = true;
                wake(&mut stream.read_waker);
                wake(&mut stream.write_waker);
                stream.room.notify_one();
                if stream.dropped {
                    state.streams.remove(&stream_id);
                }
            }
        }
        Frame::Settings { entries } => {
            let mut state = shared.lock();
            state.peer_flow_control = true;
            for (_, id, value) in entries {
                if id == SETTINGS_INITIAL_WINDOW_SIZE {
                    if value > 0x7fff_ffff {
                        return Err(protocol(format!("initial window size {value}")));
                    }
                    let delta = i64::from(value) - state.peer_initial_window;
                    state.peer_initial_window = i64::from(value);
                    for stream in state.streams.values_mut() {
                        stream.send_window += delta;
                        wake(&mut stream.write_waker);
                    }
                }
            }
        }
        Frame::Ping { id } => {
            // Our own pings would be even; we send none, so an even id is simply not answered.
            if id % 2 == 1 {
                let mut state = shared.lock();
                if !state.closing && !state.dead {
                    shared.push(&mut state, Frame::Ping { id });
                }
            }
        }
        Frame::GoAway { .. } => {
            // The peer opens no more streams; the ones open go on until they end.
        }
        Frame::WindowUpdate { stream_id, delta } => {
            let mut state = shared.lock();
            state.peer_flow_control = true;
            if delta == 0 {
                return Err(protocol("WINDOW_UPDATE with delta 0"));
            }
            if stream_id == 0 {
                state.conn_send_window += i64::from(delta);
                if state.conn_send_window > 0x7fff_ffff {
                    return Err(protocol("connection window above 2^31-1"));
                }
                for stream in state.streams.values_mut() {
                    wake(&mut stream.write_waker);
                }
            } else {
                let overflow = match state.streams.get_mut(&stream_id) {
                    Some(stream) => {
                        stream.send_window += i64::from(delta);
                        wake(&mut stream.write_waker);
                        stream.send_window > 0x7fff_ffff
                    }
                    None => false,
                };
                if overflow {
                    drop(state);
                    reset_stream(shared, stream_id, rst::FLOW_CONTROL_ERROR);
                }
            }
        }
        Frame::SynReply { stream_id, .. } => {
            return Err(protocol(format!(
                "SYN_REPLY for stream {stream_id}, which this server never opened"
            )));
        }
        Frame::Headers { stream_id, fin, .. } => {
            // Extra headers mean nothing to the Kubernetes protocols; their FIN still ends the half.
            if fin {
                let mut state = shared.lock();
                if let Some(stream) = state.streams.get_mut(&stream_id) {
                    stream.remote_fin = true;
                    wake(&mut stream.read_waker);
                }
            }
        }
        Frame::Unknown { .. } => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The HTTP/1.1 upgrade.

/// Why an upgrade request was not upgraded: the status code and message to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeRefused {
    pub status: http::StatusCode,
    pub message: String,
    /// For 403: the protocols this server accepts (`X-Accepted-Stream-Protocol-Versions`).
    pub accepted: Vec<String>,
}

/// True when the request asks for a SPDY/3.1 upgrade (`Connection: Upgrade`, `Upgrade: SPDY/3.1`),
/// as apimachinery's `spdy.responseUpgrader` checks.
pub fn is_spdy_upgrade(headers: &http::HeaderMap) -> bool {
    let has = |name: http::header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.to_ascii_lowercase().contains(&token.to_ascii_lowercase()))
        })
    };
    has(http::header::CONNECTION, "upgrade") && has(http::header::UPGRADE, UPGRADE_TOKEN)
}

/// The `X-Stream-Protocol-Version` negotiation of apimachinery's `httpstream.Handshake`: the first
/// of the client's protocols (comma-separated, in order, over all header lines) that the server
/// supports. No header: 400; no common protocol: 403 listing the server's.
pub fn negotiate_protocol(
    headers: &http::HeaderMap,
    server: &[&str],
) -> Result<String, UpgradeRefused> {
    let client: Vec<String> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    if client.is_empty() {
        return Err(UpgradeRefused {
            status: http::StatusCode::BAD_REQUEST,
            message: "unable to upgrade: X-Stream-Protocol-Version is required".into(),
            accepted: Vec::new(),
        });
    }
    if let Some(found) = client.iter().find(|c| server.contains(&c.as_str())) {
        return Ok(found.clone());
    }
    Err(UpgradeRefused {
        status: http::StatusCode::FORBIDDEN,
        message: format!(
            "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
            client.join(" "),
            server.join(" ")
        ),
        accepted: server.iter().map(|s| s.to_string()).collect(),
    })
}

/// The 101 response of the upgrade, with the negotiated protocol.
pub fn switching_protocols<B: Default>(protocol: &str) -> http::Response<B> {
    let mut response = http::Response::new(B::default());
    *response.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    headers.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static(UPGRADE_TOKEN),
    );
    if let Ok(value) = http::HeaderValue::from_str(protocol) {
        headers.insert("x-stream-protocol-version", value);
    }
    response
}

#[cfg(test)]
mod tests;
