//! The event pipeline end to end (recorder → broadcaster → correlator → sink) against an
//! in-memory sink that behaves like the events endpoint: it stores events by name, answers 404
//! for a PATCH of a missing event, bumps a resourceVersion, and can be told to fail the next
//! requests. The same sequences against the embedded API server live in
//! `tests/record_apiserver.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Error, TransportError, TransportKind};
use sample_client_go::record::{
    BroadcasterOptions, EventBroadcaster, EventSink, EventType, MAX_TRIES_PER_EVENT,
};
use sample_operators::apis::At;

#[derive(Clone, Debug, PartialEq)]
struct Request {
    verb: &'static str,
    name: String,
    count: i32,
    message: String,
}

#[derive(Default)]
struct State {
    events: BTreeMap<String, Event>,
    log: Vec<Request>,
    failures: VecDeque<Error>,
    rv: u64,
}

/// An events endpoint in memory.
#[derive(Clone, Default)]
struct MemorySink(Arc<Mutex<State>>);

impl MemorySink {
    fn log(&self) -> Vec<Request> {
        self.0.lock().unwrap().log.clone()
    }
    fn fail_next(&self, n: usize, make: impl Fn() -> Error) {
        let mut s = self.0.lock().unwrap();
        for _ in 0..n {
            s.failures.push_back(make());
        }
    }
    fn delete_all(&self) {
        self.0.lock().unwrap().events.clear();
    }
    fn stored(&self) -> Vec<Event> {
        self.0.lock().unwrap().events.values().cloned().collect()
    }
}

fn key(e: &Event) -> String {
    format!(
        "{}/{}",
        e.metadata.namespace.as_deref().unwrap_or_default(),
        e.metadata.name.as_deref().unwrap_or_default()
    )
}

impl EventSink for MemorySink {
    async fn create(&self, event: &Event) -> Result<Event, Error> {
        let mut s = self.0.lock().unwrap();
        s.log.push(Request {
            verb: "POST",
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
        });
        if let Some(e) = s.failures.pop_front() {
            return Err(e);
        }
        assert!(
            event.metadata.resource_version.is_none(),
            "a create carries no resourceVersion"
        );
        if s.events.contains_key(&key(event)) {
            return Err(Error::status(409, "AlreadyExists", "exists"));
        }
        s.rv += 1;
        let mut stored = event.clone();
        stored.metadata.resource_version = Some(s.rv.to_string());
        s.events.insert(key(event), stored.clone());
        Ok(stored)
    }

    async fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, Error> {
        let mut s = self.0.lock().unwrap();
        s.log.push(Request {
            verb: "PATCH",
            name: event.metadata.name.clone().unwrap_or_default(),
            count: patch["count"].as_i64().unwrap_or_default() as i32,
            message: patch["message"].as_str().unwrap_or_default().to_owned(),
        });
        if let Some(e) = s.failures.pop_front() {
            return Err(e);
        }
        s.rv += 1;
        let rv = s.rv.to_string();
        let Some(stored) = s.events.get_mut(&key(event)) else {
            return Err(Error::status(404, "NotFound", "events not found"));
        };
        stored.count = patch["count"].as_i64().map(|c| c as i32);
        stored.message = patch["message"].as_str().map(str::to_owned);
        stored.last_timestamp = serde_json::from_value(patch["lastTimestamp"].clone()).unwrap();
        stored.metadata.resource_version = Some(rv);
        Ok(stored.clone())
    }
}

fn at(name: &str) -> At {
    At {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Shuts the broadcaster down and waits for the sink to finish what is queued.
async fn flush(b: &EventBroadcaster, h: sample_client_go::record::WatcherHandle) {
    b.shutdown();
    h.join().await;
}

#[tokio::test(start_paused = true)]
async fn same_event_three_times_is_post_then_patch_2_then_patch_3() {
    let sink = MemorySink::default();
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    let obj = at("example-at");
    for _ in 0..3 {
        r.event(&obj, EventType::Normal, "Scheduled", "will run soon");
        tokio::task::yield_now().await;
    }
    flush(&b, h).await;

    let log = sink.log();
    assert_eq!(
        log.iter().map(|r| (r.verb, r.count)).collect::<Vec<_>>(),
        [("POST", 1), ("PATCH", 2), ("PATCH", 3)]
    );
    assert!(log.iter().all(|r| r.name == log[0].name));
    assert!(log[0].name.starts_with("example-at."));

    let stored = sink.stored();
    assert_eq!(stored.len(), 1);
    let e = &stored[0];
    assert_eq!(e.count, Some(3));
    assert_eq!(e.metadata.namespace.as_deref(), Some("demo"));
    let o = &e.involved_object;
    assert_eq!(o.kind.as_deref(), Some("At"));
    assert_eq!(
        o.api_version.as_deref(),
        Some("cnat.programming-kubernetes.info/v1")
    );
    assert_eq!(o.name.as_deref(), Some("example-at"));
    assert_eq!(o.namespace.as_deref(), Some("demo"));
    assert_eq!(o.uid.as_deref(), Some("uid-example-at"));
    assert_eq!(o.resource_version.as_deref(), Some("7"));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("cnat-controller")
    );
    assert_eq!(e.type_.as_deref(), Some("Normal"));
}

#[tokio::test(start_paused = true)]
async fn ten_distinct_messages_aggregate_into_one_combined_event() {
    let sink = MemorySink::default();
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    let obj = at("busy");
    for i in 0..11 {
        r.eventf(
            &obj,
            EventType::Warning,
            "SyncFailed",
            format_args!("attempt {i} failed"),
        );
        tokio::task::yield_now().await;
    }
    flush(&b, h).await;

    let log = sink.log();
    assert_eq!(log.len(), 11);
    assert!(log[..9].iter().all(|r| r.verb == "POST" && r.count == 1));
    assert_eq!(log[9].verb, "POST");
    assert_eq!(
        log[9].message,
        "(combined from similar events): attempt 9 failed"
    );
    assert_eq!(log[10].verb, "PATCH");
    assert_eq!(log[10].name, log[9].name);
    assert_eq!(log[10].count, 2);
    assert_eq!(
        log[10].message,
        "(combined from similar events): attempt 10 failed"
    );
}

#[tokio::test(start_paused = true)]
async fn the_26th_event_for_one_object_is_dropped_by_the_spam_filter() {
    let sink = MemorySink::default();
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    let obj = at("noisy");
    for i in 0..26 {
        r.event(&obj, EventType::Normal, &format!("Reason{i}"), "m");
        tokio::task::yield_now().await;
    }
    // Another object is not affected by "noisy"'s budget.
    r.event(&at("quiet"), EventType::Normal, "Reason", "m");
    flush(&b, h).await;

    let log = sink.log();
    assert_eq!(log.len(), 26);
    assert!(log.iter().all(|r| r.verb == "POST"));
    assert!(
        log.iter()
            .all(|r| !r.name.starts_with("noisy.") || r.count == 1)
    );
    assert!(log[25].name.starts_with("quiet."));
    assert_eq!(
        b.dropped_events(),
        0,
        "spam-filtered events are not queue drops"
    );
}

#[tokio::test(start_paused = true)]
async fn a_404_on_patch_falls_back_to_create_with_the_same_name() {
    let sink = MemorySink::default();
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    let obj = at("expired");
    r.event(&obj, EventType::Normal, "Done", "finished");
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    // The API server's event TTL removed it.
    sink.delete_all();
    r.event(&obj, EventType::Normal, "Done", "finished");
    flush(&b, h).await;

    let log = sink.log();
    assert_eq!(
        log.iter().map(|r| (r.verb, r.count)).collect::<Vec<_>>(),
        [("POST", 1), ("PATCH", 2), ("POST", 2)]
    );
    assert!(log.iter().all(|r| r.name == log[0].name));
    assert_eq!(sink.stored()[0].count, Some(2));
}

#[tokio::test(start_paused = true)]
async fn the_sink_retries_through_500s() {
    let sink = MemorySink::default();
    sink.fail_next(3, || Error::status(500, "InternalError", "etcd hiccup"));
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    r.event(&at("retry"), EventType::Normal, "Scheduled", "m");
    // Waits go through tokio::time; the paused clock jumps over them. Wait for the write.
    while sink.stored().is_empty() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    flush(&b, h).await;
    let log = sink.log();
    assert_eq!(log.len(), 4, "three failures, then success: {log:?}");
    assert!(log.iter().all(|r| r.verb == "POST"));
}

#[tokio::test(start_paused = true)]
async fn the_sink_gives_up_after_12_tries_and_never_retries_a_4xx() {
    let sink = MemorySink::default();
    sink.fail_next(100, || {
        Error::Transport(TransportError::new(
            TransportKind::ConnectionRefused,
            "POST events",
            "server down",
        ))
    });
    let b = EventBroadcaster::new();
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    r.event(&at("down"), EventType::Normal, "Scheduled", "m");
    // 12 tries take at most 10 s + 10 × 10 s of (paused) time.
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(sink.log().len(), MAX_TRIES_PER_EVENT as usize);

    sink.0.lock().unwrap().failures.clear();
    sink.fail_next(1, || Error::status(422, "Invalid", "bad event"));
    r.event(&at("invalid"), EventType::Normal, "Scheduled", "m");
    tokio::time::sleep(Duration::from_secs(200)).await;
    flush(&b, h).await;
    assert_eq!(sink.log().len(), MAX_TRIES_PER_EVENT as usize + 1);
    assert!(sink.stored().is_empty());
}

/// A sink that never answers: the queue behind it fills up.
struct StuckSink;

impl EventSink for StuckSink {
    async fn create(&self, _: &Event) -> Result<Event, Error> {
        std::future::pending().await
    }
    async fn patch(&self, _: &Event, _: &serde_json::Value) -> Result<Event, Error> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn recording_never_blocks_and_a_full_queue_drops_and_counts() {
    // One sink lane: client-go's single writer, so the queue's bound is exactly queue_len.
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        sink_lanes: 1,
        ..Default::default()
    });
    let h = b.start_recording_to_sink(StuckSink);
    let r = b.new_recorder("cnat-controller");
    // Let the sink task take the first event and hang on it.
    r.event(&at("first"), EventType::Normal, "R", "m");
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    for i in 0..1010 {
        r.event(&at(&format!("o{i}")), EventType::Normal, "R", "m");
    }
    assert_eq!(b.dropped_events(), 10, "1000 queued, 10 dropped");

    let small = EventBroadcaster::with_options(BroadcasterOptions {
        queue_len: 5,
        ..Default::default()
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let w = small.start_event_watcher(move |e| {
        seen2
            .lock()
            .unwrap()
            .push(e.involved_object.name.clone().unwrap_or_default())
    });
    let r2 = small.new_recorder("x");
    for i in 0..8 {
        r2.event(&at(&format!("o{i}")), EventType::Normal, "R", "m");
    }
    assert_eq!(small.dropped_events(), 3);
    small.shutdown();
    w.join().await;
    assert_eq!(*seen.lock().unwrap(), ["o0", "o1", "o2", "o3", "o4"]);

    // After shutdown, recording is a logged no-op, not a panic or a block.
    r2.event(&at("late"), EventType::Normal, "R", "m");
    assert_eq!(seen.lock().unwrap().len(), 5);
    h.shutdown().await;
}

#[tokio::test]
async fn cluster_scoped_objects_get_events_in_default_and_annotations_are_kept() {
    use k8s_openapi::api::core::v1::Namespace;
    let b = EventBroadcaster::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let w = b.start_event_watcher(move |e| s.lock().unwrap().push(e.clone()));
    let r = b.new_recorder("ns-controller");
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("team-a".into()),
            uid: Some("uid-ns".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    r.annotated_eventf(
        &ns,
        [("example.com/trace".to_owned(), "abc".to_owned())].into(),
        EventType::Warning,
        "Terminating",
        format_args!("{} objects left", 3),
    );
    // An object without a name cannot be referenced: dropped, not sent.
    r.event(&At::default(), EventType::Normal, "Nameless", "m");
    b.shutdown();
    w.join().await;

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let e = &seen[0];
    assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Namespace"));
    assert_eq!(e.involved_object.api_version.as_deref(), Some("v1"));
    assert_eq!(e.involved_object.namespace, None);
    assert_eq!(e.message.as_deref(), Some("3 objects left"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(
        e.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/trace"))
            .map(String::as_str),
        Some("abc")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("ns-controller"));
    assert_eq!(e.first_timestamp, e.last_timestamp);
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_managers_token_shuts_the_pipeline_down() {
    let sink = MemorySink::default();
    let b = EventBroadcaster::new();
    let root = tokio_util::sync::CancellationToken::new();
    b.shutdown_when(root.clone());
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    r.event(&at("before"), EventType::Normal, "R", "m");
    root.cancel();
    // The queued event is still written, then the sink task ends.
    h.join().await;
    r.event(&at("after"), EventType::Normal, "R", "m");
    tokio::task::yield_now().await;
    let names: Vec<_> = sink.log().into_iter().map(|r| r.name).collect();
    assert_eq!(names.len(), 1);
    assert!(names[0].starts_with("before."));
}

/// A sink whose writes for the object named "slow" wait until released; the others answer
/// at once. It logs each write's object and reason.
#[derive(Clone, Default)]
struct GatedSink {
    release: Arc<tokio::sync::Notify>,
    written: Arc<Mutex<Vec<(String, String)>>>,
}

impl EventSink for GatedSink {
    async fn create(&self, event: &Event) -> Result<Event, Error> {
        let object = event.involved_object.name.clone().unwrap_or_default();
        if object == "slow" {
            self.release.notified().await;
        }
        let reason = event.reason.clone().unwrap_or_default();
        self.written.lock().unwrap().push((object, reason));
        Ok(event.clone())
    }
    async fn patch(&self, event: &Event, _: &serde_json::Value) -> Result<Event, Error> {
        self.create(event).await
    }
}

#[tokio::test]
async fn a_slow_write_for_one_object_does_not_hold_back_the_others_and_each_object_keeps_its_order()
{
    let sink = GatedSink::default();
    let b = EventBroadcaster::new(); // default: several sink lanes
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    r.event(&at("slow"), EventType::Normal, "First", "m");
    r.event(&at("slow"), EventType::Normal, "Second", "m");
    // Objects other than "slow": at least one of them hashes to another lane than "slow".
    for i in 0..16 {
        r.event(
            &at(&format!("fast-{i}")),
            EventType::Normal,
            "Scheduled",
            "m",
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = sink.written.lock().unwrap().len();
        if n > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no event was written while one object's write hung"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        sink.written
            .lock()
            .unwrap()
            .iter()
            .all(|(object, _)| object != "slow"),
        "the slow object's writes are still held"
    );
    // Released, the slow object's two events arrive in the order they were recorded.
    sink.release.notify_one();
    tokio::time::sleep(Duration::from_millis(50)).await;
    sink.release.notify_one();
    b.shutdown();
    h.join().await;
    let written = sink.written.lock().unwrap().clone();
    let slow: Vec<&str> = written
        .iter()
        .filter(|(o, _)| o == "slow")
        .map(|(_, r)| r.as_str())
        .collect();
    assert_eq!(slow, ["First", "Second"]);
    assert_eq!(written.len(), 18, "every event written once: {written:?}");
    assert_eq!(b.dropped_events(), 0);
}

#[tokio::test]
async fn one_sink_lane_is_client_gos_single_writer() {
    // With one lane a hung write holds every event behind it, as in client-go.
    let sink = GatedSink::default();
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        sink_lanes: 1,
        ..Default::default()
    });
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    r.event(&at("slow"), EventType::Normal, "First", "m");
    r.event(&at("other"), EventType::Normal, "Scheduled", "m");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(sink.written.lock().unwrap().is_empty());
    sink.release.notify_one();
    b.shutdown();
    h.join().await;
    let objects: Vec<String> = sink
        .written
        .lock()
        .unwrap()
        .iter()
        .map(|(o, _)| o.clone())
        .collect();
    assert_eq!(objects, ["slow", "other"]);
}

/// A burst far longer than the broadcaster's queue (client-go's 1,000) behind a sink that is
/// stuck for the whole burst: the sink's backlog holds it in packed form and writes every event
/// once the sink moves again; a second burst past the byte budget is dropped and counted.
#[tokio::test(start_paused = true)]
async fn a_burst_waits_in_the_sinks_backlog_until_its_byte_budget_then_drops_and_counts() {
    let sink = GatedSink::default();
    let b = EventBroadcaster::with_options(BroadcasterOptions {
        sink_lanes: 1,
        sink_backlog_bytes: 4 << 20,
        ..Default::default()
    });
    let h = b.start_recording_to_sink(sink.clone());
    let r = b.new_recorder("cnat-controller");
    // The lane's first write hangs until released: everything after it waits.
    r.event(&at("slow"), EventType::Normal, "First", "m");
    for i in 0..5_000 {
        r.event(
            &at(&format!("b{i}")),
            EventType::Normal,
            "Started",
            "running",
        );
        if i % 10 == 0 {
            // The recorder never waits; the dispatcher runs between the controller's syncs.
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        b.dropped_events(),
        0,
        "5,000 events held while the sink is stuck"
    );
    assert!(sink.written.lock().unwrap().is_empty());
    sink.release.notify_one();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while sink.written.lock().unwrap().len() < 5_001 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog was not written"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A budget of 40 KiB holds about a hundred packed events behind a stuck write.
    let stuck = EventBroadcaster::with_options(BroadcasterOptions {
        sink_lanes: 1,
        sink_backlog_bytes: 40 << 10,
        ..Default::default()
    });
    let _w = stuck.start_recording_to_sink(StuckSink);
    let r = stuck.new_recorder("cnat-controller");
    for i in 0..1_000 {
        r.event(
            &at(&format!("c{i}")),
            EventType::Normal,
            "Started",
            "running",
        );
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let dropped = stuck.dropped_events();
    assert!(
        (700..1_000).contains(&dropped),
        "{dropped} of 1,000 dropped with a 40 KiB backlog"
    );
    b.shutdown();
    h.join().await;
    assert_eq!(sink.written.lock().unwrap().len(), 5_001);
}
