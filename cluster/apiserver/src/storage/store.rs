//! Storage: objects as JSON, one global resourceVersion, and the event history behind watch.
//!
//! ## resourceVersion
//!
//! A real cluster keeps its objects in etcd, whose *revision* is one counter for the whole
//! keyspace, bumped by every write. The API server hands that revision out as
//! `metadata.resourceVersion`, as the `resourceVersion` of every list and as the position of
//! every watch event. This store does the same: [`State::resource_version`] is one `u64`, each
//! create, update or delete increments it and stamps the written object with the new value
//! (rendered as a decimal string). Clients must treat it as opaque and compare it only for
//! equality (optimistic concurrency: an update carrying a stale value gets 409 Conflict), but
//! because it is monotonic, "everything that happened after N" is well defined, and that is
//! what watch is built on.
//!
//! ## The history window and 410 Gone
//!
//! Every write also appends a [`Change`] (ADDED, MODIFIED or DELETED, with the object before and
//! after) to the history. A watch "from resourceVersion N" replays the changes with
//! `rv > N` and then follows new ones. The history is etcd's MVCC log with its compaction, which
//! kube-apiserver requests every five minutes (`--etcd-compaction-interval=5m`): so a watch
//! position or a `continue` token stays usable for five minutes *whatever the write rate*. The
//! window here is bounded the same way, by time and by bytes, never by a count alone
//! ([`HistoryLimits`]):
//!
//! * **time** ([`HistoryLimits::max_age`], default 5 minutes): a change is dropped once it is
//!   older than that, and not before unless the byte bound forces it;
//! * **bytes** ([`HistoryLimits::max_bytes`], default 256 MiB): the history's size (the JSON
//!   object each change wrote, estimated by [`value_bytes`], each version once: the object
//!   before a change is the previous change's object, one allocation, see [`Change::bytes`];
//!   an object that has rested as bytes, see [`crate::storage::stored`], is charged its JSON and the
//!   change is measured again when it rests) never stays above the bound, so 3,000 patches of a
//!   500 KB ConfigMap cost at most the bound (and one version more), not 3 GB.
//!   When the byte bound drops a change younger than `max_age`, the
//!   `apiserver_storage_history_early_compactions_total` counter says so (the time guarantee
//!   was broken to keep memory bounded);
//! * optionally a count ([`HistoryLimits::max_changes`], off by default; tests use it to
//!   provoke 410 cheaply).
//!
//! When the oldest change is dropped, [`State::compacted_revision`] moves up to its revision.
//! A watch or list asking for a revision below that can no longer be answered faithfully and
//! gets `410 Expired` ("too old resource version"), which tells a client-go reflector to list
//! again from scratch. Trimming happens on writes (no writes, nothing to trim: memory cannot grow
//! then). The byte accounting is served as `apiserver_storage_history_bytes` and
//! `apiserver_storage_history_changes` ([`State::history_bytes`], [`Store::prometheus_text`]).
//!
//! ## Durability
//!
//! By default everything lives in memory. [`Store::open`] (the server's `--data-dir`) adds a
//! crash-safe copy on disk ([`crate::storage::durable`]): every write's changes are committed there,
//! objects, the revision counter and the history window, *before* [`Store::write`] returns, so a
//! response is only sent for a write that survives `kill -9`. Writers that arrive while a commit
//! is running are committed together in the next one (group commit), which keeps throughput
//! at a few fsyncs per batch instead of one per write. A restart loads the same objects, the
//! same revision (the counter continues) and the same history, so watches resume from their
//! revision without a relist.

//! ## Objects that expire: events' TTL
//!
//! kube-apiserver keeps events for `--event-ttl` (default one hour) after their last write:
//! the events registry gives every create and update an etcd lease of that length
//! (`pkg/registry/core/event/storage`, `TTLFunc` returns the TTL whatever the object), and
//! when the lease runs out etcd deletes the key, which watchers see as a `DELETED` event
//! carrying the last state. Without it a server that records events keeps every one of them,
//! and a busy one grows without bound (20 events a second, two per At, are 72,000 an hour).
//! Here [`Store::expire_after`] gives a storage such a TTL: each write of one of its objects
//! schedules the key for `ttl` later, with the revision written ([`Leases`]); the store's
//! compaction timer ([`compact_on_time`], every second at most) deletes each object whose
//! time has come and that was not written again since, at most [`EXPIRE_PER_PASS`] a pass so
//! that a backlog (a restart after a long stop) is spread over passes rather than held under
//! the lock. A write after the schedule moves it: the older entry finds a newer revision and
//! is dropped. After a restart from the data directory the leases are made again from each
//! object's last write, the newest of its change in the loaded history and the times it
//! carries (`metadata.creationTimestamp`, `firstTimestamp`, `lastTimestamp`, `eventTime`,
//! `series.lastObservedTime`: what an event recorder stamps on each write), so a server killed
//! and restarted every two minutes still lets its events go an hour after they were written.
//!
//! ## Snapshots: reading the past without copying the present
//!
//! The same history lets [`State::snapshot_at`] show a resource as it was at an older
//! revision, which serves `resourceVersionMatch=Exact` lists and the consistent snapshot
//! behind `limit`/`continue` paging (every page of a paged LIST shows the collection as it was
//! at the first page's revision, whatever was written since), like etcd's MVCC reads.
//!
//! etcd keeps every version of every key until compaction and reads any revision directly.
//! This store keeps only the current objects and the history ring, so a read of the past is
//! "the present, minus what changed since". A [`Snapshot`] copies no object. It borrows the
//! current objects and holds a small *undo table*: for each key written after the revision asked for, the value it had then (`None`
//! if it did not exist), taken from the oldest such change's `prev` (or `None` for an
//! `ADDED`). Reading merges the two in key order: a key in the undo table shows its old value
//! (or is skipped), every other key shows the current object, which is what it was then too.
//! So building a snapshot costs the number of changes since that revision (found by binary
//! search in the history, then one pass; it is rebuilt for every page), and reading a page of `limit` objects costs that
//! page ([`Snapshot::range`] starts at the page's first key in the ordered map), not the size
//! of the resource. Counting the objects of a snapshot is O(1) per namespace plus the undo
//! table, thanks to per-namespace counters kept on every write ([`Snapshot::count`]).
//!
//! Invariant: every change in the history records the state before it in `prev` (absent only
//! for `ADDED`), so the undo table is exact for any revision not older than
//! [`State::compacted_revision`]; older ones are refused.
//!
//! ## Concurrency
//!
//! All state sits behind one mutex that is never held across an `.await`; a request handler
//! locks it, checks what depends on the stored objects, writes, and unlocks (the validation
//! that depends only on the request and the replaced object runs before, outside the lock:
//! [`crate::registry::generic`], "Outside the lock"). After each write batch the new revision is published
//! on a `tokio::sync::watch` channel ([`Store::subscribe`]); watch streams and background
//! controllers wait on it and then read [`State::changes_since`] their last revision, so no
//! change is ever missed even if several land between two wake-ups.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::iter::Peekable;
use std::ops::{Bound, Deref};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::watch;

use crate::storage::durable::{Disk, DiskError};
pub use crate::storage::stored::Stored;

/// `(namespace, name)`; namespace is `""` for cluster-scoped objects.
pub type Key = (String, String);

/// The kind of a stored change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was updated.
    Modified,
    /// The object was removed.
    Deleted,
}

impl ChangeType {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// What a [`Store::shed`] pass replaced: the objects that now rest as bytes, and the maps and
/// history entries that held them. Drop it on another thread than the one that sheds.
///
/// glibc's malloc keeps a small cache of freed chunks per thread (the tcache) and serves that
/// thread's next allocations of the same size from it, whichever arena the chunks came from.
/// The objects' trees were allocated by request threads; had the shedding thread freed them,
/// its next copies (the JSON bytes, the keys, the map nodes) would have been carved from the
/// request threads' arenas, among the dead trees, and held those pages: measured, every rested
/// object's JSON was found in a request thread's arena after a burst. Dropped elsewhere, the
/// copies stay in the shedding thread's own arena, packed, and the request threads' arenas
/// empty out.
#[derive(Default)]
pub struct Garbage {
    objects: Vec<Arc<Stored>>,
    changes: Vec<Arc<Change>>,
    maps: Vec<BTreeMap<Key, Arc<Stored>>>,
}

impl Garbage {
    /// Whether the pass replaced nothing.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The estimated bytes of the trees dropped with it (to decide when to hand memory back
    /// to the system). An estimate: a watch that still holds an object keeps its tree.
    pub fn tree_bytes(&self) -> usize {
        let mut seen: std::collections::HashSet<*const Stored, PtrHash> = Default::default();
        self.objects
            .iter()
            .filter(|s| seen.insert(Arc::as_ptr(s)))
            .map(|s| s.tree_estimate())
            .sum()
    }
}

/// A resource's storage key (`core/pods`, `apps/deployments`, ...) as the history's changes
/// hold it: one shared string per resource, not one per change (10,000 changes of a resource
/// held 10,000 copies of its name). Compares with and reads as a `str`.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageKey(Arc<str>);

impl StorageKey {
    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for StorageKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for StorageKey {
    fn from(s: &str) -> Self {
        StorageKey(s.into())
    }
}

impl PartialEq<str> for StorageKey {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for StorageKey {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for StorageKey {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl std::fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for StorageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for StorageKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// One entry of the event history.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The revision this change produced.
    pub rv: u64,
    /// Storage key of the resource (`core/pods`, `apps/deployments`, ...).
    pub storage: StorageKey,
    /// What happened.
    pub kind: ChangeType,
    /// The object after the change; for DELETED, the last state stamped with the deletion revision.
    /// Shared, not copied: the same allocation is the stored object until the next write, and
    /// that write's `prev`.
    pub object: Arc<Stored>,
    /// The object before the change (MODIFIED and DELETED).
    pub prev: Option<Arc<Stored>>,
    /// When the change was recorded, in milliseconds since the Unix epoch (the history's age
    /// bound; kept on disk so ages survive a restart).
    pub at_ms: u64,
    /// `object` as watches serve it, encoded once by the first watch that sends it and shared
    /// by the others ([`SharedEncoding`]).
    pub served: SharedEncoding,
    /// [`Change::bytes`], measured once (when the change enters the history) and read again
    /// when it leaves.
    pub size: std::sync::OnceLock<usize>,
}

/// The JSON bytes of a change's object as a watch serves it (with `apiVersion` and `kind`),
/// encoded by the first watch that sends the event and shared by every other watch: with ten
/// watches on a resource an event is presented and serialized once, not ten times, and the
/// watches copy bytes instead of cloning the object. Filled outside the store lock, by a watch
/// stream. The encoding is tagged with the `apiVersion/kind` it was made for; a watch serving
/// the resource as another version encodes its own. The bytes are not counted in the history's
/// byte bound (they are at most one serialized copy of an object the bound already counts,
/// and [`value_bytes`] overestimates a serialized object's size).
#[derive(Default)]
pub struct SharedEncoding(std::sync::OnceLock<Box<(String, bytes::Bytes)>>);

impl SharedEncoding {
    /// The bytes encoded for `served_as` (`apiVersion/kind`), encoding them with `encode` if no
    /// watch has yet (or one has for another version, then nothing is cached).
    pub fn get_or_encode(
        &self,
        served_as: &str,
        encode: impl FnOnce() -> bytes::Bytes,
    ) -> bytes::Bytes {
        if let Some((tag, bytes)) = self.0.get().map(|b| &**b) {
            return if tag == served_as {
                bytes.clone()
            } else {
                encode()
            };
        }
        let bytes = encode();
        // Two watches may race to fill it; either result is the same bytes.
        let _ = self.0.set(Box::new((served_as.to_owned(), bytes.clone())));
        bytes
    }
}

impl SharedEncoding {
    /// The bytes a watch encoded for `served_as`, if one has (encoding nothing).
    pub fn get(&self, served_as: &str) -> Option<bytes::Bytes> {
        self.0
            .get()
            .filter(|b| b.0 == served_as)
            .map(|b| b.1.clone())
    }
}

impl Clone for SharedEncoding {
    /// A clone starts empty (the cache is not part of the change's value).
    fn clone(&self) -> Self {
        SharedEncoding::default()
    }
}

impl PartialEq for SharedEncoding {
    /// Always equal: the cache is derived from the change, not part of it.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for SharedEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "SharedEncoding(filled)"
        } else {
            "SharedEncoding(empty)"
        })
    }
}

impl Change {
    /// The bytes this change is charged in the history: its object (see [`value_bytes`]).
    ///
    /// Its previous object is not charged again: it is the same allocation as the object of
    /// the key's change before this one ([`State::write`] records the object it stores, and the
    /// next write's `prev` is that object), charged there. Only the oldest change of a key in
    /// the window holds a previous object that no change in the window is charged for: at most
    /// one version of each object beyond what the bound counts.
    pub fn bytes(&self) -> usize {
        *self
            .size
            .get_or_init(|| 64 + self.storage.len() + self.object.bytes())
    }
}

/// An estimate of the memory a JSON value holds: string and key bytes plus a fixed cost per
/// node, close to its serialized length. Linear in the value's size, like serializing it, but
/// allocates nothing.
pub fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 8,
        Value::Number(_) => 16,
        Value::String(s) => 24 + s.len(),
        Value::Array(a) => 24 + a.iter().map(value_bytes).sum::<usize>(),
        Value::Object(o) => {
            32 + o
                .iter()
                .map(|(k, v)| 32 + k.len() + value_bytes(v))
                .sum::<usize>()
        }
    }
}

/// How much history the store keeps (see the module docs): by age and by bytes, optionally also
/// by count. A change is dropped when it is older than `max_age`, or when the history holds more
/// than `max_bytes` (oldest first), or more than `max_changes` changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryLimits {
    /// How long a revision stays readable (etcd compaction interval; default 5 minutes).
    pub max_age: Duration,
    /// The most bytes the history may hold (default 256 MiB).
    pub max_bytes: usize,
    /// An extra bound on the number of changes (default none).
    pub max_changes: Option<usize>,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_age: Duration::from_secs(5 * 60),
            max_bytes: 256 << 20,
            max_changes: None,
        }
    }
}

impl HistoryLimits {
    /// The default age and byte bounds plus a bound of `n` changes.
    pub fn with_max_changes(n: usize) -> Self {
        HistoryLimits {
            max_changes: Some(n.max(1)),
            ..HistoryLimits::default()
        }
    }
}

/// kube-apiserver's `resource` label of a storage: `events`, `deployments.apps`.
fn resource_label(storage: &str) -> String {
    match storage.split_once('/') {
        Some(("core" | "", resource)) => resource.to_owned(),
        Some((group, resource)) => format!("{resource}.{group}"),
        None => storage.to_owned(),
    }
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A write of a storage that rests on write: the store's copy holds the object's bytes only,
/// the caller's the tree it answers from (then drops). An object that does not encode (it
/// always does) is stored as a tree.
fn written_as_bytes(obj: Value) -> (Arc<Stored>, Arc<Stored>) {
    let json = crate::storage::stored::encode_tree(&obj);
    let answer = Arc::new(Stored::new(obj));
    if json.is_empty() {
        return (answer.clone(), answer);
    }
    (Arc::new(Stored::written_as_json(json)), answer)
}

/// `(namespace, name)` of an object.
pub fn key_of(obj: &Value) -> Key {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_owned(),
        meta["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// `metadata.resourceVersion` parsed as a number (0 when absent or not a number).
pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn stamp(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// Hashes the address of a stored object (the shedding pass's sets and maps key on them): an
/// address is already unique, so SipHash's work per lookup would be wasted.
#[derive(Clone, Copy, Default)]
struct PtrHash;

impl std::hash::BuildHasher for PtrHash {
    type Hasher = PtrHasher;

    fn build_hasher(&self) -> PtrHasher {
        PtrHasher(0)
    }
}

/// See [`PtrHash`].
struct PtrHasher(u64);

impl std::hash::Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        // Allocations are 16-byte aligned; the multiplication spreads the rest over the bits
        // hashbrown reads (its top seven and its low ones).
        (self.0 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

/// The objects of one storage key, ordered by `(namespace, name)`, with a count per namespace.
#[derive(Debug, Default)]
struct Bucket {
    /// The storage key, shared by the bucket's changes.
    name: StorageKey,
    objects: BTreeMap<Key, Arc<Stored>>,
    per_namespace: HashMap<String, usize>,
    /// Keys added by writes since the map was last rebuilt by [`State::rest`] (their keys and
    /// the map nodes they split were allocated by request threads), and that count as the
    /// previous shedding pass saw it.
    fresh: usize,
    fresh_seen: usize,
}

impl Bucket {
    fn insert(&mut self, key: Key, obj: Arc<Stored>) -> Option<Arc<Stored>> {
        let ns = key.0.clone();
        let prev = self.objects.insert(key, obj);
        if prev.is_none() {
            *self.per_namespace.entry(ns).or_default() += 1;
            self.fresh += 1;
        }
        prev
    }

    /// Whether a shedding pass that rests `resting` of the objects rebuilds the map on its own
    /// thread (see [`State::rest`]): when the keys written since the last rebuild are an
    /// eighth of the map or more (so a burst costs a few rebuilds, not one a pass), or when
    /// writes of new keys have paused since the previous pass (so what a burst left on the
    /// request threads is moved once it ends).
    fn rebuild_for(&mut self, resting: usize) -> bool {
        let quiet = self.fresh == self.fresh_seen;
        self.fresh_seen = self.fresh;
        resting > 0 && self.fresh > 0 && (self.fresh * 8 >= self.objects.len() || quiet)
    }

    fn remove(&mut self, key: &Key) -> Option<Arc<Stored>> {
        let prev = self.objects.remove(key)?;
        if let Some(n) = self.per_namespace.get_mut(&key.0) {
            *n -= 1;
            if *n == 0 {
                self.per_namespace.remove(&key.0);
            }
        }
        Some(prev)
    }
}

/// The bucket of `storage`, created (named) when it has none yet.
fn bucket_mut<'a>(objects: &'a mut HashMap<String, Bucket>, storage: &str) -> &'a mut Bucket {
    if !objects.contains_key(storage) {
        objects.insert(
            storage.to_owned(),
            Bucket {
                name: storage.into(),
                ..Bucket::default()
            },
        );
    }
    objects
        .get_mut(storage)
        .expect("the bucket was inserted above")
}

/// The most expired objects one pass of [`Store::compact_expired`] deletes.
pub const EXPIRE_PER_PASS: usize = 1_000;

/// One scheduled expiry: the object `key` of `storage`, as written at revision `rv`, goes at
/// `due` (milliseconds since the epoch) unless written again.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Lease {
    due: u64,
    rv: u64,
    storage: StorageKey,
    key: Key,
}

/// The TTLs of the storages whose objects expire and the schedule of their expiries,
/// earliest first (see the module docs, "Objects that expire").
#[derive(Debug, Default)]
struct Leases {
    ttl_ms: Vec<(String, u64)>,
    due: BinaryHeap<Reverse<Lease>>,
}

impl Leases {
    fn ttl_of(&self, storage: &str) -> Option<u64> {
        self.ttl_ms
            .iter()
            .find(|(s, _)| s == storage)
            .map(|&(_, ttl)| ttl)
    }

    fn schedule(&mut self, due: u64, rv: u64, storage: &StorageKey, key: &Key) {
        self.due.push(Reverse(Lease {
            due,
            rv,
            storage: storage.clone(),
            key: key.clone(),
        }));
    }

    fn pop_due(&mut self, now_ms: u64) -> Option<Lease> {
        if self.due.peek()?.0.due > now_ms {
            return None;
        }
        self.due.pop().map(|Reverse(lease)| lease)
    }
}

/// What an object says of its last write (see the module docs, "Objects that expire"): its
/// revision and the times an object and an event recorder stamp, read from its bytes without
/// building a tree when it rests (a restart loads every object so).
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stamps {
    #[serde(default)]
    metadata: Option<MetaStamps>,
    #[serde(default)]
    first_timestamp: Option<String>,
    #[serde(default)]
    last_timestamp: Option<String>,
    #[serde(default)]
    event_time: Option<String>,
    #[serde(default)]
    series: Option<SeriesStamps>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaStamps {
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SeriesStamps {
    #[serde(default)]
    last_observed_time: Option<String>,
}

impl Stamps {
    /// Read from the object's bytes when it rests, else from its tree; a field of another
    /// type than expected reads as absent.
    fn of(obj: &Stored) -> Stamps {
        let parsed = match (obj.is_decoded(), obj.json()) {
            (false, Some(json)) => serde_json::from_slice::<Stamps>(json).ok(),
            _ => None,
        };
        parsed.unwrap_or_else(|| {
            obj.with_value(|v| {
                let stamp = |s: &str| v.pointer(s).and_then(Value::as_str).map(str::to_owned);
                Stamps {
                    metadata: Some(MetaStamps {
                        resource_version: stamp("/metadata/resourceVersion"),
                        creation_timestamp: stamp("/metadata/creationTimestamp"),
                    }),
                    first_timestamp: stamp("/firstTimestamp"),
                    last_timestamp: stamp("/lastTimestamp"),
                    event_time: stamp("/eventTime"),
                    series: Some(SeriesStamps {
                        last_observed_time: stamp("/series/lastObservedTime"),
                    }),
                }
            })
        })
    }

    /// `metadata.resourceVersion` as a number (0 when absent).
    fn rv(&self) -> u64 {
        self.metadata
            .as_ref()
            .and_then(|m| m.resource_version.as_deref())
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    }

    /// The newest of the stamped times in milliseconds since the epoch; 0 when there is none.
    fn written_at_ms(&self) -> u64 {
        let meta = self.metadata.as_ref();
        [
            meta.and_then(|m| m.creation_timestamp.as_deref()),
            self.first_timestamp.as_deref(),
            self.last_timestamp.as_deref(),
            self.event_time.as_deref(),
            self.series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_deref()),
        ]
        .into_iter()
        .map(|t| t.map_or(0, time_ms))
        .max()
        .unwrap_or(0)
    }
}

/// The revision of a stored object: read in place from its tree, or from its bytes when it
/// rests.
fn stored_rv(obj: &Stored) -> u64 {
    if obj.is_decoded() {
        obj.with_value(rv_of)
    } else {
        Stamps::of(obj).rv()
    }
}

/// An RFC 3339 time in milliseconds since the epoch; 0 when it does not parse.
fn time_ms(s: &str) -> u64 {
    s.parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .unwrap_or(0)
}

/// Everything stored, plus the resource table. Reached through [`Store::read`] / [`Store::write`].
#[derive(Debug)]
pub struct State<Reg> {
    rv: u64,
    objects: HashMap<String, Bucket>,
    history: VecDeque<Arc<Change>>,
    history_bytes: usize,
    early_compactions: u64,
    compacted: u64,
    limits: HistoryLimits,
    clock: fn() -> u64,
    /// Changes the history dropped during the current write: [`Store::write`] frees them after
    /// releasing the lock, so freeing old objects (3 % of the server's CPU at the At benchmark's
    /// rate) does not hold up other requests.
    retired: Vec<Arc<Change>>,
    /// Changes not yet handed to the disk (only when the store is durable).
    journal: Option<Vec<Arc<Change>>>,
    /// The storages whose objects expire, and when each of theirs does (see the module docs).
    leases: Leases,
    /// The storages whose writes keep the object's bytes only ([`crate::storage::stored`],
    /// "Written as bytes").
    rest_on_write: Vec<String>,
    /// The resources served (the API server's resource table, a type this module does not
    /// know); CRD registration edits it under the same lock as the objects.
    pub registry: Reg,
}

impl<Reg> State<Reg> {
    fn new(limits: HistoryLimits) -> Self
    where
        Reg: Default,
    {
        State {
            rv: 1,
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_bytes: 0,
            early_compactions: 0,
            compacted: 1,
            limits,
            clock: system_now_ms,
            retired: Vec::new(),
            journal: None,
            leases: Leases::default(),
            rest_on_write: Vec::new(),
            registry: Reg::default(),
        }
    }

    /// The bytes the history holds now (the `apiserver_storage_history_bytes` metric).
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// How many changes the history holds now.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// How often the byte or count bound dropped a change younger than the age bound.
    pub fn early_compactions(&self) -> u64 {
        self.early_compactions
    }

    /// The history limits in force.
    pub fn history_limits(&self) -> HistoryLimits {
        self.limits
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The oldest revision a watch may start from (older ones get 410).
    pub fn compacted_revision(&self) -> u64 {
        self.compacted
    }

    /// One stored object.
    pub fn get(&self, storage: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(storage)?
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|v| v.value())
    }

    /// One stored object, shared rather than copied (a handler that reads it while it writes).
    pub fn get_shared(&self, storage: &str, namespace: &str, name: &str) -> Option<Arc<Stored>> {
        self.objects
            .get(storage)?
            .objects
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Stored objects of a resource, ordered by namespace then name; `namespace: None` = all.
    pub fn list(&self, storage: &str, namespace: Option<&str>) -> Vec<&Value> {
        self.list_shared(storage, namespace)
            .into_iter()
            .map(|v| v.value())
            .collect()
    }

    /// How many objects a resource stores, in all namespaces (the object count API Priority
    /// and Fairness estimates a LIST's seats from).
    pub fn count(&self, storage: &str) -> usize {
        self.objects.get(storage).map_or(0, |b| b.objects.len())
    }

    /// [`State::list`] as the stored allocations themselves: a caller that keeps the objects
    /// past the lock (a watch's initial events) shares them instead of copying each one.
    pub fn list_shared(&self, storage: &str, namespace: Option<&str>) -> Vec<&Arc<Stored>> {
        let Some(map) = self.objects.get(storage).map(|b| &b.objects) else {
            return vec![];
        };
        match namespace {
            None => map.values().collect(),
            Some(ns) => map
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v)
                .collect(),
        }
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        if let Some(j) = &mut self.journal {
            j.push(change.clone());
        }
        self.history_bytes += change.bytes();
        self.history.push_back(change);
        self.trim((self.clock)());
    }

    /// Drops the changes the limits no longer allow, oldest first (see [`HistoryLimits`]).
    fn trim(&mut self, now_ms: u64) {
        let max_age = u64::try_from(self.limits.max_age.as_millis()).unwrap_or(u64::MAX);
        while let Some(oldest) = self.history.front() {
            let expired = now_ms.saturating_sub(oldest.at_ms) > max_age;
            let too_big = self.history_bytes > self.limits.max_bytes;
            let too_many = self
                .limits
                .max_changes
                .is_some_and(|n| self.history.len() > n);
            if !(expired || too_big || too_many) {
                break;
            }
            if !expired {
                self.early_compactions += 1;
            }
            if let Some(old) = self.history.pop_front() {
                self.history_bytes -= old.bytes();
                self.compacted = old.rv;
                self.retired.push(old);
            }
        }
    }

    /// Hands the changes recorded since the last call to the caller (the durable store), with
    /// the revision and compaction point they lead to.
    fn take_journal(&mut self) -> Option<Vec<Arc<Change>>> {
        self.journal.as_mut().map(std::mem::take)
    }

    /// Stores a new object (the caller has checked it does not exist) and returns it stamped
    /// with the new revision. The same write as [`State::update`], which records an `ADDED`
    /// change when there was no previous object.
    pub fn create(&mut self, storage: &str, obj: Value) -> Value {
        self.update(storage, obj)
    }

    /// Replaces a stored object and returns it stamped with the new revision.
    pub fn update(&mut self, storage: &str, obj: Value) -> Value {
        Stored::into_value(self.write(storage, obj))
    }

    /// [`State::update`] returning the stored object itself, shared with the store and the
    /// history instead of copied (the request handlers' path: they only read it to answer).
    ///
    /// A storage that rests on write ([`Store::rest_on_write`]) keeps the object's bytes
    /// only; the tree returned is the caller's alone ([`crate::storage::stored`], "Written as
    /// bytes").
    pub fn write(&mut self, storage: &str, mut obj: Value) -> Arc<Stored> {
        self.rv += 1;
        stamp(&mut obj, self.rv);
        crate::api::folded::fold(&mut obj);
        let key = key_of(&obj);
        let (obj, answer) = if self.rest_on_write.iter().any(|s| s == storage) {
            written_as_bytes(obj)
        } else {
            let obj = Arc::new(Stored::new(obj));
            (obj.clone(), obj)
        };
        let bucket = bucket_mut(&mut self.objects, storage);
        if let Some(ttl) = self.leases.ttl_of(storage) {
            let due = (self.clock)().saturating_add(ttl);
            self.leases.schedule(due, self.rv, &bucket.name, &key);
        }
        let prev = bucket.insert(key, obj.clone());
        let storage = bucket.name.clone();
        self.record(Change {
            rv: self.rv,
            storage,
            kind: if prev.is_some() {
                ChangeType::Modified
            } else {
                ChangeType::Added
            },
            object: obj.clone(),
            prev,
            at_ms: (self.clock)(),
            served: SharedEncoding::default(),
            size: Default::default(),
        });
        answer
    }

    /// Removes an object; returns its last state stamped with the deletion revision.
    pub fn delete(&mut self, storage: &str, namespace: &str, name: &str) -> Option<Value> {
        self.delete_as(storage, namespace, name, None)
    }

    /// Removes an object whose final state is `last` (an update that released the last
    /// finalizer): watchers see one DELETED event carrying `last`, never the intermediate write.
    pub fn delete_as(
        &mut self,
        storage: &str,
        namespace: &str,
        name: &str,
        last: Option<Value>,
    ) -> Option<Value> {
        let bucket = self.objects.get_mut(storage)?;
        let prev = bucket.remove(&(namespace.to_owned(), name.to_owned()))?;
        let storage = bucket.name.clone();
        self.rv += 1;
        let mut obj = last.unwrap_or_else(|| prev.value().clone());
        stamp(&mut obj, self.rv);
        crate::api::folded::fold(&mut obj);
        self.record(Change {
            rv: self.rv,
            storage,
            kind: ChangeType::Deleted,
            object: Arc::new(Stored::new(obj.clone())),
            prev: Some(prev),
            at_ms: (self.clock)(),
            served: SharedEncoding::default(),
            size: Default::default(),
        });
        Some(obj)
    }

    /// The changes with a revision above `rv`, oldest first; `Err(compacted)` when some of them
    /// have been compacted away.
    pub fn changes_since(&self, rv: u64) -> Result<Vec<Arc<Change>>, u64> {
        self.changes_after(rv, usize::MAX)
    }

    /// [`Self::changes_since`], at most the first `max` of them.
    pub fn changes_after(&self, rv: u64, max: usize) -> Result<Vec<Arc<Change>>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history.range(start..).take(max).cloned().collect())
    }

    /// How many changes of `storage` the history holds after revision `rv`.
    pub fn count_changes_after(&self, rv: u64, storage: &str) -> usize {
        let start = self.history.partition_point(|c| c.rv <= rv);
        self.history
            .range(start..)
            .filter(|c| c.storage == storage)
            .count()
    }

    /// A resource as it was at revision `rv` (the current revision or older), without copying
    /// it: see [`Snapshot`]. `Err(compacted)` when the history needed has been compacted.
    pub fn snapshot_at(&self, storage: &str, rv: u64) -> Result<Snapshot<'_>, u64> {
        if rv < self.compacted {
            return Err(self.compacted);
        }
        let mut undo: BTreeMap<Key, Option<&Arc<Stored>>> = BTreeMap::new();
        let start = self.history.partition_point(|c| c.rv <= rv);
        for change in self.history.range(start..) {
            if change.storage != storage {
                continue;
            }
            // The oldest change after `rv` holds the state at `rv`: keep the first one seen.
            let before = match change.kind {
                ChangeType::Added => None,
                ChangeType::Modified | ChangeType::Deleted => change.prev.as_ref(),
            };
            // The key read without decoding a rested object (a paged LIST after a restart
            // would otherwise decode every change since its revision).
            undo.entry(change.object.key()).or_insert(before);
        }
        Ok(Snapshot {
            bucket: self.objects.get(storage),
            undo,
        })
    }

    /// First pass of [`Store::shed`]: the objects (live and in the history) not read since the
    /// previous pass that still hold a tree. Each allocation is looked at once, however many
    /// places share it.
    fn shed_candidates(&self) -> Vec<Arc<Stored>> {
        let mut seen: std::collections::HashSet<*const Stored, PtrHash> = Default::default();
        let mut out = Vec::new();
        let mut visit = |s: &Arc<Stored>| {
            if (s.is_decoded() || s.is_unhomed()) && seen.insert(Arc::as_ptr(s)) && s.age() {
                out.push(s.clone());
            }
        };
        for bucket in self.objects.values() {
            bucket.objects.values().for_each(&mut visit);
        }
        for change in &self.history {
            visit(&change.object);
            if let Some(prev) = &change.prev {
                visit(prev);
            }
        }
        out
    }

    /// Last pass of [`Store::shed`]: every object still unread whose bytes are encoded is
    /// replaced by its bytes-only copy, in the live objects and in the history. Returns what
    /// was replaced (the objects, the maps and history entries that held them), to be dropped
    /// once the lock is released, on another thread ([`Garbage`]).
    ///
    /// What surrounds a rested object is copied too: the keys and map nodes of a resource with
    /// rested objects, and the history entries that held one. A write allocates those on the
    /// request's thread, among the tree's own allocations; left there, a few hundred long-lived
    /// bytes per object keep most of the pages the freed trees occupied from going back to the
    /// system (measured: 25 MB in use in 118 MB of heap after 10,000 Ats had rested). Copied
    /// here, on the shedding thread, the pages the trees leave are free as a whole.
    fn rest(&mut self) -> Garbage {
        let mut garbage = Garbage::default();
        let mut replaced = Vec::new();
        // The live object and the history entries that share it share its rested copy too.
        let mut copies: HashMap<*const Stored, Arc<Stored>, PtrHash> = HashMap::default();
        let mut rest = |obj: &Arc<Stored>, replaced: &mut Vec<Arc<Stored>>| {
            if !obj.can_rest() {
                return None;
            }
            if let Some(copy) = copies.get(&Arc::as_ptr(obj)) {
                replaced.push(obj.clone());
                return Some(copy.clone());
            }
            let copy = Arc::new(obj.rested()?);
            copies.insert(Arc::as_ptr(obj), copy.clone());
            replaced.push(obj.clone());
            Some(copy)
        };
        for bucket in self.objects.values_mut() {
            let resting = bucket.objects.values().filter(|o| o.can_rest()).count();
            let rebuild = bucket.rebuild_for(resting);
            if resting == 0 {
                continue;
            }
            if !rebuild {
                // Replaced in place: the map's keys and nodes stay where they are.
                for slot in bucket.objects.values_mut() {
                    if let Some(copy) = rest(slot, &mut replaced) {
                        *slot = copy;
                    }
                }
                continue;
            }
            // Built from borrows, the old map kept whole for the garbage: freeing its nodes
            // and keys here would hand their memory straight back to this loop's copies.
            let old = std::mem::take(&mut bucket.objects);
            bucket.objects = old
                .iter()
                .map(|((ns, name), obj)| {
                    let key = (ns.as_str().to_owned(), name.as_str().to_owned());
                    let obj = rest(obj, &mut replaced).unwrap_or_else(|| obj.clone());
                    (key, obj)
                })
                .collect();
            garbage.maps.push(old);
            bucket.fresh = 0;
            bucket.fresh_seen = 0;
        }
        for change in self.history.iter_mut() {
            if !change.object.can_rest() && !change.prev.as_ref().is_some_and(|p| p.can_rest()) {
                continue;
            }
            let object = rest(&change.object, &mut replaced);
            let prev = change.prev.as_ref().and_then(|p| rest(p, &mut replaced));
            if object.is_none() && prev.is_none() {
                continue;
            }
            let fresh = Arc::new(Change {
                rv: change.rv,
                storage: change.storage.clone(),
                kind: change.kind,
                object: object.unwrap_or_else(|| change.object.clone()),
                prev: prev.or_else(|| change.prev.clone()),
                at_ms: change.at_ms,
                // A watch that still needs this change's encoding makes it again.
                served: SharedEncoding::default(),
                // Measured again: the byte bound charges what the history holds, and a rested
                // object holds its JSON (see the module docs, "The history window").
                size: Default::default(),
            });
            self.history_bytes = self.history_bytes - change.bytes() + fresh.bytes();
            garbage.changes.push(std::mem::replace(change, fresh));
        }
        garbage.objects = replaced;
        garbage
    }

    /// Deletes the objects whose lease ran out by `now_ms` and that were not written since it
    /// was taken, at most `max` of them (see the module docs, "Objects that expire"); each
    /// deletion is a `DELETED` change like any other. Returns how many were deleted.
    pub fn expire(&mut self, now_ms: u64, max: usize) -> usize {
        let mut deleted = 0;
        while deleted < max {
            let Some(lease) = self.leases.pop_due(now_ms) else {
                break;
            };
            let current = self
                .objects
                .get(lease.storage.as_str())
                .and_then(|b| b.objects.get(&lease.key))
                .map(|o| stored_rv(o));
            if current == Some(lease.rv) {
                let (ns, name) = &lease.key;
                self.delete(&lease.storage, ns, name);
                deleted += 1;
            }
        }
        deleted
    }

    /// Drops the whole event history: every watch or exact list from an older revision now
    /// gets 410. A test hook to exercise clients' relist paths deterministically.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_bytes = 0;
        self.compacted = self.rv;
    }

    /// Removes every object of a resource (CRD deletion), recording DELETED changes.
    pub fn delete_all(&mut self, storage: &str) -> Vec<Value> {
        let keys: Vec<Key> = self
            .objects
            .get(storage)
            .map(|b| b.objects.keys().cloned().collect())
            .unwrap_or_default();
        keys.into_iter()
            .filter_map(|(ns, name)| self.delete(storage, &ns, &name))
            .collect()
    }
}

/// One resource as it was at some revision, read without copying (see the module docs):
/// the current objects plus an undo table for the keys written since.
#[derive(Debug)]
pub struct Snapshot<'a> {
    bucket: Option<&'a Bucket>,
    undo: BTreeMap<Key, Option<&'a Arc<Stored>>>,
}

impl<'a> Snapshot<'a> {
    /// How many keys were written since the snapshot's revision (the size of the undo table).
    pub fn changed_keys(&self) -> usize {
        self.undo.len()
    }

    /// One object as it was.
    pub fn get(&self, key: &Key) -> Option<&'a Value> {
        match self.undo.get(key) {
            Some(then) => then.map(|v| v.value()),
            None => self
                .bucket
                .and_then(|b| b.objects.get(key))
                .map(|v| v.value()),
        }
    }

    /// The objects in `namespace` (`None` = all), in key order, starting after the key
    /// `after` (exclusive) when given: one page of a paged LIST is `range(ns, token_key).take(limit)`.
    /// Borrowed, never copied (a caller that keeps an object clones its `Arc`); the cost is the
    /// keys visited, not the size of the resource.
    pub fn range<'s>(
        &'s self,
        namespace: Option<&'s str>,
        after: Option<&Key>,
    ) -> impl Iterator<Item = (&'s Key, &'s Arc<Stored>)> + use<'s, 'a> {
        let lower: Bound<Key> = match (namespace, after) {
            (Some(ns), Some(k)) if k.0.as_str() >= ns => Bound::Excluded(k.clone()),
            (Some(ns), _) => Bound::Included((ns.to_owned(), String::new())),
            (None, Some(k)) => Bound::Excluded(k.clone()),
            (None, None) => Bound::Unbounded,
        };
        let range = (lower, Bound::<Key>::Unbounded);
        let current = self
            .bucket
            .map(|b| b.objects.range(range.clone()))
            .into_iter()
            .flatten();
        let undo = self.undo.range(range);
        Merge {
            current: current.peekable(),
            undo: undo.peekable(),
        }
        .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns))
    }

    /// How many objects `namespace` (`None` = all) held: the current count corrected by the
    /// undo table.
    pub fn count(&self, namespace: Option<&str>) -> usize {
        let current = match (self.bucket, namespace) {
            (None, _) => 0,
            (Some(b), None) => b.objects.len(),
            (Some(b), Some(ns)) => b.per_namespace.get(ns).copied().unwrap_or(0),
        };
        let mut n = current as i64;
        for (key, then) in &self.undo {
            if namespace.is_some_and(|ns| key.0 != ns) {
                continue;
            }
            let now = self.bucket.is_some_and(|b| b.objects.contains_key(key));
            n += i64::from(then.is_some()) - i64::from(now);
        }
        usize::try_from(n).unwrap_or(0)
    }
}

/// The ordered merge of the current objects and the undo table behind [`Snapshot::range`].
struct Merge<'s, 'a, C: Iterator<Item = (&'a Key, &'a Arc<Stored>)>> {
    current: Peekable<C>,
    undo: Peekable<std::collections::btree_map::Range<'s, Key, Option<&'a Arc<Stored>>>>,
}

impl<'s, 'a: 's, C: Iterator<Item = (&'a Key, &'a Arc<Stored>)>> Iterator for Merge<'s, 'a, C> {
    type Item = (&'s Key, &'s Arc<Stored>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_undo = match (self.current.peek(), self.undo.peek()) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((c, _)), Some((u, _))) => {
                    if c == u {
                        // Written since: the undo table's value wins over the current one.
                        self.current.next();
                        true
                    } else {
                        u < c
                    }
                }
            };
            if !take_undo {
                return self.current.next();
            }
            if let Some((key, Some(then))) = self.undo.next() {
                return Some((key, *then));
            }
            // Created since the snapshot's revision: it did not exist then.
        }
    }
}

/// The shared store: [`State`] behind a mutex plus the revision broadcast, and, when durable,
/// the on-disk copy ([`crate::storage::durable`]).
#[derive(Debug)]
pub struct Store<Reg> {
    state: Mutex<State<Reg>>,
    rv_tx: watch::Sender<u64>,
    disk: Option<Disk>,
    /// Watchers closed as unresponsive, by (group, resource): see [`crate::endpoints::watch`].
    terminated_watchers: Mutex<BTreeMap<(String, String), u64>>,
}

impl<Reg: Default> Store<Reg> {
    /// An in-memory store keeping at most `window` changes of history (and the default age
    /// and byte bounds).
    pub fn new(window: usize) -> Self {
        Store::with_limits(HistoryLimits::with_max_changes(window))
    }

    /// An in-memory store with these history limits.
    pub fn with_limits(limits: HistoryLimits) -> Self {
        Store::from_state(State::new(limits), None)
    }

    fn from_state(state: State<Reg>, disk: Option<Disk>) -> Self {
        let (rv_tx, _) = watch::channel(state.rv);
        Store {
            state: Mutex::new(state),
            rv_tx,
            disk,
            terminated_watchers: Mutex::default(),
        }
    }

    /// A durable store in `dir` (created if missing): loads the objects, the revision and the
    /// history written there before, and commits every later write before it returns.
    /// `on_load` then sees the loaded state (the server serves the CustomResourceDefinitions found
    /// there again). The history is trimmed to `limits` at once.
    pub fn open(
        limits: HistoryLimits,
        dir: &Path,
        on_load: impl FnOnce(&mut State<Reg>),
    ) -> Result<Self, DiskError> {
        let (disk, loaded) = Disk::open(dir)?;
        let mut state = State::new(limits);
        if loaded.rv > 0 {
            state.rv = loaded.rv;
            state.compacted = loaded.compacted.max(1);
            // Bytes-only, and each version one allocation as before the restart (the loader
            // shares a change's previous object with the key's change before it, and the
            // newest change's object with the live one): see [`crate::storage::durable`].
            for (storage, key, obj) in loaded.objects {
                let bucket = bucket_mut(&mut state.objects, &storage);
                bucket.name = storage;
                bucket.insert(key, obj);
            }
            for change in loaded.history {
                state.history_bytes += change.bytes();
                state.history.push_back(Arc::new(change));
            }
            state.trim((state.clock)());
        }
        // Before the journal starts: whatever `on_load` changes is not written back.
        on_load(&mut state);
        state.journal = Some(Vec::new());
        Ok(Store::from_state(state, Some(disk)))
    }
}

impl<Reg> Store<Reg> {
    /// Drops the changes older than the history's age bound now, whether or not anyone writes
    /// (etcd compacts on a timer, and kube-apiserver's watch cache lets old events go with it):
    /// a client that comes back with a revision older than the window gets `410 Gone` and
    /// lists again. Writes trim the history too; this is for the quiet times in between.
    pub fn compact_expired(&self) {
        self.write(|st| {
            let now = (st.clock)();
            st.trim(now);
            st.expire(now, EXPIRE_PER_PASS);
        });
    }

    /// Makes every write of `storage` keep the object's bytes only, not its tree
    /// ([`crate::storage::stored`], "Written as bytes"): for a storage written far more than
    /// it is read, events.
    pub fn rest_on_write(&self, storage: &str) {
        self.write(|st| {
            if !st.rest_on_write.iter().any(|s| s == storage) {
                st.rest_on_write.push(storage.to_owned());
            }
        });
    }

    /// Gives the objects of `storage` a time to live (kube-apiserver's `--event-ttl` for
    /// events): each is deleted `ttl` after its last write unless written again (see the
    /// module docs, "Objects that expire"). The objects stored already (loaded from the data
    /// directory) get their leases from when they were last written. A TTL of zero keeps
    /// them (etcd attaches no lease then).
    pub fn expire_after(&self, storage: &str, ttl: Duration) {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.write(|st| {
            st.leases.ttl_ms.retain(|(s, _)| s != storage);
            st.leases.due.retain(|l| l.0.storage.as_str() != storage);
            if ttl_ms == 0 {
                return;
            }
            st.leases.ttl_ms.push((storage.to_owned(), ttl_ms));
            let Some(bucket) = st.objects.get(storage) else {
                return;
            };
            // The last write of each key still in the history, by its clock.
            let mut last_change: HashMap<Key, u64> = HashMap::new();
            for c in st.history.iter() {
                if c.storage.as_str() == storage && c.kind != ChangeType::Deleted {
                    last_change.insert(c.object.key(), c.at_ms);
                }
            }
            let mut due = Vec::with_capacity(bucket.objects.len());
            for (key, obj) in &bucket.objects {
                let stamps = Stamps::of(obj);
                let (rv, stamped) = (stamps.rv(), stamps.written_at_ms());
                let written = last_change.get(key).copied().unwrap_or(0).max(stamped);
                due.push(Lease {
                    due: written.saturating_add(ttl_ms),
                    rv,
                    storage: bucket.name.clone(),
                    key: key.clone(),
                });
            }
            st.leases.due.extend(due.into_iter().map(Reverse));
        });
    }

    /// How often [`Store::compact_expired`] runs: a tenth of the age bound, between 50 ms and
    /// 1 s, so a revision outlives the bound by at most that much.
    pub fn compaction_interval(&self) -> Duration {
        let age = self.read(|st| st.limits.max_age);
        (age / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// Whether writes are committed to disk (`--data-dir`).
    pub fn is_durable(&self) -> bool {
        self.disk.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<Reg>> {
        // A panic while holding the lock cannot leave a half-written object (every write is a
        // single map insert), so a poisoned lock is safe to keep using.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` with shared access to the state.
    pub fn read<R>(&self, f: impl FnOnce(&State<Reg>) -> R) -> R {
        f(&self.lock())
    }

    /// The write, and whether its commit succeeded.
    fn write_inner<R>(&self, f: impl FnOnce(&mut State<Reg>) -> R) -> (R, Result<(), String>) {
        let (out, before, after, ticket, retired) = {
            let mut st = self.lock();
            let before = st.rv;
            let compacted_before = st.compacted;
            let out = f(&mut st);
            let retired = std::mem::take(&mut st.retired);
            let ticket = match (&self.disk, st.take_journal()) {
                (Some(disk), Some(changes))
                    if !changes.is_empty() || st.compacted != compacted_before =>
                {
                    Some(disk.enqueue(changes, st.rv, st.compacted))
                }
                _ => None,
            };
            (out, before, st.rv, ticket, retired)
        };
        // The lock is released: free what the history dropped.
        drop(retired);
        let mut committed = Ok(());
        if let (Some(disk), Some(ticket)) = (&self.disk, ticket) {
            // A failed commit leaves the write queued; the disk logs it and turns read-only.
            committed = disk.wait(ticket);
        }
        if after != before {
            self.rv_tx.send_replace(after);
        }
        (out, committed)
    }

    /// Runs `f` with exclusive access, makes its changes durable (when the store is), then
    /// wakes every watcher if the revision moved. Durable: blocks until the commit holding
    /// this write is on disk (group commit, see the module docs). A write that cannot be
    /// committed (a full disk) stays in memory and queued; see [`Store::write_checked`] for
    /// the writes that must answer a client.
    pub fn write<R>(&self, f: impl FnOnce(&mut State<Reg>) -> R) -> R {
        self.write_inner(f).0
    }

    /// [`Store::write`] for a client's request: while the data directory cannot take commits
    /// (etcd's `NOSPACE`, see [`crate::storage::durable`]) the write is refused before it runs, after
    /// one attempt to recover, with `500` `etcdserver: mvcc: database space exceeded`; a write
    /// whose own commit fails gets the same answer. Reads are never refused.
    pub fn write_checked<T, E: From<crate::api::status::ApiError>>(
        &self,
        f: impl FnOnce(&mut State<Reg>) -> Result<T, E>,
    ) -> Result<T, E> {
        let nospace = || {
            crate::api::status::ApiError::new(500, "", "etcdserver: mvcc: database space exceeded")
        };
        if let Some(disk) = &self.disk
            && disk.failure().is_some()
            && disk.recover().is_err()
        {
            return Err(nospace().into());
        }
        let (out, committed) = self.write_inner(f);
        if committed.is_err() {
            return Err(nospace().into());
        }
        out
    }

    /// Fault injection for a durable store: while `full`, commits fail as on a full disk, so
    /// the read-only state and the recovery can be tested without filling one. No effect on a
    /// store kept in memory.
    pub fn simulate_disk_full(&self, full: bool) {
        if let Some(disk) = &self.disk {
            disk.simulate_full(full);
        }
    }

    /// The store's gauges in the Prometheus text format: `apiserver_storage_history_bytes`,
    /// `apiserver_storage_history_changes`, `apiserver_storage_history_limit_bytes`,
    /// `apiserver_storage_history_early_compactions_total`,
    /// `apiserver_storage_compacted_revision`, and the counter
    /// `apiserver_terminated_watchers_total{group,resource}`.
    pub fn prometheus_text(&self) -> String {
        let (bytes, len, limit, early, compacted, mut objects) = self.read(|s| {
            let objects: Vec<(String, usize)> = s
                .objects
                .iter()
                .map(|(storage, b)| (resource_label(storage), b.objects.len()))
                .collect();
            (
                s.history_bytes,
                s.history.len(),
                s.limits.max_bytes,
                s.early_compactions,
                s.compacted,
                objects,
            )
        });
        objects.sort();
        let mut text = format!(
            "# HELP apiserver_storage_history_bytes Bytes held by the watch and continue history.\n\
             # TYPE apiserver_storage_history_bytes gauge\napiserver_storage_history_bytes {bytes}\n\
             # HELP apiserver_storage_history_changes Changes held by the watch and continue history.\n\
             # TYPE apiserver_storage_history_changes gauge\napiserver_storage_history_changes {len}\n\
             # HELP apiserver_storage_history_limit_bytes The history's byte bound.\n\
             # TYPE apiserver_storage_history_limit_bytes gauge\napiserver_storage_history_limit_bytes {limit}\n\
             # HELP apiserver_storage_history_early_compactions_total Changes dropped by the byte or count bound before their age bound.\n\
             # TYPE apiserver_storage_history_early_compactions_total counter\napiserver_storage_history_early_compactions_total {early}\n\
             # HELP apiserver_storage_compacted_revision The oldest revision a watch or continue token may start from.\n\
             # TYPE apiserver_storage_compacted_revision gauge\napiserver_storage_compacted_revision {compacted}\n"
        );
        text.push_str(
            "# HELP apiserver_storage_objects Number of stored objects at the time of last check split by kind.\n\
             # TYPE apiserver_storage_objects gauge\n",
        );
        for (resource, n) in objects {
            text.push_str(&format!(
                "apiserver_storage_objects{{resource=\"{resource}\"}} {n}\n"
            ));
        }
        text.push_str(
            "# HELP apiserver_terminated_watchers_total Counter of watchers closed due to unresponsiveness broken by resource type.\n\
             # TYPE apiserver_terminated_watchers_total counter\n",
        );
        let terminated = self
            .terminated_watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for ((group, resource), n) in terminated.iter() {
            text.push_str(&format!(
                "apiserver_terminated_watchers_total{{group=\"{group}\",resource=\"{resource}\"}} {n}\n"
            ));
        }
        text
    }

    /// Counts a watcher closed because its client did not read (the cacher's
    /// `apiserver_terminated_watchers_total`).
    pub fn count_terminated_watcher(&self, group: &str, resource: &str) {
        let mut m = self
            .terminated_watchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *m.entry((group.to_owned(), resource.to_owned()))
            .or_default() += 1;
    }

    /// Lets objects nobody has read for a while rest as JSON bytes ([`crate::storage::stored`]): under
    /// the lock, finds the objects unread since the previous call; outside it, encodes them;
    /// under the lock again, replaces those still unread by their bytes. Returns what was
    /// replaced, for the caller to drop on another thread ([`Garbage`]). Holds the lock for two
    /// walks over the objects and the history, never while encoding or freeing.
    pub fn shed(&self) -> Garbage {
        let candidates = self.read(State::<Reg>::shed_candidates);
        if candidates.is_empty() {
            return Garbage::default();
        }
        for c in &candidates {
            c.encode();
        }
        drop(candidates);
        self.lock().rest()
    }

    /// A receiver that changes whenever the revision moves; pair it with
    /// [`State::changes_since`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// The current global revision.
    pub fn resource_version(&self) -> u64 {
        self.read(|s| s.rv)
    }

    /// Waits until the revision reaches `rv` or `timeout` passes, whichever comes first, and
    /// answers whether it was reached. Holds no lock while it waits (the watch cache's
    /// `waitUntilFreshAndBlock`, see [`TOO_LARGE_WAIT`](crate::endpoints::watch::TOO_LARGE_WAIT)).
    pub async fn wait_for_revision(&self, rv: u64, timeout: std::time::Duration) -> bool {
        let mut rx = self.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|current| *current >= rv))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Runs [`Store::compact_expired`] every [`Store::compaction_interval`] until `stop`.
pub async fn compact_on_time<Reg>(
    store: Arc<Store<Reg>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(store.compaction_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => store.compact_expired(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Store = super::Store<()>;
    type State = super::State<()>;
    use serde_json::json;

    fn cm(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "data": {"v": v}})
    }

    static FAKE_NOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn fake_now() -> u64 {
        FAKE_NOW.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn history_keeps_every_revision_younger_than_max_age_whatever_the_count() {
        let mut st = State::new(HistoryLimits::default());
        st.clock = fake_now;
        FAKE_NOW.store(1_000_000, std::sync::atomic::Ordering::SeqCst);
        let first = st.create("core/configmaps", cm("a", "0"));
        // 20,000 writes within the age bound: nothing is compacted, by count or otherwise.
        for i in 0..20_000 {
            st.update("core/configmaps", cm("a", &i.to_string()));
        }
        assert_eq!(st.history_len(), 20_001);
        assert!(st.changes_since(rv_of(&first) - 1).is_ok());
        // Five minutes and a bit later, the next write trims everything older.
        FAKE_NOW.store(1_000_000 + 300_001, std::sync::atomic::Ordering::SeqCst);
        let last = st.update("core/configmaps", cm("a", "late"));
        assert_eq!(st.history_len(), 1);
        assert_eq!(st.compacted_revision(), rv_of(&last) - 1);
        assert!(st.changes_since(rv_of(&first)).is_err());
        assert_eq!(st.early_compactions(), 0);
        assert_eq!(st.history_bytes(), st.history[0].bytes());
    }

    #[test]
    fn history_bytes_stay_under_the_bound_for_large_objects() {
        let limit = 8 << 20;
        let store = Store::with_limits(HistoryLimits {
            max_bytes: limit,
            ..HistoryLimits::default()
        });
        let big = "x".repeat(500 * 1024);
        for i in 0..300 {
            store.write(|s| s.update("core/configmaps", cm("big", &format!("{i}{big}"))));
            store.read(|s| assert!(s.history_bytes() <= limit, "{}", s.history_bytes()));
        }
        store.read(|s| {
            // Each change is charged its object (~500 KB; the object before it is the previous
            // change's): about 16 of them fit.
            assert!((15..=16).contains(&s.history_len()), "{}", s.history_len());
            assert!(s.early_compactions() > 0);
            let sum: usize = s.history.iter().map(|c| c.bytes()).sum();
            assert_eq!(sum, s.history_bytes());
        });
        let text = store.prometheus_text();
        assert!(
            text.contains("\napiserver_storage_history_limit_bytes 8388608\n"),
            "{text}"
        );
        assert!(text.contains("apiserver_storage_history_bytes "), "{text}");
    }

    /// The history as values: `(rv, kind, object, prev)`, read without keeping trees.
    fn history_values(s: &State) -> Vec<(u64, ChangeType, Value, Option<Value>)> {
        s.history
            .iter()
            .map(|c| {
                (
                    c.rv,
                    c.kind,
                    c.object.with_value(Value::clone),
                    c.prev.as_ref().map(|p| p.with_value(Value::clone)),
                )
            })
            .collect()
    }

    // The clock of the expiry tests (their own, so other tests' clocks do not move it).
    static LEASE_NOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    fn lease_now() -> u64 {
        LEASE_NOW.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn event(name: &str, last: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default",
                            "creationTimestamp": "2026-01-01T00:00:00Z"},
               "lastTimestamp": last, "reason": "Started"})
    }

    fn names(s: &State, storage: &str) -> Vec<String> {
        s.list(storage, None)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    #[test]
    fn events_expire_a_ttl_after_their_last_write_and_watchers_see_them_deleted() {
        let store = Store::with_limits(HistoryLimits::default());
        let t0 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        LEASE_NOW.store(t0, std::sync::atomic::Ordering::SeqCst);
        store.write(|s| s.clock = lease_now);
        store.expire_after("core/events", Duration::from_secs(3600));
        let (a, b) = store.write(|s| {
            let a = s.create("core/events", event("a", "2026-01-01T00:00:00Z"));
            let b = s.create("core/events", event("b", "2026-01-01T00:00:00Z"));
            s.create("core/configmaps", cm("c", "1"));
            (a, b)
        });
        // Half an hour later `b` is written again: its hour starts over.
        LEASE_NOW.store(t0 + 1_800_000, std::sync::atomic::Ordering::SeqCst);
        store.write(|s| s.update("core/events", b.clone()));
        // One hour after `a`'s write: `a` goes, `b` stays, the ConfigMap has no TTL.
        LEASE_NOW.store(t0 + 3_600_000, std::sync::atomic::Ordering::SeqCst);
        store.compact_expired();
        store.read(|s| {
            assert_eq!(names(s, "core/events"), ["b"]);
            assert_eq!(names(s, "core/configmaps"), ["c"]);
            // Watchers see a DELETED event carrying the last state.
            let last = s.history.back().unwrap();
            assert_eq!(last.kind, ChangeType::Deleted);
            assert_eq!(last.object.key(), ("default".into(), "a".into()));
            assert_eq!(last.prev.as_ref().map(|p| rv_of(p)), Some(rv_of(&a)));
        });
        // An hour after `b`'s second write it goes too.
        LEASE_NOW.store(t0 + 5_400_000, std::sync::atomic::Ordering::SeqCst);
        store.compact_expired();
        store.read(|s| assert!(names(s, "core/events").is_empty()));
    }

    #[test]
    fn a_pass_expires_at_most_its_share_and_a_zero_ttl_keeps_events() {
        let store = Store::with_limits(HistoryLimits::default());
        store.expire_after("core/events", Duration::from_millis(1));
        let n = EXPIRE_PER_PASS + 5;
        store.write(|s| {
            for i in 0..n {
                s.create("core/events", event(&format!("e{i}"), ""));
            }
        });
        std::thread::sleep(Duration::from_millis(5));
        store.compact_expired();
        assert_eq!(store.read(|s| s.count("core/events")), 5);
        store.compact_expired();
        assert_eq!(store.read(|s| s.count("core/events")), 0);
        // TTL zero: nothing expires, whatever was scheduled before.
        store.write(|s| s.create("core/events", event("kept", "")));
        store.expire_after("core/events", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        store.compact_expired();
        assert_eq!(store.read(|s| s.count("core/events")), 1);
    }

    #[test]
    fn a_restart_keeps_each_event_s_lease_from_its_last_write() {
        let dir = tempfile::tempdir().unwrap();
        let now = system_now_ms();
        let stamp = |ms: u64| {
            jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap())
                .unwrap()
                .to_string()
        };
        {
            let store = Store::open(HistoryLimits::default(), dir.path(), |_| {}).unwrap();
            store.write(|s| {
                // Written 59 minutes ago (by its stamps; older than the history), and now.
                s.create("core/events", event("old", &stamp(now - 59 * 60_000)));
                s.create("core/events", event("new", &stamp(now)));
            });
            // Rested as bytes, as a restart loads them.
            for _ in 0..super::super::stored::REST_AFTER_PASSES {
                store.shed();
            }
        }
        // Reopened with a history too short to hold either write: only the stamps tell.
        std::thread::sleep(Duration::from_millis(5));
        let short = HistoryLimits {
            max_age: Duration::from_millis(1),
            ..HistoryLimits::default()
        };
        let store = Store::open(short, dir.path(), |_| {}).unwrap();
        assert_eq!(store.read(|s| s.history_len()), 0);
        store.expire_after("core/events", Duration::from_secs(3600));
        store.read(|s| assert_eq!(decoded(s), 0));
        // A minute and a bit after the restart, `old` has had its hour; `new` has not.
        LEASE_NOW.store(now + 61_000, std::sync::atomic::Ordering::SeqCst);
        store.write(|s| s.clock = lease_now);
        store.compact_expired();
        store.read(|s| assert_eq!(names(s, "core/events"), ["new"]));
    }

    #[test]
    fn a_durable_store_reopens_with_the_same_objects_revision_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let (rv, a_rv, before, rested_bytes) = {
            let store = Store::open(HistoryLimits::default(), dir.path(), |_| {}).unwrap();
            let a = store.write(|s| s.create("core/configmaps", cm("a", "1")));
            store.write(|s| s.create("core/configmaps", cm("b", "1")));
            store.write(|s| s.update("core/configmaps", cm("a", "2")));
            store.write(|s| s.delete("core/configmaps", "default", "b"));
            store.write(|s| s.create("core/secrets", cm("a", "x")));
            let before = store.read(history_values);
            // Rested, the history is charged what a restart loads: the objects' JSON.
            for _ in 0..super::super::stored::REST_AFTER_PASSES {
                store.shed();
            }
            assert_eq!(store.read(decoded), 0);
            let bytes = store.read(|s| s.history_bytes());
            (store.resource_version(), rv_of(&a), before, bytes)
        };
        let store = Store::open(HistoryLimits::default(), dir.path(), |_| {}).unwrap();
        assert_eq!(store.resource_version(), rv);
        store.read(|s| {
            // Loaded as bytes: no object, live or in the history, holds a tree.
            assert_eq!(decoded(s), 0);
            assert_eq!(s.history_bytes(), rested_bytes);
            let sum: usize = s.history.iter().map(|c| c.bytes()).sum();
            assert_eq!(s.history_bytes(), sum);
            // Each version is one allocation again: a's update holds a's creation as its
            // previous object, b's deletion b's creation, and the live objects are the
            // newest changes'.
            let h = &s.history;
            assert!(Arc::ptr_eq(h[2].prev.as_ref().unwrap(), &h[0].object));
            assert!(Arc::ptr_eq(h[3].prev.as_ref().unwrap(), &h[1].object));
            let live =
                |storage: &str| s.objects[storage].objects[&("default".into(), "a".into())].clone();
            assert!(Arc::ptr_eq(&live("core/configmaps"), &h[2].object));
            assert!(Arc::ptr_eq(&live("core/secrets"), &h[4].object));
            assert!(std::ptr::eq(
                h[0].storage.as_str(),
                s.objects["core/configmaps"].name.as_str()
            ));
            // Reading the past (a paged LIST's snapshot, a watch's changes) decodes nothing.
            let snap = s.snapshot_at("core/configmaps", a_rv).unwrap();
            assert_eq!(snap.count(None), 1);
            assert_eq!(snap.changed_keys(), 2);
            let since = s.changes_since(a_rv).unwrap();
            let kinds: Vec<_> = since.iter().map(|c| c.kind).collect();
            assert_eq!(
                kinds,
                vec![
                    ChangeType::Added,
                    ChangeType::Modified,
                    ChangeType::Deleted,
                    ChangeType::Added
                ]
            );
            assert_eq!(decoded(s), 0);
            // Exactly what was written.
            assert_eq!(history_values(s), before);
            assert_eq!(
                s.get("core/configmaps", "default", "a").unwrap()["data"]["v"],
                "2"
            );
            assert!(s.get("core/configmaps", "default", "b").is_none());
        });
        // The counter continues.
        let c = store.write(|s| s.create("core/configmaps", cm("c", "1")));
        assert_eq!(rv_of(&c), rv + 1);
        // A compaction is durable too.
        store.write(|s| s.compact());
        drop(store);
        let store = Store::open(HistoryLimits::default(), dir.path(), |_| {}).unwrap();
        store.read(|s| {
            assert_eq!(s.compacted_revision(), rv + 1);
            assert_eq!(s.history_len(), 0);
        });
    }

    #[test]
    fn every_write_bumps_the_one_global_revision() {
        let store = Store::new(100);
        let a = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        let b = store.write(|s| s.create("core/pods", cm("b", "1")));
        assert_eq!(rv_of(&b), rv_of(&a) + 1);
        let d = store
            .write(|s| s.delete("core/configmaps", "default", "a"))
            .unwrap();
        assert_eq!(rv_of(&d), rv_of(&b) + 1);
        assert_eq!(store.resource_version(), rv_of(&d));
    }

    #[test]
    fn history_is_trimmed_to_the_window_and_older_reads_are_refused() {
        let store = Store::new(2);
        let first = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.update("core/configmaps", cm("a", "3")));
        store.read(|s| {
            assert!(s.changes_since(rv_of(&first) - 1).is_err());
            let since = s.changes_since(rv_of(&first) + 1).unwrap();
            assert_eq!(since.len(), 1);
            assert_eq!(since[0].object["data"]["v"], "3");
        });
    }

    /// An old version the history drops is freed by the write that dropped it (after the
    /// lock is released), not kept until some later write.
    #[test]
    fn versions_the_history_drops_are_freed_by_the_write() {
        let store = Store::new(1);
        store.write(|s| s.create("core/configmaps", cm("a", "1")));
        let first = Arc::downgrade(
            &store
                .read(|s| s.get_shared("core/configmaps", "default", "a"))
                .unwrap(),
        );
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.update("core/configmaps", cm("a", "3")));
        assert!(first.upgrade().is_none(), "version 1 still allocated");
        store.read(|s| assert!(s.retired.is_empty()));
        assert_eq!(store.read(|s| s.history_len()), 1);
    }

    #[test]
    fn snapshots_undo_newer_changes() {
        let store = Store::new(100);
        let a1 = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.create("core/configmaps", cm("b", "1")));
        store.write(|s| s.delete("core/configmaps", "default", "a"));
        store.read(|s| {
            let snap = s.snapshot_at("core/configmaps", rv_of(&a1)).unwrap();
            let all: Vec<_> = snap.range(None, None).collect();
            assert_eq!(all.len(), 1);
            assert_eq!(all[0].1["data"]["v"], "1");
            assert_eq!(snap.count(None), 1);
            assert_eq!(snap.changed_keys(), 2);
        });
    }

    #[test]
    fn snapshots_at_every_revision_match_a_model_of_random_writes() {
        const CMS: &str = "core/configmaps";
        let store = Store::new(10_000);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut model: BTreeMap<Key, Value> = BTreeMap::new();
        let mut states = vec![(store.resource_version(), model.clone())];
        for step in 0..600 {
            let ns = ["a", "b", "c"][rng.usize(..3)];
            let name = format!("o{:02}", rng.usize(..40));
            let key = (ns.to_owned(), name.clone());
            let op = rng.usize(..3);
            store.write(|s| {
                if op < 2 {
                    let obj = json!({"metadata": {"namespace": ns, "name": name}, "data": {"step": step}});
                    model.insert(key, s.update(CMS, obj));
                } else if s.delete(CMS, ns, &name).is_some() {
                    model.remove(&key);
                }
                // Writes to another resource interleave in the same history.
                if step % 5 == 0 {
                    s.update("core/secrets", json!({"metadata": {"namespace": ns, "name": name}}));
                }
            });
            states.push((store.resource_version(), model.clone()));
        }
        let owned = |it: &mut dyn Iterator<Item = (&Key, &Arc<Stored>)>| -> Vec<(Key, Value)> {
            it.map(|(k, v)| (k.clone(), v.value().clone())).collect()
        };
        store.read(|s| {
            for (rv, expected) in &states {
                let snap = s.snapshot_at(CMS, *rv).unwrap();
                let want: Vec<(Key, Value)> = expected
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(owned(&mut snap.range(None, None)), want, "rv {rv}");
                assert_eq!(snap.count(None), expected.len(), "rv {rv}");
                for ns in ["a", "b", "c", "d"] {
                    let want_ns: Vec<(Key, Value)> =
                        want.iter().filter(|(k, _)| k.0 == ns).cloned().collect();
                    assert_eq!(owned(&mut snap.range(Some(ns), None)), want_ns);
                    assert_eq!(snap.count(Some(ns)), want_ns.len());
                    // Pages of 7 resumed after the last key served give the same objects.
                    let mut paged = vec![];
                    let mut after: Option<Key> = None;
                    loop {
                        let page = owned(&mut snap.range(Some(ns), after.as_ref()).take(7));
                        let Some(last) = page.last() else { break };
                        after = Some(last.0.clone());
                        paged.extend(page);
                    }
                    assert_eq!(paged, want_ns, "paged {ns} at rv {rv}");
                    // A resume key from another namespace starts at this namespace's edge.
                    let before = ("0".to_owned(), "z".to_owned());
                    assert_eq!(owned(&mut snap.range(Some(ns), Some(&before))), want_ns);
                }
                for (k, v) in expected {
                    assert_eq!(snap.get(k), Some(v));
                }
            }
        });
    }

    #[test]
    fn a_snapshot_costs_the_changes_since_its_revision() {
        let store = Store::new(100);
        for i in 0..50 {
            store.write(|s| s.create("core/configmaps", cm(&format!("c{i:02}"), "1")));
        }
        let rv = store.resource_version();
        store.write(|s| s.update("core/configmaps", cm("c07", "2")));
        store.write(|s| s.update("core/configmaps", cm("c07", "3")));
        store.write(|s| s.delete("core/configmaps", "default", "c08"));
        store.write(|s| s.create("core/configmaps", cm("c99", "1")));
        store.read(|s| {
            assert_eq!(
                s.snapshot_at("core/configmaps", rv).unwrap().changed_keys(),
                3
            );
            let now = s
                .snapshot_at("core/configmaps", s.resource_version())
                .unwrap();
            assert_eq!(now.changed_keys(), 0);
            let then = s.snapshot_at("core/configmaps", rv).unwrap();
            let c07 = ("default".to_owned(), "c07".to_owned());
            assert_eq!(then.get(&c07).unwrap()["data"]["v"], "1");
            assert_eq!(then.count(Some("default")), 50);
            assert_eq!(now.count(Some("default")), 50);
        });
    }

    #[test]
    fn snapshots_older_than_the_window_are_refused() {
        let store = Store::new(2);
        let first = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.update("core/configmaps", cm("a", "3")));
        store.read(|s| {
            assert!(s.snapshot_at("core/configmaps", rv_of(&first) - 1).is_err());
            assert!(
                s.snapshot_at("core/configmaps", s.resource_version())
                    .is_ok()
            );
        });
    }

    /// How many stored objects (live and in the history) hold a tree.
    fn decoded(s: &State) -> usize {
        let live = s
            .objects
            .values()
            .flat_map(|b| b.objects.values())
            .filter(|o| o.is_decoded())
            .count();
        let history = s
            .history
            .iter()
            .flat_map(|c| std::iter::once(&c.object).chain(c.prev.as_ref()))
            .filter(|o| o.is_decoded())
            .count();
        live + history
    }

    #[test]
    fn objects_nobody_reads_rest_as_bytes_and_read_back_unchanged() {
        let store = Store::new(1000);
        let first = store.write(|s| s.create("core/configmaps", cm("a", "1")));
        store.write(|s| s.update("core/configmaps", cm("a", "2")));
        store.write(|s| s.create("core/configmaps", cm("b", "1")));
        store.write(|s| s.create("core/configmaps", cm("hot", "1")));
        assert_eq!(
            store.read(decoded),
            4 + 4,
            "written objects hold their trees"
        );
        let as_trees = store.read(|s| s.history_bytes());
        // The passes before the last mark; `hot` is read before the last, so only it keeps a
        // tree.
        for _ in 1..super::super::stored::REST_AFTER_PASSES {
            assert_eq!(store.shed().tree_bytes(), 0);
        }
        store.read(|s| {
            assert_eq!(
                s.get("core/configmaps", "default", "hot").unwrap()["data"]["v"],
                "1"
            )
        });
        assert!(store.shed().tree_bytes() > 0);
        assert_eq!(
            store.read(decoded),
            2,
            "only the object read between the passes (live and in its history entry)"
        );
        // Everything reads back as written: current objects, the history, a snapshot.
        store.read(|s| {
            assert_eq!(
                s.get("core/configmaps", "default", "a").unwrap()["data"]["v"],
                "2"
            );
            let changes = s.changes_since(rv_of(&first) - 1).unwrap();
            assert_eq!(changes.len(), 4);
            assert_eq!(changes[1].prev.as_ref().unwrap()["data"]["v"], "1");
            assert_eq!(changes[1].object["data"]["v"], "2");
            let then = s.snapshot_at("core/configmaps", rv_of(&first)).unwrap();
            let a = ("default".to_owned(), "a".to_owned());
            assert_eq!(then.get(&a).unwrap()["data"]["v"], "1");
            assert_eq!(then.count(None), 1);
        });
        // The history's byte bound now charges the rested changes their JSON: less than their
        // trees, and still the sum over the changes it holds.
        let rested = store.read(|s| s.history_bytes());
        assert!(0 < rested && rested < as_trees, "{rested} of {as_trees}");
        let sum = |s: &State| s.history.iter().map(|c| c.bytes()).sum::<usize>();
        assert_eq!(store.read(sum), rested);
        // A write after resting works as before and is charged on top.
        let next = store.write(|s| s.update("core/configmaps", cm("a", "3")));
        assert_eq!(rv_of(&next), rv_of(&first) + 4);
        assert!(store.read(|s| s.history_bytes()) > rested);
        assert_eq!(store.read(sum), store.read(|s| s.history_bytes()));
        store.write(|s| s.compact());
        assert_eq!(store.read(|s| s.history_bytes()), 0);
    }

    #[test]
    fn once_writes_pause_resting_rebuilds_the_map_and_changes_share_their_key() {
        let store = Store::new(1000);
        for i in 0..20 {
            store.write(|s| s.create("core/configmaps", cm(&format!("c{i}"), "1")));
        }
        let bucket_fresh = |s: &State| s.objects["core/configmaps"].fresh;
        assert_eq!(store.read(bucket_fresh), 20);
        let mut garbage = Vec::new();
        for _ in 0..=super::super::stored::REST_AFTER_PASSES {
            garbage.push(store.shed());
        }
        assert_eq!(
            store.read(bucket_fresh),
            0,
            "the keys the writes allocated were copied by the shedding pass"
        );
        assert!(garbage.iter().any(|g| !g.maps.is_empty() && !g.is_empty()));
        store.read(|s| {
            assert_eq!(s.count("core/configmaps"), 20);
            for i in 0..20 {
                let name = format!("c{i}");
                assert_eq!(
                    s.get("core/configmaps", "default", &name).unwrap()["data"]["v"],
                    "1"
                );
            }
            let changes = s.changes_since(s.compacted_revision()).unwrap();
            assert!(
                changes
                    .windows(2)
                    .all(|w| Arc::ptr_eq(&w[0].storage.0, &w[1].storage.0))
            );
            assert_eq!(changes[0].storage, "core/configmaps");
        });
    }

    #[test]
    fn a_storage_that_rests_on_write_keeps_bytes_and_a_pass_moves_them() {
        let store = Store::new(1000);
        store.rest_on_write("core/events");
        let ev = |name: &str, count: u64| {
            json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "reason": "Started", "count": count})
        };
        // The writer gets the tree it answers from; the store and the history keep bytes.
        let answer = store.write(|s| s.write("core/events", ev("e", 1)));
        assert!(answer.is_decoded());
        assert_eq!(answer["count"], 1);
        let kept = store.read(|s| s.get_shared("core/events", "default", "e").unwrap());
        assert!(!kept.is_decoded() && kept.is_unhomed());
        assert!(!Arc::ptr_eq(&kept, &answer));
        assert_eq!(
            store.read(decoded),
            0,
            "no tree in the store or the history"
        );
        // Other storages are unchanged.
        store.write(|s| s.create("core/configmaps", cm("a", "1")));
        assert_eq!(store.read(decoded), 2);
        // It reads back as written, from the live objects and from the history.
        store.read(|s| {
            let changes = s.changes_since(1).unwrap();
            assert_eq!(changes[0].object.with_value(|v| v.clone()), *answer.value());
            assert_eq!(changes[0].object.key(), ("default".into(), "e".into()));
        });
        // An update stores bytes again, with the previous version as `prev`.
        store.write(|s| s.write("core/events", ev("e", 2)));
        store.read(|s| {
            let last = s.changes_since(2).unwrap()[1].clone();
            assert!(!last.object.is_decoded());
            assert_eq!(
                last.prev
                    .as_ref()
                    .unwrap()
                    .with_value(|v| v["count"].clone()),
                1
            );
        });
        // The next shedding pass copies the bytes on its own thread, once: the copies are
        // homed, shared by the live object and its history entry, and read the same.
        let before = store.read(|s| s.get_shared("core/events", "default", "e").unwrap());
        let garbage = store.shed();
        assert!(
            !garbage.objects.is_empty(),
            "both versions of the event were replaced"
        );
        let after = store.read(|s| s.get_shared("core/events", "default", "e").unwrap());
        assert!(!after.is_unhomed() && !after.is_decoded());
        assert!(!Arc::ptr_eq(&before, &after));
        assert_ne!(
            before.json().unwrap().as_ptr(),
            after.json().unwrap().as_ptr(),
            "the bytes were copied"
        );
        store.read(|s| {
            let last = s.changes_since(2).unwrap()[1].clone();
            assert!(Arc::ptr_eq(&last.object, &after));
        });
        assert_eq!(after.with_value(|v| v["count"].clone()), 2);
        assert!(store.shed().objects.is_empty(), "nothing to move again");
        // A read decodes it like any rested object.
        assert_eq!(
            store.read(|s| s.get("core/events", "default", "e").unwrap()["count"].clone()),
            2
        );
    }

    #[test]
    fn a_change_held_by_a_watch_while_shedding_is_replaced_not_mutated() {
        let store = Store::new(1000);
        store.write(|s| s.create("core/configmaps", cm("a", "1")));
        let held = store.read(|s| s.changes_since(1).unwrap());
        for _ in 0..super::super::stored::REST_AFTER_PASSES {
            store.shed();
        }
        assert!(held[0].object.is_decoded(), "the watch's copy is untouched");
        assert_eq!(store.read(decoded), 0);
        assert_eq!(held[0].object["data"]["v"], "1");
    }
}
