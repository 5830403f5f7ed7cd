//! Errors from talking to the API server, shaped like apimachinery's `apierrors`.
//!
//! Every non-2xx answer from a Kubernetes API server carries a `metav1.Status` body:
//!
//! ```json
//! {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//!  "message":"ats.cnat.programming-kubernetes.info \"x\" not found",
//!  "reason":"NotFound","details":{"name":"x","group":"cnat.programming-kubernetes.info","kind":"ats"},"code":404}
//! ```
//!
//! Controllers branch on the *reason* (`is_not_found`, `is_conflict`, ...) rather than on
//! strings; the helpers below look at `reason` first and fall back to the HTTP code, exactly as
//! `k8s.io/apimachinery/pkg/api/errors` does. A body that is not a Status (an HTML page from a
//! proxy, plain text from priority-and-fairness) becomes [`Error::Http`] keeping the code and a
//! bounded excerpt of the body, so nothing about the failure is lost and nothing is unbounded.
//!
//! ## Kinds, not strings
//!
//! Code that reacts to a failure matches on the variant (and, for a transport failure, on its
//! [`TransportKind`]) or calls a helper; it never searches the message text:
//!
//! | the failure | how to ask | who cares |
//! |---|---|---|
//! | the server answered with a Status | [`Error::Api`], `is_not_found()`, `is_conflict()`, ... | every sync handler |
//! | the server answered non-2xx without a Status | [`Error::Http`], [`Error::code`] | retries |
//! | nobody listens on the server's port | [`Error::is_connection_refused`] | the reflector backs off and re-watches instead of relisting (client-go's `utilnet.IsConnectionRefused`) |
//! | DNS, unreachable network, proxy | [`TransportKind::Connect`] | |
//! | certificate or handshake rejected | [`Error::is_tls`] | a wrong CA is not worth retrying quickly |
//! | the connection broke mid-request or mid-watch | [`TransportKind::ConnectionClosed`] | the reflector resumes the watch from its last resourceVersion |
//! | no complete answer in time | [`Error::Timeout`], [`Error::is_timeout`] | retries |
//! | a body that does not decode | [`Error::Decode`] | |
//! | kubeconfig, flags | [`Error::Config`] | startup |
//!
//! The transport builds its failures with [`Error::transport`], which walks the error's
//! `source()` chain down to the `std::io::Error` / `rustls::Error` underneath and takes the kind
//! from *their* types (`io::ErrorKind::ConnectionRefused`, ...), the way Go's
//! `errors.Is(err, syscall.ECONNREFUSED)` does; the full chain is kept as text for the message.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

/// Longest excerpt of a non-Status body kept in an error.
pub const BODY_EXCERPT_LIMIT: usize = 1024;

/// Anything that can go wrong between a controller and the API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a `metav1.Status` failure (HTTP code in `status.code`).
    #[error("{} ({}): {}", .0.code.unwrap_or_default(), .0.reason.as_deref().unwrap_or("Unknown"), .0.message.as_deref().unwrap_or(""))]
    Api(Box<Status>),
    /// The server answered non-2xx with a body that is not a Status.
    #[error("HTTP {code} from the API server: {excerpt}")]
    Http {
        /// HTTP status code.
        code: u16,
        /// The first [`BODY_EXCERPT_LIMIT`] bytes of the body, lossily decoded.
        excerpt: String,
    },
    /// A response or watch line that could not be decoded.
    #[error("decoding {what}: {source}")]
    Decode {
        /// What was being decoded (`"Pod list"`, `"watch event"`, ...).
        what: String,
        /// The underlying serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A watch event whose object does not decode as the typed kind, named (see
    /// [`super::undecodable`]). A watch stream goes on after it.
    #[error("{event} watch event: {object}")]
    UndecodableObject {
        /// `ADDED`, `MODIFIED` or `DELETED`.
        event: &'static str,
        /// What the object is and why it does not decode.
        object: Box<super::UndecodableObject>,
    },
    /// Connecting, TLS or reading the answer failed; [`TransportError::kind`] says which.
    #[error("{0}")]
    Transport(TransportError),
    /// A watch line exceeded the decoder's bound.
    #[error("watch line longer than {limit} bytes")]
    LineTooLong {
        /// The bound that was exceeded.
        limit: usize,
    },
    /// Configuration (kubeconfig, in-cluster, flags) is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// A request was not sent or not answered in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Anything else, with a message saying what.
    #[error("{0}")]
    Other(String),
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which part of talking to the server failed, for an [`Error::Transport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// Nobody listens on the server's address (`ECONNREFUSED`): the server is down or
    /// restarting.
    ConnectionRefused,
    /// No connection for another reason: the name did not resolve, the network or host is
    /// unreachable, the proxy refused the tunnel.
    Connect,
    /// The TLS handshake failed: the server's certificate is not trusted or does not name the
    /// host, our client certificate was rejected, no common protocol version.
    Tls,
    /// An established connection broke: reset, closed, or ended in the middle of an answer
    /// or a watch stream.
    ConnectionClosed,
    /// Any other I/O failure.
    Io,
}

impl TransportKind {
    /// A short phrase naming the failure, as the error message says it.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::ConnectionRefused => "connection refused",
            TransportKind::Connect => "cannot connect",
            TransportKind::Tls => "TLS handshake failed",
            TransportKind::ConnectionClosed => "connection closed",
            TransportKind::Io => "I/O error",
        }
    }
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transport failure: its kind, what was being done, and the underlying error chain as text.
///
/// Displays as `{context}: {kind} ({detail})`, e.g.
/// `GET https://127.0.0.1:6443/api/v1/pods: connection refused (client error (Connect): tcp connect error: Connection refused (os error 111))`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// What failed.
    pub kind: TransportKind,
    /// What was being done (`"GET https://host/api/v1/pods"`, `"reading watch stream"`).
    pub context: String,
    /// The underlying errors, outermost first, joined with `": "`.
    pub detail: String,
}

impl TransportError {
    /// A transport failure of `kind` while doing `context`.
    pub fn new(kind: TransportKind, context: impl Into<String>, detail: impl Into<String>) -> Self {
        TransportError {
            kind,
            context: context.into(),
            detail: detail.into(),
        }
    }

    /// What failed.
    pub fn kind(&self) -> TransportKind {
        self.kind
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.context.is_empty() {
            write!(f, "{}: ", self.context)?;
        }
        f.write_str(self.kind.as_str())?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A transport failure known only by its description, for fakes and tests: kind
/// [`TransportKind::Io`]. Code that knows the kind uses [`TransportError::new`].
impl From<&str> for TransportError {
    fn from(detail: &str) -> Self {
        TransportError::new(TransportKind::Io, "", detail)
    }
}

/// Classifies an error chain by the *types* in it, outermost first: a `rustls::Error` is TLS;
/// an `io::Error` by its `ErrorKind`; hyper's own errors by their predicates. `None` when
/// nothing in the chain says.
fn classify(err: &(dyn std::error::Error + 'static)) -> Option<Classified> {
    use std::io::ErrorKind as Io;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut connecting = false;
    while let Some(e) = cur {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return Some(Classified::Transport(TransportKind::Tls));
        }
        if let Some(h) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && h.is_connect()
        {
            connecting = true;
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return Some(Classified::Timeout);
            }
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return Some(Classified::Transport(TransportKind::ConnectionClosed));
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            let kind = match io.kind() {
                Io::ConnectionRefused => Some(TransportKind::ConnectionRefused),
                Io::TimedOut => return Some(Classified::Timeout),
                Io::ConnectionReset
                | Io::ConnectionAborted
                | Io::BrokenPipe
                | Io::UnexpectedEof
                | Io::NotConnected => Some(TransportKind::ConnectionClosed),
                Io::HostUnreachable
                | Io::NetworkUnreachable
                | Io::AddrNotAvailable
                | Io::NetworkDown => Some(TransportKind::Connect),
                _ => None,
            };
            if kind.is_some() {
                return kind.map(Classified::Transport);
            }
            // `io::Error::source` skips the error it wraps (it returns the wrapped error's
            // source), so look at the wrapped error itself: that is where tokio-rustls puts
            // the `rustls::Error` of a failed handshake.
            if let Some(found) = io.get_ref().and_then(|inner| classify(inner)) {
                return Some(found);
            }
        }
        cur = e.source();
    }
    connecting.then_some(Classified::Transport(TransportKind::Connect))
}

enum Classified {
    Transport(TransportKind),
    Timeout,
}

/// The error and its sources as one line, outermost first, skipping a source whose text the
/// line already contains (for error messages and for the transport's retry logs).
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

impl Error {
    /// Builds an API error from a Status.
    pub fn from_status(status: Status) -> Self {
        Error::Api(Box::new(status))
    }

    /// A Status such as the API server would send, for code paths (listers, fakes) that must
    /// answer like the server does.
    pub fn status(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Error::from_status(Status {
            code: Some(code.into()),
            reason: Some(reason.to_owned()),
            message: Some(message.into()),
            status: Some("Failure".to_owned()),
            ..Default::default()
        })
    }

    /// Turns an HTTP error response into an `Error`: a Status body is decoded, anything else
    /// keeps the code and a bounded excerpt.
    pub fn from_response(code: u16, body: &[u8]) -> Self {
        if let Ok(status) = serde_json::from_slice::<Status>(body) {
            // A Status has kind "Status"; an object that merely parses must not pass as one.
            let looks_like_status =
                status.code.is_some() || status.reason.is_some() || status.message.is_some();
            if looks_like_status {
                let mut status = status;
                if status.code.is_none() {
                    status.code = Some(code.into());
                }
                return Error::from_status(status);
            }
        }
        let cut = body.len().min(BODY_EXCERPT_LIMIT);
        let mut excerpt = String::from_utf8_lossy(&body[..cut]).into_owned();
        if body.len() > cut {
            excerpt.push_str("...");
        }
        Error::Http { code, excerpt }
    }

    /// A transport failure while doing `context` (`"GET https://host/api/v1/pods"`), its kind
    /// taken from the types in `err`'s source chain (see the module documentation). An I/O
    /// timeout becomes [`Error::Timeout`]; a chain that names no kind is [`TransportKind::Io`].
    pub fn transport(context: impl Into<String>, err: &(dyn std::error::Error + 'static)) -> Self {
        let context = context.into();
        let detail = error_chain(err);
        match classify(err) {
            Some(Classified::Timeout) => Error::Timeout(format!("{context}: {detail}")),
            Some(Classified::Transport(kind)) => {
                let detail = if kind == TransportKind::Tls && untrusted_issuer(err) {
                    format!("{detail}; {UNTRUSTED_ISSUER_HINT}")
                } else {
                    detail
                };
                Error::Transport(TransportError::new(kind, context, detail))
            }
            None => Error::Transport(TransportError::new(TransportKind::Io, context, detail)),
        }
    }

    /// The kind of a transport failure, `None` for any other error.
    pub fn transport_kind(&self) -> Option<TransportKind> {
        match self {
            Error::Transport(t) => Some(t.kind),
            _ => None,
        }
    }

    /// Nobody listens on the server's address (client-go's `utilnet.IsConnectionRefused`).
    pub fn is_connection_refused(&self) -> bool {
        self.transport_kind() == Some(TransportKind::ConnectionRefused)
    }

    /// The TLS handshake failed (untrusted certificate, wrong name, rejected client certificate).
    pub fn is_tls(&self) -> bool {
        self.transport_kind() == Some(TransportKind::Tls)
    }

    /// An established connection broke (reset, closed, ended mid-answer or mid-watch).
    pub fn is_connection_closed(&self) -> bool {
        self.transport_kind() == Some(TransportKind::ConnectionClosed)
    }

    /// No complete answer in time ([`Error::Timeout`]); a server-side 504 is
    /// [`Error::is_server_timeout`] instead.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout(_))
    }

    /// The Status, if the server sent one.
    pub fn as_status(&self) -> Option<&Status> {
        match self {
            Error::Api(s) => Some(s),
            _ => None,
        }
    }

    /// The HTTP code, if the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(s) => s.code.and_then(|c| u16::try_from(c).ok()),
            Error::Http { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The Status reason (`NotFound`, `Conflict`, ...), if any.
    pub fn reason(&self) -> Option<&str> {
        self.as_status().and_then(|s| s.reason.as_deref())
    }

    fn reason_or_code(&self, reason: &str, code: u16) -> bool {
        match self.reason() {
            Some(r) if !r.is_empty() => r == reason,
            _ => self.code() == Some(code),
        }
    }

    /// 404 NotFound.
    pub fn is_not_found(&self) -> bool {
        self.reason_or_code("NotFound", 404)
    }
    /// 409 AlreadyExists (a create of a name that exists).
    pub fn is_already_exists(&self) -> bool {
        self.reason() == Some("AlreadyExists")
    }
    /// 409 Conflict (a stale resourceVersion on update).
    pub fn is_conflict(&self) -> bool {
        self.reason_or_code("Conflict", 409) && !self.is_already_exists()
    }
    /// 422 Invalid.
    pub fn is_invalid(&self) -> bool {
        self.reason_or_code("Invalid", 422)
    }
    /// 410 Gone / Expired: the resourceVersion is older than the server's history.
    pub fn is_gone(&self) -> bool {
        matches!(self.reason(), Some("Gone") | Some("Expired")) || self.code() == Some(410)
    }
    /// Same as [`Error::is_gone`] (apimachinery's `IsResourceExpired`).
    pub fn is_resource_expired(&self) -> bool {
        self.is_gone()
    }
    /// 429 TooManyRequests.
    pub fn is_too_many_requests(&self) -> bool {
        self.reason_or_code("TooManyRequests", 429)
    }
    /// 403 Forbidden.
    pub fn is_forbidden(&self) -> bool {
        self.reason_or_code("Forbidden", 403)
    }
    /// 401 Unauthorized.
    pub fn is_unauthorized(&self) -> bool {
        self.reason_or_code("Unauthorized", 401)
    }
    /// 504 / ServerTimeout.
    pub fn is_server_timeout(&self) -> bool {
        matches!(self.reason(), Some("ServerTimeout") | Some("Timeout")) || self.code() == Some(504)
    }
    /// 500 InternalError.
    pub fn is_internal_error(&self) -> bool {
        self.reason_or_code("InternalError", 500)
    }
    /// 503 ServiceUnavailable.
    pub fn is_service_unavailable(&self) -> bool {
        self.reason_or_code("ServiceUnavailable", 503)
    }
}

/// What a certificate signed by an unknown CA usually means, added to the error's text: the
/// server's identity changed (a new server, or its CA was rotated) and this client still trusts
/// the old one. Retrying does not help; a new kubeconfig does.
pub const UNTRUSTED_ISSUER_HINT: &str = "the server's certificate is not signed by the CA this client trusts (the kubeconfig's certificate-authority): if the server's CA changed (a new server, or a rotated certificate directory), use the kubeconfig it writes now";

/// Whether the chain holds rustls' verdict on a certificate signed by a CA it does not trust
/// (`UnknownIssuer`, or `BadSignature` when the issuer's name matches but its key does not).
fn untrusted_issuer(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        let rustls_error = e.downcast_ref::<rustls::Error>().or_else(|| {
            e.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        )) = rustls_error
        {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_map_to_helpers() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}"#;
        let e = Error::from_response(404, body);
        assert!(e.is_not_found());
        assert!(!e.is_conflict());
        assert_eq!(e.code(), Some(404));
        assert!(e.to_string().contains("not found"));

        let e = Error::from_response(
            409,
            br#"{"kind":"Status","reason":"AlreadyExists","code":409,"message":"exists"}"#,
        );
        assert!(e.is_already_exists() && !e.is_conflict());
        let e = Error::from_response(
            409,
            br#"{"kind":"Status","reason":"Conflict","code":409,"message":"stale"}"#,
        );
        assert!(e.is_conflict() && !e.is_already_exists());
        let e = Error::from_response(
            410,
            br#"{"kind":"Status","reason":"Expired","code":410,"message":"too old"}"#,
        );
        assert!(e.is_gone() && e.is_resource_expired());
    }

    #[test]
    fn transport_kinds_come_from_the_types_in_the_chain() {
        use std::io;
        #[derive(Debug, thiserror::Error)]
        #[error("tcp connect error")]
        struct Wrapper(#[source] io::Error);

        let refused = Wrapper(io::Error::from(io::ErrorKind::ConnectionRefused));
        let e = Error::transport("GET https://127.0.0.1:1/api", &refused);
        assert!(e.is_connection_refused(), "{e:?}");
        assert!(!e.is_tls() && !e.is_timeout());
        let text = e.to_string();
        assert!(
            text.starts_with("GET https://127.0.0.1:1/api: connection refused (tcp connect error"),
            "{text}"
        );

        // The message alone says nothing: the kind is what counts.
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, "peer went away");
        let e = Error::transport("reading watch stream", &reset);
        assert!(
            e.is_connection_closed() && !e.is_connection_refused(),
            "{e:?}"
        );
        let misleading = io::Error::other("connection refused");
        assert!(!Error::transport("x", &misleading).is_connection_refused());

        // tokio-rustls wraps the handshake's rustls::Error inside an io::Error.
        let tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let e = Error::transport("GET https://example/api", &Wrapper(tls));
        assert!(e.is_tls(), "{e:?}");
        assert!(e.to_string().contains("TLS handshake failed"), "{e}");
        assert!(e.to_string().contains(UNTRUSTED_ISSUER_HINT), "{e}");
        // Another TLS failure (a wrong host name) gets no such hint.
        let wrong_name = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
        );
        let e = Error::transport("GET https://example/api", &Wrapper(wrong_name));
        assert!(
            e.is_tls() && !e.to_string().contains(UNTRUSTED_ISSUER_HINT),
            "{e}"
        );

        let timed_out = io::Error::from(io::ErrorKind::TimedOut);
        assert!(Error::transport("connecting", &timed_out).is_timeout());
        assert_eq!(
            Error::transport("x", &io::Error::other("odd")).transport_kind(),
            Some(TransportKind::Io)
        );
    }

    #[test]
    fn non_status_body_keeps_code_and_bounded_excerpt() {
        let html = format!("<html>{}</html>", "x".repeat(5000));
        let e = Error::from_response(503, html.as_bytes());
        match &e {
            Error::Http { code, excerpt } => {
                assert_eq!(*code, 503);
                assert!(excerpt.len() <= BODY_EXCERPT_LIMIT + 3);
                assert!(excerpt.starts_with("<html>"));
            }
            other => panic!("expected Http, got {other:?}"),
        }
        assert!(e.is_service_unavailable());
        let e = Error::from_response(429, b"Too many requests, please try again later.\n");
        assert!(e.is_too_many_requests());
    }
}
