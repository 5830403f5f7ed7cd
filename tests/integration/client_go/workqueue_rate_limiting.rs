//! Rate limiters and the rate-limiting queue, including the spurious-trigger behaviour.

use sample_client_go::workqueue::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, RateLimiterConfigError, RateLimitingQueue,
    WithMaxWaitRateLimiter, controller_rate_limiter, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
use std::time::Duration;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// Reference test vector 4: When(a) gives 5 ms, 10 ms, 20 ms. NumRequeues(a) = 3. Forget(a),
/// then When(a) = 5 ms.
#[tokio::test(start_paused = true)]
async fn vector_4_exponential_limiter() {
    let l = ItemExponentialFailureRateLimiter::new(5 * MS, 1000 * S);
    assert_eq!(l.when(&"a"), 5 * MS);
    assert_eq!(l.when(&"a"), 10 * MS);
    assert_eq!(l.when(&"a"), 20 * MS);
    assert_eq!(l.num_requeues(&"a"), 3);
    assert_eq!(l.num_requeues(&"b"), 0, "items are tracked separately");
    l.forget(&"a");
    assert_eq!(l.num_requeues(&"a"), 0);
    assert_eq!(l.when(&"a"), 5 * MS);
}

#[test]
fn default_controller_schedule_matches_client_go() {
    let l = default_controller_rate_limiter::<&str>();
    let delays: Vec<Duration> = (0..20).map(|_| l.when(&"k")).collect();
    assert_eq!(delays[0], 5 * MS);
    assert_eq!(delays[3], 40 * MS);
    assert_eq!(delays[17], Duration::from_millis(655_360), "n = 17");
    assert_eq!(delays[18], 1000 * S, "capped from the 19th failure on");
    assert_eq!(delays[19], 1000 * S);
    assert_eq!(l.num_requeues(&"k"), 20);
    let before_cap: Duration = delays[..18].iter().sum();
    assert_eq!(before_cap, Duration::from_micros(1_310_715_000)); // ≈ 1310.7 s
}

#[test]
fn exponential_limiter_is_overflow_safe_at_any_failure_count() {
    let l = ItemExponentialFailureRateLimiter::new(5 * MS, 1000 * S);
    for n in [30, 63, 64, 65, 127, 128, 1_000, u32::MAX] {
        assert_eq!(l.backoff_for(n), 1000 * S, "n = {n}");
    }
    // A huge base with a huge max: capped by what 64-bit nanoseconds hold, then by max.
    let big =
        ItemExponentialFailureRateLimiter::<u8>::new(Duration::from_secs(1 << 40), Duration::MAX);
    assert_eq!(big.backoff_for(40), Duration::MAX);
    for _ in 0..200 {
        l.when(&"k");
    }
    assert_eq!(l.when(&"k"), 1000 * S);
}

#[test]
fn item_based_default_starts_at_one_millisecond() {
    let l = default_item_based_rate_limiter::<u32>();
    assert_eq!(l.when(&1), MS);
    assert_eq!(l.when(&1), 2 * MS);
}

#[test]
fn fast_slow_limiter() {
    let l = ItemFastSlowRateLimiter::new(5 * MS, 10 * S, 3);
    assert_eq!(l.when(&"a"), 5 * MS);
    assert_eq!(l.when(&"a"), 5 * MS);
    assert_eq!(l.when(&"a"), 5 * MS);
    assert_eq!(l.when(&"a"), 10 * S);
    assert_eq!(l.when(&"b"), 5 * MS);
    assert_eq!(l.num_requeues(&"a"), 4);
    l.forget(&"a");
    assert_eq!(l.when(&"a"), 5 * MS);
}

/// The bucket reserves like `rate.Limiter.Reserve`: burst calls free, then one interval more per
/// call, and refills at qps.
#[tokio::test(start_paused = true)]
async fn bucket_limiter_reserves_future_tokens() {
    let l = BucketRateLimiter::new(10.0, 100).unwrap();
    for i in 0..100 {
        assert_eq!(RateLimiter::<u8>::when(&l, &0), Duration::ZERO, "call {i}");
    }
    assert_eq!(RateLimiter::<u8>::when(&l, &0), 100 * MS);
    assert_eq!(
        RateLimiter::<u8>::when(&l, &1),
        200 * MS,
        "shared by every item"
    );
    assert_eq!(RateLimiter::<u8>::num_requeues(&l, &0), 0);
    // 300 ms later three tokens came back: the 2 owed and one for the next call.
    tokio::time::advance(300 * MS).await;
    assert_eq!(RateLimiter::<u8>::when(&l, &0), Duration::ZERO);
    assert_eq!(RateLimiter::<u8>::when(&l, &0), 100 * MS);
    // A long pause refills the bucket up to its burst, no further.
    tokio::time::advance(3600 * S).await;
    for _ in 0..100 {
        assert_eq!(RateLimiter::<u8>::when(&l, &0), Duration::ZERO);
    }
    assert_eq!(RateLimiter::<u8>::when(&l, &0), 100 * MS);
}

#[test]
fn bucket_limiter_rejects_bad_settings_naming_the_value() {
    for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = BucketRateLimiter::new(qps, 10).unwrap_err();
        assert!(matches!(err, RateLimiterConfigError::Qps(_)));
        assert!(err.to_string().contains("qps"), "{err}");
    }
    let err = BucketRateLimiter::new(10.0, 0).unwrap_err();
    assert_eq!(err, RateLimiterConfigError::Burst(0));
    assert_eq!(
        err.to_string(),
        "invalid rate limiter burst 0: must be at least 1"
    );
    assert!(controller_rate_limiter::<u8>(50.0, 300).is_ok());
    assert!(controller_rate_limiter::<u8>(50.0, 0).is_err());
}

#[tokio::test(start_paused = true)]
async fn max_of_asks_every_limiter_and_returns_the_largest() {
    let l: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(MS, S)),
        Box::new(ItemFastSlowRateLimiter::new(3 * MS, 10 * S, 2)),
    ]);
    assert_eq!(l.when(&"a"), 3 * MS);
    assert_eq!(l.when(&"a"), 3 * MS);
    assert_eq!(l.when(&"a"), 10 * S);
    assert_eq!(l.num_requeues(&"a"), 3);
    l.forget(&"a");
    assert_eq!(l.num_requeues(&"a"), 0);
    assert_eq!(l.when(&"a"), 3 * MS, "both limiters forgot");
    let none: MaxOfRateLimiter<u8> = MaxOfRateLimiter::new(Vec::new());
    assert_eq!(none.when(&1), Duration::ZERO);
}

#[test]
fn with_max_wait_caps_the_delay() {
    let l = WithMaxWaitRateLimiter::new(ItemExponentialFailureRateLimiter::new(S, 1000 * S), 3 * S);
    assert_eq!(l.when(&1), S);
    assert_eq!(l.when(&1), 2 * S);
    assert_eq!(l.when(&1), 3 * S);
    assert_eq!(l.num_requeues(&1), 3);
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_retries_after_the_backoff() {
    let q = RateLimitingQueue::with_default_controller_rate_limiter();
    let start = Instant::now();
    q.add_rate_limited("a");
    assert_eq!(q.len(), 0);
    assert_eq!(q.num_requeues(&"a"), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 5 * MS);
    q.add_rate_limited("a");
    q.done(&"a");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 15 * MS);
    q.forget(&"a");
    q.done(&"a");
    assert_eq!(q.num_requeues(&"a"), 0, "forget clears the history");
    q.shut_down();
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 0, "ignored after shutdown");
}

/// Deliverable 4: events for an item waiting out its backoff join the pending retry: it neither
/// runs early nor gains failures. (client-go would run it on each event and, as each run fails,
/// count one more failure.)
#[tokio::test(start_paused = true)]
async fn spurious_triggers_join_the_pending_retry() {
    let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(S, 1000 * S));
    q.add("a");
    let start = Instant::now();
    let a = q.get().await.unwrap();
    q.add_rate_limited(a); // the reconcile failed: retry in 1 s
    q.done(&a);
    assert!(q.is_backing_off(&"a"));

    // Five informer events (or resyncs) during the backoff.
    for _ in 0..5 {
        tokio::time::sleep(150 * MS).await;
        q.add("a");
        assert_eq!(q.len(), 0, "the event does not run the item early");
    }
    // Another failure report for the same pending retry does not count twice.
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 1);
    assert_eq!(q.deadline(&"a"), Some(start + S));

    // The retry runs exactly once, when the backoff ends.
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S);
    assert!(!q.is_backing_off(&"a"));
    assert_eq!(q.len(), 0);

    // It fails again: the next backoff is the 2nd step (2 s), not the 7th (64 s).
    q.add_rate_limited("a");
    q.done(&"a");
    assert_eq!(q.num_requeues(&"a"), 2);
    assert_eq!(q.deadline(&"a"), Some(start + 3 * S));

    // Other items are unaffected.
    q.add("b");
    assert_eq!(q.get().await, Some("b"));
    q.done(&"b");

    // An explicit earlier add_after still wins (a requested time, not an event).
    q.add_after("a", 100 * MS);
    assert!(!q.is_backing_off(&"a"));
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S + 100 * MS);
    q.done(&"a");

    // Once the item is not backing off, add queues it at once again.
    q.add("a");
    assert_eq!(q.len(), 1);
}

/// An event that arrived while the item was being processed still triggers one more run (the
/// worker may have read stale state); a failure of that run joins the pending backoff.
#[tokio::test(start_paused = true)]
async fn an_event_during_processing_runs_once_more_without_inflating_failures() {
    let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(S, 1000 * S));
    let start = Instant::now();
    q.add("a");
    let a = q.get().await.unwrap();
    q.add("a"); // event while processing
    q.add_rate_limited(a);
    q.done(&a);
    assert_eq!(q.len(), 1, "the mid-processing event is not lost");
    let a = q.get().await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    q.add_rate_limited(a); // fails again: joins the backoff already pending
    q.done(&a);
    assert_eq!(q.num_requeues(&"a"), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S);
}

#[tokio::test(start_paused = true)]
async fn forget_does_not_remove_a_pending_retry() {
    let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(S, 1000 * S));
    let start = Instant::now();
    q.add_rate_limited("a");
    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), S);
}

/// The documented way out of a backoff: `add_after(key, 0)` queues the item now; the pending
/// retry still fires at its deadline.
#[tokio::test(start_paused = true)]
async fn add_after_zero_runs_a_backing_off_item_now() {
    let q = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(10 * S, 1000 * S));
    let start = Instant::now();
    q.add_rate_limited("a");
    q.add("a");
    assert_eq!(q.len(), 0);
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::ZERO);
    q.done(&"a");
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), 10 * S);
    q.done(&"a");
    assert_eq!(q.waiting_len(), 0);
}
