//! A stored object: a JSON tree while it is in use, its JSON bytes once it has rested.
//!
//! The handlers, the watch streams and the simulated controllers all read stored objects as
//! `serde_json::Value` trees, and a tree is large: every non-empty JSON object is a `BTreeMap`
//! whose first node holds room for eleven entries (about 630 bytes), and every key and string
//! is a heap allocation of its own. An At of 660 bytes of JSON is a tree of about 9 KB as a
//! request's body decodes it (half of it the small maps of `managedFields`, which the store
//! folds into their JSON text: [`crate::api::folded`]), so 10,000 Ats written in a burst held the server
//! at 15 times their JSON for as long as they lived. kube-apiserver keeps objects as bytes in
//! etcd and decodes them into its watch cache, whose Go structs are compact; here the compact
//! form is the JSON itself. (serde_json's `preserve_order`, an `IndexMap` per object, was
//! measured too: 6,989 bytes asked of malloc for that At's tree instead of 7,581, and every
//! object's keys in arrival order rather than sorted as kube-apiserver serves a custom object.)
//!
//! So a [`Stored`] holds either or both:
//!
//! * the **tree**, decoded on first use ([`Stored::value`], or `Deref`) and kept while it is
//!   used;
//! * the **bytes**, the object's compact JSON, encoded when the object has rested.
//!
//! A write stores the tree it was given (the writer, the watches and the garbage collector read
//! it at once). Every read marks the object as used. With
//! [`ApiServerBuilder::rest_unread_objects`](crate::ApiServerBuilder::rest_unread_objects)
//! (`--rest-unread-objects`; on in the standalone server, off for a test's server, see the last
//! section), a thread of its own
//! (`apiserver-shed`) runs [`Store::shed`](crate::storage::store::Store::shed) every third of
//! [`ApiServerBuilder::rest_unread_after`](crate::ApiServerBuilder::rest_unread_after)
//! ([`DEFAULT_REST_AFTER`], 30 s; `--rest-unread-after`): an object not read for
//! [`REST_AFTER_PASSES`] passes has its bytes encoded (outside the store's lock) and its tree
//! dropped, in the live objects and in the history alike (both then share one bytes-only
//! copy). A hot object (a pod the node reads on every sync) keeps its
//! tree; a cold one costs its JSON plus about 350 bytes (figures below). The next read of a
//! cold object decodes it again (microseconds for a typical object); a LIST without selectors
//! serializes a cold object from a tree decoded for that item alone ([`Stored::with_value`]),
//! so listing everything does not bring every tree back.
//!
//! A restart from the data directory loads every object, live and in the history, bytes-only
//! ([`Stored::from_json`]; [`crate::storage::durable`], "Loading"), so the server starts at about
//! its JSON rather than its trees. Such an object is decoded by its first read like a rested
//! one, and rests again like any other; what reads many objects in one go keeps no tree of
//! them: a LIST ([`Stored::with_value`]), the snapshot of a paged LIST ([`Stored::key`]), a
//! watch's initial events and its replay of the history
//! ([`crate::endpoints::watch`]: a custom resource's event is the stored bytes as they are
//! when they hold the served `apiVersion` and `kind`, [`Stored::json`]; anything else is
//! encoded from a tree decoded for that event alone, and that encoding is not kept with the
//! change).
//!
//! Where each allocation is made decides whether memory comes back after a burst. An
//! allocator gives a thread's allocations from that thread's arena (glibc's malloc; jemalloc,
//! the standalone server's allocator, assigns threads to its arenas likewise), keeps freed
//! chunks in a per-thread cache for that thread's next allocations of the same size whichever
//! arena they came from, and can only return pages that are wholly free. The trees are
//! allocated by request threads; the rested copies (the JSON, the bytes-only `Stored`, the
//! history entries and, once writes of new keys pause, the keys and map nodes of the resource)
//! are made on the shedding thread, packed one after the other; and what they replace is
//! dropped back on a request thread ([`Garbage`](crate::storage::store::Garbage)). Were the
//! shedding thread to free the trees itself, its per-thread cache would hand their chunks
//! straight back to its next copies, and the copies would land among the dead trees in the
//! request threads' arenas (measured so with glibc: every rested object's JSON was found there,
//! with most of those pages held by a few live bytes). With the copies apart, the request
//! threads' arenas empty out after a burst and the server's release step hands them back
//! (glibc: `apimachinery::malloc::release_freed_memory`, which collects the runtime threads'
//! cached chunks first; jemalloc: the `sample-controller` binary's `src/jemalloc.rs`, which has
//! each runtime thread flush its cache and purges every arena).
//!
//! Measured with the release binary (`hack/bench-hostile.sh`, last lines: 10,000 Ats of 660 bytes
//! created by ten clients, then 60 s without writes), with resting the RSS grows by about 1.8 times
//! the live JSON (1.76 to 1.81 in three runs; 1.52 to 1.65 when the binary allocated with
//! glibc's malloc: about 1,030 bytes an object, of which 688 the JSON, 112 the history entry, 96
//! the `Stored`, 64 the key and about 60 the map), against 7.8 times (49 MiB) when every object
//! stays a tree (the default; 9.5 to 14.1 times on glibc).
//!
//! The price is CPU, and the delay decides it. Every version of an object that outlives the
//! delay unread is encoded once, and an object read again after resting is decoded again. Under
//! the At benchmark (`ONLY=project ../shared/bench/at-vs-kube-rs.sh 10000`: 10,000 Ats written
//! about four times each in about 30 s; three runs each, alternated) the server took 28.3 to
//! 30.4 s of CPU with the default delay (objects rest 20 to 30 s after their last read), 25.1
//! to 28.6 s without resting, and 36.6 to 41.6 s with a delay of two to three seconds: with a
//! short delay most versions rest while the controller still works on them. `perf` on a delay
//! of half a second (33,500 samples at 499 Hz against 16,500 without resting): of the extra
//! samples, about half were glibc's `malloc`, `free`, `malloc_consolidate` and `unlink_chunk`,
//! a sixth encoding JSON, a tenth the passes' own walks. A pass holds the store's lock for two
//! walks over the objects and the history, checking a counter on each; the burst's trees are
//! freed where they were allocated whenever they rest, so the delay does not change the RSS
//! once they have.
//!
//! ## In a burst
//!
//! A pass waits while the store is written more than [`BURST_WRITES_PER_SECOND`] times a
//! second (at least [`BURST_WRITES_MIN`] writes since the previous pass), at most
//! [`MAX_DEFERRED_PASSES`] passes in a row ([`defer_pass`]); objects age only in the passes that
//! run, so what a burst wrote rests about `rest_after` after it ends. In a burst the objects are
//! written again before long (the At benchmark's controller writes each At RUNNING, then DONE
//! 30 to 60 s later at 30,000 Ats), so a rested object was decoded again at its next write and
//! rested once more, and the copies made the peak higher, not lower: two adjacent runs of
//! `ONLY=project ../shared/bench/at-vs-kube-rs.sh 30000`, about 4,000 writes a second, took 71.6
//! s of server CPU and a peak RSS of 2,807 MiB resting during the burst, 65.8 s and 2,423 MiB
//! without resting. The soak (`hack/soak.sh`, about 100 writes a second, a few hundred in its
//! catch-ups) rests as before.
//!
//! ## Written as bytes
//!
//! Events are written far more than they are read: the At controller records two per At, and
//! nothing in the cluster reads them back (kube's garbage collector and quota ignore them; a
//! user's `kubectl describe` or `get events` does). [`Store::rest_on_write`](crate::storage::store::Store::rest_on_write)
//! (on for the events' storage in every server) makes each write of such a storage keep the
//! object's bytes only: the store encodes the stamped object once, under its lock (about a
//! kilobyte, a few microseconds), and keeps a bytes-only copy in the live objects and the
//! history; the writer gets the tree to answer from, and it goes with the response. A read
//! decodes it as it does a rested object. An event of the At controller is 1,061 bytes of JSON
//! and a tree of about 16 KB, 12 KB of it its `managedFields`.
//!
//! Those bytes are allocated on the request's thread, among the trees it allocates and frees,
//! so the next shedding pass (when resting is on) copies them onto its own thread, once,
//! whether they were read or not ([`Stored::written_as_json`]), as it does with the copies it
//! makes when it rests objects.
//!
//! ## Where it is on
//!
//! The standalone server (`sample-controller apiserver`) rests objects by default
//! (`--rest-unread-objects=false` turns it off): it is the server that lives through bursts.
//! [`ApiServerBuilder`](crate::ApiServerBuilder) leaves it off: a server a test starts lives
//! for seconds, less than an object takes to rest, and without the thread nothing changes
//! under a test but what the test does itself.
//!
//! A rested change loses its shared watch encoding ([`crate::storage::store::SharedEncoding`]), so a
//! watch that replays it encodes it again, and the history's byte bound charges it its JSON
//! rather than its tree ([`crate::storage::store`], "The history window"), so more of the five-minute
//! window fits in the bound. A client closed as unresponsive that watches again through rested
//! changes reads what was written (`tests/hostile.rs`,
//! `a_watch_and_a_paged_list_read_rested_history_as_written`). The At benchmark's kube-rs peer
//! sometimes stops taking Ats after its watch of Ats gets 410 and it lists again: kube-rs's
//! controller reconciles the Ats of the new list from its store before that list replaces
//! the store, sees `PENDING` where the server has `RUNNING`, patches what is already there
//! (no change, so no event) and waits for a change that never comes. That comes from the
//! history's compaction, not from resting: without resting, with the history bounded to 48 MiB
//! as it was then counted (each change charged its object and the one before; about 24 MiB
//! as [`Change::bytes`](crate::storage::store::Change::bytes) counts now), the peer left 1,674 and
//! 2,023 Ats `RUNNING` without a pod in two of three runs (every At `DONE` in the third),
//! where this project's controller finished all 10,000 in two of two.

use std::ops::Deref;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// How long an object goes unread before it rests, by default
/// ([`ApiServerBuilder::rest_unread_after`](crate::ApiServerBuilder::rest_unread_after)):
/// passes run every third of it, so an object rests between two and three thirds of it after
/// its last read.
pub const DEFAULT_REST_AFTER: Duration = Duration::from_secs(30);

/// How many passes an object must go unread before it rests.
pub const REST_AFTER_PASSES: u8 = 3;

/// Writes a second above which the store is in a burst and a shedding pass waits: objects
/// written in a burst are read and written again within it, and resting them then costs an
/// encoding, a decoding and more memory, not less (see the module docs, "In a burst").
pub const BURST_WRITES_PER_SECOND: u64 = 1_000;

/// The fewest writes between two passes that make a burst, however short the passes' interval.
pub const BURST_WRITES_MIN: u64 = 1_000;

/// The most passes in a row a burst defers; the next one runs, so that a store written without
/// pause still rests what goes unread.
pub const MAX_DEFERRED_PASSES: u32 = 9;

/// Whether a shedding pass waits: `writes` were made since the previous one, `interval` apart,
/// and `deferred` passes in a row have waited already (see [`BURST_WRITES_PER_SECOND`]).
pub fn defer_pass(writes: u64, interval: Duration, deferred: u32) -> bool {
    let per_interval = (BURST_WRITES_PER_SECOND as f64 * interval.as_secs_f64()) as u64;
    writes > per_interval.max(BURST_WRITES_MIN) && deferred < MAX_DEFERRED_PASSES
}

/// The time between two shedding passes for objects to rest `rest_after` after their last
/// read (at least a millisecond).
pub fn shed_interval(rest_after: Duration) -> Duration {
    (rest_after / u32::from(REST_AFTER_PASSES)).max(Duration::from_millis(1))
}

// The encoding buffer of [`Stored::encode`], per thread.
thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The largest encoding buffer a thread keeps between objects.
const SCRATCH_KEPT: usize = 64 << 10;

/// One stored object (see the module docs). Read it through `Deref` (`&*stored` is the
/// `&Value`) or [`Stored::value`].
pub struct Stored {
    tree: OnceLock<Value>,
    json: OnceLock<Arc<[u8]>>,
    /// Set by every read, cleared by each shedding pass.
    /// Shedding passes since the last read (0 = read since the last pass); saturates.
    idle: AtomicU8,
    /// Stored as bytes by its write ([`Stored::written_as_json`]), on a request thread: the
    /// next shedding pass copies the bytes on its own thread (see "Written as bytes").
    unhomed: AtomicBool,
}

impl Stored {
    /// An object as a tree (a write: it is read at once).
    pub fn new(value: Value) -> Self {
        Stored {
            tree: OnceLock::from(value),
            json: OnceLock::new(),
            idle: AtomicU8::new(0),
            unhomed: AtomicBool::new(false),
        }
    }

    /// An object as its JSON bytes only, decoded on first read: a rested object, or one loaded
    /// from the data directory ([`crate::storage::durable`]). The bytes must be serde_json's compact
    /// encoding of a tree (what [`Stored::to_json`] writes): watches may serve them as they are
    /// ([`Stored::json`]).
    pub fn from_json(json: Arc<[u8]>) -> Self {
        Stored {
            tree: OnceLock::new(),
            json: OnceLock::from(json),
            idle: AtomicU8::new(0),
            unhomed: AtomicBool::new(false),
        }
    }

    /// An object its write stores as bytes at once (a storage that rests on write: events,
    /// see "Written as bytes"); encoded on the writer's thread, so the next shedding pass
    /// moves the bytes to its own.
    pub fn written_as_json(json: Arc<[u8]>) -> Self {
        Stored {
            unhomed: AtomicBool::new(true),
            ..Stored::from_json(json)
        }
    }

    /// The JSON bytes the object holds besides or instead of its tree (rested, or loaded from
    /// the data directory), `None` for a tree not encoded yet. The compact encoding of the tree
    /// (serde_json's, keys in sorted order): the same bytes as `serde_json::to_vec(self.value())`,
    /// field sets folded ([`crate::api::folded`]); bytes a data directory of an older server
    /// holds may have them unfolded, which the tree then does not.
    pub fn json(&self) -> Option<&Arc<[u8]>> {
        self.json.get()
    }

    /// Whether two objects hold the same JSON bytes (so the same object), compared without
    /// decoding either: `false` when either has no bytes.
    pub fn same_json(&self, other: &Stored) -> bool {
        matches!((self.json.get(), other.json.get()), (Some(a), Some(b)) if a == b)
    }

    /// `(namespace, name)` of the object, read from its bytes when it holds no tree (a small
    /// borrowed parse of `metadata`, no tree built).
    pub fn key(&self) -> crate::storage::store::Key {
        match (self.tree.get(), self.json.get()) {
            (Some(tree), _) => crate::storage::store::key_of(tree),
            (None, Some(json)) => key_of_json(json),
            (None, None) => Default::default(),
        }
    }

    /// The object, decoding it if it rests as bytes; marks it as used.
    pub fn value(&self) -> &Value {
        if self.idle.load(Ordering::Relaxed) != 0 {
            self.idle.store(0, Ordering::Relaxed);
        }
        self.tree.get_or_init(|| match self.json.get() {
            Some(json) => decode(json),
            None => Value::Null,
        })
    }

    /// Runs `f` on the object without keeping a tree it did not have: a rested object is
    /// decoded for `f` and dropped after (a LIST serializing every object, which would
    /// otherwise hold them all decoded until the next shedding pass). Does not mark it used.
    pub fn with_value<R>(&self, f: impl FnOnce(&Value) -> R) -> R {
        match (self.tree.get(), self.json.get()) {
            (Some(tree), _) => f(tree),
            (None, Some(json)) => f(&decode(json)),
            (None, None) => f(&Value::Null),
        }
    }

    /// The object as an owned tree: moved out when this is the only reference, else copied.
    pub fn into_value(this: std::sync::Arc<Self>) -> Value {
        match std::sync::Arc::try_unwrap(this) {
            Ok(mut stored) => match stored.tree.take() {
                Some(v) => v,
                None => stored.value().clone(),
            },
            Err(shared) => shared.value().clone(),
        }
    }

    /// An estimate of the memory the object holds now (the history's byte accounting): its
    /// tree's size ([`crate::storage::store::value_bytes`]) when decoded, else its JSON's length
    /// (a rested object, or one loaded from the data directory and not read since).
    pub fn bytes(&self) -> usize {
        match (self.tree.get(), self.json.get()) {
            (Some(tree), _) => crate::storage::store::value_bytes(tree),
            (None, Some(json)) => json.len(),
            (None, None) => 0,
        }
    }

    /// The object's JSON: the bytes it rests as, or encoded from its tree.
    pub fn to_json(&self) -> Vec<u8> {
        match (self.json.get(), self.tree.get()) {
            (Some(json), _) => json.to_vec(),
            (None, Some(tree)) => serde_json::to_vec(tree).unwrap_or_default(),
            (None, None) => b"null".to_vec(),
        }
    }

    /// A cheap estimate of what this object holds (to decide when to hand memory back to the
    /// system): with a tree, ten times its JSON, about what a tree of small maps costs;
    /// bytes only, the JSON.
    pub(crate) fn tree_estimate(&self) -> usize {
        match (self.tree.get(), self.json.get()) {
            (Some(_), Some(j)) => j.len() * 10,
            (None, Some(j)) => j.len(),
            _ => 0,
        }
    }

    /// Whether the object holds a tree (it has been written or read since it last rested).
    pub fn is_decoded(&self) -> bool {
        self.tree.get().is_some()
    }

    /// First half of a shedding pass: counts one more pass without a read, and answers
    /// whether the object has now gone [`REST_AFTER_PASSES`] passes unread with a tree.
    pub(crate) fn age(&self) -> bool {
        if self.tree.get().is_none() {
            // Bytes written on a request thread move at the next pass, read or not.
            return self.is_unhomed();
        }
        let idle = self.idle.load(Ordering::Relaxed).saturating_add(1);
        self.idle.store(idle, Ordering::Relaxed);
        idle >= REST_AFTER_PASSES
    }

    /// Second half, outside the lock: encodes the bytes of a candidate.
    pub(crate) fn encode(&self) {
        if let Some(tree) = self.tree.get() {
            self.json.get_or_init(|| encode_tree(tree));
        }
    }

    /// Third half, under the lock again: the bytes-only copy that replaces a candidate still
    /// unused and encoded, or `None` to keep it.
    pub(crate) fn rested(&self) -> Option<Stored> {
        if !self.can_rest() {
            return None;
        }
        let json = self.json.get()?;
        // Bytes a request thread encoded are copied here, on the shedding thread; bytes
        // `encode` made here already are shared.
        Some(Stored::from_json(if self.is_unhomed() {
            Arc::from(&json[..])
        } else {
            json.clone()
        }))
    }

    /// Whether [`Stored::rested`] would replace this object: unused, decoded and encoded; or
    /// written as bytes on a request thread and not decoded since.
    pub(crate) fn can_rest(&self) -> bool {
        let has_json = self.json.get().is_some_and(|j| !j.is_empty());
        if self.tree.get().is_none() {
            return self.is_unhomed() && has_json;
        }
        self.idle.load(Ordering::Relaxed) >= REST_AFTER_PASSES && has_json
    }

    /// Whether the object's bytes were encoded by its write, on a request thread, and have
    /// not been moved by a shedding pass yet.
    pub(crate) fn is_unhomed(&self) -> bool {
        self.unhomed.load(Ordering::Relaxed)
    }
}

/// A tree's compact JSON, encoded into a buffer this thread keeps and copied out at its
/// length: one allocation of the right size, made on this thread (see `store::Garbage` for
/// why where matters), where `to_vec` would grow a buffer step by step and leave up to half of
/// it unused. Empty if the tree does not encode (it always does: its keys are strings).
pub(crate) fn encode_tree(tree: &Value) -> Arc<[u8]> {
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        if serde_json::to_writer(&mut *scratch, tree).is_err() {
            scratch.clear();
        }
        let json = Arc::<[u8]>::from(scratch.as_slice());
        if scratch.capacity() > SCRATCH_KEPT {
            *scratch = Vec::new();
        }
        json
    })
}

/// Decodes bytes this module encoded from a tree (so no depth or size bound applies: they
/// were checked when the object was written). Cannot fail for such bytes; if it ever did, the
/// error is logged and the object reads as `null` rather than taking the server down.
fn decode(json: &[u8]) -> Value {
    let mut de = serde_json::Deserializer::from_slice(json);
    de.disable_recursion_limit();
    match Value::deserialize(&mut de) {
        // Bytes written before field sets were folded hold them unfolded.
        Ok(mut v) => {
            crate::api::folded::fold(&mut v);
            v
        }
        Err(e) => {
            tracing::error!(error = %e, "a stored object's JSON does not decode");
            Value::Null
        }
    }
}

/// `(namespace, name)` from an object's JSON: only `metadata.namespace` and `metadata.name` are
/// kept, everything else is skipped as it is read. Falls back to decoding the whole object
/// when they are not plain strings (then the key is what [`crate::storage::store::key_of`] reads).
pub fn key_of_json(json: &[u8]) -> crate::storage::store::Key {
    #[derive(Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Meta>,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        name: Option<String>,
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    de.disable_recursion_limit();
    match Object::deserialize(&mut de) {
        Ok(Object { metadata }) => {
            let meta = metadata.unwrap_or(Meta {
                namespace: None,
                name: None,
            });
            (
                meta.namespace.unwrap_or_default(),
                meta.name.unwrap_or_default(),
            )
        }
        Err(_) => crate::storage::store::key_of(&decode(json)),
    }
}

impl Deref for Stored {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl From<Value> for Stored {
    fn from(value: Value) -> Self {
        Stored::new(value)
    }
}

impl Clone for Stored {
    /// A copy with the same content (tree or bytes), unused.
    fn clone(&self) -> Self {
        let c = Stored {
            tree: OnceLock::new(),
            json: OnceLock::new(),
            idle: AtomicU8::new(0),
            unhomed: AtomicBool::new(self.is_unhomed()),
        };
        if let Some(t) = self.tree.get() {
            let _ = c.tree.set(t.clone());
        }
        if let Some(j) = self.json.get() {
            let _ = c.json.set(j.clone());
        }
        c
    }
}

impl serde::Serialize for Stored {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(self.value(), s)
    }
}

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.value(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    /// A pass waits in a burst (more than 1,000 writes a second, at least 1,000 since the last
    /// pass), never more than nine times in a row; a quiet or steady store is shed as before.
    #[test]
    fn a_pass_waits_in_a_burst_and_not_for_ever() {
        let every = shed_interval(DEFAULT_REST_AFTER);
        // The soak's 100 writes a second, and its catch-ups.
        assert!(!defer_pass(1_000, every, 0));
        assert!(!defer_pass(10_000, every, 0));
        // The At benchmark's 4,000 a second.
        assert!(defer_pass(40_000, every, 0));
        assert!(defer_pass(40_000, every, MAX_DEFERRED_PASSES - 1));
        assert!(!defer_pass(40_000, every, MAX_DEFERRED_PASSES));
        // A test's short interval: a handful of writes is no burst.
        let short = shed_interval(Duration::from_millis(3));
        assert!(!defer_pass(500, short, 0));
        assert!(defer_pass(1_001, short, 0));
    }

    #[test]
    fn passes_run_every_third_of_the_rest_delay() {
        assert_eq!(shed_interval(DEFAULT_REST_AFTER), Duration::from_secs(10));
        assert_eq!(
            shed_interval(Duration::from_millis(300)),
            Duration::from_millis(100)
        );
        assert_eq!(shed_interval(Duration::ZERO), Duration::from_millis(1));
    }

    fn at() -> Value {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
               "metadata": {"name": "a", "namespace": "default", "labels": {"x": "1"},
                            // As the store holds a field set: folded.
                            "managedFields": [{"fieldsV1": "{\"f:spec\":{\"f:schedule\":{}}}"}]},
               "spec": {"schedule": "2030-01-01T00:00:00Z", "n": 1.5, "big": u64::MAX}})
    }

    /// One pass of [`Store::shed`](super::super::store::Store::shed) on a single object.
    fn pass(s: &Stored) -> Option<Stored> {
        if !s.age() {
            return None;
        }
        s.encode();
        s.rested()
    }

    /// Passes until the object rests, or `None` if it did not after [`REST_AFTER_PASSES`].
    fn rest(s: &Stored) -> Option<Stored> {
        (0..REST_AFTER_PASSES).find_map(|_| pass(s))
    }

    #[test]
    fn an_unread_object_rests_as_bytes_and_reads_back_the_same() {
        let s = Stored::new(at());
        let rested = rest(&s).expect("never read: it rests");
        assert!(!rested.is_decoded());
        assert!(rested.bytes() < 400, "{}", rested.bytes());
        assert_eq!(*rested, at(), "numbers, nesting and order survive");
        assert!(rested.is_decoded(), "a read decodes it");
    }

    #[test]
    fn bytes_written_on_a_request_thread_move_at_the_first_pass() {
        let s = Stored::written_as_json(encode_tree(&at()));
        assert!(!s.is_decoded() && s.is_unhomed());
        let moved = pass(&s).expect("moved at the first pass, unread");
        assert!(!moved.is_decoded() && !moved.is_unhomed());
        assert_ne!(moved.json().unwrap().as_ptr(), s.json().unwrap().as_ptr());
        assert_eq!(moved.json(), s.json());
        assert!(pass(&moved).is_none(), "moved once");
        // Read before the pass: it holds a tree, and rests (moved) like any other.
        let read = Stored::written_as_json(encode_tree(&at()));
        assert_eq!(*read, at());
        let rested = rest(&read).expect("rests after its passes");
        assert!(!rested.is_unhomed());
        assert_ne!(
            rested.json().unwrap().as_ptr(),
            read.json().unwrap().as_ptr()
        );
    }

    /// Bytes written before field sets were folded (a data directory of an older server) read
    /// back folded, and are served as they were written.
    #[test]
    fn bytes_with_unfolded_sets_read_back_folded() {
        let mut unfolded = at();
        crate::api::folded::unfold(&mut unfolded);
        assert!(unfolded["metadata"]["managedFields"][0]["fieldsV1"].is_object());
        let bytes = serde_json::to_vec(&unfolded).unwrap();
        let loaded = Stored::from_json(bytes.clone().into());
        assert_eq!(*loaded, at());
        let served = serde_json::to_vec(&crate::api::folded::Unfolded(&loaded)).unwrap();
        assert_eq!(served, bytes);
    }

    #[test]
    fn a_read_starts_the_count_of_unread_passes_again() {
        let s = Stored::new(at());
        for _ in 1..REST_AFTER_PASSES {
            assert!(pass(&s).is_none());
        }
        let _ = s.value();
        for _ in 1..REST_AFTER_PASSES {
            assert!(pass(&s).is_none(), "read since");
        }
        assert!(pass(&s).is_some(), "not read for REST_AFTER_PASSES passes");
    }

    #[test]
    fn a_read_between_encoding_and_replacing_keeps_the_tree() {
        let s = Stored::new(at());
        for _ in 0..REST_AFTER_PASSES {
            s.age();
        }
        s.encode();
        let _ = s.value();
        assert!(s.rested().is_none());
    }

    #[test]
    fn the_key_of_an_object_at_rest_is_read_without_decoding_it() {
        let rested = Stored::from_json(serde_json::to_vec(&at()).unwrap().into());
        assert_eq!(rested.key(), ("default".to_owned(), "a".to_owned()));
        assert!(!rested.is_decoded());
        assert_eq!(Stored::new(at()).key(), rested.key());
        // As `key_of` reads them: a missing namespace is "", a name that is not a string too.
        for (json, key) in [
            (r#"{"metadata":{"name":"n"}}"#, ("", "n")),
            (r#"{"kind":"X"}"#, ("", "")),
            (r#"{"metadata":null}"#, ("", "")),
            (
                r#"{"metadata":{"namespace":"\u00e9","name":7}}"#,
                ("\u{e9}", ""),
            ),
        ] {
            let want = (key.0.to_owned(), key.1.to_owned());
            assert_eq!(key_of_json(json.as_bytes()), want, "{json}");
            let tree: Value = serde_json::from_str(json).unwrap();
            assert_eq!(crate::storage::store::key_of(&tree), want, "{json}");
        }
    }

    #[test]
    fn same_json_compares_bytes_and_needs_them() {
        let bytes: Arc<[u8]> = serde_json::to_vec(&at()).unwrap().into();
        let a = Stored::from_json(bytes.clone());
        assert!(a.same_json(&Stored::from_json(bytes.to_vec().into())));
        assert!(
            !a.same_json(&Stored::new(at())),
            "a tree never encoded has no bytes"
        );
        assert_eq!(
            a.json().map(|j| j.to_vec()),
            Some(serde_json::to_vec(&at()).unwrap())
        );
    }

    #[test]
    fn into_value_moves_a_unique_tree_and_copies_a_shared_one() {
        let a = Arc::new(Stored::new(at()));
        let b = a.clone();
        assert_eq!(Stored::into_value(a), at());
        assert_eq!(Stored::into_value(b), at());
        let rested = Arc::new(rest(&Stored::new(at())).expect("rests"));
        assert_eq!(Stored::into_value(rested), at());
    }
}
