//! The node's heartbeat: its Lease in `kube-node-lease`, renewed every 10 s.
//!
//! ## How a kubelet does it
//!
//! A Node's `status` is large (conditions, addresses, images, volumes), so since Kubernetes
//! 1.17 a kubelet does not prove it is alive by rewriting it. It keeps a small
//! `coordination.k8s.io/v1` **Lease** instead (`pkg/kubelet/nodelease`, built on
//! `k8s.io/component-helpers/apimachinery/lease`'s controller):
//!
//! * the Lease lives in the namespace `kube-node-lease` (one of the namespaces kube-apiserver
//!   creates at start) and is named after the node;
//! * its `spec.holderIdentity` is the node's name and `spec.leaseDurationSeconds` the
//!   kubelet's `nodeLeaseDurationSeconds` (40); `spec.renewTime` (a MicroTime) is rewritten
//!   every renew interval, `0.25 ×` the duration: 10 s, jittered by up to 4 %
//!   (`wait.JitterUntil(sync, renewInterval, 0.04, true, ...)`, the wait counted from the end
//!   of the previous round);
//! * its `metadata.ownerReferences` name the Node (`apiVersion: v1, kind: Node, name, uid`),
//!   so the garbage collector removes the Lease with its Node. The Node's uid is read with a
//!   GET; while that fails (the Node is not registered yet) the Lease is not created, and the
//!   next round tries again;
//! * each round (`sync`): with a Lease written before at hand, update that copy (a PUT
//!   conditional on its `resourceVersion`, no GET first); if that fails, or there is none,
//!   *ensure* the Lease: GET it, CREATE it when it is missing, and retry a failed GET or CREATE
//!   after a back-off of 200 ms doubling to at most 7 s; then update what was found (a Lease
//!   just created needs no update). An update is tried up to 5 times in a row; on
//!   `409 Conflict` the Lease is read again (ensured) before the next try.
//!
//! The node lifecycle controller in kube-controller-manager reads the Leases: a node whose
//! Lease has not been renewed for its grace period is marked `Unknown` and its pods are
//! evicted.
//!
//! ## The embedded node
//!
//! [`spawn`] starts the same loop for the embedded node, as `system:node:embedded-node`
//! through its loopback client ([`crate::client::NodeApi`]; the bootstrap `system:node`
//! ClusterRole grants `get`, `create` and `update` on `leases`), after the node has registered
//! its Node ([`crate::client::NodeApi::registered`]), so the first round finds the Node's uid.
//! Times come from the node's [`VirtualClock`] and waits from `tokio::time`, so a test with a
//! paused clock sees `renewTime` advance by 10 s for every 10 s it advances the clock. The
//! task runs on the server's tracker and ends when the server shuts down, wherever it is
//! waiting.
//!
//! Where it departs: a kubelet's `onRepeatedHeartbeatFailure` (closing its connections to the
//! API server after repeated failures) has nothing to close over the loopback interface, and
//! nothing in the embedded cluster judges a node by its Lease: the embedded controller manager
//! has no node lifecycle controller, so the node stays `Ready` whatever its Lease says.

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::Resource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::background::VirtualClock;
use crate::client::{NodeApi, meta_str};

/// The namespace of the node Leases (kube's `corev1.NamespaceNodeLease`).
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// `spec.leaseDurationSeconds` of the node's Lease (the kubelet's default
/// `nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: u64 = 40;

/// How often the Lease is renewed: a quarter of its duration (the kubelet's
/// `renewIntervalFraction` of 0.25), 10 s.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(LEASE_DURATION_SECONDS / 4);

/// The most by which a renew interval is lengthened, as a fraction of it
/// (`wait.JitterUntil`'s jitter factor).
pub const JITTER: f64 = 0.04;

/// How many updates are tried in a row before a round gives up.
const MAX_UPDATE_RETRIES: usize = 5;

/// The first back-off after a failed GET or CREATE is twice this.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest back-off between two attempts to ensure the Lease.
const MAX_BACKOFF: Duration = Duration::from_secs(7);

fn leases() -> Resource {
    Resource::new("coordination.k8s.io", "v1", "leases")
}

/// Starts renewing the node's Lease on `tracker` (see the module docs); the task ends when
/// `shutdown` is cancelled.
pub fn spawn(
    api: NodeApi,
    clock: VirtualClock,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    let controller = LeaseController {
        api,
        clock,
        latest: None,
    };
    tracker.spawn(controller.run(shutdown));
}

/// A renew interval lengthened by a random fraction of up to [`JITTER`] of it.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(1.0 + JITTER * fastrand::f64())
}

/// `t` as a `metav1.MicroTime` (RFC 3339 with microseconds, UTC).
fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Why a round of renewal failed.
#[derive(Debug, thiserror::Error)]
enum RenewError {
    /// Every update of the round failed.
    #[error("failed {0} attempts to update the lease")]
    Exhausted(usize),
    /// After a conflict the Lease could not be read again.
    #[error("the lease could not be read again after a conflict")]
    Lost,
}

/// The state of the loop: the node's client and clock, and the Lease as last written.
struct LeaseController {
    api: NodeApi,
    clock: VirtualClock,
    /// The Lease as the last create or update answered it (`latestLease`).
    latest: Option<Value>,
}

impl LeaseController {
    async fn run(mut self, shutdown: CancellationToken) {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = self.api.registered() => {}
        }
        tracing::debug!(node = %self.api.node(), "node lease controller started");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.sync() => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(jittered(RENEW_INTERVAL)) => {}
            }
        }
        tracing::debug!(node = %self.api.node(), "node lease controller stopped");
    }

    /// One round: update the Lease last written, else ensure it exists and update it.
    async fn sync(&mut self) {
        if let Some(latest) = self.latest.clone() {
            match self.retry_update(latest).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::info!(node = %self.api.node(), error = %e, "updating the lease last written failed; ensuring the lease");
                }
            }
        }
        let (lease, created) = self.backoff_ensure().await;
        self.latest = lease.clone();
        if let (Some(lease), false) = (lease, created)
            && let Err(e) = self.retry_update(lease).await
        {
            tracing::warn!(node = %self.api.node(), error = %e, retry_in = ?RENEW_INTERVAL, "renewing the node lease failed");
        }
    }

    /// Ensures the Lease exists, retrying failures with a doubling back-off of at most
    /// [`MAX_BACKOFF`]; answers it (`None` when it could not be made this round) and whether
    /// this call created it.
    async fn backoff_ensure(&self) -> (Option<Value>, bool) {
        let mut sleep = FIRST_BACKOFF;
        loop {
            match self.ensure().await {
                Ok(found) => return found,
                Err(e) => {
                    sleep = (sleep * 2).min(MAX_BACKOFF);
                    tracing::warn!(node = %self.api.node(), error = %e.message, retry_in = ?sleep, "ensuring the node lease failed");
                    tokio::time::sleep(sleep).await;
                }
            }
        }
    }

    /// GET the Lease, or CREATE it when it is missing (unless the Node's uid cannot be read
    /// yet: then nothing is created this round).
    async fn ensure(&self) -> Result<(Option<Value>, bool), ApiError> {
        let node = self.api.node();
        if let Some(lease) = self.api.get(&leases(), LEASE_NAMESPACE, node).await? {
            return Ok((Some(lease), false));
        }
        let Some(lease) = self.new_lease(None).await else {
            return Ok((None, false));
        };
        let created = self
            .api
            .loopback()
            .create(&leases(), LEASE_NAMESPACE, lease)
            .await?;
        tracing::debug!(node, "node lease created");
        Ok((Some(created), true))
    }

    /// Updates the Lease from `base`, up to [`MAX_UPDATE_RETRIES`] times; on a conflict the
    /// Lease is ensured (read again) first.
    async fn retry_update(&mut self, mut base: Value) -> Result<(), RenewError> {
        for _ in 0..MAX_UPDATE_RETRIES {
            let lease = match self.new_lease(Some(base.clone())).await {
                Some(l) => l,
                None => renewed(base.clone(), &self.clock),
            };
            match self
                .api
                .loopback()
                .update(&leases(), LEASE_NAMESPACE, lease)
                .await
            {
                Ok(written) => {
                    self.latest = Some(written);
                    return Ok(());
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!(node = %self.api.node(), "node lease conflict; reading it again");
                    base = self.backoff_ensure().await.0.ok_or(RenewError::Lost)?;
                }
                Err(e) => {
                    tracing::warn!(node = %self.api.node(), error = %e.message, "updating the node lease failed");
                }
            }
        }
        Err(RenewError::Exhausted(MAX_UPDATE_RETRIES))
    }

    /// A new Lease (`base` `None`) or a copy of `base`, renewed now and owned by the Node
    /// (`newLease` with the kubelet's `setNodeOwnerFunc`). `None` when the Lease has no owner
    /// yet and the Node cannot be read: a Lease is not created without it, and an update
    /// goes ahead without it (the caller renews `base` alone).
    async fn new_lease(&self, base: Option<Value>) -> Option<Value> {
        let node = self.api.node();
        let lease = base.unwrap_or_else(|| {
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_SECONDS},
            })
        });
        let mut lease = renewed(lease, &self.clock);
        let owned = lease["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| !refs.is_empty());
        if !owned {
            let uid = match self.api.get(&Resource::core("nodes"), "", node).await {
                Ok(Some(n)) => meta_str(&n, "uid").to_owned(),
                Ok(None) => {
                    tracing::debug!(
                        node,
                        "the node is not registered yet; the lease waits for it"
                    );
                    return None;
                }
                Err(e) => {
                    tracing::warn!(node, error = %e.message, "reading the node for the lease's owner failed");
                    return None;
                }
            };
            lease["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]);
        }
        Some(lease)
    }
}

/// `lease` with `spec.renewTime` now.
fn renewed(mut lease: Value, clock: &VirtualClock) -> Value {
    if !lease["spec"].is_object() {
        lease["spec"] = json!({});
    }
    lease["spec"]["renewTime"] = json!(micro_time(clock.now()));
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_renew_interval_is_a_quarter_of_the_duration_jittered_by_at_most_four_percent() {
        assert_eq!(RENEW_INTERVAL, Duration::from_secs(10));
        for _ in 0..1000 {
            let d = jittered(RENEW_INTERVAL);
            assert!(d >= RENEW_INTERVAL, "{d:?}");
            assert!(d <= Duration::from_millis(10_400), "{d:?}");
        }
    }

    #[test]
    fn renew_times_are_micro_times() {
        let t: jiff::Timestamp = "2030-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(micro_time(t), "2030-01-02T03:04:05.123456Z");
        let whole: jiff::Timestamp = "2030-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(micro_time(whole), "2030-01-02T03:04:05.000000Z");
    }
}
