//! The cache's key behaviours end to end: informers and reflectors running on the crate's own
//! client (`Api<K>` as the `ListerWatcher`) against the embedded API server over real HTTP,
//! with the server's own fault injection (`apiserver::faults`) doing the damage.
//!
//! The same behaviours are pinned down precisely, on a virtual clock, against the in-memory
//! fake (`cache_informer`, `cache_reflector`, `cache_convergence`). Here they are checked against
//! a real server's resourceVersions, watch history window, `410 Expired` ERROR events and
//! failure `Status` bodies, so a disagreement between the fake and the server would show:
//!
//! * convergence under faults (a proptest): random creates, updates and deletes while the
//!   server drops watches, compacts its history, and fails lists and watches; afterwards the
//!   cache equals the server's LIST (keys and resourceVersions) and every handler saw a
//!   consistent history;
//! * a handler added after the sync gets a synthetic add for every cached object;
//! * resync: handlers with a period get updates whose old and new resourceVersion are equal;
//! * a relist after `410 Gone` produces tombstones (last known state) for objects deleted while
//!   the watch was down, adds for those created meanwhile, updates only for real changes
//!   (reference vectors 5 and 6);
//! * reference vector 7 (410 on the watch, relist at the last RV, then from storage with
//!   `limit=500`), vector 8 (connection refused on re-watch: back off and re-watch, no relist,
//!   through a TCP gate that can be shut) and vector 10 (the lister's NotFound message).
//!
//! Everything runs on the real clock (loopback HTTP and tokio's auto-advancing paused clock do
//! not mix: idle waits on sockets would make virtual time leap), with a fast reflector backoff,
//! and waits by polling with generous deadlines; assertions are on outcomes, never on timing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use embedded_apiserver::faults::Fault;
use embedded_cluster::{Cluster, ClusterHandle};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;
use sample_client_go::cache::informer::{InformerOptions, wait_for_cache_sync};
use sample_client_go::cache::reflector::is_connection_refused;
use sample_client_go::cache::{
    Deleted, ListerWatcher, ReflectorConfig, ResourceEventHandler, SharedIndexInformer, key_of,
};
use sample_client_go::client::config::{Auth, Secret};
use sample_client_go::client::{
    Api, Client, Config, DeleteParams, ListParams, ObjectList, Patch, PatchParams, PostParams,
    WatchParams, WatchStream,
};
use sample_operators::apis::{At, AtSpec};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

// ----- the server and its clients -----

async fn server() -> ClusterHandle {
    sample_client_go::install_crypto_provider();
    Cluster::builder().plain_http(true).start().await.unwrap()
}

fn client_at(server: &ClusterHandle, url: &str, max_retries: u32) -> Client {
    let mut config = Config::new(url.parse().unwrap());
    config.max_retries = max_retries;
    config.auth = Auth::Bearer {
        token: Some(Secret::from(server.token())),
        file: None,
    };
    config.qps = 0.0;
    Client::new(config).unwrap()
}

fn client(server: &ClusterHandle) -> Client {
    client_at(
        server,
        server.url(),
        Config::new("http://x".parse().unwrap()).max_retries,
    )
}

fn pods(client: &Client) -> Api<Pod> {
    Api::namespaced(client.clone(), NS)
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn create(api: &Api<Pod>, name: &str) -> String {
    rv(&api
        .create(&PostParams::default(), &pod(name))
        .await
        .unwrap())
}

/// A real change: a new label value, so a new resourceVersion.
async fn touch(api: &Api<Pod>, name: &str, generation: u64) -> String {
    let patch = Patch::Merge(serde_json::json!({
        "metadata": {"labels": {"generation": generation.to_string()}}
    }));
    rv(&api
        .patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap())
}

async fn delete(api: &Api<Pod>, name: &str) {
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

fn rv(p: &Pod) -> String {
    p.metadata.resource_version.clone().unwrap_or_default()
}

fn rv_num(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The truth: the server's LIST, as key → resourceVersion.
async fn server_view(api: &Api<Pod>) -> BTreeMap<String, String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (key_of(p), rv(p)))
        .collect()
}

fn cache_view(inf: &SharedIndexInformer<Pod>) -> BTreeMap<String, String> {
    inf.indexer()
        .list()
        .iter()
        .map(|p| (key_of(p.as_ref()), rv(p)))
        .collect()
}

/// A reflector configuration with a fast backoff ([`fast_backoff`](crate::support::client::fast_backoff)).
fn fast(streaming_list: bool) -> ReflectorConfig {
    ReflectorConfig {
        streaming_list,
        backoff: crate::support::client::fast_backoff(),
        ..Default::default()
    }
}

fn informer(lw: impl ListerWatcher<Pod>, config: ReflectorConfig) -> SharedIndexInformer<Pod> {
    informer_with_resync(lw, config, Duration::ZERO)
}

/// An informer whose default resync period is `resync`. As in client-go, an informer created
/// with zero resync never resyncs, whatever period a handler asks for.
fn informer_with_resync(
    lw: impl ListerWatcher<Pod>,
    config: ReflectorConfig,
    resync: Duration,
) -> SharedIndexInformer<Pod> {
    SharedIndexInformer::new(
        lw,
        InformerOptions {
            default_resync: resync,
            reflector: config,
            ..InformerOptions::default()
        },
    )
}

/// Runs an informer; the token stops it, the handle is awaited by the test.
fn run<K: sample_client_go::cache::CacheObject>(
    inf: &SharedIndexInformer<K>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (i, c) = (inf.clone(), cancel.clone());
        async move { i.run(c).await }
    });
    (cancel, task)
}

async fn synced<K: sample_client_go::cache::CacheObject>(inf: &SharedIndexInformer<K>) {
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
            .await,
        "informer never synced"
    );
}

/// Polls `cond` every 20 ms for up to 30 s.
use crate::support::eventually;

/// Waits until the cache equals the server's LIST.
async fn converges(inf: &SharedIndexInformer<Pod>, api: &Api<Pod>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let want = server_view(api).await;
        if cache_view(inf) == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: cache {:?} never matched the server {want:?}",
            cache_view(inf)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ----- what the reflector asked for -----

/// One call the reflector made through [`Recording`], and how it went.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    List {
        rv: Option<String>,
        limit: Option<u32>,
        /// `None` on success, else the error's code (0 for transport errors).
        failed: Option<u16>,
    },
    Watch {
        rv: Option<String>,
        initial_events: bool,
        failed: Option<u16>,
        refused: bool,
    },
}

/// The real client as the `ListerWatcher`, noting every call it forwards.
#[derive(Clone)]
struct Recording {
    api: Api<Pod>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Recording {
    fn new(api: Api<Pod>) -> Self {
        Recording {
            api,
            calls: Arc::default(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn since(&self, mark: usize) -> Vec<Call> {
        self.calls()[mark..].to_vec()
    }
}

fn code(e: &sample_client_go::client::Error) -> u16 {
    e.code().unwrap_or(0)
}

impl ListerWatcher<Pod> for Recording {
    async fn list(&self, params: &ListParams) -> sample_client_go::client::Result<ObjectList<Pod>> {
        let r = ListerWatcher::list(&self.api, params).await;
        self.calls.lock().unwrap().push(Call::List {
            rv: params.resource_version.clone(),
            limit: params.limit,
            failed: r.as_ref().err().map(code),
        });
        r
    }

    async fn watch(
        &self,
        params: &WatchParams,
    ) -> sample_client_go::client::Result<WatchStream<Pod>> {
        let r = ListerWatcher::watch(&self.api, params).await;
        self.calls.lock().unwrap().push(Call::Watch {
            rv: params.resource_version.clone(),
            initial_events: params.send_initial_events,
            failed: r.as_ref().err().map(code),
            refused: r.as_ref().err().is_some_and(is_connection_refused),
        });
        r
    }
}

// ----- what handlers were told -----

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    /// key, rv, is-initial-list
    Add(String, String, bool),
    /// key, old rv, new rv
    Update(String, String, String),
    /// key, rv of the state given, is-tombstone
    Delete(String, String, bool),
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn snapshot(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

impl ResourceEventHandler<Pod> for Recorder {
    fn on_add(&self, obj: Arc<Pod>, initial: bool) {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Add(key_of(obj.as_ref()), rv(&obj), initial));
    }
    fn on_update(&self, old: Arc<Pod>, new: Arc<Pod>) {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Update(key_of(new.as_ref()), rv(&old), rv(&new)));
    }
    fn on_delete(&self, d: Deleted<Pod>) {
        let tombstone = d.is_tombstone();
        self.0
            .lock()
            .unwrap()
            .push(Seen::Delete(d.key(), rv(d.object()), tombstone));
    }
}

/// A handler that checks the history it is given and keeps its own view of the world: no add
/// for a key it has, no update or delete for a key it lacks, an update's `old` is what it last
/// saw, and resourceVersions never go back.
#[derive(Clone, Default)]
struct Checker {
    view: Arc<Mutex<BTreeMap<String, String>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Checker {
    fn violation(&self, v: String) {
        self.violations.lock().unwrap().push(v);
    }
    fn view(&self) -> BTreeMap<String, String> {
        self.view.lock().unwrap().clone()
    }
}

impl ResourceEventHandler<Pod> for Checker {
    fn on_add(&self, obj: Arc<Pod>, _initial: bool) {
        let key = key_of(obj.as_ref());
        if let Some(old) = self.view.lock().unwrap().insert(key.clone(), rv(&obj)) {
            self.violation(format!("add of {key} which was present at rv {old}"));
        }
    }
    fn on_update(&self, old: Arc<Pod>, new: Arc<Pod>) {
        let key = key_of(new.as_ref());
        let mut view = self.view.lock().unwrap();
        match view.get(&key) {
            None => self.violation(format!("update of {key} before any add")),
            Some(seen) => {
                if *seen != rv(&old) {
                    self.violation(format!(
                        "update of {key}: old rv {} but the handler last saw {seen}",
                        rv(&old)
                    ));
                }
                if rv_num(&new) < seen.parse().unwrap_or(0) {
                    self.violation(format!(
                        "update of {key} went back from {seen} to {}",
                        rv(&new)
                    ));
                }
            }
        }
        view.insert(key, rv(&new));
    }
    fn on_delete(&self, d: Deleted<Pod>) {
        let key = d.key();
        if self.view.lock().unwrap().remove(&key).is_none() {
            self.violation(format!("delete of unknown {key}"));
        }
    }
}

// ----- 1. convergence under the server's faults -----

#[derive(Clone, Debug)]
enum Op {
    /// Create pod i, or change it if it exists.
    Upsert(u8),
    Delete(u8),
    /// Every open watch ends (resumed from the last RV).
    DropWatches,
    /// The history is compacted: resuming from an older RV gets 410.
    Compact,
    /// Pod i is deleted while the informer cannot watch or list, then the history is
    /// compacted: only a relist can find out, as a tombstone.
    LostDelete(u8),
    /// The next n LISTs of pods fail with 500.
    FailLists(u8),
    /// The next n WATCHes of pods fail with 429 (+ Retry-After) or 503.
    FailWatches(u8, bool),
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8).prop_map(Op::Upsert),
        3 => (0u8..8).prop_map(Op::Delete),
        1 => Just(Op::DropWatches),
        1 => Just(Op::Compact),
        1 => (0u8..8).prop_map(Op::LostDelete),
        1 => (1u8..3).prop_map(Op::FailLists),
        1 => ((1u8..3), any::<bool>()).prop_map(|(n, t)| Op::FailWatches(n, t)),
        2 => (0u16..400).prop_map(Op::Wait),
    ]
}

/// Holds every LIST (503) and WATCH (429, which the reflector answers by re-watching from
/// its last RV, never by relisting) of pods back until `Faults::clear`.
fn block_list_and_watch(server: &ClusterHandle) {
    for (verb, code) in [("list", 503), ("watch", 429)] {
        server.faults().inject(
            Fault::fail(code)
                .verb(verb)
                .resource("pods")
                .times(1_000_000),
        );
    }
}

async fn convergence_case(ops: Vec<Op>, streaming: bool) -> Result<(), TestCaseError> {
    let server = server().await;
    let direct = client(&server);
    let api = pods(&direct);
    let mut present = [false; 8];
    for (i, present) in present.iter_mut().enumerate().take(3) {
        create(&api, &format!("p{i}")).await;
        *present = true;
    }
    let inf = informer_with_resync(pods(&direct), fast(streaming), Duration::from_secs(2));
    let early = Checker::default();
    let resyncing = Checker::default();
    inf.add_event_handler(early.clone()).unwrap();
    inf.add_event_handler_with_resync_period(resyncing.clone(), Duration::from_secs(1))
        .unwrap();
    let (cancel, task) = run(&inf);
    let mut late = None;
    let mut generation = 0;
    for (n, op) in ops.into_iter().enumerate() {
        match op {
            Op::Upsert(i) => {
                let name = format!("p{i}");
                if present[usize::from(i)] {
                    generation += 1;
                    touch(&api, &name, generation).await;
                } else {
                    create(&api, &name).await;
                    present[usize::from(i)] = true;
                }
            }
            Op::Delete(i) => {
                if std::mem::take(&mut present[usize::from(i)]) {
                    delete(&api, &format!("p{i}")).await;
                }
            }
            Op::DropWatches => server.faults().drop_watches(),
            Op::Compact => server.compact(),
            Op::LostDelete(i) => {
                block_list_and_watch(&server);
                server.faults().drop_watches();
                if std::mem::take(&mut present[usize::from(i)]) {
                    delete(&api, &format!("p{i}")).await;
                }
                server.compact();
                server.faults().clear();
            }
            Op::FailLists(k) => server.faults().inject(
                Fault::fail(500)
                    .verb("list")
                    .resource("pods")
                    .times(k.into()),
            ),
            Op::FailWatches(k, throttle) => server.faults().inject(
                Fault::fail(if throttle { 429 } else { 503 })
                    .verb("watch")
                    .resource("pods")
                    .times(k.into()),
            ),
            Op::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms.into())).await,
        }
        // A handler that joins half-way must catch up through the replay.
        if n == 4 {
            let c = Checker::default();
            inf.add_event_handler(c.clone()).unwrap();
            late = Some(c);
        }
    }
    // Quiescence: no more faults or changes; everything must agree with the server's LIST.
    server.faults().clear();
    let want = server_view(&api).await;
    let handlers: Vec<Checker> = [Some(early), Some(resyncing), late]
        .into_iter()
        .flatten()
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(cache_view(&inf) == want && handlers.iter().all(|h| h.view() == want))
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
    for h in &handlers {
        let v = h.violations.lock().unwrap();
        prop_assert!(v.is_empty(), "inconsistent history: {:?}", *v);
    }
    prop_assert_eq!(&cache_view(&inf), &want, "cache differs from the server");
    for h in &handlers {
        prop_assert_eq!(&h.view(), &want, "a handler's view differs from the server");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn informer_on_the_server_converges_under_faults(
        ops in prop::collection::vec(op(), 1..30),
        streaming in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        rt.block_on(convergence_case(ops, streaming))?;
    }
}

// ----- 2. a late handler -----

#[tokio::test]
async fn handler_added_after_sync_gets_a_synthetic_add_for_every_cached_object() {
    let server = server().await;
    let api = pods(&client(&server));
    let mut want = Vec::new();
    for i in 0..6 {
        let name = format!("p{i}");
        let rv = create(&api, &name).await;
        want.push(Seen::Add(format!("{NS}/{name}"), rv, true));
    }
    let inf = informer(pods(&client(&server)), fast(true));
    let early = Recorder::default();
    inf.add_event_handler(early.clone()).unwrap();
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    eventually("early handler's initial adds", || early.len() == 6).await;

    let late = Recorder::default();
    let reg = inf.add_event_handler(late.clone()).unwrap();
    assert!(
        wait_for_cache_sync(Instant::now() + Duration::from_secs(30), &[&inf, &reg]).await,
        "the replay to the late handler was never processed"
    );
    let mut replay = late.take();
    replay.sort();
    assert_eq!(replay, want, "one initial add per cached object, at its RV");

    // Afterwards it hears live changes like everybody else, and only once.
    let rv6 = create(&api, "p6").await;
    eventually("live add", || late.len() == 1 && early.len() == 7).await;
    assert_eq!(
        late.take(),
        [Seen::Add(format!("{NS}/p6"), rv6.clone(), false)]
    );
    let early_seen = early.snapshot();
    assert!(
        early_seen[..6]
            .iter()
            .all(|s| matches!(s, Seen::Add(_, _, true)))
    );
    assert_eq!(early_seen[6], Seen::Add(format!("{NS}/p6"), rv6, false));
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
}

// ----- 3. resync -----

#[tokio::test]
async fn resync_period_delivers_updates_with_unchanged_resource_versions() {
    let server = server().await;
    let api = pods(&client(&server));
    let mut rvs = BTreeMap::new();
    for name in ["a", "b"] {
        rvs.insert(format!("{NS}/{name}"), create(&api, name).await);
    }
    let inf = informer_with_resync(pods(&client(&server)), fast(true), Duration::from_secs(1));
    let resyncing = Recorder::default();
    let quiet = Recorder::default();
    inf.add_event_handler_with_resync_period(resyncing.clone(), Duration::from_secs(1))
        .unwrap();
    inf.add_event_handler_with_resync_period(quiet.clone(), Duration::ZERO)
        .unwrap();
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    let resyncs_of = |key: &str| {
        resyncing
            .snapshot()
            .iter()
            .filter(|s| matches!(s, Seen::Update(k, _, _) if k == key))
            .count()
    };
    // At least two periods' worth for each object (a lower bound, not a timing claim).
    eventually("two resyncs of each object", || {
        resyncs_of("default/a") >= 2 && resyncs_of("default/b") >= 2
    })
    .await;
    for s in resyncing.take() {
        match s {
            Seen::Add(key, rv, initial) => {
                assert!(initial);
                assert_eq!(rvs[&key], rv);
            }
            Seen::Update(key, old, new) => {
                assert_eq!(old, new, "a resync carries the same object as old and new");
                assert_eq!(rvs[&key], new, "at the cached resourceVersion");
            }
            d @ Seen::Delete(..) => panic!("unexpected {d:?}"),
        }
    }
    let mut initial = quiet.take();
    initial.sort();
    assert_eq!(
        initial,
        rvs.iter()
            .map(|(k, v)| Seen::Add(k.clone(), v.clone(), true))
            .collect::<Vec<_>>(),
        "a handler without a resync period hears nothing but the initial adds"
    );

    // A real change reaches both, with a new resourceVersion.
    let new_rv = touch(&api, "a", 1).await;
    let change = Seen::Update("default/a".into(), rvs["default/a"].clone(), new_rv);
    eventually("real update to the quiet handler", || quiet.len() == 1).await;
    assert_eq!(quiet.take(), std::slice::from_ref(&change));
    eventually("real update to the resyncing handler", || {
        resyncing.snapshot().contains(&change)
    })
    .await;
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
}

// ----- 4. relist after 410 (reference vectors 5 and 6) -----

/// Cuts the informer off (see [`block_list_and_watch`]), runs `changes` on
/// the server, compacts the history, and lets the informer back in: its re-watch from the
/// last RV gets `410 Expired` and only a relist can tell it what happened.
async fn while_cut_off<F: Future<Output = ()>>(server: &ClusterHandle, changes: F) {
    block_list_and_watch(server);
    server.faults().drop_watches();
    changes.await;
    server.compact();
    server.faults().clear();
}

async fn relist_after_410(streaming: bool) {
    let server = server().await;
    let api = pods(&client(&server));
    let mut rvs = BTreeMap::new();
    for name in ["same", "changed", "vanished", "warmup"] {
        rvs.insert(name, create(&api, name).await);
    }
    let inf = informer(pods(&client(&server)), fast(streaming));
    let rec = Recorder::default();
    inf.add_event_handler(rec.clone()).unwrap();
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    eventually("initial adds", || rec.len() == 4).await;
    // An event on the open watch, so its end is not a "very short watch" (which relists).
    delete(&api, "warmup").await;
    eventually("warmup delete", || rec.len() == 5).await;
    // The DELETED event carries the object at its deletion's resourceVersion.
    let warmup = rec.take().pop().unwrap();
    assert!(
        matches!(&warmup, Seen::Delete(k, rv, false)
            if k == "default/warmup" && rv.parse::<u64>().unwrap() > rvs["warmup"].parse().unwrap()),
        "{warmup:?}"
    );
    assert_eq!(
        rv_num(&api.get("same").await.unwrap()),
        rvs["same"].parse::<u64>().unwrap()
    );
    let expired_before = inf.status().snapshot().expired;
    let same_before = inf.indexer().get("default/same").unwrap();

    let mut changed_rv = String::new();
    let mut new_rv = String::new();
    while_cut_off(&server, async {
        changed_rv = touch(&api, "changed", 1).await;
        delete(&api, "vanished").await;
        new_rv = create(&api, "new").await;
        // Created and deleted while away: the informer never learns of it at all.
        create(&api, "ephemeral").await;
        delete(&api, "ephemeral").await;
    })
    .await;
    converges(&inf, &api, "relist after 410").await;
    eventually("relist notifications", || rec.len() == 3).await;
    // Let any stray notification arrive before checking there is none.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut seen = rec.take();
    seen.sort();
    assert_eq!(
        seen,
        [
            Seen::Add("default/new".into(), new_rv, false),
            Seen::Update("default/changed".into(), rvs["changed"].clone(), changed_rv),
            Seen::Delete("default/vanished".into(), rvs["vanished"].clone(), true),
        ],
        "tombstone with the last known state, add, real update; nothing for the unchanged \
         object or the one created and deleted while away"
    );
    assert!(
        inf.status().snapshot().expired > expired_before,
        "a 410 was met"
    );
    // The unchanged object kept its cached allocation.
    assert!(Arc::ptr_eq(
        &same_before,
        &inf.indexer().get("default/same").unwrap()
    ));
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn relist_after_410_gives_tombstones_adds_and_only_real_updates_list_and_watch() {
    relist_after_410(false).await;
}

#[tokio::test]
async fn relist_after_410_gives_tombstones_adds_and_only_real_updates_streaming() {
    relist_after_410(true).await;
}

// ----- 5. reference vector 7 -----

/// Reference vector 7 on the server: the watch resumed from the last RV after compaction gets
/// an ERROR 410 event; the relist asks for that RV without a limit (the first `RV="0"` list was
/// not paged); when that LIST gets 410 too, the next LIST is at once from storage
/// (`resourceVersion=""`) with `limit=500`.
#[tokio::test]
async fn watch_410_relists_at_last_rv_then_from_storage_with_limit_500() {
    let server = server().await;
    let api = pods(&client(&server));
    create(&api, "a").await;
    let lw = Recording::new(pods(&client(&server)));
    let inf = informer(lw.clone(), fast(false));
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    let first = lw.calls();
    assert_eq!(
        first[0],
        Call::List {
            rv: Some("0".into()),
            limit: Some(500),
            failed: None
        },
        "the first list is RV=0, paged by request"
    );
    create(&api, "b").await;
    converges(&inf, &api, "event on the watch").await;
    let last_rv = inf.last_synced_resource_version();
    let mark = lw.calls().len();

    while_cut_off(&server, async {
        create(&api, "c").await;
    })
    .await;
    // The first relist after the 410 watch fails with 410 as well. (The test lists nothing
    // itself until the informer has relisted twice: the fault would hit its LIST instead.)
    server
        .faults()
        .inject(Fault::fail(410).verb("list").resource("pods"));
    eventually("two lists after the 410", || {
        lw.since(mark)
            .iter()
            .filter(|c| matches!(c, Call::List { .. }))
            .count()
            >= 2
    })
    .await;
    converges(&inf, &api, "after the relists").await;
    let calls = lw.since(mark);
    let first_list = calls
        .iter()
        .position(|c| matches!(c, Call::List { .. }))
        .unwrap();
    // Before it: re-watches from the last RV, held back with 429, then one that opened (and
    // delivered the 410 ERROR event).
    for c in &calls[..first_list] {
        let Call::Watch { rv, .. } = c else {
            unreachable!()
        };
        assert_eq!(rv.as_deref(), Some(last_rv.as_str()), "{calls:?}");
    }
    assert!(
        matches!(calls[first_list - 1], Call::Watch { failed: None, .. }),
        "the watch that met the 410 had opened: {calls:?}"
    );
    assert_eq!(
        calls[first_list..first_list + 2],
        [
            Call::List {
                rv: Some(last_rv.clone()),
                limit: None,
                failed: Some(410)
            },
            Call::List {
                rv: None,
                limit: Some(500),
                failed: None
            },
        ],
        "{calls:?}"
    );
    assert!(inf.status().snapshot().expired >= 2);
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
}

// ----- 6. reference vector 8 -----

/// A TCP gate in front of the server: while open it forwards connections, while shut nothing
/// listens on its port (connection refused) and every forwarded connection has been cut.
struct Gate {
    addr: SocketAddr,
    upstream: SocketAddr,
    open: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl Gate {
    async fn new(upstream: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut gate = Gate {
            addr,
            upstream,
            open: None,
        };
        gate.serve(listener);
        gate
    }

    fn serve(&mut self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let upstream = self.upstream;
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut conns = tokio::task::JoinSet::new();
                loop {
                    let (inbound, _) = tokio::select! {
                        _ = stop.cancelled() => break,
                        a = listener.accept() => match a { Ok(a) => a, Err(_) => break },
                    };
                    conns.spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(upstream).await {
                            crate::support::net::splice(inbound, outbound).await;
                        }
                    });
                }
                // Dropping the listener and aborting every connection: refused from now on.
                conns.abort_all();
            }
        });
        self.open = Some((stop, task));
    }

    async fn shut(&mut self) {
        if let Some((stop, task)) = self.open.take() {
            stop.cancel();
            task.await.unwrap();
        }
    }

    async fn reopen(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }
}

/// Reference vector 8 on the server: the watch connection is cut and the server cannot be
/// reached; each re-watch is refused, the reflector backs off and re-watches from the same RV,
/// never relisting; once the server is back the resumed watch delivers what was missed.
#[tokio::test]
async fn refused_rewatches_back_off_and_resume_without_relist() {
    let server = server().await;
    let api = pods(&client(&server));
    create(&api, "a").await;
    let upstream: SocketAddr = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let mut gate = Gate::new(upstream).await;
    // The client itself retries connection errors of GETs (up to `max_retries` times); the
    // reflector's reaction is what is under test, so the gated client does not.
    let gated = client_at(&server, &format!("http://{}", gate.addr), 0);
    let lw = Recording::new(pods(&gated));
    let inf = informer(lw.clone(), fast(false));
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    // An event on the watch, so its end is not a "very short watch".
    create(&api, "b").await;
    converges(&inf, &api, "event on the watch").await;
    let last_rv = inf.last_synced_resource_version();
    let stats_before = inf.status().snapshot();
    let mark = lw.calls().len();

    gate.shut().await;
    eventually("two refused re-watches", || {
        lw.since(mark)
            .iter()
            .filter(|c| matches!(c, Call::Watch { refused: true, .. }))
            .count()
            >= 2
    })
    .await;
    let missed = create(&api, "missed").await;
    gate.reopen().await;
    converges(&inf, &api, "after the server is reachable again").await;
    assert_eq!(rv(&inf.indexer().get("default/missed").unwrap()), missed);
    let calls = lw.since(mark);
    assert!(
        calls.iter().all(|c| matches!(
            c,
            Call::Watch { rv, initial_events: false, .. } if rv.as_deref() == Some(last_rv.as_str())
        )),
        "only re-watches from the last RV, no relist: {calls:?}"
    );
    let refused = calls
        .iter()
        .filter(|c| matches!(c, Call::Watch { refused: true, .. }))
        .count();
    assert!(refused >= 2, "{calls:?}");
    assert!(
        matches!(calls.last(), Some(Call::Watch { failed: None, .. })),
        "{calls:?}"
    );
    let stats = inf.status().snapshot();
    assert_eq!(stats.lists, stats_before.lists, "no relist");
    assert_eq!(stats.expired, 0);
    cancel.cancel();
    task.await.unwrap();
    gate.shut().await;
    server.shutdown().await;
}

// ----- 7. reference vector 10 -----

/// Reference vector 10: a lister's Get of a missing object is a 404 NotFound whose message is
/// `<singular>.<group> "<name>" not found`, before and after the object existed.
#[tokio::test]
async fn lister_get_of_a_missing_object_is_not_found_with_the_qualified_singular() {
    let server = server().await;
    let direct = client(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&direct)
        .await
        .unwrap();
    let ats: Api<At> = Api::namespaced(direct.clone(), NS);
    let at = At {
        metadata: ObjectMeta {
            name: Some("present".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: AtSpec::new("2030-01-01T00:00:00Z", "echo hi"),
        status: None,
    };
    ats.create(&PostParams::default(), &at).await.unwrap();
    let inf = SharedIndexInformer::<At>::new(
        Api::<At>::namespaced(direct.clone(), NS),
        InformerOptions {
            default_resync: Duration::ZERO,
            reflector: fast(true),
            ..InformerOptions::default()
        },
    );
    let (cancel, task) = run(&inf);
    synced(&inf).await;
    let lister = inf.lister().namespace(NS);
    assert_eq!(
        lister.get("present").unwrap().spec.run.command,
        "echo hi",
        "served from the cache"
    );
    let check = |name: &str| {
        let err = lister.get(name).unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        let status = err.as_status().unwrap();
        assert_eq!(status.code, Some(404));
        assert_eq!(status.reason.as_deref(), Some("NotFound"));
        assert_eq!(
            status.message.as_deref(),
            Some(format!("at.cnat.programming-kubernetes.info \"{name}\" not found").as_str())
        );
    };
    check("missing");
    // Deleted on the server: once the watch delivers it, the lister says NotFound too.
    ats.delete("present", &DeleteParams::default())
        .await
        .unwrap();
    eventually("delete reaches the cache", || {
        inf.lister().namespace(NS).get("present").is_err()
    })
    .await;
    check("present");
    // Core types have no group: `pod "x" not found`.
    let pod_inf = informer(pods(&direct), fast(true));
    let (pod_cancel, pod_task) = run(&pod_inf);
    synced(&pod_inf).await;
    let err = pod_inf.lister().namespace(NS).get("x").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(
        err.as_status().unwrap().message.as_deref(),
        Some("pod \"x\" not found")
    );
    pod_cancel.cancel();
    pod_task.await.unwrap();
    cancel.cancel();
    task.await.unwrap();
    server.shutdown().await;
}
