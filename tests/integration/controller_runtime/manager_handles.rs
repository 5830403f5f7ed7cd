//! The cheap part of the soak (`hack/soak.sh` is the long one): a manager process runs a few
//! hundred Ats through repeated `kill -9`s of a durable API server and cuts of every
//! connection, and afterwards holds the same handles as before: open file descriptors,
//! sockets and Tokio tasks return to where they were after warm-up (counts read from
//! `/proc/<pid>/fd` and the manager's own `/metrics`, never timings). A watch, a connection or a
//! task leaked per reconnect, per relist or per At makes the counts climb and fails the test.

use crate::support;
use crate::support::net::{Forwarder, ManagerLog};

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sample_client_go::client::{Client, Config, DeleteParams, ListParams};
use sample_operators::apis::AtPhase;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts `sample-controller apiserver` on a data directory; points `front` at it.
async fn spawn_server(front: &Forwarder, data: &Path, kubeconfig: &Path) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--pod-run-time",
            "0s",
        ])
        .arg("--data-dir")
        .arg(data)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line))
        .await
        .expect("the server did not start within 60 s")
        .unwrap();
    let addr = line
        .trim_end()
        .strip_prefix("API server listening at https://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    front.forward_to(addr);
    tokio::spawn(async move {
        let mut sink = String::new();
        while stdout.read_line(&mut sink).await.is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    child
}

/// What the manager holds: open fds, of them sockets, and live Tokio tasks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Handles {
    fds: usize,
    sockets: usize,
    tasks: u64,
}

async fn handles(pid: u32, metrics_port: u16) -> Handles {
    let mut fds = 0;
    let mut sockets = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        fds += 1;
        if std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        {
            sockets += 1;
        }
    }
    let text = http_get(metrics_port, "/metrics").await;
    let tasks = text
        .lines()
        .find_map(|l| l.strip_prefix("tokio_alive_tasks "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no tokio_alive_tasks:\n{text}"));
    Handles {
        fds,
        sockets,
        tasks,
    }
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return String::new();
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body).await;
    body
}

/// The handles once the manager is idle: the same reading twice, a second apart (the scrape's
/// own connection and task come and go, so one reading is not enough).
async fn settled(pid: u32, metrics_port: u16, within: Duration) -> Handles {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = handles(pid, metrics_port).await;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = handles(pid, metrics_port).await;
        if now == last || tokio::time::Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

async fn create_retrying(client: &Client, name: &str, schedule: &str) {
    let at = support::at::at(name, schedule, "echo hi");
    for _ in 0..300 {
        match support::at::ats(client)
            .create(&Default::default(), &at)
            .await
        {
            Ok(_) => return,
            Err(e) if e.to_string().contains("AlreadyExists") => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("could not create at/{name}");
}

async fn wait_all_done(client: &Client, prefix: &str, n: usize) {
    support::at::wait_until_every(
        &format!("{n} Ats {prefix}* to be DONE"),
        Duration::from_millis(200),
        1_500,
        || async {
            support::at::ats(client)
                .list(&ListParams::default())
                .await
                .is_ok_and(|l| {
                    l.items
                        .iter()
                        .filter(|a| {
                            a.metadata
                                .name
                                .as_deref()
                                .is_some_and(|x| x.starts_with(prefix))
                                && a.status.is_some()
                                && a.phase() == AtPhase::Done
                        })
                        .count()
                        == n
                })
        },
    )
    .await;
}

async fn delete_all(client: &Client, prefix: &str, n: usize) {
    for i in 0..n {
        let name = format!("{prefix}{i}");
        for _ in 0..100 {
            match support::at::ats(client)
                .delete(&name, &DeleteParams::default())
                .await
            {
                Ok(_) => break,
                Err(e) if e.to_string().contains("NotFound") => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_holds_the_same_handles_after_restarts_and_cut_connections() {
    if !Path::new("/proc/self/fd").exists() {
        eprintln!("SKIP: no /proc on this system; the handle counts come from /proc/<pid>/fd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server_kc = dir.path().join("server.kubeconfig");
    let manager_kc = dir.path().join("manager.kubeconfig");
    let front = Forwarder::start().await;
    let mut server = spawn_server(&front, &data, &server_kc).await;
    // Clients and the manager talk to the forwarder, which follows the server across restarts
    // and can cut every connection at once.
    let yaml = std::fs::read_to_string(&server_kc).unwrap().replace(
        &format!("https://{}", front.target().await),
        &format!("https://{}", front.addr),
    );
    std::fs::write(&manager_kc, &yaml).unwrap();
    let client = Client::new(Config::from_kubeconfig_yaml(&yaml, None).unwrap()).unwrap();
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .unwrap();

    let mut manager = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args(["run", "--kubeconfig"])
        .arg(&manager_kc)
        .args([
            "--controllers=at",
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .env_remove("RUST_LOG")
        .spawn()
        .unwrap();
    let pid = manager.id().unwrap();
    let log = ManagerLog::tap(manager.stderr.take().unwrap());
    let metrics_port = log.metrics().await.port();
    let schedule = "2019-04-12T10:12:00Z";

    // Warm-up: connections pooled, informers synced, workers started.
    for i in 0..40 {
        create_retrying(&client, &format!("warm-{i}"), schedule).await;
    }
    wait_all_done(&client, "warm-", 40).await;
    delete_all(&client, "warm-", 40).await;
    let before = settled(pid, metrics_port, Duration::from_secs(30)).await;

    // Three rounds of 100 Ats, each with every connection cut halfway and the server killed
    // and restarted from its data directory.
    for round in 0..3 {
        let prefix = format!("r{round}-");
        for i in 0..100 {
            if i == 50 {
                front.cut();
            }
            create_retrying(&client, &format!("{prefix}{i}"), schedule).await;
        }
        server.start_kill().unwrap();
        server.wait().await.unwrap();
        server = spawn_server(&front, &data, &server_kc).await;
        wait_all_done(&client, &prefix, 100).await;
        delete_all(&client, &prefix, 100).await;
    }
    front.cut();
    // The manager reconnects after the cut; its handles settle at the warm-up figures. A
    // reconnect may land on a fresh connection before the old one is seen closed, hence the
    // wait for two equal readings and a slack of two (a leak per round, per reconnect or per
    // At exceeds it).
    let mut after = settled(pid, metrics_port, Duration::from_secs(60)).await;
    for _ in 0..60 {
        if after.fds <= before.fds + 2
            && after.sockets <= before.sockets + 2
            && after.tasks <= before.tasks + 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        after = handles(pid, metrics_port).await;
    }
    eprintln!("handles before {before:?}, after {after:?}");
    assert!(
        after.fds <= before.fds + 2
            && after.sockets <= before.sockets + 2
            && after.tasks <= before.tasks + 2,
        "the manager's handles grew over 300 Ats, 3 server kills and 4 connection cuts: \
         before {before:?}, after {after:?}"
    );
    assert!(
        manager.try_wait().unwrap().is_none(),
        "the manager exited:\n{}",
        log.text().await
    );
}
