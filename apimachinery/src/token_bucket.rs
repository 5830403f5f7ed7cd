//! One token bucket, `golang.org/x/time/rate`'s `Limiter`, written once.
//!
//! Kubernetes rate-limits in three places with the same arithmetic: client-go's client-side
//! throttle (`flowcontrol.NewTokenBucketRateLimiter`), the workqueue's `BucketRateLimiter`, and
//! the event correlator's per-object spam filter (`tools/record`'s `EventSourceObjectSpamFilter`).
//! All three are an x/time/rate `Limiter`. The client throttle and the spam filter run on the
//! `governor` crate's GCRA limiter (the same bucket: "wait for a token" and "is there a token
//! now?"). The workqueue's bucket needs what governor does not offer: x/time/rate's
//! `Reserve().Delay()`, which takes a token *now* even when it only exists in the future and
//! says how long until then (the queue adds the item after that delay, and the next caller's
//! delay is one period longer). Governor answers "not until T" without taking the token, so N
//! items failing at once would all be given the same delay. [`TokenBucket`] is that
//! x/time/rate bucket.
//!
//! ## The model
//!
//! * The bucket holds up to `burst` tokens, starts full, and refills continuously at `rate`
//!   tokens a second (never above `burst`).
//! * [`TokenBucket::allow`] takes a token if one is there *now* (x/time/rate's `Allow`): the
//!   spam filter's question.
//! * [`TokenBucket::reserve`] always takes a token, possibly one that only exists in the future:
//!   the count goes negative and the returned *time to act* says when the token will exist
//!   (x/time/rate's `Reserve`). Each caller's slot is therefore fixed the moment it asks, and a
//!   later caller is never served before an earlier one: the client throttle's and the
//!   workqueue's question ("how long must this one wait?").
//! * [`TokenBucket::cancel`] gives a reserved token back (x/time/rate's `Reservation.CancelAt`)
//!   unless later reservations were stacked on top of it; their slots then stay where they
//!   are, so the cancelled slot simply passes unused.
//!
//! ## Time is an argument
//!
//! Every method takes `now`. The bucket never reads a clock, so it is pure, and a test (or a
//! caller on a paused Tokio clock) sees exact schedules. Times are [`tokio::time::Instant`]s,
//! which is what the async callers have at hand.
//!
//! Rates below one token a day are raised to one a day, so no arithmetic here overflows a clock;
//! a `burst` below 1 is treated as 1 (x/time/rate would refuse everything, which no caller here
//! wants).

use std::time::Duration;

use tokio::time::Instant;

/// The slowest rate honoured: one token a day.
pub const MIN_RATE: f64 = 1.0 / 86_400.0;

/// x/time/rate's `Limiter` (see the module documentation).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    /// Tokens at `last`; negative when that many are promised to reservations still waiting.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    last: Instant,
    /// The latest time to act of any reservation (x/time/rate's `lastEvent`).
    last_event: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least 1) refilled at `rate` tokens a second (at least
    /// [`MIN_RATE`]; a rate that is not a finite number is treated as [`MIN_RATE`]).
    pub fn new(rate: f64, burst: u32, now: Instant) -> TokenBucket {
        let rate = if rate.is_finite() {
            rate.max(MIN_RATE)
        } else {
            MIN_RATE
        };
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
            last_event: now,
        }
    }

    /// Tokens a second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The bucket's size.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Tokens available at `now` (negative while reservations wait for future tokens).
    pub fn tokens_at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.last);
        (self.tokens + self.tokens_from_duration(elapsed)).min(self.burst)
    }

    /// Takes a token if one is available at `now`; false (and nothing taken) otherwise.
    pub fn allow(&mut self, now: Instant) -> bool {
        let tokens = self.tokens_at(now);
        self.last = now.max(self.last);
        if tokens >= 1.0 {
            self.tokens = tokens - 1.0;
            true
        } else {
            self.tokens = tokens;
            false
        }
    }

    /// Takes a token, possibly one that only exists in the future, and returns when it may be
    /// used (its *time to act*; `now` when a token was there).
    pub fn reserve(&mut self, now: Instant) -> Instant {
        let tokens = self.tokens_at(now) - 1.0;
        let wait = if tokens < 0.0 {
            self.duration_from_tokens(-tokens)
        } else {
            Duration::ZERO
        };
        let time_to_act = add_saturating(now, wait);
        self.last = now;
        self.tokens = tokens;
        self.last_event = time_to_act;
        time_to_act
    }

    /// Gives back the token of the reservation acting at `time_to_act`, as far as no later
    /// reservation depends on it (x/time/rate's `Reservation.CancelAt`). A reservation whose
    /// time has passed is not cancelled: its token counts as used.
    pub fn cancel(&mut self, time_to_act: Instant, now: Instant) {
        if time_to_act < now {
            return;
        }
        // Tokens reserved after this one (their slots lie between it and the last event) stay
        // taken: giving them back would let a newcomer jump the queue.
        let restore =
            1.0 - self.tokens_from_duration(self.last_event.saturating_duration_since(time_to_act));
        if restore <= 0.0 {
            return;
        }
        self.tokens = (self.tokens_at(now) + restore).min(self.burst);
        self.last = now;
        if time_to_act == self.last_event
            && let Some(previous) = time_to_act.checked_sub(self.duration_from_tokens(1.0))
            && previous >= now
        {
            self.last_event = previous;
        }
    }

    fn tokens_from_duration(&self, d: Duration) -> f64 {
        d.as_nanos() as f64 * self.rate / 1e9
    }

    fn duration_from_tokens(&self, tokens: f64) -> Duration {
        // To the nearest nanosecond, which absorbs floating-point noise: 1.648 tokens at 2/s is
        // 824 ms, not 824 ms + 1 ns (a whole millisecond later on Tokio's timer). `as`
        // saturates.
        Duration::from_nanos((tokens * 1e9 / self.rate).round() as u64)
    }
}

fn add_saturating(t: Instant, d: Duration) -> Instant {
    // A wait too long for the clock is, for every practical purpose, thirty years.
    t.checked_add(d)
        .unwrap_or_else(|| t + Duration::from_secs(30 * 365 * 86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn allow_spends_the_burst_then_refills_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3, t0);
        assert!((0..3).all(|_| b.allow(t0)));
        assert!(!b.allow(t0), "the burst is spent");
        assert!(!b.allow(t0 + Duration::from_millis(499)));
        assert!(
            b.allow(t0 + Duration::from_millis(500)),
            "one token after 1/rate"
        );
        assert!(!b.allow(t0 + Duration::from_millis(500)));
        // Long idle: never more than the burst.
        let later = t0 + Duration::from_secs(3600);
        assert!((b.tokens_at(later) - 3.0).abs() < 1e-9);
        assert!((0..3).all(|_| b.allow(later)));
        assert!(!b.allow(later));
    }

    #[test]
    fn reservations_get_consecutive_slots_in_arrival_order() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(5.0, 2, t0);
        let slots: Vec<u128> = (0..5).map(|_| ms(b.reserve(t0) - t0)).collect();
        assert_eq!(slots, vec![0, 0, 200, 400, 600]);
        assert!(b.tokens_at(t0) < -2.9);
        // A refused `allow` while others wait takes nothing.
        assert!(!b.allow(t0 + Duration::from_millis(100)));
        assert_eq!(ms(b.reserve(t0 + Duration::from_millis(100)) - t0), 800);
    }

    #[test]
    fn cancelling_the_last_reservation_returns_its_token() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 1, t0);
        assert_eq!(b.reserve(t0), t0);
        let second = b.reserve(t0);
        assert_eq!(ms(second - t0), 1000);
        b.cancel(second, t0);
        // The slot is free again: the next caller gets it.
        assert_eq!(ms(b.reserve(t0) - t0), 1000);
    }

    #[test]
    fn cancelling_a_reservation_with_later_ones_behind_it_keeps_their_slots() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 1, t0);
        b.reserve(t0);
        let second = b.reserve(t0);
        let third = b.reserve(t0);
        assert_eq!((ms(second - t0), ms(third - t0)), (1000, 2000));
        b.cancel(second, t0);
        // The third keeps its slot and nothing is restored for a newcomer to jump ahead with.
        assert_eq!(ms(b.reserve(t0) - t0), 3000);
    }

    #[test]
    fn a_used_reservation_is_not_cancelled() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 1, t0);
        let first = b.reserve(t0);
        b.cancel(first, t0 + Duration::from_millis(10));
        assert!(!b.allow(t0 + Duration::from_millis(10)));
    }

    #[test]
    fn absurd_rates_and_bursts_are_clamped() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(0.0, 0, t0);
        assert_eq!(b.rate(), MIN_RATE);
        assert_eq!(b.burst(), 1.0);
        assert!(b.allow(t0));
        assert_eq!(b.reserve(t0) - t0, Duration::from_secs(86_400));
        let nan = TokenBucket::new(f64::NAN, 1, t0);
        assert_eq!(nan.rate(), MIN_RATE);
    }
}
