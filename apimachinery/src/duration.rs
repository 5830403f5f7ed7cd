//! Durations in Go's syntax: `300ms`, `1.5h`, `2h45m`.
//!
//! Every Kubernetes component takes its durations as Go's `time.ParseDuration` reads them
//! (`--leader-elect-lease-duration=15s`, `--min-resync-period=12h`), and prints them as
//! `time.Duration.String` does (`1h30m0s`). The manager's flags, the demo's and the embedded API
//! server's use [`parse`], and messages use [`format()`], so a duration reads the same everywhere.

use std::time::Duration;

/// Parses a duration in Go's `time.ParseDuration` syntax: a sequence of decimal numbers, each
/// with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), e.g. `300ms`, `1.5h`, `2h45m`; `0` alone
/// is allowed. Negative durations are rejected (no flag here means anything by them).
pub fn parse(s: &str) -> Result<Duration, String> {
    let input = s.trim();
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() {
        return Err("empty duration; expected e.g. 30s, 10m, 1h30m".to_string());
    }
    if input.starts_with('-') {
        return Err(format!("{s:?} is negative"));
    }
    let rest = input.strip_prefix('+').unwrap_or(input);
    let mut total_nanos: u128 = 0;
    let mut chars = rest.char_indices().peekable();
    let bad = || format!("{s:?} is not a duration; expected e.g. 300ms, 30s, 10m, 1h30m");
    while chars.peek().is_some() {
        let start = chars.peek().map(|(i, _)| *i).unwrap_or(0);
        let mut end = start;
        while let Some(&(i, c)) = chars.peek() {
            if c.is_ascii_digit() || c == '.' {
                end = i + c.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let number = &rest[start..end];
        if number.is_empty() || number == "." {
            return Err(bad());
        }
        let unit_start = end;
        let mut unit_end = end;
        while let Some(&(i, c)) = chars.peek() {
            if c.is_ascii_digit() || c == '.' {
                break;
            }
            unit_end = i + c.len_utf8();
            chars.next();
        }
        let unit_nanos: u128 = match &rest[unit_start..unit_end] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("{s:?} is missing a unit (ns, us, ms, s, m, h)")),
            other => {
                return Err(format!(
                    "{s:?} has an unknown unit {other:?} (ns, us, ms, s, m, h)"
                ));
            }
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if frac_part.contains('.') {
            return Err(bad());
        }
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        let mut value = int
            .checked_mul(unit_nanos)
            .ok_or_else(|| format!("{s:?} is too large"))?;
        // The fraction, exact to the nanosecond (digits beyond that are dropped, as Go does).
        let mut scale = unit_nanos;
        for d in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value += u128::from(d - b'0') * scale;
        }
        total_nanos = total_nanos
            .checked_add(value)
            .ok_or_else(|| format!("{s:?} is too large"))?;
    }
    let secs =
        u64::try_from(total_nanos / 1_000_000_000).map_err(|_| format!("{s:?} is too large"))?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way Go prints one (`1h30m0s`, `2s`, `250ms`), for messages.
pub fn format(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    if d < Duration::from_secs(1) {
        let nanos = d.as_nanos();
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}µs", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    let frac = d.subsec_nanos();
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{:09}", frac);
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let ok = |s: &str| parse(s).unwrap();
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(9900));
        assert_eq!(ok("1m30.5s"), Duration::from_millis(90_500));
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1ns"), Duration::from_nanos(1));
        for bad in ["", "10", "s", "1x", "-1s", "1..5s", "1.2.3s", ".s", "1h-5m"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse("99999999999999999999h").is_err());
    }

    #[test]
    fn go_duration_formatting_round_trips() {
        for s in [
            "0s", "250ms", "2s", "1m30s", "1h0m0s", "2h45m0s", "1.5s", "10µs",
        ] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
    }
}
