//! An in-memory lister-watcher for tests and benchmarks (client-go's `FakeControllerSource`).
//!
//! [`FakeListerWatcher<K>`] plays a tiny API server for one collection: it keeps objects, a
//! resourceVersion counter and the event history, answers LIST (with `limit`/`continue`
//! paging) and WATCH (resuming from any RV still in history, streaming lists with
//! `sendInitialEvents=true`), and lets a test script the failures a real server produces:
//!
//! * [`FakeListerWatcher::fail_next_list`] / [`FakeListerWatcher::fail_next_watch`]: the next
//!   request answers with an error (500, 410, 429, connection refused, ...);
//! * [`FakeListerWatcher::compact`]: forget history, so resuming a watch from an older RV gets
//!   a 410 `ERROR` event (and a list at an older RV still succeeds, served "not older than");
//! * [`FakeListerWatcher::close_watches`]: end every open watch cleanly (a server timeout);
//! * [`FakeListerWatcher::error_watches`]: send an `ERROR` event with a Status, then close;
//! * [`FakeListerWatcher::set_streaming_list_support`]: answer `sendInitialEvents=true` with
//!   400 BadRequest, as a server without the WatchList feature does.
//!
//! Every request is recorded ([`FakeListerWatcher::requests`]) so tests can check exactly what
//! the reflector asked for. Selectors are recorded but not applied. This is for unit tests of
//! the cache itself; integration tests run against the embedded API server.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::stream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::factory::{InformerScope, ListerWatcherSource};
use super::keys::key_of;
use super::lister_watcher::{BoxListerWatcher, ListerWatcher};
use super::{CacheObject, ObjectMetaAccess};
use crate::client::{
    Bookmark, Error, ListParams, ObjectList, Result, UndecodableObject, WatchEvent, WatchParams,
    WatchStream,
};

/// A request the fake received.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// A LIST.
    List(ListParams),
    /// A WATCH.
    Watch(WatchParams),
}

type Sender<K> = mpsc::UnboundedSender<Result<WatchEvent<K>>>;

struct State<K> {
    rv: u64,
    objects: BTreeMap<String, K>,
    /// (rv, event) for every change since `oldest_rv`.
    history: Vec<(u64, WatchEvent<K>)>,
    /// Watches from an RV below this get 410.
    oldest_rv: u64,
    watchers: Vec<Sender<K>>,
    list_faults: VecDeque<Error>,
    watch_faults: VecDeque<Error>,
    snapshots: HashMap<String, (Vec<K>, usize, u64)>,
    next_token: u64,
    streaming: bool,
    /// Named in every list's first page as objects that do not decode.
    undecodable: Vec<UndecodableObject>,
    requests: Vec<(Instant, Request)>,
}

/// The in-memory fake (see the module doc). Cloning shares the same state.
pub struct FakeListerWatcher<K> {
    state: Arc<Mutex<State<K>>>,
}

impl<K> Clone for FakeListerWatcher<K> {
    fn clone(&self) -> Self {
        FakeListerWatcher {
            state: Arc::clone(&self.state),
        }
    }
}

impl<K: CacheObject> Default for FakeListerWatcher<K> {
    fn default() -> Self {
        Self::new()
    }
}

fn gone(rv: u64, oldest: u64) -> Error {
    Error::status(
        410,
        "Expired",
        format!("too old resource version: {rv} ({oldest})"),
    )
}

fn clone_error(e: &Error) -> Error {
    match e {
        Error::Api(s) => Error::Api(s.clone()),
        Error::Http { code, excerpt } => Error::Http {
            code: *code,
            excerpt: excerpt.clone(),
        },
        Error::Transport(m) => Error::Transport(m.clone()),
        Error::Timeout(m) => Error::Timeout(m.clone()),
        Error::Config(m) => Error::Config(m.clone()),
        Error::LineTooLong { limit } => Error::LineTooLong { limit: *limit },
        Error::UndecodableObject { event, object } => Error::UndecodableObject {
            event,
            object: object.clone(),
        },
        other => Error::Other(other.to_string()),
    }
}

fn parse_rv(rv: &str) -> Result<u64> {
    rv.parse::<u64>().map_err(|_| {
        Error::status(
            400,
            "BadRequest",
            format!("invalid resourceVersion {rv:?}: not a number"),
        )
    })
}

impl<K: CacheObject> FakeListerWatcher<K> {
    /// An empty collection at resourceVersion 1.
    pub fn new() -> Self {
        FakeListerWatcher {
            state: Arc::new(Mutex::new(State {
                rv: 1,
                objects: BTreeMap::new(),
                history: Vec::new(),
                oldest_rv: 1,
                watchers: Vec::new(),
                list_faults: VecDeque::new(),
                watch_faults: VecDeque::new(),
                snapshots: HashMap::new(),
                next_token: 1,
                streaming: true,
                undecodable: Vec::new(),
                requests: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(state: &mut State<K>, rv: u64, event: WatchEvent<K>) {
        state.watchers.retain(|w| w.send(Ok(event.clone())).is_ok());
        state.history.push((rv, event));
    }

    /// Creates or replaces an object (ADDED or MODIFIED); returns its new resourceVersion.
    pub fn upsert(&self, mut obj: K) -> String {
        let mut s = self.state();
        s.rv += 1;
        let rv = s.rv;
        obj.metadata_mut().set_resource_version(rv.to_string());
        let key = key_of(&obj);
        let existed = s.objects.insert(key, obj.clone()).is_some();
        let ev = if existed {
            WatchEvent::Modified(obj)
        } else {
            WatchEvent::Added(obj)
        };
        Self::record(&mut s, rv, ev);
        rv.to_string()
    }

    /// Deletes the object under `key` (a DELETED event with its final state); false if absent.
    pub fn delete(&self, key: &str) -> bool {
        let mut s = self.state();
        let Some(mut obj) = s.objects.remove(key) else {
            return false;
        };
        s.rv += 1;
        let rv = s.rv;
        obj.metadata_mut().set_resource_version(rv.to_string());
        Self::record(&mut s, rv, WatchEvent::Deleted(obj));
        true
    }

    /// Deletes an object *without* telling open watches, as if the event were lost while the
    /// client was disconnected (history keeps it for watches that resume later).
    pub fn delete_silently(&self, key: &str) -> bool {
        let mut s = self.state();
        let Some(mut obj) = s.objects.remove(key) else {
            return false;
        };
        s.rv += 1;
        let rv = s.rv;
        obj.metadata_mut().set_resource_version(rv.to_string());
        s.history.push((rv, WatchEvent::Deleted(obj)));
        true
    }

    /// Forgets all history: watches from any earlier RV now get 410.
    pub fn compact(&self) {
        let mut s = self.state();
        s.history.clear();
        s.oldest_rv = s.rv;
    }

    /// Ends every open watch cleanly.
    pub fn close_watches(&self) {
        self.state().watchers.clear();
    }

    /// Sends an `ERROR` event carrying `error`'s Status to every open watch, then closes them.
    pub fn error_watches(&self, error: Error) {
        let mut s = self.state();
        let status = error.as_status().cloned().unwrap_or_default();
        for w in s.watchers.drain(..) {
            let _ = w.send(Ok(WatchEvent::Error(status.clone())));
        }
    }

    /// The next LIST request fails with `error`.
    pub fn fail_next_list(&self, error: Error) {
        self.state().list_faults.push_back(error);
    }

    /// The next WATCH request fails with `error`.
    pub fn fail_next_watch(&self, error: Error) {
        self.state().watch_faults.push_back(error);
    }

    /// Whether `sendInitialEvents=true` is accepted (default) or rejected with 400.
    pub fn set_streaming_list_support(&self, supported: bool) {
        self.state().streaming = supported;
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state()
            .requests
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Every request received so far, with the (tokio) time it arrived.
    pub fn request_log(&self) -> Vec<(Instant, Request)> {
        self.state().requests.clone()
    }

    /// Sends `event` as is to every open watch, without changing the stored objects (to
    /// script what a misbehaving or racing server might send).
    pub fn send_raw(&self, event: WatchEvent<K>) {
        self.state()
            .watchers
            .retain(|w| w.send(Ok(event.clone())).is_ok());
    }

    /// Sends a stream-level error (not an `ERROR` event) to every open watch, as a decoder or
    /// transport failure in the middle of a stream would, then closes them.
    pub fn break_watches(&self, error: Error) {
        let mut s = self.state();
        for w in s.watchers.drain(..) {
            let _ = w.send(Err(clone_error(&error)));
        }
    }

    /// From now on every list names `object` among the objects that do not decode (in place of
    /// an earlier one of the same key), and every
    /// open watch is sent it as a `MODIFIED` event that does not decode (the stream goes on), as
    /// the client reports an object of the wrong shape.
    pub fn add_undecodable(&self, object: UndecodableObject) {
        let mut s = self.state();
        s.undecodable.retain(|u| u.key() != object.key());
        s.undecodable.push(object.clone());
        s.watchers.retain(|w| {
            w.send(Err(Error::UndecodableObject {
                event: "MODIFIED",
                object: Box::new(object.clone()),
            }))
            .is_ok()
        });
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.state().requests.clear();
    }

    /// The current objects, sorted by key.
    pub fn objects(&self) -> Vec<K> {
        self.state().objects.values().cloned().collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> String {
        self.state().rv.to_string()
    }

    /// How many watches are open.
    pub fn open_watches(&self) -> usize {
        let mut s = self.state();
        s.watchers.retain(|w| !w.is_closed());
        s.watchers.len()
    }

    fn do_list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let mut s = self.state();
        s.requests
            .push((Instant::now(), Request::List(params.clone())));
        if let Some(e) = s.list_faults.pop_front() {
            return Err(e);
        }
        let first_page = params.continue_token.is_none();
        let (items, offset, rv) = match params.continue_token.as_deref() {
            Some(token) => s.snapshots.remove(token).ok_or_else(|| {
                Error::status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result.",
                )
            })?,
            None => {
                if let Some(want) = params.resource_version.as_deref().filter(|v| *v != "0") {
                    let want = parse_rv(want)?;
                    if want > s.rv {
                        let mut err = Error::status(
                            504,
                            "Timeout",
                            format!("Too large resource version: {want}, current: {}", s.rv),
                        );
                        if let Error::Api(st) = &mut err {
                            st.details = Some(
                                k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails {
                                    causes: Some(vec![
                                        k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
                                            reason: Some("ResourceVersionTooLarge".into()),
                                            message: Some("Too large resource version".into()),
                                            field: None,
                                        },
                                    ]),
                                    ..Default::default()
                                },
                            );
                        }
                        return Err(err);
                    }
                }
                (s.objects.values().cloned().collect::<Vec<_>>(), 0, s.rv)
            }
        };
        let limit = params.limit.filter(|l| *l > 0).map(|l| l as usize);
        let end = limit.map_or(items.len(), |l| (offset + l).min(items.len()));
        let page: Vec<K> = items[offset..end].to_vec();
        let mut continue_ = None;
        if end < items.len() {
            let token = format!("page-{}", s.next_token);
            s.next_token += 1;
            s.snapshots.insert(token.clone(), (items, end, rv));
            continue_ = Some(token);
        }
        Ok(ObjectList {
            metadata: ListMeta {
                resource_version: Some(rv.to_string()),
                continue_,
                ..Default::default()
            },
            items: page,
            undecodable: if first_page {
                s.undecodable.clone()
            } else {
                Vec::new()
            },
        })
    }

    /// Makes the next continuation page of every paged list in flight expire.
    pub fn expire_continue_tokens(&self) {
        self.state().snapshots.clear();
    }

    fn do_watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        let mut s = self.state();
        s.requests
            .push((Instant::now(), Request::Watch(params.clone())));
        if let Some(e) = s.watch_faults.pop_front() {
            return Err(e);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let rv = params.resource_version.as_deref().unwrap_or("");
        if params.send_initial_events {
            if !s.streaming {
                return Err(Error::status(
                    400,
                    "BadRequest",
                    "sendInitialEvents is not supported by this server",
                ));
            }
            for obj in s.objects.values() {
                let _ = tx.send(Ok(WatchEvent::Added(obj.clone())));
            }
            let _ = tx.send(Ok(WatchEvent::Bookmark(Bookmark {
                resource_version: s.rv.to_string(),
                initial_events_end: true,
            })));
        } else if rv.is_empty() || rv == "0" {
            for obj in s.objects.values() {
                let _ = tx.send(Ok(WatchEvent::Added(obj.clone())));
            }
        } else {
            let from = parse_rv(rv)?;
            if from < s.oldest_rv {
                let status = gone(from, s.oldest_rv)
                    .as_status()
                    .cloned()
                    .unwrap_or_default();
                let _ = tx.send(Ok(WatchEvent::Error(status)));
                drop(tx);
                return Ok(into_stream(rx));
            }
            for (ev_rv, ev) in &s.history {
                if *ev_rv > from {
                    let _ = tx.send(Ok(ev.clone()));
                }
            }
        }
        s.watchers.push(tx);
        Ok(into_stream(rx))
    }
}

fn into_stream<K: Send + 'static>(
    rx: mpsc::UnboundedReceiver<Result<WatchEvent<K>>>,
) -> WatchStream<K> {
    Box::pin(stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

impl<K: CacheObject> ListerWatcher<K> for FakeListerWatcher<K> {
    async fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        self.do_list(params)
    }
    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        self.do_watch(params)
    }
}

/// A [`ListerWatcherSource`] of fakes: one [`FakeListerWatcher`] per (type, scope), created
/// on first use, so a test can reach the fake an informer uses.
#[derive(Clone, Default)]
pub struct FakeSource {
    fakes: Arc<Mutex<FakeMap>>,
}

type FakeMap = HashMap<(std::any::TypeId, InformerScope), Box<dyn std::any::Any + Send>>;

impl FakeSource {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fake serving `K` in `scope`.
    pub fn fake<K: CacheObject>(&self, scope: &InformerScope) -> FakeListerWatcher<K> {
        let mut fakes = self.fakes.lock().unwrap_or_else(|e| e.into_inner());
        let entry = fakes
            .entry((std::any::TypeId::of::<K>(), scope.clone()))
            .or_insert_with(|| Box::new(FakeListerWatcher::<K>::new()));
        match entry.downcast_ref::<FakeListerWatcher<K>>() {
            Some(f) => f.clone(),
            None => FakeListerWatcher::new(),
        }
    }

    /// How many fakes (distinct type and scope pairs) were asked for.
    pub fn len(&self) -> usize {
        self.fakes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True when no fake was asked for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ListerWatcherSource for FakeSource {
    fn lister_watcher<K: CacheObject>(&self, scope: &InformerScope) -> BoxListerWatcher<K> {
        BoxListerWatcher::new(self.fake::<K>(scope))
    }
}

/// A minimal namespaced object meta for tests: `namespace/name` with labels.
pub fn meta(namespace: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: Some(name.to_owned()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        ..Default::default()
    }
}
