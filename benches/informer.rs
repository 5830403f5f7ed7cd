//! Informer initial-sync benchmark: time and memory per cached object.
//!
//! Run with `hack/bench-informer.sh` (or `cargo bench -p benches --bench informer`; pass sizes as
//! arguments, e.g. `cargo bench -p benches --bench informer -- 10000 100000`, and optionally a source,
//! see below).
//!
//! For each size and each sync path (streaming list, paged LIST) it syncs a fresh informer
//! from a synthetic source that generates realistic pods on demand (labels, annotations, an
//! owner reference, two managedFields entries, one container, status), with the default
//! transform (drop `metadata.managedFields`) and without any transform, and reports:
//!
//! * wall-clock time to `has_synced`;
//! * heap bytes held by the cache per object (a counting global allocator: live bytes after
//!   sync minus live bytes before, so it is exact and independent of the allocator's caching);
//! * peak extra heap during the sync, and during a relist of an unchanged collection (which
//!   shows that a relist does not build a second copy of the store);
//! * the growth of the process's resident set size during the sync, per object (each
//!   measurement runs in a fresh child process).
//!
//! Two sources, chosen with `--source=memory`, `--source=embedded` or `--source=both` (the
//! default), e.g. `cargo bench -p benches --bench informer -- --source=embedded 10000`:
//!
//! * `memory` builds objects in memory (no JSON decoding, no network), so the times measure
//!   the cache itself: reflector, transform, indexer (namespace and owner-uid indexes; the
//!   bench adds the owner index, which the informers no longer build in) and one
//!   handler's notifications.
//! * `embedded` starts the embedded API server (`Cluster::builder().plain_http(true)`, no
//!   simulated node) in the measuring process, creates the pods through its HTTP API with the
//!   project's client (eight concurrent tasks, client throttle off, the same pods as `memory`
//!   minus the server-owned fields: uid, resourceVersion, creationTimestamp, managedFields and
//!   status), so each pod carries the managedFields entry the server records on create. It
//!   then syncs an informer over `Api<Pod>` for all namespaces. Seeding is done before the
//!   baselines are taken and is not timed; the sync time includes the server's own work
//!   (serializing the list or the initial events) and JSON decoding over loopback HTTP, both
//!   on the same two-thread runtime as the informer. Heap and RSS growth also include what the
//!   server and the client allocate and keep during the sync (connection buffers, pooled
//!   memory), so they are an upper bound for the cache.
//!
//! A third measurement, `--paging` (`cargo bench -p benches --bench informer -- --paging 10000`), times
//! the server side of a paged LIST of `n` pods in-process, with and without writes between
//! the pages (see the `paging` module below).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use embedded_cluster::{Cluster, ClusterHandle};
use futures_util::stream;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ListMeta, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use sample_client_go::cache::informer::InformerOptions;
use sample_client_go::cache::{
    EventHandlerFns, ListerWatcher, ReflectorConfig, SharedIndexInformer,
};
use sample_client_go::client::{
    Api, Client, Config, PostParams,
    config::{Auth, Secret},
};
use sample_client_go::client::{
    Bookmark, Error, ListParams, ObjectList, Result, WatchEvent, WatchParams, WatchStream,
};
use tokio_util::sync::CancellationToken;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Every byte ever allocated (never decremented): what a piece of work copied.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// The workspace denies unsafe code; a GlobalAlloc wrapper cannot be written without it, and this
// one only forwards to the system allocator and counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn make_pod(i: usize) -> Pod {
    let name = format!("web-{i:07}");
    let fields = FieldsV1(serde_json::json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}, "f:pod-template-hash": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {},
            "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}}}}}}
    }));
    Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(format!("team-{}", i % 50)),
            uid: Some(format!("00000000-0000-0000-0000-{i:012}")),
            resource_version: Some("1".into()),
            creation_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            labels: Some(BTreeMap::from([
                ("app".into(), "web".into()),
                ("tier".into(), "frontend".into()),
                ("pod-template-hash".into(), "7d9f8b6c5".into()),
            ])),
            annotations: Some(BTreeMap::from([(
                "kubectl.kubernetes.io/restartedAt".into(),
                "2026-01-01T00:00:00Z".into(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-7d9f8b6c5".into(),
                uid: format!("rs-{}", i / 100),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            managed_fields: Some(vec![
                ManagedFieldsEntry {
                    manager: Some("kube-controller-manager".into()),
                    operation: Some("Update".into()),
                    api_version: Some("v1".into()),
                    fields_type: Some("FieldsV1".into()),
                    fields_v1: Some(fields.clone()),
                    time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                    subresource: None,
                },
                ManagedFieldsEntry {
                    manager: Some("kubelet".into()),
                    operation: Some("Update".into()),
                    api_version: Some("v1".into()),
                    fields_type: Some("FieldsV1".into()),
                    fields_v1: Some(fields),
                    time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                    subresource: Some("status".into()),
                },
            ]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{}", i % 100)),
            containers: vec![Container {
                name: "web".into(),
                image: Some("registry.example/web:1.2.3".into()),
                ports: Some(vec![ContainerPort {
                    container_port: 8080,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                env: Some(vec![EnvVar {
                    name: "MODE".into(),
                    value: Some("production".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(format!("10.0.{}.{}", (i / 250) % 250, i % 250)),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// Generates `n` pods on demand, all at resourceVersion "1" (collection RV "1").
struct Synthetic {
    n: usize,
}

impl ListerWatcher<Pod> for Synthetic {
    async fn list(&self, params: &ListParams) -> Result<ObjectList<Pod>> {
        let start: usize = match params.continue_token.as_deref() {
            Some(t) => t
                .parse()
                .map_err(|_| Error::Other(format!("bad continue token {t:?}")))?,
            None => 0,
        };
        let end = params
            .limit
            .map_or(self.n, |l| (start + l as usize).min(self.n));
        Ok(ObjectList {
            metadata: ListMeta {
                resource_version: Some("1".into()),
                continue_: (end < self.n).then(|| end.to_string()),
                ..Default::default()
            },
            items: (start..end).map(make_pod).collect(),
            undecodable: Vec::new(),
        })
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<Pod>> {
        let initial: Box<dyn Iterator<Item = Result<WatchEvent<Pod>>> + Send> =
            if params.send_initial_events {
                Box::new(
                    (0..self.n)
                        .map(|i| Ok(WatchEvent::Added(make_pod(i))))
                        .chain(std::iter::once(Ok(WatchEvent::Bookmark(Bookmark {
                            resource_version: "1".into(),
                            initial_events_end: true,
                        })))),
                )
            } else {
                Box::new(std::iter::empty())
            };
        // After the initial events the stream stays open and quiet.
        Ok(Box::pin(futures_util::StreamExt::chain(
            stream::iter(initial),
            stream::pending(),
        )))
    }
}

/// A source whose watch fails once with 410 after the sync, forcing one relist.
struct RelistOnce<L> {
    inner: L,
    expired: AtomicBool,
    relisting: AtomicBool,
}

impl<L: ListerWatcher<Pod>> ListerWatcher<Pod> for RelistOnce<L> {
    async fn list(&self, params: &ListParams) -> Result<ObjectList<Pod>> {
        self.inner.list(params).await
    }
    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<Pod>> {
        if !params.send_initial_events && !self.expired.swap(true, Ordering::SeqCst) {
            self.relisting.store(true, Ordering::SeqCst);
            return Err(Error::status(410, "Expired", "too old resource version"));
        }
        self.inner.watch(params).await
    }
}

struct Row {
    n: usize,
    path: &'static str,
    transform: &'static str,
    secs: f64,
    bytes_per_obj: f64,
    sync_peak_per_obj: f64,
    relist_peak_per_obj: Option<f64>,
    rss_per_obj: Option<f64>,
}

/// Starts the embedded API server and creates `n` pods (the [`make_pod`] pods without the
/// fields the server owns) through its HTTP API, eight requests at a time.
async fn seed_embedded(n: usize) -> std::result::Result<(ClusterHandle, Api<Pod>), String> {
    use k8s_openapi::api::core::v1::Namespace;
    let server = Cluster::builder()
        .plain_http(true)
        .start()
        .await
        .map_err(|e| format!("cannot start the embedded API server: {e}"))?;
    let mut cfg = Config::new(Config::parse_server(server.url()).map_err(|e| e.to_string())?);
    // The client drops credentials for http:// servers read from a kubeconfig; set the token.
    cfg.auth = Auth::Bearer {
        token: Some(Secret::new(server.token())),
        file: None,
    };
    cfg.qps = 0.0;
    let client = Client::new(cfg).map_err(|e| format!("cannot build the client: {e}"))?;
    let namespaces: Api<Namespace> = Api::cluster(client.clone());
    for t in 0..50 {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("team-{t}")),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(format!("cannot create namespace team-{t}: {e}")),
        }
    }
    const TASKS: usize = 8;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..TASKS {
        let client = client.clone();
        tasks.spawn(async move {
            for i in (w..n).step_by(TASKS) {
                let mut pod = make_pod(i);
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                pod.metadata.uid = None;
                pod.metadata.resource_version = None;
                pod.metadata.creation_timestamp = None;
                pod.metadata.managed_fields = None;
                pod.status = None;
                Api::<Pod>::namespaced(client.clone(), &ns)
                    .create(&PostParams::default(), &pod)
                    .await
                    .map_err(|e| format!("cannot create pod {i}: {e}"))?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.map_err(|e| format!("a seeding task failed: {e}"))??;
    }
    let first = Api::<Pod>::namespaced(client.clone(), "team-0")
        .get("web-0000000")
        .await
        .map_err(|e| format!("cannot read back pod web-0000000: {e}"))?;
    eprintln!(
        "pod web-0000000 as stored: {} managedFields entries, {} bytes of JSON",
        first.metadata.managed_fields.as_ref().map_or(0, Vec::len),
        serde_json::to_vec(&first).map_or(0, |b| b.len())
    );
    Ok((server, Api::all(client)))
}

async fn measure<L: ListerWatcher<Pod>>(
    n: usize,
    inner: L,
    streaming: bool,
    keep_managed_fields: bool,
) -> Row {
    let base_rss = rss_bytes();
    let base_live = LIVE.load(Ordering::SeqCst);
    PEAK.store(base_live, Ordering::SeqCst);
    let source = RelistOnce {
        inner,
        expired: AtomicBool::new(streaming),
        relisting: AtomicBool::new(false),
    };
    let informer = SharedIndexInformer::new(
        source,
        InformerOptions {
            default_resync: Duration::ZERO,
            reflector: ReflectorConfig {
                streaming_list: streaming,
                ..Default::default()
            },
            ..InformerOptions::default()
        },
    );
    if keep_managed_fields {
        informer.set_transform(None::<fn(&mut Pod)>).ok();
    }
    // The owner index the figures in the README were taken with (no longer built in).
    informer
        .add_indexer(
            sample_client_go::cache::OWNER_UID_INDEX,
            sample_client_go::cache::owner_uid_index::<Pod>,
        )
        .ok();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    informer
        .add_event_handler(EventHandlerFns::new().on_add(move |_p: Arc<Pod>, _| {
            counter.fetch_add(1, Ordering::Relaxed);
        }))
        .ok();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn({
        let (i, c) = (informer.clone(), cancel.clone());
        async move { i.run(c).await }
    });
    while !informer.has_synced() || seen.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let synced_live = LIVE.load(Ordering::SeqCst);
    let sync_peak = PEAK.load(Ordering::SeqCst);
    let rss = rss_bytes();
    let mut relist_peak = None;
    if !streaming {
        // The first watch fails with 410: the reflector backs off and relists the unchanged
        // collection. Measure the peak above the synced state while it does.
        PEAK.store(LIVE.load(Ordering::SeqCst), Ordering::SeqCst);
        let before = informer.status().snapshot().lists;
        while informer.status().snapshot().lists == before
            || informer.status().snapshot().watches < 2
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        relist_peak =
            Some(PEAK.load(Ordering::SeqCst).saturating_sub(synced_live) as f64 / n as f64);
    }
    cancel.cancel();
    task.await.ok();
    let per = |b: usize| b.saturating_sub(base_live) as f64 / n as f64;
    Row {
        n,
        path: if streaming {
            "streaming list"
        } else {
            "paged LIST"
        },
        transform: if keep_managed_fields {
            "none"
        } else {
            "drop managedFields"
        },
        secs,
        bytes_per_obj: per(synced_live),
        sync_peak_per_obj: per(sync_peak),
        relist_peak_per_obj: relist_peak,
        rss_per_obj: rss
            .zip(base_rss)
            .map(|(after, before)| after.saturating_sub(before) as f64 / n as f64),
    }
}

fn run_one(n: usize, streaming: bool, keep: bool, embedded: bool) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot build a tokio runtime: {e}");
            return 1;
        }
    };
    let r = if embedded {
        {
            let seeded = rt.block_on(async {
                let started = Instant::now();
                let seeded = seed_embedded(n).await;
                eprintln!(
                    "seeded {n} pods through the HTTP API in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                seeded
            });
            match seeded {
                Ok((server, api)) => {
                    let r = rt.block_on(measure(n, api, streaming, keep));
                    rt.block_on(server.shutdown());
                    r
                }
                Err(e) => {
                    eprintln!("{e}");
                    return 1;
                }
            }
        }
    } else {
        rt.block_on(measure(n, Synthetic { n }, streaming, keep))
    };
    println!(
        "| {} | {} | {} | {:.3} s | {:.0} B | {:.0} B | {} | {} |",
        r.n,
        r.path,
        r.transform,
        r.secs,
        r.bytes_per_obj,
        r.sync_peak_per_obj,
        r.relist_peak_per_obj
            .map_or("n/a".to_owned(), |b| format!("{b:.0} B")),
        r.rss_per_obj
            .map_or("n/a".to_owned(), |b| format!("{b:.0} B")),
    );
    0
}

/// `--paging`: the server's own cost of a paged LIST, measured in-process on the embedded API
/// server's [`Store`](embedded_apiserver::internals::store::Store) and `verbs::list` (no HTTP, no JSON
/// encoding), so the figure is the store's work alone.
///
/// It seeds `n` pods (the [`make_pod`] pods, in 50 namespaces) through `verbs::create`, then
/// pages through all of them with `limit=500` and the `continue` token, exactly as a client-go
/// pager does, twice over:
///
/// * with no writes between pages: every page is served at the current revision;
/// * with 100 writes between pages (80 updates of random pods, 10 creates, 10 deletes): every
///   page after the first is served from the consistent snapshot at the first page's revision,
///   which the store rebuilds from its history.
///
/// For each it reports the median over five passes of the time spent inside `verbs::list`
/// per page and the heap bytes allocated per page (a counter of every allocation, so it shows
/// what a page copied). Each pass also checks that the pages together hold exactly the objects
/// that existed at the first page's revision.
mod paging {
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use embedded_apiserver::internals::query::{ListOptions, Query};
    use embedded_apiserver::internals::store::Store;
    use embedded_apiserver::internals::verbs::{self, Target};
    use serde_json::{Value, json};

    use super::{ALLOCATED, make_pod};

    const LIMIT: u64 = 500;
    const PASSES: usize = 5;
    const WRITES_PER_PAGE: usize = 100;

    fn target(store: &Store, plural: &str, ns: Option<&str>) -> Result<Target, String> {
        let def = store
            .read(|s| s.registry.lookup("", "v1", plural))
            .ok_or_else(|| format!("the store serves no {plural}"))?;
        Ok(Target {
            def,
            namespace: ns.map(str::to_owned),
            name: None,
            subresource: None,
        })
    }

    /// Pod `i` as a client would send it (no server-owned fields).
    fn pod_json(i: usize) -> Result<Value, String> {
        let mut pod = make_pod(i);
        pod.metadata.uid = None;
        pod.metadata.resource_version = None;
        pod.metadata.creation_timestamp = None;
        pod.metadata.managed_fields = None;
        pod.status = None;
        let mut v = serde_json::to_value(&pod).map_err(|e| format!("pod {i}: {e}"))?;
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Pod");
        Ok(v)
    }

    fn key(i: usize) -> (String, String) {
        (format!("team-{}", i % 50), format!("web-{i:07}"))
    }

    fn seed(n: usize) -> Result<Store, String> {
        // The embedded server's default history window.
        let store = Store::new(10_000);
        let q = Query::parse(None);
        let namespaces = target(&store, "namespaces", None)?;
        for t in 0..50 {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("team-{t}")}});
            store
                .write(|s| verbs::create(s, &namespaces, ns, &q))
                .map_err(|e| format!("namespace team-{t}: {}", e.message))?;
        }
        for i in 0..n {
            let (ns, _) = key(i);
            let pods = target(&store, "pods", Some(&ns))?;
            let body = pod_json(i)?;
            store
                .write(|s| verbs::create(s, &pods, body, &q))
                .map_err(|e| format!("pod {i}: {}", e.message))?;
        }
        Ok(store)
    }

    /// 100 writes: 80 updates of random pods, 10 creates, 10 deletes.
    fn churn(store: &Store, rng: &mut fastrand::Rng, next_id: &mut usize) -> Result<(), String> {
        let mut fresh = vec![];
        for _ in 0..WRITES_PER_PAGE / 10 {
            fresh.push(pod_json(*next_id)?);
            *next_id += 1;
        }
        let upper = *next_id;
        store.write(|s| {
            for obj in fresh {
                s.create("core/pods", obj);
            }
            for w in 0..WRITES_PER_PAGE - WRITES_PER_PAGE / 10 {
                let (ns, name) = key(rng.usize(..upper));
                if w % 9 == 0 {
                    s.delete("core/pods", &ns, &name);
                } else if let Some(old) = s.get("core/pods", &ns, &name) {
                    let mut new = old.clone();
                    new["metadata"]["labels"]["revision"] = json!(w.to_string());
                    s.update("core/pods", new);
                }
            }
        });
        Ok(())
    }

    struct Pass {
        pages: usize,
        secs: f64,
        allocated: usize,
    }

    fn pass(
        store: &Store,
        writes: bool,
        rng: &mut fastrand::Rng,
        next_id: &mut usize,
    ) -> Result<Pass, String> {
        let all = target(store, "pods", None)?;
        let expected = store.read(|s| s.list("core/pods", None).len());
        let (mut pages, mut items, mut secs, mut allocated) = (0, 0, 0.0, 0);
        let mut token = String::new();
        loop {
            let opts = ListOptions {
                limit: LIMIT,
                continue_token: std::mem::take(&mut token),
                ..Default::default()
            };
            let before = ALLOCATED.load(Ordering::Relaxed);
            let started = Instant::now();
            let page = store
                .read(|s| verbs::list(s, &all, &opts))
                .map_err(|e| format!("page {pages}: {}", e.message))?;
            secs += started.elapsed().as_secs_f64();
            allocated += ALLOCATED.load(Ordering::Relaxed) - before;
            pages += 1;
            items += page.items.len();
            match page.continue_token {
                Some(next) => token = next,
                None => break,
            }
            if writes {
                churn(store, rng, next_id)?;
            }
        }
        if items != expected {
            return Err(format!(
                "the pages held {items} pods, the snapshot {expected}"
            ));
        }
        Ok(Pass {
            pages,
            secs,
            allocated,
        })
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    pub fn report(sizes: &[usize]) -> i32 {
        println!();
        println!("Paged LIST, server side (limit={LIMIT}, median of {PASSES} passes)");
        println!();
        println!(
            "| objects | writes between pages | pages | time in verbs::list / page | heap allocated / page |"
        );
        println!("|---:|---:|---:|---:|---:|");
        for &n in sizes {
            let started = Instant::now();
            let store = match seed(n) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("seeding {n} pods: {e}");
                    return 1;
                }
            };
            eprintln!(
                "seeded {n} pods in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let mut rng = fastrand::Rng::with_seed(42);
            let mut next_id = n;
            for writes in [false, true] {
                let mut times = vec![];
                let mut bytes = vec![];
                let mut pages = 0;
                for _ in 0..PASSES {
                    match pass(&store, writes, &mut rng, &mut next_id) {
                        Ok(p) => {
                            pages = p.pages;
                            times.push(p.secs / p.pages as f64);
                            bytes.push(p.allocated as f64 / p.pages as f64);
                        }
                        Err(e) => {
                            eprintln!("paging through {n} pods: {e}");
                            return 1;
                        }
                    }
                }
                println!(
                    "| {n} | {} | {pages} | {:.2} ms | {:.0} KiB |",
                    if writes { WRITES_PER_PAGE } else { 0 },
                    median(times) * 1e3,
                    median(bytes) / 1024.0,
                );
            }
        }
        0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Child mode: one measurement in a fresh process, so RSS belongs to it alone.
    if args.first().map(String::as_str) == Some("--one") {
        let parsed = (
            args.get(1).and_then(|a| a.parse::<usize>().ok()),
            args.get(2).map(|a| a == "streaming"),
            args.get(3).map(|a| a == "keep"),
            args.get(4).map(|a| a == "embedded"),
        );
        let code = match parsed {
            (Some(n), Some(streaming), Some(keep), Some(embedded)) => {
                run_one(n, streaming, keep, embedded)
            }
            _ => {
                eprintln!(
                    "usage: informer --one <objects> streaming|list keep|drop memory|embedded"
                );
                2
            }
        };
        std::process::exit(code);
    }
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if args.iter().any(|a| a == "--paging") {
        std::process::exit(paging::report(if sizes.is_empty() {
            &[10_000]
        } else {
            &sizes
        }));
    }
    let sources: &[&str] = match args
        .iter()
        .find_map(|a| a.strip_prefix("--source="))
        .unwrap_or("both")
    {
        "memory" => &["memory"],
        "embedded" => &["embedded"],
        "both" => &["memory", "embedded"],
        other => {
            eprintln!("--source={other:?}: expected memory, embedded or both");
            std::process::exit(2);
        }
    };
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000]
    } else {
        sizes
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot find this executable: {e}");
            std::process::exit(1);
        }
    };
    for &source in sources {
        println!();
        println!("Source: {source}");
        println!();
        println!(
            "| objects | sync path | transform | sync time | cache heap / object | peak heap / object during sync | extra peak heap / object during a relist | RSS growth / object |"
        );
        println!("|---:|---|---|---:|---:|---:|---:|---:|");
        for &n in &sizes {
            for streaming in ["streaming", "list"] {
                for keep in ["drop", "keep"] {
                    let status = std::process::Command::new(&exe)
                        .args(["--one", &n.to_string(), streaming, keep, source])
                        .status();
                    if !matches!(status, Ok(s) if s.success()) {
                        eprintln!("measurement {n} {streaming} {keep} {source} failed: {status:?}");
                    }
                }
            }
        }
    }
}
