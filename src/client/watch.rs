//! Watch events: what a `?watch=true` stream carries.
//!
//! A watch is one long HTTP response. The server writes one JSON object per line,
//! `{"type":"ADDED","object":{...}}\n`, flushing each as it happens; the client reads lines as
//! they arrive. Types: `ADDED`, `MODIFIED`, `DELETED` (the object's last state), `BOOKMARK`
//! (only `metadata.resourceVersion` is meaningful: "you are up to date until here") and
//! `ERROR` (a `metav1.Status`, e.g. 410 Expired when the requested resourceVersion is older than
//! the server's history window).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Deserialize;

/// One decoded watch event.
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
#[derive(Deserialize)]
pub struct RawEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The object (or the Status for `ERROR`).
    pub object: serde_json::Value,
}

/// A typed watch stream: what [`crate::client::Api::watch`] returns and the reflector consumes.
/// It ends (`None`) when the server closes the response cleanly.
pub type WatchStream<K> = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = crate::client::Result<WatchEvent<K>>> + Send + 'static>,
>;
