//! Properties of the event correlator over arbitrary event streams on a paused clock:
//!
//! * a result with `count > 1` carries a patch and one with `count == 1` does not;
//! * every result for one event name carries a strictly larger count than the last one sent
//!   under that name (a repeat never goes backwards, skipped repeats are carried forward);
//! * per object, the events let through never exceed the spam budget: 25 plus one per 300 s;
//! * distinct non-combined messages of one (object, reason) group inside the aggregation
//!   window never exceed 9 plus the number of combined events so far: the 10th distinct message
//!   is combined. (Each combination puts its message into client-go's set of 9 and evicts an
//!   arbitrary one, so a message that was once combined can later pass on its own.)

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use sample_client_go::record::EventCorrelator;
use sample_client_go::record::correlator::COMBINED_MESSAGE_PREFIX;

fn event(object: u8, reason: u8, message: u8) -> Event {
    let name = format!("obj-{object}");
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", fastrand::u64(..))),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("At".into()),
            name: Some(name.clone()),
            namespace: Some("demo".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        reason: Some(format!("Reason{reason}")),
        message: Some(format!("message {message}")),
        type_: Some("Normal".into()),
        count: Some(1),
        source: Some(EventSource {
            component: Some("c".into()),
            host: None,
        }),
        ..Default::default()
    }
}

#[derive(Clone, Debug)]
struct Step {
    object: u8,
    reason: u8,
    message: u8,
    advance_secs: u16,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0u8..2,
            0u8..3,
            0u8..14,
            prop_oneof![6 => Just(0u16), 3 => 0u16..5, 1 => 250u16..700],
        )
            .prop_map(|(object, reason, message, advance_secs)| Step {
                object,
                reason,
                message,
                advance_secs,
            }),
        1..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn correlator_invariants(steps in steps()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = EventCorrelator::default();
            let mut last_count: HashMap<String, i32> = HashMap::new();
            let mut sent_per_object: HashMap<u8, u64> = HashMap::new();
            let mut elapsed = 0u64;
            // (object, reason) -> (distinct plain messages and combined events since the window last
            // reset, last time)
            let mut plain: HashMap<(u8, u8), (HashSet<u8>, usize, u64)> = HashMap::new();
            for s in steps {
                tokio::time::advance(Duration::from_secs(s.advance_secs.into())).await;
                elapsed += u64::from(s.advance_secs);
                let r = c.correlate(event(s.object, s.reason, s.message));
                let count = r.event.count.unwrap_or(0);
                let combined = r
                    .event
                    .message
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with(COMBINED_MESSAGE_PREFIX);

                let group = plain
                    .entry((s.object, s.reason))
                    .or_insert((HashSet::new(), 0, elapsed));
                if elapsed - group.2 > 600 {
                    group.0.clear();
                    group.1 = 0;
                }
                group.2 = elapsed;
                if combined {
                    group.1 += 1;
                } else {
                    group.0.insert(s.message);
                    prop_assert!(
                        group.0.len() <= 9 + group.1,
                        "a 10th distinct message was not combined"
                    );
                }

                if r.skip {
                    continue;
                }
                prop_assert_eq!(r.patch.is_some(), count > 1);
                let name = r.event.metadata.name.clone().unwrap();
                if let Some(prev) = last_count.get(&name) {
                    prop_assert!(count > *prev, "count went from {} to {} on {}", prev, count, name);
                }
                last_count.insert(name, count);
                let sent = sent_per_object.entry(s.object).or_default();
                *sent += 1;
                prop_assert!(*sent <= 25 + elapsed / 300, "object {} sent {} events in {} s", s.object, sent, elapsed);
            }
            Ok(())
        })?;
    }
}
