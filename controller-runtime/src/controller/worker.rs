//! The worker loop: the book's `Run`, `runWorker` and `processNextWorkItem`, for every
//! controller (see the [module documentation](super)).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::contract::{Controller, Operator, QueueKey, RunError, SyncHandler, Workers};
use super::drain_gate::Draining;
use super::stats::{SyncOutcome, SyncStats};
use crate::metrics::ReconcileResult;
use sample_client_go::keytrace::{self, Hop, Stage, SyncContext, Triggers, millis, seconds};
use sample_client_go::workqueue::RateLimitingQueue;

/// How often [`run`] checks whether the informers have synced (client-go's
/// `WaitForCacheSync` polls every 100 ms too).
const CACHE_SYNC_POLL: Duration = Duration::from_millis(100);

/// The book's `Run`, for every operator: waits until [`Workers::has_synced`] (a worker must
/// never act on a partial view of the cluster), then runs `workers` workers with
/// [`run_workers`] until `stop` is cancelled or the queue shuts down. Returns once every
/// worker has finished its current item; [`RunError::CacheSync`] if `stop` came first.
///
/// Unlike client-go's `Run` it does not shut the queue down itself: the manager does, after
/// cancelling `stop`, with a drain (see [`Controller::shut_down_queue`]).
pub async fn run<O: Operator>(
    operator: Arc<O>,
    workers: usize,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let timeout = operator.sync_timeout();
    run_controller(O::NAME, operator, O::workers, workers, timeout, stop).await
}

/// [`run`] for any handler whose [`Workers`] `workers_of` reads: what a [`Builder`](crate::builder::Builder)'s
/// controllers run, whose name is not a constant.
pub async fn run_controller<H: SyncHandler>(
    controller: &'static str,
    handler: Arc<H>,
    workers_of: fn(&H) -> &Workers,
    workers: usize,
    sync_timeout: Duration,
    stop: CancellationToken,
) -> Result<(), RunError> {
    tracing::info!(controller, "waiting for informer caches to sync");
    while !workers_of(&handler).has_synced() {
        tokio::select! {
            _ = stop.cancelled() => return Err(RunError::CacheSync),
            _ = tokio::time::sleep(CACHE_SYNC_POLL) => {}
        }
    }
    tracing::info!(controller, workers, "caches synced; starting workers");
    let w = workers_of(&handler);
    let queue = w.queue().clone();
    let stats = Arc::clone(w.stats());
    let gate = w.drain.clone();
    if let Some(replay) = w.replay.as_ref().filter(|_| queue.is_held()) {
        // Release first: a change after this line is enqueued by its handler, and one
        // before it is in the cache the replay lists.
        queue.release();
        let keys = replay();
        tracing::info!(
            controller,
            objects = keys.len(),
            "enqueueing every cached object"
        );
        for key in keys {
            queue.add(key);
        }
    }
    stats.start_workers(controller, workers);
    let handler = Arc::new(Draining {
        inner: handler,
        gate,
    });
    run_workers(
        controller,
        queue,
        handler,
        workers,
        sync_timeout,
        stats,
        stop,
    )
    .await;
    tracing::info!(controller, "workers stopped");
    Ok(())
}

/// The manager's view of any [`Operator`]: its name, its [`Workers`], [`run`] boxed, and a
/// drain of its queue.
impl<O: Operator> Controller for O {
    fn name(&self) -> &'static str {
        O::NAME
    }

    fn has_synced(&self) -> bool {
        self.workers().has_synced()
    }

    fn run(
        self: Arc<Self>,
        workers: usize,
        stop: CancellationToken,
    ) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move { run(self, workers, stop).await.map_err(|e| e.to_string()) })
    }

    fn shut_down_queue(&self) -> BoxFuture<'static, ()> {
        let queue = self.workers().queue().clone();
        Box::pin(async move { queue.shut_down_with_drain().await })
    }

    fn stats(&self) -> Arc<SyncStats> {
        Arc::clone(self.workers().stats())
    }

    fn queue(&self) -> Option<&RateLimitingQueue<QueueKey>> {
        Some(self.workers().queue())
    }

    fn hold_until_started(&self) {
        self.workers().hold_until_started();
    }
}

/// The book's `processNextWorkItem`: takes one key (with what put it on the queue: its
/// triggers), runs `sync_handler` on it under a deadline and a panic guard, and settles the key
/// with the queue. Returns `None` once the queue is shut down and empty (the worker should
/// end), else the key and how its sync ended.
pub async fn process_next_work_item<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    sync_timeout: Duration,
    stats: &SyncStats,
) -> Option<(QueueKey, SyncOutcome)> {
    let (key, triggers) = queue.get_with_triggers().await?;
    Some(
        process_item(
            controller,
            queue,
            handler,
            key,
            triggers,
            sync_timeout,
            stats,
        )
        .await,
    )
}

/// Everything after the `get`: sync the key, then always `done`.
async fn process_item<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    key: QueueKey,
    triggers: Triggers,
    sync_timeout: Duration,
    stats: &SyncStats,
) -> (QueueKey, SyncOutcome) {
    let _active = ActiveWorker::new(controller, stats);
    let outcome = sync_one(
        controller,
        queue,
        handler,
        &key,
        triggers,
        sync_timeout,
        stats,
    )
    .await;
    // Always: the key may now be handed to a worker again (at once if an event came meanwhile).
    queue.done(&key);
    (key, outcome)
}

/// `controller_runtime_active_workers` + 1 while a worker holds a key (minus 1 on drop, also
/// when the worker's future is dropped mid-sync).
struct ActiveWorker<'a> {
    controller: &'static str,
    stats: &'a SyncStats,
}

impl<'a> ActiveWorker<'a> {
    fn new(controller: &'static str, stats: &'a SyncStats) -> Self {
        stats.with_series(controller, |s| s.add_active_workers(1));
        ActiveWorker { controller, stats }
    }
}

impl Drop for ActiveWorker<'_> {
    fn drop(&mut self) {
        self.stats
            .with_series(self.controller, |s| s.add_active_workers(-1));
    }
}

async fn sync_one<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    queued: &QueueKey,
    triggers: Triggers,
    sync_timeout: Duration,
    stats: &SyncStats,
) -> SyncOutcome {
    let key = queued.as_str();
    let started = tokio::time::Instant::now();
    // Why this sync runs, counted (`controller_reconcile_triggers_total`).
    stats.observe_triggers(controller, &triggers);
    // The sync's span (see the module docs, "Traces"): a root span, parent of the spans of the
    // API requests the handler makes.
    // Its target is the module's (`sample_controller_runtime::controller`), whatever file of
    // the module makes it: the OTLP layer selects `sync` spans by it (`otlp::span_filter`).
    let span = tracing::debug_span!(
        target: "sample_controller_runtime::controller",
        "sync",
        controller,
        key,
        triggers = tracing::field::Empty,
        links = tracing::field::Empty,
        result = tracing::field::Empty,
        requeue = tracing::field::Empty,
        requeue_after_ms = tracing::field::Empty,
    );
    // Formatted only when someone records the span (-v 1 and up, or OTLP export).
    if !span.is_disabled() {
        span.record("triggers", tracing::field::display(&triggers));
        let links: Vec<&str> = triggers.traceparents().collect();
        if !links.is_empty() {
            span.record("links", links.join(",").as_str());
        }
    }
    // The hops of a traced key (see `sample_client_go::keytrace`): decided once, here.
    let tracer = queue
        .key_tracer()
        .filter(|t| t.wants(key, Some(controller)))
        .cloned();
    if let Some(t) = &tracer {
        t.emit(
            Hop::new(
                key,
                Some(controller),
                Stage::Sync,
                format!("sync_handler({key}) starts"),
            )
            .with("action", "start"),
        );
    }
    let context = SyncContext {
        controller,
        key: queued.clone(),
        triggers,
        tracer: tracer.clone(),
    };
    // The handler's future is boxed: a sync's state (an At handler's is 4.7 KiB) then exists
    // only while the sync runs, and an idle worker (32 per controller, most of them idle most
    // of the time) holds a pointer.
    let guarded = AssertUnwindSafe(keytrace::in_sync(
        context,
        tokio::time::timeout(sync_timeout, Box::pin(handler.sync_handler(key))),
    ))
    .catch_unwind()
    .instrument(span.clone())
    .await;
    let took = started.elapsed();
    if let Some(t) = &tracer {
        let (text, result) = match &guarded {
            Ok(Ok(Ok(None))) => (
                "Ok(None): done until the next event; forget".to_owned(),
                "success".to_owned(),
            ),
            Ok(Ok(Ok(Some(after)))) => (
                format!("Ok(Some({})): forget, then add_after({0})", seconds(*after)),
                "requeue_after".to_owned(),
            ),
            Ok(Ok(Err(e))) => (format!("Err: {e}; add_rate_limited"), "error".to_owned()),
            Ok(Err(_)) => (
                "past its deadline; add_rate_limited".to_owned(),
                "timeout".to_owned(),
            ),
            Err(_) => ("panicked; add_rate_limited".to_owned(), "panic".to_owned()),
        };
        let mut hop = Hop::new(
            key,
            Some(controller),
            Stage::Sync,
            format!("sync_handler ends after {}: {text}", seconds(took)),
        )
        .with("action", "end")
        .with("result", result)
        .with("tookMs", millis(took));
        if let Ok(Ok(Ok(Some(after)))) = &guarded {
            hop = hop.with("afterMs", millis(*after));
        }
        if let Ok(Ok(Err(e))) = &guarded {
            hop = hop.with("error", e.to_string());
        }
        t.emit(hop);
    }
    let result = match &guarded {
        Ok(Ok(Ok(None))) => ReconcileResult::Success,
        Ok(Ok(Ok(Some(_)))) => ReconcileResult::RequeueAfter,
        Ok(Ok(Err(_))) | Ok(Err(_)) => ReconcileResult::Error,
        Err(_) => ReconcileResult::Panic,
    };
    span.record("result", result.label());
    span.record("requeue", result != ReconcileResult::Success);
    if let Ok(Ok(Ok(Some(after)))) = &guarded {
        span.record("requeue_after_ms", after.as_millis() as u64);
    }
    stats.observe(controller, took, result);
    let elapsed_ms = took.as_millis() as u64;
    match guarded {
        Ok(Ok(Ok(None))) => {
            // Success: clear the key's failure history so its next failure starts at 5 ms.
            queue.forget(queued);
            tracing::debug!(controller, key, elapsed_ms, "successfully synced");
            SyncOutcome::Synced
        }
        Ok(Ok(Ok(Some(after)))) => {
            stats.requeues_after.fetch_add(1, Ordering::Relaxed);
            queue.forget(queued);
            queue.add_after(queued.clone(), after);
            tracing::debug!(
                controller,
                key,
                elapsed_ms,
                after_ms = after.as_millis() as u64,
                "synced; looking again later"
            );
            SyncOutcome::RequeuedAfter(after)
        }
        Ok(Ok(Err(err))) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            let message = err.to_string();
            queue.add_rate_limited_because(queued.clone(), Some(message.as_str()));
            let retries = queue.num_requeues(queued);
            if H::is_conflict(&err) {
                tracing::info!(
                    controller,
                    key,
                    error = %message,
                    retries,
                    "the object changed while syncing; requeuing to retry with a fresh copy"
                );
            } else {
                tracing::error!(
                    controller,
                    key,
                    error = %message,
                    retries,
                    "error syncing; requeuing for later retry"
                );
                handler.on_sync_error(key, &message);
            }
            SyncOutcome::Failed(message)
        }
        Ok(Err(_elapsed)) => {
            stats.timeouts.fetch_add(1, Ordering::Relaxed);
            queue.add_rate_limited_because(
                queued.clone(),
                Some(format!(
                    "sync exceeded its {} deadline",
                    seconds(sync_timeout)
                )),
            );
            tracing::error!(
                controller,
                key,
                timeout_ms = sync_timeout.as_millis() as u64,
                "sync exceeded its deadline; abandoned and requeued for later retry"
            );
            SyncOutcome::TimedOut
        }
        Err(panic) => {
            stats.panics.fetch_add(1, Ordering::Relaxed);
            let message = panic_message(panic.as_ref());
            queue.add_rate_limited_because(queued.clone(), Some(format!("panic: {message}")));
            tracing::error!(
                controller,
                key,
                panic = %message,
                "sync panicked; the worker carries on and the key is requeued for later retry"
            );
            SyncOutcome::Panicked(message)
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// The book's `runWorker`: calls [`process_next_work_item`] until the queue shuts down or
/// `stop` is cancelled. Cancellation is checked only between items, so a sync in progress
/// always finishes (or hits its deadline) and its key is settled.
pub async fn run_worker<H: SyncHandler>(
    controller: &'static str,
    queue: &RateLimitingQueue<QueueKey>,
    handler: &H,
    sync_timeout: Duration,
    stats: &SyncStats,
    stop: &CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            next = queue.get_with_triggers() => next,
        };
        let Some((key, triggers)) = next else { break };
        process_item(
            controller,
            queue,
            handler,
            key,
            triggers,
            sync_timeout,
            stats,
        )
        .await;
    }
    tracing::debug!(controller, "worker stopped");
}

/// Starts `workers` worker tasks on `queue` and waits until all of them have ended (the queue
/// shut down, or `stop` was cancelled and each finished its current item).
pub async fn run_workers<H: SyncHandler>(
    controller: &'static str,
    queue: RateLimitingQueue<QueueKey>,
    handler: Arc<H>,
    workers: usize,
    sync_timeout: Duration,
    stats: Arc<SyncStats>,
    stop: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let (queue, handler, stats, stop) = (
            queue.clone(),
            Arc::clone(&handler),
            Arc::clone(&stats),
            stop.clone(),
        );
        tasks.spawn(async move {
            run_worker(controller, &queue, &*handler, sync_timeout, &stats, &stop).await;
        });
    }
    tracing::info!(controller, workers, "started workers");
    while let Some(res) = tasks.join_next().await {
        if let Err(e) = res {
            // Panics inside sync_handler are caught in the loop; this is a bug in the loop.
            tracing::error!(controller, error = %e, "worker task ended abnormally");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::SyncStatsSnapshot;
    use sample_client_go::cache::InformerError;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// A scripted handler: each key has a queue of behaviours, one per call.
    #[derive(Default)]
    struct Script {
        steps: Mutex<HashMap<String, Vec<Step>>>,
        calls: Mutex<Vec<String>>,
    }

    #[derive(Clone)]
    enum Step {
        Ok,
        After(Duration),
        Err,
        Panic,
        Hang,
    }

    impl Script {
        fn with(steps: &[(&str, Vec<Step>)]) -> Self {
            Script {
                steps: Mutex::new(
                    steps
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.iter().rev().cloned().collect()))
                        .collect(),
                ),
                calls: Mutex::default(),
            }
        }
    }

    impl SyncHandler for Script {
        type Error = String;
        async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, String> {
            self.calls.lock().unwrap().push(key.to_string());
            let step = self
                .steps
                .lock()
                .unwrap()
                .get_mut(key)
                .and_then(|v| v.pop())
                .unwrap_or(Step::Ok);
            match step {
                Step::Ok => Ok(None),
                Step::After(d) => Ok(Some(d)),
                Step::Err => Err(format!("{key} failed")),
                Step::Panic => panic!("boom in {key}"),
                Step::Hang => std::future::pending().await,
            }
        }
    }

    async fn next(
        q: &RateLimitingQueue<QueueKey>,
        h: &Script,
        stats: &SyncStats,
    ) -> (QueueKey, SyncOutcome) {
        process_next_work_item("test", q, h, Duration::from_secs(5), stats)
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn three_branches_and_always_done() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[(
            "ns/a",
            vec![
                Step::Err,
                Step::Err,
                Step::After(Duration::from_secs(30)),
                Step::Ok,
            ],
        )]);
        let stats = SyncStats::default();
        q.add("ns/a".into());

        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Failed("ns/a failed".into()));
        assert_eq!(q.num_requeues(&"ns/a".into()), 1);
        assert_eq!(q.processing_len(), 0, "done was called");

        let t0 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert!(matches!(o, SyncOutcome::Failed(_)));
        assert_eq!(
            t0.elapsed(),
            Duration::from_millis(5),
            "first backoff is 5 ms"
        );
        assert_eq!(q.num_requeues(&"ns/a".into()), 2);

        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::RequeuedAfter(Duration::from_secs(30)));
        assert_eq!(
            q.num_requeues(&"ns/a".into()),
            0,
            "a deferral forgets earlier failures (cnat did not)"
        );
        let t1 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(
            t1.elapsed(),
            Duration::from_secs(30),
            "requeued exactly after d"
        );
        assert_eq!(q.len() + q.waiting_len(), 0);
        assert_eq!(
            stats.snapshot(),
            SyncStatsSnapshot {
                syncs: 4,
                errors: 2,
                panics: 0,
                timeouts: 0,
                requeues_after: 1
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_is_caught_counted_and_retried_with_backoff() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[("ns/p", vec![Step::Panic, Step::Panic, Step::Ok])]);
        let stats = SyncStats::default();
        q.add("ns/p".into());
        q.add("ns/other".into());
        let (k, o) = next(&q, &h, &stats).await;
        assert_eq!(k, "ns/p");
        assert_eq!(o, SyncOutcome::Panicked("boom in ns/p".into()));
        let (k, o) = next(&q, &h, &stats).await;
        assert_eq!((k.as_str(), o), ("ns/other", SyncOutcome::Synced));
        let (_, o) = next(&q, &h, &stats).await;
        assert!(matches!(o, SyncOutcome::Panicked(_)));
        assert_eq!(q.num_requeues(&"ns/p".into()), 2);
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(stats.snapshot().panics, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_sync_hits_its_deadline() {
        let q = RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Script::with(&[("ns/h", vec![Step::Hang, Step::Ok])]);
        let stats = SyncStats::default();
        q.add("ns/h".into());
        let t0 = tokio::time::Instant::now();
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::TimedOut);
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
        assert_eq!(q.processing_len(), 0);
        let (_, o) = next(&q, &h, &stats).await;
        assert_eq!(o, SyncOutcome::Synced);
        assert_eq!(stats.snapshot().timeouts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn workers_stop_on_cancel_and_on_shutdown() {
        let q: RateLimitingQueue<QueueKey> =
            RateLimitingQueue::with_default_controller_rate_limiter();
        let h = Arc::new(Script::default());
        let stats = Arc::new(SyncStats::default());
        let stop = CancellationToken::new();
        for i in 0..10 {
            q.add(format!("ns/{i}").into());
        }
        let run = tokio::spawn(run_workers(
            "test",
            q.clone(),
            Arc::clone(&h),
            3,
            Duration::from_secs(5),
            Arc::clone(&stats),
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(stats.snapshot().syncs, 10);
        stop.cancel();
        run.await.unwrap();
        // After cancel, new work is not taken.
        q.add("ns/late".into());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(stats.snapshot().syncs, 10);
        assert_eq!(q.len(), 1);

        // A shut-down queue also ends the workers.
        let run = tokio::spawn(run_workers(
            "test",
            q.clone(),
            Arc::clone(&h),
            2,
            Duration::from_secs(5),
            Arc::clone(&stats),
            CancellationToken::new(),
        ));
        tokio::time::sleep(Duration::from_millis(1)).await;
        q.shut_down_with_drain().await;
        run.await.unwrap();
        assert_eq!(stats.snapshot().syncs, 11);
    }

    /// The smallest [`Operator`]: the scripted handler, gated by one ConfigMap informer.
    struct Op {
        script: Script,
        workers: Workers,
    }

    impl SyncHandler for Op {
        type Error = String;
        async fn sync_handler(&self, key: &str) -> Result<Option<Duration>, String> {
            self.script.sync_handler(key).await
        }
    }

    impl Operator for Op {
        const NAME: &'static str = "op";
        fn workers(&self) -> &Workers {
            &self.workers
        }
    }

    /// An operator whose one handler is registered on an informer over an in-memory source
    /// holding one ConfigMap, with the key `ns/a` already queued.
    fn operator() -> (
        Arc<Op>,
        sample_client_go::cache::SharedIndexInformer<k8s_openapi::api::core::v1::ConfigMap>,
    ) {
        use k8s_openapi::api::core::v1::ConfigMap;
        use sample_client_go::cache::testing::{FakeListerWatcher, meta};
        use sample_client_go::cache::{EventHandlerFns, InformerOptions, SharedIndexInformer};
        let server = FakeListerWatcher::<ConfigMap>::new();
        server.upsert(ConfigMap {
            metadata: meta("ns", "a", &[]),
            ..ConfigMap::default()
        });
        let informer = SharedIndexInformer::new(server, InformerOptions::default());
        let registration = informer
            .add_event_handler(EventHandlerFns::<ConfigMap>::new())
            .unwrap();
        let queue = RateLimitingQueue::with_default_controller_rate_limiter();
        queue.add("ns/a".into());
        let op = Op {
            script: Script::default(),
            workers: Workers::new(queue, SyncStats::default(), vec![registration]),
        };
        (Arc::new(op), informer)
    }

    #[tokio::test(start_paused = true)]
    async fn run_never_starts_workers_before_the_caches_sync() {
        let (op, _informer_never_run) = operator();
        let stop = CancellationToken::new();
        let running = tokio::spawn(run(Arc::clone(&op), 2, stop.clone()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!Controller::has_synced(&*op));
        assert_eq!(
            op.script.calls.lock().unwrap().len(),
            0,
            "no sync on a partial view"
        );
        stop.cancel();
        let err = running.await.unwrap().unwrap_err();
        assert!(matches!(err, RunError::CacheSync));
        assert_eq!(err.to_string(), "failed to wait for caches to sync");
    }

    #[tokio::test(start_paused = true)]
    async fn run_starts_the_workers_once_synced_and_the_manager_sees_it_as_a_controller() {
        let (op, informer) = operator();
        let informer_stop = CancellationToken::new();
        let informer_task = tokio::spawn({
            let (informer, stop) = (informer.clone(), informer_stop.clone());
            async move { informer.run(stop).await }
        });
        let controller: Arc<dyn Controller> = op.clone();
        assert_eq!(controller.name(), "op");
        let stop = CancellationToken::new();
        let running = tokio::spawn(Arc::clone(&controller).run(1, stop.clone()));
        for _ in 0..1000 {
            if controller.stats().snapshot().syncs > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(controller.has_synced());
        assert_eq!(*op.script.calls.lock().unwrap(), vec!["ns/a".to_string()]);
        stop.cancel();
        assert_eq!(running.await.unwrap(), Ok(()));
        controller.shut_down_queue().await;
        assert!(op.workers().queue().shutting_down());
        informer_stop.cancel();
        informer_task.await.unwrap();
    }

    #[test]
    fn an_informer_error_names_the_controller() {
        let err = RunError::informer::<Op>(InformerError::Stopped);
        assert_eq!(
            err.to_string(),
            "registering the op controller's event handlers: \
             handler was not added to shared informer because it has stopped already"
        );
    }
}
