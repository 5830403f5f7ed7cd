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
    /// Connecting, TLS or reading the body failed.
    #[error("transport: {0}")]
    Transport(String),
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
