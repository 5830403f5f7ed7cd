//! The statuses the controller wrote and its cache has not shown yet.

use super::*;

/// The statuses this controller wrote and its At informer has not delivered yet.
///
/// Phases only move forward (PENDING → RUNNING → DONE). If the cache still shows an older
/// phase than the one we wrote, acting on it could repeat work: most dangerously, a pod deleted
/// right after the At went DONE would look like "RUNNING, no pod" and be created again. So
/// the sync handler acts on the status it wrote (and its resourceVersion, so a write based on
/// it does not conflict) until the cache catches up; see [`WrittenStatuses::effective`].
#[derive(Debug, Default)]
pub struct WrittenStatuses {
    by_key: Mutex<HashMap<SmallString, Written>>,
}

/// One write's record. After a burst thousands are held at once, so it is kept small: 88 bytes
/// with the status boxed apart (a hash table has up to twice the slots of its entries, and an
/// inline `AtStatus` would make each slot 144 bytes larger), the key and resourceVersion as
/// [`SmallString`]s, the UID a [`UidString`], none of them allocated.
#[derive(Debug, Clone)]
struct Written {
    uid: Option<UidString>,
    resource_version: Option<SmallString>,
    generation: Option<i64>,
    status: Option<Box<AtStatus>>,
}

impl Written {
    /// Whether a cached At with this metadata and phase has caught up with this write (see
    /// [`WrittenStatuses::effective`]).
    fn caught_up_by(&self, cached: &impl ObjectMetaAccess, phase: AtPhase) -> bool {
        let written_phase = self
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default();
        self.uid.as_deref() != cached.uid()
            || self.resource_version.as_deref() == cached.resource_version()
            || phase_rank(phase) > phase_rank(written_phase)
            || cached.generation() > self.generation
    }
}

fn phase_rank(p: AtPhase) -> u8 {
    match p {
        AtPhase::Pending => 0,
        AtPhase::Running => 1,
        AtPhase::Done => 2,
    }
}

impl WrittenStatuses {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SmallString, Written>> {
        // Single inserts and removes only: a poisoned map is still consistent.
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the object the server returned from a status write (a `DONE` status slimmed
    /// as the cache slims it: [`slim_done_status`]).
    pub fn record(&self, key: &str, stored: &At) {
        let mut status = stored.status.clone();
        if let Some(s) = status.as_mut() {
            slim_done_status(s);
        }
        self.lock().insert(
            key.into(),
            Written {
                uid: stored.metadata.uid.as_deref().map(UidString::from),
                resource_version: stored
                    .metadata
                    .resource_version
                    .as_deref()
                    .map(SmallString::from),
                generation: stored.metadata.generation,
                status: status.map(Box::new),
            },
        );
    }

    /// Forgets `key` (deleted, or a write conflicted).
    pub fn forget(&self, key: &str) {
        let mut map = self.lock();
        map.remove(key);
        map.shrink_after_burst();
    }

    /// The At to act on: the cached one, or, while the cache is behind our last write for the
    /// same object, the cached one (its spec) with our written status and resourceVersion.
    ///
    /// resourceVersions are opaque (a client must not order them), so "behind" is judged by
    /// what can be ordered: the cache has caught up when it shows our resourceVersion, a later
    /// phase, or a later generation (a spec change made after our write). A cache showing the
    /// same phase with another resourceVersion is treated as not caught up; if it was in fact
    /// newer (someone else wrote the status), the next status write conflicts, the record is
    /// forgotten and the retry reads the cache.
    pub fn effective(&self, key: &str, cached: Arc<At>) -> Arc<At> {
        let mut map = self.lock();
        let Some(w) = map.get(key) else {
            return cached;
        };
        if w.caught_up_by(&cached.metadata, cached.phase()) {
            map.remove(key);
            map.shrink_after_burst();
            return cached;
        }
        // The sync hands over the one copy it rebuilt from the cache: edited in place, not
        // copied again (`make_mut` copies only an `At` someone else still holds).
        let mut effective = cached;
        let at = Arc::make_mut(&mut effective);
        at.status = w.status.as_deref().cloned();
        at.metadata.resource_version = w.resource_version.as_deref().map(str::to_owned);
        effective
    }

    /// Forgets the record of `key` once the informer shows `delivered` has caught up with it
    /// (the same test as [`WrittenStatuses::effective`]). The At informer's update handler
    /// calls this, so a record lives for one watch round trip, not until the next sync of its
    /// key: after a burst of 10,000 Ats that next sync comes only when the pod finishes (or
    /// never, for a `DONE` At), and the records of every At written meanwhile were held.
    pub fn settle(&self, key: &str, delivered: &AtSummary) {
        let mut map = self.lock();
        if map
            .get(key)
            .is_some_and(|w| w.caught_up_by(&delivered.metadata, delivered.phase()))
        {
            map.remove(key);
            // The records of a burst go as its statuses arrive: give their room back.
            map.shrink_after_burst();
        }
    }

    /// How many writes the cache has not caught up with.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when the cache has caught up with every write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
