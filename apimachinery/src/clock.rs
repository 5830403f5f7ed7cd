//! A wall clock that follows tokio's clock, so tests can run a schedule a year ahead in a
//! millisecond.
//!
//! An At is due at a wall-clock instant (`spec.schedule`), but a controller waits with
//! `tokio::time` (the work queue's `add_after`); the embedded API server's simulated node and
//! workload controllers likewise wait with `tokio::time` and write wall-clock timestamps
//! (`startedAt`, `finishedAt`, `lastTransitionTime`). If either read the system clock while tests
//! paused and advanced tokio's clock, the two would disagree. [`Clock`] ties them together: it
//! samples the system time once, together with `tokio::time::Instant::now()`, and from then on
//! reports `wall_anchor + (tokio_now - tokio_anchor)`. In production the two clocks advance
//! together (up to NTP slews: a step of the system clock is not followed); under
//! `#[tokio::test(start_paused = true)]` the wall clock jumps exactly as far as
//! `tokio::time::advance` moves.
//!
//! client-go's controllers use `k8s.io/utils/clock` for the same reason (a `FakeClock` in
//! tests); here the fake and the real clock are one type, driven by tokio.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// Wall-clock time derived from tokio's (possibly paused) clock. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    wall_anchor: Timestamp,
    tokio_anchor: Instant,
}

impl Clock {
    /// Anchors the clock at the current system time. Call it inside a tokio runtime.
    pub fn new() -> Self {
        Clock::starting_at(Timestamp::now())
    }

    /// A clock that reads `start` now and advances with tokio's clock from here on.
    pub fn starting_at(start: Timestamp) -> Self {
        Clock {
            wall_anchor: start,
            tokio_anchor: Instant::now(),
        }
    }

    /// The current wall-clock time.
    pub fn now(&self) -> Timestamp {
        let elapsed = Instant::now().saturating_duration_since(self.tokio_anchor);
        let elapsed = SignedDuration::try_from(elapsed).unwrap_or(SignedDuration::MAX);
        self.wall_anchor
            .checked_add(elapsed)
            .unwrap_or(Timestamp::MAX)
    }

    /// The current time as a `metav1.Time` string (RFC 3339, whole seconds, UTC), the form
    /// Kubernetes writes into objects.
    pub fn now_time(&self) -> String {
        self.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// How long from now until `t`; zero when `t` is not in the future.
    pub fn until(&self, t: Timestamp) -> Duration {
        Duration::try_from(self.now().duration_until(t)).unwrap_or(Duration::ZERO)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_clock() {
        let start: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        let clock = Clock::starting_at(start);
        assert_eq!(clock.now(), start);
        assert_eq!(clock.now_time(), "2030-01-01T00:00:00Z");
        let due: Timestamp = "2031-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(clock.until(due), Duration::from_secs(365 * 24 * 3600));
        tokio::time::advance(Duration::from_secs(365 * 24 * 3600)).await;
        assert_eq!(clock.now(), due);
        assert_eq!(clock.until(due), Duration::ZERO);
        assert_eq!(clock.until(start), Duration::ZERO);
    }
}
