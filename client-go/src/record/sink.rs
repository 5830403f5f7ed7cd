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

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use tokio_util::sync::CancellationToken;

use super::correlator::EventCorrelator;
use crate::client::{Api, Client, Error, Patch, PatchParams, PostParams};

/// Tries per event before it is given up (client-go's `maxTriesPerEvent`).
pub const MAX_TRIES_PER_EVENT: u32 = 12;

/// The default wait between tries (client-go's `defaultSleepDuration`).
pub const DEFAULT_SLEEP_DURATION: Duration = Duration::from_secs(10);

/// Where events are written: core/v1 Events in each event's own namespace.
pub trait EventSink: Send + Sync + 'static {
    /// POST the event; returns the server's copy.
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
        // The recorder keeps an event's name, revision and count from the answer, never its
        // managedFields: they are cut before decoding.
        Ok(Api::namespaced(self.client.clone(), ns).without_managed_fields())
    }
}

impl EventSink for ApiEventSink {
    async fn create(&self, event: &Event) -> Result<Event, Error> {
        self.api_for(event)?
            .create(&PostParams::default(), event)
            .await
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, Error> {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Err(Error::Other(
                "event to patch has no metadata.name".to_owned(),
            ));
        }
        self.api_for(event)?
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
            )
            .await
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
