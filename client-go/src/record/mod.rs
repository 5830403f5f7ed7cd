//! # Events: telling humans what a controller did
//!
//! client-go's `tools/record`. A controller's logs are read by whoever runs the controller; its
//! *events* are read by whoever owns the object. `kubectl describe at my-at` ends with a table
//! like
//!
//! ```text
//! Events:
//!   Type     Reason     Age                From             Message
//!   ----     ------     ----               ----             -------
//!   Normal   Scheduled  2m                 cnat-controller  will run at 2026-01-01T10:00:00Z
//!   Warning  Failed     30s (x4 over 2m)   cnat-controller  pod exited 1
//! ```
//!
//! Each row is a core/v1 `Event` object whose `involvedObject` points at the At. Events are how a
//! controller explains itself to users who cannot read its logs, and they are what people look
//! at first when something does not happen.
//!
//! ## The pipeline
//!
//! ```text
//! sync_handler ─▶ EventRecorder::event(&obj, Normal, "Scheduled", msg)    recorder.rs
//!                   │ builds the Event, try_send, never blocks
//!                   ▼
//!               EventBroadcaster ─▶ one bounded queue (1000) per watcher    broadcaster.rs
//!                   ├─▶ start_logging: "Event occurred" through tracing
//!                   └─▶ start_recording_to_sink(sink):
//!                          EventCorrelator: aggregate, count, spam-filter   correlator.rs
//!                          EventSink: POST new, PATCH repeats, retry          sink.rs
//! ```
//!
//! ## Why events are rate-limited
//!
//! Events are written to etcd like any object, by every controller, often from code that runs
//! in a retry loop. The [`correlator`] keeps that cheap: the same event again only PATCHes a
//! `count` on the existing object (`(x4 over 2m)` above); ten *different* messages of the same
//! reason on one object collapse into one `(combined from similar events)` event; and each
//! object has a budget of 25 events, refilled one every five minutes. A queue that is full drops
//! events rather than slow the controller down: an event is a best-effort note, never a reason
//! to stall reconciliation. [`EventBroadcaster::dropped_events`] counts what was lost.
//!
//! ## Use
//!
//! ```no_run
//! # async fn demo(sink: impl sample_client_go::record::EventSink, pod: k8s_openapi::api::core::v1::Pod) {
//! use sample_client_go::record::{EventBroadcaster, EventType};
//!
//! let broadcaster = EventBroadcaster::new();
//! let _log = broadcaster.start_logging();
//! let _api = broadcaster.start_recording_to_sink(sink);
//! let recorder = broadcaster.new_recorder("cnat-controller");
//! recorder.event(&pod, EventType::Normal, "Scheduled", "will run at 10:00");
//! // ... on shutdown:
//! broadcaster.shutdown();
//! # }
//! ```
//!
//! The core/v1 API is what `kubectl describe` reads and what client-go's `tools/record` writes.
//! The newer `events.k8s.io/v1` API (client-go's `tools/events`, with event *series*) is not
//! implemented here.

pub mod broadcaster;
pub mod correlator;
pub mod packed;
pub mod recorder;
pub mod sink;

pub use broadcaster::{BroadcasterOptions, EventBroadcaster, WatcherHandle};
pub use correlator::{CorrelateResult, CorrelatorOptions, EventCorrelator};
pub use recorder::{EventRecorder, EventType, object_reference};
pub use sink::{ApiEventSink, EventSink, MAX_TRIES_PER_EVENT};
