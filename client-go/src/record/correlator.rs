//! The event correlator: aggregation, de-duplication and the spam filter.
//!
//! client-go's `tools/record/events_cache.go`. Every event on its way to the API server passes
//! through [`EventCorrelator::correlate`] first, which answers one of three things:
//!
//! * **send it as new** (POST): the first time this exact event is seen;
//! * **patch the earlier one** (PATCH `count`, `lastTimestamp`, `message`): the same event was
//!   sent before, so the existing `Event` object's count goes up instead of a new object
//!   appearing (this is why `kubectl describe` says `(x12 over 3m)`);
//! * **skip it**: the object has used up its spam budget.
//!
//! Three steps, each with its own LRU cache of [`CorrelatorOptions::lru_size`] (4096) entries:
//!
//! 1. **Aggregation.** Events that differ only in their message (same source, object, type and
//!    reason) are *similar*. For each such group the aggregator remembers the distinct messages
//!    seen within [`CorrelatorOptions::aggregate_interval`] (600 s) of the previous one. Fewer
//!    than [`CorrelatorOptions::aggregate_max_events`] (10) distinct messages: the event passes
//!    through unchanged. From the 10th on, it is replaced by a new event whose message is
//!    `"(combined from similar events): <message>"`, keyed by the group, so all later similar
//!    events count up one shared object instead of creating one object each. (As in client-go,
//!    the group keeps at most 9 messages: a combination adds its message and evicts one, an
//!    arbitrary one in client-go and the oldest here, so a message that was combined once may
//!    later pass on its own.)
//! 2. **De-duplication.** The event's cache key (everything including the message, or the group
//!    key for a combined event) is looked up; if it was seen, the event takes the earlier
//!    event's name, resourceVersion and firstTimestamp, `count = old + 1`, and a strategic-merge
//!    patch with only `count`, `lastTimestamp` and `message` is prepared.
//! 3. **Spam filter.** One token bucket per *object* (source, involved object and type; reason
//!    and message do not matter): burst [`CorrelatorOptions::spam_burst`] (25), refilled at
//!    [`CorrelatorOptions::spam_qps`] (one token per 300 s). No token: the event is skipped.
//!    The bucket is a [`governor`] GCRA limiter per object, kept in an LRU of
//!    [`CorrelatorOptions::lru_size`] entries (client-go's `EventSourceObjectSpamFilter` keeps a
//!    `flowcontrol.TokenBucketPassiveRateLimiter` per object in an LRU of the same size: the same
//!    bucket); a burst below 1 counts as 1.
//!    Step 2 has already raised the remembered count, so the next PATCH that does get through
//!    carries the skipped occurrences in its count; nothing is lost but the API traffic.
//!
//! Why so much machinery? Events are written by every controller for every object, often from
//! hot loops ("failed to sync, retrying"). Without the correlator a single crash-looping object
//! could write thousands of Event objects an hour into etcd; with it, that object costs at most
//! 25 writes and then one every five minutes.
//!
//! ## Differences from client-go
//!
//! * Time: decisions (the aggregation interval, token refills) use [`tokio::time::Instant`], so
//!   tests can run a paused clock through hours of event traffic; the timestamps written *into*
//!   events are wall-clock time.
//! * Keys: client-go concatenates the key fields with no separator; here a NUL separates them so
//!   two different splits of the same characters can never collide. The caches keep a 128-bit
//!   digest of each key (two SipHash values under random keys), not its text: a key is the
//!   event's whole identity, and 3 × 4,096 of them were the correlator's largest cost.
//! * The correlator is a plain struct owned by the one task that writes to the sink, so it needs
//!   no lock (client-go locks each cache because its correlator is shared).

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tokio::time::Instant;

use super::recorder::event_name;
use crate::cache::SmallString;
use crate::client::throttle::{TokioClock, quota};

/// Prefix of a combined (aggregated) event's message, as in client-go.
pub const COMBINED_MESSAGE_PREFIX: &str = "(combined from similar events): ";

/// The correlator's numbers. [`Default`] gives client-go's.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrelatorOptions {
    /// Entries kept in each of the three LRU caches (default 4096).
    pub lru_size: usize,
    /// Distinct messages in one group at which aggregation starts (default 10).
    pub aggregate_max_events: usize,
    /// A group forgets its messages when this long passes without a similar event (600 s).
    pub aggregate_interval: Duration,
    /// Events an object may emit back to back (default 25).
    pub spam_burst: u32,
    /// Tokens per second refilled into an object's bucket (default 1/300).
    pub spam_qps: f64,
}

impl Default for CorrelatorOptions {
    fn default() -> Self {
        CorrelatorOptions {
            lru_size: 4096,
            aggregate_max_events: 10,
            aggregate_interval: Duration::from_secs(600),
            spam_burst: 25,
            spam_qps: 1.0 / 300.0,
        }
    }
}

/// What to do with one event.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrelateResult {
    /// The event to write: the original, an aggregated replacement, or the original renamed to
    /// the earlier occurrence with its count raised.
    pub event: Event,
    /// The strategic-merge patch body when `event.count > 1` (an earlier occurrence exists).
    pub patch: Option<serde_json::Value>,
    /// True when the spam filter refused the event: nothing should be sent.
    pub skip: bool,
}

/// Aggregation, de-duplication and spam filtering for one sink.
#[derive(Debug)]
pub struct EventCorrelator {
    options: CorrelatorOptions,
    aggregates: Lru<AggregateRecord>,
    observations: Lru<Observation>,
    spam: Lru<SpamLimiter>,
    /// The quota of each object's spam limiter.
    spam_quota: governor::Quota,
}

/// One object's spam bucket: a [`governor`] GCRA limiter on tokio's clock.
type SpamLimiter =
    governor::RateLimiter<governor::state::NotKeyed, governor::state::InMemoryState, TokioClock>;

#[derive(Clone, Debug)]
struct AggregateRecord {
    /// The distinct messages of the group, as digests (only their number matters). A list, not
    /// a set: it never holds more than `aggregate_max_events - 1` (9), where a linear search
    /// is as quick as hashing, and one 16-byte digest costs 16 bytes, not a hash table.
    messages: Vec<Digest>,
    last_seen: Instant,
}

#[derive(Clone, Debug)]
struct Observation {
    count: i32,
    first_timestamp: Option<Time>,
    /// The event's name and resourceVersion: short (`<object>.<16 hex digits>`, a number), so
    /// usually inline.
    name: SmallString,
    resource_version: Option<SmallString>,
}

impl EventCorrelator {
    /// A correlator with the given numbers.
    pub fn new(options: CorrelatorOptions) -> Self {
        let size = options.lru_size.max(1);
        let spam_quota = quota(options.spam_qps, options.spam_burst);
        EventCorrelator {
            options,
            aggregates: Lru::new(size),
            observations: Lru::new(size),
            spam: Lru::new(size),
            spam_quota,
        }
    }

    /// Runs the three steps on one event (see the module documentation).
    pub fn correlate(&mut self, event: Event) -> CorrelateResult {
        let (event, cache_key) = self.aggregate(event);
        let (event, patch) = self.observe(event, &cache_key);
        let skip = !self.spam_allows(&event);
        CorrelateResult { event, patch, skip }
    }

    /// Records the server's copy of an event after a successful write, so the next PATCH targets
    /// the right name and the count continues from what the server holds.
    pub fn update_state(&mut self, written: &Event) {
        self.observations.put(
            event_key(written),
            Observation {
                count: written.count.unwrap_or(1),
                first_timestamp: written.first_timestamp.clone(),
                name: written.metadata.name.as_deref().unwrap_or_default().into(),
                resource_version: written.metadata.resource_version.as_deref().map(Into::into),
            },
        );
    }

    fn aggregate(&mut self, event: Event) -> (Event, String) {
        let now = Instant::now();
        let full_key = event_key(&event);
        let group_key = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();

        let mut record = match self.aggregates.get(&group_key) {
            Some(r) if now.duration_since(r.last_seen) <= self.options.aggregate_interval => {
                r.clone()
            }
            _ => AggregateRecord {
                messages: Vec::new(),
                last_seen: now,
            },
        };
        let digest = self.aggregates.digester.digest(&message);
        if !record.messages.contains(&digest) {
            record.messages.push(digest);
        }
        record.last_seen = now;
        let distinct = record.messages.len();
        if distinct >= self.options.aggregate_max_events {
            // client-go pops an arbitrary message so the set stays at the threshold; here the
            // oldest.
            record.messages.remove(0);
        }
        self.aggregates.put(group_key.clone(), record);

        if distinct < self.options.aggregate_max_events {
            return (event, full_key);
        }
        let stamp = jiff::Timestamp::now();
        let name = event_name(
            event.involved_object.name.as_deref().unwrap_or_default(),
            stamp,
        );
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(stamp)),
            last_timestamp: Some(Time(stamp)),
            involved_object: event.involved_object.clone(),
            message: Some(format!("{COMBINED_MESSAGE_PREFIX}{message}")),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            ..Default::default()
        };
        (combined, group_key)
    }

    fn observe(&mut self, mut event: Event, key: &str) -> (Event, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.observations.get(key).filter(|o| o.count > 0) {
            event.metadata.name = Some(last.name.to_string());
            event.metadata.resource_version = last.resource_version.as_deref().map(str::to_owned);
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            patch = Some(serde_json::json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.observations.put(
            key.to_owned(),
            Observation {
                count: event.count.unwrap_or(1),
                first_timestamp: event.first_timestamp.clone(),
                name: event.metadata.name.as_deref().unwrap_or_default().into(),
                resource_version: event.metadata.resource_version.as_deref().map(Into::into),
            },
        );
        (event, patch)
    }

    fn spam_allows(&mut self, event: &Event) -> bool {
        let key = spam_key(event);
        if let Some(limiter) = self.spam.get(&key) {
            return limiter.check().is_ok();
        }
        let limiter = SpamLimiter::direct_with_clock(self.spam_quota, TokioClock::default());
        let allowed = limiter.check().is_ok();
        self.spam.put(key, limiter);
        allowed
    }
}

impl Default for EventCorrelator {
    fn default() -> Self {
        EventCorrelator::new(CorrelatorOptions::default())
    }
}

fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

/// What every key starts with: the source, the involved object and the event type. The three
/// keys below differ only in what they add (client-go spells each out in full in
/// `getEventKey`, `EventAggregatorByReasonFunc` and `getSpamKey`).
fn source_object_type(e: &Event) -> Vec<&str> {
    let src = e.source.as_ref();
    let o = &e.involved_object;
    vec![
        src.and_then(|s| s.component.as_deref()).unwrap_or_default(),
        src.and_then(|s| s.host.as_deref()).unwrap_or_default(),
        o.kind.as_deref().unwrap_or_default(),
        o.namespace.as_deref().unwrap_or_default(),
        o.name.as_deref().unwrap_or_default(),
        o.uid.as_deref().unwrap_or_default(),
        o.api_version.as_deref().unwrap_or_default(),
        e.type_.as_deref().unwrap_or_default(),
    ]
}

/// The full identity of an event: source, object (with fieldPath), type, reason and message.
pub fn event_key(e: &Event) -> String {
    let mut parts = source_object_type(e);
    parts.extend([
        e.involved_object.field_path.as_deref().unwrap_or_default(),
        e.reason.as_deref().unwrap_or_default(),
        e.message.as_deref().unwrap_or_default(),
    ]);
    join_key(&parts)
}

/// The key of a group of similar events: everything but the message (and the fieldPath),
/// plus the reporting component and instance.
pub fn aggregate_key(e: &Event) -> String {
    let mut parts = source_object_type(e);
    parts.extend([
        e.reason.as_deref().unwrap_or_default(),
        e.reporting_component.as_deref().unwrap_or_default(),
        e.reporting_instance.as_deref().unwrap_or_default(),
    ]);
    join_key(&parts)
}

/// The spam-filter key: source, object and type (not reason, not message).
pub fn spam_key(e: &Event) -> String {
    join_key(&source_object_type(e))
}

/// A least-recently-used map with a fixed capacity (golang-lru's `Cache`, which client-go
/// uses). Both `get` and `put` make an entry the most recent; inserting into a full cache
/// evicts the least recent entry.
///
/// Keys are kept as 128-bit digests, not as text: a correlator key is the event's whole
/// identity (150-300 bytes), and the three caches of a sink hold up to 3 × `lru_size` of them,
/// which made the keys the largest part of a full correlator (about 5.7 MB of the manager's
/// heap at 10,000 Ats). The digest is two SipHash-1-3 values under two keys drawn at random when
/// the cache is made ([`RandomState`]), so nobody outside the process can aim two keys at one
/// digest; an accidental collision among the at most 4,096 keys of one cache has a probability
/// below 2⁻¹⁰⁴. What a collision would cost is bounded anyway: two events would share a count.
///
/// Recency is a tick stored with each entry, and the least recent entry is found by a scan when
/// a new key meets a full cache. golang-lru keeps a linked list for that instead; a second
/// index here (a tree from tick to key) cost 35 bytes an entry, a quarter of a full
/// correlator, while the scan is short: a sink's lanes share `lru_size`, so each cache holds
/// 56 entries by default (see `broadcaster::lane_lru_size`). With one lane (`sink_lanes: 1`,
/// client-go's layout) a full cache scans its 4,096 ticks for each new key, a few microseconds.
///
/// The entries sit in one vector that never grows past the capacity, found through a small
/// open-addressing index of slot numbers (linear probing, at most half full, deletions by
/// backward shift, so no tombstones). A `HashMap` of digest to entry was the first layout: with
/// a cache that is always full and evicts on every new key, its tombstones made it rehash into
/// twice the buckets, about 112 bytes for each of 128 buckets per 56-entry cache, 2.3 MB over
/// a sink's 192 caches at 10,000 Ats; here an entry costs its own size plus 8 bytes of index.
#[derive(Debug)]
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    digester: KeyDigester,
    /// The entries, in no order; at most `capacity` of them.
    slots: Vec<Slot<V>>,
    /// Slot number + 1 for each digest at or after its home position (`digest & mask`);
    /// 0 = empty. Its length is a power of two at least twice `capacity` (allocated at the
    /// first `put`).
    index: Box<[u32]>,
}

#[derive(Debug)]
struct Slot<V> {
    digest: Digest,
    used: u64,
    value: V,
}

/// A 128-bit digest of a cache key (see [`Lru`]).
type Digest = u128;

/// Two independently keyed SipHash-1-3 hashers, concatenated into one [`Digest`].
#[derive(Debug, Default)]
pub(crate) struct KeyDigester {
    high: RandomState,
    low: RandomState,
}

impl KeyDigester {
    pub(crate) fn digest(&self, key: &str) -> Digest {
        (u128::from(self.high.hash_one(key)) << 64) | u128::from(self.low.hash_one(key))
    }
}

impl<V> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        // The index stores slot numbers as u32; a correlator cache is thousands, not billions.
        let capacity = capacity.clamp(1, u32::MAX as usize / 2);
        Lru {
            capacity,
            tick: 0,
            digester: KeyDigester::default(),
            slots: Vec::new(),
            index: Box::default(),
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    /// The index position of `digest` where it is present, or where probing for it ends (an
    /// empty position) when it is not. The index must be allocated.
    fn probe(&self, digest: Digest) -> (usize, Option<usize>) {
        let mask = self.mask();
        let mut at = digest as usize & mask;
        loop {
            match self.index[at] {
                0 => return (at, None),
                n if self.slots[n as usize - 1].digest == digest => {
                    return (at, Some(n as usize - 1));
                }
                _ => at = (at + 1) & mask,
            }
        }
    }

    /// Empties index position `at` and moves later entries of its probe run back, so every
    /// digest stays reachable from its home position without tombstones.
    fn unlink(&mut self, mut at: usize) {
        let mask = self.mask();
        self.index[at] = 0;
        let mut next = at;
        loop {
            next = (next + 1) & mask;
            let n = self.index[next];
            if n == 0 {
                return;
            }
            let home = self.slots[n as usize - 1].digest as usize & mask;
            // Stays where it is when its home lies cyclically in (at, next].
            let stays = if at <= next {
                at < home && home <= next
            } else {
                at < home || home <= next
            };
            if !stays {
                self.index[at] = n;
                self.index[next] = 0;
                at = next;
            }
        }
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let digest = self.digester.digest(key);
        let tick = self.next_tick();
        let slot = self.probe(digest).1?;
        let entry = &mut self.slots[slot];
        entry.used = tick;
        Some(&entry.value)
    }

    pub(crate) fn put(&mut self, key: String, value: V) {
        if self.index.is_empty() {
            let len = (self.capacity * 2).next_power_of_two();
            self.index = vec![0; len].into_boxed_slice();
        }
        let digest = self.digester.digest(&key);
        let used = self.next_tick();
        let entry = Slot {
            digest,
            used,
            value,
        };
        if let (_, Some(slot)) = self.probe(digest) {
            self.slots[slot] = entry;
            return;
        }
        let slot = if self.slots.len() < self.capacity {
            if self.slots.len() == self.slots.capacity() {
                // Grow by doubling, but never past the capacity.
                let more = self
                    .slots
                    .len()
                    .max(4)
                    .min(self.capacity - self.slots.len());
                self.slots.reserve_exact(more);
            }
            self.slots.push(entry);
            self.slots.len() - 1
        } else {
            // Full: the least recent entry's slot takes the new one.
            let oldest = self
                .slots
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used)
                .map_or(0, |(i, _)| i);
            let (at, _) = self.probe(self.slots[oldest].digest);
            self.unlink(at);
            self.slots[oldest] = entry;
            oldest
        };
        let (at, _) = self.probe(digest);
        self.index[at] = slot as u32 + 1;
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    fn event(object: &str, reason: &str, message: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", fastrand::u64(..))),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("At".into()),
                api_version: Some("cnat.programming-kubernetes.info/v1alpha1".into()),
                name: Some(object.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{object}")),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            count: Some(1),
            source: Some(EventSource {
                component: Some("cnat-controller".into()),
                host: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn lru_keeps_one_digest_per_key_and_agrees_on_recency() {
        let mut lru = Lru::new(3);
        for k in ["a", "b", "c", "d"] {
            lru.put(k.into(), 0);
        }
        lru.get("c");
        lru.put("b".into(), 1);
        assert_eq!(lru.slots.len(), 3);
        let digest = |k: &str| lru.digester.digest(k);
        let mut by_recency: Vec<(u64, Digest)> =
            lru.slots.iter().map(|s| (s.used, s.digest)).collect();
        by_recency.sort();
        let order: Vec<Digest> = by_recency.into_iter().map(|(_, k)| k).collect();
        assert_eq!(order, [digest("d"), digest("c"), digest("b")]);
        // Keys that differ only where a separator could hide still differ.
        assert_ne!(digest("ab\u{0}c"), digest("a\u{0}bc"));
        // Two caches draw their own digest keys.
        assert_ne!(Lru::<()>::new(1).digester.digest("a"), digest("a"));
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        assert_eq!(lru.get("a"), Some(&1)); // a is now more recent than b
        lru.put("c".into(), 3);
        assert_eq!(lru.get("b"), None);
        assert_eq!(lru.get("a"), Some(&1));
        assert_eq!(lru.get("c"), Some(&3));
        lru.put("a".into(), 10);
        assert_eq!(lru.get("a"), Some(&10));
        assert_eq!(lru.len(), 2);
    }

    /// The LRU against a plain model (a list in recency order) under long random runs of
    /// `get` and `put`, in caches small enough that probe runs wrap around the index and
    /// evictions shift entries back; after every step each entry is found from its home.
    #[test]
    fn lru_agrees_with_a_model_through_evictions_and_wrapping_probes() {
        let mut rng = fastrand::Rng::with_seed(7);
        for capacity in [1, 2, 3, 5, 8] {
            let mut lru = Lru::new(capacity);
            // Most recent last.
            let mut model: Vec<(String, u32)> = Vec::new();
            for step in 0..4_000u32 {
                let key = format!("k{}", rng.usize(..capacity * 3));
                let at = model.iter().position(|(k, _)| *k == key);
                if rng.bool() {
                    let want = at.map(|i| model.remove(i));
                    assert_eq!(lru.get(&key), want.as_ref().map(|(_, v)| v), "get {key}");
                    model.extend(want);
                } else {
                    if let Some(i) = at {
                        model.remove(i);
                    } else if model.len() == capacity {
                        model.remove(0);
                    }
                    model.push((key.clone(), step));
                    lru.put(key, step);
                }
                assert_eq!(lru.len(), model.len());
                assert!(lru.slots.len() <= capacity && lru.slots.capacity() <= capacity);
                for (i, slot) in lru.slots.iter().enumerate() {
                    assert_eq!(lru.probe(slot.digest).1, Some(i));
                }
                let linked = lru.index.iter().filter(|n| **n != 0).count();
                assert_eq!(linked, lru.slots.len());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_become_patches_with_rising_count_on_one_name() {
        let mut c = EventCorrelator::default();
        let first = c.correlate(event("a", "Scheduled", "m"));
        assert!(!first.skip);
        assert!(first.patch.is_none());
        assert_eq!(first.event.count, Some(1));
        let name = first.event.metadata.name.clone();
        let mut written = first.event.clone();
        written.metadata.resource_version = Some("41".into());
        c.update_state(&written);

        for n in 2..=3 {
            let r = c.correlate(event("a", "Scheduled", "m"));
            assert!(!r.skip);
            assert_eq!(r.event.count, Some(n));
            assert_eq!(r.event.metadata.name, name);
            let patch = r.patch.expect("a repeat is a patch");
            assert_eq!(patch["count"], n);
            assert_eq!(patch["message"], "m");
            assert_eq!(patch.as_object().map(|o| o.len()), Some(3));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tenth_distinct_message_is_combined() {
        let mut c = EventCorrelator::default();
        for i in 0..9 {
            let r = c.correlate(event("a", "Sync", &format!("message {i}")));
            assert_eq!(
                r.event.message.as_deref(),
                Some(format!("message {i}").as_str())
            );
            assert!(r.patch.is_none());
        }
        let tenth = c.correlate(event("a", "Sync", "message 9"));
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): message 9")
        );
        assert_eq!(tenth.event.count, Some(1));
        assert!(tenth.patch.is_none());
        let eleventh = c.correlate(event("a", "Sync", "message 10"));
        assert_eq!(eleventh.event.metadata.name, tenth.event.metadata.name);
        assert_eq!(eleventh.event.count, Some(2));
        assert!(eleventh.patch.is_some());
        // The group now remembers messages 2..=10 (each combination evicted the oldest): one of
        // them passes on its own, counted up on its earlier event; an evicted one is combined.
        let again = c.correlate(event("a", "Sync", "message 5"));
        assert_eq!(again.event.message.as_deref(), Some("message 5"));
        assert_eq!(again.event.count, Some(2));
        let evicted = c.correlate(event("a", "Sync", "message 0"));
        assert_eq!(evicted.event.metadata.name, tenth.event.metadata.name);
        assert_eq!(evicted.event.count, Some(3));
        // Another reason is another group.
        let other = c.correlate(event("a", "Other", "message 0"));
        assert_eq!(other.event.message.as_deref(), Some("message 0"));
    }

    #[tokio::test(start_paused = true)]
    async fn aggregation_group_forgets_after_the_interval() {
        let mut c = EventCorrelator::default();
        for i in 0..9 {
            c.correlate(event("a", "Sync", &format!("m{i}")));
        }
        tokio::time::advance(Duration::from_secs(601)).await;
        let r = c.correlate(event("a", "Sync", "m9"));
        assert_eq!(r.event.message.as_deref(), Some("m9"));
    }

    #[tokio::test(start_paused = true)]
    async fn spam_filter_drops_the_26th_and_refills_one_per_five_minutes() {
        let mut c = EventCorrelator::default();
        for i in 0..25 {
            let r = c.correlate(event("a", &format!("R{i}"), "m"));
            assert!(!r.skip, "event {i} passes");
        }
        assert!(c.correlate(event("a", "R25", "m")).skip);
        // Another object has its own budget.
        assert!(!c.correlate(event("b", "R0", "m")).skip);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(c.correlate(event("a", "R26", "m")).skip);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!c.correlate(event("a", "R27", "m")).skip);
        assert!(c.correlate(event("a", "R28", "m")).skip);
    }

    #[tokio::test(start_paused = true)]
    async fn skipped_repeats_are_carried_in_the_next_count() {
        let mut c = EventCorrelator::default();
        for _ in 0..25 {
            assert!(!c.correlate(event("a", "Same", "m")).skip);
        }
        assert!(c.correlate(event("a", "Same", "m")).skip);
        assert!(c.correlate(event("a", "Same", "m")).skip);
        tokio::time::advance(Duration::from_secs(300)).await;
        let r = c.correlate(event("a", "Same", "m"));
        assert!(!r.skip);
        assert_eq!(r.event.count, Some(28));
    }
}
