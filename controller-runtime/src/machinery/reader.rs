//! A reader of a manager's `/trace` stream: what `sample-controller trace` runs.

use std::path::PathBuf;

use bytes::{Buf, BytesMut};
use http::{Request, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;

use super::{MAX_KEY_LEN, TRACE_PATH};
use sample_client_go::client::config::{Auth, Secret};
use sample_client_go::client::{self, Client, Config};

/// The longest line the reader accepts (a hop is a few hundred bytes).
pub const MAX_LINE: usize = 64 * 1024;

/// How to reach a manager's metrics server.
#[derive(Clone, Debug, Default)]
pub struct TraceReaderOptions {
    /// A bearer token, for a server behind `--metrics-secure`.
    pub token: Option<String>,
    /// A PEM CA bundle that signed the server's certificate (`--metrics-cert-dir`'s).
    pub certificate_authority: Option<PathBuf>,
    /// Do not verify the server's certificate (the self-signed one `--metrics-secure` makes
    /// without a `--metrics-cert-dir`).
    pub insecure_skip_tls_verify: bool,
}

/// Why reading a trace failed.
#[derive(Debug, thiserror::Error)]
pub enum TraceReaderError {
    /// The address or the key cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// The request failed or was refused (401, 403, 429, ...).
    #[error("{0}")]
    Request(#[from] client::Error),
    /// The stream said something that is not a JSON object per line.
    #[error("the trace stream sent a line that is not JSON: {0}")]
    Line(String),
}

/// An open `/trace` stream: [`TraceReader::next`] returns its lines, parsed.
pub struct TraceReader {
    body: Incoming,
    buf: BytesMut,
}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader").finish_non_exhaustive()
    }
}

impl TraceReader {
    /// Opens `address`'s `/trace` for `key` (`namespace/name`), of `controller` or of every
    /// controller. `address` is the metrics server's URL (`http://127.0.0.1:8080`, or
    /// `https://...` behind `--metrics-secure`).
    pub async fn open(
        address: &str,
        key: &str,
        controller: Option<&str>,
        options: &TraceReaderOptions,
    ) -> Result<TraceReader, TraceReaderError> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(TraceReaderError::Invalid(format!(
                "the key {key:?} must be 1 to {MAX_KEY_LEN} bytes (NAMESPACE/NAME)"
            )));
        }
        let server = Config::parse_server(address)
            .map_err(|e| TraceReaderError::Invalid(format!("--address {address:?}: {e}")))?;
        let mut config = Config::new(server);
        // One long request: no client-side throttle, no request timeout (a stream), no retries.
        config.qps = -1.0;
        config.timeout = None;
        config.max_retries = 0;
        config.tls.insecure_skip_tls_verify = options.insecure_skip_tls_verify;
        if let Some(ca) = &options.certificate_authority {
            let pem = std::fs::read(ca).map_err(|e| {
                TraceReaderError::Invalid(format!(
                    "reading --certificate-authority {}: {e}",
                    ca.display()
                ))
            })?;
            config.tls.ca_pem = Some(pem);
        }
        if let Some(token) = &options.token {
            config.auth = Auth::Bearer {
                token: Some(Secret::new(token.trim())),
                file: None,
            };
        }
        let client = Client::new(config)?;
        let mut query = format!("key={}", encode(key));
        if let Some(c) = controller {
            query.push_str("&controller=");
            query.push_str(&encode(c));
        }
        let uri: Uri = format!("{TRACE_PATH}?{query}")
            .parse()
            .map_err(|e| TraceReaderError::Invalid(format!("the trace URL: {e}")))?;
        let req = Request::get(uri)
            .body(bytes::Bytes::new())
            .map_err(|e| TraceReaderError::Invalid(e.to_string()))?;
        let resp = client.send(req, true).await?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(TraceReaderError::Request(client::Error::Other(format!(
                "{address}{TRACE_PATH} answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ))));
        }
        Ok(TraceReader {
            body: resp.into_body(),
            buf: BytesMut::new(),
        })
    }

    /// The next line of the stream, parsed (hello, hops, heartbeats, lost counts; see the
    /// module documentation); `None` when the stream ended.
    pub async fn next(&mut self) -> Result<Option<Value>, TraceReaderError> {
        loop {
            if let Some(at) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(at + 1);
                let text = String::from_utf8_lossy(&line[..at]);
                if text.trim().is_empty() {
                    continue;
                }
                return serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| TraceReaderError::Line(format!("{e}: {text}")));
            }
            if self.buf.len() > MAX_LINE {
                return Err(TraceReaderError::Line(format!(
                    "a line longer than {MAX_LINE} bytes"
                )));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|e| {
                TraceReaderError::Request(client::Error::Other(format!(
                    "reading the trace stream: {e}"
                )))
            })?;
            if let Ok(mut data) = frame.into_data() {
                while data.has_remaining() {
                    let chunk = data.chunk();
                    self.buf.extend_from_slice(chunk);
                    let n = chunk.len();
                    data.advance(n);
                }
            }
        }
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
