//! Why a key is in the queue: its triggers, collapsed like the key itself and bounded.

use std::fmt;
use std::time::Duration;

use crate::small_string::SmallString;

/// The most distinct triggers a queued key keeps; later distinct ones are only counted
/// ([`Triggers::dropped`]). A key that an informer event, a timer and a retry all put back
/// while it waited has three; eight is room for an owner with several changing dependents.
pub const MAX_TRIGGERS_PER_KEY: usize = 8;

/// What an informer notification was, as the handler that turned it into a key saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A watch `ADDED` event: an object the cache did not hold.
    Added,
    /// A watch `MODIFIED` event (a new resourceVersion).
    Modified,
    /// A watch `DELETED` event, or a relist that found the object gone (a tombstone).
    Deleted,
    /// A periodic resync: the cached object handed to the handlers again, unchanged.
    Resync,
    /// The object was in the informer's first list (or replayed to a handler added late).
    InitialList,
    /// A relist (after 410 Gone or an error) found the object new or changed.
    Relist,
}

impl EventType {
    /// The word a watch stream uses (`ADDED`, `MODIFIED`, `DELETED`), or what else it was.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Resync => "resync",
            EventType::InitialList => "initial list",
            EventType::Relist => "relist",
        }
    }

    /// The `trigger` label of `controller_reconcile_triggers_total`.
    pub fn label(self) -> &'static str {
        match self {
            EventType::Added => "added",
            EventType::Modified => "modified",
            EventType::Deleted => "deleted",
            EventType::Resync => "resync",
            EventType::InitialList => "initial_list",
            EventType::Relist => "relist",
        }
    }
}

/// One reason a key was put on the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// An informer notification whose handler added the key. `object` is the notified object's
    /// `namespace/name`: the key itself, or (for an owned object, a pod) the object the handler
    /// mapped to its owner, the key.
    Event {
        /// What the notification was.
        event: EventType,
        /// The object's kind (`At`, `Pod`).
        kind: &'static str,
        /// The object's `namespace/name`.
        object: SmallString,
        /// The object's resourceVersion in that notification.
        resource_version: SmallString,
        /// The object's W3C `traceparent` annotation ([`TRACEPARENT_ANNOTATION`]), when it
        /// carries one: the write that caused this notification, for a span link.
        traceparent: Option<Box<str>>,
    },
    /// An `add_after(key, after)` whose time came.
    Timer {
        /// The delay that was asked for.
        after: Duration,
    },
    /// A rate-limited retry: the previous sync of the key failed.
    Retry {
        /// Which retry this is (the failures on record for the key, client-go's `NumRequeues`).
        attempt: u32,
        /// What the failed sync reported, when the worker said.
        error: Option<Box<str>>,
    },
    /// A plain `add` from outside any informer handler (a test, a hand-written enqueue).
    Direct,
}

/// The annotation KEP-5915 proposes for carrying a W3C trace context on an object
/// (`tracing.k8s.io/traceparent`): the writer puts its span's `traceparent` there, and the
/// reconcile that the write causes links its span to it.
pub const TRACEPARENT_ANNOTATION: &str = "tracing.k8s.io/traceparent";

impl Trigger {
    /// The `trigger` label of `controller_reconcile_triggers_total`: the event's type
    /// (`added`, `modified`, `deleted`, `resync`, `initial_list`, `relist`), `timer`, `retry`
    /// or `direct`.
    pub fn label(&self) -> &'static str {
        match self {
            Trigger::Event { event, .. } => event.label(),
            Trigger::Timer { .. } => "timer",
            Trigger::Retry { .. } => "retry",
            Trigger::Direct => "direct",
        }
    }

    /// Whether `other` comes from the same source and so collapses into this one: the same
    /// notification type of the same object, a timer, a retry, or a direct add.
    fn same_source(&self, other: &Trigger) -> bool {
        match (self, other) {
            (
                Trigger::Event {
                    event: a,
                    kind: ka,
                    object: oa,
                    ..
                },
                Trigger::Event {
                    event: b,
                    kind: kb,
                    object: ob,
                    ..
                },
            ) => a == b && ka == kb && oa == ob,
            (Trigger::Timer { .. }, Trigger::Timer { .. })
            | (Trigger::Retry { .. }, Trigger::Retry { .. })
            | (Trigger::Direct, Trigger::Direct) => true,
            _ => false,
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Event {
                event,
                kind,
                object,
                resource_version,
                ..
            } => write!(
                f,
                "{} {kind} {object} rv {resource_version}",
                event.as_str()
            ),
            Trigger::Timer { after } => write!(f, "add_after({}) came due", seconds(*after)),
            Trigger::Retry {
                attempt,
                error: Some(e),
            } => write!(f, "rate-limited retry {attempt} after: {e}"),
            Trigger::Retry { attempt, .. } => write!(f, "rate-limited retry {attempt}"),
            Trigger::Direct => f.write_str("added directly"),
        }
    }
}

/// `4.99s`, `250ms`, `12µs`: a duration as the trace prints it.
pub fn seconds(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2}s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{}µs", d.as_micros())
    }
}

/// A trigger and how many times it arrived while the key waited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The latest of the collapsed triggers (the newest resourceVersion, the latest retry).
    pub trigger: Trigger,
    /// How many arrived (1 or more).
    pub count: u32,
}

/// Why a key was queued: every distinct trigger that arrived while it waited (or, for a key
/// being processed, since the worker took it), in order of first arrival.
///
/// Collapsed like the key: ten `MODIFIED` events of one object while the key waits are one
/// entry with a count of ten and the latest resourceVersion. Bounded: at most
/// [`MAX_TRIGGERS_PER_KEY`] distinct entries; further distinct ones are counted in
/// [`Triggers::dropped`]. Empty, it takes no allocation (one pointer); with triggers, one of
/// 128 bytes (more only past the first trigger).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Triggers(Option<Box<TriggerList>>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct TriggerList {
    first: Counted,
    rest: Vec<Counted>,
    dropped: u32,
}

impl Triggers {
    /// No trigger.
    pub const fn new() -> Self {
        Triggers(None)
    }

    /// One trigger.
    pub fn one(trigger: Trigger) -> Self {
        Triggers(Some(Box::new(TriggerList {
            first: Counted { trigger, count: 1 },
            rest: Vec::new(),
            dropped: 0,
        })))
    }

    /// Adds `trigger`: it collapses into an entry of the same source (taking its place as the
    /// latest, its count one higher; a retry keeps the error it knew when the newer report
    /// has none), else it is appended, else (full) counted as dropped.
    pub fn push(&mut self, trigger: Trigger) {
        self.push_counted(Counted { trigger, count: 1 });
    }

    fn push_counted(&mut self, c: Counted) {
        let Some(list) = self.0.as_mut() else {
            *self = Triggers(Some(Box::new(TriggerList {
                first: c,
                rest: Vec::new(),
                dropped: 0,
            })));
            return;
        };
        let kept = 1 + list.rest.len();
        let same = std::iter::once(&mut list.first)
            .chain(list.rest.iter_mut())
            .find(|e| e.trigger.same_source(&c.trigger));
        match same {
            Some(e) => {
                e.count = e.count.saturating_add(c.count);
                // A later retry report without an error keeps the error already known.
                let keep_error = match (&e.trigger, &c.trigger) {
                    (
                        Trigger::Retry {
                            error: Some(old), ..
                        },
                        Trigger::Retry { error: None, .. },
                    ) => Some(old.clone()),
                    _ => None,
                };
                e.trigger = c.trigger;
                if let (Some(old), Trigger::Retry { error, .. }) = (keep_error, &mut e.trigger) {
                    *error = Some(old);
                }
            }
            None if kept < MAX_TRIGGERS_PER_KEY => {
                // Room for exactly one more: a `Vec` would reserve four of these 96-byte
                // entries at its first push, and a burst of owners with a second trigger
                // each (an owned pod's events) would pay for three they never use.
                list.rest.reserve_exact(1);
                list.rest.push(c);
            }
            None => list.dropped = list.dropped.saturating_add(c.count),
        }
    }

    /// Adds every trigger of `other` (in its order) as [`Triggers::push`] would.
    pub fn merge(&mut self, other: Triggers) {
        let Some(list) = other.0 else {
            return;
        };
        let TriggerList {
            first,
            rest,
            dropped,
        } = *list;
        self.push_counted(first);
        for c in rest {
            self.push_counted(c);
        }
        if dropped > 0
            && let Some(mine) = self.0.as_mut()
        {
            mine.dropped = mine.dropped.saturating_add(dropped);
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// How many distinct triggers are kept.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |l| 1 + l.rest.len())
    }

    /// The triggers, in order of first arrival.
    pub fn iter(&self) -> impl Iterator<Item = &Counted> {
        self.0
            .as_deref()
            .into_iter()
            .flat_map(|l| std::iter::once(&l.first).chain(l.rest.iter()))
    }

    /// How many triggers arrived in all (collapsed ones and dropped ones included): the adds
    /// this key's one reconcile stands for.
    pub fn total(&self) -> u64 {
        self.iter().map(|c| u64::from(c.count)).sum::<u64>() + u64::from(self.dropped())
    }

    /// Distinct triggers that found the list full and were only counted.
    pub fn dropped(&self) -> u32 {
        self.0.as_ref().map_or(0, |l| l.dropped)
    }

    /// The `traceparent` annotations the triggering objects carried, for span links.
    pub fn traceparents(&self) -> impl Iterator<Item = &str> {
        self.iter().filter_map(|c| match &c.trigger {
            Trigger::Event {
                traceparent: Some(t),
                ..
            } => Some(&**t),
            _ => None,
        })
    }
}

impl fmt::Display for Triggers {
    /// `MODIFIED Pod default/x-pod rv 42 (x3); add_after(4.99s) came due`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, c) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}", c.trigger)?;
            if c.count > 1 {
                write!(f, " (x{})", c.count)?;
            }
        }
        if self.dropped() > 0 {
            write!(f, "; {} more", self.dropped())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modified(object: &str, rv: &str) -> Trigger {
        Trigger::Event {
            event: EventType::Modified,
            kind: "Pod",
            object: object.into(),
            resource_version: rv.into(),
            traceparent: None,
        }
    }

    #[test]
    fn the_same_source_collapses_into_its_latest_and_counts() {
        let mut t = Triggers::one(modified("ns/a-pod", "5"));
        t.push(Trigger::Timer {
            after: Duration::from_secs(5),
        });
        t.push(modified("ns/a-pod", "7"));
        t.push(modified("ns/b-pod", "8"));
        assert_eq!(t.len(), 3);
        let all: Vec<_> = t.iter().collect();
        assert_eq!(all[0].trigger, modified("ns/a-pod", "7"), "latest rv kept");
        assert_eq!(all[0].count, 2);
        assert_eq!(t.total(), 4);
        assert_eq!(
            t.to_string(),
            "MODIFIED Pod ns/a-pod rv 7 (x2); add_after(5.00s) came due; MODIFIED Pod ns/b-pod rv 8"
        );
    }

    #[test]
    fn a_full_list_counts_what_it_cannot_keep() {
        let mut t = Triggers::new();
        for i in 0..20 {
            t.push(modified(&format!("ns/p{i}"), "1"));
        }
        assert_eq!(t.len(), MAX_TRIGGERS_PER_KEY);
        assert_eq!(t.dropped(), 12);
        assert_eq!(t.total(), 20);
        assert!(t.to_string().ends_with("; 12 more"), "{t}");
        // What is kept still collapses.
        t.push(modified("ns/p0", "2"));
        assert_eq!(t.dropped(), 12);
        assert_eq!(t.iter().next().map(|c| c.count), Some(2));
    }

    #[test]
    fn merging_keeps_order_and_collapses() {
        let mut a = Triggers::one(Trigger::Retry {
            attempt: 1,
            error: Some("boom".into()),
        });
        let mut b = Triggers::one(modified("ns/x", "3"));
        b.push(Trigger::Retry {
            attempt: 2,
            error: None,
        });
        a.merge(b);
        let labels: Vec<_> = a.iter().map(|c| c.trigger.label()).collect();
        assert_eq!(labels, ["retry", "modified"]);
        assert_eq!(a.iter().next().map(|c| c.count), Some(2));
        assert_eq!(
            a.to_string(),
            "rate-limited retry 2 after: boom (x2); MODIFIED Pod ns/x rv 3",
            "the error known is kept"
        );
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(seconds(Duration::from_millis(4990)), "4.99s");
        assert_eq!(seconds(Duration::from_micros(2500)), "2.5ms");
        assert_eq!(seconds(Duration::from_micros(12)), "12µs");
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// What a queued key pays for its triggers: a pointer in the queue's entry, and one
    /// allocation of 128 bytes while it has any (a burst of 10,000 queued keys: 1.3 MB).
    #[test]
    fn a_keys_triggers_cost_a_pointer_and_one_small_allocation() {
        assert_eq!(std::mem::size_of::<Triggers>(), 8);
        assert_eq!(std::mem::size_of::<TriggerList>(), 128);
        assert_eq!(std::mem::size_of::<Trigger>(), 88);
    }
}
