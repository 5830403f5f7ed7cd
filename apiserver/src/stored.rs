//! A stored object: a JSON tree while it is in use, its JSON bytes once it has rested.
//!
//! The handlers, the watch streams and the simulated controllers all read stored objects as
//! `serde_json::Value` trees, and a tree is large: every non-empty JSON object is a `BTreeMap`
//! whose first node holds room for eleven entries (about 630 bytes), and every key and string
//! is a heap allocation of its own. An At of 660 bytes of JSON is a tree of about 9 KB (half
//! of it the small maps of `managedFields`), so 10,000 Ats written in a burst held the server
//! at 15 times their JSON for as long as they lived. kube-apiserver keeps objects as bytes in
//! etcd and decodes them into its watch cache, whose Go structs are compact; here the compact
//! form is the JSON itself.
//!
//! So a [`Stored`] holds either or both:
//!
//! * the **tree**, decoded on first use ([`Stored::value`], or `Deref`) and kept while it is
//!   used;
//! * the **bytes**, the object's compact JSON, encoded when the object has rested.
//!
//! A write stores the tree it was given (the writer, the watches and the garbage collector read
//! it at once). Every read marks the object as used. With
//! [`ApiServerBuilder::rest_unread_objects`](super::ApiServerBuilder::rest_unread_objects)
//! (`--rest-unread-objects`; off by default, see the trade-off below),
//! [`Store::shed`](super::store::Store::shed), run by the server every [`SHED_INTERVAL`], ages
//! the objects: one not read for [`REST_AFTER_PASSES`] passes has its bytes encoded (outside the store's lock) and its tree dropped, in the live
//! objects and in the history alike (both then share one bytes-only copy). A hot object (a
//! pod the node reads on every sync) keeps its tree; a cold one costs its JSON plus about 150
//! bytes. The next read of a cold object decodes it again (microseconds for a typical object);
//! a LIST without selectors serializes a cold object from a tree decoded for that item alone
//! ([`Stored::with_value`]), so listing everything does not bring every tree back.
//!
//! The interval is short on purpose. glibc's malloc can only give back pages that are wholly
//! free, and the long-lived allocations of a write (keys, history entries, the garbage
//! collector's graph) land among the tree's own: when 10,000 trees stayed until a pass 10 s
//! later, freeing them left 118 MB of heap holding 25 MB. With trees shed within half a second,
//! only the last moments' trees are alive during a burst, and the heap reuses their memory for
//! the next ones. [`Store::shed`](super::store::Store::shed) also copies what surrounds a rested
//! object (its key, the map nodes, its history entry) on the shedding thread, so the pages the
//! trees leave are more often free as a whole.
//!
//! Measured with the release binary (`hack/bench-hostile.sh`, last line: 10,000 Ats of 660 bytes
//! created by ten clients, then 60 s without writes): the RSS grows by 3.7 times the live JSON
//! (24 MiB for 6.3 MiB), against 14.3 times (90 MiB) when every object stays a tree.
//!
//! Resting objects only once writes pause (no CPU under load) gives nothing back after a
//! burst: measured so, the heap held 13 MB in use in 107 MB of system memory. glibc serves a
//! request's thread from that thread's arena, and the shedding thread (from tokio's blocking
//! pool) may be given one of the same arenas; its copies, made while or after the trees die,
//! land one or two to each hole the trees leave (glibc takes the best-fitting free chunk), so
//! almost every page keeps a few live bytes and none can be returned. Copying everything a
//! second time after the trees were freed did not change that.
//!
//! The price is CPU under heavy writes, which is why it is off by default: with it, the At
//! benchmark's server (`../shared/bench/at-vs-kube-rs.sh 10000`, project side) took 54 s of CPU
//! instead of 29 s and the run 49 s instead of 32 s (every version of every object is encoded
//! once, its tree freed early, and objects read again are decoded again; with a threshold of
//! four 1-second passes, 42 s and 39 s, and no memory gained after a burst, since then the
//! trees of a burst live long enough to fragment the heap as before). `perf` on the server,
//! with and without it (33,500 and 16,500 samples at 499 Hz): of the extra samples, about half
//! are glibc's `malloc`, `free`, `malloc_consolidate` and `unlink_chunk` (the shedding thread
//! frees trees the request threads allocated, taking their arenas' locks, and leaves free lists
//! that later allocations search), a sixth encoding JSON, a tenth the passes' own walks.

use std::ops::Deref;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

/// How often the server sheds the trees of objects nobody read since the previous pass: an
/// object unread for between one and two intervals is kept as JSON bytes only (see the module
/// docs for why it is short). A pass walks the objects twice under the store's lock, checking
/// a flag on each; it encodes and frees outside it.
pub const SHED_INTERVAL: Duration = Duration::from_millis(250);

/// How many passes an object must go unread before it rests.
pub const REST_AFTER_PASSES: u8 = 2;

/// One stored object (see the module docs). Read it through `Deref` (`&*stored` is the
/// `&Value`) or [`Stored::value`].
pub struct Stored {
    tree: OnceLock<Value>,
    json: OnceLock<Bytes>,
    /// Set by every read, cleared by each shedding pass.
    /// Shedding passes since the last read (0 = read since the last pass); saturates.
    idle: AtomicU8,
}

impl Stored {
    /// An object as a tree (a write: it is read at once).
    pub fn new(value: Value) -> Self {
        Stored {
            tree: OnceLock::from(value),
            json: OnceLock::new(),
            idle: AtomicU8::new(0),
        }
    }

    /// An object as its JSON bytes only, decoded on first read.
    fn from_json(json: Bytes) -> Self {
        Stored {
            tree: OnceLock::new(),
            json: OnceLock::from(json),
            idle: AtomicU8::new(0),
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
    /// tree's size ([`super::store::value_bytes`]) when decoded, else its JSON's length.
    pub fn bytes(&self) -> usize {
        match (self.tree.get(), self.json.get()) {
            (Some(tree), _) => super::store::value_bytes(tree),
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

    /// A cheap estimate of what this object's tree holds (to decide when to hand memory back
    /// to the system): ten times its JSON, about what a tree of small maps costs.
    pub(crate) fn tree_estimate(&self) -> usize {
        self.json.get().map_or(0, |j| j.len() * 10)
    }

    /// Whether the object holds a tree (it has been written or read since it last rested).
    pub fn is_decoded(&self) -> bool {
        self.tree.get().is_some()
    }

    /// First half of a shedding pass: counts one more pass without a read, and answers
    /// whether the object has now gone [`REST_AFTER_PASSES`] passes unread with a tree.
    pub(crate) fn age(&self) -> bool {
        if self.tree.get().is_none() {
            return false;
        }
        let idle = self.idle.load(Ordering::Relaxed).saturating_add(1);
        self.idle.store(idle, Ordering::Relaxed);
        idle >= REST_AFTER_PASSES
    }

    /// Second half, outside the lock: encodes the bytes of a candidate.
    pub(crate) fn encode(&self) {
        if let Some(tree) = self.tree.get() {
            self.json
                // Boxed to its length: `to_vec` leaves up to half of its buffer unused.
                .get_or_init(|| {
                    Bytes::from(
                        serde_json::to_vec(tree)
                            .unwrap_or_default()
                            .into_boxed_slice(),
                    )
                });
        }
    }

    /// Third half, under the lock again: the bytes-only copy that replaces a candidate still
    /// unused and encoded, or `None` to keep it.
    pub(crate) fn rested(&self) -> Option<Stored> {
        self.can_rest()
            .then(|| self.json.get().map(|j| Stored::from_json(j.clone())))
            .flatten()
    }

    /// Whether [`Stored::rested`] would replace this object (unused, decoded, encoded).
    pub(crate) fn can_rest(&self) -> bool {
        self.idle.load(Ordering::Relaxed) >= REST_AFTER_PASSES
            && self.tree.get().is_some()
            && self.json.get().is_some_and(|j| !j.is_empty())
    }
}

/// Decodes bytes this module encoded from a tree (so no depth or size bound applies: they
/// were checked when the object was written). Cannot fail for such bytes; if it ever did, the
/// error is logged and the object reads as `null` rather than taking the server down.
fn decode(json: &[u8]) -> Value {
    let mut de = serde_json::Deserializer::from_slice(json);
    de.disable_recursion_limit();
    match Value::deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "a stored object's JSON does not decode");
            Value::Null
        }
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

    fn at() -> Value {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
               "metadata": {"name": "a", "namespace": "default", "labels": {"x": "1"},
                            "managedFields": [{"fieldsV1": {"f:spec": {"f:schedule": {}}}}]},
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
    fn into_value_moves_a_unique_tree_and_copies_a_shared_one() {
        let a = Arc::new(Stored::new(at()));
        let b = a.clone();
        assert_eq!(Stored::into_value(a), at());
        assert_eq!(Stored::into_value(b), at());
        let rested = Arc::new(rest(&Stored::new(at())).expect("rests"));
        assert_eq!(Stored::into_value(rested), at());
    }
}
