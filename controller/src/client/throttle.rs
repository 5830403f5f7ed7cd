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
//! * **Fair waiting.** Like client-go's limiter (`golang.org/x/time/rate`'s `Wait`), a request
//!   first *reserves* a token, which fixes its slot at once, and then sleeps until that slot.
//!   Waiters are therefore served in the order they arrived, one every `1/qps` after the burst,
//!   and a task hammering the client in a loop cannot overtake a request that queued before its
//!   next call. A request abandoned while it waits (its future dropped, say by a timeout)
//!   cancels its reservation: its token goes back unless later reservations are already queued
//!   behind it, in which case they keep their slots and the abandoned slot passes unused, as
//!   x/time/rate does on context cancellation. The first wait happens before the request
//!   timeout starts (client-go's order), so a long queue does not turn into timeouts of requests
//!   that were never sent. The bucket runs on `tokio::time`, so tests with a paused clock see
//!   exact schedules.

use std::time::Duration;

use apimachinery::token_bucket::TokenBucket;
use http::Response;
use std::sync::Mutex;

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
/// This is client-go's `flowcontrol.NewTokenBucketRateLimiter`, which is a
/// `golang.org/x/time/rate.Limiter`; the arithmetic is the workspace's one x/time/rate bucket,
/// [`apimachinery::token_bucket::TokenBucket`], behind a lock:
///
/// * The bucket starts full (`burst` tokens) and refills continuously at `qps` tokens a second,
///   never above `burst`.
/// * [`Throttle::reserve`] always takes a token *now*, even one that only exists in the future:
///   the [`Reservation`] records when its token will exist (its *time to act*). The next
///   caller's token is one `1/qps` later still. Each caller's slot is therefore fixed the moment
///   it arrives, and a caller that arrives later can never be served before one that arrived
///   earlier, however often it asks (x/time/rate's `Wait` does the same: reserve, then sleep
///   until the slot).
/// * Dropping a [`Reservation`] before its time to act cancels it (x/time/rate's
///   `Reservation.Cancel`, which `Wait` calls when its context is cancelled): the token goes back
///   into the bucket unless later reservations were already stacked on top of it. In that case
///   their slots stay where they are, so the cancelled slot simply passes unused. Either way
///   nothing is lost for good: the bucket is a function of time and refills to `burst` once no
///   one is waiting.
///
/// Times come from `tokio::time`, so a test with a paused clock sees exact schedules. Rates
/// below one request a day are raised to one a day.
pub struct Throttle {
    pub(super) qps: f64,
    pub(super) burst: f64,
    state: Mutex<TokenBucket>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

impl Throttle {
    /// `None` when `qps` is not a positive number (throttling disabled). A `burst` of 0 is
    /// treated as 1; rates below one request a day are treated as one a day.
    pub fn new(qps: f32, burst: u32) -> Option<Throttle> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let bucket = TokenBucket::new(f64::from(qps), burst, tokio::time::Instant::now());
        Some(Throttle {
            qps: bucket.rate(),
            burst: bucket.burst(),
            state: Mutex::new(bucket),
        })
    }

    /// Takes one token, possibly one that only exists in the future, and returns the
    /// reservation saying when it may be used. Dropping the reservation before then gives the
    /// token back where possible (see the type's documentation).
    pub fn reserve(&self) -> Reservation<'_> {
        let time_to_act = lock_bucket(&self.state).reserve(tokio::time::Instant::now());
        Reservation {
            throttle: self,
            time_to_act,
            acted: false,
        }
    }

    /// Waits for a token (reserve, then sleep until the reserved slot); returns how long it
    /// waited. Dropping the future while it waits cancels the reservation.
    pub async fn acquire(&self) -> Duration {
        let started = tokio::time::Instant::now();
        self.reserve().wait().await;
        started.elapsed()
    }

    /// x/time/rate's `Reservation.CancelAt`.
    fn cancel(&self, time_to_act: tokio::time::Instant, now: tokio::time::Instant) {
        lock_bucket(&self.state).cancel(time_to_act, now);
    }
}

fn lock_bucket(m: &Mutex<TokenBucket>) -> std::sync::MutexGuard<'_, TokenBucket> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One token taken from a [`Throttle`], usable from [`Reservation::time_to_act`] on.
///
/// Dropped before [`Reservation::wait`] completes, it is cancelled (the token is returned when
/// no later reservation depends on it).
#[must_use = "dropping a reservation cancels it"]
pub struct Reservation<'a> {
    throttle: &'a Throttle,
    time_to_act: tokio::time::Instant,
    acted: bool,
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("time_to_act", &self.time_to_act)
            .field("acted", &self.acted)
            .finish()
    }
}

impl Reservation<'_> {
    /// When the reserved token exists.
    pub fn time_to_act(&self) -> tokio::time::Instant {
        self.time_to_act
    }

    /// How long from now until [`Reservation::time_to_act`] (zero if it has passed).
    pub fn delay(&self) -> Duration {
        self.time_to_act
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// Sleeps until the reserved slot and uses the token.
    pub async fn wait(mut self) {
        if self.time_to_act > tokio::time::Instant::now() {
            tokio::time::sleep_until(self.time_to_act).await;
        }
        self.acted = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.acted {
            self.throttle
                .cancel(self.time_to_act, tokio::time::Instant::now());
        }
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
        assert!(slow.reserve().delay().is_zero());
        let _first = slow.reserve();
        assert_eq!(slow.reserve().delay(), Duration::from_secs(86_400));
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
        let t = Throttle::new(5.0, 10).unwrap();
        let start = tokio::time::Instant::now();
        let at = |r: &Reservation<'_>| ms(r.time_to_act() - start);
        for _ in 0..10 {
            assert!(t.acquire().await.is_zero());
        }

        // The newest reservation, abandoned (here by a timeout), gives its token back: the next
        // caller gets the 200 ms slot instead of 400 ms.
        let abandoned = tokio::time::timeout(Duration::from_millis(100), t.acquire()).await;
        assert!(abandoned.is_err());
        assert_eq!(ms(t.acquire().await), 100);
        assert_eq!(ms(start.elapsed()), 200);

        // A reservation with others queued behind it cannot give its token back without letting
        // a newcomer jump the queue: the others keep their slots and its slot passes unused.
        let c = t.reserve();
        let d = t.reserve();
        let e = t.reserve();
        assert_eq!((at(&c), at(&d), at(&e)), (400, 600, 800));
        drop(d);
        let f = t.reserve();
        assert_eq!((at(&e), at(&f)), (800, 1000));
        c.wait().await;
        e.wait().await;
        f.wait().await;
        assert_eq!(ms(start.elapsed()), 1000);

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
