//! Shared informer, factory and lister behaviour against the in-memory fake lister-watcher
//! (`cache::testing`): what each handler is told and when (reference test vectors 5 and 6),
//! tombstones, late-handler replay, per-handler resync on the paused clock, transforms, slow
//! and panicking handlers, the factory's sharing and lifecycle.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
use sample_client_go::cache::informer::InformerOptions;
use sample_client_go::cache::testing::{FakeListerWatcher, FakeSource, Request, meta};
use sample_client_go::cache::{
    Deleted, EventHandlerFns, FilteringHandler, InformerError, InformerScope, Lister,
    OWNER_UID_INDEX, ReflectorConfig, ResourceEventHandler, Selector, SharedIndexInformer,
    SharedInformerFactory, key_of, wait_for_cache_sync,
};
use sample_client_go::client::{Error, WatchEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn pod(ns: &str, name: &str) -> Pod {
    Pod {
        metadata: meta(ns, name, &[("app", "web")]),
        ..Default::default()
    }
}

fn rv(p: &Pod) -> String {
    p.metadata.resource_version.clone().unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Add(String, String, bool),
    Update(String, String, String),
    Delete(String, String, bool),
}

#[derive(Clone, Default)]
struct Recorder {
    log: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
    fn len(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

impl ResourceEventHandler<Pod> for Recorder {
    fn on_add(&self, obj: Arc<Pod>, initial: bool) {
        let s = Seen::Add(key_of(obj.as_ref()), rv(&obj), initial);
        self.log.lock().unwrap().push(s);
    }
    fn on_update(&self, old: Arc<Pod>, new: Arc<Pod>) {
        let s = Seen::Update(key_of(new.as_ref()), rv(&old), rv(&new));
        self.log.lock().unwrap().push(s);
    }
    fn on_delete(&self, d: Deleted<Pod>) {
        let s = Seen::Delete(d.key(), rv(d.object()), d.is_tombstone());
        self.log.lock().unwrap().push(s);
    }
}

fn informer(fake: &FakeListerWatcher<Pod>, resync: Duration) -> SharedIndexInformer<Pod> {
    SharedIndexInformer::new(
        fake.clone(),
        InformerOptions {
            default_resync: resync,
            reflector: ReflectorConfig::default(),
            ..InformerOptions::default()
        },
    )
}

fn spawn(inf: &SharedIndexInformer<Pod>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (i, c) = (inf.clone(), cancel.clone());
        async move { i.run(c).await }
    });
    (cancel, task)
}

use crate::support::eventually;

use crate::support::yield_to_tasks;

#[tokio::test(start_paused = true)]
async fn handlers_see_initial_list_then_live_changes_after_the_cache() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    fake.upsert(pod("ns", "b"));
    let inf = informer(&fake, Duration::ZERO);
    let rec = Recorder::default();
    let reg = inf.add_event_handler(rec.clone()).unwrap();
    // A handler that checks the lister already holds what it is told about.
    let lister = inf.lister();
    let stale_reads = Arc::new(Mutex::new(0));
    let stale = Arc::clone(&stale_reads);
    inf.add_event_handler(EventHandlerFns::new().on_add(move |p: Arc<Pod>, _| {
        if lister.get_by_key(&key_of(p.as_ref())).is_none() {
            *stale.lock().unwrap() += 1;
        }
    }))
    .unwrap();
    assert!(!inf.has_synced());
    let (cancel, task) = spawn(&inf);
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(5))
            .await
    );
    eventually("handler synced", || reg.has_synced()).await;
    let mut initial = rec.take();
    initial.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        initial,
        [
            Seen::Add("ns/a".into(), "2".into(), true),
            Seen::Add("ns/b".into(), "3".into(), true)
        ]
    );
    fake.upsert(pod("ns", "c"));
    fake.upsert(pod("ns", "a"));
    fake.delete("ns/b");
    eventually("three events", || rec.len() == 3).await;
    assert_eq!(
        rec.take(),
        [
            Seen::Add("ns/c".into(), "4".into(), false),
            Seen::Update("ns/a".into(), "2".into(), "5".into()),
            Seen::Delete("ns/b".into(), "6".into(), false),
        ]
    );
    assert_eq!(*stale_reads.lock().unwrap(), 0);
    assert_eq!(inf.last_synced_resource_version(), "6");
    cancel.cancel();
    task.await.unwrap();
    assert!(inf.is_stopped());
}

/// Reference test vector 5, as the informer applies it.
#[tokio::test(start_paused = true)]
async fn deletes_are_reported_once_and_relists_produce_tombstones() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "k"));
    fake.upsert(pod("ns", "x"));
    let inf = informer(&fake, Duration::ZERO);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone()).unwrap();
    let (cancel, task) = spawn(&inf);
    eventually("initial adds", || rec.len() == 2).await;
    rec.take();
    // A DELETED for a key the cache never held: no notification.
    let mut unknown = pod("ns", "never-seen");
    unknown.metadata.resource_version = Some("9".into());
    fake.send_raw(WatchEvent::Deleted(unknown));
    // Two DELETED events for x: one notification.
    let mut x = pod("ns", "x");
    x.metadata.resource_version = Some("10".into());
    fake.send_raw(WatchEvent::Deleted(x.clone()));
    fake.send_raw(WatchEvent::Deleted(x));
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert_eq!(
        rec.take(),
        [Seen::Delete("ns/x".into(), "10".into(), false)]
    );

    // k vanishes while the watch is down and history is compacted: the relist sees an empty
    // collection and the handler gets a tombstone with the last known state.
    fake.delete_silently("ns/k");
    fake.delete_silently("ns/x");
    fake.compact();
    fake.error_watches(Error::status(410, "Expired", "too old resource version"));
    eventually("tombstone", || rec.len() == 1).await;
    assert_eq!(rec.take(), [Seen::Delete("ns/k".into(), "2".into(), true)]);
    assert!(inf.indexer().is_empty());
    cancel.cancel();
    task.await.unwrap();
}

/// Reference test vector 6.
#[tokio::test(start_paused = true)]
async fn relist_notifies_only_real_changes_to_handlers_not_due_for_resync() {
    let fake = FakeListerWatcher::new();
    for n in ["same", "changed", "vanished"] {
        fake.upsert(pod("ns", n));
    }
    let inf = informer(&fake, Duration::ZERO);
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone()).unwrap();
    let (cancel, task) = spawn(&inf);
    eventually("initial adds", || rec.len() == 3).await;
    rec.take();
    let same_before = inf.indexer().get("ns/same").unwrap();
    fake.close_watches();
    fake.upsert(pod("ns", "changed"));
    fake.delete_silently("ns/vanished");
    fake.upsert(pod("ns", "new"));
    fake.compact();
    eventually("relist notifications", || rec.len() == 3).await;
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert_eq!(
        rec.take(),
        [
            Seen::Delete("ns/vanished".into(), "4".into(), true),
            Seen::Update("ns/changed".into(), "3".into(), "5".into()),
            Seen::Add("ns/new".into(), "7".into(), false),
        ]
    );
    // The unchanged object is the very same allocation: a relist does not copy it.
    assert!(Arc::ptr_eq(
        &same_before,
        &inf.indexer().get("ns/same").unwrap()
    ));
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn late_handler_gets_every_cached_object_then_live_events() {
    let fake = FakeListerWatcher::new();
    for i in 0..5 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    let inf = informer(&fake, Duration::ZERO);
    let (cancel, task) = spawn(&inf);
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(5))
            .await
    );
    let rec = Recorder::default();
    let reg = inf.add_event_handler(rec.clone()).unwrap();
    assert!(
        wait_for_cache_sync(Instant::now() + Duration::from_secs(5), &[&inf, &reg]).await,
        "replay processed"
    );
    let replay = rec.take();
    assert_eq!(replay.len(), 5);
    assert!(replay.iter().all(|s| matches!(s, Seen::Add(_, _, true))));
    fake.upsert(pod("ns", "p5"));
    eventually("live add", || rec.len() == 1).await;
    assert_eq!(rec.take(), [Seen::Add("ns/p5".into(), "7".into(), false)]);
    // Removed handlers hear nothing more.
    inf.remove_event_handler(&reg).await;
    fake.upsert(pod("ns", "p6"));
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert!(rec.take().is_empty());
    cancel.cancel();
    task.await.unwrap();
    let err = inf.add_event_handler(Recorder::default()).unwrap_err();
    assert_eq!(err, InformerError::Stopped);
}

#[tokio::test(start_paused = true)]
async fn resync_reaches_only_handlers_that_are_due() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    fake.upsert(pod("ns", "b"));
    // Informer default 60 s; a 30 s handler lowers the check period before start.
    let inf = informer(&fake, Duration::from_secs(60));
    let fast = Recorder::default();
    let slow = Recorder::default();
    let never = Recorder::default();
    inf.add_event_handler_with_resync_period(fast.clone(), Duration::from_secs(30))
        .unwrap();
    inf.add_event_handler(slow.clone()).unwrap();
    inf.add_event_handler_with_resync_period(never.clone(), Duration::ZERO)
        .unwrap();
    let start = Instant::now();
    let (cancel, task) = spawn(&inf);
    eventually("initial adds", || {
        fast.len() == 2 && slow.len() == 2 && never.len() == 2
    })
    .await;
    for r in [&fast, &slow, &never] {
        r.take();
    }
    let resyncs = |r: &Recorder| {
        r.take()
            .into_iter()
            .filter(|s| matches!(s, Seen::Update(_, a, b) if a == b))
            .count()
    };
    tokio::time::sleep_until(start + Duration::from_millis(30_500)).await;
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert_eq!(resyncs(&fast), 2, "fast resyncs at 30 s");
    assert_eq!(resyncs(&slow), 0);
    tokio::time::sleep_until(start + Duration::from_millis(60_500)).await;
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert_eq!(resyncs(&fast), 2, "fast again at 60 s");
    assert_eq!(resyncs(&slow), 2, "slow at 60 s");
    assert_eq!(resyncs(&never), 0);
    // A real change reaches everybody, due or not.
    fake.upsert(pod("ns", "a"));
    yield_to_tasks(50, Duration::from_millis(5)).await;
    for r in [&fast, &slow, &never] {
        assert_eq!(
            r.take(),
            [Seen::Update("ns/a".into(), "2".into(), "4".into())]
        );
    }
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn transform_drops_managed_fields_by_default_and_is_fixed_at_start() {
    let fake = FakeListerWatcher::new();
    let mut p = pod("ns", "a");
    p.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubectl".into()),
        ..Default::default()
    }]);
    fake.upsert(p.clone());
    let inf = informer(&fake, Duration::ZERO);
    let (cancel, task) = spawn(&inf);
    eventually("synced", || inf.has_synced()).await;
    assert!(
        inf.lister()
            .namespace("ns")
            .get("a")
            .unwrap()
            .metadata
            .managed_fields
            .is_none()
    );
    let err = inf.set_transform(None::<fn(&mut Pod)>).unwrap_err();
    assert_eq!(err.to_string(), "informer has already started");
    cancel.cancel();
    task.await.unwrap();

    // A custom transform (and none at all) before start.
    let inf = informer(&fake, Duration::ZERO);
    inf.set_transform(Some(|p: &mut Pod| {
        p.metadata
            .annotations
            .get_or_insert_default()
            .insert("seen".into(), "yes".into());
    }))
    .unwrap();
    let (cancel, task) = spawn(&inf);
    eventually("synced", || inf.has_synced()).await;
    let cached = inf.indexer().get("ns/a").unwrap();
    assert_eq!(cached.metadata.annotations.as_ref().unwrap()["seen"], "yes");
    assert!(cached.metadata.managed_fields.is_some());
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_gives_up_at_the_deadline() {
    let fake = FakeListerWatcher::<Pod>::new();
    fake.set_streaming_list_support(false);
    for _ in 0..100 {
        fake.fail_next_list(Error::status(500, "InternalError", "down"));
    }
    let inf = informer(&fake, Duration::ZERO);
    let (cancel, task) = spawn(&inf);
    assert!(
        !inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(10))
            .await
    );
    assert!(inf.status().snapshot().errors >= 3);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn owner_index_and_custom_indexes_answer_from_the_cache() {
    let fake = FakeListerWatcher::new();
    for (name, owner, node) in [("a", "u1", "n1"), ("b", "u1", "n2"), ("c", "u2", "n1")] {
        let mut p = pod("ns", name);
        p.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner.into(),
            name: "at".into(),
            kind: "At".into(),
            api_version: "cnat.programming-kubernetes.info/v1alpha1".into(),
            ..Default::default()
        }]);
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        });
        fake.upsert(p);
    }
    let inf = informer(&fake, Duration::ZERO);
    inf.add_indexer(
        OWNER_UID_INDEX,
        sample_client_go::cache::owner_uid_index::<Pod>,
    )
    .unwrap();
    inf.add_indexer("node", |p: &Pod| {
        p.spec.iter().filter_map(|s| s.node_name.clone()).collect()
    })
    .unwrap();
    let (cancel, task) = spawn(&inf);
    eventually("synced", || inf.has_synced()).await;
    let lister = inf.lister();
    let mut owned: Vec<String> = lister
        .by_index(OWNER_UID_INDEX, "u1")
        .unwrap()
        .iter()
        .map(|p| key_of(p.as_ref()))
        .collect();
    owned.sort();
    assert_eq!(owned, ["ns/a", "ns/b"]);
    assert_eq!(lister.by_index("node", "n1").unwrap().len(), 2);
    assert_eq!(
        lister.namespace("ns").list(&Selector::everything()).len(),
        3
    );
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_handler_blocks_neither_the_informer_nor_other_handlers() {
    let fake = FakeListerWatcher::new();
    let inf = informer(&fake, Duration::ZERO);
    let fast = Recorder::default();
    let slow = Recorder::default();
    // A gate the slow handler waits at until the test opens it.
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    {
        let (gate, slow) = (Arc::clone(&gate), slow.clone());
        inf.add_event_handler(EventHandlerFns::new().on_add(move |p: Arc<Pod>, i| {
            // Blocks until the test releases the gate. A handler that blocks its thread must
            // say so to tokio (block_in_place), or it can stall tasks queued on its worker.
            tokio::task::block_in_place(|| {
                let (open, cv) = &*gate;
                let _open = cv.wait_while(open.lock().unwrap(), |o| !*o).unwrap();
            });
            slow.on_add(p, i);
        }))
        .unwrap();
    }
    inf.add_event_handler(fast.clone()).unwrap();
    let (cancel, task) = spawn(&inf);
    inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
        .await;
    for i in 0..200 {
        fake.upsert(pod("ns", &format!("p{i}")));
    }
    eventually("fast handler saw everything", || fast.len() == 200).await;
    assert_eq!(inf.indexer().len(), 200, "the cache is current");
    assert_eq!(
        slow.len(),
        0,
        "the slow handler is still stuck on its first call"
    );
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    eventually("slow handler caught up", || slow.len() == 200).await;
    assert_eq!(slow.take(), fast.take(), "same notifications, same order");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_keeps_receiving() {
    let fake = FakeListerWatcher::new();
    let inf = informer(&fake, Duration::ZERO);
    let rec = Recorder::default();
    {
        let rec = rec.clone();
        inf.add_event_handler(EventHandlerFns::new().on_add(move |p: Arc<Pod>, i| {
            if p.metadata.name.as_deref() == Some("bad") {
                panic!("handler bug");
            }
            rec.on_add(p, i);
        }))
        .unwrap();
    }
    let (cancel, task) = spawn(&inf);
    eventually("synced", || inf.has_synced()).await;
    fake.upsert(pod("ns", "bad"));
    fake.upsert(pod("ns", "good"));
    eventually("good seen", || rec.len() == 1).await;
    assert_eq!(rec.take(), [Seen::Add("ns/good".into(), "3".into(), false)]);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn factory_shares_informers_per_type_and_scope() {
    let source = FakeSource::new();
    let factory = SharedInformerFactory::new(source.clone(), Duration::from_secs(30));
    let a = factory.informer::<Pod>();
    let b = factory.informer::<Pod>();
    let scope_all = InformerScope::default();
    source.fake::<Pod>(&scope_all).upsert(pod("ns", "x"));
    let labelled = InformerScope {
        namespace: Some("ns".into()),
        label_selector: Some("app=web".into()),
        field_selector: None,
    };
    let c = factory.informer_for::<Pod>(labelled.clone());
    let cm = factory.informer_for::<k8s_openapi::api::core::v1::ConfigMap>(scope_all.clone());
    assert_eq!(
        source.len(),
        3,
        "pods(all), pods(ns, app=web), configmaps(all)"
    );
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory
        .wait_for_cache_sync(Instant::now() + Duration::from_secs(10))
        .await;
    assert_eq!(synced.len(), 3);
    assert!(synced.values().all(|s| *s), "{synced:?}");
    assert!(a.has_synced() && b.has_synced() && c.has_synced() && cm.has_synced());
    // a and b are one informer: one cache, one watch.
    assert_eq!(a.indexer().len(), 1);
    assert!(Arc::ptr_eq(
        &a.indexer().get("ns/x").unwrap(),
        &b.indexer().get("ns/x").unwrap()
    ));
    let pod_requests = source.fake::<Pod>(&scope_all).requests();
    assert_eq!(
        pod_requests
            .iter()
            .filter(|r| matches!(r, Request::Watch(_)))
            .count(),
        1
    );
    // The scoped informer sends its selector with every request.
    let scoped = source.fake::<Pod>(&labelled).requests();
    assert!(scoped.iter().all(|r| match r {
        Request::Watch(w) => w.label_selector.as_deref() == Some("app=web"),
        Request::List(l) => l.label_selector.as_deref() == Some("app=web"),
    }));
    // An informer created after start needs another start.
    let late = factory.informer_for::<Pod>(InformerScope {
        namespace: Some("other".into()),
        ..Default::default()
    });
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert!(!late.is_started());
    factory.start(&cancel);
    eventually("late informer synced", || late.has_synced()).await;
    let lister: Lister<Pod> = factory.lister::<Pod>();
    assert!(lister.namespace("ns").get("x").is_ok());
    factory.shutdown().await;
    assert!(a.is_stopped() && c.is_stopped() && cm.is_stopped() && late.is_stopped());
    // After shutdown, start does nothing.
    let after = factory.informer_for::<Pod>(InformerScope {
        namespace: Some("after".into()),
        ..Default::default()
    });
    factory.start(&cancel);
    yield_to_tasks(50, Duration::from_millis(5)).await;
    assert!(!after.is_started());
}

#[tokio::test(start_paused = true)]
async fn filtering_handler_turns_label_changes_into_adds_and_deletes() {
    let fake = FakeListerWatcher::new();
    fake.upsert(pod("ns", "a"));
    let mut other = pod("ns", "b");
    other.metadata.labels = Some([("app".to_owned(), "db".to_owned())].into());
    fake.upsert(other.clone());
    let inf = informer(&fake, Duration::ZERO);
    let web = Selector::parse("app=web").unwrap();
    let rec = Recorder::default();
    inf.add_event_handler(FilteringHandler::new(
        move |p: &Pod| web.matches_opt(p.metadata.labels.as_ref()),
        rec.clone(),
    ))
    .unwrap();
    let (cancel, task) = spawn(&inf);
    eventually("initial add", || rec.len() == 1).await;
    assert_eq!(rec.take(), [Seen::Add("ns/a".into(), "2".into(), true)]);
    // b becomes a web pod: an add. a stops being one: a delete of its last state.
    fake.upsert(pod("ns", "b"));
    fake.upsert(other.clone().tap_name("a"));
    fake.upsert(pod("ns", "b"));
    eventually("three notifications", || rec.len() == 3).await;
    assert_eq!(
        rec.take(),
        [
            Seen::Add("ns/b".into(), "4".into(), false),
            Seen::Delete("ns/a".into(), "2".into(), false),
            Seen::Update("ns/b".into(), "4".into(), "6".into()),
        ]
    );
    cancel.cancel();
    task.await.unwrap();
}

trait TapName {
    fn tap_name(self, name: &str) -> Self;
}

impl TapName for Pod {
    fn tap_name(mut self, name: &str) -> Self {
        self.metadata.name = Some(name.into());
        self
    }
}
