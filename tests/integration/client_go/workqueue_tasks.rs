//! Every background task a queue starts is owned by the queue: it ends on shutdown or when the
//! last handle is dropped.

use prometheus_client::registry::Registry;
use sample_client_go::workqueue::{
    DelayingQueue, ItemExponentialFailureRateLimiter, Queue, QueueMetrics, RateLimitingQueue,
};
use std::time::Duration;

fn alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

use crate::support::yield_to_tasks;

#[tokio::test(start_paused = true)]
async fn the_timer_task_ends_when_the_last_handle_is_dropped() {
    let before = alive();
    let q = DelayingQueue::new();
    q.add_after(1, Duration::from_secs(60));
    let clone = q.clone();
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before + 1, "one timer task per delaying queue");
    drop(q);
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before + 1, "a clone still holds the queue");
    drop(clone);
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before, "the timer task ended with the last handle");
}

#[tokio::test(start_paused = true)]
async fn the_timer_task_ends_on_shutdown() {
    let before = alive();
    let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(
        Duration::from_secs(1),
        Duration::from_secs(10),
    ));
    q.add_rate_limited(1);
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before + 1);
    q.shut_down();
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before);
}

#[tokio::test(start_paused = true)]
async fn the_metrics_refresh_task_ends_with_its_queue() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry);
    let before = alive();

    let named = Queue::<u8>::with_metrics("dropped", &metrics);
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before + 1);
    drop(named);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(alive(), before, "ends at the first refresh after the drop");

    let named = Queue::<u8>::with_metrics("shut", &metrics);
    yield_to_tasks(8, Duration::ZERO).await;
    assert_eq!(alive(), before + 1);
    named.shut_down();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(alive(), before, "ends at the first refresh after shutdown");

    let unnamed = Queue::<u8>::new();
    unnamed.add(1);
    assert_eq!(alive(), before, "an unnamed queue starts no task");
}
