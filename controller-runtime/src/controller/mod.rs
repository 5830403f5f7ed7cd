//! # The worker loop every controller shares
//!
//! A controller is written the way sample-controller's `controller.go` reads: the struct, the
//! constructor that wires informers to event handlers, `run`, and `sync_handler` (the five
//! operators of `sample-operators` are such structs; [`crate::builder`] writes one for you).
//! What every controller shares lives here: the **worker loop** that turns the work queue into
//! calls of `sync_handler`, exactly as the book draws it:
//!
//! ```text
//! informer handlers ──key──▶ RateLimitingQueue ──get──▶ worker ──▶ sync_handler(key)
//!                                 ▲                                    │
//!                                 │  Err(e)       → add_rate_limited   │ (backoff 5 ms … 1000 s)
//!                                 ├─ Ok(Some(d))  → forget + add_after │ (look again at a set time)
//!                                 └─ Ok(None)     → forget             │ (done: clear failures)
//!                                      and always → done(key) ◀────────┘
//! ```
//!
//! [`process_next_work_item`] is the book's `processNextWorkItem` with its three branches, plus
//! what a production controller needs and the book leaves out:
//!
//! * **Panics are caught.** A panic inside `sync_handler` (a bug, or an unexpected object) is
//!   caught at the worker, counted in [`SyncStats::panics`], logged with the key, and the key is
//!   retried with backoff like any error. The process and the other keys carry on; client-go
//!   relies on `HandleCrash`, which by default re-panics and kills the process.
//! * **A per-sync deadline.** A sync that hangs (a request with no timeout, a deadlock) would
//!   hold its key and its worker for ever. The sync runs under `tokio::time::timeout`; past the
//!   deadline it is dropped, counted in [`SyncStats::timeouts`], and retried with backoff.
//! * **`forget` before `add_after`.** cnat's loop deferred a key with `AddAfter` without
//!   `Forget`, so earlier failures kept inflating the next backoff; here any success clears the
//!   failure history, and the deferral is a plain timer.
//!
//! Workers stop taking new work when the manager's shutdown token is cancelled; the manager
//! then calls `shut_down_with_drain` on the queue, which waits for the keys still processing.
//!
//! ## Traces
//!
//! Every sync runs inside a `tracing` span, and every request an [`Api`](sample_client_go::client::Api)
//! sends runs inside a child span of whatever span is current, so a sync's API calls nest under
//! it:
//!
//! | span | level | parent | fields |
//! |---|---|---|---|
//! | `sync` | debug | none (a root: one trace per sync) | `controller` (`at`, `tdset`, ...), `key` (`ns/name`), `triggers` (why it runs: see below), `links` (the `traceparent`s of its triggers' objects: span links over OTLP, see [`crate::otlp`]), `result` (`success`, `requeue_after`, `error`: the `controller_runtime_reconcile_total` label), `requeue` (the key went back on the queue: after a time or rate-limited), `requeue_after_ms` (with `requeue_after`) |
//! | `request` | debug | the current span (a `sync`'s) | `verb` (HTTP method), `resource` (plural), `subresource` (`status`, `scale` or empty), `code` (the HTTP status of the final answer, retries included), `error` (when no answer came) |
//!
//! They are `debug` spans: at `-v 0` no subscriber enables them and they cost a disabled-span
//! check; from `-v 1` on the log lines written inside a sync carry its context
//! (`sync{controller="at" key="default/example-at"}:request{verb=PUT ...}`). Watches are not
//! spanned (they outlive any sync). With `--otlp-endpoint` both are exported over OTLP/HTTP
//! ([`crate::otlp`]), whatever `-v`.
//!
//! ## Why a sync runs
//!
//! The queue hands each key to a worker with its triggers (see [`sample_client_go::keytrace`]):
//! the informer events whose handlers added it (`MODIFIED Pod default/x-pod rv 42`, an owned
//! object naming itself while the key is its owner), an `add_after` that came due, a
//! rate-limited retry (`rate-limited retry 2 after: <the error>`), a resync, the initial list.
//! The worker
//!
//! * counts each distinct trigger in `controller_reconcile_triggers_total{controller,trigger}`
//!   (`trigger`: `added`, `modified`, `deleted`, `resync`, `initial_list`, `relist`, `timer`,
//!   `retry`, `direct`);
//! * records them in the `sync` span's `triggers` field, so every log line written inside the
//!   sync carries them from `-v 1` on;
//! * runs `sync_handler` with them as its context: no operator signature changes, and a
//!   handler that wants them reads [`current_triggers`]; [`note`] adds what the sync decided to
//!   a trace of its key (the At's plan), at no cost when no one traces.
//!
//! With a reader on the manager's `/trace` ([`crate::machinery`]), the worker also records the
//! hops `get` (how long the key waited), `sync_handler` start and end (its result, and what the
//! queue does with the key), and the client records each write of the sync.
//!
//! ## What an operator writes, and what it gets
//!
//! Everything around `sync_handler` is the same in every `controller.go`: `Run` waits for the
//! informer caches, then starts the workers; the manager asks each controller its name, whether
//! it has synced, and to drain its queue. Here an operator writes only what is its own:
//!
//! ```text
//! impl SyncHandler for XController   sync_handler(key): the reconcile logic (+ is_conflict)
//! impl Operator for XController      NAME, and its Workers: the queue, the counters, and the
//!                                    handler registrations that say its caches have synced
//! ```
//!
//! and receives the rest once, for all operators: [`run`] (the book's `Run`: wait for caches,
//! then [`run_workers`]), and [`Controller`], the object-safe face the manager holds as
//! `Arc<dyn Controller>`, implemented for every [`Operator`] by one blanket `impl`. A new
//! operator is therefore a struct, a constructor that wires informers to its queue, these
//! two small impls, and a [`Registration`](crate::manager::Registration) the manager runs (its
//! name, how the manager builds it, its CRD and the start-up check of that CRD);
//! `sample_operators::controllers::myapp` is the smallest complete one, and
//! [`Builder`](crate::builder::Builder) writes all of it for the common case.
//!
//! Every `sync_handler` starts the same way too, with [`object_to_sync`]: the object its key
//! names, from the operator's lister, or nothing to do (deleted since it was queued, its
//! [`Expectations`] forgotten). An object the sharder drains from this shard never reaches it:
//! the worker releases it instead ([`Workers::release_drained`]).
//!
//! Other shared pieces: [`Clock`] (wall-clock time that follows tokio's paused clock),
//! [`Expectations`] ("I created this; the lister has not seen it yet"), and [`crate::ownership`]
//! (owner references, `handleObject`, drift, and the error type of the operators that own
//! objects).

//!
//! ## The files
//!
//! | file | what it holds |
//! |---|---|
//! | `contract.rs` | what an operator implements and hands over: [`SyncHandler`], [`Operator`], [`Workers`], [`object_to_sync`], and the manager's face of a controller, [`Controller`] |
//! | `stats.rs` | the worker loop's counters ([`SyncStats`]) and how one sync ended ([`SyncOutcome`]) |
//! | `drain_gate.rs` | the sharding step in front of every sync ([`DrainGate`], [`Draining`]) |
//! | `worker.rs` | the loop itself: [`run`], [`run_workers`], [`run_worker`], [`process_next_work_item`] |

mod contract;
mod drain_gate;
mod stats;
mod worker;

pub use crate::expectations::Expectations;
/// The wall clock that follows tokio's clock (`apimachinery::clock`), re-exported for the
/// operators' schedules.
pub use apimachinery::clock::Clock;
pub use contract::{
    Controller, DEFAULT_SYNC_TIMEOUT, Operator, QueueKey, REASON_RECONCILIATION_FAILED, RunError,
    SyncHandler, Workers, object_to_sync, record_reconcile_error,
};
pub use drain_gate::{DrainGate, DrainedOr, Draining};
/// Why the sync this task runs was started, and a way to say what it decided in a trace: see
/// "Why a sync runs" above.
pub use sample_client_go::keytrace::{Trigger, Triggers, current_triggers, note};
pub use stats::{SyncOutcome, SyncStats, SyncStatsSnapshot};
pub use worker::{process_next_work_item, run, run_controller, run_worker, run_workers};
