//! Paged LISTs are one consistent snapshot, whatever is written between the pages, and an
//! exact-revision LIST shows the past: the embedded API server over HTTPS.
//!
//! The expected contents are taken independently of the server's snapshot machinery: a plain
//! LIST at the current revision immediately before the first page (nothing is written in
//! between, and both answer the same resourceVersion), compared item by item — name,
//! resourceVersion and data — with what the pages return.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use embedded_cluster::Cluster;
use serde_json::{Value, json};
use support::apiserver::*;

const N: usize = 1000;
const PAGE: usize = 100;

fn name(i: usize) -> String {
    format!("cm-{i:04}")
}

fn configmap(name: &str, v: &str, team: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": {"team": team}}, "data": {"v": v}})
}

/// Creates `cm-0000` … `cm-<n-1>`, the even ones labelled `team=red`, the odd ones `blue`.
async fn create_many(c: &TestClient, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let bodies: Vec<Value> = chunk
            .iter()
            .map(|&i| {
                let team = if i % 2 == 0 { "red" } else { "blue" };
                configmap(&name(i), "v0", team)
            })
            .collect();
        let posts = bodies.iter().map(|b| c.post(CMS, b));
        for a in futures_util::future::join_all(posts).await {
            assert_eq!(a.code, 201, "{:?}", a.body);
        }
    }
}

/// `name → (resourceVersion, data.v)` of a list's items.
fn contents(items: &[Value]) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for it in items {
        let name = it["metadata"]["name"].as_str().unwrap().to_owned();
        let rv = it["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        let v = it["data"]["v"].as_str().unwrap_or_default().to_owned();
        assert!(
            out.insert(name.clone(), (rv, v)).is_none(),
            "{name} served twice"
        );
    }
    out
}

fn items(a: &Answer) -> Vec<Value> {
    assert_eq!(a.code, 200, "{:?}", a.body);
    a.body["items"].as_array().unwrap().clone()
}

/// Writes from another client until stopped: creates, updates and deletes all over the key
/// range, counted.
fn spawn_writer(
    server: &embedded_cluster::ClusterHandle,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    let c = TestClient::new(server);
    tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(99);
        let mut k = 0;
        while !stop.load(Ordering::SeqCst) {
            let i = rng.usize(..N);
            let code = match k % 3 {
                0 => {
                    c.post(CMS, &configmap(&format!("cm-{i:04}-new{k}"), "new", "red"))
                        .await
                        .code
                }
                1 => {
                    let patch = json!({"data": {"v": format!("writer-{k}")}});
                    c.patch(
                        &format!("{CMS}/{}", name(i)),
                        "application/merge-patch+json",
                        &patch,
                    )
                    .await
                    .code
                }
                _ => c.delete(&format!("{CMS}/{}", name(i)), None).await.code,
            };
            // An object the main task or this writer already deleted is a 404.
            assert!(matches!(code, 200 | 201 | 404), "writer got {code}");
            writes.fetch_add(1, Ordering::SeqCst);
            k += 1;
            tokio::task::yield_now().await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_show_the_first_pages_snapshot_while_others_write() {
    let server = start().await;
    let c = TestClient::new(&server);
    create_many(&c, N).await;

    let full = c.get(CMS).await;
    let expected = contents(&items(&full));
    assert_eq!(expected.len(), N);
    let first = c.get(&format!("{CMS}?limit={PAGE}")).await;
    let rv = first.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(full.body["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(first.body["metadata"]["remainingItemCount"], N - PAGE);

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicUsize::new(0));
    let writer = spawn_writer(&server, stop.clone(), writes.clone());

    let mut served = items(&first);
    let mut token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut page = 1;
    loop {
        // Between pages, on top of the writer: change what the next pages will show.
        let ahead = (page + 1) * PAGE + 7;
        if ahead < N {
            let upd = c
                .patch(
                    &format!("{CMS}/{}", name(ahead)),
                    "application/merge-patch+json",
                    &json!({"data": {"v": "changed"}}),
                )
                .await;
            assert!(matches!(upd.code, 200 | 404), "{:?}", upd.body);
            let del = c.delete(&format!("{CMS}/{}", name(ahead + 1)), None).await;
            assert!(matches!(del.code, 200 | 404), "{:?}", del.body);
            let new = c
                .post(
                    CMS,
                    &configmap(&format!("{}-inserted", name(ahead)), "new", "red"),
                )
                .await;
            assert_eq!(new.code, 201, "{:?}", new.body);
        }
        let next = c.get(&format!("{CMS}?limit={PAGE}&continue={token}")).await;
        assert_eq!(
            next.body["metadata"]["resourceVersion"],
            rv.as_str(),
            "every page answers the first page's revision"
        );
        served.extend(items(&next));
        page += 1;
        match next.body["metadata"]["continue"].as_str() {
            Some(t) => {
                assert_eq!(
                    next.body["metadata"]["remainingItemCount"],
                    N - served.len(),
                    "page {page}"
                );
                token = t.to_owned();
            }
            None => break,
        }
    }
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert!(
        writes.load(Ordering::SeqCst) > 0,
        "the writer wrote while the pages were read"
    );
    // Exactly the snapshot: no object twice, none missing, none added, the old versions of
    // updated objects and the deleted ones still there.
    assert_eq!(page, N / PAGE);
    assert_eq!(contents(&served), expected);

    // The same revision asked for exactly, in one piece and paged, still shows it.
    let exact = c
        .get(&format!(
            "{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(exact.body["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(contents(&items(&exact)), expected);
    let paged_exact = c
        .get(&format!("{CMS}?limit=600&resourceVersion={rv}"))
        .await;
    assert_eq!(items(&paged_exact).len(), 600);
    assert_eq!(paged_exact.body["metadata"]["remainingItemCount"], N - 600);
    // And the present differs from it.
    let now = c.get(CMS).await;
    assert_ne!(contents(&items(&now)), expected);
    server.shutdown().await;
}

#[tokio::test]
async fn an_exact_list_at_an_older_revision_returns_the_old_state() {
    let server = start().await;
    let c = TestClient::new(&server);
    create_many(&c, 20).await;
    let before = c.get(CMS).await;
    let rv = before.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let expected = contents(&items(&before));
    for i in 0..5 {
        let up = c
            .patch(
                &format!("{CMS}/{}", name(i)),
                "application/merge-patch+json",
                &json!({"data": {"v": "later"}}),
            )
            .await;
        assert_eq!(up.code, 200);
        assert_eq!(
            c.delete(&format!("{CMS}/{}", name(10 + i)), None)
                .await
                .code,
            200
        );
        assert_eq!(
            c.post(CMS, &configmap(&format!("late-{i}"), "x", "red"))
                .await
                .code,
            201
        );
    }
    let old = c
        .get(&format!(
            "{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(old.body["metadata"]["resourceVersion"], rv.as_str());
    assert_eq!(contents(&items(&old)), expected);
    // Selectors apply to the old state: the old versions of the red ones.
    let red = c
        .get(&format!(
            "{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact&labelSelector=team%3Dred"
        ))
        .await;
    let red_expected: BTreeMap<_, _> = expected
        .iter()
        .filter(|(n, _)| {
            n.trim_start_matches("cm-")
                .parse::<usize>()
                .is_ok_and(|i| i % 2 == 0)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(contents(&items(&red)), red_expected);
    // The current state is not the old one.
    let now = contents(&items(&c.get(CMS).await));
    assert_eq!(now.len(), 20);
    assert!(now.contains_key("late-0") && !now.contains_key(&name(10)));
    assert_eq!(now[&name(0)].1, "later");
    server.shutdown().await;
}

#[tokio::test]
async fn selector_pages_resume_in_the_snapshot_and_may_end_empty() {
    let server = start().await;
    let c = TestClient::new(&server);
    create_many(&c, 40).await;
    let mut served = vec![];
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let q = if token.is_empty() {
            format!("{CMS}?limit=5&labelSelector=team%3Dred")
        } else {
            format!("{CMS}?limit=5&labelSelector=team%3Dred&continue={token}")
        };
        let p = c.get(&q).await;
        // With a selector the server cannot know how many remain.
        assert!(p.body["metadata"].get("remainingItemCount").is_none());
        served.extend(items(&p));
        pages += 1;
        // Writes between pages: a new red object that sorts first, red ones turned blue.
        let new = c
            .post(CMS, &configmap(&format!("a-{pages}"), "x", "red"))
            .await;
        assert_eq!(new.code, 201);
        let recolor = c
            .patch(
                &format!("{CMS}/{}", name(38)),
                "application/merge-patch+json",
                &json!({"metadata": {"labels": {"team": "blue"}}}),
            )
            .await;
        assert_eq!(recolor.code, 200);
        match p.body["metadata"]["continue"].as_str() {
            Some(t) => token = t.to_owned(),
            None => break,
        }
    }
    let names: Vec<String> = contents(&served).into_keys().collect();
    let want: Vec<String> = (0..40).step_by(2).map(name).collect();
    assert_eq!(names, want);
    // 20 red objects in pages of 5: the fourth page is full and a key follows it (cm-0039), so
    // like etcd the server hands out a token whose page turns out empty.
    assert_eq!(pages, 5);
    server.shutdown().await;
}

#[tokio::test]
async fn a_compacted_snapshot_is_410_for_tokens_and_exact_lists() {
    let server = Cluster::builder().history_window(50).start().await.unwrap();
    let c = TestClient::new(&server);
    create_many(&c, 30).await;
    let first = c.get(&format!("{CMS}?limit=10")).await;
    let rv = first.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    // Still within the window: the token works.
    let ok = c.get(&format!("{CMS}?limit=10&continue={token}")).await;
    assert_eq!(ok.code, 200);
    // 60 writes push the first page's revision out of a 50-change window.
    for i in 0..60 {
        let up = c
            .patch(
                &format!("{CMS}/{}", name(i % 30)),
                "application/merge-patch+json",
                &json!({"data": {"v": format!("w{i}")}}),
            )
            .await;
        assert_eq!(up.code, 200);
    }
    let gone = c.get(&format!("{CMS}?limit=10&continue={token}")).await;
    assert_eq!(gone.code, 410, "{:?}", gone.body);
    assert_eq!(gone.body["reason"], "Expired");
    assert_eq!(
        gone.body["message"],
        "The provided continue parameter is too old to display a consistent list result. \
         You can start a new list without the continue parameter, or use the continue token in \
         this response to retrieve the remainder of the results. Continuing with the provided \
         token results in an inconsistent list - objects that were created, modified, or \
         deleted between the time the first chunk was returned and now may show up in the list."
    );
    // The Status carries an inconsistent-continue token: the rest of the keys after the first
    // page, at the latest revision (the patched data shows).
    let inconsistent = gone.body["metadata"]["continue"]
        .as_str()
        .expect("metadata.continue in the 410 Status")
        .to_owned();
    let latest = c.get(CMS).await;
    let rest = c
        .get(&format!("{CMS}?limit=100&continue={inconsistent}"))
        .await;
    assert_eq!(rest.code, 200, "{:?}", rest.body);
    assert_eq!(
        rest.body["metadata"]["resourceVersion"],
        latest.body["metadata"]["resourceVersion"]
    );
    let names: Vec<String> = rest.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, (10..30).map(name).collect::<Vec<_>>());
    assert_eq!(rest.body["items"][19]["data"]["v"], "w59");
    assert!(rest.body["metadata"]["continue"].is_null());
    let exact = c
        .get(&format!(
            "{CMS}?resourceVersion={rv}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(exact.code, 410);
    assert_eq!(
        exact.body["message"],
        "The resourceVersion for the provided list is too old."
    );
    server.shutdown().await;
}
