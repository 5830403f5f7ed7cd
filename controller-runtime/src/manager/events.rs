//! # The event sink: recorded events written to the API server
//!
//! The [`EventBroadcaster`](sample_client_go::record::EventBroadcaster) decides *what* to write (the spam
//! filter and the correlator fold repeats into a count); [`EventApiSink`] is the one piece that
//! writes: a `POST` of a new core/v1 Event, or a strategic-merge `PATCH` that bumps the count of
//! one seen before, as client-go's `EventSinkImpl` does. It is client-go's
//! [`ApiEventSink`](sample_client_go::record::ApiEventSink) under the name the manager has
//! always given it; the manager hands it a client with a throttle of its own
//! ([`Client::with_own_throttle`](sample_client_go::client::Client::with_own_throttle)), so events
//! never queue behind work.

pub use sample_client_go::record::ApiEventSink as EventApiSink;
