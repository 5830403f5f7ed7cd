//! The delaying queue under a paused clock: deadlines, coalescing, shutdown.

use sample_client_go::workqueue::DelayingQueue;
use sample_client_go::workqueue::delaying::FIRE_BATCH;
use std::time::Duration;
use tokio::time::Instant;

const S: Duration = Duration::from_secs(1);

/// Lets the timer task run without moving the paused clock.
use crate::support::yield_to_tasks;

/// Reference test vector 3, first half: AddAfter(a, 10 s) then AddAfter(a, 1 s) → a appears
/// after 1 s, once.
#[tokio::test(start_paused = true)]
async fn vector_3_earlier_deadline_wins() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", 10 * S);
    q.add_after("a", S);
    assert_eq!(q.waiting_len(), 1, "one entry per distinct item");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S);
    q.done(&"a");
    tokio::time::sleep(20 * S).await;
    assert_eq!(q.len(), 0, "the later request was dropped, not kept");
    assert_eq!(q.waiting_len(), 0);
}

/// Reference test vector 3, second half: AddAfter(a, 1 s) then AddAfter(a, 10 s) → also 1 s.
#[tokio::test(start_paused = true)]
async fn vector_3_later_deadline_is_dropped() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", S);
    q.add_after("a", 10 * S);
    assert_eq!(q.deadline(&"a"), Some(start + S));
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S);
    q.done(&"a");
    tokio::time::sleep(20 * S).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_at_once() {
    let q = DelayingQueue::new();
    q.add_after(1, Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.waiting_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn items_fire_in_deadline_order_not_insertion_order() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", 3 * S);
    q.add_after("b", S);
    q.add_after("c", 2 * S);
    for (item, at) in [("b", S), ("c", 2 * S), ("a", 3 * S)] {
        assert_eq!(q.get().await, Some(item));
        assert_eq!(start.elapsed(), at);
        q.done(&item);
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_fires_before_its_deadline() {
    let q = DelayingQueue::new();
    q.add_after("a", S);
    tokio::time::advance(S - Duration::from_millis(1)).await;
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(q.len(), 0);
    tokio::time::advance(Duration::from_millis(1)).await;
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_add_of_a_queued_item_is_deduplicated() {
    let q = DelayingQueue::new();
    q.add("a");
    q.add_after("a", S);
    assert_eq!(q.len(), 1, "waiting and queued copies are independent");
    tokio::time::sleep(2 * S).await;
    assert_eq!(
        q.len(),
        1,
        "the delayed add found a still queued and was deduplicated"
    );
    assert_eq!(q.get().await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn an_earlier_request_made_later_moves_the_deadline() {
    let q = DelayingQueue::new();
    let start = Instant::now();
    q.add_after("a", 10 * S);
    tokio::time::sleep(2 * S).await;
    q.add_after("a", S); // due at 3 s, before the pending 10 s
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 3 * S);
}

#[tokio::test(start_paused = true)]
async fn more_due_items_than_one_batch_all_fire() {
    let q = DelayingQueue::new();
    let n = FIRE_BATCH * 3 + 7;
    for i in 0..n {
        q.add_after(i, S);
    }
    assert_eq!(q.waiting_len(), n);
    tokio::time::sleep(2 * S).await;
    assert_eq!(q.len(), n);
    assert_eq!(q.waiting_len(), 0);
    // FIFO order among equal deadlines follows the order of the add_after calls.
    for i in 0..n {
        assert_eq!(q.get().await, Some(i));
    }
}

#[tokio::test(start_paused = true)]
async fn shut_down_drops_waiting_items_and_ignores_new_ones() {
    let q = DelayingQueue::new();
    q.add_after("a", S);
    q.add("b");
    q.shut_down();
    assert_eq!(q.waiting_len(), 0);
    q.add_after("c", Duration::ZERO);
    q.add_after("d", S);
    tokio::time::sleep(5 * S).await;
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn a_year_ahead_runs_under_the_paused_clock() {
    let q = DelayingQueue::new();
    let year = Duration::from_secs(365 * 24 * 3600);
    let start = Instant::now();
    q.add_after("cron", year);
    assert_eq!(q.get().await, Some("cron"));
    assert_eq!(start.elapsed(), year);
}
