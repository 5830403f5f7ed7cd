//! Standard conditions (`metav1.Condition`), shared by every kind's status.
//!
//! A condition is a small typed fact about an object: `type: Ready, status: "True",
//! reason: PodSucceeded, message: "..."`. Tools such as `kubectl wait --for=condition=Ready`
//! and dashboards read them uniformly across kinds. The rules, as in apimachinery's
//! `meta.SetStatusCondition`:
//!
//! * at most one condition per `type`;
//! * `lastTransitionTime` changes only when `status` changes, so it says *since when* the fact
//!   has held; a new reason or message alone does not move it;
//! * `observedGeneration` is the `metadata.generation` the controller looked at.
//!
//! The generated CRDs carry `metav1.Condition`'s validations, so the API server rejects a
//! status write (422) whose condition breaks them: `type` is a (optionally prefixed) name of
//! at most 316 characters, `reason` is 1–1024 characters of CamelCase (letters, digits, `_`,
//! `,`, `:`; starting with a letter), `message` at most 32768 characters, `status` one of
//! `True`/`False`/`Unknown`, `lastTransitionTime` a date-time and `observedGeneration` ≥ 0.
//! The list is `x-kubernetes-list-type: map` keyed by `type`, matching the "one per type" rule.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// `True`, `False` or `Unknown`, as strings on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// One condition, shaped like `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// The condition's type, CamelCase (`Ready`, `Available`, `Degraded`, `InvalidSpec`).
    #[serde(rename = "type")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = 316),
            pattern(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
        )
    )]
    pub type_: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// When `status` last changed.
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("format" = "date-time")))]
    pub last_transition_time: Timestamp,
    /// A CamelCase machine-readable reason.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 1024),
            pattern(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
        )
    )]
    pub reason: String,
    /// A human-readable explanation.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(length(max = 32768)))]
    pub message: String,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition with `lastTransitionTime` now (seconds precision, as the API server stores it).
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
        observed_generation: Option<i64>,
        now: Timestamp,
    ) -> Self {
        Condition {
            type_: type_.into(),
            status,
            last_transition_time: truncate_to_seconds(now),
            reason: reason.into(),
            message: message.into(),
            observed_generation,
        }
    }
}

/// Drops sub-second precision: `metav1.Time` serialises whole seconds.
pub fn truncate_to_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// Inserts or updates `new` in `conditions` following `meta.SetStatusCondition`: the
/// transition time is kept when the status did not change. Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(new);
            true
        }
        Some(existing) => {
            let mut changed = false;
            if existing.status != new.status {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
                changed = true;
            }
            if existing.reason != new.reason {
                existing.reason = new.reason;
                changed = true;
            }
            if existing.message != new.message {
                existing.message = new.message;
                changed = true;
            }
            if existing.observed_generation != new.observed_generation {
                existing.observed_generation = new.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// Removes the condition of `type_`; returns whether one was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    before != conditions.len()
}

/// The condition of `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let mut cs = vec![];
        assert!(set_condition(
            &mut cs,
            Condition::new(
                "Ready",
                ConditionStatus::False,
                "Waiting",
                "",
                Some(1),
                at(10)
            )
        ));
        assert!(set_condition(
            &mut cs,
            Condition::new(
                "Ready",
                ConditionStatus::False,
                "StillWaiting",
                "x",
                Some(1),
                at(20)
            )
        ));
        assert_eq!(cs[0].last_transition_time, at(10));
        assert_eq!(cs[0].reason, "StillWaiting");
        assert!(set_condition(
            &mut cs,
            Condition::new("Ready", ConditionStatus::True, "Done", "x", Some(1), at(30))
        ));
        assert_eq!(cs[0].last_transition_time, at(30));
        assert!(!set_condition(
            &mut cs,
            Condition::new("Ready", ConditionStatus::True, "Done", "x", Some(1), at(40))
        ));
        assert_eq!(cs.len(), 1);
        assert!(remove_condition(&mut cs, "Ready"));
        assert!(find_condition(&cs, "Ready").is_none());
    }

    #[test]
    fn wire_shape_matches_metav1() {
        let json = r#"{"type":"Ready","status":"True","lastTransitionTime":"2019-04-12T10:12:00Z","reason":"PodSucceeded","message":"ok","observedGeneration":2}"#;
        let c: Condition = serde_json::from_str(json).unwrap();
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(serde_json::to_string(&c).unwrap(), json);
    }
}
