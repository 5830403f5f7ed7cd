//! The sink: where correlated events are written, and how failures are retried.
//!
//! client-go's `EventSink` interface (`Create`, `Update`, `Patch`) and `recordToSink` /
//! `recordEvent` in `tools/record/event.go`. The sink is deliberately a two-method trait,
//! [`EventSink`], so the pipeline can be tested without a server and so the write path is
//! visible in one place:
//!
//! ```text
//! event --correlate--> skip?  -> nothing sent
//!                      count == 1  -> POST   /api/v1/namespaces/{ns}/events
//!                      count > 1   -> PATCH  /api/v1/namespaces/{ns}/events/{name}
//!                                     (strategic merge of count, lastTimestamp, message)
//!                                     404? -> clear resourceVersion, POST instead
//! success -> the server's copy goes back into the correlator (name, resourceVersion, count)
//! ```
//!
//! ## Retries
//!
//! One write is tried up to [`MAX_TRIES_PER_EVENT`] (12) times. The wait before the second
//! try is random in `[0, sleep)` so that many controllers do not all hammer an API server that
//! just came back; later waits are exactly `sleep` (default 10 s). Everything happens in the
//! sink's single task, so a sink that is down delays the events queued behind it; they wait in
//! the watcher's bounded queue and are dropped (and counted) when it fills.
//!
//! Which failures are retried:
//!
//! * transport failures, timeouts, undecodable answers: retried (the server may come back);
//! * `5xx` and `429` answers: retried. **This differs from client-go**, which gives up on any
//!   `StatusError` including a 500; a 5xx or 429 says "try again later", and an event lost to a
//!   single overloaded moment is a worse outcome than one more request ten seconds later;
//! * any other `4xx` (invalid event, forbidden, already exists, namespace terminating): given up
//!   at once, since repeating the same request cannot succeed. AlreadyExists is logged at debug
//!   level, everything else as an error, as client-go does;
//! * an error building the request ([`Error::Config`], [`Error::Other`]): given up.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tokio_util::sync::CancellationToken;

use super::correlator::EventCorrelator;
use crate::client::{Api, Client, Error, Patch, PatchParams, PostParams};

/// Tries per event before it is given up (client-go's `maxTriesPerEvent`).
pub const MAX_TRIES_PER_EVENT: u32 = 12;

/// The default wait between tries (client-go's `defaultSleepDuration`).
pub const DEFAULT_SLEEP_DURATION: Duration = Duration::from_secs(10);

/// Where events are written: core/v1 Events in each event's own namespace.
pub trait EventSink: Send + Sync + 'static {
    /// POST the event; returns the server's copy (of which the correlator reads the identity,
    /// name, resourceVersion, count and firstTimestamp; a sink may return only those).
    fn create(&self, event: &Event) -> impl Future<Output = Result<Event, Error>> + Send;
    /// PATCH `event.metadata.name` in `event.metadata.namespace` with a strategic-merge patch
    /// (`application/strategic-merge-patch+json`); returns the server's copy.
    fn patch(
        &self,
        event: &Event,
        patch: &serde_json::Value,
    ) -> impl Future<Output = Result<Event, Error>> + Send;
}

/// The [`EventSink`] that writes core/v1 Events through the API (client-go's
/// `EventSinkImpl{CoreV1().Events("")}`): each event goes to its own namespace.
#[derive(Clone, Debug)]
pub struct ApiEventSink {
    client: Client,
    namespace: Option<String>,
}

impl ApiEventSink {
    /// A sink for events in any namespace.
    pub fn new(client: Client) -> Self {
        ApiEventSink {
            client,
            namespace: None,
        }
    }

    /// A sink that accepts only events in `namespace` (client-go's namespaced sink), for
    /// controllers whose RBAC covers one namespace.
    pub fn namespaced(client: Client, namespace: &str) -> Self {
        ApiEventSink {
            client,
            namespace: Some(namespace.to_owned()),
        }
    }

    fn api_for(&self, event: &Event) -> Result<Api<Event>, Error> {
        let ns = event.metadata.namespace.as_deref().unwrap_or_default();
        if ns.is_empty() {
            return Err(Error::Other(format!(
                "event {:?} has no metadata.namespace",
                event.metadata.name.as_deref().unwrap_or_default()
            )));
        }
        if let Some(only) = &self.namespace
            && only != ns
        {
            return Err(Error::Other(format!(
                "can't write event in namespace {ns:?} with a sink for namespace {only:?}"
            )));
        }
        Ok(Api::namespaced(self.client.clone(), ns))
    }
}

/// The parts of the server's copy of a written event that the correlator keeps
/// ([`EventCorrelator::update_state`]): its identity (source, object, type, reason, message), its
/// name and revision, its count and first timestamp. The answer is decoded into this and nothing
/// else: the rest (managedFields, the other timestamps, the reporting fields) is skipped unread,
/// where decoding a whole `Event` for five fields was a twentieth of a controller's CPU at one
/// event per write. Strings are borrowed from the answer unless they hold escapes.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenEvent<'a> {
    #[serde(borrow, default)]
    metadata: WrittenMeta<'a>,
    #[serde(borrow, default)]
    involved_object: WrittenObject<'a>,
    #[serde(borrow, default)]
    source: Option<WrittenSource<'a>>,
    #[serde(borrow, default, rename = "type")]
    type_: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    count: Option<i32>,
    #[serde(default)]
    first_timestamp: Option<Time>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    resource_version: Option<Cow<'a, str>>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenObject<'a> {
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    field_path: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct WrittenSource<'a> {
    #[serde(borrow, default)]
    component: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    host: Option<Cow<'a, str>>,
}

/// An owned event holding what [`WrittenEvent`] read.
#[derive(Debug)]
struct Written(Event);

impl<'de> serde::Deserialize<'de> for Written {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WrittenEvent::deserialize(d)?;
        let own = |s: Option<Cow<'_, str>>| s.map(Cow::into_owned);
        Ok(Written(Event {
            metadata: ObjectMeta {
                name: own(w.metadata.name),
                namespace: own(w.metadata.namespace),
                resource_version: own(w.metadata.resource_version),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                kind: own(w.involved_object.kind),
                namespace: own(w.involved_object.namespace),
                name: own(w.involved_object.name),
                uid: own(w.involved_object.uid),
                api_version: own(w.involved_object.api_version),
                field_path: own(w.involved_object.field_path),
                ..ObjectReference::default()
            },
            source: w.source.map(|s| EventSource {
                component: own(s.component),
                host: own(s.host),
            }),
            type_: own(w.type_),
            reason: own(w.reason),
            message: own(w.message),
            count: w.count,
            first_timestamp: w.first_timestamp,
            ..Event::default()
        }))
    }
}

impl EventSink for ApiEventSink {
    /// POST the event; the answer is read for what the correlator keeps (its `WrittenEvent`): the
    /// returned event has its identity, name, resourceVersion, count and firstTimestamp.
    async fn create(&self, event: &Event) -> Result<Event, Error> {
        let written: Written = self
            .api_for(event)?
            .create_as(&PostParams::default(), event)
            .await?;
        Ok(written.0)
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, Error> {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Err(Error::Other(
                "event to patch has no metadata.name".to_owned(),
            ));
        }
        let written: Written = self
            .api_for(event)?
            .patch_at(
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
                "",
            )
            .await?;
        Ok(written.0)
    }
}

/// What became of one write attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// Written (or given up for good): stop.
    Done,
    /// Failed in a way that may succeed later.
    Retry,
}

/// Whether an error is worth another try (see the module documentation).
pub fn is_retryable(err: &Error) -> bool {
    match err {
        Error::Api(_) | Error::Http { .. } => {
            matches!(err.code(), Some(code) if code >= 500 || code == 429)
        }
        Error::Transport(_) | Error::Timeout(_) | Error::Decode { .. } => true,
        Error::LineTooLong { .. }
        | Error::UndecodableObject { .. }
        | Error::Config(_)
        | Error::Other(_) => false,
    }
}

/// Correlates one event and writes it, retrying as described in the module documentation.
/// Returns when the event was written, skipped, given up, or `cancel` fired during a wait.
pub(crate) async fn record_to_sink<S: EventSink>(
    sink: &S,
    correlator: &mut EventCorrelator,
    event: Event,
    sleep: Duration,
    max_tries: u32,
    cancel: &CancellationToken,
) {
    let result = correlator.correlate(event);
    if result.skip {
        tracing::debug!(
            event = result.event.metadata.name.as_deref().unwrap_or_default(),
            reason = result.event.reason.as_deref().unwrap_or_default(),
            "event skipped by the spam filter"
        );
        return;
    }
    let mut event = result.event;
    let patch = result.patch;
    let mut tries = 0;
    loop {
        if write_once(sink, correlator, &mut event, patch.as_ref()).await == Attempt::Done {
            return;
        }
        tries += 1;
        if tries >= max_tries {
            tracing::error!(
                event = event.metadata.name.as_deref().unwrap_or_default(),
                tries,
                "unable to write event (retry limit exceeded)"
            );
            return;
        }
        let delay = if tries == 1 {
            sleep.mul_f64(fastrand::f64())
        } else {
            sleep
        };
        tokio::select! {
            _ = cancel.cancelled() => {
                tracing::error!(
                    event = event.metadata.name.as_deref().unwrap_or_default(),
                    "unable to write event (event pipeline is shut down)"
                );
                return;
            }
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

async fn write_once<S: EventSink>(
    sink: &S,
    correlator: &mut EventCorrelator,
    event: &mut Event,
    patch: Option<&serde_json::Value>,
) -> Attempt {
    let update_existing = event.count.unwrap_or(1) > 1;
    let mut outcome = None;
    if update_existing && let Some(patch) = patch {
        outcome = Some(sink.patch(event, patch).await);
    }
    let needs_create = match &outcome {
        None => true,
        Some(Err(e)) => e.is_not_found(),
        Some(Ok(_)) => false,
    };
    if needs_create {
        // The earlier event is gone (expired by the API server's TTL, or deleted): create it
        // again under the same name, without a stale resourceVersion.
        event.metadata.resource_version = None;
        outcome = Some(sink.create(event).await);
    }
    match outcome {
        Some(Ok(written)) => {
            correlator.update_state(&written);
            Attempt::Done
        }
        Some(Err(err)) => {
            let name = event.metadata.name.as_deref().unwrap_or_default();
            if is_retryable(&err) {
                tracing::warn!(event = name, error = %err, "unable to write event (may retry after sleeping)");
                Attempt::Retry
            } else {
                if err.is_already_exists() {
                    tracing::debug!(event = name, error = %err, "server rejected event (will not retry)");
                } else {
                    tracing::error!(event = name, error = %err, "server rejected event (will not retry)");
                }
                Attempt::Done
            }
        }
        None => Attempt::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_read_for_what_the_correlator_keeps() {
        let answer = serde_json::json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {
                "name": "b1.18a2f0c3d4e5f601", "namespace": "default", "resourceVersion": "4711",
                "uid": "u-1", "creationTimestamp": "2026-12-07T10:00:00Z",
                "managedFields": [{"manager": "at-controller", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:count": {}}}]
            },
            "involvedObject": {"kind": "At", "namespace": "default", "name": "b1", "uid": "a-1",
                               "apiVersion": "cnat.programming-kubernetes.info/v1",
                               "resourceVersion": "17"},
            "source": {"component": "at-controller", "host": "node-1"},
            "type": "Normal", "reason": "Started",
            "message": "running \"echo \\\"hi\\\"\" in pod b1-pod",
            "count": 3,
            "firstTimestamp": "2026-12-07T10:00:00Z", "lastTimestamp": "2026-12-07T10:00:05Z",
            "reportingComponent": "at-controller", "reportingInstance": "node-1"
        });
        let text = serde_json::to_vec(&answer).unwrap();
        let full: Event = serde_json::from_slice(&text).unwrap();
        let slim = serde_json::from_slice::<Written>(&text).unwrap().0;
        assert_eq!(
            super::super::correlator::event_key(&slim),
            super::super::correlator::event_key(&full)
        );
        assert_eq!(slim.metadata.name, full.metadata.name);
        assert_eq!(slim.metadata.namespace, full.metadata.namespace);
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("4711"));
        assert_eq!(slim.count, Some(3));
        assert_eq!(slim.first_timestamp, full.first_timestamp);
        assert_eq!(slim.message, full.message);
        assert!(slim.metadata.managed_fields.is_none() && slim.last_timestamp.is_none());
        // An answer that is not an event names what was wrong.
        let err = serde_json::from_slice::<Written>(br#"{"count":"three"}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
    }

    #[test]
    fn retry_classification() {
        assert!(is_retryable(&Error::status(500, "InternalError", "boom")));
        assert!(is_retryable(&Error::status(503, "ServiceUnavailable", "x")));
        assert!(is_retryable(&Error::status(429, "TooManyRequests", "x")));
        assert!(is_retryable(&Error::Transport("connection refused".into())));
        assert!(!is_retryable(&Error::status(422, "Invalid", "x")));
        assert!(!is_retryable(&Error::status(409, "AlreadyExists", "x")));
        assert!(!is_retryable(&Error::status(403, "Forbidden", "x")));
        assert!(!is_retryable(&Error::Other("bad request".into())));
    }
}
