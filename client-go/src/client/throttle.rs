//! The client-side throttle: a QPS/burst token bucket in front of every request, and the
//! decision whether it applies at all (client-go's `util/flowcontrol` token bucket limiter and
//! `rest.Config` `QPS`/`Burst`).
//!
//! Data in: `qps`/`burst` from [`super::Config`] and, when following the server, the headers of
//! the first answer. Data out: a wait before each request ([`Throttle::acquire`]) and a
//! [`ThrottleDecision`] kept in [`super::ClientMetrics`].
//!
//! * **QPS and burst.** The API server is shared by every controller in the cluster, and a
//!   controller bug (a hot reconcile loop) must not turn into a flood that starves everyone else.
//!   The client therefore can hold a token bucket ([`Throttle`]): `burst` tokens to start with,
//!   refilled at `qps` per second; each request waits for a token. Watches skip the bucket (a
//!   watch is one long request, not a flood), as in client-go; a *retried* watch does take one.
//!   `qps <= 0` (client-go writes `-1`) disables the throttle.
//! * **Following the server (API Priority and Fairness).** The client-side bucket predates the
//!   server protecting itself. Since API Priority and Fairness (APF, beta in 1.20, GA in 1.29)
//!   the server queues and sheds load per flow and answers `429` + `Retry-After` when a priority
//!   level is full; a fixed client-side QPS on top of it only makes a controller slow on an idle
//!   cluster (kubernetes/kubernetes#111880 asks client-go to turn its limiter off when APF is
//!   on). controller-runtime disabled its client-side limiter by default (PR #3119, on SIG API
//!   Machinery's advice); Flux and cert-manager detect APF from the response headers
//!   `X-Kubernetes-PF-FlowSchema-UID` / `X-Kubernetes-PF-PriorityLevel-UID` (which every
//!   request classified by APF carries, exempt ones included) and drop their limiter when they
//!   are present. cert-manager#9158 is the trap to avoid: a QPS the user *set* must still win.
//!   Hence [`Config::follow_server_flow_control`](super::Config::follow_server_flow_control): when set (the manager sets it when neither
//!   `--kube-api-qps` nor `--kube-api-burst` is given), `qps`/`burst` are only a fallback. The
//!   first answer the client gets (the manager asks `GET /livez/ping` at start,
//!   [`super::Client::detect_flow_control`]) decides once, for the life of the client: APF headers
//!   present → no client-side throttle; absent → the fallback bucket (a `401`, answered before
//!   APF classifies a request, decides nothing). Until then the fallback bucket applies. The
//!   decision ([`ThrottleDecision`]) is logged once by the manager, kept in [`ClientMetrics`](super::ClientMetrics) and exposed as
//!   the `rest_client_rate_limiter_enabled` gauge and on `/readyz?verbose`. With the throttle
//!   off no wait is recorded in `rest_client_rate_limiter_duration_seconds` (client-go records
//!   none without a limiter either); `429` + `Retry-After` keeps being honoured (below).
//! * **Fair waiting.** Like client-go's limiter (`golang.org/x/time/rate`'s `Wait`), requests
//!   are served in the order they arrived, one every `1/qps` after the burst, and a task
//!   hammering the client in a loop cannot overtake a request that queued before its next call.
//!   The bucket is [`governor`]'s GCRA limiter; waiters queue on a fair lock in front of it (see
//!   [`Throttle`]). A request abandoned while it waits (its future dropped, say by a timeout)
//!   has taken no token and leaves the queue; the next one takes its turn. The first wait happens before the request
//!   timeout starts (client-go's order), so a long queue does not turn into timeouts of requests
//!   that were never sent. The bucket runs on `tokio::time`, so tests with a paused clock see
//!   exact schedules.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock as _;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use http::Response;

/// The response headers API Priority and Fairness sets on every request it classifies
/// (`k8s.io/api/flowcontrol/v1` `ResponseHeaderMatchedFlowSchemaUID` /
/// `ResponseHeaderMatchedPriorityLevelConfigurationUID`).
pub const FLOW_CONTROL_HEADERS: [&str; 2] = [
    "X-Kubernetes-PF-FlowSchema-UID",
    "X-Kubernetes-PF-PriorityLevel-UID",
];

/// True when `resp` carries either APF header.
pub(super) fn has_flow_control_headers<B>(resp: &Response<B>) -> bool {
    FLOW_CONTROL_HEADERS
        .iter()
        .any(|h| resp.headers().contains_key(*h))
}

/// What the client-side throttle does, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleDecision {
    /// `qps`/`burst` were given: the bucket applies whatever the server does.
    Configured,
    /// `qps <= 0` was given: no client-side throttle.
    Disabled,
    /// Following the server, no answer yet: the fallback bucket applies for now.
    Undecided,
    /// Following the server, which announces priority and fairness: no client-side throttle.
    ServerFlowControl,
    /// Following the server, which does not announce priority and fairness: the fallback
    /// bucket applies.
    NoServerFlowControl,
}

impl ThrottleDecision {
    /// True when requests wait for the client-side bucket.
    pub fn throttles(self) -> bool {
        matches!(
            self,
            ThrottleDecision::Configured
                | ThrottleDecision::Undecided
                | ThrottleDecision::NoServerFlowControl
        )
    }

    /// A short human-readable form (`on (configured)`, `off (server has priority and
    /// fairness)`, ...), as shown on `/readyz?verbose`.
    pub fn describe(self) -> &'static str {
        match self {
            ThrottleDecision::Configured => "on (--kube-api-qps/--kube-api-burst given)",
            ThrottleDecision::Disabled => "off (qps <= 0 given)",
            ThrottleDecision::Undecided => "on until the server answers",
            ThrottleDecision::ServerFlowControl => "off (server has priority and fairness)",
            ThrottleDecision::NoServerFlowControl => {
                "on (server announces no priority and fairness)"
            }
        }
    }

    pub(super) fn to_u8(self) -> u8 {
        match self {
            ThrottleDecision::Configured => 0,
            ThrottleDecision::Disabled => 1,
            ThrottleDecision::Undecided => 2,
            ThrottleDecision::ServerFlowControl => 3,
            ThrottleDecision::NoServerFlowControl => 4,
        }
    }

    pub(super) fn from_u8(v: u8) -> ThrottleDecision {
        match v {
            0 => ThrottleDecision::Configured,
            1 => ThrottleDecision::Disabled,
            3 => ThrottleDecision::ServerFlowControl,
            4 => ThrottleDecision::NoServerFlowControl,
            _ => ThrottleDecision::Undecided,
        }
    }
}

/// The client-side token bucket: `burst` requests at once, then `qps` per second, handed out in
/// arrival order.
///
/// This is client-go's `flowcontrol.NewTokenBucketRateLimiter` (a `golang.org/x/time/rate`
/// limiter) on [`governor`]'s GCRA limiter, which is the same bucket in other words: `burst`
/// cells at once, then one every `1/qps`.
///
/// * The bucket starts full (`burst` tokens) and refills continuously at `qps` tokens a second,
///   never above `burst`.
/// * **Arrival order.** Waiters queue on a fair (FIFO) lock; the one at the head asks the
///   limiter, sleeps until the instant governor names when there is no token yet, and takes it.
///   So callers are served in the order they arrived, one every `1/qps` after the burst, and a
///   task calling in a tight loop cannot overtake a caller that queued before its next call
///   (x/time/rate gets the same order by reserving future tokens in `Wait`; governor answers
///   "not until T" instead, and the queue keeps the order).
/// * **Abandoned waits.** A caller dropped while it waits (a timeout) had not taken a token: it
///   leaves the queue, and the next caller in line takes its place and its slot. Nothing is
///   lost.
///
/// Times come from `tokio::time` ([`TokioClock`]), so a test with a paused clock sees exact
/// schedules. Rates below one request a day are raised to one a day; a burst of 0 counts as 1.
pub struct Throttle {
    pub(super) qps: f64,
    pub(super) burst: f64,
    limiter: RateLimiter<NotKeyed, InMemoryState, TokioClock>,
    clock: TokioClock,
    /// Waiters, in arrival order (tokio's mutex is fair: FIFO).
    queue: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// The slowest rate a limiter is given: one a day (a smaller one is raised to it).
const MIN_RATE: f64 = 1.0 / 86_400.0;

/// governor's quota for `qps` a second with `burst` at once (see [`Throttle`] for the bounds).
pub fn quota(qps: f64, burst: u32) -> Quota {
    let rate = qps.max(MIN_RATE);
    let period = Duration::from_secs_f64(1.0 / rate).max(Duration::from_nanos(1));
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    // A period of at least 1 ns is never zero, which is all `with_period` refuses.
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
        .allow_burst(burst)
}

impl Throttle {
    /// `None` when `qps` is not a positive number (throttling disabled). A `burst` of 0 is
    /// treated as 1; rates below one request a day are treated as one a day.
    pub fn new(qps: f32, burst: u32) -> Option<Throttle> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let clock = TokioClock::default();
        let rate = f64::from(qps).max(MIN_RATE);
        Some(Throttle {
            qps: rate,
            burst: f64::from(burst.max(1)),
            limiter: RateLimiter::direct_with_clock(quota(rate, burst), clock),
            clock,
            queue: tokio::sync::Mutex::new(()),
        })
    }

    /// Waits for a token, behind every caller that arrived earlier; returns how long it waited.
    /// Dropping the future while it waits leaves the queue without taking a token.
    pub async fn acquire(&self) -> Duration {
        let started = tokio::time::Instant::now();
        let _turn = self.queue.lock().await;
        loop {
            match self.limiter.check() {
                Ok(()) => return started.elapsed(),
                Err(not_until) => {
                    tokio::time::sleep(not_until.wait_time_from(self.clock.now())).await;
                }
            }
        }
    }
}

/// governor's clock on `tokio::time`: an instant is the time since the clock was made, so a
/// paused tokio clock (tests) drives the limiters, and a real one drives them as the monotonic
/// clock does.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl governor::clock::Clock for TokioClock {
    type Instant = governor::nanos::Nanos;

    fn now(&self) -> governor::nanos::Nanos {
        tokio::time::Instant::now()
            .saturating_duration_since(self.epoch)
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;
    use std::sync::Mutex as StdMutex;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_allows_burst_then_qps() {
        let t = Throttle::new(10.0, 5).unwrap();
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            assert!(t.acquire().await.is_zero());
        }
        for _ in 0..10 {
            assert_eq!(ms(t.acquire().await), 100);
        }
        // 10 more at 10/s take exactly one virtual second.
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert!(Throttle::new(0.0, 10).is_none());
        assert!(Throttle::new(-1.0, 10).is_none());
        assert!(Throttle::new(f32::NAN, 10).is_none());
        assert!(Throttle::new(f32::INFINITY, 10).is_none());
        // Burst 0 acts as 1; a rate below one a day acts as one a day (no overflow).
        let slow = Throttle::new(f32::MIN_POSITIVE, 0).unwrap();
        assert!(slow.acquire().await.is_zero());
        assert_eq!(slow.acquire().await, Duration::from_secs(86_400));
    }

    /// burst 10, 5 qps (client-go's defaults), 30 callers queued one after another: the first
    /// ten pass at once, then one every 200 ms, in the order they arrived.
    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_get_the_burst_then_one_slot_each_in_arrival_order() {
        let t = Arc::new(Throttle::new(5.0, 10).unwrap());
        let start = tokio::time::Instant::now();
        let admitted = Arc::new(StdMutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..30u32 {
            let (t, admitted) = (t.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                t.acquire().await;
                admitted.lock().unwrap().push((i, ms(start.elapsed())));
            }));
            // Let caller i take its place in the queue before caller i+1 arrives.
            tokio::task::yield_now().await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let admitted = admitted.lock().unwrap().clone();
        let expected: Vec<(u32, u128)> = (0..30u32)
            .map(|i| (i, if i < 10 { 0 } else { 200 * u128::from(i - 9) }))
            .collect();
        assert_eq!(admitted, expected);
    }

    /// A task calling in a tight loop holds at most one reservation at a time; a caller that
    /// arrives between two of its calls is served at the next free slot, not after the loop.
    #[tokio::test(start_paused = true)]
    async fn a_tight_loop_cannot_overtake_a_caller_that_queued_first() {
        let t = Arc::new(Throttle::new(5.0, 1).unwrap());
        let start = tokio::time::Instant::now();
        let log = Arc::new(StdMutex::new(Vec::new()));
        let hog = {
            let (t, log) = (t.clone(), log.clone());
            tokio::spawn(async move {
                for _ in 0..6 {
                    t.acquire().await;
                    log.lock().unwrap().push(("hog", ms(start.elapsed())));
                }
            })
        };
        let victim = {
            let (t, log) = (t.clone(), log.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                t.acquire().await;
                log.lock().unwrap().push(("victim", ms(start.elapsed())));
            })
        };
        hog.await.unwrap();
        victim.await.unwrap();
        // The hog reserved 400 ms at 200 ms; the victim arrived at 300 ms and got the next slot,
        // 600 ms; the hog's following call (made at 400 ms) waits for 800 ms.
        assert_eq!(
            *log.lock().unwrap(),
            vec![
                ("hog", 0),
                ("hog", 200),
                ("hog", 400),
                ("victim", 600),
                ("hog", 800),
                ("hog", 1000),
                ("hog", 1200),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_wait_does_not_keep_its_slot() {
        let t = Arc::new(Throttle::new(5.0, 10).unwrap());
        let start = tokio::time::Instant::now();
        for _ in 0..10 {
            assert!(t.acquire().await.is_zero());
        }

        // A wait abandoned (here by a timeout) took no token: the next caller gets the 200 ms
        // slot.
        let abandoned = tokio::time::timeout(Duration::from_millis(100), t.acquire()).await;
        assert!(abandoned.is_err());
        assert_eq!(ms(t.acquire().await), 100);
        assert_eq!(ms(start.elapsed()), 200);

        // Three callers queue; the second gives up: the third takes its turn and its slot.
        let admitted = Arc::new(StdMutex::new(Vec::new()));
        let mut callers = Vec::new();
        for name in ["c", "d", "e"] {
            let (t, admitted) = (t.clone(), admitted.clone());
            callers.push(tokio::spawn(async move {
                t.acquire().await;
                admitted.lock().unwrap().push((name, ms(start.elapsed())));
            }));
            tokio::task::yield_now().await;
        }
        callers[1].abort();
        for c in callers {
            let _ = c.await;
        }
        assert_eq!(*admitted.lock().unwrap(), [("c", 400), ("e", 600)]);

        // Nothing is lost for good: once the queue has drained and the bucket refilled
        // (burst / qps = 2 s), the full burst is there again.
        tokio::time::advance(Duration::from_secs(2)).await;
        for _ in 0..10 {
            assert!(t.acquire().await.is_zero());
        }
        assert_eq!(ms(t.acquire().await), 200);
    }

    mod fairness {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            /// Callers arriving at arbitrary times: each is admitted no earlier than it
            /// arrived, never before a caller that arrived earlier, and never faster than the
            /// bucket allows (at most `burst + qps·t` admissions in any window of length t).
            #[test]
            fn admission_follows_arrival_and_the_rate(
                qps in prop::sample::select(vec![1.0f32, 2.0, 4.0, 5.0, 10.0, 20.0]),
                burst in 1u32..6,
                mut arrivals_ms in prop::collection::vec(0u64..3000, 1..40),
            ) {
                arrivals_ms.sort_unstable();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .unwrap();
                let admitted: Vec<(u64, Duration)> = rt.block_on(async {
                    let t = Arc::new(Throttle::new(qps, burst).unwrap());
                    let start = tokio::time::Instant::now();
                    let mut tasks = Vec::new();
                    for &a in &arrivals_ms {
                        let t = t.clone();
                        tasks.push(tokio::spawn(async move {
                            tokio::time::sleep_until(start + Duration::from_millis(a)).await;
                            t.acquire().await;
                            (a, start.elapsed())
                        }));
                        tokio::task::yield_now().await;
                    }
                    let mut out = Vec::new();
                    for task in tasks {
                        out.push(task.await.unwrap());
                    }
                    out
                });
                let period = 1.0 / f64::from(qps);
                for (i, &(a, at)) in admitted.iter().enumerate() {
                    prop_assert!(at >= Duration::from_millis(a));
                    for &(b, bt) in &admitted[i + 1..] {
                        prop_assert!(a == b || at <= bt, "arrived at {a} ms, admitted after one that arrived at {b} ms");
                    }
                }
                // Any burst + 1 consecutive admissions span at least one refill period, give or
                // take Tokio's timer, which wakes a sleeper up to 1 ms after its deadline.
                let mut times: Vec<Duration> = admitted.iter().map(|(_, at)| *at).collect();
                times.sort_unstable();
                for w in times.windows(burst as usize + 1) {
                    let gap = (w[burst as usize] - w[0]).as_secs_f64();
                    prop_assert!(gap + 0.001 >= period, "{} admissions within {gap}s", burst + 1);
                }
            }
        }
    }
}
