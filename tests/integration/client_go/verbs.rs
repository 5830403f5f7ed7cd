//! The client against the embedded API server, over HTTPS with a bearer token (from the
//! server's own kubeconfig) and over plain HTTP: every verb on a built-in kind and on a custom
//! resource, paging, error mapping, watches (resume, bookmarks, streaming lists, 410).

use std::time::Duration;

use embedded_cluster::{Cluster, ClusterHandle};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use sample_client_go::cache::ListerWatcher;
use sample_client_go::client::config::{Auth, Secret};
use sample_client_go::client::{
    Api, Client, Config, DeleteParams, DeleteResponse, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use sample_operators::apis::At;
use serde_json::json;

async fn https_server() -> (ClusterHandle, Client) {
    let server = Cluster::builder().start().await.unwrap();
    let mut cfg = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    cfg.qps = 0.0;
    let client = Client::new(cfg).unwrap();
    (server, client)
}

async fn http_server() -> (ClusterHandle, Client) {
    let server = Cluster::builder().plain_http(true).start().await.unwrap();
    // clientcmd drops a kubeconfig's credentials for http:// servers; set the token directly.
    let mut cfg = Config::new(Config::parse_server(server.url()).unwrap());
    cfg.auth = Auth::Bearer {
        token: Some(Secret::new(server.token())),
        file: None,
    };
    cfg.qps = 0.0;
    let client = Client::new(cfg).unwrap();
    (server, client)
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

async fn every_verb(server: &ClusterHandle, client: Client) {
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    assert_eq!(pods.namespace(), Some("default"));
    let pp = PostParams::default();

    let created = pods.create(&pp, &pod("p1")).await.unwrap();
    let rv1 = created.metadata.resource_version.clone().unwrap();
    assert!(
        pods.create(&pp, &pod("p1"))
            .await
            .unwrap_err()
            .is_already_exists()
    );
    let got = pods.get("p1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert!(pods.get_opt("nope").await.unwrap().is_none());
    assert!(pods.get("nope").await.unwrap_err().is_not_found());

    // update with the current resourceVersion, then a stale one: 409 Conflict.
    let mut changed = got.clone();
    changed.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    let updated = pods.update(&pp, &changed).await.unwrap();
    assert_ne!(
        updated.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    assert!(pods.update(&pp, &changed).await.unwrap_err().is_conflict());

    // status subresource
    let mut with_status = updated.clone();
    with_status.status = Some(serde_json::from_value(json!({"phase": "Running"})).unwrap());
    let s = pods.update_status(&pp, &with_status).await.unwrap();
    assert_eq!(s.status.unwrap().phase.as_deref(), Some("Running"));
    let s = pods
        .patch_status(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.unwrap().phase.as_deref(), Some("Succeeded"));

    // patches of every kind
    let p = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.as_ref().unwrap()["m"], "1");
    let p = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Json(json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"}])),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.as_ref().unwrap()["j"], "2");
    let p = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "3"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.as_ref().unwrap()["s"], "3");
    let p = pods
        .patch(
            "p1",
            &PatchParams { field_manager: Some("client-test".into()), force: true, ..Default::default() },
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "labels": {"ssa": "4"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.as_ref().unwrap()["ssa"], "4");

    // dry run changes nothing
    let before = server.resource_version();
    pods.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &pod("dry"),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("dry").await.unwrap().is_none());
    assert_eq!(server.resource_version(), before);

    // list across namespaces, then delete
    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    pods.delete(
        "p1",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("p1").await.unwrap().is_none());

    // A finalizer keeps the object: delete answers with the object, deletionTimestamp set.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut fin = cm("fin", json!({}));
    fin.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&pp, &fin).await.unwrap();
    match cms.delete("fin", &DeleteParams::default()).await.unwrap() {
        DeleteResponse::Object(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        DeleteResponse::Status(s) => panic!("object with a finalizer reported gone: {s:?}"),
    }
    cms.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("fin").await.unwrap().is_none());

    // delete_collection by label
    for (n, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        cms.create(&pp, &cm(n, json!({"app": app}))).await.unwrap();
    }
    let lp = ListParams {
        label_selector: Some("app=x".into()),
        ..Default::default()
    };
    cms.delete_collection(&DeleteParams::default(), &lp)
        .await
        .unwrap();
    let left: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| ["a", "b", "c"].contains(&n.as_str()))
        .collect();
    assert_eq!(left, ["c"]);

    // cluster-scoped kind
    let nss: Api<Namespace> = Api::cluster(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    nss.create(&pp, &ns).await.unwrap();
    assert!(nss.get("team").await.is_ok());
}

#[tokio::test]
async fn every_verb_over_https_with_a_token() {
    let (server, client) = https_server().await;
    assert!(server.url().starts_with("https://"));
    let version = client.apiserver_version().await.unwrap();
    assert!(!version.git_version.is_empty());
    every_verb(&server, client).await;
    assert!(server.request_log().count("create", "pods") >= 1);
    server.shutdown().await;
}

#[tokio::test]
async fn every_verb_over_plain_http() {
    let (server, client) = http_server().await;
    every_verb(&server, client).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized() {
    let server = Cluster::builder().start().await.unwrap();
    let yaml = server
        .kubeconfig_yaml()
        .replace(server.token(), "wrong-token");
    let client = Client::new(Config::from_kubeconfig_yaml(&yaml, None).unwrap()).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap_err()
            .is_unauthorized()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_plain_http_servers_own_kubeconfig_works_and_a_wrong_token_is_still_refused() {
    // clientcmd (and this crate's loader) send no credentials to an http:// server, so the
    // kubeconfig a plain-HTTP server writes carries a token nobody sends: the server serves
    // token-less requests as its bootstrap user, like kube-apiserver's old insecure port.
    let server = Cluster::builder().plain_http(true).start().await.unwrap();
    let client =
        Client::new(Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap())
            .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .unwrap();
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let mut cfg = Config::new(Config::parse_server(server.url()).unwrap());
    cfg.auth = Auth::Bearer {
        token: Some(Secret::new("wrong-token".to_string())),
        file: None,
    };
    let wrong: Api<ConfigMap> = Api::default_namespaced(Client::new(cfg).unwrap());
    assert!(
        wrong
            .list(&ListParams::default())
            .await
            .unwrap_err()
            .is_unauthorized()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn custom_resources_and_422() {
    let (server, client) = https_server().await;
    let crds: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    crds.create(
        &PostParams::default(),
        &sample_operators::apis::crds::crd::<At>().unwrap(),
    )
    .await
    .unwrap();
    let ats: Api<At> = Api::namespaced(client.clone(), "default");
    let at: At = serde_json::from_value(json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
        "metadata": {"name": "example-at"},
        "spec": {"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo YAY"}}
    }))
    .unwrap();
    let created = ats.create(&PostParams::default(), &at).await.unwrap();
    assert_eq!(created.spec.run.command, "echo YAY");
    let mut s = created.clone();
    s.status = Some(serde_json::from_value(json!({"phase": "DONE"})).unwrap());
    let s = ats.update_status(&PostParams::default(), &s).await.unwrap();
    assert!(s.status.is_some());
    // Schema violation: command must not be empty.
    let mut bad = at.clone();
    bad.metadata.name = Some("bad".into());
    bad.spec.run.command = String::new();
    let e = ats.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(e.is_invalid(), "{e}");
    server.shutdown().await;
}

#[tokio::test]
async fn list_all_pages_with_a_small_limit() {
    let (server, client) = https_server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..7 {
        cms.create(
            &PostParams::default(),
            &cm(&format!("cm-{i}"), json!({"page": "yes"})),
        )
        .await
        .unwrap();
    }
    server.request_log().clear();
    let lp = ListParams {
        label_selector: Some("page=yes".into()),
        limit: Some(2),
        ..Default::default()
    };
    let first = cms.list(&lp).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert!(first.metadata.continue_.is_some());
    let all = cms.list_all(&lp).await.unwrap();
    assert_eq!(all.items.len(), 7);
    assert!(all.metadata.resource_version.is_some());
    // 1 single page + 4 pages of 2 for seven objects.
    assert_eq!(server.request_log().count("list", "configmaps"), 5);
    server.shutdown().await;
}

#[tokio::test]
async fn watch_resumes_and_expired_versions_are_gone() {
    let (server, client) = https_server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let wp = WatchParams {
        resource_version: Some(rv.clone()),
        allow_watch_bookmarks: true,
        timeout_seconds: Some(30),
        ..Default::default()
    };
    let mut w = ListerWatcher::watch(&cms, &wp).await.unwrap();
    let c = cms
        .create(&PostParams::default(), &cm("w", json!({})))
        .await
        .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("w", &DeleteParams::default()).await.unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        match tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(o) => {
                assert_eq!(o.metadata.uid, c.metadata.uid);
                kinds.push("ADDED")
            }
            WatchEvent::Modified(_) => kinds.push("MODIFIED"),
            WatchEvent::Deleted(_) => kinds.push("DELETED"),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(s) => panic!("{s:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    drop(w);

    // After compaction the old resourceVersion is gone: 410, typed.
    server.compact();
    let gone = match cms.watch(&wp).await {
        Err(e) => e.is_gone(),
        Ok(mut w) => match w.next().await {
            Some(Ok(WatchEvent::Error(s))) => s.code == Some(410),
            other => panic!("expected 410, got {other:?}"),
        },
    };
    assert!(gone);
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_ends_with_the_initial_events_bookmark() {
    let (server, client) = https_server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for n in ["s1", "s2"] {
        cms.create(&PostParams::default(), &cm(n, json!({"stream": "1"})))
            .await
            .unwrap();
    }
    let wp = WatchParams {
        label_selector: Some("stream=1".into()),
        send_initial_events: true,
        allow_watch_bookmarks: true,
        ..Default::default()
    };
    let mut w = cms.watch(&wp).await.unwrap();
    let mut added = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) if b.initial_events_end => {
                assert!(!b.resource_version.is_empty());
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(added, 2);
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn throttle_caps_the_rate_against_the_server() {
    let server = Cluster::builder().plain_http(true).start().await.unwrap();
    let mut cfg = Config::new(Config::parse_server(server.url()).unwrap());
    cfg.auth = Auth::Bearer {
        token: Some(Secret::new(server.token())),
        file: None,
    };
    cfg.qps = 10.0;
    cfg.burst = 5;
    cfg.timeout = None;
    let cms: Api<ConfigMap> = Api::namespaced(Client::new(cfg).unwrap(), "default");
    let start = tokio::time::Instant::now();
    let worker = {
        let cms = cms.clone();
        tokio::spawn(async move {
            for _ in 0..30 {
                cms.get_opt("absent").await.unwrap();
            }
        })
    };
    // Whatever happened until now (virtual time), the bucket allowed at most burst + qps*t.
    for checkpoint in [1u64, 2] {
        tokio::time::sleep_until(start + Duration::from_secs(checkpoint)).await;
        let n = server.request_log().count("get", "configmaps");
        assert!(n <= 5 + 10 * checkpoint, "{n} requests by {checkpoint}s");
    }
    worker.await.unwrap();
    assert_eq!(server.request_log().count("get", "configmaps"), 30);
    // 25 requests beyond the burst need at least 2.5 s of refill.
    assert!(
        start.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        start.elapsed()
    );
    server.shutdown().await;
}

/// The embedded server's `429 Too Many Requests` + `Retry-After` fault (what API Priority and
/// Fairness answers): the client waits the asked seconds and sends the request again, even a
/// create, because a 429 means the server did not process it. One object results.
///
/// The server runs in this process over real sockets, so the clock is the real one (a paused
/// clock would jump over the socket waits); the server's request log shows the 429 and the
/// 201 that followed it, and the client's metrics show one retry.
#[tokio::test]
async fn retry_after_from_the_embedded_server_is_honoured() {
    use embedded_apiserver::faults::Fault;
    let (server, client) = https_server().await;
    server.faults().inject(
        Fault::fail(429)
            .verb("create")
            .resource("configmaps")
            .retry_after(1),
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let before = tokio::time::Instant::now();
    let created = cms
        .create(&PostParams::default(), &cm("throttled", json!({})))
        .await
        .expect("the retry after the 429 succeeds");
    let waited = before.elapsed();
    assert_eq!(created.metadata.name.as_deref(), Some("throttled"));

    let log = server.request_log();
    assert_eq!(log.fault_count("fail-429"), 1, "the fault fired once");
    assert_eq!(
        log.count_code("create", "configmaps", 429),
        1,
        "one 429 answer"
    );
    assert_eq!(
        log.count_code("create", "configmaps", 201),
        1,
        "then one 201: the retry"
    );
    assert_eq!(log.count("create", "configmaps"), 2, "nothing else");
    // The client slept the server's Retry-After before the second attempt: a lower bound only,
    // set by the client's own sleep, so it cannot flake.
    assert!(
        waited >= Duration::from_secs(1),
        "the retry came before Retry-After elapsed: {waited:?}"
    );
    let m = client.metrics().snapshot();
    assert_eq!((m.too_many_requests, m.retries), (1, 1));
    let named: Vec<_> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.name.as_deref() == Some("throttled"))
        .collect();
    assert_eq!(named.len(), 1, "one object, not two");
    server.shutdown().await;
}

/// An `Api` that skips `metadata.managedFields` lists, watches and writes the same objects as
/// one that decodes them whole, minus that field alone, and a GET still answers whole objects.
#[tokio::test]
async fn lists_and_watches_without_managed_fields_equal_whole_objects_cleared_of_them() {
    let (server, client) = https_server().await;
    let whole: Api<ConfigMap> = Api::namespaced(client, "default");
    let slim = whole.clone().without_managed_fields();
    let cleared = |mut cm: ConfigMap| {
        assert!(cm.metadata.managed_fields.is_some(), "{cm:?}");
        cm.metadata.managed_fields = None;
        cm
    };
    for n in ["m1", "m2", "m3"] {
        whole
            .create(&PostParams::default(), &cm(n, json!({"mf": "1"})))
            .await
            .unwrap();
    }
    let lp = ListParams {
        label_selector: Some("mf=1".into()),
        ..Default::default()
    };
    let want: Vec<ConfigMap> = whole.list(&lp).await.unwrap().items;
    assert_eq!(want.len(), 3);
    let got = slim.list(&lp).await.unwrap().items;
    assert_eq!(got, want.into_iter().map(cleared).collect::<Vec<_>>());

    let wp = WatchParams {
        label_selector: Some("mf=1".into()),
        resource_version: Some(
            slim.list(&lp)
                .await
                .unwrap()
                .metadata
                .resource_version
                .unwrap(),
        ),
        ..Default::default()
    };
    let mut w = slim.watch(&wp).await.unwrap();
    let updated = whole
        .patch(
            "m2",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Modified(cm) => assert_eq!(cm, cleared(updated)),
        other => panic!("{other:?}"),
    }
    // A get through the same Api is whole.
    assert!(
        slim.get("m1")
            .await
            .unwrap()
            .metadata
            .managed_fields
            .is_some()
    );
    // Its writes answer the object as stored, cleared of the field.
    let created = slim
        .create(&PostParams::default(), &cm("m4", json!({"mf": "1"})))
        .await
        .unwrap();
    assert_eq!(created, cleared(whole.get("m4").await.unwrap()));
    let patched = slim
        .patch(
            "m4",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "p"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched, cleared(whole.get("m4").await.unwrap()));
    let mut again = patched.clone();
    again.data = Some([("k".to_owned(), "u".to_owned())].into());
    let updated = slim.update(&PostParams::default(), &again).await.unwrap();
    assert_eq!(updated, cleared(whole.get("m4").await.unwrap()));
    server.shutdown().await;
}
