//! # Watching the machinery move: `/trace` and `/machinery` on the metrics server
//!
//! The manager's metrics server serves, beside `/metrics`, what a person (or a tool) needs to
//! watch one key travel through the book's diagram while it happens:
//!
//! | path | what | content type |
//! |---|---|---|
//! | `/trace?key=NAMESPACE/NAME[&controller=NAME][&timeoutSeconds=N]` | that key's hops, live, one JSON object per line ([`sample_client_go::keytrace::Hop::to_json`]) until the reader leaves (or `timeoutSeconds` pass, as a watch's) | `application/x-ndjson` |
//! | `/machinery[?key=NAMESPACE/NAME][&timeoutSeconds=N]` | a page drawing the diagram (API server → reflector → store → handlers → queue → workers → `sync_handler` → API server) with live counts on each box and the traced key's hops moving along it | `text/html` |
//! | `/machinery/counts` | the counts the page shows, as one JSON object ([`counts`]) | `application/json` |
//!
//! They are served wherever `/metrics` is and secured like it: with `--metrics-secure` every
//! path goes through the same TokenReview and SubjectAccessReview (a reader needs `get` on the
//! non-resource URL, `/trace` or `/machinery`, as it needs `get` on `/metrics`; see
//! [`crate::metrics_auth`]). `sample-controller trace` is a reader of `/trace`
//! ([`TraceReader`]); the page reads both endpoints from the browser with `fetch`, and needs
//! nothing else: plain HTML, SVG and a little JavaScript, no external asset, no build step.
//!
//! ## The stream
//!
//! The first line is a `{"stage":"subscribed",...}` object naming the key; then one line per
//! hop (see [`sample_client_go::keytrace`] for the stages and their fields); a
//! `{"stage":"heartbeat"}` line after [`HEARTBEAT`] without a hop (so a reader that went away
//! is noticed, and the reader knows the stream is alive); a `{"stage":"lost","count":N}` line
//! when the reader fell more than [`READER_BUFFER`](sample_client_go::keytrace::READER_BUFFER)
//! hops behind. The stream ends when the reader closes it or the manager stops.
//!
//! Bounded: at most [`MAX_READERS`](sample_client_go::keytrace::MAX_READERS) streams at once (one
//! more is answered 429), a key of at most [`MAX_KEY_LEN`] bytes (else 400), and each stream's
//! buffer is the tracer's. With no stream open the machinery records nothing (see the
//! tracer's "No cost when no one reads").

mod page;
mod reader;

pub use reader::{TraceReader, TraceReaderError, TraceReaderOptions};

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http::{Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use sample_client_go::keytrace::{KeyTracer, Subscription, TraceFilter};

/// The trace stream's path.
pub const TRACE_PATH: &str = "/trace";
/// The page's path.
pub const PAGE_PATH: &str = "/machinery";
/// The counts' path.
pub const COUNTS_PATH: &str = "/machinery/counts";
/// The longest key a trace request may name.
pub const MAX_KEY_LEN: usize = 512;
/// How long a trace stream stays silent before it sends a heartbeat line.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// The content type of the trace stream (JSON lines).
pub const NDJSON: &str = "application/x-ndjson";

/// A response body of the manager's small servers: a whole body, or a stream.
pub type ServeBody = UnsyncBoxBody<Bytes, Infallible>;

/// A whole body.
pub fn full(body: impl Into<Bytes>) -> ServeBody {
    Full::new(body.into()).boxed_unsync()
}

/// What the manager's counts function returns: see [`counts`].
pub type CountsFn = Arc<dyn Fn() -> Value + Send + Sync>;

/// What the metrics server needs to serve `/trace` and `/machinery`: the manager's tracer, its
/// counts, and the server's stop (which ends every open stream).
#[derive(Clone)]
pub struct Machinery {
    tracer: KeyTracer,
    counts: CountsFn,
    stop: CancellationToken,
}

impl std::fmt::Debug for Machinery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machinery")
            .field("tracer", &self.tracer)
            .finish_non_exhaustive()
    }
}

impl Machinery {
    /// The endpoints over `tracer` and `counts`; open streams end when `stop` is cancelled.
    pub fn new(tracer: KeyTracer, counts: CountsFn, stop: CancellationToken) -> Self {
        Machinery {
            tracer,
            counts,
            stop,
        }
    }

    /// The answer to `GET path?query`, or `None` when the path is not one of these.
    pub fn route(&self, path: &str, query: Option<&str>) -> Option<Response<ServeBody>> {
        match path {
            TRACE_PATH => Some(self.trace(query)),
            PAGE_PATH | "/machinery/" => Some(respond(
                StatusCode::OK,
                "text/html; charset=utf-8",
                full(page::PAGE),
            )),
            COUNTS_PATH => {
                let mut counts = (self.counts)();
                if let Some(o) = counts.as_object_mut() {
                    o.insert("readers".into(), json!(self.tracer.readers()));
                }
                Some(respond(
                    StatusCode::OK,
                    "application/json",
                    full(counts.to_string()),
                ))
            }
            _ => None,
        }
    }

    fn trace(&self, query: Option<&str>) -> Response<ServeBody> {
        let query = query.unwrap_or_default();
        let (filter, timeout) = match trace_filter(query).and_then(|f| Ok((f, timeout(query)?))) {
            Ok(f) => f,
            Err(message) => return plain(StatusCode::BAD_REQUEST, &message),
        };
        match self.tracer.subscribe(filter) {
            Ok(sub) => {
                // The stream ends with the server, or after `timeoutSeconds`.
                let stop = self.stop.child_token();
                if let Some(t) = timeout {
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            () = tokio::time::sleep(t) => stop.cancel(),
                            () = stop.cancelled() => {}
                        }
                    });
                }
                respond(StatusCode::OK, NDJSON, trace_body(sub, stop))
            }
            Err(e) => plain(StatusCode::TOO_MANY_REQUESTS, &e.to_string()),
        }
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: ServeBody) -> Response<ServeBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

fn plain(status: StatusCode, message: &str) -> Response<ServeBody> {
    respond(
        status,
        "text/plain; charset=utf-8",
        full(format!("{message}\n")),
    )
}

/// The reader's filter from `key=...&controller=...` (percent-decoded); an error names what is
/// wrong.
pub fn trace_filter(query: &str) -> Result<TraceFilter, String> {
    let mut key = None;
    let mut controller = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| {
            format!("query parameter {name:?} is not valid percent-encoded UTF-8")
        })?;
        match name {
            "key" => key = Some(value),
            "controller" => controller = Some(value).filter(|c| !c.is_empty()),
            _ => {}
        }
    }
    let key = key
        .filter(|k| !k.is_empty())
        .ok_or("a trace needs ?key=NAMESPACE/NAME (the work queue's key)")?;
    if key.len() > MAX_KEY_LEN {
        return Err(format!("key is {} bytes; at most {MAX_KEY_LEN}", key.len()));
    }
    Ok(TraceFilter {
        key: key.as_str().into(),
        controller,
    })
}

/// The longest `timeoutSeconds` a trace request may ask for.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;

/// `timeoutSeconds=N` of a trace request (as a watch's: the stream ends after that long), if
/// given.
fn timeout(query: &str) -> Result<Option<Duration>, String> {
    let Some(value) = query
        .split('&')
        .find_map(|p| p.strip_prefix("timeoutSeconds="))
    else {
        return Ok(None);
    };
    match value.parse::<u64>() {
        Ok(n) if (1..=MAX_TIMEOUT_SECONDS).contains(&n) => Ok(Some(Duration::from_secs(n))),
        _ => Err(format!(
            "timeoutSeconds={value:?}: expected a whole number of seconds, 1 to {MAX_TIMEOUT_SECONDS}"
        )),
    }
}

/// `%2F` → `/`, `+` → space; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// What a stream still has to say, and until when.
struct StreamState {
    sub: Subscription,
    stop: CancellationToken,
    hello: Option<Value>,
    lost: u64,
}

/// The trace stream's body: the hello line, then hops, heartbeats and lost counts, until the
/// reader leaves (the body is dropped, and the subscription with it) or `stop` is cancelled.
fn trace_body(sub: Subscription, stop: CancellationToken) -> ServeBody {
    let hello = json!({
        "stage": "subscribed",
        "key": sub.filter().key.as_str(),
        "controller": sub.filter().controller,
        "text": format!("following {} (live: hops appear as they happen)", sub.filter().key),
    });
    let state = StreamState {
        sub,
        stop,
        hello: Some(hello),
        lost: 0,
    };
    let lines = stream::unfold(state, |mut st| async move {
        if let Some(hello) = st.hello.take() {
            return Some((line(&hello), st));
        }
        let since = st.sub.since();
        let next = tokio::select! {
            biased;
            _ = st.stop.cancelled() => return None,
            hop = st.sub.next_in_order() => hop,
            _ = tokio::time::sleep(HEARTBEAT) => {
                let v = json!({"stage": "heartbeat"});
                return Some((line(&v), st));
            }
        };
        let hop = next?;
        let lost = st.sub.lost();
        let text = if lost > st.lost {
            let v = json!({"stage": "lost", "count": lost - st.lost,
                "text": format!("{} hops lost: this reader fell behind", lost - st.lost)});
            st.lost = lost;
            let mut both = line(&v);
            both.extend_from_slice(&line(&hop.to_json(since)));
            both
        } else {
            line(&hop.to_json(since))
        };
        Some((text, st))
    });
    StreamBody::new(futures_util::StreamExt::map(lines, |l| {
        Ok::<_, Infallible>(Frame::data(Bytes::from(l)))
    }))
    .boxed_unsync()
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// The counts the page shows, as the manager builds them: one entry per informer (`name`,
/// `events`: watch events received, `lists`, `cached`: objects in its store, `synced`), one
/// per controller (`name`, `queued`: waiting for a worker, `waiting`: for an `add_after` or a
/// backoff, `processing`: in flight, `syncs`, `errors`, `retries`: errors, panics and
/// timeouts, each a rate-limited retry), and the client's `writes` by HTTP method (`POST`,
/// `PUT`, `PATCH`, `DELETE`). `/machinery/counts` adds `readers`, the open trace streams.
pub fn counts(informers: Vec<Value>, controllers: Vec<Value>, writes: Value) -> Value {
    json!({
        "informers": informers,
        "controllers": controllers,
        "writes": writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_request_names_its_key_or_is_refused_saying_why() {
        let f = trace_filter("key=default%2Fexample-at&controller=at").unwrap();
        assert_eq!(f.key, "default/example-at");
        assert_eq!(f.controller.as_deref(), Some("at"));
        assert_eq!(
            trace_filter("key=ns/a&controller=").unwrap().controller,
            None
        );
        let e = trace_filter("controller=at").unwrap_err();
        assert!(e.contains("?key=NAMESPACE/NAME"), "{e}");
        let e = trace_filter(&format!("key={}", "a".repeat(MAX_KEY_LEN + 1))).unwrap_err();
        assert!(e.contains("at most 512"), "{e}");
        assert_eq!(
            timeout("key=a&timeoutSeconds=30"),
            Ok(Some(Duration::from_secs(30)))
        );
        assert_eq!(timeout("key=a"), Ok(None));
        let e = timeout("timeoutSeconds=0").unwrap_err();
        assert!(e.contains("1 to 86400"), "{e}");
        let e = trace_filter("key=%zz").unwrap_err();
        assert!(e.contains("percent-encoded"), "{e}");
        assert_eq!(percent_decode("a%20b+c").as_deref(), Some("a b c"));
        assert_eq!(percent_decode("%ff"), None, "not UTF-8");
    }

    #[tokio::test]
    async fn the_stream_says_hello_then_hops_and_ends_with_the_server() {
        use sample_client_go::keytrace::{Hop, Stage};
        let tracer = KeyTracer::new();
        let stop = CancellationToken::new();
        let m = Machinery::new(tracer.clone(), Arc::new(|| json!({})), stop.clone());
        let resp = m.route(TRACE_PATH, Some("key=ns/a")).unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], NDJSON);
        assert_eq!(tracer.readers(), 1);
        let mut body = resp.into_body();
        let hello = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&hello).contains(r#""stage":"subscribed""#));
        tracer.emit(Hop::new("ns/a", Some("at"), Stage::Queue, "add".into()));
        let hop = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let v: Value = serde_json::from_slice(&hop).unwrap();
        assert_eq!(
            (v["stage"].as_str(), v["text"].as_str()),
            (Some("queue"), Some("add"))
        );
        stop.cancel();
        assert!(
            body.frame().await.is_none(),
            "the stream ends with the server"
        );
        drop(body);
        assert_eq!(tracer.readers(), 0, "and the reader is gone");
        let bad = m.route(TRACE_PATH, None).unwrap();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }
}
