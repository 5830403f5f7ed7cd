//! Rate limiters: how long an item should wait before its next retry.
//!
//! This is client-go's `util/workqueue/default_rate_limiters.go`. A [`RateLimiter`] answers one
//! question, [`when`](RateLimiter::when): "this item just failed; how long until it may be tried
//! again?". Asking **records the failure** (the call has side effects), so ask once per failure.
//! [`forget`](RateLimiter::forget) clears an item's history after a success, and
//! [`num_requeues`](RateLimiter::num_requeues) reports how many failures are on record.
//!
//! | limiter | `when(x)` | client-go |
//! |---|---|---|
//! | [`ItemExponentialFailureRateLimiter`] | `base · 2^n` for the item's `n`-th failure (from 0), capped at `max` | `ItemExponentialFailureRateLimiter` |
//! | [`ItemFastSlowRateLimiter`] | `fast` for the first `max_fast_attempts` failures, then `slow` | `ItemFastSlowRateLimiter` |
//! | [`BucketRateLimiter`] | one token bucket shared by all items (qps, burst) | `BucketRateLimiter{rate.Limiter}` |
//! | [`MaxOfRateLimiter`] | the largest answer of several limiters (all of them record) | `MaxOfRateLimiter` |
//! | [`WithMaxWaitRateLimiter`] | another limiter's answer, capped | `WithMaxWaitRateLimiter` |
//!
//! [`default_controller_rate_limiter`] is client-go's `DefaultControllerRateLimiter`:
//! max(exponential 5 ms → 1000 s, bucket 10 qps / burst 100). Per item that gives 5, 10, 20,
//! 40 ms, …, 655.36 s for the 18th failure (n = 17), then 1000 s from the 19th on; the bucket only
//! matters when more than 100 retries come in a burst or more than 10 per second overall.
//!
//! ## The token bucket, exactly as `golang.org/x/time/rate`
//!
//! client-go's bucket calls `rate.Limiter.Reserve().Delay()`: every call takes a token, even one
//! that will only exist in the future (the bucket goes into debt), and returns how long until that
//! token exists. With burst 100 and 10 qps the first 100 calls wait 0, the 101st waits 100 ms,
//! the 102nd 200 ms, and so on. [`BucketRateLimiter`] is the workspace's x/time/rate bucket
//! ([`apimachinery::token_bucket::TokenBucket`]). The client throttle and the event spam filter
//! run on `governor` instead; governor has no `Reserve`: it answers "not until T" without
//! taking the token, so 100 items failing at once would all get the same delay rather than
//! one period apart, which is the point of this bucket. The clock is Tokio's, so a paused test
//! clock drives it too.
//!
//! ## Memory
//!
//! The per-item limiters remember each failing item until it is forgotten, as in client-go:
//! call `forget` (the rate-limiting queue's `forget`) when an item succeeds or is deleted.

use apimachinery::shrink::ShrinkAfterBurst;
use apimachinery::token_bucket::TokenBucket;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// Decides how long an item waits before it is retried. See the [module documentation](self).
pub trait RateLimiter<T>: Send + Sync {
    /// Records a failure of `item` and returns how long it should wait before the next try.
    fn when(&self, item: &T) -> Duration;
    /// Clears `item`'s failure history (after a success, or when it is deleted).
    fn forget(&self, item: &T);
    /// How many failures of `item` are on record.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

fn lock<V>(m: &Mutex<V>) -> MutexGuard<'_, V> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A bad rate-limiter setting, naming the field and the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateLimiterConfigError {
    /// `qps` must be a finite number above zero.
    #[error("invalid rate limiter qps {0}: must be a finite number greater than 0")]
    Qps(f64),
    /// `burst` must be at least 1.
    #[error("invalid rate limiter burst {0}: must be at least 1")]
    Burst(u32),
}

/// `base · 2^n` for an item's `n`-th consecutive failure (counting from 0), capped at `max`.
///
/// The first failure waits exactly `base`. The computation cannot overflow at any failure count:
/// once `base · 2^n` exceeds `max` (or what fits in 64 bits of nanoseconds, client-go's
/// `MaxInt64` check) the answer is `max`.
#[derive(Debug)]
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> ItemExponentialFailureRateLimiter<T> {
    /// A limiter that starts at `base` and doubles per failure up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailureRateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay for failure number `n` (0-based), without recording anything.
    pub fn backoff_for(&self, n: u32) -> Duration {
        let base = self.base.as_nanos();
        let delay = if n >= 64 {
            None
        } else {
            base.checked_mul(1u128 << n)
        };
        match delay {
            Some(nanos) if nanos <= i64::MAX as u128 => {
                let d = Duration::from_nanos(nanos as u64);
                d.min(self.max)
            }
            _ => self.max,
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let n = {
            let mut failures = lock(&self.failures);
            let count = failures.entry(item.clone()).or_insert(0);
            let n = *count;
            *count = count.saturating_add(1);
            n
        };
        self.backoff_for(n)
    }

    fn forget(&self, item: &T) {
        let mut failures = lock(&self.failures);
        failures.remove(item);
        failures.shrink_after_burst();
    }

    fn num_requeues(&self, item: &T) -> u32 {
        lock(&self.failures).get(item).copied().unwrap_or(0)
    }
}

/// `fast` for an item's first `max_fast_attempts` failures, `slow` after that.
#[derive(Debug)]
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    attempts: Mutex<HashMap<T, u32>>,
}

impl<T> ItemFastSlowRateLimiter<T> {
    /// A limiter that retries quickly `max_fast_attempts` times, then slowly.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        ItemFastSlowRateLimiter {
            fast,
            slow,
            max_fast_attempts,
            attempts: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut attempts = lock(&self.attempts);
        let count = attempts.entry(item.clone()).or_insert(0);
        *count = count.saturating_add(1);
        if *count <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        let mut attempts = lock(&self.attempts);
        attempts.remove(item);
        attempts.shrink_after_burst();
    }

    fn num_requeues(&self, item: &T) -> u32 {
        lock(&self.attempts).get(item).copied().unwrap_or(0)
    }
}

/// One token bucket shared by every item: it limits the overall retry rate of a queue.
///
/// Starts full with `burst` tokens and refills `qps` tokens per second. `when` always takes a
/// token (possibly one that exists only in the future) and returns how long until it exists.
/// `num_requeues` is always 0 and `forget` does nothing, as in client-go. The bucket is the
/// workspace's x/time/rate one ([`apimachinery::token_bucket::TokenBucket::reserve`]) on
/// Tokio's clock.
pub struct BucketRateLimiter {
    bucket: Mutex<TokenBucket>,
}

impl std::fmt::Debug for BucketRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketRateLimiter").finish_non_exhaustive()
    }
}

impl BucketRateLimiter {
    /// A bucket refilling `qps` tokens per second with room for `burst` tokens.
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateLimiterConfigError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(RateLimiterConfigError::Qps(qps));
        }
        if burst == 0 {
            return Err(RateLimiterConfigError::Burst(burst));
        }
        Ok(BucketRateLimiter {
            bucket: Mutex::new(TokenBucket::new(qps, burst, Instant::now())),
        })
    }

    /// Takes one token and returns how long until it is available.
    pub fn reserve(&self) -> Duration {
        let now = Instant::now();
        let time_to_act = lock(&self.bucket).reserve(now);
        time_to_act.saturating_duration_since(now)
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }
    fn forget(&self, _item: &T) {}
    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The largest answer of several limiters. Every limiter is asked (so every one records the
/// failure); `num_requeues` is the largest; `forget` forgets in all of them.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> std::fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`; with none, every answer is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Another limiter's answer, capped at `max_delay`.
#[derive(Debug)]
pub struct WithMaxWaitRateLimiter<L> {
    limiter: L,
    max_delay: Duration,
}

impl<L> WithMaxWaitRateLimiter<L> {
    /// Caps `limiter`'s delays at `max_delay`.
    pub fn new(limiter: L, max_delay: Duration) -> Self {
        WithMaxWaitRateLimiter { limiter, max_delay }
    }
}

impl<T, L: RateLimiter<T>> RateLimiter<T> for WithMaxWaitRateLimiter<L> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max_delay)
    }
    fn forget(&self, item: &T) {
        self.limiter.forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

/// client-go's `DefaultControllerRateLimiter`: max(exponential 5 ms → 1000 s, bucket 10 qps /
/// burst 100).
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    let bucket = BucketRateLimiter {
        bucket: Mutex::new(TokenBucket::new(10.0, 100, Instant::now())),
    };
    exponential_and_bucket(bucket)
}

/// max(exponential 5 ms → 1000 s, bucket `qps` / `burst`): the default controller limiter with
/// another overall rate; sample-controller uses 50 qps / burst 300.
pub fn controller_rate_limiter<T>(
    qps: f64,
    burst: u32,
) -> Result<MaxOfRateLimiter<T>, RateLimiterConfigError>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    Ok(exponential_and_bucket(BucketRateLimiter::new(qps, burst)?))
}

fn exponential_and_bucket<T>(bucket: BucketRateLimiter) -> MaxOfRateLimiter<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(bucket),
    ])
}

/// client-go's `DefaultItemBasedRateLimiter`: exponential 1 ms → 1000 s.
pub fn default_item_based_rate_limiter<T>() -> ItemExponentialFailureRateLimiter<T> {
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1000))
}
