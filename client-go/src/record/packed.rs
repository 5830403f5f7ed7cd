//! # Packed events: how a sink's backlog holds an event
//!
//! A core/v1 `Event` as the recorder builds it is about 1.5 KB in memory: a ~950-byte struct
//! (its `ObjectMeta` alone is 360 bytes, and most of its optional fields are empty) plus a dozen
//! small strings, each its own allocation. A sink that falls behind a burst (10,000 Ats due at
//! once record 20,000 events while the API server's write path is busy with their pods) has to
//! hold thousands of them or drop them. [`PackedEvent`] keeps the same event in one string
//! allocation and a small fixed header, about 400 bytes for an At's event, so the backlog can
//! be four times longer for the same memory; [`PackedEvent::unpack`] gives the `Event` back
//! unchanged just before it is written.
//!
//! Data in: an `Event` from the broadcaster. Data out: the same `Event`. The invariant, tested
//! below: `unpack(pack(e)) == e` for every event, since the fields this form does not hold
//! (`eventTime`, `related`, `series`, metadata beyond name, namespace, resourceVersion and
//! annotations) make [`PackedEvent::pack`] keep the event whole instead. client-go has no
//! such form: its sink holds client-go's 1,000 `*v1.Event` pointers and drops the rest.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// The string fields a packed event holds, in order (see [`PackedEvent::pack`]).
const FIELDS: usize = 18;
/// The position of `reason` among them.
const REASON: usize = 10;

/// One event in a sink's backlog: its strings in one allocation, or, for an event with fields
/// the packed form does not cover, the event itself.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedEvent(Form);

#[derive(Clone, Debug, PartialEq)]
enum Form {
    Packed(Box<Packed>),
    Whole(Box<Event>),
}

#[derive(Clone, Debug, PartialEq)]
struct Packed {
    /// Every present string field, one after the other.
    text: Box<str>,
    /// Where each field ends in `text`; a field starts where the previous one ends.
    ends: [u32; FIELDS],
    /// Bit `i` set: field `i` is present (an empty string and an absent one differ).
    present: u32,
    first_timestamp: Option<Time>,
    last_timestamp: Option<Time>,
    count: Option<i32>,
    annotations: Option<BTreeMap<String, String>>,
}

impl PackedEvent {
    /// Packs `event` (or keeps it whole when it carries fields the packed form does not hold).
    pub fn pack(event: Event) -> Self {
        if !packable(&event) {
            return PackedEvent(Form::Whole(Box::new(event)));
        }
        let Event {
            metadata,
            involved_object: o,
            reason,
            message,
            type_,
            source,
            reporting_component,
            reporting_instance,
            action,
            first_timestamp,
            last_timestamp,
            count,
            ..
        } = event;
        let (component, host) = source.map(|s| (s.component, s.host)).unwrap_or_default();
        let fields: [Option<String>; FIELDS] = [
            metadata.name,
            metadata.namespace,
            metadata.resource_version,
            o.kind,
            o.api_version,
            o.name,
            o.namespace,
            o.uid,
            o.resource_version,
            o.field_path,
            reason,
            message,
            type_,
            component,
            host,
            reporting_component,
            reporting_instance,
            action,
        ];
        let mut text = String::with_capacity(fields.iter().flatten().map(String::len).sum());
        let mut ends = [0u32; FIELDS];
        let mut present = 0u32;
        for (i, field) in fields.iter().enumerate() {
            if let Some(f) = field {
                present |= 1 << i;
                text.push_str(f);
            }
            // An event's strings are far below 4 GiB (the API server refuses 1.5 MiB objects).
            ends[i] = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        PackedEvent(Form::Packed(Box::new(Packed {
            text: text.into_boxed_str(),
            ends,
            present,
            first_timestamp,
            last_timestamp,
            count,
            annotations: metadata.annotations,
        })))
    }

    /// The event again, exactly as it was packed.
    pub fn unpack(self) -> Event {
        let p = match self.0 {
            Form::Whole(event) => return *event,
            Form::Packed(p) => *p,
        };
        let Packed {
            text,
            ends,
            present,
            first_timestamp,
            last_timestamp,
            count,
            annotations,
        } = p;
        let mut f = fields(&text, &ends, present);
        let mut next = || f.next().flatten();
        let (name, namespace, resource_version) = (next(), next(), next());
        let involved_object = ObjectReference {
            kind: next(),
            api_version: next(),
            name: next(),
            namespace: next(),
            uid: next(),
            resource_version: next(),
            field_path: next(),
        };
        let (reason, message, type_) = (next(), next(), next());
        let (component, host) = (next(), next());
        let source =
            (component.is_some() || host.is_some()).then_some(EventSource { component, host });
        let (reporting_component, reporting_instance, action) = (next(), next(), next());
        Event {
            metadata: ObjectMeta {
                name,
                namespace,
                resource_version,
                annotations,
                ..ObjectMeta::default()
            },
            involved_object,
            reason,
            message,
            type_,
            source,
            reporting_component,
            reporting_instance,
            action,
            first_timestamp,
            last_timestamp,
            count,
            ..Event::default()
        }
    }

    /// The event's `reason`, read in place (what a drop's log line names).
    pub fn reason(&self) -> Option<&str> {
        match &self.0 {
            Form::Whole(event) => event.reason.as_deref(),
            Form::Packed(p) => field(&p.text, &p.ends, p.present, REASON),
        }
    }

    /// Bytes this event holds: its own size and its heap, roughly (the sink's backlog budget).
    pub fn size(&self) -> usize {
        let own = std::mem::size_of::<PackedEvent>();
        match &self.0 {
            Form::Whole(_) => own + std::mem::size_of::<Event>() + 512,
            Form::Packed(p) => {
                let annotations = p.annotations.as_ref().map_or(0, |a| {
                    a.iter().map(|(k, v)| k.len() + v.len() + 64).sum::<usize>()
                });
                own + std::mem::size_of::<Packed>() + p.text.len() + annotations
            }
        }
    }
}

/// The string fields of a packed event, in order.
fn fields<'a>(
    text: &'a str,
    ends: &'a [u32; FIELDS],
    present: u32,
) -> impl Iterator<Item = Option<String>> + 'a {
    (0..FIELDS).map(move |i| field(text, ends, present, i).map(str::to_owned))
}

/// String field `i` of a packed event, if present.
fn field<'a>(text: &'a str, ends: &[u32; FIELDS], present: u32, i: usize) -> Option<&'a str> {
    if present & (1 << i) == 0 {
        return None;
    }
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    text.get(start..ends[i] as usize)
}

/// Whether every field `event` carries has a place in the packed form. An empty
/// `EventSource` is not one: it would come back as `None`.
fn packable(event: &Event) -> bool {
    // Exhaustive on purpose: a field k8s-openapi adds to ObjectMeta must be decided on here.
    let ObjectMeta {
        annotations: _,
        name: _,
        namespace: _,
        resource_version: _,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields,
        owner_references,
        self_link,
        uid,
    } = &event.metadata;
    creation_timestamp.is_none()
        && deletion_grace_period_seconds.is_none()
        && deletion_timestamp.is_none()
        && finalizers.is_none()
        && generate_name.is_none()
        && generation.is_none()
        && labels.is_none()
        && managed_fields.is_none()
        && owner_references.is_none()
        && self_link.is_none()
        && uid.is_none()
        && event.event_time.is_none()
        && event.related.is_none()
        && event.series.is_none()
        && event
            .source
            .as_ref()
            .is_none_or(|s| s.component.is_some() || s.host.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EventSeries;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at_event() -> Event {
        let now = jiff::Timestamp::from_second(1_790_000_000).unwrap();
        Event {
            metadata: ObjectMeta {
                name: Some("b17.1871a2b3c4d5e6f7".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                kind: Some("At".into()),
                api_version: Some("cnat.programming-kubernetes.info/v1".into()),
                name: Some("b17".into()),
                namespace: Some("default".into()),
                uid: Some("0b5c5a86-3f0e-4a55-9d2c-5d0f5c0b6a11".into()),
                resource_version: Some("10234".into()),
                field_path: None,
            },
            reason: Some("Started".into()),
            message: Some("running \"echo 17\" in pod b17-pod".into()),
            type_: Some("Normal".into()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            source: Some(EventSource {
                component: Some("at-controller".into()),
                host: None,
            }),
            reporting_component: Some("at-controller".into()),
            reporting_instance: None,
            ..Default::default()
        }
    }

    #[test]
    fn an_at_event_comes_back_unchanged_from_a_quarter_of_the_memory() {
        let e = at_event();
        let packed = PackedEvent::pack(e.clone());
        assert!(matches!(packed.0, Form::Packed(_)));
        // The struct alone of an unpacked event is larger than the whole packed one.
        assert!(
            packed.size() < std::mem::size_of::<Event>(),
            "{} bytes packed, {} for Event's struct",
            packed.size(),
            std::mem::size_of::<Event>()
        );
        assert_eq!(packed.reason(), Some("Started"));
        assert_eq!(packed.unpack(), e);
    }

    #[test]
    fn empty_strings_absent_fields_and_annotations_survive() {
        let mut e = at_event();
        e.message = Some(String::new());
        e.involved_object.field_path = Some("spec.containers{busybox}".into());
        e.source = Some(EventSource {
            component: None,
            host: Some("node-1".into()),
        });
        e.metadata.resource_version = Some("77".into());
        e.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        e.action = Some("Create".into());
        let back = PackedEvent::pack(e.clone()).unpack();
        assert_eq!(back, e);
        assert_eq!(back.message.as_deref(), Some(""));
        assert_eq!(back.reporting_instance, None);
    }

    #[test]
    fn what_the_packed_form_cannot_hold_is_kept_whole() {
        let mut series = at_event();
        series.series = Some(EventSeries {
            count: Some(2),
            last_observed_time: Some(MicroTime(jiff::Timestamp::UNIX_EPOCH)),
        });
        let mut labelled = at_event();
        labelled.metadata.labels = Some(BTreeMap::from([("x".into(), "y".into())]));
        let mut empty_source = at_event();
        empty_source.source = Some(EventSource::default());
        for e in [series, labelled, empty_source] {
            let p = PackedEvent::pack(e.clone());
            assert!(matches!(p.0, Form::Whole(_)));
            assert_eq!(p.unpack(), e);
        }
    }
}
