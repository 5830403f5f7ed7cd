//! # The event sink: recorded events written to the API server
//!
//! The [`EventBroadcaster`](sample_client_go::record::EventBroadcaster) decides *what* to write (the spam
//! filter and the correlator fold repeats into a count); [`EventApiSink`] is the one piece that
//! writes: a `POST` of a new core/v1 Event, or a strategic-merge `PATCH` that bumps the count of
//! one seen before, as client-go's `EventSinkImpl` does. The manager hands it a client with a
//! throttle of its own ([`Client::with_own_throttle`]), so events never queue behind work.

use k8s_openapi::api::core::v1::Event;
use sample_client_go::client::{self, Api, Client, Patch, PatchParams, PostParams};
use sample_client_go::record::EventSink;

/// Writes the recorder's events as core/v1 Events through a [`Client`], each in its own
/// namespace: POST for a new event, strategic-merge PATCH for a repeat.
#[derive(Clone, Debug)]
pub struct EventApiSink {
    client: Client,
}

impl EventApiSink {
    /// A sink writing through `client`.
    pub fn new(client: Client) -> Self {
        EventApiSink { client }
    }

    fn api(&self, event: &Event) -> Api<Event> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }
}

impl EventSink for EventApiSink {
    async fn create(&self, event: &Event) -> client::Result<Event> {
        self.api(event).create(&PostParams::default(), event).await
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> client::Result<Event> {
        let name = event.metadata.name.as_deref().unwrap_or_default();
        self.api(event)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
            )
            .await
    }
}
