//! The label keys of a ring, and the selectors built from them.
//!
//! A ring has a name (`--shard-ring`, default [`DEFAULT_RING`]); it appears in the *name part*
//! of two label keys so that several rings (several controllers, each sharded on its own) can
//! label the same objects without clashing:
//!
//! | key | value | written by | meaning |
//! |---|---|---|---|
//! | `shard.sample-controller.dev/<ring>` | the shard id | the sharder | the object is assigned to that shard |
//! | `drain.shard.sample-controller.dev/<ring>` | `true` | the sharder | its shard must let go of it |
//! | `sharding.sample-controller.dev/ring` (on a Lease) | the ring | the shard | this Lease is a shard of the ring |
//!
//! The name part of a label key is at most 63 characters of `[A-Za-z0-9._-]`, starting and
//! ending alphanumeric; a label value obeys the same rule (and may be empty). [`Ring`]-names and
//! shard ids are therefore checked by [`validate_name`] before they are used in keys or values,
//! so a bad flag fails at start with a message naming it rather than at the first write.
//!
//! [`Ring`]: super::Ring

/// The ring name used when none is given.
pub const DEFAULT_RING: &str = "sample-controller";

/// The label on every shard Lease, whose value is the ring's name.
pub const LEASE_RING_LABEL: &str = "sharding.sample-controller.dev/ring";

/// The prefix of the shard label key: `shard.sample-controller.dev/<ring>`.
pub const SHARD_LABEL_PREFIX: &str = "shard.sample-controller.dev/";

/// The prefix of the drain label key: `drain.shard.sample-controller.dev/<ring>`.
pub const DRAIN_LABEL_PREFIX: &str = "drain.shard.sample-controller.dev/";

/// The label keys of one ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingLabels {
    ring: String,
    shard: String,
    drain: String,
}

impl RingLabels {
    /// The keys of ring `ring`, or an error naming what is wrong with the name.
    pub fn new(ring: &str) -> Result<Self, InvalidName> {
        validate_name("ring name", ring)?;
        Ok(RingLabels {
            ring: ring.to_string(),
            shard: format!("{SHARD_LABEL_PREFIX}{ring}"),
            drain: format!("{DRAIN_LABEL_PREFIX}{ring}"),
        })
    }

    /// The ring's name.
    pub fn ring(&self) -> &str {
        &self.ring
    }

    /// `shard.sample-controller.dev/<ring>`.
    pub fn shard_key(&self) -> &str {
        &self.shard
    }

    /// `drain.shard.sample-controller.dev/<ring>`.
    pub fn drain_key(&self) -> &str {
        &self.drain
    }

    /// The selector of one shard's informers: `shard.sample-controller.dev/<ring>=<shard>`.
    pub fn shard_selector(&self, shard: &str) -> String {
        format!("{}={shard}", self.shard)
    }

    /// The selector of the ring's Leases: `sharding.sample-controller.dev/ring=<ring>`.
    pub fn lease_selector(&self) -> String {
        format!("{LEASE_RING_LABEL}={}", self.ring)
    }
}

/// A ring name or shard id that cannot be used in a label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct InvalidName {
    /// What the value is (`ring name`, `shard id`).
    pub what: &'static str,
    /// The value given.
    pub value: String,
    /// Why it cannot be used.
    pub reason: &'static str,
}

/// Checks that `value` can be a label key's name part and a label value: 1 to 63 characters of
/// `[A-Za-z0-9._-]`, starting and ending with a letter or digit.
pub fn validate_name(what: &'static str, value: &str) -> Result<(), InvalidName> {
    let fail = |reason| {
        Err(InvalidName {
            what,
            value: value.to_string(),
            reason,
        })
    };
    if value.is_empty() {
        return fail("must not be empty");
    }
    if value.len() > 63 {
        return fail("must be at most 63 characters");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return fail("may contain only letters, digits, '-', '_' and '.'");
    }
    let first = value.as_bytes()[0];
    let last = value.as_bytes()[value.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return fail("must start and end with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_selectors_name_the_ring() {
        let l = RingLabels::new("ats").expect("valid");
        assert_eq!(l.shard_key(), "shard.sample-controller.dev/ats");
        assert_eq!(l.drain_key(), "drain.shard.sample-controller.dev/ats");
        assert_eq!(
            l.shard_selector("pod-a"),
            "shard.sample-controller.dev/ats=pod-a"
        );
        assert_eq!(
            l.lease_selector(),
            "sharding.sample-controller.dev/ring=ats"
        );
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for (bad, reason) in [
            ("", "must not be empty"),
            ("-a", "must start and end with a letter or digit"),
            ("a/b", "may contain only letters, digits, '-', '_' and '.'"),
        ] {
            let err = RingLabels::new(bad).expect_err(bad);
            assert_eq!(err.reason, reason, "{bad:?}");
            assert!(err.to_string().contains("ring name"), "{err}");
        }
        let long = "a".repeat(64);
        assert!(validate_name("shard id", &long).is_err());
        assert!(validate_name("shard id", &"a".repeat(63)).is_ok());
        assert!(validate_name("shard id", "sample-controller-7d9f8-x2k4q").is_ok());
    }
}
