//! Reflector behaviour against the in-memory fake lister-watcher (`cache::testing`), on tokio's
//! paused clock: the exact requests client-go's reflector sends (first list at RV "0" paged by
//! 500, relist at the last RV, "" after an expired list, watch parameters), how each way a
//! watch can end is handled (reference test vectors 7 and 8), streaming lists and their
//! fallback, and the backoff schedule.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use sample_client_go::cache::reflector::{Backoff, BackoffConfig, DEFAULT_PAGE_SIZE};
use sample_client_go::cache::testing::{FakeListerWatcher, Request, meta};
use sample_client_go::cache::{Indexer, Reflector, ReflectorConfig, key_of};
use sample_client_go::client::{
    Bookmark, Error, ListParams, TransportError, TransportKind, WatchEvent, WatchParams,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        metadata: meta(ns, name, &[("app", "web")]),
        ..Default::default()
    }
}

type TestReflector = Reflector<Pod, FakeListerWatcher<Pod>, Indexer<Pod>>;

struct Harness {
    fake: FakeListerWatcher<Pod>,
    store: Indexer<Pod>,
    reflector: Arc<TestReflector>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

fn start(fake: &FakeListerWatcher<Pod>, config: ReflectorConfig) -> Harness {
    let store = Indexer::new();
    let reflector = Arc::new(Reflector::new(fake.clone(), store.clone(), config));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, c) = (Arc::clone(&reflector), cancel.clone());
        async move { r.run(c).await }
    });
    Harness {
        fake: fake.clone(),
        store,
        reflector,
        cancel,
        task,
    }
}

fn list_watch() -> ReflectorConfig {
    ReflectorConfig {
        streaming_list: false,
        ..Default::default()
    }
}

/// Lets virtual time pass in small steps until `cond` holds (at most ten virtual minutes).
use crate::support::eventually;

use crate::support::yield_to_tasks;

fn lists(reqs: &[Request]) -> Vec<ListParams> {
    reqs.iter()
        .filter_map(|r| match r {
            Request::List(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

fn watches(reqs: &[Request]) -> Vec<WatchParams> {
    reqs.iter()
        .filter_map(|r| match r {
            Request::Watch(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

fn store_rvs(store: &Indexer<Pod>) -> Vec<(String, String)> {
    let mut v: Vec<_> = store
        .list()
        .iter()
        .map(|p| {
            (
                key_of(p.as_ref()),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

fn truth(fake: &FakeListerWatcher<Pod>) -> Vec<(String, String)> {
    let mut v: Vec<_> = fake
        .objects()
        .iter()
        .map(|p| {
            (
                key_of(p),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    v
}

impl Harness {
    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn first_list_is_rv0_paged_then_watch_from_the_list_rv() {
    let fake = FakeListerWatcher::new();
    for i in 0..3 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    let h = start(&fake, list_watch());
    eventually("synced and watching", || fake.open_watches() == 1).await;
    let reqs = fake.requests();
    let l = lists(&reqs);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].resource_version.as_deref(), Some("0"));
    assert_eq!(l[0].limit, Some(DEFAULT_PAGE_SIZE));
    let w = watches(&reqs);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].resource_version.as_deref(), Some("4"));
    assert!(w[0].allow_watch_bookmarks);
    assert!(!w[0].send_initial_events);
    let t = w[0].timeout_seconds.unwrap();
    assert!((300..600).contains(&t), "timeout {t}");
    assert_eq!(store_rvs(&h.store), truth(&fake));
    assert_eq!(h.reflector.last_synced_resource_version(), "4");

    // Live events reach the store and advance the RV; bookmarks advance it too.
    fake.upsert(pod("ns", "p3"));
    assert!(fake.delete("ns/p0"));
    fake.send_raw(WatchEvent::Bookmark(Bookmark {
        resource_version: "42".into(),
        initial_events_end: false,
    }));
    eventually("events applied", || {
        h.reflector.last_synced_resource_version() == "42"
    })
    .await;
    assert_eq!(store_rvs(&h.store), truth(&fake));
    let stats = h.reflector.status().snapshot();
    assert_eq!((stats.lists, stats.watches, stats.errors), (1, 1, 0));
    assert!(stats.synced && stats.last_event.is_some());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn paged_first_list_keeps_pages_on_relist() {
    let fake = FakeListerWatcher::new();
    for i in 0..1_201 {
        fake.upsert(pod("ns", &format!("p{i:04}")));
    }
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    let l = lists(&fake.requests());
    assert_eq!(l.len(), 3, "1201 objects in pages of 500");
    assert_eq!(l[0].continue_token, None);
    for page in &l[1..] {
        assert!(page.continue_token.is_some());
        assert_eq!(
            page.resource_version, None,
            "continuation pages clear the RV"
        );
        assert_eq!(page.limit, Some(500));
    }
    assert_eq!(h.store.len(), 1_201);
    assert_eq!(
        h.reflector.status().snapshot().lists,
        1,
        "one list, three pages"
    );

    // 410 on the watch: the relist keeps limit=500 because the RV="0" list was paginated.
    fake.clear_requests();
    fake.error_watches(Error::status(
        410,
        "Expired",
        "too old resource version: 1 (2)",
    ));
    eventually("relisted", || !lists(&fake.requests()).is_empty()).await;
    let l = lists(&fake.requests());
    assert_eq!(l[0].resource_version.as_deref(), Some("1202"));
    assert_eq!(l[0].limit, Some(500));
    h.stop().await;
}

/// Reference test vector 7.
#[tokio::test(start_paused = true)]
async fn watch_410_relists_at_last_rv_unpaged_then_from_storage() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    fake.upsert(pod("ns", "b")); // RV 3, seen on the watch
    eventually("rv 3", || h.reflector.last_synced_resource_version() == "3").await;
    fake.clear_requests();
    let failed_at = Instant::now();
    fake.fail_next_list(Error::status(410, "Expired", "too old resource version"));
    fake.error_watches(Error::status(
        410,
        "Expired",
        "too old resource version: 3 (9)",
    ));
    eventually("relisted twice", || lists(&fake.requests()).len() == 2).await;
    let log = fake.request_log();
    let (first_at, first) = &log[0];
    let Request::List(first) = first else {
        panic!("expected a list first, got {first:?}")
    };
    // After one backoff step (800 ms with jitter in [0.8, 1.6) s) ... `failed_at` is taken
    // before the watch sees its error, and on a loaded machine the paused clock can move on by a
    // few of the test's 10 ms polls in between, so the upper bound allows 100 ms for that.
    let waited = *first_at - failed_at;
    assert!(
        waited >= Duration::from_millis(800) && waited < Duration::from_millis(1700),
        "relist after {waited:?}"
    );
    // ... at the last RV, without a limit (the first list was not paginated) ...
    assert_eq!(first.resource_version.as_deref(), Some("3"));
    assert_eq!(first.limit, None);
    // ... and when that expires too, at once from storage with limit=500.
    let (second_at, Request::List(second)) = &log[1] else {
        panic!("expected a second list, got {:?}", log[1])
    };
    assert_eq!(second_at, first_at, "the retry at \"\" is immediate");
    assert_eq!(second.resource_version, None);
    assert_eq!(second.limit, Some(500));
    let stats = h.reflector.status().snapshot();
    assert_eq!(stats.expired, 2);
    assert_eq!(stats.errors, 1);
    eventually("watching again", || fake.open_watches() == 1).await;
    assert_eq!(store_rvs(&h.store), truth(&fake));
    h.stop().await;
}

/// Reference test vector 8.
#[tokio::test(start_paused = true)]
async fn connection_refused_on_watch_rewatches_after_backoff_without_relist() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    fake.clear_requests();
    fake.fail_next_watch(Error::Transport(TransportError::new(
        TransportKind::ConnectionRefused,
        "GET /api/v1/pods?watch=true",
        "tcp connect error: Connection refused (os error 111)",
    )));
    fake.fail_next_watch(Error::status(429, "TooManyRequests", "slow down"));
    let closed_at = Instant::now();
    // A clean close after more than a second is not "very short": re-watch at once.
    tokio::time::advance(Duration::from_secs(2)).await;
    fake.close_watches();
    eventually("watching again", || fake.open_watches() == 1).await;
    let log = fake.request_log();
    assert!(lists(&fake.requests()).is_empty(), "no relist: {log:?}");
    assert_eq!(log.len(), 3, "refused, 429, then success: {log:?}");
    for (_, r) in &log {
        let Request::Watch(w) = r else { unreachable!() };
        assert_eq!(w.resource_version.as_deref(), Some("2"));
    }
    assert_eq!(
        log[0].0 - closed_at,
        Duration::from_secs(2),
        "first re-watch at once"
    );
    let first_gap = log[1].0 - log[0].0;
    assert!(
        first_gap >= Duration::from_millis(800) && first_gap < Duration::from_millis(1600),
        "{first_gap:?}"
    );
    let second_gap = log[2].0 - log[1].0;
    assert!(
        second_gap >= Duration::from_millis(1600) && second_gap < Duration::from_millis(3200),
        "{second_gap:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn clean_close_resumes_from_last_rv_and_sees_missed_events() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    fake.upsert(pod("ns", "b"));
    eventually("rv 3", || h.reflector.last_synced_resource_version() == "3").await;
    tokio::time::advance(Duration::from_secs(5)).await;
    fake.close_watches();
    // Changes while no watch is open are replayed from history by the next watch.
    fake.upsert(pod("ns", "c"));
    fake.delete("ns/a");
    eventually("converged", || store_rvs(&h.store) == truth(&fake)).await;
    let reqs = fake.requests();
    assert_eq!(lists(&reqs).len(), 1, "a clean close never relists");
    assert_eq!(watches(&reqs)[1].resource_version.as_deref(), Some("3"));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn connection_reset_mid_stream_resumes_without_relist() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    fake.upsert(pod("ns", "b"));
    eventually("rv 3", || h.reflector.last_synced_resource_version() == "3").await;
    fake.break_watches(Error::Transport(TransportError::new(
        TransportKind::ConnectionClosed,
        "reading watch stream",
        "connection reset by peer",
    )));
    eventually("watching again", || watches(&fake.requests()).len() == 2).await;
    assert_eq!(lists(&fake.requests()).len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn very_short_watch_and_decode_errors_relist_after_backoff() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    // Closed at once with no events: "very short watch" → error → backoff → relist.
    fake.close_watches();
    eventually("relisted", || lists(&fake.requests()).len() == 2).await;
    eventually("watching", || fake.open_watches() == 1).await;
    // A stream that cannot be decoded ends the cycle too.
    fake.break_watches(Error::Other("decoding watch event: expected value".into()));
    eventually("relisted again", || lists(&fake.requests()).len() == 3).await;
    assert_eq!(h.reflector.status().snapshot().errors, 2);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn list_errors_back_off_and_retry() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    for _ in 0..3 {
        fake.fail_next_list(Error::status(500, "InternalError", "etcd is sad"));
    }
    let began = Instant::now();
    let h = start(&fake, list_watch());
    eventually("synced", || h.store.len() == 1).await;
    let log = fake.request_log();
    assert_eq!(lists(&fake.requests()).len(), 4);
    // Three backoff steps: [0.8,1.6) + [1.6,3.2) + [3.2,6.4) seconds.
    let waited = log[3].0 - began;
    assert!(
        waited >= Duration::from_millis(5600) && waited < Duration::from_millis(11200),
        "{waited:?}"
    );
    // Every retry is still a first list (RV "0"): nothing was synced yet.
    assert!(
        lists(&fake.requests())
            .iter()
            .all(|l| l.resource_version.as_deref() == Some("0"))
    );
    assert_eq!(h.reflector.status().snapshot().errors, 3);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn too_large_rv_and_expired_continue_are_recovered() {
    let fake = FakeListerWatcher::new();
    for i in 0..5 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    // An explicit page size of 2: the second page's token expires, so the pager falls back
    // to one unpaged list at the original RV.
    let h = start(
        &fake,
        ReflectorConfig {
            page_size: Some(2),
            ..list_watch()
        },
    );
    eventually("watching", || fake.open_watches() == 1).await;
    assert_eq!(h.store.len(), 5);
    fake.clear_requests();
    // Relist at RV 6 which this (restarted, say) server has not reached: too large → "".
    h.fake.fail_next_list(too_large());
    h.fake
        .error_watches(Error::status(500, "InternalError", "boom"));
    eventually("relisted", || lists(&fake.requests()).len() >= 2).await;
    let l = lists(&fake.requests());
    assert_eq!(l[0].resource_version.as_deref(), Some("6"));
    assert_eq!(l[1].resource_version, None);
    h.stop().await;

    let fake = FakeListerWatcher::new();
    for i in 0..5 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    fake.expire_continue_tokens();
    let store = Indexer::new();
    let r = Reflector::new(
        ExpiringPages(fake.clone()),
        store.clone(),
        ReflectorConfig {
            page_size: Some(2),
            ..list_watch()
        },
    );
    let cancel = CancellationToken::new();
    let run = r.run(cancel.clone());
    tokio::pin!(run);
    tokio::select! {
        _ = &mut run => unreachable!("runs until cancelled"),
        _ = eventually("synced", || store.len() == 5) => {}
    }
    let l = lists(&fake.requests());
    assert_eq!(l.len(), 3, "page 1, expired page 2, full list: {l:?}");
    assert_eq!(l[2].limit, None);
    assert_eq!(l[2].continue_token, None);
    assert_eq!(l[2].resource_version.as_deref(), Some("0"));
    cancel.cancel();
    run.await;
}

fn too_large() -> Error {
    let mut e = Error::status(504, "Timeout", "Too large resource version: 6, current: 1");
    if let Error::Api(s) = &mut e {
        s.details = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails {
                causes: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
                        reason: Some("ResourceVersionTooLarge".into()),
                        message: Some("Too large resource version".into()),
                        field: None,
                    },
                ]),
                ..Default::default()
            },
        );
    }
    e
}

/// A lister-watcher whose continuation pages always expire.
struct ExpiringPages(FakeListerWatcher<Pod>);

impl sample_client_go::cache::ListerWatcher<Pod> for ExpiringPages {
    async fn list(
        &self,
        params: &ListParams,
    ) -> sample_client_go::client::Result<sample_client_go::client::ObjectList<Pod>> {
        let r = self.0.list(params).await;
        self.0.expire_continue_tokens();
        r
    }
    async fn watch(
        &self,
        params: &WatchParams,
    ) -> sample_client_go::client::Result<sample_client_go::client::WatchStream<Pod>> {
        self.0.watch(params).await
    }
}

#[tokio::test(start_paused = true)]
async fn streaming_list_syncs_and_keeps_the_same_stream() {
    let fake = FakeListerWatcher::new();
    for i in 0..3 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    let h = start(&fake, ReflectorConfig::default());
    eventually("synced", || h.store.len() == 3).await;
    let reqs = fake.requests();
    assert!(lists(&reqs).is_empty(), "a streaming list sends no LIST");
    let w = watches(&reqs);
    assert_eq!(w.len(), 1);
    assert!(w[0].send_initial_events && w[0].allow_watch_bookmarks);
    assert_eq!(w[0].resource_version.as_deref(), Some(""));
    assert_eq!(h.reflector.last_synced_resource_version(), "4");
    fake.upsert(pod("ns", "p3"));
    eventually("live event on the same stream", || h.store.len() == 4).await;
    assert_eq!(watches(&fake.requests()).len(), 1);
    let stats = h.reflector.status().snapshot();
    assert_eq!((stats.streaming_lists, stats.lists), (1, 0));

    // After a 410 the next streaming list resumes from the last RV.
    fake.error_watches(Error::status(410, "Expired", "too old"));
    eventually("streamed again", || watches(&fake.requests()).len() == 2).await;
    let w = watches(&fake.requests());
    assert!(w[1].send_initial_events);
    assert_eq!(w[1].resource_version.as_deref(), Some("5"));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn streaming_list_falls_back_to_list_when_rejected() {
    let fake = FakeListerWatcher::new();
    fake.set_streaming_list_support(false);
    for i in 0..3 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    let h = start(&fake, ReflectorConfig::default());
    eventually("watching", || fake.open_watches() == 1).await;
    let reqs = fake.requests();
    assert!(matches!(&reqs[0], Request::Watch(w) if w.send_initial_events));
    assert!(matches!(&reqs[1], Request::List(l) if l.resource_version.as_deref() == Some("0")));
    assert!(matches!(&reqs[2], Request::Watch(w) if !w.send_initial_events));
    assert_eq!(store_rvs(&h.store), truth(&fake));
    let stats = h.reflector.status().snapshot();
    assert_eq!(stats.streaming_list_fallbacks, 1);
    assert_eq!(stats.streaming_lists, 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn deleted_while_disconnected_and_compacted_is_removed_by_the_relist() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "keep"));
    fake.upsert(pod("ns", "gone"));
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    tokio::time::advance(Duration::from_secs(3)).await;
    fake.close_watches();
    fake.delete_silently("ns/gone");
    fake.upsert(pod("ns", "keep"));
    fake.compact();
    eventually("converged", || store_rvs(&h.store) == truth(&fake)).await;
    assert!(h.store.get("ns/gone").is_none());
    assert_eq!(h.reflector.status().snapshot().expired, 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_caps_and_resets_after_two_minutes() {
    let mut b = Backoff::new(BackoffConfig::default());
    let bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
    for base in bases {
        let d = b.next_delay().as_secs_f64();
        assert!(
            d >= base && d < 2.0 * base,
            "{d} not in [{base}, {})",
            2.0 * base
        );
    }
    tokio::time::advance(Duration::from_secs(121)).await;
    let d = b.next_delay().as_secs_f64();
    assert!((0.8..1.6).contains(&d), "reset to 800 ms, got {d}");
}

#[tokio::test(start_paused = true)]
async fn second_run_returns_at_once() {
    let fake = FakeListerWatcher::new();
    let h = start(&fake, list_watch());
    eventually("watching", || fake.open_watches() == 1).await;
    h.reflector.run(CancellationToken::new()).await;
    yield_to_tasks(20, Duration::from_millis(1)).await;
    assert_eq!(lists(&fake.requests()).len(), 1);
    h.stop().await;
}

fn undecodable(name: &str, rv: &str) -> sample_client_go::client::UndecodableObject {
    sample_client_go::client::UndecodableObject {
        kind: "Pod".into(),
        api_version: Some("v1".into()),
        namespace: Some("default".into()),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        resource_version: Some(rv.into()),
        error: "missing field `spec` at line 1 column 40".into(),
    }
}

/// One object that does not decode is left out of the store; every other object lists and
/// watches on, the reflector is synced, and the object is reported once per resourceVersion
/// (the handler and the counters), whether it comes in a list or on a watch.
#[tokio::test(start_paused = true)]
async fn an_object_that_does_not_decode_is_left_out_and_reported_once_per_resource_version() {
    for streaming_list in [false, true] {
        let fake = FakeListerWatcher::<Pod>::new();
        fake.upsert(pod("default", "a"));
        fake.add_undecodable(undecodable("bad", "5"));
        let reported = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let h = start(
            &fake,
            ReflectorConfig {
                streaming_list,
                ..Default::default()
            },
        );
        // Set before the reflector's task first runs (the test's runtime has not yielded).
        let r = Arc::clone(&reported);
        h.reflector
            .set_undecodable_handler(Arc::new(move |name, u| {
                r.lock().unwrap().push(format!("{name}: {}", u.key()));
            }));
        if streaming_list {
            // The fake's streaming list sends its objects only; the bad one arrives on the
            // watch, as a newer version of an object the list had.
            eventually("synced", || h.reflector.status().snapshot().synced).await;
            fake.upsert(pod("default", "bad"));
            eventually("bad cached", || h.store.get("default/bad").is_some()).await;
            fake.add_undecodable(undecodable("bad", "7"));
        }
        eventually("synced", || h.reflector.status().snapshot().synced).await;
        eventually("bad left out", || h.reflector.undecodable_count() == 1).await;
        assert!(h.store.get("default/a").is_some(), "the good object syncs");
        assert!(
            h.store.get("default/bad").is_none(),
            "the bad one is left out"
        );

        // The watch goes on past it: later objects arrive.
        fake.upsert(pod("default", "b"));
        eventually("b arrives", || h.store.get("default/b").is_some()).await;

        // A new resourceVersion of it is reported again.
        fake.close_watches();
        yield_to_tasks(20, Duration::from_millis(1)).await;
        fake.add_undecodable(undecodable("bad", "9"));
        eventually("second report", || reported.lock().unwrap().len() == 2).await;
        let stats = h.reflector.status().snapshot();
        assert_eq!(stats.undecodable, 2);
        assert_eq!(stats.left_out, 1);
        assert_eq!(
            *reported.lock().unwrap(),
            ["objects: default/bad", "objects: default/bad"]
        );

        // Fixed: it decodes again, is cached, and no longer counted as left out.
        fake.upsert(pod("default", "bad"));
        eventually("bad cached again", || h.store.get("default/bad").is_some()).await;
        assert_eq!(h.reflector.undecodable_count(), 0);
        assert_eq!(h.reflector.status().snapshot().left_out, 0);
        h.cancel.cancel();
        h.task.await.unwrap();
    }
}
