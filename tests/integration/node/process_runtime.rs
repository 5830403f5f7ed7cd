//! The process runtime and `pods/log`: pods whose commands really run as child processes of
//! the server, their output served at `GET .../pods/NAME/log` (and read with `kubectl logs`,
//! `-f` and `--tail` on kubectl 1.28 and 1.33), deadlines, deletion with a grace period, and
//! no child left behind at shutdown. The simulated node's decisions are logged too.
//!
//! Every wait has a generous timeout that only prevents a hang; no test asserts a duration.

use crate::support;
use crate::support::cluster;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use cluster::*;
use embedded_cluster::NodeRuntime;
use embedded_cluster::{Cluster, ClusterHandle, StartError};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::apiserver::TestClient;
use tokio::io::{AsyncBufReadExt, BufReader};

async fn server() -> ClusterHandle {
    Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .start()
        .await
        .unwrap()
}

/// `GET .../pods/NAME/log?QUERY`: status code and body as text.
async fn log(api: &TestClient, name: &str, query: &str) -> (u16, String) {
    let resp = api
        .raw(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}/log?{query}"),
            &[],
            vec![],
            true,
        )
        .await;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&bytes).into_owned())
}

fn terminated(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]["state"]["terminated"]
}

/// The PID of a running container (`containerID: process://<pid>`).
async fn running_pid(h: &ClusterHandle, name: &str) -> u32 {
    wait_until(h, &format!("pod {name}'s container running"), |s| {
        s.get("core/pods", "default", name)
            .is_some_and(|p| p["status"]["containerStatuses"][0]["state"]["running"].is_object())
    })
    .await;
    let pod = get(h, "core/pods", "default", name).unwrap();
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .to_owned();
    id.strip_prefix("process://").unwrap().parse().unwrap()
}

/// Whether a process with `pid` exists (a zombie counts: it has not been reaped).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn event_reasons(h: &ClusterHandle, pod: &str) -> Vec<String> {
    h.store().read(|s| {
        s.list("core/events", Some("default"))
            .iter()
            .filter(|e| e["involvedObject"]["name"] == pod)
            .filter_map(|e| e["reason"].as_str().map(str::to_owned))
            .collect()
    })
}

#[tokio::test]
async fn echo_yay_succeeds_and_its_log_is_yay() {
    let h = server().await;
    let api = TestClient::new(&h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod("yay", json!(["echo", "YAY"]), Some("Never")),
    );
    let done = wait_phase(&h, "default", "yay", "Succeeded").await;
    assert_eq!(terminated(&done)["exitCode"], 0);
    assert_eq!(terminated(&done)["reason"], "Completed");
    assert_eq!(done["spec"]["nodeName"], "embedded-node");
    assert_eq!(log(&api, "yay", "").await, (200, "YAY\n".to_owned()));
    // The kubelet's events, as `kubectl describe pod` lists them.
    let reasons = event_reasons(&h, "yay");
    for r in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.iter().any(|x| x == r), "no {r} event: {reasons:?}");
    }
    let pulled = h.store().read(|s| {
        s.list("core/events", Some("default"))
            .iter()
            .find(|e| e["reason"] == "Pulled")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
    });
    assert!(
        pulled.as_deref().is_some_and(|m| m.contains("not pulled")),
        "{pulled:?}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn a_failing_shell_script_fails_with_its_exit_code_and_both_streams_logged() {
    let h = server().await;
    let api = TestClient::new(&h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "fails",
            json!(["sh", "-c", "echo out; echo err >&2; exit 3"]),
            Some("Never"),
        ),
    );
    let done = wait_phase(&h, "default", "fails", "Failed").await;
    assert_eq!(terminated(&done)["exitCode"], 3);
    assert_eq!(terminated(&done)["reason"], "Error");
    let (code, text) = log(&api, "fails", "").await;
    assert_eq!(code, 200);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["err", "out"], "{text:?}");
    // Options: one line with tailLines=1; timestamps prefix each line; limitBytes cuts.
    let (_, tail) = log(&api, "fails", "tailLines=1").await;
    assert_eq!(tail.lines().count(), 1, "{tail:?}");
    let (_, stamped) = log(&api, "fails", "timestamps=true").await;
    for line in stamped.lines() {
        let (ts, rest) = line.split_once(' ').unwrap();
        assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{line:?}");
        assert!(rest == "out" || rest == "err", "{line:?}");
    }
    assert_eq!(log(&api, "fails", "limitBytes=2").await.1.len(), 2);
    // Mistakes get the real server's answers.
    let (code, body) = log(&api, "fails", "container=nope").await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("container nope is not valid for pod fails"),
        "{body}"
    );
    let (code, body) = log(&api, "fails", "previous=true").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("previous terminated container"), "{body}");
    assert_eq!(log(&api, "fails", "tailLines=-1").await.0, 422);
    assert_eq!(log(&api, "missing", "").await.0, 404);
    h.shutdown().await;
}

#[tokio::test]
async fn a_failed_container_restarts_under_on_failure_and_keeps_its_previous_log() {
    let h = server().await;
    let api = TestClient::new(&h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "loops",
            json!(["sh", "-c", "echo run; exit 1"]),
            Some("OnFailure"),
        ),
    );
    wait_until(&h, "a crash-loop back-off", |s| {
        s.get("core/pods", "default", "loops").is_some_and(|p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        })
    })
    .await;
    let pod = get(&h, "core/pods", "default", "loops").unwrap();
    let cs = &pod["status"]["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 1);
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(pod["status"]["phase"], "Running");
    // The first restart is immediate, the second waits: the previous run's output and the
    // current one are both readable.
    assert_eq!(
        log(&api, "loops", "previous=true").await,
        (200, "run\n".to_owned())
    );
    assert_eq!(log(&api, "loops", "").await, (200, "run\n".to_owned()));
    assert!(event_reasons(&h, "loops").iter().any(|r| r == "BackOff"));
    h.shutdown().await;
}

#[tokio::test]
async fn active_deadline_seconds_kills_the_pod_with_deadline_exceeded() {
    let h = server().await;
    let mut p = pod("slow", json!(["sleep", "30"]), Some("Never"));
    p["spec"]["activeDeadlineSeconds"] = json!(1);
    create(&h, "", "pods", "default", p);
    let pid = running_pid(&h, "slow").await;
    let done = wait_phase(&h, "default", "slow", "Failed").await;
    assert_eq!(done["status"]["reason"], "DeadlineExceeded");
    assert!(terminated(&done)["exitCode"].as_i64().unwrap() != 0);
    assert!(!alive(pid), "process {pid} outlived its pod's deadline");
    assert!(
        event_reasons(&h, "slow")
            .iter()
            .any(|r| r == "DeadlineExceeded")
    );
    h.shutdown().await;
}

#[tokio::test]
async fn deleting_a_running_pod_ends_its_process_before_the_object_goes() {
    let h = server().await;
    let api = TestClient::new(&h);
    let mut p = pod("sleeper", json!(["sleep", "30"]), Some("Never"));
    p["spec"]["terminationGracePeriodSeconds"] = json!(10);
    create(&h, "", "pods", "default", p);
    let pid = running_pid(&h, "sleeper").await;
    assert!(alive(pid));
    let del = api
        .delete(
            "/api/v1/namespaces/default/pods/sleeper",
            Some(&json!({"gracePeriodSeconds": 10})),
        )
        .await;
    assert_eq!(del.code, 200, "{:?}", del.body);
    wait_until(&h, "pod sleeper deleted", |s| {
        s.get("core/pods", "default", "sleeper").is_none()
    })
    .await;
    // The object went only after the process had been reaped.
    assert!(!alive(pid), "process {pid} outlived its deleted pod");
    assert!(event_reasons(&h, "sleeper").iter().any(|r| r == "Killing"));
    h.shutdown().await;
}

#[tokio::test]
async fn shutting_the_server_down_leaves_no_child_process() {
    let h = server().await;
    // A shell with a child of its own: the whole process group must go.
    create(
        &h,
        "",
        "pods",
        "default",
        pod("daemon", json!(["sh", "-c", "sleep 30 & wait"]), None),
    );
    let pid = running_pid(&h, "daemon").await;
    assert!(alive(pid));
    tokio::time::timeout(Duration::from_secs(30), h.shutdown())
        .await
        .expect("shutdown hung");
    assert!(!alive(pid), "process {pid} outlived the server");
    // No process of the group is left running either (its id is the group id). A killed
    // orphan may linger as a zombie until init reaps it; it runs nothing. The kernel delivers
    // SIGKILL asynchronously, so give it a moment before failing.
    let mut left = group_members(pid);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = group_members(pid);
    }
    assert!(left.is_empty(), "processes of group {pid} left: {left:?}");
}

/// The live (not zombie) processes of process group `pgid`.
fn group_members(pgid: u32) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // Fields after the command's closing parenthesis: state ppid pgrp ...
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let state = rest.next()?;
            let pgrp: u32 = rest.nth(1)?.parse().ok()?;
            (pgrp == pgid && state != "Z").then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

#[tokio::test]
async fn env_values_and_working_dir_reach_the_process() {
    let h = server().await;
    let api = TestClient::new(&h);
    let dir = tempfile::tempdir().unwrap();
    let mut p = pod(
        "envy",
        json!(["sh", "-c", "echo $GREETING; pwd"]),
        Some("Never"),
    );
    p["spec"]["containers"][0]["env"] = json!([{"name": "GREETING", "value": "hello"}]);
    p["spec"]["containers"][0]["workingDir"] = json!(dir.path());
    create(&h, "", "pods", "default", p);
    wait_phase(&h, "default", "envy", "Succeeded").await;
    let real = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        log(&api, "envy", "").await.1,
        format!("hello\n{}\n", real.display())
    );
    h.shutdown().await;
}

#[tokio::test]
async fn the_process_runtime_refuses_a_public_address_without_rbac() {
    let err = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .listen(SocketAddr::from(([0, 0, 0, 0], 0)))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::UnsafeRuntime { .. }), "{err}");
    assert!(err.to_string().contains("RBAC"), "{err}");
    // With RBAC enforced it starts.
    let h = Cluster::builder()
        .simulate(true)
        .node_runtime(NodeRuntime::Process)
        .enforce_rbac(true)
        .listen(SocketAddr::from(([0, 0, 0, 0], 0)))
        .start()
        .await
        .unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn the_simulated_node_logs_what_it_decided() {
    let h = Cluster::builder()
        .simulate(true)
        .pod_run_time(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let api = TestClient::new(&h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod("sim", json!(["sh", "-c", "exit 3"]), Some("Never")),
    );
    wait_phase(&h, "default", "sim", "Failed").await;
    let (code, text) = log(&api, "sim", "").await;
    assert_eq!(code, 200);
    assert!(text.contains("is not run"), "{text}");
    assert!(text.contains("exited with code 3"), "{text}");
    h.shutdown().await;
}

/// The next line kubectl printed (`None` at its end); fails after 30 s of silence.
async fn next_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("kubectl logs -f printed nothing for 30 s")
        .unwrap()
}

/// `kubectl logs`, `logs --tail 1` and `logs -f` with one kubectl version.
async fn kubectl_logs(version: &str) {
    let Some(bin) = kubectl_bin(Some(version)) else {
        eprintln!("SKIPPED: kubectl {version} not found (looked beside the kubectl on the PATH)");
        return;
    };
    let h = server().await;
    let k = Kubectl::with_bin(bin, &h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod(
            "two",
            json!(["sh", "-c", "echo one; echo two"]),
            Some("Never"),
        ),
    );
    wait_phase(&h, "default", "two", "Succeeded").await;
    assert_eq!(k.ok(&["logs", "two"]).await, "one\ntwo\n");
    assert_eq!(k.ok(&["logs", "two", "--tail", "1"]).await, "two\n");

    // -f sees a line as soon as it is written: the second line is only written once the
    // test has read the first (it waits for a file the test creates).
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("go");
    let mut p = pod(
        "follow",
        json!([
            "sh",
            "-c",
            "echo first; while [ ! -e \"$MARKER\" ]; do sleep 0.1; done; echo second"
        ]),
        Some("Never"),
    );
    p["spec"]["containers"][0]["env"] = json!([{"name": "MARKER", "value": marker}]);
    create(&h, "", "pods", "default", p);
    running_pid(&h, "follow").await;
    let mut child = k
        .command(&["logs", "-f", "follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut lines).await.as_deref(), Some("first"));
    std::fs::write(&marker, b"").unwrap();
    assert_eq!(next_line(&mut lines).await.as_deref(), Some("second"));
    // The container ended, so the stream ends and kubectl exits 0.
    assert_eq!(next_line(&mut lines).await, None);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("kubectl logs -f did not exit after the container ended")
        .unwrap();
    assert!(status.success());
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_1_28_logs_tail_and_follow() {
    kubectl_logs("1.28").await;
}

#[tokio::test]
async fn kubectl_1_33_logs_tail_and_follow() {
    kubectl_logs("1.33").await;
}

/// An ephemeral container added to a running pod (`pods/NAME/ephemeralcontainers`) runs its
/// command once, is reported in `ephemeralContainerStatuses` (never ready), its output is its
/// log, and the pod's own containers and phase are untouched.
#[tokio::test]
async fn an_added_ephemeral_container_runs_its_command_once() {
    let h = server().await;
    let api = TestClient::new(&h);
    create(
        &h,
        "",
        "pods",
        "default",
        pod("debugged", json!(["sleep", "30"]), Some("Never")),
    );
    running_pid(&h, "debugged").await;
    let added = api
        .patch(
            "/api/v1/namespaces/default/pods/debugged/ephemeralcontainers",
            "application/strategic-merge-patch+json",
            &json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox",
                "command": ["sh", "-c", "echo from-debug; exit 4"]}]}}),
        )
        .await;
    assert_eq!(added.code, 200, "{}", added.body);
    wait_until(&h, "the ephemeral container's exit", |s| {
        s.get("core/pods", "default", "debugged").is_some_and(|p| {
            p["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object()
        })
    })
    .await;
    let p = get(&h, "core/pods", "default", "debugged").unwrap();
    let status = &p["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(status["name"], "debug");
    assert_eq!(status["ready"], false);
    assert_eq!(status["restartCount"], 0);
    assert_eq!(status["state"]["terminated"]["exitCode"], 4);
    // The pod goes on: its container still runs and it stays Running and Ready.
    assert_eq!(p["status"]["phase"], "Running");
    assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_object());
    assert_eq!(
        log(&api, "debugged", "container=debug").await,
        (200, "from-debug\n".to_owned())
    );
    let (code, body) = log(&api, "debugged", "").await;
    assert_eq!(code, 200, "{body}");
    let started = h.store().read(|s| {
        s.list("core/events", Some("default")).iter().any(|e| {
            e["reason"] == "Started"
                && e["involvedObject"]["fieldPath"] == "spec.ephemeralContainers{debug}"
        })
    });
    assert!(started, "no Started event for the ephemeral container");
    h.shutdown().await;
}

/// A container without a command cannot run its image's entrypoint here: in a pod that is not
/// restarted (a Job's) it exits 0 at once, as `alpine`'s default `sh` does without input, so
/// the Job completes.
#[tokio::test]
async fn a_job_whose_container_has_no_command_completes() {
    let h = server().await;
    create(
        &h,
        "batch",
        "jobs",
        "default",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "empty-job"},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "empty", "image": "alpine:latest"}]}}}}),
    );
    wait_until(&h, "job empty-job complete", |s| {
        s.get("batch/jobs", "default", "empty-job")
            .is_some_and(|j| {
                j["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete"))
            })
    })
    .await;
    h.shutdown().await;
}

/// `kubectl debug POD --image=busybox -c dbg -- CMD` (without `-it`, so no attach) adds an
/// ephemeral container through `pods/POD/ephemeralcontainers`; its command runs and
/// `kubectl logs -c dbg` shows its output.
#[tokio::test]
async fn kubectl_debug_adds_an_ephemeral_container_whose_output_is_its_log() {
    let h = server().await;
    let Some(k) = Kubectl::or_skip(&h).await else {
        return;
    };
    create(
        &h,
        "",
        "pods",
        "default",
        pod("target", json!(["sleep", "30"]), Some("Never")),
    );
    running_pid(&h, "target").await;
    k.ok(&[
        "debug",
        "target",
        "--image=busybox",
        "--profile=general",
        "-c",
        "dbg",
        "--",
        "sh",
        "-c",
        "echo debug-hello",
    ])
    .await;
    wait_until(&h, "the debug container's exit", |s| {
        s.get("core/pods", "default", "target").is_some_and(|p| {
            p["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        })
    })
    .await;
    assert_eq!(
        k.ok(&["logs", "target", "-c", "dbg"]).await,
        "debug-hello\n"
    );
    h.shutdown().await;
}
