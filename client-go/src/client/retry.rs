//! Which requests are sent again, and when (client-go's `rest/request.go` and
//! `rest/with_retry.go`).
//!
//! client-go's rule (`rest/request.go`, `rest/with_retry.go`): any request
//! answered `429`, or `5xx` *with* a `Retry-After: <seconds>` header, is sent again after that
//! many seconds, at most [`Config::max_retries`](super::Config::max_retries) (10) times; a `429`/`5xx` without the header
//! (or with a value that is not whole seconds) is returned at once. A request that got *no*
//! answer is retried only when it is a `GET` and the failure says an established connection
//! went away: connection reset (`ECONNRESET`, aborted, broken pipe), a probable EOF (the
//! server closed the connection before or in the middle of the response) or a lost HTTP/2
//! connection (`GOAWAY`). client-go turns those into a synthetic `500` with `Retry-After: 1`,
//! so they wait **1 s** and share the same budget of 10. A watch (also a `GET`) is retried on
//! a probable EOF or a timeout (`Watch`'s own predicate). Everything else is returned on the
//! first failure: in particular **connection refused** (nothing listens: resending will not
//! help, and the caller, such as the reflector's backoff or the manager's start-up check,
//! decides what to do), TLS and DNS errors, and every failure of a write (the server may
//! have applied it). The classification is `retryable_failure` below.
//!
//! Data in: one answer (its status and `Retry-After`) or one transport error. Data out: the
//! delay to wait before resending, or `None`/`false` for "return it to the caller". The loop
//! that counts attempts against [`super::Config::max_retries`] is `Client::send`.

use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{Response, StatusCode};

/// The delay a 429, or a 5xx carrying `Retry-After: <seconds>`, asks for.
pub(super) fn retry_after<B>(resp: &Response<B>) -> Option<Duration> {
    let status = resp.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let secs: u64 = resp
        .headers()
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

/// The wait before resending a `GET` whose connection was lost: client-go's synthetic
/// `Retry-After: 1`.
pub(super) const CONNECTION_LOST_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Whether a request that got no answer may be sent again (the caller checks that it is a
/// `GET`). client-go's predicates: for ordinary requests `net.IsConnectionReset(err) ||
/// net.IsProbableEOF(err) || net.IsHTTP2ConnectionLost(err)`; for watches
/// `net.IsProbableEOF(err) || net.IsTimeout(err)`. Walks the error's source chain:
///
/// * `io::ErrorKind::ConnectionReset`, `ConnectionAborted`, `BrokenPipe` ("connection reset by
///   peer", "broken connection"), `UnexpectedEof`: reset or probable EOF.
/// * hyper's "connection closed before message completed" (incomplete message) and a request
///   cancelled because its connection went away: probable EOF.
/// * h2's `GOAWAY` from the server: probable EOF ("http2: server sent GOAWAY").
/// * `io::ErrorKind::TimedOut` and hyper timeouts: only for watches.
///
/// Connection refused, DNS and TLS failures match none of these and are not retried.
pub(crate) fn retryable_failure(e: &(dyn std::error::Error + 'static), watch: bool) -> bool {
    use std::io::ErrorKind;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            match io.kind() {
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof => return true,
                ErrorKind::TimedOut => return watch,
                ErrorKind::ConnectionRefused => return false,
                _ => {}
            }
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
            if h.is_timeout() {
                return watch;
            }
        }
        if let Some(h2) = c.downcast_ref::<h2::Error>()
            && h2.is_go_away()
            && h2.is_remote()
        {
            return true;
        }
        cur = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_only_for_429_and_5xx() {
        let r = |code: u16, h: Option<&str>| {
            let mut b = Response::builder().status(code);
            if let Some(h) = h {
                b = b.header(RETRY_AFTER, h);
            }
            retry_after(&b.body(()).unwrap())
        };
        assert_eq!(r(429, Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(r(503, Some("1")), Some(Duration::from_secs(1)));
        assert_eq!(r(503, None), None);
        assert_eq!(r(429, Some("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(r(404, Some("1")), None);
    }
}
