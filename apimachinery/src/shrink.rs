//! Giving back the memory of a burst: collections that shrink once they have drained.
//!
//! A Rust `HashMap`, `HashSet` or `VecDeque` keeps its largest capacity forever: removing
//! entries never frees a bucket. A controller's bookkeeping is bursty by nature: a work queue
//! holds every object's key for a moment after the initial list (10,000 Ats: a 16,384-bucket
//! map of about 1 MB, and a FIFO of 400 KB), then drains to a handful. Kept at that size, the
//! drained tables sit in the heap beside everything the controller caches afterwards (the pods
//! it creates, their statuses), and the process's peak memory is the sum of both. Released
//! once drained, the same pages hold the later objects instead. (Go's maps do not shrink
//! either; client-go's work queue is a slice that is re-sliced, and a map of the dirty set that
//! Go never shrinks.)
//!
//! [`ShrinkAfterBurst::shrink_after_burst`] is the one rule, called by the owner after it
//! removes entries: when a collection holds fewer than a quarter of the entries it has room
//! for (and has room for more than [`FLOOR`]), it shrinks to twice what it holds. The gap
//! between shrinking (below a quarter) and growing (when full) keeps a collection that
//! hovers around one size from reallocating back and forth: after a shrink it must lose half
//! its entries again before the next one, so the rehashing costs O(1) per removal amortised.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};

/// Below this capacity a collection is never shrunk: small tables are cheap, and re-growing
/// them would cost more than they hold.
pub const FLOOR: usize = 64;

/// The capacity to shrink to, if a collection of `len` entries and room for `capacity` should
/// shrink (see the module doc).
fn shrunk_capacity(len: usize, capacity: usize) -> Option<usize> {
    (capacity > FLOOR && len < capacity / 4).then(|| (len * 2).max(FLOOR))
}

/// A collection that can give back the room a burst left behind.
pub trait ShrinkAfterBurst {
    /// Shrinks the collection to twice its length when it fills less than a quarter of its
    /// capacity (and its capacity is above [`FLOOR`]); otherwise does nothing.
    fn shrink_after_burst(&mut self);
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkAfterBurst for HashMap<K, V, S> {
    fn shrink_after_burst(&mut self) {
        if let Some(to) = shrunk_capacity(self.len(), self.capacity()) {
            self.shrink_to(to);
        }
    }
}

impl<T: Eq + Hash, S: BuildHasher> ShrinkAfterBurst for HashSet<T, S> {
    fn shrink_after_burst(&mut self) {
        if let Some(to) = shrunk_capacity(self.len(), self.capacity()) {
            self.shrink_to(to);
        }
    }
}

impl<T> ShrinkAfterBurst for VecDeque<T> {
    fn shrink_after_burst(&mut self) {
        if let Some(to) = shrunk_capacity(self.len(), self.capacity()) {
            self.shrink_to(to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drained_map_and_queue_shrink_to_twice_what_they_hold() {
        let mut map: HashMap<u32, u32> = (0..10_000).map(|i| (i, i)).collect();
        let mut fifo: VecDeque<u32> = (0..10_000).collect();
        let (full_map, full_fifo) = (map.capacity(), fifo.capacity());
        // Draining one at a time, as a work queue does.
        for i in 0..9_990 {
            map.remove(&i);
            map.shrink_after_burst();
            fifo.pop_front();
            fifo.shrink_after_burst();
        }
        assert_eq!((map.len(), fifo.len()), (10, 10));
        assert!(
            map.capacity() < full_map / 50,
            "{} of {full_map}",
            map.capacity()
        );
        assert!(
            fifo.capacity() < full_fifo / 50,
            "{} of {full_fifo}",
            fifo.capacity()
        );
        assert!(map.capacity() >= FLOOR && fifo.capacity() >= FLOOR);
        // Nothing was lost on the way.
        assert!((9_990..10_000).all(|i| map.get(&i) == Some(&i)));
        assert!(fifo.iter().copied().eq(9_990..10_000));
    }

    #[test]
    fn a_collection_above_a_quarter_or_at_the_floor_keeps_its_room() {
        let mut set: HashSet<u32> = (0..1_000).collect();
        let full = set.capacity();
        // Remove down to exactly a quarter of the room: not below it, so no shrink.
        let mut next = 0;
        while (set.len() - 1) * 4 >= full {
            set.remove(&next);
            next += 1;
        }
        assert!(set.len() * 4 >= full && set.len() < 1_000);
        set.shrink_after_burst();
        // (A hash table's `capacity()` dips a little as removals leave tombstones; a shrink
        // would have halved it.)
        assert!(
            set.capacity() > full * 3 / 4,
            "{} of {full}",
            set.capacity()
        );

        let mut small: VecDeque<u32> = VecDeque::with_capacity(FLOOR);
        small.push_back(1);
        let room = small.capacity();
        small.shrink_after_burst();
        assert_eq!(small.capacity(), room);
    }

    #[test]
    fn shrinking_is_rare_while_a_collection_hovers_around_one_size() {
        // Adding and removing around 1,000 entries: after the first shrink, no more.
        let mut map: HashMap<u32, ()> = (0..100_000).map(|i| (i, ())).collect();
        map.retain(|k, _| *k < 1_000);
        map.shrink_after_burst();
        let settled = map.capacity();
        for round in 0..100u32 {
            for i in 0..500 {
                map.insert(100_000 + round * 500 + i, ());
            }
            map.retain(|k, _| *k < 1_000);
            map.shrink_after_burst();
            assert!(map.capacity() > settled * 3 / 4, "round {round}");
        }
    }
}
