//! The request body's size bound (kube-apiserver's `MaxRequestBodyBytes` and `limitedReadBody`):
//! a body is read into memory whole before it is decoded, so it is bounded first.

use bytes::Bytes;
use http::header;
use http_body_util::{BodyExt, Limited};

use crate::api::status::ApiError;

/// Largest request body accepted: kube-apiserver's `MaxRequestBodyBytes`, 3 MiB (see
/// [`crate::api::limits`] for the other bounds).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// The `413 RequestEntityTooLarge` Status the real server sends (`limitedReadBody` in the
/// apiserver's `handlers/rest.go`): message `Request entity too large: limit is N`.
fn too_large() -> ApiError {
    ApiError::new(
        413,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {MAX_BODY}"),
    )
}

/// Reads a request body of at most [`MAX_BODY`] bytes. A declared `Content-Length` above the
/// limit is refused before a byte is read; a body without one (chunked, HTTP/2 streams) is cut
/// off as soon as it passes the limit. Either way the answer is a `413` Status.
pub async fn read_body(
    headers: &http::HeaderMap,
    body: hyper::body::Incoming,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .inspect(|b| crate::storage::memory::handled(b.len()))
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_large()
            } else {
                ApiError::bad_request(format!("error reading request body: {e}"))
            }
        })
}
