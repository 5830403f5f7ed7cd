//! Cron schedules, as Kubernetes reads them (`robfig/cron/v3`'s `ParseStandard`).
//!
//! kube-apiserver validates a CronJob's `spec.schedule` with that parser and
//! kube-controller-manager's CronJob controller computes due times with it; both sides of this
//! workspace (the API server's CronJob strategy, the controller manager's CronJob controller)
//! share [`Schedule`].
//!
//! kube-apiserver validates `spec.schedule` with `cron.ParseStandard` of `robfig/cron/v3`, and
//! the controller computes due times with the same parser; [`Schedule`] reads that grammar:
//! exactly five fields, `*` and `?` alike, lists, ranges, steps, `N/step` meaning `N-max/step`,
//! three-letter month and day names in any case, and the lower-case `@hourly`-style
//! descriptors. It is written here rather than taken from a cron crate because neither fits
//! that grammar (measured; see the workspace `Cargo.toml`): `croner` refuses `5/15`, `?` in the
//! minute field and the `TZ=` prefix and accepts what robfig refuses (`L`, `W`, `#`, `@DAILY`),
//! and `cron` wants six fields with Sunday as 1. Left out of robfig's grammar: `@every
//! <duration>` and the `TZ=`/`CRON_TZ=` prefixes (such schedules do not parse, so their
//! CronJobs are left alone); and `7` is read as Sunday where robfig refuses it.

use jiff::Timestamp;
use jiff::civil::DateTime;

/// How far ahead (and back) a schedule is searched: a schedule that never falls due within it
/// (`0 0 30 2 *`, February 30th) is treated as never due.
const SEARCH_DAYS: i64 = 5 * 366;

/// A parsed cron schedule: the allowed values of each field as bit sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day of month and day of week were both restricted: a day matching either is due.
    either_day: bool,
}

impl Schedule {
    /// Parses a standard five-field schedule or a macro (`@hourly`, `@daily`/`@midnight`,
    /// `@weekly`, `@monthly`, `@yearly`/`@annually`). `?` means `*`.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [min, hour, dom, month, dow] = fields.as_slice() else {
            return Err(format!(
                "expected exactly 5 fields, found {}: {text}",
                fields.len()
            ));
        };
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let mut weekdays = field(dow, 0, 7, &DAYS, 0)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7); // 7 is Sunday too
        }
        Ok(Schedule {
            minutes: field(min, 0, 59, &[], 0)?,
            hours: field(hour, 0, 23, &[], 0)?,
            days: field(dom, 1, 31, &[], 0)?,
            months: field(month, 1, 12, &MONTHS, 1)?,
            weekdays,
            either_day: !is_star(dom) && !is_star(dow),
        })
    }

    fn day_matches(&self, d: DateTime) -> bool {
        let dom = self.days & (1 << d.day()) != 0;
        let dow = self.weekdays & (1 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.either_day {
            dom || dow
        } else {
            dom && dow
        }
    }

    /// The first due time strictly after `after` (UTC), searched five years ahead.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(jiff::tz::TimeZone::UTC).datetime();
        let mut day = start.date();
        for _ in 0..SEARCH_DAYS {
            let d = day.to_datetime(jiff::civil::Time::midnight());
            if self.months & (1 << d.month()) != 0 && self.day_matches(d) {
                for h in bits(self.hours) {
                    for m in bits(self.minutes) {
                        let t = day.at(h as i8, m as i8, 0, 0);
                        if t > start {
                            return t
                                .to_zoned(jiff::tz::TimeZone::UTC)
                                .ok()
                                .map(|z| z.timestamp());
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// The latest due time in `(after, until]`, if any.
    pub fn last_between(&self, after: Timestamp, until: Timestamp) -> Option<Timestamp> {
        let mut last = None;
        let mut t = after;
        // Bounded: a schedule due every minute walks at most the minutes in the window, and the
        // window is capped below to the last `SEARCH_DAYS` days.
        let floor = until
            .checked_sub(jiff::SignedDuration::from_hours(24 * SEARCH_DAYS))
            .unwrap_or(until);
        if t < floor {
            t = floor;
        }
        let mut steps = 0u32;
        while let Some(next) = self.next_after(t) {
            if next > until {
                break;
            }
            last = Some(next);
            t = next;
            steps += 1;
            if steps >= 100 {
                // Too many missed times: jump close to `until` and look at the last few only.
                let near = until
                    .checked_sub(jiff::SignedDuration::from_hours(25))
                    .unwrap_or(until);
                if near > t {
                    t = near;
                    steps = 0;
                }
            }
        }
        last
    }
}

fn is_star(f: &str) -> bool {
    matches!(f, "*" | "?")
}

/// The values `0..64` set in `set`, ascending.
fn bits(set: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |i| set & (1u64 << i) != 0)
}

/// One cron field as a bit set of the values `lo..=hi` it allows. `names` (lower case) stand
/// for `base + index`.
fn field(text: &str, lo: u32, hi: u32, names: &[&str], base: u32) -> Result<u64, String> {
    let value = |s: &str| -> Result<u32, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(base + i as u32);
        }
        let n: u32 = s
            .parse()
            .map_err(|_| format!("failed to parse int from {s}"))?;
        if n < lo || n > hi {
            return Err(format!("{n} out of range [{lo}, {hi}]"));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("failed to parse int from {s}"))?;
                if step == 0 {
                    return Err(format!("step of range should be a positive number: {part}"));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (start, end) = if is_star(range) {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `5/15` means from 5 to the end, every 15.
            (v, if step > 1 { hi } else { v })
        };
        if start > end {
            return Err(format!(
                "beginning of range ({start}) beyond end of range ({end}): {part}"
            ));
        }
        let mut v = start;
        while v <= end {
            set |= 1u64 << v;
            v += step;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn schedules_parse_like_cron() {
        let every_15 = Schedule::parse("*/15 * * * *").unwrap();
        assert_eq!(
            every_15.minutes,
            (1 << 0) | (1 << 15) | (1 << 30) | (1 << 45)
        );
        assert_eq!(
            Schedule::parse("0 9-17/4 * JAN,mar mon-FRI").unwrap().hours,
            (1 << 9) | (1 << 13) | (1 << 17)
        );
        assert_eq!(Schedule::parse("0 0 * * 7").unwrap().weekdays, 1);
        assert_eq!(Schedule::parse("@daily"), Schedule::parse("0 0 * * *"));
        for bad in [
            "* * * *",
            "60 * * * *",
            "*/0 * * * *",
            "5-1 * * * *",
            "x * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    /// The places where robfig's grammar (kube-apiserver's) differs from the cron crates'.
    #[test]
    fn schedules_read_robfigs_grammar_where_cron_crates_differ() {
        // `N/step` runs from N to the end of the range.
        assert_eq!(
            Schedule::parse("5/15 * * * *").unwrap().minutes,
            (1 << 5) | (1 << 20) | (1 << 35) | (1 << 50)
        );
        // `?` is `*` in every field.
        assert_eq!(Schedule::parse("? ? ? ? ?"), Schedule::parse("* * * * *"));
        // Names in any case; descriptors in lower case only.
        assert_eq!(
            Schedule::parse("0 0 * Jan SUN"),
            Schedule::parse("0 0 * 1 0")
        );
        for refused in [
            "0 0 L * *",
            "0 0 15W * *",
            "0 0 * * 1#2",
            "0 0 * * 5L",
            "0 0 0 * * *",
            "@DAILY",
            "@every 1h",
        ] {
            assert!(Schedule::parse(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_next_and_last_due_times_follow_the_schedule() {
        let s = Schedule::parse("30 2 * * *").unwrap();
        assert_eq!(
            s.next_after(t("2026-01-01T02:30:00Z")),
            Some(t("2026-01-02T02:30:00Z"))
        );
        assert_eq!(
            s.last_between(t("2026-01-01T00:00:00Z"), t("2026-01-03T12:00:00Z")),
            Some(t("2026-01-03T02:30:00Z"))
        );
        assert_eq!(
            s.last_between(t("2026-01-03T02:30:00Z"), t("2026-01-03T12:00:00Z")),
            None
        );
        // Day of month and day of week both restricted: either one is due.
        let s = Schedule::parse("0 0 13 * 5").unwrap();
        assert_eq!(
            s.next_after(t("2026-02-01T00:00:00Z")),
            Some(t("2026-02-06T00:00:00Z"))
        );
        // Never due: February 30th.
        assert_eq!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .next_after(t("2026-01-01T00:00:00Z")),
            None
        );
        // Every minute over a long window: bounded, and the last time is found.
        let s = Schedule::parse("* * * * *").unwrap();
        assert_eq!(
            s.last_between(t("2020-01-01T00:00:00Z"), t("2026-01-01T00:00:30Z")),
            Some(t("2026-01-01T00:00:00Z"))
        );
    }
}
