//! The seeds' walkthroughs as a reader runs them: the real `kubectl` (on the PATH) against an
//! embedded API server that simulates a small cluster (a node runs the pods, the StatefulSet
//! and Deployment controllers report their rollouts, the garbage collector follows
//! ownerReferences), the CRDs installed with `kubectl apply -f artifacts/crds/` as the README
//! says, and the controller manager of this crate running in-process. Without kubectl the
//! walkthroughs skip with a message.
//!
//! The server listens on port 0 and runs on real time, because kubectl is a process of its own
//! (a paused tokio clock would jump past its timeouts while the runtime waits on it). Nothing is
//! timed: every wait is for a condition, read through the API, within a generous bound.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use embedded_cluster::{Cluster, ClusterHandle};
use k8s_openapi::api::core::v1::Event;
use sample_client_go::client::{Api, Client, ListParams};
use sample_controller_runtime::controller::Clock;

use crate::support::at::{
    RunningManager, client_for, init_tracing, manager_client, start_manager, wait_until_every,
};
use crate::support::cluster::{Kubectl, kubectl_bin};
use crate::support::operators::config_for;

/// How often a wait looks, and how many times, before the walkthrough fails: 2 minutes in all,
/// far more than any step takes, even on a loaded machine.
const POLL: Duration = Duration::from_millis(50);
const TRIES: u32 = 2_400;

/// One walkthrough's cluster: the server, an admin client for the test's own reads, and
/// kubectl configured for the server.
pub struct Walkthrough {
    pub server: ClusterHandle,
    pub client: Client,
    kubectl: Kubectl,
}

impl Walkthrough {
    /// Starts the cluster and applies `artifacts/crds/` with kubectl; `None` (after printing
    /// why) when kubectl is not installed.
    pub async fn start(seed: &str) -> Option<Self> {
        Self::start_with(seed, Cluster::builder().simulate(true)).await
    }

    /// [`Walkthrough::start`] with a server of the caller's (the book's At needs the process
    /// runtime, whose pods really run their commands and have logs).
    pub async fn start_with(seed: &str, builder: embedded_cluster::ClusterBuilder) -> Option<Self> {
        let Some(bin) = kubectl_bin(None) else {
            eprintln!(
                "SKIPPED: {seed}: kubectl not found on PATH (the walkthrough runs the real kubectl)"
            );
            return None;
        };
        sample_client_go::install_crypto_provider();
        init_tracing();
        let server = builder.start().await.expect("server starts");
        let client = client_for(&server);
        let kubectl = Kubectl::with_bin(bin, &server);
        let w = Walkthrough {
            server,
            client,
            kubectl,
        };
        let out = w.kubectl(&["apply", "-f", "artifacts/crds/"]).await;
        assert!(out.contains("created"), "{out}");
        Some(w)
    }

    /// Runs the manager with the one operator `controller`, on `clock`, until its caches have
    /// synced.
    pub async fn manager(&self, controller: &'static str, clock: Clock) -> RunningManager {
        start_manager(
            &manager_client(&self.server),
            config_for(&[controller]),
            clock,
        )
        .await
    }

    /// `kubectl <args>` with another kubectl binary (`kubectl.1.28`, ...), which must succeed.
    pub async fn kubectl_with(&self, bin: std::path::PathBuf, args: &[&str]) -> String {
        let k = Kubectl::with_bin(bin.clone(), &self.server);
        let out = k.run(args).await;
        eprintln!(
            "$ {} {}\n{}{}",
            bin.display(),
            args.join(" "),
            out.stdout,
            out.stderr
        );
        assert!(
            out.ok,
            "{} {args:?} failed\nstdout: {}\nstderr: {}",
            bin.display(),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// `kubectl <args>`, which must succeed: its stdout (the command and what it printed also
    /// go to the test's output, so a failing walkthrough reads like a terminal session).
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl.run(args).await;
        eprintln!("$ kubectl {}\n{}{}", args.join(" "), out.stdout, out.stderr);
        assert!(
            out.ok,
            "kubectl {args:?} failed\nstdout: {}\nstderr: {}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// `kubectl <args>`, which must succeed: its stdout and stderr together (kubectl says "No
    /// resources found" on stderr).
    pub async fn kubectl_all(&self, args: &[&str]) -> String {
        let out = self.kubectl.run(args).await;
        eprintln!("$ kubectl {}\n{}{}", args.join(" "), out.stdout, out.stderr);
        assert!(out.ok, "kubectl {args:?} failed\nstderr: {}", out.stderr);
        out.stdout + &out.stderr
    }

    /// Waits until `check` holds (looking every 50 ms, for at most 2 minutes).
    pub async fn wait<F, Fut>(&self, what: &str, check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        wait_until_every(what, POLL, TRIES, check).await;
    }

    /// Waits for an event with `reason` about the object `name` in `namespace`, and returns it.
    pub async fn event(&self, namespace: &str, name: &str, reason: &str) -> Event {
        let events = Api::<Event>::namespaced(self.client.clone(), namespace);
        let params = ListParams {
            field_selector: Some(format!("involvedObject.name={name}")),
            ..ListParams::default()
        };
        let find = || async {
            events
                .list(&params)
                .await
                .expect("list events")
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        };
        self.wait(
            &format!("event {reason} about {namespace}/{name}"),
            || async { find().await.is_some() },
        )
        .await;
        find().await.expect("the event just seen")
    }

    /// Stops the server.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// The data row of `kubectl get <kind> <name>` (the line after the header), split in columns.
pub fn row(table: &str) -> Vec<String> {
    table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The row of `name` in a kubectl table of several kinds (`kubectl get statefulsets,svc`).
pub fn row_of(table: &str, name: &str) -> Option<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|cols| cols.first().is_some_and(|c| c == name))
}
