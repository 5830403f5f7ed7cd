//! A restart from `--data-dir` loads the objects and the watch history as their JSON bytes,
//! not as trees (`embedded_apiserver::storage::durable`, "Loading"): right after the restart no
//! object holds a tree, each version is one allocation shared by the history and the live map,
//! and watches from an old revision, a watch from `resourceVersion=0`, plain and paged LISTs
//! serve exactly the bytes they served before the restart without decoding anything for good.

use crate::support::apiserver::{ATS, CMS, TestClient};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use embedded_apiserver::ApiServer;
use embedded_apiserver::internals::store::{Change, State, Stored};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const AT_STORAGE: &str = "cnat.programming-kubernetes.info/ats";
const CM_STORAGE: &str = "core/configmaps";

async fn start(dir: &std::path::Path) -> embedded_apiserver::ApiServerHandle {
    ApiServer::builder()
        .data_dir(dir)
        .start()
        .await
        .expect("the server starts")
}

fn client(h: &embedded_apiserver::ApiServerHandle) -> TestClient {
    TestClient::from_parts(h.url(), h.token(), h.ca_pem(), false)
}

/// The first `n` lines of a watch, as the server wrote them (bytes, not re-encoded).
async fn watch_lines(c: &TestClient, path: &str, n: usize) -> Vec<String> {
    let resp = c.raw("GET", path, &[], vec![], true).await;
    assert_eq!(resp.status(), 200, "watch {path}");
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    while lines.len() < n {
        if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            lines.push(String::from_utf8(line).expect("UTF-8"));
            continue;
        }
        let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .expect("no watch event within 20 s")
            .expect("the watch ended early")
            .expect("a frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    lines
}

/// The raw body of a GET.
async fn get_raw(c: &TestClient, path: &str) -> String {
    let resp = c.raw("GET", path, &[], vec![], true).await;
    assert_eq!(resp.status(), 200, "GET {path}");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// Every page of a paged LIST at `rv` (limit 3), as raw bodies.
async fn paged(c: &TestClient, path: &str, rv: &str) -> Vec<String> {
    let mut pages = vec![];
    let mut next = format!("{path}?limit=3&resourceVersion={rv}");
    loop {
        let body = get_raw(c, &next).await;
        let page: Value = serde_json::from_str(&body).expect("JSON");
        let token = page["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        pages.push(body);
        if token.is_empty() {
            return pages;
        }
        next = format!("{path}?limit=3&continue={token}");
    }
}

/// The objects of the test's two resources, live and in the history, that hold a tree.
fn decoded(s: &State, since: u64) -> Vec<String> {
    let mut out = vec![];
    for storage in [AT_STORAGE, CM_STORAGE] {
        for o in s.list_shared(storage, Some("default")) {
            if o.is_decoded() {
                out.push(format!("live {storage} {:?}", o.key()));
            }
        }
    }
    for c in s.changes_since(since).expect("in the window") {
        if c.storage != AT_STORAGE && c.storage != CM_STORAGE {
            continue;
        }
        if c.object.is_decoded() || c.prev.as_ref().is_some_and(|p| p.is_decoded()) {
            out.push(format!("change {} {}", c.rv, c.storage));
        }
    }
    out
}

/// Each version is one allocation: a change's previous object is the object of the key's
/// change before it, and the live object is the newest change's.
fn assert_shared(s: &State, since: u64) {
    let changes: Vec<Arc<Change>> = s.changes_since(since).expect("in the window");
    let mut newest: HashMap<(String, (String, String)), Arc<Stored>> = HashMap::new();
    let mut shared_prev = 0;
    for c in &changes {
        let key = (c.storage.to_string(), c.object.key());
        if let (Some(prev), Some(before)) = (&c.prev, newest.get(&key)) {
            assert!(Arc::ptr_eq(prev, before), "change {}: prev", c.rv);
            shared_prev += 1;
        }
        newest.insert(key, c.object.clone());
    }
    assert!(shared_prev >= 8, "{shared_prev}");
    for storage in [AT_STORAGE, CM_STORAGE] {
        for o in s.list_shared(storage, Some("default")) {
            let newest = &newest[&(storage.to_owned(), o.key())];
            assert!(Arc::ptr_eq(o, newest), "live {storage} {:?}", o.key());
        }
    }
}

#[tokio::test]
async fn after_a_restart_objects_and_history_stay_bytes_through_watches_and_lists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = start(dir.path()).await;
    let c = client(&first);
    c.install_at_crd().await;
    let rv0 = c.get(CMS).await.body["metadata"]["resourceVersion"]
        .as_str()
        .expect("list revision")
        .to_owned();
    // Ats (a custom resource: its watches may serve the stored bytes as they are) and
    // ConfigMaps (built-in: served in Go's field order, so encoded again), created, updated
    // twice, one of each deleted.
    for i in 0..5 {
        let at = crate::support::apiserver::at(&format!("at-{i}"));
        assert_eq!(c.post(ATS, &at).await.code, 201);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i}"), "labels": {"i": i.to_string()}},
                        "data": {"v": "0", "\u{e9}\"q": "x"}});
        assert_eq!(c.post(CMS, &cm).await.code, 201);
    }
    for round in 1..=2 {
        for i in 0..5 {
            let merge = "application/merge-patch+json";
            let r = c
                .patch(
                    &format!("{ATS}/at-{i}/status"),
                    merge,
                    &json!({"status": {"phase": if round == 1 { "RUNNING" } else { "DONE" }}}),
                )
                .await;
            assert_eq!(r.code, 200, "{}", r.body);
            let r = c
                .patch(
                    &format!("{CMS}/cm-{i}"),
                    merge,
                    &json!({"data": {"v": round.to_string()}}),
                )
                .await;
            assert_eq!(r.code, 200, "{}", r.body);
        }
    }
    assert_eq!(c.delete(&format!("{ATS}/at-4"), None).await.code, 200);
    assert_eq!(c.delete(&format!("{CMS}/cm-4"), None).await.code, 200);
    // 5 creations, 10 updates and a deletion of each resource.
    let events = 16;
    let watches = [
        format!("{ATS}?watch=1&resourceVersion={rv0}"),
        format!("{CMS}?watch=1&resourceVersion={rv0}"),
    ];
    let initial = [
        format!("{ATS}?watch=1&resourceVersion=0"),
        format!("{CMS}?watch=1&resourceVersion=0"),
    ];
    let lists = [
        ATS.to_owned(),
        format!("{ATS}?resourceVersion=0"),
        CMS.to_owned(),
    ];
    let mut before = vec![];
    for w in &watches {
        before.push(watch_lines(&c, w, events).await);
    }
    for w in &initial {
        before.push(watch_lines(&c, w, 4).await);
    }
    let mut lists_before = vec![];
    for l in &lists {
        lists_before.push(get_raw(&c, l).await);
    }
    let paged_before = paged(&c, ATS, &rv0).await;
    let rv0: u64 = rv0.parse().expect("a number");
    let revision = first.store().resource_version();
    first.shutdown().await;
    drop(first);

    let second = start(dir.path()).await;
    let store = second.store();
    // The counter continues (a start may write an object of its own, never an older revision).
    assert!(store.resource_version() >= revision);
    store.read(|s| {
        assert_eq!(decoded(s, rv0), Vec::<String>::new(), "loaded as bytes");
        assert_shared(s, rv0);
    });
    let c = client(&second);
    let mut after = vec![];
    for w in &watches {
        after.push(watch_lines(&c, w, events).await);
    }
    for w in &initial {
        after.push(watch_lines(&c, w, 4).await);
    }
    assert_eq!(after, before, "the same events, byte for byte");
    let mut lists_after = vec![];
    for l in &lists {
        lists_after.push(get_raw(&c, l).await);
    }
    // The same items; the lists' own revision is the current one (a start may write).
    let items = |lists: &[String]| -> Vec<Value> {
        lists
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON")["items"].clone())
            .collect()
    };
    assert_eq!(items(&lists_after), items(&lists_before));
    assert_eq!(paged(&c, ATS, &rv0.to_string()).await, paged_before);
    store.read(|s| {
        assert_eq!(
            decoded(s, rv0),
            Vec::<String>::new(),
            "watches and lists decode nothing for good"
        );
        assert_shared(s, rv0);
    });
    // A GET reads the object as a tree (so the check above can see one).
    assert_eq!(c.get(&format!("{CMS}/cm-0")).await.code, 200);
    store.read(|s| assert_eq!(decoded(s, rv0).len(), 2, "{:?}", decoded(s, rv0)));
    second.shutdown().await;
}
