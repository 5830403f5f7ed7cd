//! # Following one key: why each reconcile ran, and every hop it took
//!
//! The book draws the machinery as boxes and arrows: the reflector, the store, the event
//! handlers, the work queue, the workers, `syncHandler`. This module lets a reader watch one key
//! travel through those boxes while it happens, and tells every reconcile why it runs. Nothing
//! is reconstructed afterwards from logs or events: each box records its own step.
//!
//! ## Why a reconcile ran: [`Trigger`]s
//!
//! A work queue collapses ten adds of a key into one reconcile; client-go then forgets who
//! asked. Here the queue keeps, beside each waiting key, what put it there, collapsed the same
//! way and bounded ([`Triggers`], at most [`MAX_TRIGGERS_PER_KEY`] distinct ones):
//!
//! | trigger | recorded by | text |
//! |---|---|---|
//! | [`Trigger::Event`] | the queue's `add`, inside an informer's event handler | `MODIFIED Pod default/example-at-pod rv 812` (an owned object names itself; the key is its owner) |
//! | [`Trigger::Timer`] | the delaying queue, when an `add_after` comes due | `add_after(4.99s) came due` |
//! | [`Trigger::Retry`] | the rate-limiting queue, when a backoff ends | `rate-limited retry 2 after: creating pod ...: 503` |
//! | [`Trigger::Direct`] | an `add` outside any handler | `added directly` |
//!
//! How an `add` knows the event without a new argument: the informer runs each handler call
//! inside [`notifying`], which makes the notification (its type, the object's kind, key and
//! resourceVersion) the thread's current one for the length of that synchronous call; the
//! queue's `add` reads it ([`current_trigger`]). Handlers stay what client-go's are: functions
//! that enqueue a key.
//!
//! When a worker takes the key (`get_with_triggers`), the triggers leave the queue with it;
//! the worker runs `sync_handler` inside [`in_sync`], so the handler (and anything it calls)
//! can read them ([`current_triggers`]), and the worker logs them in the sync's span and counts
//! them (`controller_reconcile_triggers_total{controller,trigger}`). Adds that arrive while the
//! key is being processed start the next round's triggers.
//!
//! ## Every hop, with its time: [`KeyTracer`]
//!
//! A [`KeyTracer`] belongs to one manager. A reader [`subscribe`](KeyTracer::subscribe)s to a
//! key; from then on every box records a [`Hop`] of that key with the moment it happened:
//!
//! ```text
//! watch      the reflector delivered ADDED/MODIFIED/DELETED (or a listed object, a resync)
//! store      the informer's store held it
//! handler    on_add/on_update/on_delete turned it into the key (an owned object: its owner)
//! queue      add (and whether it collapsed into a waiting add), add_after, add_rate_limited,
//!            a timer that came due, done
//! worker     a worker took the key: how long it waited, and why (its triggers)
//! sync       sync_handler started / ended, with its result
//! note       what the sync decided, in the operator's words (the At's plan)
//! write      each API write of the sync, with the resourceVersion it produced
//! echo       that write's own watch event back in the cache, and after how long
//! ```
//!
//! **No cost when no one reads.** Every recording site first asks the tracer whether anyone
//! reads ([`KeyTracer::is_active`], one relaxed atomic load) and does nothing else when not:
//! no clock read, no allocation, no lock. While someone reads, the informers stamp each
//! notification with two clock reads (they cannot know yet which key a pod's event will map
//! to), and the other sites check the key against the readers' ([`KeyTracer::wants`]).
//!
//! **In order.** Hops are recorded by the tasks that make them, and a notification's watch,
//! store and handler hops only when its handler adds a key (an informer cannot know before
//! which key a pod's event maps to), stamped with the earlier moments they stand for. A reader
//! that wants them in the order they happened reads [`Subscription::next_in_order`], which
//! holds each hop for [`REORDER_WINDOW`]; the manager's `/trace` stream does.
//!
//! **Bounded.** At most [`MAX_READERS`] readers at once; each has a buffer of
//! [`READER_BUFFER`] hops, and a hop that finds it full is dropped and counted
//! ([`Subscription::lost`]): a slow reader loses hops, never slows a controller. Writes whose
//! echo is awaited are bounded too ([`MAX_PENDING_ECHOES`], forgotten after [`ECHO_WAIT`]).
//!
//! ## The JSON form
//!
//! [`Hop::to_json`] is one line of the manager's `/trace` stream: `seq` (the tracer's order),
//! `time` (wall clock, RFC 3339), `elapsedMs` (since the reader subscribed), `key`,
//! `controller`, `stage` (the names above), `text` (the printed line), and per stage the
//! fields a program needs (`event`, `kind`, `object`, `resourceVersion`, `waitedMs`,
//! `tookMs`, `afterMs`, `depth`, `triggers`, `result`, `error`, `verb`, `echoMs`, ...).
//!
//! ## Mirrors
//!
//! Nothing in client-go: controller-runtime and kube-rs users asked for "which event triggered
//! this reconcile" and did not get it, and KEP-5915 proposes carrying a W3C trace context on
//! objects across these asynchronous hops ([`TRACEPARENT_ANNOTATION`]: a trigger whose object
//! carries one keeps it, and the reconcile's span links to it).

mod scope;
mod tracer;
mod trigger;

pub use scope::{
    NotifyTimes, Notifying, SyncContext, current_trigger, current_triggers, echo_hop, in_sync,
    is_traced, note, notifying, record_write, with_notification, with_sync,
};
pub use tracer::{
    ECHO_WAIT, Hop, KeyTracer, MAX_PENDING_ECHOES, MAX_READERS, PendingEcho, READER_BUFFER,
    RECENT_EVENTS, REORDER_WINDOW, SeenEvent, Stage, Subscription, TooManyReaders, TraceFilter,
    millis,
};
pub use trigger::{
    Counted, EventType, MAX_TRIGGERS_PER_KEY, TRACEPARENT_ANNOTATION, Trigger, Triggers, seconds,
};
