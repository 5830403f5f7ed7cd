//! Metric values after a scripted sequence, read back from the Prometheus text exposition.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use sample_client_go::workqueue::{
    ItemExponentialFailureRateLimiter, Queue, QueueMetrics, RateLimitingQueue,
};
use std::collections::HashMap;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// `series{labels}` → value, from the text exposition.
fn scrape(registry: &Registry) -> HashMap<String, f64> {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse::<f64>().unwrap())
        })
        .collect()
}

fn value(m: &HashMap<String, f64>, series: &str) -> f64 {
    match m.get(series) {
        Some(v) => *v,
        None => panic!("missing series {series}; have {:#?}", m.keys()),
    }
}

#[tokio::test(start_paused = true)]
async fn scripted_sequence_produces_client_go_metrics() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry);
    let q = RateLimitingQueue::with_metrics(
        "foos",
        ItemExponentialFailureRateLimiter::new(S, 1000 * S),
        &metrics,
    );

    q.add("a");
    q.add("b");
    q.add("a"); // deduplicated: not counted
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_adds_total{name="foos"}"#), 2.0);
    assert_eq!(value(&m, r#"workqueue_depth{name="foos"}"#), 2.0);

    tokio::time::sleep(2 * S).await;
    let a = q.get().await.unwrap();
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_depth{name="foos"}"#), 1.0);
    assert_eq!(
        value(&m, r#"workqueue_queue_duration_seconds_count{name="foos"}"#),
        1.0
    );
    assert_eq!(
        value(&m, r#"workqueue_queue_duration_seconds_sum{name="foos"}"#),
        2.0
    );
    // client-go's buckets: 1e-8 … 10 s. A 2 s wait lands in the 10 s bucket only.
    assert_eq!(
        value(
            &m,
            r#"workqueue_queue_duration_seconds_bucket{le="1.0",name="foos"}"#
        ),
        0.0
    );
    assert_eq!(
        value(
            &m,
            r#"workqueue_queue_duration_seconds_bucket{le="10.0",name="foos"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            r#"workqueue_queue_duration_seconds_bucket{le="1e-8",name="foos"}"#
        ),
        0.0
    );

    // a is processing for 1.1 s; the gauges refresh every 500 ms (last refresh at 1.0 s of age).
    tokio::time::sleep(1100 * MS).await;
    let m = scrape(&registry);
    assert_eq!(
        value(&m, r#"workqueue_unfinished_work_seconds{name="foos"}"#),
        1.0
    );
    assert_eq!(
        value(
            &m,
            r#"workqueue_longest_running_processor_seconds{name="foos"}"#
        ),
        1.0
    );

    // b is taken too; at the next refresh (a: 1.5 s, b: 0.4 s of age) the sum and max differ.
    let b = q.get().await.unwrap();
    tokio::time::sleep(450 * MS).await;
    let m = scrape(&registry);
    let unfinished = value(&m, r#"workqueue_unfinished_work_seconds{name="foos"}"#);
    assert!((unfinished - 1.9).abs() < 1e-9, "{unfinished}");
    assert_eq!(
        value(
            &m,
            r#"workqueue_longest_running_processor_seconds{name="foos"}"#
        ),
        1.5
    );

    q.done(&a);
    q.add_rate_limited(b); // failure: one retry
    q.done(&b);
    q.add_after("c", S); // requeue: one retry
    let m = scrape(&registry);
    assert_eq!(
        value(&m, r#"workqueue_work_duration_seconds_count{name="foos"}"#),
        2.0
    );
    // a: 3.55 s − 2 s; b: 3.55 s − 3.1 s.
    let work = value(&m, r#"workqueue_work_duration_seconds_sum{name="foos"}"#);
    assert!((work - 2.0).abs() < 1e-9, "{work}");
    assert_eq!(value(&m, r#"workqueue_retries_total{name="foos"}"#), 2.0);
    assert_eq!(value(&m, r#"workqueue_depth{name="foos"}"#), 0.0);

    // Both retries fire (b after 1 s of backoff, c after 1 s).
    tokio::time::sleep(1100 * MS).await;
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_depth{name="foos"}"#), 2.0);
    assert_eq!(value(&m, r#"workqueue_adds_total{name="foos"}"#), 4.0);
    assert_eq!(
        value(&m, r#"workqueue_unfinished_work_seconds{name="foos"}"#),
        0.0
    );
    assert_eq!(
        value(
            &m,
            r#"workqueue_longest_running_processor_seconds{name="foos"}"#
        ),
        0.0
    );
}

#[tokio::test(start_paused = true)]
async fn adds_while_processing_count_once_and_queue_time_starts_at_the_first_add() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry);
    let q = Queue::with_metrics("bars", &metrics);
    q.add(1);
    let one = q.get().await.unwrap();
    q.add(1); // dirty while processing: counted, depth +1
    tokio::time::sleep(S).await;
    q.add(1); // deduplicated
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_adds_total{name="bars"}"#), 2.0);
    assert_eq!(value(&m, r#"workqueue_depth{name="bars"}"#), 1.0);
    q.done(&one);
    tokio::time::sleep(S).await;
    let _ = q.get().await.unwrap();
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_depth{name="bars"}"#), 0.0);
    // First get waited 0 s; the second 2 s, counted from the add made during processing.
    assert_eq!(
        value(&m, r#"workqueue_queue_duration_seconds_sum{name="bars"}"#),
        2.0
    );
}

#[tokio::test(start_paused = true)]
async fn two_queues_have_separate_series_and_unnamed_queues_none() {
    let mut registry = Registry::default();
    let metrics = QueueMetrics::new(&mut registry);
    let x = Queue::with_metrics("x", &metrics);
    let y = Queue::with_metrics("y", &metrics);
    let unnamed = Queue::new();
    x.add(1);
    y.add(1);
    y.add(2);
    unnamed.add(1);
    let m = scrape(&registry);
    assert_eq!(value(&m, r#"workqueue_adds_total{name="x"}"#), 1.0);
    assert_eq!(value(&m, r#"workqueue_adds_total{name="y"}"#), 2.0);
    assert_eq!(
        m.keys()
            .filter(|k| k.starts_with("workqueue_adds_total"))
            .count(),
        2
    );
}
