//! The work queue and the worker loop every controller here runs on.
//!
//! ## The shape of a Kubernetes controller
//!
//! Every controller of kube-controller-manager is the same loop (sample-controller's
//! `controller.go` draws it): informers' event handlers turn changes into **keys**
//! (`namespace/name` of the object to look at) on a rate-limited **work queue**, and a worker
//! takes one key at a time and runs the **sync handler**, which reads the object and what it
//! owns from the informers' caches, compares them with what should be, and writes the
//! difference through the API. The result decides what happens to the key: an error puts it
//! back with a growing delay (`AddRateLimited`), success forgets its failures (`Forget`), and a
//! controller with a deadline (a CronJob's next run) asks to be woken later (`AddAfter`). The
//! queue holds each key once however many changes named it, and sync handlers are
//! level-triggered: they look at the state, not at the change, so a key synced once too often
//! costs nothing, and the echo of a controller's own write is harmless.
//!
//! ## Here
//!
//! [`Controller`] is the handler side (which resources it follows, which keys a change names,
//! the sync handler); [`run`] is the rest: an [`Informer`] over the loopback interface, a
//! [`Queue`] of keys with due times, and one worker. Writes are the API's: conditional on the
//! object's `resourceVersion`, so a sync that raced another writer fails with `409 Conflict`
//! and its key is synced again, at once, against the newer object the informer has by then.
//! Other errors back off from 5 ms, doubling, to 10 s per key (client-go's default
//! per-item exponential limiter). A controller may ask for a reaction delay
//! ([`Controller::delay`]): the StatefulSet controller reacts a fixed time after each change,
//! so tests can watch its steps one by one.

use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, WatchEvent};
use tokio::time::Instant;

use crate::informer::{Informer, Kind, Update};

/// A controller's handler side (see the module docs).
pub trait Controller: Send + 'static {
    /// What goes on the queue (typically `(namespace, name)`).
    type Key: Clone + Eq + Hash + std::fmt::Debug + Send + Sync;

    /// The name the controller logs under (kube-controller-manager's, e.g. `job-controller`).
    fn name(&self) -> &'static str;

    /// The resources the controller's informer follows.
    fn kinds(&self) -> Vec<Kind>;

    /// The keys one change concerns (it is already in the cache).
    fn keys_for(&self, event: &WatchEvent, cache: &Informer) -> Vec<Self::Key>;

    /// Every key there is to look at (at the start and after a relist).
    fn all_keys(&self, cache: &Informer) -> Vec<Self::Key>;

    /// How long after a change its keys are synced (default: at once).
    fn delay(&self) -> Duration {
        Duration::ZERO
    }

    /// Brings the world in line for one key; `Ok(Some(d))` asks to be synced again after `d`.
    fn sync(
        &mut self,
        key: &Self::Key,
        cache: &Informer,
    ) -> impl Future<Output = Result<Option<Duration>, ApiError>> + Send;
}

/// First delay of a key whose sync failed.
const BASE_BACKOFF: Duration = Duration::from_millis(5);
/// Longest delay of a key whose sync keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Keys with the time each is due, each held once (client-go's delaying, rate-limiting queue
/// in one structure): a map from each key to its due time, and a heap of due times for taking
/// the earliest in O(log n), as client-go's delaying queue keeps its `waitForPriorityQueue`.
/// When a key's due time moves earlier the heap gets a new entry and the old one is skipped
/// when it comes up (each entry carries the sequence number it was added with), so adding,
/// taking and asking for the next due time stay logarithmic however many keys wait (the
/// garbage collector's queue holds one item per new dependent).
#[derive(Debug)]
pub struct Queue<K> {
    due: HashMap<K, (Instant, u64)>,
    heap: BinaryHeap<Entry<K>>,
    seq: u64,
    failures: HashMap<K, u32>,
}

/// One heap entry: earliest first, then first added.
#[derive(Debug)]
struct Entry<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Entry<K> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<K> Eq for Entry<K> {}

impl<K> PartialOrd for Entry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Entry<K> {
    /// Reversed: `BinaryHeap` is a max-heap, and the earliest must come out first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            due: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            failures: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    /// Due at once.
    pub fn add(&mut self, key: K) {
        self.add_after(key, Duration::ZERO);
    }

    /// Due after `d` (an earlier due time the key already has is kept).
    pub fn add_after(&mut self, key: K, d: Duration) {
        let at = Instant::now() + d;
        if self.due.get(&key).is_some_and(|(t, _)| *t <= at) {
            return;
        }
        self.seq += 1;
        self.due.insert(key.clone(), (at, self.seq));
        self.heap.push(Entry {
            at,
            seq: self.seq,
            key,
        });
    }

    /// Due after the key's next back-off step.
    pub fn add_rate_limited(&mut self, key: K) {
        let n = self.failures.entry(key.clone()).or_insert(0);
        let d = BASE_BACKOFF
            .saturating_mul(2u32.saturating_pow(*n))
            .min(MAX_BACKOFF);
        *n = n.saturating_add(1);
        self.add_after(key, d);
    }

    /// The key's failures are forgotten.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Drops heap entries a later `add_after` replaced, from the top.
    fn skip_stale(&mut self) {
        while let Some(top) = self.heap.peek() {
            if self
                .due
                .get(&top.key)
                .is_some_and(|(_, seq)| *seq == top.seq)
            {
                return;
            }
            self.heap.pop();
        }
    }

    /// A key that is due, taken off the queue (the one due earliest).
    pub fn pop_due(&mut self) -> Option<K> {
        self.skip_stale();
        if self.heap.peek()?.at > Instant::now() {
            return None;
        }
        let entry = self.heap.pop()?;
        self.due.remove(&entry.key);
        Some(entry.key)
    }

    /// When the next key is due.
    pub fn next_due(&mut self) -> Option<Instant> {
        self.skip_stale();
        self.heap.peek().map(|e| e.at)
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.due.len()
    }
}

fn enqueue<C: Controller>(c: &C, queue: &mut Queue<C::Key>, cache: &Informer, update: Update) {
    match update {
        Update::Events(events) => {
            for ev in &events {
                for k in c.keys_for(ev, cache) {
                    queue.add_after(k, c.delay());
                }
            }
        }
        Update::Relisted => {
            for k in c.all_keys(cache) {
                queue.add_after(k, c.delay());
            }
        }
    }
}

/// Runs `c` as `lb`'s user until the server shuts down (see the module docs).
pub async fn run<C: Controller>(mut c: C, lb: Loopback) {
    let shutdown = lb.shutdown();
    let mut cache = Informer::new(lb, c.kinds());
    if !cache.start().await {
        return;
    }
    let mut queue: Queue<C::Key> = Queue::default();
    for k in c.all_keys(&cache) {
        queue.add_after(k, c.delay());
    }
    tracing::debug!(
        controller = c.name(),
        keys = queue.len(),
        "controller started"
    );
    loop {
        while let Some(key) = queue.pop_due() {
            if shutdown.is_cancelled() {
                return;
            }
            // Read-your-writes: the cache holds every write made so far (see `informer`).
            if let Some(update) = cache.catch_up().await {
                enqueue(&c, &mut queue, &cache, update);
            }
            match c.sync(&key, &cache).await {
                Ok(again) => {
                    queue.forget(&key);
                    if let Some(d) = again {
                        queue.add_after(key, d);
                    }
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!(controller = c.name(), ?key, "conflict; syncing again");
                    queue.add(key);
                }
                Err(e) => {
                    tracing::warn!(controller = c.name(), ?key, error = %e.message, "sync failed; retrying");
                    queue.add_rate_limited(key);
                }
            }
            tokio::task::yield_now().await;
        }
        let next = queue.next_due();
        tokio::select! {
            () = shutdown.cancelled() => return,
            update = cache.next() => match update {
                Some(update) => enqueue(&c, &mut queue, &cache, update),
                None => return,
            },
            () = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_is_held_once_at_its_earliest_due_time() {
        let mut q: Queue<&str> = Queue::default();
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(1));
        q.add_after("a", Duration::from_secs(9));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_due(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.pop_due(), Some("a"));
        assert_eq!(q.len(), 0);
    }

    /// Keys come out earliest first (then in the order they were added), each once, however
    /// often its due time moved; a key taken and added again comes back.
    #[tokio::test(start_paused = true)]
    async fn keys_come_out_earliest_first_and_once() {
        let mut q: Queue<u32> = Queue::default();
        for k in (0..100).rev() {
            q.add_after(k, Duration::from_secs(u64::from(k % 10)));
        }
        // Moved earlier (a new heap entry; the old one is skipped) and later (kept as it was).
        q.add_after(55, Duration::ZERO);
        q.add_after(3, Duration::from_secs(60));
        assert_eq!(q.len(), 100);
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut out = vec![];
        while let Some(k) = q.pop_due() {
            out.push(k);
        }
        let mut expected: Vec<u32> = (0..100).collect();
        // By due time, then by when each got it (55's earlier time came last).
        expected.sort_by_key(|k| match k {
            55 => (0, 100),
            k => (k % 10, 99 - k),
        });
        assert_eq!(out, expected);
        assert_eq!((q.len(), q.next_due()), (0, None));
        q.add(7);
        assert_eq!(q.pop_due(), Some(7));
        assert_eq!(q.pop_due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_until_forgotten() {
        let mut q: Queue<&str> = Queue::default();
        let start = Instant::now();
        let mut delays = vec![];
        for _ in 0..4 {
            q.add_rate_limited("k");
            let at = q.next_due().expect("queued");
            delays.push(at - start);
            tokio::time::advance(at - Instant::now()).await;
            assert_eq!(q.pop_due(), Some("k"));
        }
        let steps: Vec<Duration> = delays.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            steps,
            [
                Duration::from_millis(10),
                Duration::from_millis(20),
                Duration::from_millis(40)
            ]
        );
        q.forget(&"k");
        let now = Instant::now();
        q.add_rate_limited("k");
        assert_eq!(q.next_due(), Some(now + BASE_BACKOFF));
    }
}
