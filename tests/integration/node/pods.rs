//! The simulated node: pods are bound, run and end by their command; a paused node holds them
//! in Running; long-running pods stay Running; a crash-looping pod backs off like a kubelet.
//! Paused-clock tests drive the store in-process; the kubectl test goes over HTTPS.

use crate::support;
use crate::support::cluster;

use std::time::Duration;

use cluster::*;
use embedded_cluster::node::NODE_NAME;
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

async fn server(run_time: Duration) -> ClusterHandle {
    Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .pod_run_time(run_time)
        .start()
        .await
        .unwrap()
}

/// The phases a pod went through, from the store's history (what a watch would have seen).
fn phases(h: &ClusterHandle, name: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    h.store().read(|s| {
        for c in s.changes_since(1).unwrap() {
            if c.storage == "core/pods" && c.object["metadata"]["name"] == name {
                let p = c.object["status"]["phase"]
                    .as_str()
                    .unwrap_or("<none>")
                    .to_owned();
                if out.last() != Some(&p) {
                    out.push(p);
                }
            }
        }
    });
    out
}

fn ts(v: &Value) -> jiff::Timestamp {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_pod_is_bound_runs_and_succeeds_after_the_run_time() {
    let h = server(Duration::from_secs(5)).await;
    let cmd = json!(["/bin/sh", "-c", "echo hello"]);
    create(&h, "", "pods", "default", pod("ok", cmd, Some("Never")));
    let running = wait_phase(&h, "default", "ok", "Running").await;
    assert_eq!(running["spec"]["nodeName"], NODE_NAME);
    assert_eq!(running["status"]["hostIP"], "10.0.0.10");
    let cs = &running["status"]["containerStatuses"][0];
    assert_eq!(cs["name"], "main");
    assert_eq!(cs["ready"], true);
    assert!(cs["state"]["running"]["startedAt"].is_string());
    let ready = running["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");

    // Just before the run time is over the pod still runs.
    tokio::time::advance(Duration::from_millis(4_900)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        get(&h, "core/pods", "default", "ok").unwrap()["status"]["phase"],
        "Running"
    );
    let done = wait_phase(&h, "default", "ok", "Succeeded").await;
    let term = &done["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 0);
    assert_eq!(term["reason"], "Completed");
    let run = ts(&term["finishedAt"]).duration_since(ts(&term["startedAt"]));
    assert_eq!(run.as_secs(), 5);
    assert_eq!(done["status"]["containerStatuses"][0]["ready"], false);
    assert_eq!(phases(&h, "ok"), ["Pending", "Running", "Succeeded"]);
    // The node is registered and Ready.
    let node = get(&h, "core/nodes", "", NODE_NAME).unwrap();
    assert!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    );
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn exit_n_and_false_end_the_pod_failed_with_that_exit_code() {
    let h = server(Duration::ZERO).await;
    create(
        &h,
        "",
        "pods",
        "default",
        pod("three", json!(["/bin/sh", "-c", "exit 3"]), Some("Never")),
    );
    create(
        &h,
        "",
        "pods",
        "default",
        pod("false", json!(["sh", "-c", "false"]), Some("Never")),
    );
    for (name, code) in [("three", 3), ("false", 1)] {
        let p = wait_phase(&h, "default", name, "Failed").await;
        let term = &p["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(term["exitCode"], code, "{name}");
        assert_eq!(term["reason"], "Error");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "ContainersNotReady");
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_node_holds_pods_in_running_until_resumed() {
    let h = server(Duration::from_secs(1)).await;
    h.node().pause();
    assert!(h.node().is_paused());
    create(
        &h,
        "",
        "pods",
        "default",
        pod("held", json!(["/bin/sh", "-c", "exit 0"]), Some("Never")),
    );
    wait_phase(&h, "default", "held", "Running").await;
    tokio::time::advance(Duration::from_secs(600)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        get(&h, "core/pods", "default", "held").unwrap()["status"]["phase"],
        "Running"
    );
    h.node().resume();
    wait_phase(&h, "default", "held", "Succeeded").await;
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_simulated_time_long_running_pods_stay_and_crash_loops_back_off() {
    let h = server(Duration::from_secs(1)).await;
    // No restartPolicy means Always: a long-running pod, even with a command that would
    // finish successfully.
    create(
        &h,
        "",
        "pods",
        "default",
        pod("server", json!(["/bin/sh", "-c", "echo serving"]), None),
    );
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "crasher",
            json!(["/bin/sh", "-c", "exit 2"]),
            Some("OnFailure"),
        ),
    );
    // Under Always a failing command crash-loops too.
    create(
        &h,
        "",
        "pods",
        "default",
        pod("always-crasher", json!(["/bin/sh", "-c", "exit 2"]), None),
    );
    wait_phase(&h, "default", "server", "Running").await;
    wait_phase(&h, "default", "crasher", "Running").await;
    // One hour, in steps of a second (3600 wake-ups of the node's timers).
    for _ in 0..3600 {
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
    let server = get(&h, "core/pods", "default", "server").unwrap();
    assert_eq!(server["status"]["phase"], "Running");
    assert_eq!(server["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(server["status"]["containerStatuses"][0]["restartCount"], 0);

    // Each cycle: run 1 s, exit 2, back off 10 s, 20 s, 40 s, ... at most 300 s.
    let mut t = 0u64;
    let mut restarts = 0u64;
    loop {
        let back_off = (10u64 << restarts.min(5)).min(300);
        if t + 1 > 3600 {
            break;
        }
        t += 1;
        restarts += 1;
        t += back_off;
    }
    for name in ["crasher", "always-crasher"] {
        let crasher = get(&h, "core/pods", "default", name).unwrap();
        assert_eq!(crasher["status"]["phase"], "Running", "{name}");
        let cs = &crasher["status"]["containerStatuses"][0];
        assert_eq!(cs["restartCount"], restarts, "{name}");
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 2);
        let ready = crasher["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["reason"], "ContainersNotReady", "{name}");
    }
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn deleting_a_running_pod_finishes_on_the_node() {
    let h = server(Duration::from_secs(30)).await;
    create(
        &h,
        "",
        "pods",
        "default",
        pod("doomed", json!(["sleep", "3600"]), None),
    );
    wait_phase(&h, "default", "doomed", "Running").await;
    let c = support::apiserver::TestClient::new(&h);
    let r = c
        .delete("/api/v1/namespaces/default/pods/doomed", None)
        .await;
    assert_eq!(r.code, 200);
    // The API marks it (grace period 30 s); the node then removes it.
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    wait_until(&h, "pod gone", |s| {
        s.get("core/pods", "default", "doomed").is_none()
    })
    .await;
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_waits_for_the_simulated_outcome() {
    let h = Cluster::builder()
        .simulate(true)
        .pod_run_time(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    let manifest = r#"
apiVersion: v1
kind: Pod
metadata: {name: good}
spec:
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: ["/bin/sh", "-c", "echo hi"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  restartPolicy: Never
  containers: [{name: main, image: busybox, command: ["/bin/sh", "-c", "exit 7"]}]
"#;
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(manifest))
        .await;
    assert!(out.ok, "apply: {}", out.stderr);
    let out = k
        .run(&[
            "wait",
            "--for=jsonpath={.status.phase}=Succeeded",
            "pod/good",
            "--timeout=30s",
        ])
        .await;
    assert!(out.ok, "wait good: {} {}", out.stdout, out.stderr);
    let out = k
        .run(&[
            "wait",
            "--for=jsonpath={.status.containerStatuses[0].state.terminated.exitCode}=7",
            "pod/bad",
            "--timeout=30s",
        ])
        .await;
    assert!(out.ok, "wait bad: {} {}", out.stdout, out.stderr);
    let out = k
        .run(&["get", "pod/bad", "-o", "jsonpath={.status.phase}"])
        .await;
    assert_eq!(out.stdout, "Failed");
    let out = k.run(&["get", "nodes", "-o", "name"]).await;
    assert_eq!(out.stdout.trim(), format!("node/{NODE_NAME}"));
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_node_catches_up_after_the_history_is_compacted() {
    let h = server(Duration::from_secs(1)).await;
    h.node().pause();
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "survivor",
            json!(["/bin/sh", "-c", "exit 0"]),
            Some("Never"),
        ),
    );
    wait_phase(&h, "default", "survivor", "Running").await;
    // No await between the write and the compaction: the node cannot have read the newcomer's
    // ADDED before it is compacted away, so it must relist (like an informer after 410 Gone).
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "newcomer",
            json!(["/bin/sh", "-c", "exit 0"]),
            Some("Never"),
        ),
    );
    h.faults().compact();
    h.node().resume();
    wait_phase(&h, "default", "survivor", "Succeeded").await;
    wait_phase(&h, "default", "newcomer", "Succeeded").await;
    h.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_seeded_crash_looping_pod_is_adopted_in_its_back_off() {
    let h = server(Duration::from_secs(1)).await;
    // A pod that was already crash-looping on this node (seeded, as a test restoring a
    // snapshot would): the node must adopt it in its back-off, not call it finished.
    let mut p = pod(
        "loop",
        json!(["/bin/sh", "-c", "exit 9"]),
        Some("OnFailure"),
    );
    p["spec"]["nodeName"] = json!(NODE_NAME);
    p["status"] = json!({
        "phase": "Running",
        "containerStatuses": [{
            "name": "main", "image": "busybox", "ready": false, "started": false,
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 9, "reason": "Error"}}
        }]
    });
    h.store().write(|s| {
        let mut p = p.clone();
        p["metadata"]["namespace"] = json!("default");
        p["metadata"]["uid"] = json!("5eeded00-0000-4000-8000-000000000000");
        s.create("core/pods", p)
    });
    for _ in 0..120 {
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
    }
    let p = get(&h, "core/pods", "default", "loop").unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    // Back-off 40 s (fourth restart), run 1 s, exit 9 again.
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 4);
    h.shutdown().await;
}
