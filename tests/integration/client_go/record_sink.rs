//! Event sequences against the embedded API server, through [`ApiEventSink`] and the crate's
//! client: what lands in the server, and with which requests (the server's request log).
//!
//! The embedded server has no fault injection yet, so "the sink retrying through 500s" wraps the
//! real sink in [`Flaky`], which answers the first N writes with the Status a failing server
//! sends (500 InternalError) before passing writes through.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use sample_client_go::client::{Api, DeleteParams, Error, ListParams};
use sample_client_go::record::{
    ApiEventSink, BroadcasterOptions, EventBroadcaster, EventSink, EventType, WatcherHandle,
};
use support::record::*;

async fn events(client: &sample_client_go::client::Client, ns: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut items = api.list(&ListParams::default()).await.unwrap().items;
    items.sort_by_key(|e| e.metadata.name.clone());
    items
}

async fn flush(b: &EventBroadcaster, h: WatcherHandle) {
    b.shutdown();
    h.join().await;
}

#[tokio::test]
async fn repeats_post_then_patch_with_rising_count_on_the_server() {
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    let obj = at(&client, "demo", "example-at").await;

    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let r = b.new_recorder("cnat-controller");
    for _ in 0..3 {
        r.event(&obj, EventType::Normal, "Scheduled", "will run at 10:00");
    }
    flush(&b, h).await;

    let log = server.request_log();
    assert_eq!(log.count("create", "events"), 1);
    assert_eq!(log.count("patch", "events"), 2);
    let stored = events(&client, "demo").await;
    assert_eq!(stored.len(), 1);
    let e = &stored[0];
    assert_eq!(e.count, Some(3));
    assert!(
        e.metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("example-at.")
    );
    let o = &e.involved_object;
    assert_eq!(o.kind.as_deref(), Some("At"));
    assert_eq!(
        o.api_version.as_deref(),
        Some("cnat.programming-kubernetes.info/v1")
    );
    assert_eq!(o.name.as_deref(), Some("example-at"));
    assert_eq!(o.namespace.as_deref(), Some("demo"));
    assert_eq!(o.uid, obj.metadata.uid);
    assert_eq!(o.resource_version, obj.metadata.resource_version);
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("cnat-controller")
    );
    assert_eq!(e.reason.as_deref(), Some("Scheduled"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
}

#[tokio::test]
async fn aggregation_and_spam_filter_on_the_server() {
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    let busy = at(&client, "demo", "busy").await;
    let noisy = at(&client, "demo", "noisy").await;

    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let r = b.new_recorder("cnat-controller");
    for i in 0..11 {
        r.eventf(
            &busy,
            EventType::Warning,
            "SyncFailed",
            format_args!("attempt {i} failed"),
        );
    }
    for i in 0..26 {
        r.event(&noisy, EventType::Normal, &format!("Step{i}"), "m");
    }
    flush(&b, h).await;

    let stored = events(&client, "demo").await;
    let of = |name: &str| -> Vec<&Event> {
        stored
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    };
    let busy_events = of("busy");
    assert_eq!(busy_events.len(), 10, "9 single events and one combined");
    let combined: Vec<_> = busy_events
        .iter()
        .filter(|e| {
            e.message
                .as_deref()
                .unwrap_or_default()
                .starts_with("(combined from similar events): ")
        })
        .collect();
    assert_eq!(combined.len(), 1);
    assert_eq!(combined[0].count, Some(2));
    assert_eq!(
        combined[0].message.as_deref(),
        Some("(combined from similar events): attempt 10 failed")
    );
    assert_eq!(
        of("noisy").len(),
        25,
        "the 26th event is dropped by the spam filter"
    );
}

#[tokio::test]
async fn a_404_on_patch_falls_back_to_create() {
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    let obj = at(&client, "demo", "expired").await;

    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let r = b.new_recorder("cnat-controller");
    r.event(&obj, EventType::Normal, "Done", "finished");
    let api: Api<Event> = Api::namespaced(client.clone(), "demo");
    let first = loop {
        if let Some(e) = events(&client, "demo").await.pop() {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let name = first.metadata.name.clone().unwrap();
    // The server's event TTL (one hour by default) removes events; simulate it.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    r.event(&obj, EventType::Normal, "Done", "finished");
    flush(&b, h).await;

    let log = server.request_log();
    assert_eq!(log.count_code("patch", "events", 404), 1);
    assert_eq!(log.count("create", "events"), 2);
    let again = api.get(&name).await.unwrap();
    assert_eq!(
        again.count,
        Some(2),
        "recreated under the same name, count kept"
    );
}

/// Answers the first `failures` writes like a failing API server, then passes through.
struct Flaky<S> {
    inner: S,
    failures: usize,
    calls: Arc<AtomicUsize>,
}

impl<S: EventSink> Flaky<S> {
    fn fail(&self) -> Option<Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        (n < self.failures).then(|| {
            Error::from_response(
                500,
                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}"#,
            )
        })
    }
}

impl<S: EventSink> EventSink for Flaky<S> {
    async fn create(&self, event: &Event) -> Result<Event, Error> {
        match self.fail() {
            Some(e) => Err(e),
            None => self.inner.create(event).await,
        }
    }
    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, Error> {
        match self.fail() {
            Some(e) => Err(e),
            None => self.inner.patch(event, patch).await,
        }
    }
}

#[tokio::test]
async fn the_sink_retries_through_500s() {
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    let obj = at(&client, "demo", "retry").await;

    // A short retry sleep (client-go's WithSleepDuration) keeps the test quick on a real clock.
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        sleep_duration: Duration::from_millis(20),
        ..Default::default()
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let h = b.start_recording_to_sink(Flaky {
        inner: ApiEventSink::new(client.clone()),
        failures: 3,
        calls: calls.clone(),
    });
    let r = b.new_recorder("cnat-controller");
    r.event(&obj, EventType::Warning, "Failed", "pod exited 1");
    let mut waited = Duration::ZERO;
    while events(&client, "demo").await.is_empty() {
        assert!(waited < Duration::from_secs(30), "the event never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    flush(&b, h).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "three 500s, then the write"
    );
    assert_eq!(server.request_log().count("create", "events"), 1);
}

#[tokio::test]
async fn a_namespaced_sink_refuses_other_namespaces() {
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    namespace(&client, "other").await;
    let obj = at(&client, "other", "elsewhere").await;
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(ApiEventSink::namespaced(client.clone(), "demo"));
    b.new_recorder("cnat-controller")
        .event(&obj, EventType::Normal, "Scheduled", "m");
    flush(&b, h).await;
    assert!(events(&client, "other").await.is_empty());
    assert_eq!(server.request_log().count("create", "events"), 0);
}

#[tokio::test]
async fn kubectl_describe_shows_the_event() {
    let Some(bin) = support::kubectl_bin(None) else {
        eprintln!("SKIPPED: kubectl not found on the PATH");
        return;
    };
    let server = server().await;
    let client = client(&server);
    namespace(&client, "demo").await;
    let obj = at(&client, "demo", "described").await;
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let r = b.new_recorder("cnat-controller");
    r.event(
        &obj,
        EventType::Normal,
        "Scheduled",
        "will run at 2030-01-01T10:00:00Z",
    );
    r.event(
        &obj,
        EventType::Normal,
        "Scheduled",
        "will run at 2030-01-01T10:00:00Z",
    );
    flush(&b, h).await;

    let (ok, stdout, stderr) = run_kubectl(
        &bin,
        &server,
        &["describe", "at", "described", "-n", "demo"],
    )
    .await;
    assert!(ok, "kubectl describe failed: {stderr}");
    let events_section = stdout
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section in:\n{stdout}"));
    assert!(events_section.contains("Scheduled"), "{stdout}");
    assert!(events_section.contains("cnat-controller"), "{stdout}");
    assert!(
        events_section.contains("will run at 2030-01-01T10:00:00Z"),
        "{stdout}"
    );
    assert!(events_section.contains("(x2 over"), "count shown: {stdout}");
}
