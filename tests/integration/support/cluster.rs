//! Helpers for the cluster-behaviour tests (simulated node, garbage collector, workload
//! controllers, faults, RBAC): a simulated cluster ([`simulated`]), direct store access for
//! paused-clock tests (create, get, patch, scale, the pods a controller controls), waiting on
//! the store's revision channel, and a kubectl runner that skips when kubectl is absent
//! ([`Kubectl::or_skip`]), with its table rows ([`rows`]) and JSON answers ([`Kubectl::json`]).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use embedded_apiserver::internals::query::Query;
use embedded_apiserver::internals::verbs::{self, Target};
use embedded_cluster::{Cluster, ClusterHandle};
use serde_json::{Value, json};

/// A plain-HTTP cluster whose node runs pods and whose workload controllers run, reacting
/// `workload_delay` after each change.
pub async fn simulated(workload_delay: Duration) -> ClusterHandle {
    Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .workload_delay(workload_delay)
        .start()
        .await
        .unwrap()
}

/// The target of a resource in the server's registry.
pub fn target(h: &ClusterHandle, group: &str, version: &str, plural: &str, ns: &str) -> Target {
    let def = h
        .store()
        .read(|s| s.registry.lookup(group, version, plural))
        .unwrap_or_else(|| panic!("{group}/{version} {plural} is not served"));
    Target {
        def,
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        name: None,
        subresource: None,
    }
}

/// Creates an object in-process (the same code path as a POST).
pub fn create(h: &ClusterHandle, group: &str, plural: &str, ns: &str, body: Value) -> Value {
    // Every built-in resource this crate serves is at version v1.
    let t = target(h, group, "v1", plural, ns);
    let (code, obj) = h
        .store()
        .write(|s| verbs::create(s, &t, body, &Query::parse(None)))
        .unwrap_or_else(|e| panic!("create {plural}: {}", e.message));
    assert_eq!(code, 201);
    obj.into_value(&t.def)
}

/// The stored object, if any (`group/plural` storage key, e.g. `core/pods`).
pub fn get(h: &ClusterHandle, storage: &str, ns: &str, name: &str) -> Option<Value> {
    h.store().read(|s| s.get(storage, ns, name).cloned())
}

/// Names of the stored objects of a resource in a namespace.
pub fn names(h: &ClusterHandle, storage: &str, ns: &str) -> Vec<String> {
    h.store().read(|s| {
        s.list(storage, Some(ns))
            .iter()
            .map(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    })
}

/// The stored pods of `default`, not being deleted, whose controller (the `ownerReferences`
/// entry with `controller: true`) is the `kind` named `name`.
pub fn controlled_pods(h: &ClusterHandle, kind: &str, name: &str) -> Vec<Value> {
    h.store().read(|s| {
        s.list("core/pods", Some("default"))
            .into_iter()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|refs| {
                            refs.iter().any(|r| {
                                r["controller"] == true && r["kind"] == kind && r["name"] == name
                            })
                        })
            })
            .cloned()
            .collect()
    })
}

/// Waits (on the store's revision channel, no polling) until `pred` holds for the state; panics
/// after 30 s of wall-clock or virtual time so a missing transition fails instead of hanging.
pub async fn wait_until<F>(h: &ClusterHandle, what: &str, mut pred: F)
where
    F: FnMut(&embedded_apiserver::internals::store::State) -> bool,
{
    let store = h.store();
    let mut rx = store.subscribe();
    let fut = async {
        loop {
            if store.read(&mut pred) {
                return;
            }
            if rx.changed().await.is_err() {
                panic!("store closed while waiting for {what}");
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .is_err()
    {
        panic!("timed out waiting for {what}");
    }
}

/// Waits until the pod reaches `phase`.
pub async fn wait_phase(h: &ClusterHandle, ns: &str, name: &str, phase: &str) -> Value {
    wait_until(h, &format!("pod {ns}/{name} {phase}"), |s| {
        s.get("core/pods", ns, name)
            .is_some_and(|p| p["status"]["phase"] == phase)
    })
    .await;
    get(h, "core/pods", ns, name).unwrap()
}

/// A pod running `command` with `restartPolicy`.
pub fn pod(name: &str, command: Value, restart_policy: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": command}]}
    });
    if let Some(r) = restart_policy {
        p["spec"]["restartPolicy"] = json!(r);
    }
    p
}

/// The kubectl binary for `version` (`None` = the one on the PATH), if installed. Versioned
/// binaries (`kubectl.1.28`, ...) live next to the file the `kubectl` on the PATH resolves to.
pub fn kubectl_bin(version: Option<&str>) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let on_path = std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())?;
    let Some(v) = version else {
        return Some(on_path);
    };
    let real = std::fs::canonicalize(&on_path).ok()?;
    let versioned = real.parent()?.join(format!("kubectl.{v}"));
    versioned.is_file().then_some(versioned)
}

/// The repository root, where kubectl runs (so `artifacts/...` paths resolve).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// kubectl with a kubeconfig for one server and a private HOME.
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

/// The words of each line kubectl printed (a table's rows, the header first).
pub fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// What a kubectl run printed.
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// `None` (after printing why) when kubectl is not installed.
    pub fn new(server: &ClusterHandle) -> Option<Self> {
        let Some(bin) = kubectl_bin(None) else {
            eprintln!("kubectl not found on PATH: skipping the kubectl part of this test");
            return None;
        };
        Some(Self::with_bin(bin, server))
    }

    /// Same as [`Kubectl::new`], but shuts `server` down when kubectl is not installed: a
    /// test that needs kubectl writes `let Some(k) = Kubectl::or_skip(&h).await else { return };`.
    pub async fn or_skip(server: &ClusterHandle) -> Option<Self> {
        let k = Self::new(server);
        if k.is_none() {
            server.shutdown().await;
        }
        k
    }

    /// The kubectl at `bin`, talking to `server`.
    pub fn with_bin(bin: PathBuf, server: &ClusterHandle) -> Self {
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = home.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        Kubectl {
            bin,
            kubeconfig,
            home,
        }
    }

    /// Same as [`Kubectl::new`], but authenticating with `token`.
    pub fn with_token(server: &ClusterHandle, token: &str) -> Option<Self> {
        let k = Self::new(server)?;
        let yaml = server.kubeconfig_yaml_for_token(token);
        std::fs::write(&k.kubeconfig, yaml).unwrap();
        Some(k)
    }

    /// The private HOME (a temporary directory) kubectl runs with; tests may put files there.
    pub fn home(&self) -> &std::path::Path {
        self.home.path()
    }

    /// The command `kubectl <args>` with this kubeconfig, cache and HOME, run from the
    /// repository root, stdin closed, killed when dropped. For long-running commands
    /// (`get -w`, a `delete` that waits) that a test reads while they run.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.home.path().join("cache"))
            .args(args)
            .env("HOME", self.home.path())
            .current_dir(repo())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl with `args` (and `stdin` piped in, if given).
    pub async fn run_with_input(&self, args: &[&str], stdin: Option<&str>) -> Out {
        use tokio::io::AsyncWriteExt;
        let mut cmd = self.command(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(input) = stdin {
            let mut si = child.stdin.take().unwrap();
            si.write_all(input.as_bytes()).await.unwrap();
            drop(si);
        }
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl ran for more than 60 s")
            .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs kubectl with `args` and returns its stdout; fails the test if kubectl failed.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {args:?} failed\nstdout: {}\nstderr: {}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// Runs kubectl with `args` and `-o json` and returns its answer; fails the test if
    /// kubectl failed.
    pub async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.ok(&all).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {all:?}: {e}: {out}"))
    }

    /// Runs kubectl with `args`.
    pub async fn run(&self, args: &[&str]) -> Out {
        self.run_with_input(args, None).await
    }
}

/// Merge-patches an object in-process (the same code path as a PATCH).
pub fn merge_patch(
    h: &ClusterHandle,
    group: &str,
    plural: &str,
    ns: &str,
    name: &str,
    patch: Value,
) -> Value {
    let mut t = target(h, group, "v1", plural, ns);
    t.name = Some(name.to_owned());
    h.store()
        .write(|s| verbs::patch(s, &t, verbs::PatchType::Merge, patch, &Query::parse(None)))
        .unwrap_or_else(|e| panic!("patch {plural}/{name}: {}", e.message))
        .1
        .into_value(&t.def)
}

/// Scales `default/name` of `group/plural` to `replicas` in-process (a merge patch of
/// `spec.replicas`).
pub fn scale(h: &ClusterHandle, group: &str, plural: &str, name: &str, replicas: i64) -> Value {
    merge_patch(
        h,
        group,
        plural,
        "default",
        name,
        json!({"spec": {"replicas": replicas}}),
    )
}
