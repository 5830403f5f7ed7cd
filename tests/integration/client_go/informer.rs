//! Informers against the embedded API server, over real HTTP, through the crate's own client.
//!
//! Between the client and the server sits a small fault-injecting HTTP proxy (below): it
//! forwards every request, and on demand answers the next LISTs with 500, the next WATCHes with
//! 429 + `Retry-After`, or cuts every open watch (a dropped connection). Together with the
//! server's own `compact()` (which makes resumed watches get 410) and `reject_send_initial_events`
//! this exercises the informer's recovery paths end to end: after each fault the cache must equal
//! the server's list again, and objects deleted while disconnected reach handlers as tombstones
//! with their last known state.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use embedded_cluster::{Cluster, ClusterHandle};
use futures_util::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use sample_client_go::cache::informer::InformerOptions;
use sample_client_go::cache::{
    Deleted, EventHandlerFns, InformerScope, ReflectorConfig, SharedIndexInformer,
    SharedInformerFactory, key_of,
};
use sample_client_go::client::config::{Auth, Secret};
use sample_client_go::client::{Api, Client, Config, DeleteParams, PostParams};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

// ----- the fault-injecting proxy -----

#[derive(Default)]
struct Faults {
    list_500: usize,
    streaming_500: usize,
    watch_429: usize,
    lists: usize,
    watches: usize,
    cut: CancellationToken,
}

#[derive(Clone)]
struct Proxy {
    url: String,
    faults: Arc<Mutex<Faults>>,
}

type Body = BoxBody<Bytes, Infallible>;

fn full(code: StatusCode, headers: &[(&str, &str)], body: &str) -> Response<Body> {
    let mut r = Response::builder().status(code);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())).boxed())
        .unwrap()
}

impl Proxy {
    async fn start(upstream: &str, stop: CancellationToken) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(Mutex::new(Faults::default()));
        let proxy = Proxy {
            url,
            faults: Arc::clone(&faults),
        };
        let client: HyperClient<HttpConnector, Incoming> =
            HyperClient::builder(TokioExecutor::new()).build(crate::support::net::http_connector());
        let upstream = upstream.to_owned();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => return },
                };
                let _ = tcp.set_nodelay(true);
                let (client, upstream, faults) =
                    (client.clone(), upstream.clone(), Arc::clone(&faults));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (client, upstream, faults) =
                            (client.clone(), upstream.clone(), Arc::clone(&faults));
                        async move {
                            Ok::<_, Infallible>(forward(client, &upstream, &faults, req).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        proxy
    }

    fn with<T>(&self, f: impl FnOnce(&mut Faults) -> T) -> T {
        f(&mut self.faults.lock().unwrap())
    }

    /// Ends every open watch stream (as a dropped connection would).
    fn cut_watches(&self) {
        self.with(|f| std::mem::take(&mut f.cut).cancel());
    }
}

async fn forward(
    client: HyperClient<HttpConnector, Incoming>,
    upstream: &str,
    faults: &Mutex<Faults>,
    req: Request<Incoming>,
) -> Response<Body> {
    let query = req.uri().query().unwrap_or("");
    let is_watch = query.split('&').any(|kv| kv == "watch=true");
    let is_get = req.method() == http::Method::GET;
    let (fail_list, fail_streaming, fail_watch, cut) = {
        let mut f = faults.lock().unwrap();
        let fail_list =
            is_get && !is_watch && f.list_500 > 0 && req.uri().path().ends_with("/pods");
        let streaming = query.split('&').any(|kv| kv == "sendInitialEvents=true");
        let fail_streaming = is_watch && streaming && f.streaming_500 > 0;
        if fail_streaming {
            f.streaming_500 -= 1;
        }
        let fail_watch = is_watch && !fail_streaming && f.watch_429 > 0;
        if fail_list {
            f.list_500 -= 1;
        }
        if fail_watch {
            f.watch_429 -= 1;
        }
        if is_watch {
            f.watches += 1;
        } else if is_get {
            f.lists += 1;
        }
        (fail_list, fail_streaming, fail_watch, f.cut.clone())
    };
    if fail_list || fail_streaming {
        return full(
            StatusCode::INTERNAL_SERVER_ERROR,
            &[],
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500,"message":"injected: etcd is unavailable"}"#,
        );
    }
    if fail_watch {
        return full(
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after", "1")],
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"injected: too many requests"}"#,
        );
    }
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (mut parts, body) = req.into_parts();
    parts.uri = format!("{upstream}{pq}").parse().unwrap();
    let resp = match client.request(Request::from_parts(parts, body)).await {
        Ok(r) => r,
        Err(e) => return full(StatusCode::BAD_GATEWAY, &[], &format!("{e}")),
    };
    let (parts, body) = resp.into_parts();
    if !is_watch {
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return full(StatusCode::BAD_GATEWAY, &[], &format!("{e}")),
        };
        return Response::from_parts(parts, Full::new(bytes).boxed());
    }
    // Watch bodies end when the test cuts watches.
    let frames = BodyStream::new(body)
        .take_until(cut.cancelled_owned())
        .filter_map(|f| async move { f.ok() })
        .map(Ok::<Frame<Bytes>, Infallible>);
    Response::from_parts(parts, BodyExt::boxed(StreamBody::new(frames)))
}

// ----- helpers -----

struct Env {
    server: ClusterHandle,
    proxy: Proxy,
    /// Through the fault-injecting proxy (what informers use).
    client: Client,
    /// Straight to the server (what the test uses to change and inspect the truth).
    direct: Client,
    stop: CancellationToken,
}

async fn env(reject_streaming: bool) -> Env {
    sample_client_go::install_crypto_provider();
    let server = Cluster::builder()
        .plain_http(true)
        .reject_send_initial_events(reject_streaming)
        .start()
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let proxy = Proxy::start(server.url(), stop.clone()).await;
    let client_for = |url: &str| {
        let mut config = Config::new(url.parse().unwrap());
        config.auth = Auth::Bearer {
            token: Some(Secret::from(server.token())),
            file: None,
        };
        config.qps = 0.0;
        Client::new(config).unwrap()
    };
    let client = client_for(&proxy.url);
    let direct = client_for(server.url());
    Env {
        server,
        proxy,
        client,
        direct,
        stop,
    }
}

impl Env {
    async fn shutdown(self) {
        self.stop.cancel();
        self.server.shutdown().await;
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn server_view(api: &Api<Pod>) -> BTreeMap<String, String> {
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            (
                key_of(p),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn cache_view(inf: &SharedIndexInformer<Pod>) -> BTreeMap<String, String> {
    inf.indexer()
        .list()
        .iter()
        .map(|p| {
            (
                key_of(p.as_ref()),
                p.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn converges(inf: &SharedIndexInformer<Pod>, api: &Api<Pod>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let want = server_view(api).await;
        if cache_view(inf) == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: cache never matched the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Clone, Default)]
struct Tombstones(Arc<Mutex<Vec<(String, String)>>>);

/// An informer of the default namespace's pods whose reflector backs off fast
/// ([`fast_backoff`](crate::support::client::fast_backoff)): the faults below recover in
/// fractions of a second rather than client-go's 10-20 s.
fn informer(client: &Client) -> SharedIndexInformer<Pod> {
    SharedIndexInformer::new(
        Api::<Pod>::namespaced(client.clone(), "default"),
        InformerOptions {
            default_resync: Duration::ZERO,
            reflector: ReflectorConfig {
                backoff: crate::support::client::fast_backoff(),
                ..ReflectorConfig::default()
            },
            ..InformerOptions::default()
        },
    )
}

fn run(inf: &SharedIndexInformer<Pod>) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (i, c) = (inf.clone(), cancel.clone());
        async move { i.run(c).await }
    });
    (cancel, task)
}

// ----- tests -----

#[tokio::test]
async fn streaming_list_then_live_changes_reach_cache_and_handlers() {
    let env = env(false).await;
    let api = Api::<Pod>::namespaced(env.direct.clone(), "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let inf = informer(&env.client);
    let adds = Arc::new(Mutex::new(Vec::new()));
    let a = Arc::clone(&adds);
    inf.add_event_handler(EventHandlerFns::new().on_add(move |p: Arc<Pod>, _| {
        a.lock().unwrap().push(key_of(p.as_ref()));
    }))
    .unwrap();
    let (cancel, task) = run(&inf);
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
            .await
    );
    let stats = inf.status().snapshot();
    assert_eq!((stats.streaming_lists, stats.lists), (1, 0), "{stats:?}");
    api.create(&PostParams::default(), &pod("p3"))
        .await
        .unwrap();
    api.delete("p0", &DeleteParams::default()).await.unwrap();
    converges(&inf, &api, "live changes").await;
    assert!(
        inf.lister()
            .namespace("default")
            .get("p0")
            .unwrap_err()
            .is_not_found()
    );
    let mut seen = adds.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        ["default/p0", "default/p1", "default/p2", "default/p3"]
    );
    cancel.cancel();
    task.await.unwrap();
    env.shutdown().await;
}

#[tokio::test]
async fn server_rejecting_streaming_lists_gets_list_and_watch() {
    let env = env(true).await;
    let api = Api::<Pod>::namespaced(env.direct.clone(), "default");
    api.create(&PostParams::default(), &pod("a")).await.unwrap();
    let inf = informer(&env.client);
    let (cancel, task) = run(&inf);
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
            .await
    );
    let stats = inf.status().snapshot();
    assert_eq!(stats.streaming_list_fallbacks, 1, "{stats:?}");
    assert_eq!(stats.lists, 1);
    api.create(&PostParams::default(), &pod("b")).await.unwrap();
    converges(&inf, &api, "after fallback").await;
    cancel.cancel();
    task.await.unwrap();
    env.shutdown().await;
}

#[tokio::test]
async fn converges_after_drops_compaction_500s_429s_and_deletes_while_disconnected() {
    let env = env(false).await;
    let api = Api::<Pod>::namespaced(env.direct.clone(), "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let inf = informer(&env.client);
    let tombstones = Tombstones::default();
    let t = tombstones.clone();
    inf.add_event_handler(EventHandlerFns::new().on_delete(move |d: Deleted<Pod>| {
        if let Deleted::Tombstone { key, last_known } = d {
            let rv = last_known
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            t.0.lock().unwrap().push((key, rv));
        }
    }))
    .unwrap();
    let (cancel, task) = run(&inf);
    assert!(
        inf.wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
            .await
    );

    // 1. A dropped watch: resumes from the last RV without a relist. (The stream must have
    //    delivered an event first: a watch that ends within 1 s with no events is a "very short
    //    watch", which relists, as in client-go.)
    api.create(&PostParams::default(), &pod("before-drop"))
        .await
        .unwrap();
    converges(&inf, &api, "event before the drop").await;
    let before = inf.status().snapshot();
    env.proxy.cut_watches();
    api.create(&PostParams::default(), &pod("after-drop"))
        .await
        .unwrap();
    converges(&inf, &api, "dropped watch").await;
    let after = inf.status().snapshot();
    assert_eq!(
        (after.lists, after.streaming_lists),
        (before.lists, before.streaming_lists),
        "a dropped watch is resumed, not relisted"
    );
    assert!(after.watches > before.watches);

    // 2. Deleted while disconnected + compaction: the resumed watch gets 410, the relist sees
    //    the object gone and handlers get a tombstone with its last known state.
    let last_rv = inf
        .indexer()
        .get("default/p1")
        .unwrap()
        .metadata
        .resource_version
        .clone()
        .unwrap();
    let watches_before = env.proxy.with(|f| f.watches);
    // Hold the reconnect back with 429s while the server changes underneath.
    env.proxy.with(|f| f.watch_429 = 2);
    env.proxy.cut_watches();
    api.delete("p1", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &pod("while-away"))
        .await
        .unwrap();
    env.server.compact();
    converges(&inf, &api, "410 relist").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while tombstones.0.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no tombstone");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *tombstones.0.lock().unwrap(),
        [("default/p1".to_owned(), last_rv)]
    );
    assert!(inf.status().snapshot().expired >= 1);
    assert!(env.proxy.with(|f| f.watches) > watches_before + 2);

    // 3. 500s: the streaming list fails, the LIST it falls back to fails, twice; the reflector
    //    backs off and retries until it succeeds.
    env.proxy.with(|f| {
        f.list_500 = 2;
        f.streaming_500 = 2;
        f.watch_429 = 1;
    });
    env.proxy.cut_watches();
    api.delete("p2", &DeleteParams::default()).await.unwrap();
    env.server.compact();
    converges(&inf, &api, "500s on list").await;
    assert_eq!(
        env.proxy.with(|f| (f.list_500, f.streaming_500)),
        (0, 0),
        "every injected 500 was met"
    );
    assert!(inf.status().snapshot().streaming_list_fallbacks >= 2);

    cancel.cancel();
    task.await.unwrap();
    env.shutdown().await;
}

#[tokio::test]
async fn factory_over_the_client_shares_one_watch() {
    let env = env(false).await;
    let api = Api::<Pod>::namespaced(env.direct.clone(), "default");
    api.create(&PostParams::default(), &pod("x")).await.unwrap();
    let factory = SharedInformerFactory::new(env.client.clone(), Duration::ZERO);
    let scope = InformerScope {
        namespace: Some("default".into()),
        ..Default::default()
    };
    let a = factory.informer_for::<Pod>(scope.clone());
    let b = factory.informer_for::<Pod>(scope);
    let cancel = CancellationToken::new();
    factory.start(&cancel);
    let synced = factory
        .wait_for_cache_sync(Instant::now() + Duration::from_secs(30))
        .await;
    assert!(synced.values().all(|s| *s));
    assert_eq!(env.proxy.with(|f| f.watches), 1, "one informer, one watch");
    assert!(Arc::ptr_eq(
        &a.indexer().get("default/x").unwrap(),
        &b.indexer().get("default/x").unwrap()
    ));
    factory.shutdown().await;
    env.shutdown().await;
}
