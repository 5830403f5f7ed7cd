//! The two hand-offs that carry "why" and "who is tracing" without a new argument anywhere:
//! the notification an informer's handler is running for (a thread-local, read by the queue's
//! `add`), and the sync a worker is running (a task-local, read by the sync handler, by the
//! client's writes and by [`note`]).

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::tracer::{Hop, KeyTracer, PendingEcho, SeenEvent, Stage, millis};
use super::trigger::{Trigger, Triggers, seconds};
use crate::small_string::SmallString;

/// The notification an informer is handing to one event handler, while that handler runs.
#[derive(Clone, Debug)]
pub struct Notifying {
    /// What the notification is, as a queue trigger ([`Trigger::Event`]).
    pub trigger: Trigger,
    /// The handler function: `on_add`, `on_update` or `on_delete`.
    pub handler: &'static str,
    /// When the informer delivered it to its store and when the store held it: recorded only
    /// while someone traces (the informer's tracer is active).
    pub times: Option<NotifyTimes>,
}

/// The moments of a notification before its handler ran (see [`Notifying::times`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotifyTimes {
    /// The reflector handed the event (or listed object) to the informer.
    pub received: Instant,
    /// The informer's store held the new state.
    pub stored: Instant,
    /// The handler was called.
    pub handled: Instant,
}

thread_local! {
    static NOTIFYING: RefCell<Option<Notifying>> = const { RefCell::new(None) };
}

/// Restores the thread's previous notification when dropped (also when the handler panics).
struct Restore(Option<Notifying>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        NOTIFYING.with(|n| *n.borrow_mut() = previous);
    }
}

/// Runs `handler` (a synchronous event handler call) with `notifying` as the thread's current
/// notification, so a queue `add` inside it knows why it is called.
pub fn notifying<R>(notifying: Notifying, handler: impl FnOnce() -> R) -> R {
    let previous = NOTIFYING.with(|n| n.borrow_mut().replace(notifying));
    let _restore = Restore(previous);
    handler()
}

/// Calls `f` with the notification being handled on this thread, if any.
pub fn with_notification<R>(f: impl FnOnce(Option<&Notifying>) -> R) -> R {
    NOTIFYING.with(|n| f(n.borrow().as_ref()))
}

/// The trigger a queue `add` made now stands for: the notification being handled, or
/// [`Trigger::Direct`] outside any handler.
pub fn current_trigger() -> Trigger {
    with_notification(|n| n.map_or(Trigger::Direct, |n| n.trigger.clone()))
}

/// The sync a worker is running: what [`current_triggers`], [`note`] and the client's writes
/// read.
#[derive(Clone, Debug)]
pub struct SyncContext {
    /// The controller.
    pub controller: &'static str,
    /// The key being reconciled.
    pub key: SmallString,
    /// Why: what put the key on the queue since the worker last took it.
    pub triggers: Triggers,
    /// The tracer, when a reader traces this key (decided when the sync starts).
    pub tracer: Option<KeyTracer>,
}

impl SyncContext {
    /// Records a hop of this sync's key, when it is traced.
    pub fn hop(&self, stage: Stage, text: impl FnOnce() -> String) {
        if let Some(t) = &self.tracer {
            t.emit(Hop::new(&self.key, Some(self.controller), stage, text()));
        }
    }
}

tokio::task_local! {
    static SYNC: SyncContext;
}

/// Runs `sync` (one `sync_handler` call) with `cx` as its context.
pub async fn in_sync<F: Future>(cx: SyncContext, sync: F) -> F::Output {
    SYNC.scope(cx, sync).await
}

/// Calls `f` with the context of the sync this task runs, if it runs one.
pub fn with_sync<R>(f: impl FnOnce(&SyncContext) -> R) -> Option<R> {
    SYNC.try_with(f).ok()
}

/// Why the sync this task runs was started ([`Triggers`]); empty outside a sync.
pub fn current_triggers() -> Triggers {
    with_sync(|cx| cx.triggers.clone()).unwrap_or_default()
}

/// Whether the sync this task runs is traced (a reader follows its key).
pub fn is_traced() -> bool {
    with_sync(|cx| cx.tracer.is_some()).unwrap_or(false)
}

/// Records what the sync decided, in its own words (a [`Stage::Note`] hop), when its key is
/// traced; `text` is only called then.
pub fn note(text: impl FnOnce() -> String) {
    with_sync(|cx| cx.hop(Stage::Note, text));
}

/// A write the client finished (see `client::Api`): recorded as a [`Stage::Write`] hop of the
/// sync this task runs, when its key is traced, and the write's resourceVersion awaited as an
/// echo in the informers (or, when its watch event came back before the answer, that event
/// recorded as the echo at once). `object` is `namespace/name`; `resource_version` what the
/// server answered with (none for a delete that answered a Status); `sent`: when the request
/// went out.
pub fn record_write(
    verb: &str,
    kind: &'static str,
    object: &str,
    subresource: Option<&str>,
    resource_version: Option<&str>,
    sent: Instant,
) {
    with_sync(|cx| {
        let Some(tracer) = &cx.tracer else {
            return;
        };
        let what = match subresource {
            Some(sub) => format!("{kind} {object} ({sub})"),
            None => format!("{kind} {object}"),
        };
        let answered = Instant::now();
        let took = answered.saturating_duration_since(sent);
        let text = match resource_version {
            Some(rv) => format!("{verb} {what} → rv {rv} (answered in {})", seconds(took)),
            None => format!("{verb} {what} (answered in {})", seconds(took)),
        };
        let mut hop = Hop::new(&cx.key, Some(cx.controller), Stage::Write, text)
            .with("verb", verb)
            .with("kind", kind)
            .with("object", object)
            .with("tookMs", millis(took))
            .at(sent);
        if let Some(sub) = subresource {
            hop = hop.with("subresource", sub);
        }
        let Some(rv) = resource_version else {
            tracer.emit(hop);
            return;
        };
        hop = hop.with("resourceVersion", rv);
        tracer.emit(hop);
        match tracer.take_seen(kind, object, rv) {
            // The watch event beat the answer: the cache held the write before the sync knew.
            Some(seen) => tracer.emit(echo_hop(
                &cx.key,
                Some(cx.controller),
                &seen,
                -millis(answered.saturating_duration_since(seen.stored)),
            )),
            None => tracer.expect_echo(PendingEcho {
                kind,
                object: object.into(),
                resource_version: rv.into(),
                key: cx.key.clone(),
                controller: Some(cx.controller),
                written: answered,
            }),
        }
    });
}

/// The hop of a write's watch echo: `seen` reached the store `lag_ms` after the write's answer
/// (negative: before it).
pub fn echo_hop(key: &str, controller: Option<&'static str>, seen: &SeenEvent, lag_ms: f64) -> Hop {
    let lag = seconds(Duration::from_secs_f64(lag_ms.abs() / 1000.0));
    let when = if lag_ms >= 0.0 {
        format!("{lag} after the write's answer")
    } else {
        format!("{lag} before the write's answer came back")
    };
    Hop::new(
        key,
        controller,
        Stage::Echo,
        format!(
            "{} {} {} rv {}: the write's echo, in the cache {when}",
            seen.event, seen.kind, seen.object, seen.resource_version
        ),
    )
    .with("event", seen.event)
    .with("kind", seen.kind)
    .with("object", seen.object.as_str())
    .with("resourceVersion", seen.resource_version.as_str())
    .with("echoMs", lag_ms)
    .at(seen.stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keytrace::{EventType, TraceFilter};

    #[test]
    fn a_notification_is_current_only_while_its_handler_runs() {
        assert_eq!(current_trigger(), Trigger::Direct);
        let n = Notifying {
            trigger: Trigger::Event {
                event: EventType::Added,
                kind: "At",
                object: "ns/a".into(),
                resource_version: "3".into(),
                traceparent: None,
            },
            handler: "on_add",
            times: None,
        };
        let inside = notifying(n.clone(), current_trigger);
        assert_eq!(inside, n.trigger);
        assert_eq!(current_trigger(), Trigger::Direct);
        let panicked = std::panic::catch_unwind(|| notifying(n, || panic!("a handler bug")));
        assert!(panicked.is_err());
        assert_eq!(current_trigger(), Trigger::Direct, "restored after a panic");
    }

    #[tokio::test]
    async fn a_traced_syncs_writes_and_notes_are_hops_and_echoes_are_awaited() {
        let tracer = KeyTracer::new();
        let mut reader = tracer.subscribe(TraceFilter::key("ns/a")).unwrap();
        let cx = SyncContext {
            controller: "at",
            key: "ns/a".into(),
            triggers: Triggers::one(Trigger::Direct),
            tracer: Some(tracer.clone()),
        };
        in_sync(cx, async {
            assert_eq!(current_triggers().to_string(), "added directly");
            note(|| "PENDING, due in 5s".into());
            record_write(
                "PUT",
                "At",
                "ns/a",
                Some("status"),
                Some("8"),
                Instant::now(),
            );
        })
        .await;
        assert_eq!(reader.next().await.unwrap().text, "PENDING, due in 5s");
        let w = reader.next().await.unwrap();
        assert!(
            w.text
                .starts_with("PUT At ns/a (status) → rv 8 (answered in "),
            "{}",
            w.text
        );
        assert!(tracer.take_echo("At", "ns/a", "8").is_some());
        // Outside a sync nothing is recorded.
        note(|| unreachable!("not called outside a sync"));
        assert!(current_triggers().is_empty());
    }
}
