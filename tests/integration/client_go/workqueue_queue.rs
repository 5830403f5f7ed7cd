//! The basic work queue: dedup, one worker per item, shutdown and drain, and a stress test.

use sample_client_go::workqueue::Queue;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Reference test vector 1: Add(a), Add(a) → Len 1. Get → a. Add(a) while a is processing →
/// Len 0. Done(a) → Len 1.
#[tokio::test(start_paused = true)]
async fn vector_1_dedup_and_requeue_on_done() {
    let q = Queue::new();
    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.len(), 0);
    q.add("a");
    assert_eq!(q.len(), 0, "an item being processed is not queued again");
    q.done(&"a");
    assert_eq!(
        q.len(),
        1,
        "done queues the item that became dirty meanwhile"
    );
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    assert!(q.is_empty());
    assert!(q.is_idle());
}

/// Reference test vector 2: after ShutDown, Add is ignored; Get keeps returning the queued items,
/// then reports shutdown.
#[tokio::test(start_paused = true)]
async fn vector_2_shutdown_drains_queued_items_then_returns_none() {
    let q = Queue::new();
    q.add(1);
    q.add(2);
    q.shut_down();
    assert!(q.shutting_down());
    q.add(3);
    assert_eq!(q.len(), 2, "add after shutdown is ignored");
    assert_eq!(q.get().await, Some(1));
    assert_eq!(q.get().await, Some(2));
    assert_eq!(q.get().await, None);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn fifo_order_and_done_requeues_at_the_tail() {
    let q = Queue::new();
    for k in ["a", "b", "c"] {
        q.add(k);
    }
    assert_eq!(q.get().await, Some("a"));
    q.add("a");
    q.done(&"a");
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, Some("c"));
    assert_eq!(q.get().await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn done_of_an_unknown_item_changes_nothing() {
    let q = Queue::new();
    q.add("a");
    q.done(&"a"); // queued, not processing
    q.done(&"zzz");
    assert_eq!(q.len(), 1);
    assert_eq!(q.processing_len(), 0);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.processing_len(), 1);
}

#[tokio::test(start_paused = true)]
async fn blocked_get_wakes_on_add_and_on_shutdown() {
    let q: Queue<u32> = Queue::new();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let q = q.clone();
        workers.push(tokio::spawn(async move { q.get().await }));
    }
    tokio::task::yield_now().await;
    q.add(7);
    q.add(8);
    let mut got = Vec::new();
    // Two workers get an item each; the third stays blocked until shutdown.
    tokio::time::sleep(Duration::from_millis(1)).await;
    q.shut_down();
    for w in workers {
        got.push(w.await.unwrap());
    }
    got.sort();
    assert_eq!(got, vec![None, Some(7), Some(8)]);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_get_loses_no_item() {
    let q: Queue<u32> = Queue::new();
    let r = tokio::time::timeout(Duration::from_secs(1), q.get()).await;
    assert!(r.is_err(), "nothing queued yet");
    q.add(1);
    assert_eq!(q.get().await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_in_flight_items() {
    let q = Queue::new();
    q.add("a");
    q.add("b");
    q.add("c");
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();

    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    assert!(q.shutting_down());
    q.add("d");
    assert_eq!(q.len(), 1, "only c is left: d came after shutdown");

    q.done(&a);
    tokio::task::yield_now().await;
    assert!(!drain.is_finished(), "b is still processing");

    // Queued items are still handed out while draining.
    let c = q.get().await.unwrap();
    assert_eq!(c, "c");
    q.done(&b);
    tokio::task::yield_now().await;
    assert!(!drain.is_finished(), "c is still processing");
    q.done(&c);
    drain.await.unwrap();
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_stops_a_drain_wait() {
    let q = Queue::new();
    q.add(1);
    let _stuck = q.get().await.unwrap();
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    assert!(!drain.is_finished());
    q.shut_down();
    drain.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn drain_with_nothing_in_flight_returns_at_once() {
    let q: Queue<u8> = Queue::new();
    q.add(1);
    q.shut_down_with_drain().await;
    assert_eq!(q.get().await, Some(1));
    assert_eq!(q.get().await, None);
}

/// 8 workers, 100,000 adds over 1,000 keys, with random re-adds while processing. No key is ever
/// handled by two workers at once, and every key is handled after its last add.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_eight_workers_never_share_a_key_and_lose_no_add() {
    const KEYS: usize = 1_000;
    const ADDS: usize = 100_000;
    const WORKERS: usize = 8;

    struct Book {
        in_flight: Vec<AtomicBool>,
        last_add: Vec<AtomicU64>,
        last_start: Vec<AtomicU64>,
        clock: AtomicU64,
        overlaps: AtomicUsize,
        handled: AtomicUsize,
        readds: AtomicUsize,
    }
    impl Book {
        fn tick(&self) -> u64 {
            self.clock.fetch_add(1, Ordering::SeqCst) + 1
        }
        fn add(&self, q: &Queue<usize>, k: usize) {
            // Recorded before the add, so the check below is conservative.
            self.last_add[k].fetch_max(self.tick(), Ordering::SeqCst);
            q.add(k);
        }
    }
    let book = Arc::new(Book {
        in_flight: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        last_add: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        last_start: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        clock: AtomicU64::new(0),
        overlaps: AtomicUsize::new(0),
        handled: AtomicUsize::new(0),
        readds: AtomicUsize::new(0),
    });
    let q: Queue<usize> = Queue::new();

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let q = q.clone();
        let book = Arc::clone(&book);
        workers.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(w as u64 + 1);
            while let Some(k) = q.get().await {
                book.last_start[k].fetch_max(book.tick(), Ordering::SeqCst);
                if book.in_flight[k].swap(true, Ordering::SeqCst) {
                    book.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                book.handled.fetch_add(1, Ordering::Relaxed);
                // Random re-adds while processing: of this key, or of another one.
                match rng.u8(..10) {
                    0 => {
                        book.readds.fetch_add(1, Ordering::Relaxed);
                        book.add(&q, k);
                    }
                    1 => {
                        book.readds.fetch_add(1, Ordering::Relaxed);
                        book.add(&q, rng.usize(..KEYS));
                    }
                    _ => {}
                }
                if rng.bool() {
                    tokio::task::yield_now().await;
                }
                book.in_flight[k].store(false, Ordering::SeqCst);
                q.done(&k);
            }
        }));
    }

    let producer = tokio::spawn({
        let q = q.clone();
        let book = Arc::clone(&book);
        async move {
            let mut rng = fastrand::Rng::with_seed(42);
            for i in 0..ADDS {
                book.add(&q, rng.usize(..KEYS));
                if i % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    producer.await.unwrap();
    // Workers only add while processing, so once idle the queue stays idle. (A queue that hands
    // a key to two workers may never become idle: stop waiting then, and report it below.)
    while !q.is_idle() && book.overlaps.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    q.shut_down();
    for w in workers {
        w.await.unwrap();
    }

    assert_eq!(
        book.overlaps.load(Ordering::SeqCst),
        0,
        "a key was on two workers at once"
    );
    for k in 0..KEYS {
        let added = book.last_add[k].load(Ordering::SeqCst);
        let started = book.last_start[k].load(Ordering::SeqCst);
        assert!(
            added == 0 || started > added,
            "key {k}: last add at {added}, last handled at {started}"
        );
    }
    let handled = book.handled.load(Ordering::SeqCst);
    let readds = book.readds.load(Ordering::SeqCst);
    assert!(readds > 0, "the workers re-added keys while processing");
    assert!(
        handled <= ADDS + readds,
        "dedup never hands out more items than were added ({handled} > {})",
        ADDS + readds
    );
}
