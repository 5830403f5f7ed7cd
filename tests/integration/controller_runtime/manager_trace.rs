//! Following one key through a running manager: its metrics server's `/trace` stream (JSON
//! lines) read with `sample-controller trace`'s reader, against the embedded API server. The
//! test plays the kubelet (the server's node is off), so each pod ends when the test says.

use crate::support::at::*;

use std::time::Duration;

use http::Request;
use sample_client_go::client::{Client, Config};
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::machinery::{TraceReader, TraceReaderOptions};
use sample_controller_runtime::manager::ManagerConfig;
use serde_json::Value;

/// How long a test waits for one line of the stream before it gives up.
const LINE_WAIT: Duration = Duration::from_secs(60);

/// A manager whose metrics server (with `/trace`) listens on a port of its own choosing.
async fn traced_manager(client: &Client, config: ManagerConfig) -> (RunningManager, String) {
    let config = ManagerConfig {
        metrics_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..config
    };
    let running = start_manager(client, config, Clock::new()).await;
    let addr = running
        .listeners
        .bound()
        .await
        .and_then(|b| b.metrics)
        .expect("the metrics server listens");
    (running, format!("http://{addr}"))
}

async fn open(address: &str, key: &str) -> TraceReader {
    let mut reader = TraceReader::open(address, key, None, &TraceReaderOptions::default())
        .await
        .expect("the trace opens");
    let hello = next(&mut reader).await;
    assert_eq!(hello["stage"], "subscribed", "{hello}");
    assert_eq!(hello["key"], key);
    reader
}

async fn next(reader: &mut TraceReader) -> Value {
    tokio::time::timeout(LINE_WAIT, reader.next())
        .await
        .expect("a line within a minute")
        .expect("the stream reads")
        .expect("the stream goes on")
}

/// Reads hops until `done` says stop (heartbeats skipped); returns all of them.
async fn read_until(reader: &mut TraceReader, done: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut hops = Vec::new();
    loop {
        let line = next(reader).await;
        if line["stage"] == "heartbeat" {
            continue;
        }
        let stop = done(&line);
        hops.push(line);
        if stop {
            return hops;
        }
    }
}

fn text(h: &Value) -> &str {
    h["text"].as_str().unwrap_or_default()
}

/// The index of the first hop at `stage` whose text contains every one of `words`, at or
/// after `from`; panics with the trace when there is none.
fn find(hops: &[Value], from: usize, stage: &str, words: &[&str]) -> usize {
    hops.iter()
        .enumerate()
        .skip(from)
        .find(|(_, h)| h["stage"] == stage && words.iter().all(|w| text(h).contains(w)))
        .map(|(i, _)| i)
        .unwrap_or_else(|| {
            panic!(
                "no {stage} hop with {words:?} after hop {from}; the trace:\n{}",
                hops.iter()
                    .map(|h| format!("{} {}", h["stage"], text(h)))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })
}

#[tokio::test]
async fn the_books_example_is_traced_hop_by_hop_from_added_to_done() {
    let (server, client) = server().await;
    let (manager, address) = traced_manager(&client, manager_config()).await;
    let key = format!("{NS}/example-at");
    let mut reader = open(&address, &key).await;

    // The test is the kubelet: once the pod exists, it runs and succeeds.
    let kubelet = {
        let client = client.clone();
        tokio::spawn(async move {
            wait_for_pod(&client, "example-at-pod").await;
            start_pod(&client, "example-at-pod").await;
            finish_pod(&client, "example-at-pod", 0).await;
        })
    };
    let due = in_the_future(&Clock::new(), Duration::from_secs(2));
    create_at(&client, &at("example-at", &due, "echo YAY")).await;
    let hops = read_until(&mut reader, |h| {
        h["stage"] == "note" && text(h).starts_with("plan: DONE")
    })
    .await;
    kubelet.await.unwrap();

    // Every hop is about the key, of the at controller, numbered and in time order.
    let mut last = 0.0;
    for h in &hops {
        assert_eq!(h["key"], key.as_str(), "{h}");
        assert_eq!(h["controller"], "at", "{h}");
        assert!(h["seq"].as_u64().is_some(), "{h}");
        let t = h["elapsedMs"].as_f64().expect("elapsedMs");
        assert!(t >= last, "out of order: {h}");
        last = t;
    }

    // PENDING: the watch event, the store, the handler, the queue, a worker, the sync and its
    // decision, the status write and its echo, the deferral.
    let i = find(&hops, 0, "watch", &["ADDED At", &key]);
    assert!(hops[i]["resourceVersion"].as_str().is_some());
    let i = find(&hops, i, "store", &["stored"]);
    let i = find(&hops, i, "handler", &["on_add", "add(default/example-at)"]);
    let i = find(&hops, i, "queue", &["add: queued"]);
    let i = find(
        &hops,
        i,
        "worker",
        &["get:", "why: ADDED At default/example-at"],
    );
    assert!(hops[i]["waitedMs"].as_f64().is_some(), "{}", hops[i]);
    let i = find(
        &hops,
        i,
        "sync",
        &["sync_handler(default/example-at) starts"],
    );
    let i = find(
        &hops,
        i,
        "note",
        &["plan: PENDING", "write PENDING", "look again in"],
    );
    let write = find(
        &hops,
        i,
        "write",
        &["update At default/example-at (status)"],
    );
    find(
        &hops,
        i,
        "echo",
        &["MODIFIED At default/example-at", "the write's echo"],
    );
    let i = find(&hops, write, "sync", &["Ok(Some(", "add_after("]);
    let i = find(&hops, i, "queue", &["add_after("]);

    // RUNNING: the timer comes due, RUNNING is written, then the pod is created, and its watch
    // echo comes back.
    let i = find(&hops, i, "queue", &["came due: add_after("]);
    let i = find(&hops, i, "worker", &["why: add_after("]);
    let i = find(
        &hops,
        i,
        "note",
        &["write RUNNING", "create pod example-at-pod"],
    );
    let i = find(
        &hops,
        i,
        "write",
        &["update At default/example-at (status)"],
    );
    let created = find(&hops, i, "write", &["create Pod default/example-at-pod"]);
    find(&hops, i, "echo", &["ADDED Pod default/example-at-pod"]);

    // The pod's events are mapped to the At and name the pod; DONE is written.
    let i = find(
        &hops,
        i,
        "handler",
        &[
            "Pod default/example-at-pod",
            "mapped to its owner",
            "add(default/example-at)",
        ],
    );
    assert_eq!(hops[i]["mappedToOwner"], true);
    let i = find(&hops, i, "worker", &["why:", "Pod default/example-at-pod"]);
    let i = find(&hops, i, "note", &["write DONE"]);
    let i = find(
        &hops,
        i,
        "write",
        &["update At default/example-at (status)"],
    );
    find(&hops, i, "sync", &["sync_handler ends", "Ok(None)"]);
    assert!(created < i);

    drop(reader);
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn a_failing_syncs_retries_and_a_resync_say_so() {
    let (server, client) = server().await;
    let config = ManagerConfig {
        resync_period: Duration::from_secs(2),
        ..manager_config()
    };
    let (manager, address) = traced_manager(&client, config).await;
    let mut reader = open(&address, &format!("{NS}/retried")).await;

    // The first two status writes fail: two rate-limited retries, each with its error.
    server.faults().inject(
        embedded_apiserver::faults::Fault::fail(500)
            .verb("update")
            .resource("ats")
            .times(2),
    );
    let later = in_the_future(&Clock::new(), Duration::from_secs(3600));
    create_at(&client, &at("retried", &later, "echo later")).await;
    let hops = read_until(&mut reader, |h| {
        h["stage"] == "worker" && text(h).contains("why: resync At default/retried")
    })
    .await;
    let i = find(&hops, 0, "sync", &["Err:", "add_rate_limited"]);
    let i = find(&hops, i, "queue", &["add_rate_limited: retry 1"]);
    let i = find(
        &hops,
        i,
        "worker",
        &["why: rate-limited retry 1 after:", "500"],
    );
    let i = find(
        &hops,
        i,
        "worker",
        &["why: rate-limited retry 2 after:", "500"],
    );
    let i = find(&hops, i, "note", &["write PENDING"]);
    find(&hops, i, "worker", &["why: resync At default/retried"]);
    drop(reader);

    // The reasons are counted too.
    let metrics = get_text(&address, "/metrics").await;
    for trigger in ["added", "retry", "resync"] {
        let series = format!(
            "controller_reconcile_triggers_total{{controller=\"at\",trigger=\"{trigger}\"}}"
        );
        assert!(
            metrics.contains(&series),
            "{series} missing from:\n{metrics}"
        );
    }
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn several_readers_follow_at_once_and_the_page_and_counts_are_served() {
    let (server, client) = server().await;
    let (manager, address) = traced_manager(&client, manager_config()).await;
    let key = format!("{NS}/watched");
    let mut first = open(&address, &key).await;
    let mut second = open(&address, &key).await;
    let counts: Value =
        serde_json::from_str(&get_text(&address, "/machinery/counts").await).unwrap();
    assert_eq!(counts["readers"], 2, "{counts}");

    let later = in_the_future(&Clock::new(), Duration::from_secs(3600));
    create_at(&client, &at("watched", &later, "echo later")).await;
    for reader in [&mut first, &mut second] {
        let hops = read_until(reader, |h| h["stage"] == "sync" && text(h).contains("ends")).await;
        find(&hops, 0, "worker", &["why: ADDED At default/watched"]);
    }
    drop(first);
    drop(second);

    // A reader leaves with its stream (once the server sees the connection close).
    wait_until("the readers to leave with their streams", || async {
        let counts: Value =
            serde_json::from_str(&get_text(&address, "/machinery/counts").await).unwrap();
        counts["readers"] == 0
    })
    .await;
    let counts: Value =
        serde_json::from_str(&get_text(&address, "/machinery/counts").await).unwrap();
    let informers = counts["informers"].as_array().unwrap();
    let ats = informers
        .iter()
        .find(|i| i["name"] == "ats")
        .expect("the At informer");
    assert!(
        ats["cached"].as_u64() >= Some(1) && ats["events"].as_u64() >= Some(1),
        "{ats}"
    );
    let at = &counts["controllers"][0];
    assert_eq!(at["name"], "at");
    assert!(
        at["syncs"].as_u64() >= Some(1) && at["waiting"].as_u64() == Some(1),
        "{at}"
    );
    assert!(counts["writes"]["PUT"].as_u64() >= Some(1), "{counts}");

    let page = get_text(&address, "/machinery").await;
    assert!(
        page.contains("<svg") && page.contains("box-queue"),
        "{page}"
    );
    assert!(!page.contains("src=\"http"), "no external asset");
    let (status, body) = get(&address, "/trace").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("?key=NAMESPACE/NAME"), "{body}");

    manager.stop().await.unwrap();
    server.shutdown().await;
}

async fn get(address: &str, path: &str) -> (u16, String) {
    let client = Client::new(Config::new(address.parse().unwrap())).unwrap();
    let req = Request::get(path).body(bytes::Bytes::new()).unwrap();
    let (status, body) = client.request_raw(req).await.expect("an answer");
    (status.as_u16(), String::from_utf8_lossy(&body).into_owned())
}

async fn get_text(address: &str, path: &str) -> String {
    let (status, body) = get(address, path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}
