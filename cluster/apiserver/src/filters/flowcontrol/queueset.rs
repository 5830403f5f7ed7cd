//! One priority level's seats and queues: shuffle sharding plus fair queuing.
//!
//! This mirrors `k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset`:
//!
//! * A level has `seats` (its concurrency limit) and, when its limit response is `Queue`, a
//!   fixed set of `queues` each holding at most `queueLengthLimit` waiting requests.
//! * **Shuffle sharding**: a flow (FlowSchema name + distinguisher) is hashed and the hash deals a
//!   *hand* of `handSize` distinct queues ([`deal`], the real `shufflesharding.Dealer`
//!   algorithm). A request joins the queue of its hand with the fewest requests waiting plus
//!   executing. A greedy flow therefore fills at most its own hand; another flow almost
//!   always has a queue of its hand that the greedy one does not touch.
//! * **Fair queuing**: when a seat frees up, the next request comes from the non-empty queue with
//!   the smallest *virtual start time*; every dispatch advances that queue's virtual start by one
//!   request, and a queue that becomes non-empty starts at the level's current virtual time. So
//!   queues take turns, one request each, however many requests one of them holds. (The real
//!   queueset measures each request's cost by its actual execution time times its seat width;
//!   here a request costs its width, which keeps the turn-taking but not weighting by duration.)
//! * **Width**: a request occupies `width` seats while it executes (a LIST of many objects more
//!   than one, see [`crate::filters::flowcontrol::list_width`]), clamped to the level's seats. It starts only when that
//!   many seats are free, and dispatching stops at a head of queue that does not fit, as the
//!   real queueset's `dispatchLocked` does (`canAccommodateSeatsLocked`), so a wide request is
//!   not starved by narrow ones behind it.
//! * A request that finds its chosen queue full is **rejected** at once (`queue-full`); a level
//!   whose limit response is `Reject` rejects whenever all seats are taken
//!   (`concurrency-limit`). The caller also bounds the time a request may wait
//!   (`time-out`), after which it is removed from its queue.
//!
//! Memory is bounded by `queues × queueLengthLimit` waiting entries, whatever the number of flows.
//!
//! Invariants (all under one mutex): `executing ≤ seats` except while the configuration
//! shrinks; a waiter is either in exactly one queue or has been given a seat, never both; every
//! seat given out is returned exactly once, by the [`Seat`] guard's `Drop` or by the waiting
//! guard's `Drop` if the request went away after being dispatched.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// Largest hand the dealer supports (the real dealer's limit).
pub const MAX_HAND_SIZE: usize = 15;

/// The shuffle-sharding dealer: the `hand_size` distinct queue indexes in `0..deck_size` that
/// `hash` deals, exactly as `k8s.io/apiserver/pkg/util/shufflesharding.Dealer.Deal` does.
pub fn deal(mut hash: u64, deck_size: usize, hand_size: usize) -> Vec<usize> {
    let hand_size = hand_size.min(deck_size).min(MAX_HAND_SIZE);
    let mut remainders = Vec::with_capacity(hand_size);
    for i in 0..hand_size {
        let d = (deck_size - i) as u64;
        remainders.push((hash % d) as usize);
        hash /= d;
    }
    let mut hand = Vec::with_capacity(hand_size);
    for i in 0..hand_size {
        let mut card = remainders[i];
        for j in (1..=i).rev() {
            if card >= remainders[j - 1] {
                card += 1;
            }
        }
        hand.push(card);
    }
    hand
}

/// How a level limits and queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSetConfig {
    /// Concurrency limit (at least 1).
    pub seats: usize,
    /// Number of queues; 0 means the limit response is `Reject`.
    pub queues: usize,
    /// Queues dealt to each flow.
    pub hand_size: usize,
    /// Most requests waiting in one queue.
    pub queue_length_limit: usize,
}

/// Why a request was turned away (the `reason` label of `apiserver_flowcontrol_rejected_requests_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Its queue was full.
    QueueFull,
    /// The level rejects instead of queuing and every seat was taken.
    ConcurrencyLimit,
    /// It waited in its queue for longer than allowed.
    TimeOut,
}

impl Rejection {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::QueueFull => "queue-full",
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::TimeOut => "time-out",
        }
    }
}

struct Waiter {
    id: u64,
    width: usize,
    grant: oneshot::Sender<()>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiter>,
    executing: usize,
    virtual_start: u64,
}

struct Inner {
    queues: Vec<Queue>,
    /// Seats taken by executing requests (the sum of their widths).
    executing: usize,
    waiting: usize,
    virtual_time: u64,
    next_id: u64,
}

/// One level's seats and queues.
pub struct QueueSet {
    config: QueueSetConfig,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for QueueSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSet")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What [`QueueSet::enqueue`] decided.
pub enum Admission {
    /// A seat was free: run now.
    Run(Seat),
    /// Wait for a seat ([`Waiting::granted`]).
    Wait(Waiting),
    /// Turned away.
    Reject(Rejection),
}

impl QueueSet {
    /// A level with no request in it.
    pub fn new(config: QueueSetConfig) -> Arc<Self> {
        let queues = (0..config.queues.max(1))
            .map(|_| Queue::default())
            .collect();
        Arc::new(QueueSet {
            config,
            inner: Mutex::new(Inner {
                queues,
                executing: 0,
                waiting: 0,
                virtual_time: 0,
                next_id: 0,
            }),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &QueueSetConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `(waiting requests, executing seats)` right now.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        let g = self.lock();
        (g.waiting, g.executing)
    }

    /// Admits, queues or rejects one request of the flow whose hash is `flow_hash`, which
    /// occupies `width` seats (at least 1, at most the level's seats) while it executes.
    pub fn enqueue(self: &Arc<Self>, flow_hash: u64, width: usize) -> Admission {
        let width = width.clamp(1, self.config.seats.max(1));
        let mut g = self.lock();
        let rejecting = self.config.queues == 0;
        let q = if rejecting {
            0
        } else {
            let hand = deal(flow_hash, g.queues.len(), self.config.hand_size.max(1));
            let mut best = hand[0];
            for &i in &hand[1..] {
                let load = |q: &Queue| q.waiting.len() + q.executing;
                if load(&g.queues[i]) < load(&g.queues[best]) {
                    best = i;
                }
            }
            best
        };
        if g.executing + width <= self.config.seats.max(1) && g.waiting == 0 {
            g.executing += width;
            let vt = g.virtual_time;
            let queue = &mut g.queues[q];
            queue.executing += 1;
            queue.virtual_start = queue.virtual_start.max(vt) + width as u64;
            return Admission::Run(Seat {
                set: self.clone(),
                queue: q,
                width,
            });
        }
        if rejecting {
            return Admission::Reject(Rejection::ConcurrencyLimit);
        }
        if g.queues[q].waiting.len() >= self.config.queue_length_limit {
            return Admission::Reject(Rejection::QueueFull);
        }
        let id = g.next_id;
        g.next_id += 1;
        let (tx, rx) = oneshot::channel();
        let vt = g.virtual_time;
        let queue = &mut g.queues[q];
        if queue.waiting.is_empty() {
            queue.virtual_start = queue.virtual_start.max(vt);
        }
        queue.waiting.push_back(Waiter {
            id,
            width,
            grant: tx,
        });
        g.waiting += 1;
        // A seat may be free while others wait (after a configuration change): hand it out.
        self.dispatch(&mut g);
        Admission::Wait(Waiting {
            set: self.clone(),
            queue: q,
            id,
            width,
            rx: Some(rx),
        })
    }

    /// Gives free seats to waiting requests, fairest queue first, until the fairest head does
    /// not fit in the seats left.
    fn dispatch(&self, g: &mut Inner) {
        while g.executing < self.config.seats.max(1) && g.waiting > 0 {
            let Some(q) = g
                .queues
                .iter()
                .enumerate()
                .filter(|(_, q)| !q.waiting.is_empty())
                .min_by_key(|(_, q)| q.virtual_start)
                .map(|(i, _)| i)
            else {
                return;
            };
            let seats_left = self.config.seats.max(1) - g.executing;
            let queue = &mut g.queues[q];
            if queue.waiting.front().is_some_and(|w| w.width > seats_left) {
                return;
            }
            let Some(w) = queue.waiting.pop_front() else {
                return;
            };
            let start = queue.virtual_start;
            queue.virtual_start += w.width as u64;
            queue.executing += 1;
            g.waiting -= 1;
            g.executing += w.width;
            g.virtual_time = g.virtual_time.max(start);
            // The waiting guard removes its entry before its receiver goes, so the receiver
            // is alive; if not, the seats are simply handed back.
            if w.grant.send(()).is_err() {
                g.executing -= w.width;
                g.queues[q].executing -= 1;
            }
        }
    }

    fn release(&self, queue: usize, width: usize) {
        let mut g = self.lock();
        g.executing = g.executing.saturating_sub(width);
        if let Some(q) = g.queues.get_mut(queue) {
            q.executing = q.executing.saturating_sub(1);
        }
        self.dispatch(&mut g);
    }
}

/// The seats held by an executing request; returned when dropped.
pub struct Seat {
    set: Arc<QueueSet>,
    queue: usize,
    width: usize,
}

impl Seat {
    /// How many seats it holds.
    pub fn width(&self) -> usize {
        self.width
    }
}

impl std::fmt::Debug for Seat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seat").field("queue", &self.queue).finish()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.set.release(self.queue, self.width);
    }
}

/// A request waiting in a queue. Dropping it (timeout, client gone) removes it from its queue,
/// or returns the seat it was given in the meantime.
pub struct Waiting {
    set: Arc<QueueSet>,
    queue: usize,
    id: u64,
    width: usize,
    rx: Option<oneshot::Receiver<()>>,
}

impl Waiting {
    /// Waits until a seat is given.
    pub async fn granted(mut self) -> Seat {
        if let Some(rx) = self.rx.as_mut() {
            // The sender lives in the queue until it is used, or until this guard removes it;
            // an error cannot happen while `self` is alive, and is treated like a grant.
            let _ = rx.await;
        }
        self.rx = None;
        let seat = Seat {
            set: self.set.clone(),
            queue: self.queue,
            width: self.width,
        };
        // The seat now belongs to `seat`; this guard must not return it again.
        self.id = u64::MAX;
        seat
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.id == u64::MAX {
            return;
        }
        let mut g = self.set.lock();
        let id = self.id;
        let q = &mut g.queues[self.queue];
        if let Some(pos) = q.waiting.iter().position(|w| w.id == id) {
            q.waiting.remove(pos);
            g.waiting -= 1;
        } else {
            // Dispatched while nobody was listening any more: hand the seats back.
            g.executing = g.executing.saturating_sub(self.width);
            g.queues[self.queue].executing = g.queues[self.queue].executing.saturating_sub(1);
            self.set.dispatch(&mut g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_are_distinct_and_in_range() {
        for hash in [0u64, 1, 42, u64::MAX, 0xdead_beef_cafe] {
            let hand = deal(hash, 128, 6);
            assert_eq!(hand.len(), 6);
            let mut sorted = hand.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 6, "{hand:?}");
            assert!(hand.iter().all(|&c| c < 128));
        }
        assert_eq!(deal(7, 4, 6).len(), 4);
    }

    fn config(seats: usize, queues: usize, limit: usize) -> QueueSetConfig {
        QueueSetConfig {
            seats,
            queues,
            hand_size: 1,
            queue_length_limit: limit,
        }
    }

    #[tokio::test]
    async fn queues_take_turns_and_full_queues_reject() {
        let set = QueueSet::new(config(1, 2, 3));
        // Hashes 0 and 1 deal queues 0 and 1 with a hand of one.
        let Admission::Run(first) = set.enqueue(0, 1) else {
            panic!("a free seat must run at once")
        };
        let mut greedy = Vec::new();
        for _ in 0..3 {
            match set.enqueue(0, 1) {
                Admission::Wait(w) => greedy.push(w),
                _ => panic!("greedy requests queue"),
            }
        }
        assert!(matches!(
            set.enqueue(0, 1),
            Admission::Reject(Rejection::QueueFull)
        ));
        let Admission::Wait(polite) = set.enqueue(1, 1) else {
            panic!("the other flow queues")
        };
        assert_eq!(set.counts(), (4, 1));
        drop(first);
        // The polite flow's queue has the smaller virtual start: it goes before the greedy backlog.
        let seat = tokio::time::timeout(std::time::Duration::from_secs(5), polite.granted())
            .await
            .expect("the other flow is served next");
        assert_eq!(set.counts(), (3, 1));
        drop(seat);
        drop(greedy);
        assert_eq!(
            set.counts(),
            (0, 0),
            "abandoned waiters and their seats are returned"
        );
    }

    #[test]
    fn reject_levels_never_queue() {
        let set = QueueSet::new(config(1, 0, 0));
        let Admission::Run(_seat) = set.enqueue(9, 1) else {
            panic!("free seat")
        };
        assert!(matches!(
            set.enqueue(9, 1),
            Admission::Reject(Rejection::ConcurrencyLimit)
        ));
    }

    #[tokio::test]
    async fn wide_requests_hold_their_width_and_wait_for_it() {
        let set = QueueSet::new(config(10, 2, 10));
        let Admission::Run(wide) = set.enqueue(0, 6) else {
            panic!("six free seats")
        };
        assert_eq!(wide.width(), 6);
        // Six taken: another six-seat request waits, a narrow one of another flow too (the
        // fairest head does not fit, so nothing jumps it).
        let Admission::Wait(second) = set.enqueue(0, 6) else {
            panic!("only four seats are left")
        };
        assert_eq!(set.counts(), (1, 6));
        drop(wide);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), second.granted())
            .await
            .expect("granted once six seats are free");
        assert_eq!(set.counts(), (0, 6));
        // A width above the level's seats is clamped to them.
        drop(second);
        let Admission::Run(all) = set.enqueue(1, 50) else {
            panic!("clamped to ten")
        };
        assert_eq!(all.width(), 10);
        drop(all);
        assert_eq!(set.counts(), (0, 0));
    }
}
