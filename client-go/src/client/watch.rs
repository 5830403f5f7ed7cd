//! Watch events: what a `?watch=true` stream carries, and the decoder that reads it.
//!
//! ## Why watches stream
//!
//! A controller must see every change to the objects it manages, soon after it happens. Polling
//! (`list` every few seconds) costs a full list per poll and still misses the intermediate states.
//! Instead the client opens one long `GET ...?watch=true&resourceVersion=N` and the server keeps
//! the response open, writing one JSON object per line, `{"type":"ADDED","object":{...}}\n`,
//! flushing each as the change is committed. The client reads lines as they arrive. The server
//! ends the response cleanly after `timeoutSeconds`; the client (the reflector) then opens a new
//! watch from the last resourceVersion it saw, so nothing is lost and nothing repeats.
//!
//! ## What a resourceVersion is
//!
//! Every write to the API server's storage bumps one cluster-wide counter (etcd's revision); an
//! object's `metadata.resourceVersion` is the counter value of its last write, and a list's
//! `metadata.resourceVersion` is the counter value its snapshot was taken at. Clients must treat
//! it as an opaque string (compare for equality only), but it orders history: a watch "from N"
//! delivers every change after N. The server keeps a bounded window of history; asking for
//! something older yields `410 Gone` (reason `Expired`), and the client must list again.
//!
//! ## Event types
//!
//! `ADDED`, `MODIFIED`, `DELETED` (the object's last state), `BOOKMARK` (only
//! `metadata.resourceVersion` is meaningful: "you are up to date until here"; with
//! `sendInitialEvents` one bookmark carries the `k8s.io/initial-events-end` annotation) and
//! `ERROR` (a `metav1.Status`, e.g. 410 Expired when the requested resourceVersion is older than
//! the server's history window). Any other type is a decode error, never a panic.
//!
//! ## Decoding
//!
//! [`WatchDecoder`] is a pure, push-style decoder: bytes in (cut anywhere), events out. It never
//! buffers more than one bounded line ([`DEFAULT_MAX_LINE`], 16 MiB). [`decode_stream`] drives it
//! from a response body and is what [`crate::client::Api::watch`] returns. client-go's JSON
//! framer reads whole JSON values rather than lines; the API server always writes one event per
//! line, so splitting on `\n` reads the same wire format with a simpler bound on memory.
//!
//! A line is decoded in one pass when it has the form every API server writes (Go's encoding
//! of `metav1.WatchEvent`: `{"type":"ADDED","object":` … `}`): the text between that prefix and
//! the last brace is decoded as the object, and the decoder accepting it as one complete value
//! proves the line was that envelope. Any other line (members in another order, spaces, a
//! `BOOKMARK` or `ERROR`, an object that does not decode) is read envelope first, the object
//! kept as its text (`RawValue`) and decoded from it, which names what was wrong. The envelope
//! pass scans the whole object once more, and was a third of a manager's decoding.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Deserialize;

/// One decoded watch event.
// ERROR events are rare and short-lived; keeping `Status` unboxed keeps matching simple.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<K> {
    /// The object appeared (or the watch started and this is part of the current state).
    Added(K),
    /// The object changed.
    Modified(K),
    /// The object is gone; this is its last state.
    Deleted(K),
    /// Progress marker: everything up to this resourceVersion has been sent.
    Bookmark(Bookmark),
    /// The server reported an error inside the stream.
    Error(Status),
}

/// The payload of a BOOKMARK event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bookmark {
    /// The resourceVersion the stream has reached.
    pub resource_version: String,
    /// `metadata.annotations["k8s.io/initial-events-end"] == "true"`: the end of the initial
    /// state of a streaming list (`sendInitialEvents=true`).
    pub initial_events_end: bool,
}

/// The annotation that marks the bookmark ending a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// The raw envelope of one line, before the object is typed.
///
/// The object stays the line's own text (a borrowed [`RawValue`](serde_json::value::RawValue))
/// and is decoded once, straight into `K`, with the same slice decoder a LIST uses. Going
/// through a `serde_json::Value` tree first would build and free one tree per event, and
/// compile every kind's decoder twice (once for bytes, once for `Value`).
#[derive(Deserialize)]
pub struct RawEvent<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    #[serde(rename = "type", borrow)]
    pub type_: std::borrow::Cow<'a, str>,
    /// The object (or the Status for `ERROR`), as it appeared on the line.
    #[serde(borrow)]
    pub object: &'a serde_json::value::RawValue,
}

/// A typed watch stream: what [`crate::client::Api::watch`] returns and the reflector consumes.
/// It ends (`None`) when the server closes the response cleanly.
pub type WatchStream<K> = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = crate::client::Result<WatchEvent<K>>> + Send + 'static>,
>;

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

/// Default bound on one watch line: 16 MiB, comfortably above the API server's 3 MiB object limit
/// (etcd's 1.5 MiB request limit plus JSON overhead), far below "unbounded".
pub const DEFAULT_MAX_LINE: usize = 16 * 1024 * 1024;

/// A push-style decoder for newline-delimited watch JSON.
///
/// Feed it the body's chunks in order with [`WatchDecoder::push`]; each call returns the events
/// completed by that chunk, in order. The chunk boundaries are arbitrary — a chunk may hold half a
/// line, many lines, or a single byte — and the decoder's output depends only on the
/// concatenated bytes, never on how they were cut (a property test checks exactly this).
///
/// Invariants:
/// * at most `max_line` bytes of an unfinished line are buffered; a longer line yields one
///   [`Error::LineTooLong`] and is skipped up to its newline, so memory stays bounded;
/// * blank lines (keep-alives) are ignored, a trailing `\r` is tolerated;
/// * a line that does not decode yields one `Err` and decoding resumes at the next line (the
///   stream built on top stops at the first error, as client-go's `StreamWatcher` does).
///
/// [`Error::LineTooLong`]: crate::client::Error::LineTooLong
#[derive(Debug)]
pub struct WatchDecoder<K> {
    buf: Vec<u8>,
    max_line: usize,
    /// Inside a line that already exceeded the bound: drop bytes until the next newline.
    discarding: bool,
    /// Cut `metadata.managedFields` from each object before decoding it
    /// ([`super::skip_managed_fields`]).
    skip_managed_fields: bool,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Default for WatchDecoder<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> WatchDecoder<K> {
    /// A decoder with the default 16 MiB line bound.
    pub fn new() -> Self {
        Self::with_max_line(DEFAULT_MAX_LINE)
    }

    /// A decoder with a custom line bound (bytes, excluding the newline).
    pub fn with_max_line(max_line: usize) -> Self {
        WatchDecoder {
            buf: Vec::new(),
            max_line,
            discarding: false,
            skip_managed_fields: false,
            _kind: std::marker::PhantomData,
        }
    }

    /// This decoder, cutting `metadata.managedFields` out of each object's text before
    /// decoding it: the objects come out as if decoded whole and then cleared of the field
    /// ([`super::skip_managed_fields`]).
    pub fn skipping_managed_fields(mut self) -> Self {
        self.skip_managed_fields = true;
        self
    }

    /// Bytes of an unfinished line currently held.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

impl<K: serde::de::DeserializeOwned> WatchDecoder<K> {
    /// Feeds one chunk; returns every event the chunk completed, in order.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<crate::client::Result<WatchEvent<K>>> {
        let mut out = Vec::new();
        while !chunk.is_empty() {
            match memchr::memchr(b'\n', chunk) {
                Some(nl) => {
                    let (part, rest) = chunk.split_at(nl);
                    chunk = &rest[1..];
                    if self.discarding {
                        self.discarding = false;
                        continue;
                    }
                    if self.buf.len() + part.len() > self.max_line {
                        self.buf.clear();
                        out.push(Err(crate::client::Error::LineTooLong {
                            limit: self.max_line,
                        }));
                        continue;
                    }
                    let ev = if self.buf.is_empty() {
                        decode_line(part, self.skip_managed_fields)
                    } else {
                        self.buf.extend_from_slice(part);
                        let line = std::mem::take(&mut self.buf);
                        decode_line(&line, self.skip_managed_fields)
                    };
                    if let Some(ev) = ev {
                        out.push(ev);
                    }
                }
                None => {
                    if !self.discarding {
                        if self.buf.len() + chunk.len() > self.max_line {
                            self.buf.clear();
                            self.discarding = true;
                            out.push(Err(crate::client::Error::LineTooLong {
                                limit: self.max_line,
                            }));
                        } else {
                            self.buf.extend_from_slice(chunk);
                        }
                    }
                    chunk = &[];
                }
            }
        }
        out
    }

    /// The body ended: decodes a final line that had no newline. `None` when nothing but
    /// whitespace was left. A server always ends events with `\n`, so leftovers usually mean the
    /// connection was cut mid-event; the result then is a decode error the caller may log.
    pub fn finish(&mut self) -> Option<crate::client::Result<WatchEvent<K>>> {
        self.discarding = false;
        let line = std::mem::take(&mut self.buf);
        decode_line(&line, self.skip_managed_fields)
    }
}

/// Decodes one line; `None` for a blank line.
fn decode_line<K: serde::de::DeserializeOwned>(
    line: &[u8],
    skip_managed_fields: bool,
) -> Option<crate::client::Result<WatchEvent<K>>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    Some(decode_event_with(line, skip_managed_fields))
}

/// Decodes one complete watch event envelope.
pub fn decode_event<K: serde::de::DeserializeOwned>(
    line: &[u8],
) -> crate::client::Result<WatchEvent<K>> {
    decode_event_with(line, false)
}

/// [`decode_event`], with `metadata.managedFields` cut from the object's text first when
/// `skip_managed_fields` ([`super::skip_managed_fields`]).
pub fn decode_event_with<K: serde::de::DeserializeOwned>(
    line: &[u8],
    skip_managed_fields: bool,
) -> crate::client::Result<WatchEvent<K>> {
    use crate::client::Error;
    if let Some(event) = decode_as_written(line, skip_managed_fields) {
        return Ok(event);
    }
    let raw: RawEvent = serde_json::from_slice(line).map_err(|source| Error::Decode {
        what: "watch event envelope".into(),
        source,
    })?;
    let typed = |what: &'static str, v: &serde_json::value::RawValue| {
        let text = v.get().as_bytes();
        let decoded = if skip_managed_fields {
            super::skip_managed_fields::decode(text, |t| serde_json::from_slice::<K>(t))
        } else {
            serde_json::from_slice::<K>(text)
        };
        decoded.map_err(|source| {
            // An object with a name is named, and the stream goes on past it; text that is
            // not an object at all is a broken stream.
            match super::UndecodableObject::from_text(text, "object", &source) {
                Some(object) => Error::UndecodableObject {
                    event: what,
                    object: Box::new(object),
                },
                None => Error::Decode {
                    what: format!("object of {what} watch event"),
                    source,
                },
            }
        })
    };
    match &*raw.type_ {
        "ADDED" => typed("ADDED", raw.object).map(WatchEvent::Added),
        "MODIFIED" => typed("MODIFIED", raw.object).map(WatchEvent::Modified),
        "DELETED" => typed("DELETED", raw.object).map(WatchEvent::Deleted),
        "BOOKMARK" => decode_bookmark(raw.object).map(WatchEvent::Bookmark),
        "ERROR" => serde_json::from_slice::<Status>(raw.object.get().as_bytes())
            .map(WatchEvent::Error)
            .map_err(|source| Error::Decode {
                what: "Status of ERROR watch event".into(),
                source,
            }),
        other => Err(Error::Other(format!(
            "unknown watch event type {:?} (expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR)",
            truncate(other, 64)
        ))),
    }
}

/// The event types whose object is the watched kind, and the envelope's text before the
/// object as kube-apiserver writes it (Go's encoding of `metav1.WatchEvent`: `type`, then
/// `object`, no spaces).
const WRITTEN_PREFIXES: [(&[u8], WrittenType); 3] = [
    (b"{\"type\":\"ADDED\",\"object\":", WrittenType::Added),
    (b"{\"type\":\"MODIFIED\",\"object\":", WrittenType::Modified),
    (b"{\"type\":\"DELETED\",\"object\":", WrittenType::Deleted),
];

#[derive(Clone, Copy)]
enum WrittenType {
    Added,
    Modified,
    Deleted,
}

/// The one-pass decode of a line as API servers write it (the module doc, "Decoding"): the
/// text between a [`WRITTEN_PREFIXES`] prefix and the last brace, decoded as `K`. `None` for
/// any other line, which [`decode_event_with`] then reads envelope first.
fn decode_as_written<K: serde::de::DeserializeOwned>(
    line: &[u8],
    skip_managed_fields: bool,
) -> Option<WatchEvent<K>> {
    let (prefix, kind) = WRITTEN_PREFIXES
        .iter()
        .find(|(prefix, _)| line.starts_with(prefix))?;
    let text = line.get(prefix.len()..)?.strip_suffix(b"}")?;
    let cut = skip_managed_fields
        .then(|| super::skip_managed_fields::without_managed_fields(text))
        .flatten();
    let object = serde_json::from_slice::<K>(cut.as_deref().unwrap_or(text)).ok()?;
    Some(match kind {
        WrittenType::Added => WatchEvent::Added(object),
        WrittenType::Modified => WatchEvent::Modified(object),
        WrittenType::Deleted => WatchEvent::Deleted(object),
    })
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A bookmark's object is the watched kind with only `metadata.resourceVersion` (and maybe the
/// initial-events-end annotation) set; it is read without typing it as `K`, because required
/// fields of `K` are absent.
fn decode_bookmark(object: &serde_json::value::RawValue) -> crate::client::Result<Bookmark> {
    let object: serde_json::Value =
        serde_json::from_str(object.get()).map_err(|source| crate::client::Error::Decode {
            what: "object of BOOKMARK watch event".into(),
            source,
        })?;
    let meta = object.get("metadata");
    let rv = meta
        .and_then(|m| m.get("resourceVersion"))
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            crate::client::Error::Other(
                "BOOKMARK watch event without a string metadata.resourceVersion".into(),
            )
        })?;
    let initial_events_end = meta
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(INITIAL_EVENTS_END_ANNOTATION))
        .and_then(|v| v.as_str())
        == Some("true");
    Ok(Bookmark {
        resource_version: rv.to_owned(),
        initial_events_end,
    })
}

/// Turns a byte-chunk stream (a response body) into a [`WatchStream`].
///
/// The stream yields events as lines complete, yields the first error and then ends (client-go's
/// `StreamWatcher` closes after a decode error too), and ends quietly when the body ends. The
/// exception is an object that does not decode as `K` but has a name: it is yielded as
/// [`Error::UndecodableObject`](crate::client::Error::UndecodableObject) and the stream goes on
/// (see [`super::undecodable`]). A
/// truncated final line (the connection was cut mid-event) is logged at debug and dropped, as
/// client-go treats an unexpected EOF.
pub fn decode_stream<K, S, E>(body: S, max_line: usize) -> WatchStream<K>
where
    K: serde::de::DeserializeOwned + Send + 'static,
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    E: std::error::Error + 'static,
{
    decode_stream_with(body, WatchDecoder::with_max_line(max_line))
}

/// [`decode_stream`] with a decoder of the caller's (one that skips `managedFields`, say).
pub fn decode_stream_with<K, S, E>(body: S, decoder: WatchDecoder<K>) -> WatchStream<K>
where
    K: serde::de::DeserializeOwned + Send + 'static,
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    E: std::error::Error + 'static,
{
    use futures_util::StreamExt;
    use std::collections::VecDeque;

    struct State<K, S> {
        body: std::pin::Pin<Box<S>>,
        decoder: WatchDecoder<K>,
        pending: VecDeque<crate::client::Result<WatchEvent<K>>>,
        done: bool,
    }
    let state = State {
        body: Box::pin(body),
        decoder,
        pending: VecDeque::new(),
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                // An object that does not decode is named and passed over; any other error
                // ends the stream.
                if ev
                    .as_ref()
                    .is_err_and(|e| !matches!(e, crate::client::Error::UndecodableObject { .. }))
                {
                    st.pending.clear();
                    st.done = true;
                }
                return Some((ev, st));
            }
            if st.done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.pending.extend(st.decoder.push(&chunk)),
                Some(Err(e)) => {
                    st.done = true;
                    return Some((
                        Err(crate::client::Error::transport("reading watch stream", &e)),
                        st,
                    ));
                }
                None => {
                    st.done = true;
                    match st.decoder.finish() {
                        Some(Ok(ev)) => return Some((Ok(ev), st)),
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "watch stream ended inside an event; dropping the partial line");
                            return None;
                        }
                        None => return None,
                    }
                }
            }
        }
    });
    stream.boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm_line(t: &str, name: &str, rv: &str) -> String {
        format!(
            "{{\"type\":\"{t}\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\"resourceVersion\":\"{rv}\"}}}}}}\n"
        )
    }

    /// The envelope borrows the line; escaped text (JSON allows `\u0041` for `A` anywhere) must
    /// still decode, in the type and inside the object.
    #[test]
    fn escaped_text_in_the_envelope_and_the_object_decodes() {
        let line = br#"{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"caf\u00e9","resourceVersion":"4"},"data":{"k":"a\"b\nc"}},"type":"MODIFI\u0045D"}"#;
        match decode_event::<ConfigMap>(line) {
            Ok(WatchEvent::Modified(cm)) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("caf\u{e9}"));
                assert_eq!(
                    cm.data.unwrap_or_default().get("k").map(String::as_str),
                    Some("a\"b\nc")
                );
            }
            other => panic!("expected MODIFIED, got {other:?}"),
        }
        // An object that is not an object of the kind is an error naming the event type.
        let bad = br#"{"type":"ADDED","object":["not","a","configmap"]}"#;
        match decode_event::<ConfigMap>(bad) {
            Err(e) => assert!(e.to_string().contains("ADDED"), "{e}"),
            Ok(ev) => panic!("decoded {ev:?}"),
        }
    }

    /// Lines in kube-apiserver's form take the one-pass decode; lines that only look like it
    /// (something after the object, a broken object, a bad object) take the general path and
    /// get its answer, and every form of the same event decodes to the same object.
    #[test]
    fn lines_as_servers_write_them_decode_in_one_pass_and_near_misses_as_before() {
        let written = cm_line("MODIFIED", "a", "7");
        let written = written.trim_end().as_bytes();
        assert!(decode_as_written::<ConfigMap>(written, false).is_some());
        let expected = decode_event::<ConfigMap>(written).unwrap();
        let reordered = br#"{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7"}},"type":"MODIFIED"}"#;
        let spaced = br#"{"type":"MODIFIED", "object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7"}}}"#;
        for line in [&reordered[..], &spaced[..]] {
            assert!(decode_as_written::<ConfigMap>(line, false).is_none());
            assert_eq!(decode_event::<ConfigMap>(line).unwrap(), expected);
        }
        // A member after the object: not one value before the last brace, so the general
        // path reads the envelope (an unknown member is ignored there, as by client-go).
        let extra = br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7"}},"x":{"y":1}}"#;
        assert!(decode_as_written::<ConfigMap>(extra, false).is_none());
        assert_eq!(decode_event::<ConfigMap>(extra).unwrap(), expected);
        // Two objects run together, and a truncated one: errors, not a decoded half.
        let doubled =
            br#"{"type":"ADDED","object":{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}}"#;
        let truncated = br#"{"type":"ADDED","object":{"metadata":{"name":"a"}"#;
        for line in [&doubled[..], &truncated[..]] {
            assert!(decode_as_written::<ConfigMap>(line, false).is_none());
            assert!(decode_event::<ConfigMap>(line).is_err());
        }
        // An object of the wrong shape with a name is still named.
        let bad =
            br#"{"type":"ADDED","object":{"metadata":{"name":"c","namespace":"ns"},"data":7}}"#;
        match decode_event::<ConfigMap>(bad) {
            Err(e) => assert!(e.to_string().contains("ns/c"), "{e}"),
            Ok(ev) => panic!("decoded {ev:?}"),
        }
        // managedFields are cut on the one-pass path too.
        let managed = br#"{"type":"ADDED","object":{"metadata":{"name":"d","managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}]}}}"#;
        match decode_as_written::<ConfigMap>(managed, true) {
            Some(WatchEvent::Added(cm)) => assert_eq!(cm.metadata.managed_fields, None),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }

    #[test]
    fn decodes_all_event_types_across_split_chunks() {
        let mut body = String::new();
        body += &cm_line("ADDED", "a", "1");
        body += &cm_line("MODIFIED", "a", "2");
        body += "\n";
        body += &cm_line("DELETED", "a", "3");
        body += r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        body += "\r\n";
        body += r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (9)","reason":"Expired","code":410}}"#;
        body += "\n";
        let mut d = WatchDecoder::<ConfigMap>::new();
        let bytes = body.as_bytes();
        let mut evs = d.push(&bytes[..17]);
        evs.extend(d.push(&bytes[17..]));
        assert!(d.finish().is_none());
        let evs: Vec<_> = evs.into_iter().map(|e| e.unwrap()).collect();
        assert_eq!(evs.len(), 5);
        assert!(matches!(&evs[0], WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("a")));
        assert!(matches!(&evs[1], WatchEvent::Modified(_)));
        assert!(
            matches!(&evs[2], WatchEvent::Deleted(c) if c.metadata.resource_version.as_deref() == Some("3"))
        );
        assert_eq!(
            evs[3],
            WatchEvent::Bookmark(Bookmark {
                resource_version: "9".into(),
                initial_events_end: true
            })
        );
        match &evs[4] {
            WatchEvent::Error(s) => {
                let e = crate::client::Error::from_status(s.clone());
                assert!(e.is_gone());
            }
            other => panic!("expected ERROR, got {other:?}"),
        }
    }

    #[test]
    fn unknown_type_is_an_error_and_decoding_resumes() {
        let mut d = WatchDecoder::<ConfigMap>::new();
        let body = format!(
            "{{\"type\":\"EXPLODED\",\"object\":{{}}}}\n{}",
            cm_line("ADDED", "b", "4")
        );
        let evs = d.push(body.as_bytes());
        assert_eq!(evs.len(), 2);
        let err = evs[0].as_ref().unwrap_err().to_string();
        assert!(err.contains("EXPLODED"), "{err}");
        assert!(evs[1].is_ok());
    }

    #[test]
    fn overlong_line_is_bounded_and_skipped() {
        let mut d = WatchDecoder::<ConfigMap>::with_max_line(100);
        let mut evs = Vec::new();
        for _ in 0..100 {
            evs.extend(d.push(&[b'x'; 10]));
            assert!(d.buffered() <= 100);
        }
        evs.extend(d.push(b"\n"));
        evs.extend(d.push(br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}"#));
        evs.extend(d.finish());
        assert_eq!(evs.len(), 2);
        assert!(matches!(
            evs[0],
            Err(crate::client::Error::LineTooLong { limit: 100 })
        ));
        assert!(matches!(&evs[1], Ok(WatchEvent::Bookmark(b)) if b.resource_version == "5"));
    }

    #[test]
    fn bookmark_without_rv_and_garbage_are_errors_not_panics() {
        let mut d = WatchDecoder::<ConfigMap>::new();
        let evs = d.push(b"{\"type\":\"BOOKMARK\",\"object\":{}}\nnot json\n{\"type\":\"ADDED\",\"object\":{\"metadata\":7}}\n");
        assert_eq!(evs.len(), 3);
        assert!(evs.iter().all(|e| e.is_err()));
    }

    #[tokio::test]
    async fn stream_ends_after_first_error_and_on_clean_eof() {
        use futures_util::StreamExt;
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok(bytes::Bytes::from(cm_line("ADDED", "a", "1"))),
            Ok(bytes::Bytes::from_static(
                b"{\"type\":\"WAT\",\"object\":{}}\n",
            )),
            Ok(bytes::Bytes::from(cm_line("ADDED", "b", "2"))),
        ];
        let s = decode_stream::<ConfigMap, _, _>(futures_util::stream::iter(chunks), 1024);
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 2);
        assert!(got[0].is_ok() && got[1].is_err());

        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok(bytes::Bytes::from(cm_line("ADDED", "a", "1"))),
            Ok(bytes::Bytes::from_static(b"{\"type\":\"ADD")),
        ];
        let s = decode_stream::<ConfigMap, _, _>(futures_util::stream::iter(chunks), 1024);
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 1, "a truncated final line is dropped quietly");
    }

    #[tokio::test]
    async fn an_object_that_does_not_decode_is_named_and_the_stream_goes_on() {
        use futures_util::StreamExt;
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = vec![
            Ok(bytes::Bytes::from(cm_line("ADDED", "a", "1"))),
            Ok(bytes::Bytes::from_static(
                b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"bad\",\"namespace\":\"ns\",\"resourceVersion\":\"2\"},\"data\":{\"k\":[1]}}}\n",
            )),
            Ok(bytes::Bytes::from(cm_line("ADDED", "b", "3"))),
        ];
        let s = decode_stream::<ConfigMap, _, _>(futures_util::stream::iter(chunks), 1024);
        let got: Vec<_> = s.collect().await;
        assert_eq!(got.len(), 3);
        assert!(got[0].is_ok() && got[2].is_ok());
        match &got[1] {
            Err(crate::client::Error::UndecodableObject { event, object }) => {
                assert_eq!(*event, "MODIFIED");
                assert_eq!(object.key(), "ns/bad");
                assert_eq!(object.resource_version.as_deref(), Some("2"));
                assert!(object.error.contains("invalid type"), "{}", object.error);
            }
            other => panic!("expected an undecodable object, got {other:?}"),
        }
    }
}
