//! The API server's storage under load and across restarts: the history window bounded by
//! time and bytes (a continue token survives a burst of writes; large objects do not grow the
//! history past its byte bound), and `--data-dir` / `--cert-dir` (a `kill -9` in the middle of
//! concurrent creates loses no acknowledged object, resourceVersions continue, a watch from a
//! revision before the restart resumes without 410, and clients keep verifying the server).

use crate::support;
use crate::support::apiserver::{CMS, TestClient};
use crate::support::net::Forwarder;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use embedded_cluster::Cluster;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[tokio::test]
async fn a_continue_token_stays_valid_through_a_burst_of_20000_writes() {
    let h = support::apiserver::start().await;
    let c = TestClient::new(&h);
    for i in 0..250 {
        let r = c
            .post(
                CMS,
                &support::apiserver::cm(&format!("page-{i:03}"), json!({})),
            )
            .await;
        assert_eq!(r.code, 201);
    }
    let first = c.get(&format!("{CMS}?limit=100")).await;
    assert_eq!(first.code, 200);
    let mut token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    // 20,000 writes, twice the old count-bounded window: 1,000 over HTTP from 8 clients, the
    // rest straight into the store (the same writes, without the HTTP cost of a debug build).
    let mut tasks = vec![];
    for t in 0..8 {
        let c = TestClient::new(&h);
        tasks.push(tokio::spawn(async move {
            for i in 0..125 {
                let path = "/api/v1/namespaces/kube-public/configmaps";
                let r = c
                    .post(
                        path,
                        &support::apiserver::cm(&format!("burst-{t}-{i}"), json!({})),
                    )
                    .await;
                assert_eq!(r.code, 201, "{:?}", r.body);
            }
        }));
    }
    let store = h.store();
    for i in 0..19_000 {
        store.write(|s| {
            s.create(
                "core/configmaps",
                json!({"metadata": {"namespace": "kube-system", "name": format!("direct-{i}")}}),
            )
        });
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(h.resource_version() > 20_000);
    let mut names: Vec<String> = first.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    loop {
        let page = c.get(&format!("{CMS}?limit=100&continue={token}")).await;
        assert_eq!(page.code, 200, "continue after the burst: {:?}", page.body);
        names.extend(
            page.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        match page.body["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_owned(),
            _ => break,
        }
    }
    let want: Vec<String> = (0..250).map(|i| format!("page-{i:03}")).collect();
    assert_eq!(names, want);
    let text = c.get("/metrics").await.body;
    let text = text.as_str().unwrap();
    assert_eq!(
        metric(text, "apiserver_storage_history_early_compactions_total"),
        0
    );
    assert!(metric(text, "apiserver_storage_history_changes") > 20_000);
    h.shutdown().await;
}

#[tokio::test]
async fn merge_patches_of_a_large_configmap_keep_the_history_under_its_byte_bound() {
    const LIMIT: u64 = 4 << 20;
    let h = Cluster::builder()
        .history_max_bytes(LIMIT as usize)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&h);
    let big = "x".repeat(200 * 1024);
    let created = c
        .post(
            CMS,
            &json!({"metadata": {"name": "big"}, "data": {"blob": big, "n": "0"}}),
        )
        .await;
    assert_eq!(created.code, 201);
    let mut peak = 0;
    for i in 1..=40 {
        // Each patch rewrites the whole 200 KB value: ~400 KB of history (before and after).
        let blob = format!("{i}{}", &big[1..]);
        let r = c
            .patch(
                &format!("{CMS}/big"),
                "application/merge-patch+json",
                &json!({"data": {"blob": blob, "n": i.to_string()}}),
            )
            .await;
        assert_eq!(r.code, 200, "patch {i}");
        if i % 5 == 0 {
            let text = c.get("/metrics").await.body;
            let bytes = metric(text.as_str().unwrap(), "apiserver_storage_history_bytes");
            assert!(bytes <= LIMIT, "history holds {bytes} bytes > {LIMIT}");
            peak = peak.max(bytes);
        }
    }
    let text = c.get("/metrics").await.body;
    let text = text.as_str().unwrap();
    // Bounded, and the bound was what stopped it (40 patches are ~16 MB unbounded).
    assert!(peak > LIMIT / 2, "peak {peak}");
    assert!(metric(text, "apiserver_storage_history_early_compactions_total") > 0);
    assert_eq!(metric(text, "apiserver_storage_history_limit_bytes"), LIMIT);
    let got = c.get(&format!("{CMS}/big")).await;
    assert_eq!(got.body["data"]["n"], "40");
    h.shutdown().await;
}

/// A raw client that reports connection failures instead of panicking (the server is killed
/// under it).
struct Raw {
    base: String,
    client: Client<support::apiserver::Https, Full<Bytes>>,
}

impl Raw {
    fn new(base: &str, ca_pem: &str) -> Self {
        sample_client_go::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_all_versions()
            .wrap_connector(crate::support::net::http_connector());
        Raw {
            base: base.to_owned(),
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path))
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                body.map(|b| serde_json::to_vec(b).unwrap())
                    .unwrap_or_default(),
            )))
            .unwrap();
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let code = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let body = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        Ok((code, body))
    }

    /// `send`, retried while the connection pool still holds connections to the old process.
    async fn send_retry(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut last = String::new();
        for _ in 0..5 {
            match self.send(method, path, body).await {
                Ok(answer) => return answer,
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{method} {path}: {last}");
    }
}

const TOKEN: &str = "durable-test-token";

/// Starts `sample-controller apiserver` on a port of its choosing with both directories (and
/// `extra` arguments), and points `front` at it once it listens. The clients talk to `front`,
/// which stays put across a restart: the server binds port 0 each time (restarting it on its
/// old port would race with every other test process binding port 0 meanwhile).
async fn spawn_server(front: &Forwarder, data: &Path, certs: &Path) -> Child {
    spawn_server_with(front, data, certs, &["--simulate=false"]).await
}

async fn spawn_server_with(front: &Forwarder, data: &Path, certs: &Path, extra: &[&str]) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args(["apiserver", "--token", TOKEN, "--listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--data-dir")
        .arg(data)
        .arg("--cert-dir")
        .arg(certs)
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
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move {
        let mut sink = String::new();
        while stdout.read_line(&mut sink).await.is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    child
}

#[tokio::test]
async fn kill_9_in_the_middle_of_2000_creates_loses_no_acknowledged_object() {
    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 250;
    let dir = tempfile::tempdir().unwrap();
    let (data, certs) = (dir.path().join("data"), dir.path().join("certs"));
    let front = Forwarder::start().await;
    let port = front.addr.port();
    let mut server = spawn_server(&front, &data, &certs).await;
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let raw = Arc::new(Raw::new(&format!("https://127.0.0.1:{port}"), &ca));

    // name -> resourceVersion of every acknowledged (201) create.
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let create = |raw: Arc<Raw>,
                  acked: Arc<Mutex<BTreeMap<String, u64>>>,
                  t: usize,
                  from: usize| async move {
        for i in from..PER_CLIENT {
            let name = format!("c-{t}-{i:04}");
            match raw
                .send("POST", CMS, Some(&support::apiserver::cm(&name, json!({}))))
                .await
            {
                Ok((201, body)) => {
                    let rv = body["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    acked.lock().unwrap().insert(name, rv);
                }
                Ok((409, _)) => {} // created by the attempt cut off by the kill
                Ok((code, body)) => panic!("create {name}: {code} {body}"),
                Err(_) => return i, // the server is gone
            }
        }
        PER_CLIENT
    };
    let mut tasks = vec![];
    for t in 0..CLIENTS {
        tasks.push(tokio::spawn(create(raw.clone(), acked.clone(), t, 0)));
    }
    // Kill it once about half the creates are acknowledged.
    tokio::time::timeout(Duration::from_secs(120), async {
        while acked.lock().unwrap().len() < CLIENTS * PER_CLIENT / 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("1,000 creates within 120 s");
    server.start_kill().unwrap();
    server.wait().await.unwrap();
    let mut resume_at = vec![];
    for t in tasks {
        resume_at.push(t.await.unwrap());
    }
    let before: BTreeMap<String, u64> = acked.lock().unwrap().clone();
    assert!(
        before.len() < CLIENTS * PER_CLIENT,
        "the kill came too late"
    );
    let last_acked = *before.values().max().unwrap();
    let early_rv = *before.values().min().unwrap();

    // Restart with the same directories; the same client (same CA) goes on.
    let _server = spawn_server(&front, &data, &certs).await;
    let (code, list) = raw.send_retry("GET", CMS, None).await;
    assert_eq!(code, 200);
    let stored: BTreeMap<String, u64> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
            )
        })
        .collect();
    for (name, rv) in &before {
        assert_eq!(stored.get(name), Some(rv), "acknowledged {name} at {rv}");
    }
    let list_rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv >= last_acked);

    // A watch from a revision before the restart replays from there: no 410.
    let resp = raw
        .client
        .request(
            hyper::Request::builder()
                .uri(format!(
                    "https://127.0.0.1:{port}{CMS}?watch=true&resourceVersion={early_rv}"
                ))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut watch = support::apiserver::reader(resp);
    let first = watch.next_change().await.unwrap();
    assert_eq!(first["type"], "ADDED", "{first}");
    let first_rv: u64 = first["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(first_rv > early_rv);

    // The rest of the 5,000: revisions continue above everything acknowledged before.
    let mut tasks = vec![];
    for (t, from) in resume_at.into_iter().enumerate() {
        tasks.push(tokio::spawn(create(raw.clone(), acked.clone(), t, from)));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), PER_CLIENT);
    }
    let after = acked.lock().unwrap().clone();
    for (name, rv) in &after {
        if !before.contains_key(name) {
            assert!(*rv > last_acked, "{name} got {rv} <= {last_acked}");
        }
    }
    let (_, list) = raw.send_retry("GET", CMS, None).await;
    // Every acknowledged one, besides the namespace's `kube-root-ca.crt` (the standalone
    // server publishes it, as kube-controller-manager does).
    let ours = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["metadata"]["name"] != "kube-root-ca.crt")
        .count();
    assert_eq!(ours, CLIENTS * PER_CLIENT);
}

#[tokio::test]
async fn a_manager_carries_on_across_a_kill_9_and_restart_of_a_durable_server() {
    use sample_client_go::client::{Client, Config, ListParams};
    use sample_controller_runtime::controller::Clock;
    use sample_operators::apis::AtPhase;

    support::at::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (data, certs) = (dir.path().join("data"), dir.path().join("certs"));
    let kubeconfig = dir.path().join("k.yaml");
    let front = Forwarder::start().await;
    let args = ["--pod-run-time", "100ms", "--kubeconfig-out"];
    let mut args: Vec<&str> = args.to_vec();
    let kc = kubeconfig.to_str().unwrap().to_owned();
    args.push(&kc);
    let mut server = spawn_server_with(&front, &data, &certs, &args).await;
    // The client talks to the forwarder, which follows the server across its restart.
    let yaml = std::fs::read_to_string(&kubeconfig).unwrap().replace(
        &format!("https://{}", front.target().await),
        &format!("https://{}", front.addr),
    );
    let config = Config::from_kubeconfig_yaml(&yaml, None).unwrap();
    let client = Client::new(config).unwrap();
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .unwrap();
    let clock = Clock::new();
    let manager = support::at::start_manager(&client, support::at::manager_config(), clock).await;

    let now = support::at::in_the_future(&clock, Duration::ZERO);
    let create = |name: String| {
        let (client, at) = (client.clone(), support::at::at(&name, &now, "echo hi"));
        async move {
            // Retried: the pool may still hold a connection to the killed process.
            for _ in 0..50 {
                match support::at::ats(&client)
                    .create(&Default::default(), &at)
                    .await
                {
                    Ok(_) => return,
                    Err(e) if e.is_conflict() || e.to_string().contains("AlreadyExists") => return,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            panic!("could not create at/{name}");
        }
    };
    let mut names = vec![];
    for i in 0..3 {
        names.push(format!("before-{i}"));
        create(format!("before-{i}")).await;
    }
    for i in 0..3 {
        support::at::wait_for_phase(&client, &format!("before-{i}"), AtPhase::Done).await;
    }
    // Created just before the kill: their pods may or may not exist yet.
    for i in 0..3 {
        names.push(format!("during-{i}"));
        create(format!("during-{i}")).await;
    }
    server.start_kill().unwrap();
    server.wait().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _server = spawn_server_with(&front, &data, &certs, &args).await;
    for i in 0..3 {
        names.push(format!("after-{i}"));
        create(format!("after-{i}")).await;
    }
    // While the server was down the manager's reflectors backed off (0.8 s doubling to 30 s,
    // as client-go's), so on a loaded machine, where the restart itself takes seconds, the
    // next relist may be half a minute away: wait for it with a ceiling well above that
    // (support::at::wait_for_phase gives up after 60 s, which such a backoff can exceed).
    for name in &names {
        support::at::wait_until_every(
            &format!("at/{name} to be DONE after the restart"),
            Duration::from_millis(100),
            3_000,
            || async {
                support::at::ats(&client)
                    .get(name)
                    .await
                    .is_ok_and(|a| a.status.is_some() && a.phase() == AtPhase::Done)
            },
        )
        .await;
    }
    assert!(!manager.task.is_finished(), "the manager was not restarted");
    let pods = support::at::pods(&client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    for name in &names {
        let owned: Vec<_> = pods
            .iter()
            .filter(|p| {
                p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "At" && &o.name == name)
            })
            .collect();
        assert_eq!(owned.len(), 1, "at/{name} has {} pods", owned.len());
    }
    manager.stop().await.unwrap();
}

/// `--data-dir` alone keeps the server's identity with its data: a restart with the same data
/// directory (and no certificate directory) serves the same CA, the same admin token and the
/// same client CA, so a kubeconfig written before the restart (its CA, its token, a client
/// certificate it issued) works after it, and the objects are there.
#[tokio::test]
async fn a_restart_with_the_data_directory_alone_keeps_every_kubeconfig_working() {
    let dir = tempfile::tempdir().unwrap();
    let first = Cluster::builder()
        .data_dir(dir.path())
        .start()
        .await
        .unwrap();
    let before = TestClient::new(&first);
    assert_eq!(
        before
            .post(CMS, &support::apiserver::cm("kept", json!({})))
            .await
            .code,
        201
    );
    let (ca, token) = (
        first.ca_pem().expect("HTTPS").to_owned(),
        first.token().to_owned(),
    );
    let (cert, key) = first
        .client_certificate("carol", Some("ops"))
        .expect("a client CA")
        .unwrap();
    first.shutdown().await;
    drop(first);

    let second = Cluster::builder()
        .data_dir(dir.path())
        .start()
        .await
        .unwrap();
    assert_eq!(second.ca_pem(), Some(ca.as_str()), "the same CA");
    assert_eq!(second.token(), token, "the same admin token");
    // The old kubeconfig's CA and token, against the restarted server.
    let old = TestClient::from_parts(second.url(), &token, Some(&ca), false);
    let got = old.get(&format!("{CMS}/kept")).await;
    assert_eq!(got.code, 200, "{}", got.body);
    // A client certificate issued before the restart still authenticates.
    let with_cert = TestClient::with_client_cert(second.url(), &ca, &cert, &key);
    let who = with_cert
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    assert_eq!(who.code, 201, "{}", who.body);
    assert_eq!(who.body["status"]["userInfo"]["username"], "carol");
    second.shutdown().await;
}
