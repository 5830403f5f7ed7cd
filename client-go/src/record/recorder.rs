//! The recorder: what a controller calls to say something happened to an object.
//!
//! client-go's `recorder` in `tools/record/event.go`. [`EventRecorder::event`] turns
//! `(object, type, reason, message)` into a complete core/v1 `Event` and hands it to the
//! broadcaster **without waiting**: the hand-over is a `try_send` into a bounded queue, so a
//! controller's `sync_handler` is never slowed down by the event pipeline, and if the pipeline
//! is backed up (the API server is down, say) the event is dropped and counted instead.
//!
//! The event it builds (client-go's `makeEvent`):
//!
//! | field | value |
//! |---|---|
//! | `metadata.name` | `<object name>.<lower-case hex of the Unix time in nanoseconds>`, or a random UUID if that is not a valid DNS subdomain |
//! | `metadata.namespace` | the object's namespace, or `default` for a cluster-scoped object |
//! | `involvedObject` | kind, apiVersion, name, namespace, uid, resourceVersion of the object |
//! | `reason`, `message`, `type` | as given; `type` is `Normal` or `Warning` |
//! | `firstTimestamp`, `lastTimestamp` | now (the API stores whole seconds) |
//! | `count` | 1 |
//! | `source.component`, `reportingComponent` | the component name given to [`super::EventBroadcaster::new_recorder`] |
//!
//! client-go finds `kind` and `apiVersion` by looking the Go type up in a `runtime.Scheme`
//! (which is why every controller adds its CRD types to `scheme.Scheme`); here they come from
//! the type itself through `k8s_openapi::Resource`, so there is no scheme to forget.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{Metadata, Resource};

use super::broadcaster::Shared;
use crate::cache::ObjectMetaAccess;

/// The two event types the API accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened (`Scheduled`, `Created`, ...).
    Normal,
    /// Something needs a human's attention (`FailedCreate`, `ErrResourceExists`, ...).
    Warning,
}

impl EventType {
    /// The wire spelling: `"Normal"` or `"Warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Records events for one component. Cheap to clone; every clone feeds the same broadcaster.
#[derive(Clone)]
pub struct EventRecorder {
    component: Arc<str>,
    host: Arc<str>,
    shared: Arc<Shared>,
}

impl fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.component)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    pub(super) fn new(component: &str, host: &str, shared: Arc<Shared>) -> Self {
        EventRecorder {
            component: component.into(),
            host: host.into(),
            shared,
        }
    }

    /// The component name written into `source.component`.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// Records an event about `object`. Never blocks; see the module documentation.
    pub fn event<K>(&self, object: &K, type_: EventType, reason: &str, message: &str)
    where
        K: Resource + Metadata<Ty: ObjectMetaAccess>,
    {
        self.emit(object_reference(object), None, type_, reason, message);
    }

    /// Like [`EventRecorder::event`] with a formatted message:
    /// `recorder.eventf(&at, EventType::Normal, "Scheduled", format_args!("runs at {t}"))`.
    pub fn eventf<K>(&self, object: &K, type_: EventType, reason: &str, args: fmt::Arguments<'_>)
    where
        K: Resource + Metadata<Ty: ObjectMetaAccess>,
    {
        self.emit(
            object_reference(object),
            None,
            type_,
            reason,
            &args.to_string(),
        );
    }

    /// Like [`EventRecorder::eventf`] with annotations on the Event object.
    pub fn annotated_eventf<K>(
        &self,
        object: &K,
        annotations: BTreeMap<String, String>,
        type_: EventType,
        reason: &str,
        args: fmt::Arguments<'_>,
    ) where
        K: Resource + Metadata<Ty: ObjectMetaAccess>,
    {
        self.emit(
            object_reference(object),
            Some(annotations),
            type_,
            reason,
            &args.to_string(),
        );
    }

    /// Records an event about an object known only by reference (for example a Lease the
    /// caller has not fetched).
    pub fn event_for_reference(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.emit(reference, None, type_, reason, message);
    }

    fn emit(
        &self,
        reference: ObjectReference,
        annotations: Option<BTreeMap<String, String>>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let Some(object_name) = reference.name.clone().filter(|n| !n.is_empty()) else {
            tracing::warn!(
                kind = reference.kind.as_deref().unwrap_or_default(),
                reason,
                "could not make a reference to an object without a name, dropping the event"
            );
            return;
        };
        let now = jiff::Timestamp::now();
        let namespace = reference
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let host = (!self.host.is_empty()).then(|| self.host.to_string());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&object_name, now)),
                namespace: Some(namespace),
                annotations,
                ..Default::default()
            },
            involved_object: reference,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(type_.as_str().to_owned()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            source: Some(EventSource {
                component: Some(self.component.to_string()),
                host: host.clone(),
            }),
            reporting_component: Some(self.component.to_string()),
            reporting_instance: host,
            ..Default::default()
        };
        self.shared.publish(event);
    }
}

/// The `involvedObject` reference for an object.
pub fn object_reference<K>(object: &K) -> ObjectReference
where
    K: Resource + Metadata<Ty: ObjectMetaAccess>,
{
    let meta = object.metadata();
    ObjectReference {
        kind: Some(K::KIND.to_owned()),
        api_version: Some(K::API_VERSION.to_owned()),
        name: meta.name().map(str::to_owned),
        namespace: meta.namespace().map(str::to_owned),
        uid: meta.uid().map(str::to_owned),
        resource_version: meta.resource_version().map(str::to_owned),
        field_path: None,
    }
}

/// `<object name>.<lower-case hex of Unix nanoseconds>`, or a random UUID (v4 layout) when that
/// is not a valid DNS subdomain (an object kind that allows names events cannot have).
pub fn event_name(object_name: &str, at: jiff::Timestamp) -> String {
    let nanos = u128::try_from(at.as_nanosecond()).unwrap_or_default();
    let name = format!("{object_name}.{nanos:x}");
    if is_dns_subdomain(&name) {
        name
    } else {
        apimachinery::uuid::new_v4()
    }
}

/// RFC 1123 subdomain: at most 253 characters of `[a-z0-9.-]`, starting and ending with an
/// alphanumeric, each dot-separated label non-empty and starting and ending alphanumeric.
fn is_dns_subdomain(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 {
        return false;
    }
    s.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(f), Some(l)) => {
                f.is_ascii_alphanumeric()
                    && l.is_ascii_alphanumeric()
                    && bytes
                        .iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_object_dot_hex_nanos() {
        let t = jiff::Timestamp::from_nanosecond(0x17f0_0000_0000_abcd).unwrap();
        assert_eq!(event_name("my-at", t), "my-at.17f000000000abcd");
    }

    #[test]
    fn invalid_names_fall_back_to_a_uuid() {
        let t = jiff::Timestamp::from_second(1).unwrap();
        let name = event_name("Not_Valid", t);
        assert_eq!(name.len(), 36);
        assert!(is_dns_subdomain(&name));
        assert_eq!(name.as_bytes()[14], b'4');
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_dns_subdomain("a.b-c.1"));
    }
}
