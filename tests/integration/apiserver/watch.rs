//! Watch over real HTTPS: framing, resumption from a resourceVersion, 410 after compaction,
//! bookmarks, timeouts, `sendInitialEvents`, selector transitions, Tables and shutdown.

use crate::support;

use std::time::Duration;

use embedded_cluster::Cluster;
use serde_json::json;
use support::apiserver::*;

fn rv(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_watch_from_the_list_revision_sees_every_later_change_in_order() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("before", json!({}))).await;
    let list = c.get(CMS).await;
    let list_rv = rv(&list.body);
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={list_rv}"))
        .await;
    let a = c.post(CMS, &cm("a", json!({}))).await;
    let b = c
        .patch(
            &format!("{CMS}/a"),
            "application/merge-patch+json",
            &json!({"data": {"k": "2"}}),
        )
        .await;
    c.post(
        "/api/v1/namespaces/kube-system/configmaps",
        &cm("elsewhere", json!({})),
    )
    .await;
    c.delete(&format!("{CMS}/a"), None).await;
    let e1 = w.next().await.unwrap();
    assert_eq!(e1["type"], "ADDED");
    assert_eq!(e1["object"]["kind"], "ConfigMap");
    assert_eq!(rv(&e1["object"]), rv(&a.body));
    let e2 = w.next().await.unwrap();
    assert_eq!(e2["type"], "MODIFIED");
    assert_eq!(rv(&e2["object"]), rv(&b.body));
    // The namespace-scoped watch does not see kube-system.
    let e3 = w.next().await.unwrap();
    assert_eq!(e3["type"], "DELETED");
    assert_eq!(
        e3["object"]["data"]["k"], "2",
        "DELETED carries the last state"
    );
    assert!(
        rv(&e3["object"]) > rv(&b.body) + 1,
        "DELETED carries the deletion revision"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_watch_resumes_from_any_revision_in_the_window() {
    let s = start().await;
    let c = TestClient::new(&s);
    let a = c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    c.delete(&format!("{CMS}/a"), None).await;
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={}", rv(&a.body)))
        .await;
    let e1 = w.next().await.unwrap();
    assert_eq!(
        (
            e1["type"].as_str(),
            e1["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b"))
    );
    let e2 = w.next().await.unwrap();
    assert_eq!(
        (
            e2["type"].as_str(),
            e2["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("a"))
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_watch_without_a_revision_starts_with_synthetic_added_events() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    for q in ["watch=true", "watch=1&resourceVersion=0"] {
        let mut w = c.watch(&format!("{CMS}?{q}")).await;
        let names: Vec<String> = [w.next().await.unwrap(), w.next().await.unwrap()]
            .iter()
            .map(|e| {
                assert_eq!(e["type"], "ADDED");
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(names, ["a", "b"]);
    }
    s.shutdown().await;
}

#[tokio::test]
async fn a_huge_timeout_seconds_is_a_watch_without_timeout_not_a_crash() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({}))).await;
    let mut w = c
        .watch(&format!("{CMS}?watch=true&timeoutSeconds={}", i64::MAX))
        .await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    c.post(CMS, &cm("b", json!({}))).await;
    let e = w.next().await.unwrap();
    assert_eq!(e["object"]["metadata"]["name"], "b");
    s.shutdown().await;
}

#[tokio::test]
async fn a_compacted_revision_gets_200_then_one_410_error_event() {
    let s = start().await;
    let c = TestClient::new(&s);
    let a = c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    s.compact();
    let old = rv(&a.body);
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={old}"))
        .await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["kind"], "Status");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert_eq!(
        e["object"]["message"],
        format!("too old resource version: {old} ({})", s.resource_version())
    );
    assert!(w.next().await.is_none(), "the stream ends after the ERROR");
    s.shutdown().await;
}

/// The history's age bound holds without writes: etcd and the watch cache compact on time, so a
/// client that comes back after the age has passed gets `410` whether or not anyone wrote in
/// between (the server compacts every tenth of the age, at least every second).
#[tokio::test]
async fn the_age_bound_compacts_without_writes() {
    let s = Cluster::builder()
        .history_max_age(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    let a = c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    let old = rv(&a.body);
    // No write from here on: only time passes. Each attempt asks for the same old revision;
    // the first ones may still resume (the age has not passed), then the server has compacted.
    let mut answers = vec![];
    for _ in 0..100 {
        let mut w = c
            .watch(&format!(
                "{CMS}?watch=true&resourceVersion={old}&timeoutSeconds=1"
            ))
            .await;
        let first = w.next().await;
        let gone = first
            .as_ref()
            .is_some_and(|e| e["type"] == "ERROR" && e["object"]["code"] == 410);
        answers.push(first.map(|e| e["type"].clone()));
        if gone {
            s.shutdown().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("a revision older than the age bound still resumed a watch after 10 s: {answers:?}");
}

#[tokio::test]
async fn the_history_window_bounds_how_far_back_a_watch_can_start() {
    let s = Cluster::builder().history_window(3).start().await.unwrap();
    let c = TestClient::new(&s);
    let first = c.post(CMS, &cm("a", json!({}))).await;
    for i in 0..5 {
        c.patch(
            &format!("{CMS}/a"),
            "application/merge-patch+json",
            &json!({"data": {"i": i.to_string()}}),
        )
        .await;
    }
    let mut w = c
        .watch(&format!(
            "{CMS}?watch=true&resourceVersion={}",
            rv(&first.body)
        ))
        .await;
    assert_eq!(w.next().await.unwrap()["object"]["code"], 410);
    // The last three changes are still there.
    let recent = s.resource_version() - 3;
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={recent}"))
        .await;
    for _ in 0..3 {
        assert_eq!(w.next().await.unwrap()["type"], "MODIFIED");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn bookmarks_carry_the_current_revision_and_one_precedes_the_timeout() {
    let s = Cluster::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    let list = c.get(CMS).await;
    let mut w = c
        .watch(&format!(
            "{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={}",
            rv(&list.body)
        ))
        .await;
    // A change elsewhere still moves the bookmark's revision.
    c.post(
        "/api/v1/namespaces/kube-system/configmaps",
        &cm("x", json!({})),
    )
    .await;
    let b = w.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(b["object"]["kind"], "ConfigMap");
    assert_eq!(b["object"]["apiVersion"], "v1");
    assert_eq!(rv(&b["object"]), s.resource_version());

    // Without allowWatchBookmarks nothing is sent; with a timeout the stream ends cleanly,
    // after a final bookmark when they are allowed.
    let mut quiet = c
        .watch(&format!(
            "{CMS}?watch=true&resourceVersion={}&timeoutSeconds=1",
            s.resource_version()
        ))
        .await;
    assert!(quiet.next().await.is_none());
    let mut timed = c
        .watch(&format!(
            "{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds=1",
            s.resource_version()
        ))
        .await;
    let mut last = None;
    while let Some(e) = timed.next().await {
        assert_eq!(e["type"], "BOOKMARK");
        last = Some(e);
    }
    assert!(last.is_some(), "a bookmark precedes the timeout");
    s.shutdown().await;
}

#[tokio::test]
async fn send_initial_events_ends_the_initial_list_with_an_annotated_bookmark() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    let mut w = c
        .watch(&format!(
            "{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion="
        ))
        .await;
    assert_eq!(w.next().await.unwrap()["type"], "ADDED");
    assert_eq!(w.next().await.unwrap()["type"], "ADDED");
    let end = w.next().await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv(&end["object"]), s.resource_version());
    c.post(CMS, &cm("c", json!({}))).await;
    let live = w.next_change().await.unwrap();
    assert_eq!(live["object"]["metadata"]["name"], "c");

    // Invalid combinations are refused before the stream starts.
    let bad = c
        .get(&format!("{CMS}?watch=true&sendInitialEvents=true"))
        .await;
    assert_eq!(bad.code, 422);
    s.shutdown().await;

    let old = Cluster::builder()
        .reject_send_initial_events(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&old);
    let refused = c
        .get(&format!(
            "{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(refused.code, 422);
    assert_eq!(refused.body["reason"], "Invalid");
    old.shutdown().await;
}

#[tokio::test]
async fn objects_moving_in_and_out_of_a_selector_are_added_and_deleted() {
    let s = start().await;
    let c = TestClient::new(&s);
    let mut w = c
        .watch(&format!(
            "{CMS}?watch=true&labelSelector=app%3Dweb&resourceVersion={}",
            s.resource_version()
        ))
        .await;
    c.post(CMS, &cm("a", json!({"app": "db"}))).await;
    let path = format!("{CMS}/a");
    let m = "application/merge-patch+json";
    c.patch(&path, m, &json!({"metadata": {"labels": {"app": "web"}}}))
        .await;
    c.patch(&path, m, &json!({"data": {"k": "2"}})).await;
    let leaving = c
        .patch(&path, m, &json!({"metadata": {"labels": {"app": "db"}}}))
        .await;
    c.patch(&path, m, &json!({"data": {"k": "3"}})).await;
    c.post(CMS, &cm("b", json!({"app": "web"}))).await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["labels"]["app"], "web");
    assert_eq!(w.next().await.unwrap()["type"], "MODIFIED");
    let gone = w.next().await.unwrap();
    assert_eq!(gone["type"], "DELETED");
    assert_eq!(
        gone["object"]["metadata"]["labels"]["app"], "web",
        "last matching content"
    );
    assert_eq!(
        rv(&gone["object"]),
        rv(&leaving.body),
        "at the new revision"
    );
    let next = w.next().await.unwrap();
    assert_eq!(
        next["object"]["metadata"]["name"], "b",
        "changes outside the selector are not sent"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_watch_on_an_object_url_follows_that_object() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    let mut w = c
        .watch(&format!("{CMS}/a?watch=true&resourceVersion=0"))
        .await;
    let first = w.next().await.unwrap();
    assert_eq!(first["object"]["metadata"]["name"], "a");
    c.patch(
        &format!("{CMS}/b"),
        "application/merge-patch+json",
        &json!({"data": {"x": "1"}}),
    )
    .await;
    c.patch(
        &format!("{CMS}/a"),
        "application/merge-patch+json",
        &json!({"data": {"x": "1"}}),
    )
    .await;
    let next = w.next().await.unwrap();
    assert_eq!(next["object"]["metadata"]["name"], "a");
    let mismatch = c
        .get(&format!(
            "{CMS}/a?watch=true&fieldSelector=metadata.name%3Db"
        ))
        .await;
    assert_eq!(mismatch.code, 400);
    s.shutdown().await;
}

#[tokio::test]
async fn a_table_watch_sends_column_definitions_once() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.post(CMS, &cm("a", json!({}))).await;
    let table = [(
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )];
    let resp = c
        .raw(
            "GET",
            &format!("{CMS}?watch=true&resourceVersion=0"),
            &table,
            vec![],
            true,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut w = reader(resp);
    c.post(CMS, &cm("b", json!({}))).await;
    let first = w.next().await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(first["object"]["columnDefinitions"][0]["name"], "Name");
    assert_eq!(first["object"]["rows"][0]["cells"][0], "a");
    let second = w.next().await.unwrap();
    assert!(second["object"]["columnDefinitions"].is_null());
    assert_eq!(second["object"]["rows"][0]["cells"][0], "b");

    let list = read_answer(c.raw("GET", CMS, &table, vec![], true).await).await;
    assert_eq!(
        list.headers.get("content-type").unwrap(),
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    assert_eq!(list.body["kind"], "Table");
    // ConfigMaps print the real server's columns: NAME DATA AGE.
    assert_eq!(list.body["columnDefinitions"][1]["name"], "Data");
    assert_eq!(list.body["rows"][0]["cells"][1], 1);
    assert_eq!(list.body["rows"].as_array().unwrap().len(), 2);
    s.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_watches() {
    let s = start().await;
    let c = TestClient::new(&s);
    let mut w = c
        .watch(&format!(
            "{CMS}?watch=true&resourceVersion={}",
            s.resource_version()
        ))
        .await;
    let stop = tokio::spawn(async move { s.shutdown().await });
    assert!(w.next().await.is_none());
    stop.await.unwrap();
}

#[tokio::test]
async fn a_future_revision_gets_a_504_error_event_unless_it_arrives() {
    let s = start().await;
    let c = TestClient::new(&s);
    let future = s.resource_version() + 100;
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={future}"))
        .await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 504);
    assert_eq!(
        e["object"]["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert!(w.next().await.is_none());

    // One revision ahead, reached while waiting: the watch proceeds normally.
    let next = s.resource_version() + 1;
    let mut w = c
        .watch(&format!("{CMS}?watch=true&resourceVersion={next}"))
        .await;
    c.post(CMS, &cm("a", json!({}))).await;
    c.post(CMS, &cm("b", json!({}))).await;
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "b");
    s.shutdown().await;
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_ends_their_watches() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.install_at_crd().await;
    c.post(ATS, &at("one")).await;
    let mut w = c
        .watch(&format!(
            "{ATS}?watch=true&resourceVersion={}",
            s.resource_version()
        ))
        .await;
    let del = c
        .delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ats.cnat.programming-kubernetes.info",
            None,
        )
        .await;
    assert_eq!(del.code, 200);
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "one");
    assert!(w.next().await.is_none());
    s.shutdown().await;
}

/// As the real server (which flushes only when no event is waiting, through Go's 4 KiB
/// HTTP/2 write buffer): events already waiting are joined into frames of up to 4 KiB, never
/// split, in order; a quiet watch gets one frame per event.
#[tokio::test]
async fn waiting_events_share_a_frame_and_a_quiet_watch_gets_one_per_event() {
    use http_body_util::BodyExt;
    let s = start().await;
    let c = TestClient::new(&s);
    let before = rv(&c.get(CMS).await.body);
    for i in 0..60 {
        c.post(CMS, &cm(&format!("cm-{i:02}"), json!({"n": i.to_string()})))
            .await;
    }
    // Replayed from the history: all sixty are waiting when the body is first polled.
    let resp = c
        .raw(
            "GET",
            &format!("{CMS}?watch=true&resourceVersion={before}"),
            &[],
            vec![],
            true,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut next_frame = async || -> bytes::Bytes {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a frame within 10 s")
            .expect("the watch is open")
            .expect("a readable frame");
        frame.into_data().expect("a data frame")
    };
    let (mut names, mut frames) = (Vec::new(), 0);
    while names.len() < 60 {
        let data = next_frame().await;
        frames += 1;
        assert!(data.ends_with(b"\n"), "a frame ends with a whole event");
        let lines: Vec<&[u8]> = data
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        if lines.len() > 1 {
            assert!(
                // Go's HTTP/2 response writer buffers 4 KiB (`handlerChunkWriteSize`).
                data.len() <= 4 * 1024,
                "{}",
                data.len()
            );
        }
        for line in lines {
            let event: serde_json::Value = serde_json::from_slice(line).unwrap();
            assert_eq!(event["type"], "ADDED");
            names.push(
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    let want: Vec<String> = (0..60).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, want, "every event once, in order");
    assert!(frames < 30, "sixty waiting events took {frames} frames");
    // Quiet now: the next change is a frame of its own.
    c.post(CMS, &cm("late", json!({}))).await;
    let data = next_frame().await;
    assert_eq!(data.iter().filter(|b| **b == b'\n').count(), 1);
    s.shutdown().await;
}
