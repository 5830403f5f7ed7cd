//! Request metrics of one [`super::Client`]: what client-go's `rest_client_*` metrics count
//! (`k8s.io/client-go/tools/metrics`, recorded by `rest.Request`).
//!
//! [`ClientMetrics`] keeps what client-go's `rest_client_*` metrics count: every
//!   attempt by method and status code, retries by method and code, a latency histogram of whole
//!   requests (throttle wait, retries and body included) and one of throttle waits, both by
//!   method with client-go's buckets ([`LATENCY_BUCKETS`]), plus the 429 count. The manager's
//!   `/metrics` endpoint reads them at scrape time (see `sample_controller_runtime::metrics`).
//!
//! Data in: one call per attempt (`ClientMetrics::record_attempt`), per whole request (a
//! `RequestTimer` dropped when the request ends) and per throttle wait. Data out: a
//! [`MetricsSnapshot`] copied at scrape time. The counters sit behind one mutex held for a few
//! map updates; the throttle decision, read by every request, is an atomic beside it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use http::{Method, Uri};

use super::throttle::ThrottleDecision;

/// Upper bounds, in seconds, of the latency histograms (`rest_client_request_duration_seconds`
/// and `rest_client_rate_limiter_duration_seconds`): client-go's buckets. A `+Inf` bucket
/// follows the last.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// A latency histogram over [`LATENCY_BUCKETS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Observations per bucket, *not* cumulative: `counts[i]` holds those above
    /// `LATENCY_BUCKETS[i - 1]` and at most `LATENCY_BUCKETS[i]`; the last entry holds those
    /// above 60 s.
    pub counts: [u64; LATENCY_BUCKETS.len() + 1],
    /// Sum of the observations.
    pub sum: Duration,
    /// Number of observations.
    pub count: u64,
}

impl LatencyHistogram {
    /// Adds one observation (Prometheus buckets are inclusive: 5 ms lands in `le="0.005"`).
    pub fn observe(&mut self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i] += 1;
        self.sum = self.sum.saturating_add(d);
        self.count += 1;
    }

    /// Observations of at most `le` seconds: the value of the `le` bucket in the exposition
    /// (`f64::INFINITY` for `+Inf`, which is every observation).
    pub fn cumulative(&self, le: f64) -> u64 {
        self.buckets()
            .iter()
            .take_while(|(upper, _)| *upper <= le)
            .map(|(_, n)| n)
            .sum()
    }

    /// `(upper bound, observations in that bucket alone)` pairs ending with `+Inf`: the shape
    /// prometheus-client's histogram encoder takes.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

/// Request counters of one [`super::Client`], in the shape of client-go's `rest_client_*` metrics, read
/// by the manager's `/metrics` endpoint through [`ClientMetrics::snapshot`].
///
/// What is counted where, as in client-go's `rest.Request`:
///
/// * every attempt, retries and watches included, by method and status code
///   (`rest_client_requests_total`); code 0 means the attempt got no answer (client-go's
///   `<error>`);
/// * every attempt after the first of one request, by method and code
///   (`rest_client_request_retries_total`);
/// * each whole request made through [`super::Client::request_raw`] (and the helpers built on it), from
///   its call to its last body byte, throttle waits and retries included
///   (`rest_client_request_duration_seconds`). Watches and bare [`super::Client::send`] calls are not
///   timed, as client-go times neither `Watch` nor `Stream`;
/// * each wait for the throttle, zero waits included (`rest_client_rate_limiter_duration_seconds`).
#[derive(Debug)]
pub struct ClientMetrics {
    host: String,
    state: Mutex<Counters>,
    /// The [`ThrottleDecision`], as `to_u8`; atomic because every request reads it.
    throttle: AtomicU8,
}

/// What [`ClientMetrics`] counts, keyed by `http::Method` (a clone of a standard method
/// allocates nothing, so counting a request allocates only when a key is new).
#[derive(Debug, Default)]
struct Counters {
    requests: HashMap<(Method, u16), u64>,
    retries_by_code: HashMap<(Method, u16), u64>,
    request_latency: HashMap<Method, LatencyHistogram>,
    rate_limiter_latency: HashMap<Method, LatencyHistogram>,
    too_many_requests: u64,
    retries: u64,
    throttle_wait: Duration,
}

/// A point-in-time copy of [`ClientMetrics`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// The server's `host[:port]`, as written in its URL (client-go's `host` label).
    pub host: String,
    /// Attempts by (HTTP method, status code); code 0 means no response (a connection error).
    pub requests: BTreeMap<(String, u16), u64>,
    /// Attempts that were retries, by (HTTP method, status code).
    pub retries_by_code: BTreeMap<(String, u16), u64>,
    /// Whole-request latency by HTTP method.
    pub request_latency: BTreeMap<String, LatencyHistogram>,
    /// Time spent waiting for the throttle, by HTTP method.
    pub rate_limiter_latency: BTreeMap<String, LatencyHistogram>,
    /// Answers with code 429.
    pub too_many_requests: u64,
    /// Attempts that were retries (the sum of `retries_by_code`).
    pub retries: u64,
    /// Total time requests waited for the client-side throttle.
    pub throttle_wait: Duration,
    /// What the client-side throttle does (`rest_client_rate_limiter_enabled`).
    pub throttle: Option<ThrottleDecision>,
}

impl MetricsSnapshot {
    /// Attempts with this method (any code).
    pub fn count_method(&self, method: &str) -> u64 {
        self.requests
            .iter()
            .filter(|((m, _), _)| m == method)
            .map(|(_, n)| n)
            .sum()
    }
    /// All attempts.
    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }
}

impl ClientMetrics {
    /// Empty counters for a client of the server at `host` (`host[:port]`).
    pub fn new(host: impl Into<String>) -> ClientMetrics {
        let host = host.into();
        ClientMetrics {
            state: Mutex::new(Counters::default()),
            host,
            throttle: AtomicU8::new(ThrottleDecision::Configured.to_u8()),
        }
    }

    /// The client's current [`ThrottleDecision`].
    pub fn throttle_decision(&self) -> ThrottleDecision {
        ThrottleDecision::from_u8(self.throttle.load(Ordering::Acquire))
    }

    pub(crate) fn set_throttle_decision(&self, d: ThrottleDecision) {
        self.throttle.store(d.to_u8(), Ordering::Release);
    }

    /// Moves `Undecided` to `d`; false when another answer decided first.
    pub(crate) fn settle_throttle_decision(&self, d: ThrottleDecision) -> bool {
        self.throttle
            .compare_exchange(
                ThrottleDecision::Undecided.to_u8(),
                d.to_u8(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The `host` label of this client's series.
    pub fn host(&self) -> &str {
        &self.host
    }

    fn with<T>(&self, f: impl FnOnce(&mut Counters) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// Counts one attempt answered `code` (0: no answer); `retry` when it was not the first
    /// attempt of its request.
    pub fn record_attempt(&self, method: &Method, code: u16, retry: bool) {
        self.with(|s| {
            let key = (method.clone(), code);
            if code == 429 {
                s.too_many_requests += 1;
            }
            if retry {
                s.retries += 1;
                *s.retries_by_code.entry(key.clone()).or_default() += 1;
            }
            *s.requests.entry(key).or_default() += 1;
        });
    }

    /// Records one whole request that took `took`.
    pub fn observe_request(&self, method: &Method, took: Duration) {
        self.with(|s| {
            s.request_latency
                .entry(method.clone())
                .or_default()
                .observe(took);
        });
    }

    /// Records one wait for the throttle (zero when a token was there).
    pub fn observe_throttle(&self, method: &Method, waited: Duration) {
        self.with(|s| {
            s.throttle_wait = s.throttle_wait.saturating_add(waited);
            s.rate_limiter_latency
                .entry(method.clone())
                .or_default()
                .observe(waited);
        });
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let by_method = |m: &HashMap<(Method, u16), u64>| {
            m.iter()
                .map(|((method, code), n)| ((method.as_str().to_owned(), *code), *n))
                .collect()
        };
        let latency = |m: &HashMap<Method, LatencyHistogram>| {
            m.iter()
                .map(|(method, h)| (method.as_str().to_owned(), *h))
                .collect()
        };
        self.with(|s| MetricsSnapshot {
            host: self.host.clone(),
            requests: by_method(&s.requests),
            retries_by_code: by_method(&s.retries_by_code),
            request_latency: latency(&s.request_latency),
            rate_limiter_latency: latency(&s.rate_limiter_latency),
            too_many_requests: s.too_many_requests,
            retries: s.retries,
            throttle_wait: s.throttle_wait,
            throttle: Some(self.throttle_decision()),
        })
    }
}

/// Times one whole request for `rest_client_request_duration_seconds`; records on drop, so a
/// request that fails, times out or is abandoned by its caller is timed too (client-go records
/// in a `defer`).
pub(super) struct RequestTimer<'a> {
    pub(super) metrics: &'a ClientMetrics,
    pub(super) method: Method,
    pub(super) started: tokio::time::Instant,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .observe_request(&self.method, self.started.elapsed());
    }
}

/// client-go's `host` label: the `host[:port]` of the server URL (no user info).
pub(super) fn host_label(server: &Uri) -> String {
    match server.authority() {
        Some(a) => a
            .as_str()
            .rsplit_once('@')
            .map_or(a.as_str(), |(_, host)| host)
            .to_owned(),
        None => "none".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_are_client_gos_and_inclusive() {
        assert_eq!(
            LATENCY_BUCKETS,
            [
                0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0
            ]
        );
        let mut h = LatencyHistogram::default();
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_micros(5001));
        h.observe(Duration::from_secs(60));
        h.observe(Duration::from_secs(61));
        assert_eq!(h.count, 4);
        assert_eq!(h.sum, Duration::from_micros(121_010_001));
        assert_eq!(h.cumulative(0.005), 1);
        assert_eq!(h.cumulative(0.025), 2);
        assert_eq!(h.cumulative(30.0), 2);
        assert_eq!(h.cumulative(60.0), 3);
        assert_eq!(h.cumulative(f64::INFINITY), 4);
        let b = h.buckets();
        assert_eq!(b.len(), 13);
        assert_eq!(b[12], (f64::INFINITY, 1));
    }

    #[test]
    fn host_label_is_host_and_port_without_user_info() {
        let h = |s: &str| host_label(&s.parse().unwrap());
        assert_eq!(h("https://10.0.0.1:6443"), "10.0.0.1:6443");
        assert_eq!(h("https://admin:pw@10.0.0.1:6443/prefix"), "10.0.0.1:6443");
        assert_eq!(
            h("https://kubernetes.default.svc"),
            "kubernetes.default.svc"
        );
        assert_eq!(h("https://[::1]:6443"), "[::1]:6443");
    }
}
