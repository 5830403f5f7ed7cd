//! Watch: a long-running GET that streams every change after a resourceVersion.
//!
//! ## The protocol
//!
//! `GET /api/v1/namespaces/default/pods?watch=true&resourceVersion=1200` answers `200 OK` at
//! once with a chunked `application/json` body, then writes one JSON object per line, each a
//! `WatchEvent`:
//!
//! ```text
//! {"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1201",...}}}
//! {"type":"MODIFIED","object":{...}}
//! {"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1250"}}}
//! ```
//!
//! Where the stream starts depends on `resourceVersion` (see the API concepts page):
//!
//! | `resourceVersion` | first events |
//! |---|---|
//! | unset or `"0"` | a synthetic `ADDED` for every object that exists now, then live changes |
//! | `"N"` | every change with a revision above N (from the history window), then live changes |
//!
//! A reflector lists, remembers the list's resourceVersion, and watches from it: nothing is
//! missed between the list and the watch, because the history holds the changes in between.
//!
//! ## The history window and 410
//!
//! History is finite (see [`crate::storage::store`]). A watch from a revision that has been compacted
//! away still gets `200 OK` — by then the server has committed to streaming — followed by one
//! `ERROR` event carrying a `410 Expired` Status (`too old resource version: 5 (1200)`), and the
//! stream ends. client-go's reflector reacts by listing again. A revision *newer* than the
//! server's gets, after up to three seconds of waiting for it, an `ERROR` with a 504
//! `ResourceVersionTooLarge` Status.
//!
//! ## Selectors and transitions
//!
//! With a label or field selector the watcher sees a filtered world, and objects move in and
//! out of it: an update that makes an object match is delivered as `ADDED`, one that makes it
//! stop matching as `DELETED` (with its last matching content and the new revision), and
//! changes on the far side of the selector are not delivered at all.
//!
//! ## Bookmarks, timeouts, streaming lists
//!
//! With `allowWatchBookmarks=true` the server sends a `BOOKMARK` carrying only the current
//! revision every bookmark interval (60 s by default, configurable), and one right before it
//! closes the stream at `timeoutSeconds` (default: a random 30–60 minutes), so a client can
//! resume from a fresh revision even when its objects did not change. With
//! `sendInitialEvents=true&resourceVersionMatch=NotOlderThan` (client-go's "watch list"), the
//! synthetic `ADDED` events are followed by a bookmark annotated
//! `k8s.io/initial-events-end: "true"`, which tells the client its initial list is complete.
//!
//! Each watch is a stream owned by its HTTP response: when the client disconnects, hyper drops
//! the body and the watch ends with it; when the server shuts down, every watch ends cleanly.
//!
//! ## Watchers that do not read
//!
//! A watch here has no channel of its own: its stream reads the shared history when the
//! connection asks for the next frame, so a client that stops reading holds up nobody and costs
//! what its socket buffers hold. It takes at most [`CATCH_UP_CHANGES`] changes or
//! [`CATCH_UP_BYTES`] of events from the history at a time, so a watch that fell far behind
//! catches up in steps instead of queueing its whole lag. kube-apiserver's cacher gives each
//! watcher a channel of 10 to 1,000 events; when it stays full for the dispatcher's budget
//! (about 100 ms) it logs "Forcing watcher close due to unresponsiveness", counts
//! `apiserver_terminated_watchers_total{group,resource}` and ends the watch with no ERROR
//! event; the client watches again from the last revision it got. This server does the same
//! when the connection takes the next frame [`Unresponsive::after`] (5 s) or more after it was
//! handed the last one while [`Unresponsive::backlog`] (1,000) or more events wait: the client
//! reads what its buffers held, then the end of the stream. A client that never reads again
//! holds only its connection and what the socket buffers hold, as with Go's server, whose
//! handler returns while the write of its last bytes waits for the client.
//! [`ApiServerBuilder::watch_unresponsive`](crate::ApiServerBuilder::watch_unresponsive)
//! changes both figures.
//!
//! ## How events become writes
//!
//! The real server writes each event into the response and flushes only when no further event
//! is waiting (`if len(ch) == 0 { flusher.Flush() }` in the apiserver's watch handler); until
//! then Go's HTTP/2 response writer buffers the bytes and sends them in 4 KiB DATA frames. So
//! a quiet watch gets one frame per event, and a busy one (a burst of thousands of pod
//! changes) gets its events packed several to a frame. This server does the same: the events
//! already waiting when the body is polled are joined into one frame of up to
//! [`WATCH_WRITE_CHUNK`] bytes (an event larger than that goes alone, whole). A client must
//! split lines across and within frames anyway; one frame per event under load would cost it
//! a buffered frame (and its bookkeeping) per event instead of per 4 KiB.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::watch as tokio_watch;
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use crate::api::query::ListOptions;
use crate::api::status::ApiError;
use crate::registry::Store;
use crate::registry::generic::{Selection, Target};
use crate::registry::resources::ResourceDef;
use crate::registry::resources::View;
use crate::registry::strategy::present;
use crate::storage::store::{Change, ChangeType, Stored};

/// How long a watch or a list from a future revision waits for it before the 504 (an ERROR
/// event for a watch): the watch cache's `blockTimeout`
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`), whose 504 carries
/// `retryAfterSeconds: 1` (`resourceVersionTooHighRetrySeconds`).
pub const TOO_LARGE_WAIT: Duration = Duration::from_secs(3);

/// The most bytes of waiting events joined into one write (Go's HTTP/2 response writer
/// buffers 4 KiB, `handlerChunkWriteSize`); see the module doc, "How events become writes".
pub const WATCH_WRITE_CHUNK: usize = 4 * 1024;

/// The most history changes one look at the history turns into events for a watch, and the
/// most bytes of events it queues: a watch that has fallen behind catches up in steps, so what
/// it holds at once is bounded whatever its lag (the cacher's per-watcher channel, whose size
/// `suggestedWatchChannelSize` caps at 1,000 events).
pub const CATCH_UP_CHANGES: usize = 256;

/// See [`CATCH_UP_CHANGES`].
pub const CATCH_UP_BYTES: usize = 1 << 20;

/// When a watch is closed as unresponsive (see the module doc, "Watchers that do not read").
#[derive(Clone, Copy, Debug)]
pub struct Unresponsive {
    /// How long the client may leave the last frame it was handed untaken...
    pub after: Duration,
    /// ... while at least this many events wait for it.
    pub backlog: usize,
}

impl Default for Unresponsive {
    /// Five seconds and 1,000 events: the largest channel the cacher gives a watcher, and far
    /// more patience than its dispatch budget (about 100 ms), since here a slow watcher holds
    /// nobody else up.
    fn default() -> Self {
        Unresponsive {
            after: Duration::from_secs(5),
            backlog: 1000,
        }
    }
}

/// Turns a served object into what goes on the wire (a Table row, for `kubectl get -w`).
pub type Renderer = Arc<dyn Fn(&Value, bool) -> Value + Send + Sync>;

/// Converts a stored object to the watched version (a CRD's conversion webhook,
/// [`crate::apiextensions::conversion`]) in a task of its own (the response body must be `Sync`, a webhook
/// call is not); an error ends the watch.
pub type Converter =
    Arc<dyn Fn(Value) -> tokio::task::JoinHandle<Result<Value, ApiError>> + Send + Sync>;

/// An event line, or an event whose object must first be converted.
enum Pending {
    Ready(Bytes),
    Convert(&'static str, Value),
}

/// Settings of one watch that come from the server rather than the request.
#[derive(Clone)]
pub struct WatchSettings {
    /// Interval between periodic bookmarks.
    pub bookmark_interval: Duration,
    /// Refuse `sendInitialEvents` (as a server with the WatchList feature off does).
    pub reject_send_initial_events: bool,
    /// Ends every watch when cancelled (server shutdown).
    pub shutdown: CancellationToken,
    /// Optional rendering of event objects (Tables, `PartialObjectMetadata`).
    pub renderer: Option<Renderer>,
    /// `kind` and `apiVersion` of bookmark objects when they are not the resource's own
    /// (`PartialObjectMetadata`, [`crate::endpoints::partial`]).
    pub bookmark_type: Option<(String, String)>,
    /// Conversion of objects stored in another version than the watched one.
    pub converter: Option<Converter>,
    /// When a client that stopped reading has its watch closed.
    pub unresponsive: Unresponsive,
}

enum Start {
    /// Stream changes after this revision.
    From(u64),
    /// The revision was compacted away: send a 410 ERROR and stop.
    Expired(u64, u64),
    /// The revision is in the future: wait for it, then stream, or send a 504 ERROR.
    Future(u64),
}

struct WatchState {
    store: Arc<Store>,
    def: Arc<ResourceDef>,
    namespace: Option<String>,
    selection: Selection,
    allow_bookmarks: bool,
    pending: VecDeque<Pending>,
    last_rv: u64,
    rx: tokio_watch::Receiver<u64>,
    ticker: Interval,
    deadline: Instant,
    waiting_for: Option<(u64, Instant)>,
    shutdown: CancellationToken,
    renderer: Option<Renderer>,
    /// See [`WatchSettings::bookmark_type`].
    bookmark_type: Option<(String, String)>,
    converter: Option<Converter>,
    rendered_once: bool,
    done: bool,
    /// `apiVersion/kind` this watch serves (the tag of a shared encoding it may reuse).
    served_as: String,
    /// The last look at the history stopped short of its end (see [`CATCH_UP_CHANGES`]).
    behind: bool,
    /// When the last frame was handed to the connection (cleared when it asks for the next).
    handed_at: Option<Instant>,
    unresponsive: Unresponsive,
}

/// One event line, `{"type":TYPE,"object":OBJECT}\n`, from the object's JSON bytes: written
/// around them, so an object encoded once ([`crate::storage::store::SharedEncoding`]) is copied, not
/// re-encoded, into every watch's stream.
/// Whether an object's compact JSON holds a folded field set: a `"fieldsV1"` key whose value
/// is a string ([`crate::api::folded`]).
fn holds_folded_set(json: &[u8]) -> bool {
    const KEY: &[u8] = b"\"fieldsV1\":\"";
    json.windows(KEY.len()).any(|w| w == KEY)
}

fn frame_bytes(ty: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + ty.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(ty.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// [`frame_bytes`] of an object in the byte layout of `def`'s answers ([`crate::api::json_order`]).
fn frame(ty: &str, def: &ResourceDef, object: &Value) -> Bytes {
    let ordered = def.ordered(object);
    frame_bytes(ty, &serde_json::to_vec(&ordered).unwrap_or_default())
}

impl WatchState {
    /// [`Self::in_scope`] of a stored object, without keeping a tree it does not hold: without
    /// selectors only the namespace counts, read from the object's bytes; with selectors a
    /// rested object is decoded for the check alone ([`Stored::with_value`]).
    fn sees(&self, obj: &Stored) -> bool {
        if obj.is_decoded() || !self.selection.is_everything() {
            return obj.with_value(|o| self.in_scope(o));
        }
        match (&self.namespace, self.def.namespaced) {
            (Some(ns), true) => obj.key().0 == *ns,
            _ => true,
        }
    }

    fn in_scope(&self, obj: &Value) -> bool {
        let ns_ok = match (&self.namespace, self.def.namespaced) {
            (Some(ns), true) => obj["metadata"]["namespace"].as_str() == Some(ns.as_str()),
            _ => true,
        };
        ns_ok && self.selection.matches(obj)
    }

    /// Queues the events the watch opens with: the initial ADDED events (and the bookmark that
    /// ends them, when asked), the "too old" error, or nothing yet for a version still to come.
    fn queue_start(
        &mut self,
        start: Start,
        initial: &[Arc<Stored>],
        send_initial: bool,
        opts: &ListOptions,
    ) {
        match start {
            Start::From(n) => {
                self.last_rv = n;
                for obj in initial {
                    if self.sees(obj) {
                        self.push_stored("ADDED", obj);
                    }
                }
                if send_initial && opts.send_initial_events == Some(true) && opts.allow_bookmarks {
                    self.push_bookmark(true);
                }
                // Changes that landed between the snapshot and now are picked up by catch_up.
                self.catch_up();
            }
            Start::Expired(n, compacted) => {
                self.push_error(&ApiError::expired(format!(
                    "too old resource version: {n} ({compacted})"
                )));
            }
            Start::Future(n) => {
                self.last_rv = n;
                self.waiting_for = Some((n, Instant::now() + TOO_LARGE_WAIT));
            }
        }
    }

    /// Whether a stored object must go through the converter first.
    fn needs_conversion(&self, stored: &Value) -> bool {
        self.converter.is_some()
            && stored["apiVersion"].as_str() != Some(self.def.api_version().as_str())
    }

    /// Whether this watch serves a stored object exactly as its JSON bytes are (bytes whose
    /// field sets are not folded, as a data directory written before folding holds them): the bytes of
    /// [`Presented`](crate::registry::strategy::Presented) for a custom resource without
    /// conversion are the stored object's fields in sorted order with the served `apiVersion`
    /// and `kind` among them, which is the stored JSON itself (serde_json's compact encoding
    /// of a tree, keys sorted: [`Stored::json`]) when it already holds that `apiVersion` and
    /// `kind`. Built-in kinds are served in Go's field order, and plain JSON watches only.
    fn serves_stored_json(&self, json: &[u8]) -> bool {
        #[derive(serde::Deserialize)]
        struct TypeMeta {
            #[serde(rename = "apiVersion")]
            api_version: Option<String>,
            kind: Option<String>,
        }
        let plain = self.renderer.is_none()
            && self.def.view == View::Native
            && self
                .def
                .custom
                .as_ref()
                .is_some_and(|c| c.conversion.is_none());
        // Bytes holding a folded field set ([`crate::api::folded`]) are not what a
        // client is served.
        if !plain || json.first() != Some(&b'{') || holds_folded_set(json) {
            return false;
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        de.disable_recursion_limit();
        match <TypeMeta as serde::Deserialize>::deserialize(&mut de) {
            Ok(TypeMeta {
                api_version: Some(v),
                kind: Some(k),
            }) => v == self.def.api_version() && k == self.def.kind,
            _ => false,
        }
    }

    /// [`Self::push_object`] of a stored object without keeping a tree it does not hold (one
    /// that rested, or was loaded from the data directory after a restart): its bytes as they
    /// are when they are what the watch serves ([`Self::serves_stored_json`]), else a tree
    /// decoded for this event alone.
    fn push_stored(&mut self, ty: &'static str, obj: &Stored) {
        if !obj.is_decoded()
            && let Some(json) = obj.json()
            && self.serves_stored_json(json)
        {
            self.pending
                .push_back(Pending::Ready(frame_bytes(ty, json)));
            return;
        }
        obj.with_value(|o| self.push_object(ty, o));
    }

    fn push_object(&mut self, ty: &'static str, stored: &Value) {
        if self.needs_conversion(stored) {
            self.pending
                .push_back(Pending::Convert(ty, present(&self.def, stored)));
            return;
        }
        if self.renderer.is_none() {
            // Serialized from the stored object, as `present` would serve it, without a copy.
            let bytes = serde_json::to_vec(&crate::registry::strategy::Presented::new(
                &self.def, stored,
            ))
            .unwrap_or_default();
            self.pending
                .push_back(Pending::Ready(frame_bytes(ty, &bytes)));
            return;
        }
        let served = present(&self.def, stored);
        let line = self.render(ty, served);
        self.pending.push_back(Pending::Ready(line));
    }

    /// The event line of an object already in the served version.
    fn render(&mut self, ty: &str, served: Value) -> Bytes {
        let out = match &self.renderer {
            Some(r) => {
                let v = r(&served, !self.rendered_once);
                self.rendered_once = true;
                v
            }
            None => served,
        };
        frame(ty, &self.def, &out)
    }

    /// [`Self::push_object`] for the object of a stored change, sharing its encoding with every
    /// other watch of the resource (a plain JSON watch of the native view; a Table watch or the
    /// events.k8s.io view renders per watch).
    ///
    /// A change whose object holds no tree (rested, or loaded after a restart) is served
    /// without decoding it for good: from an encoding a watch made before, else as
    /// [`Self::push_stored`] does, and its encoding is not kept (it would stay as long as the
    /// change, beside the bytes; a change that rests drops its encoding, a loaded one never
    /// rests).
    fn push_change(&mut self, ty: &'static str, change: &Change) {
        let plain = self.renderer.is_none() && self.def.view == View::Native;
        if !change.object.is_decoded() {
            match change.served.get(&self.served_as).filter(|_| plain) {
                Some(bytes) => self
                    .pending
                    .push_back(Pending::Ready(frame_bytes(ty, &bytes))),
                None => self.push_stored(ty, &change.object),
            }
            return;
        }
        if !plain || self.needs_conversion(change.object.value()) {
            self.push_object(ty, change.object.value());
            return;
        }
        let def = &self.def;
        let bytes = change.served.get_or_encode(&self.served_as, || {
            Bytes::from(
                serde_json::to_vec(&crate::registry::strategy::Presented::new(
                    def,
                    &change.object,
                ))
                .unwrap_or_default(),
            )
        });
        self.pending
            .push_back(Pending::Ready(frame_bytes(ty, &bytes)));
    }

    fn push_bookmark(&mut self, initial_end: bool) {
        let mut meta = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = self
            .bookmark_type
            .clone()
            .unwrap_or_else(|| (self.def.kind.clone(), self.def.api_version()));
        let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": meta});
        self.pending
            .push_back(Pending::Ready(frame("BOOKMARK", &self.def, &obj)));
    }

    fn push_error(&mut self, e: &ApiError) {
        self.pending
            .push_back(Pending::Ready(frame("ERROR", &self.def, &e.to_status())));
        self.done = true;
    }

    /// Reads the changes after `last_rv` and queues the ones this watcher sees: up to
    /// [`CATCH_UP_CHANGES`] changes or [`CATCH_UP_BYTES`] of events, leaving `behind` set when
    /// there are more.
    fn catch_up(&mut self) {
        self.behind = false;
        let changes = self
            .store
            .read(|s| s.changes_after(self.last_rv, CATCH_UP_CHANGES));
        let changes = match changes {
            Ok(c) => c,
            Err(compacted) => {
                let e = ApiError::expired(format!(
                    "too old resource version: {} ({compacted})",
                    self.last_rv
                ));
                self.push_error(&e);
                return;
            }
        };
        let had_changes = !changes.is_empty();
        self.behind = changes.len() == CATCH_UP_CHANGES;
        let mut queued_bytes = 0;
        for c in changes {
            if queued_bytes >= CATCH_UP_BYTES {
                self.behind = true;
                break;
            }
            let queued = self.pending.len();
            self.last_rv = c.rv;
            if c.storage != self.def.storage {
                continue;
            }
            let now = self.sees(&c.object);
            // Without selectors only the namespace counts, the same before and after.
            let before = match &c.prev {
                Some(_) if self.selection.is_everything() => now,
                Some(p) => self.sees(p),
                None => false,
            };
            match c.kind {
                ChangeType::Added if now => self.push_change("ADDED", &c),
                ChangeType::Deleted if before => self.push_change("DELETED", &c),
                ChangeType::Modified => match (before, now) {
                    (true, true) => self.push_change("MODIFIED", &c),
                    (false, true) => self.push_change("ADDED", &c),
                    (true, false) => {
                        // Leaving the selector: the last matching content, at the new revision.
                        let mut last = c
                            .prev
                            .as_deref()
                            .map(|p| p.with_value(Value::clone))
                            .unwrap_or_default();
                        last["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                        self.push_object("DELETED", &last);
                    }
                    (false, false) => {}
                },
                _ => {}
            }
            queued_bytes += self
                .pending
                .range(queued..)
                .map(|p| match p {
                    Pending::Ready(b) => b.len(),
                    Pending::Convert(..) => 0,
                })
                .sum::<usize>();
        }
        // A custom resource whose CRD was deleted is no longer served: like the real server,
        // end its watches (after the DELETED events of its objects).
        if had_changes && self.def.custom.is_some() {
            let served = self.store.read(|s| {
                s.registry
                    .lookup(&self.def.group, &self.def.version, &self.def.plural)
                    .is_some()
            });
            if !served {
                self.done = true;
            }
        }
    }

    /// `first` and the rendered events queued right behind it, joined while they fit in
    /// [`WATCH_WRITE_CHUNK`] bytes (see the module doc, "How events become writes").
    fn join_waiting(&mut self, first: Bytes) -> Bytes {
        let fits = |len: usize, next: Option<&Pending>| matches!(next, Some(Pending::Ready(b)) if len + b.len() <= WATCH_WRITE_CHUNK);
        if !fits(first.len(), self.pending.front()) {
            return first;
        }
        let mut joined = bytes::BytesMut::with_capacity(WATCH_WRITE_CHUNK);
        joined.extend_from_slice(&first);
        while fits(joined.len(), self.pending.front())
            && let Some(Pending::Ready(b)) = self.pending.pop_front()
        {
            joined.extend_from_slice(&b);
        }
        joined.freeze()
    }

    /// Events waiting for this watch: queued, and still in the history after `last_rv`.
    fn backlog(&self) -> usize {
        let storage = &self.def.storage;
        self.pending.len()
            + self
                .store
                .read(|s| s.count_changes_after(self.last_rv, storage))
    }

    /// Whether the client left the last frame untaken for [`Unresponsive::after`] while
    /// [`Unresponsive::backlog`] events waited (called when the connection asks for the next
    /// frame).
    fn unresponsive(&mut self) -> bool {
        let Some(at) = self.handed_at.take() else {
            return false;
        };
        at.elapsed() >= self.unresponsive.after && self.backlog() >= self.unresponsive.backlog
    }

    async fn next_batch(&mut self) {
        if self.behind {
            if self.shutdown.is_cancelled() {
                self.done = true;
            } else {
                self.catch_up();
            }
            return;
        }
        if let Some((target, until)) = self.waiting_for {
            tokio::select! {
                _ = self.shutdown.cancelled() => self.done = true,
                _ = tokio::time::sleep_until(until) => {
                    let current = *self.rx.borrow();
                    if current >= target {
                        self.waiting_for = None;
                        self.catch_up();
                    } else {
                        self.push_error(&ApiError::too_large_resource_version(target, current));
                    }
                }
                r = self.rx.changed() => {
                    if r.is_err() { self.done = true; }
                    else if *self.rx.borrow() >= target {
                        self.waiting_for = None;
                        self.catch_up();
                    }
                }
            }
            return;
        }
        tokio::select! {
            _ = self.shutdown.cancelled() => self.done = true,
            _ = tokio::time::sleep_until(self.deadline) => {
                self.catch_up();
                if self.allow_bookmarks && !self.done {
                    self.push_bookmark(false);
                }
                self.done = true;
            }
            _ = self.ticker.tick(), if self.allow_bookmarks => {
                self.catch_up();
                if !self.done {
                    self.push_bookmark(false);
                }
            }
            r = self.rx.changed() => {
                if r.is_err() {
                    self.done = true;
                } else {
                    self.catch_up();
                }
            }
        }
    }
}

/// Starts a watch: validates the request (errors here become ordinary HTTP errors), computes
/// the initial events and returns the response body stream.
pub fn start(
    store: Arc<Store>,
    t: &Target,
    opts: &ListOptions,
    settings: WatchSettings,
) -> Result<StreamBody<impl Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + use<>>, ApiError>
{
    if opts.send_initial_events.is_some() && settings.reject_send_initial_events {
        return Err(ApiError::invalid_list_options(
            "sendInitialEvents",
            "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    }
    let selection = Selection::parse(&t.def, opts, t.name.as_deref())?;
    let requested = requested_version(opts)?;
    let send_initial = match opts.send_initial_events {
        Some(b) => b,
        None => requested.is_none(),
    };
    let timeout = match opts.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => Duration::from_secs(1800 + fastrand::u64(..1800)),
    };
    let mut ticker = tokio::time::interval_at(
        Instant::now() + settings.bookmark_interval,
        settings.bookmark_interval.max(Duration::from_millis(1)),
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (initial, start, rx) = snapshot(&store, t, requested, send_initial);
    let mut state = WatchState {
        store,
        def: t.def.clone(),
        namespace: t.namespace.clone().filter(|_| t.def.namespaced),
        selection,
        allow_bookmarks: opts.allow_bookmarks,
        pending: VecDeque::new(),
        last_rv: 0,
        rx,
        ticker,
        // `timeoutSeconds` comes from the client: a huge one must not overflow the clock, it
        // just means "no timeout" (a year is longer than any test or demo runs).
        deadline: Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600)),
        waiting_for: None,
        shutdown: settings.shutdown,
        renderer: settings.renderer,
        bookmark_type: settings.bookmark_type,
        converter: settings.converter,
        rendered_once: false,
        done: false,
        served_as: format!("{}/{}", t.def.api_version(), t.def.kind),
        behind: false,
        handed_at: None,
        unresponsive: settings.unresponsive,
    };
    state.queue_start(start, &initial, send_initial, opts);
    Ok(StreamBody::new(frames(state)))
}

/// Reads the request's `resourceVersion`: empty or "0" means "from now" (`None`), anything
/// else must be a number.
fn requested_version(opts: &ListOptions) -> Result<Option<u64>, ApiError> {
    let rv_param = opts.resource_version.as_str();
    if rv_param.is_empty() || rv_param == "0" {
        return Ok(None);
    }
    let n = rv_param
        .parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param:?}")))?;
    Ok(Some(n))
}

/// Takes the snapshot the watch starts from: where it starts, the objects of its initial
/// events (when it sends them) and a subscription to later changes.
fn snapshot(
    store: &Arc<Store>,
    t: &Target,
    requested: Option<u64>,
    send_initial: bool,
) -> (Vec<Arc<Stored>>, Start, tokio_watch::Receiver<u64>) {
    // Snapshot and subscription under one lock: no change can fall between them.
    store.read(|s| {
        let rx = store_subscribe(store);
        let current = s.resource_version();
        let start = match requested {
            Some(n) if n > current => Start::Future(n),
            Some(n) if n < s.compacted_revision() && !send_initial => {
                Start::Expired(n, s.compacted_revision())
            }
            Some(n) if !send_initial => Start::From(n),
            _ => Start::From(current),
        };
        // Shared, not copied: the initial events are serialized from the stored objects.
        let initial: Vec<Arc<Stored>> = if send_initial {
            s.list_shared(&t.def.storage, None)
                .into_iter()
                .cloned()
                .collect()
        } else {
            vec![]
        };
        (initial, start, rx)
    })
}

/// Turns the watch's state into the stream of response frames: ready events go out as they
/// are, events to convert are converted first, and an empty queue waits for the next batch.
fn frames(
    state: WatchState,
) -> impl Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + use<> {
    futures_util::stream::unfold(state, |mut st| async move {
        if st.unresponsive() {
            // The cacher's "Forcing watcher close due to unresponsiveness": the stream ends
            // (no ERROR event); the client watches again from the last revision it got.
            tracing::warn!(
                group = %st.def.group,
                resource = %st.def.plural,
                last_sent = st.last_rv,
                "forcing watcher close due to unresponsiveness"
            );
            st.store
                .count_terminated_watcher(&st.def.group, &st.def.plural);
            return None;
        }
        loop {
            match st.pending.pop_front() {
                Some(Pending::Ready(b)) => {
                    let frame = st.join_waiting(b);
                    st.handed_at = Some(Instant::now());
                    return Some((Ok(Frame::data(frame)), st));
                }
                Some(Pending::Convert(ty, obj)) => {
                    let Some(convert) = st.converter.clone() else {
                        continue;
                    };
                    let converted = convert(obj)
                        .await
                        .unwrap_or_else(|e| Err(ApiError::internal(e.to_string())));
                    match converted {
                        Ok(served) => {
                            let line = st.render(ty, served);
                            st.handed_at = Some(Instant::now());
                            return Some((Ok(Frame::data(line)), st));
                        }
                        Err(e) => {
                            // As the real watch server: the object cannot be encoded in the
                            // watched version, so the stream ends (logged, no ERROR event).
                            tracing::warn!(error = %e.message, "unable to encode watch object");
                            return None;
                        }
                    }
                }
                None => {}
            }
            if st.done {
                return None;
            }
            st.next_batch().await;
        }
    })
}

fn store_subscribe(store: &Store) -> tokio_watch::Receiver<u64> {
    let mut rx = store.subscribe();
    rx.mark_unchanged();
    rx
}
