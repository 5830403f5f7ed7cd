//! The Node object each runtime registers: the process node reports this machine's CPUs and
//! memory as its capacity and allocatable, the simulated node a fixed 8 CPUs and 16 GiB. The
//! node's heartbeat: its Lease in `kube-node-lease`, owned by the Node, held by the node and
//! renewed every 10 s (of a paused clock), listed by `kubectl get leases`.

use crate::support::cluster;

use cluster::*;
use embedded_cluster::node::NODE_NAME;
use embedded_cluster::node::{JITTER, LEASE_NAMESPACE, RENEW_INTERVAL};
use embedded_cluster::{Cluster, ClusterHandle, NodeRuntime};
use serde_json::Value;

async fn server(runtime: NodeRuntime) -> ClusterHandle {
    Cluster::builder()
        .simulate(true)
        .node_runtime(runtime)
        .start()
        .await
        .unwrap()
}

/// The Node as a client reads it: `kubectl get node -o json` when kubectl is installed, else
/// the stored object.
async fn node(h: &ClusterHandle) -> Value {
    wait_until(h, "the node registered", |s| {
        s.get("core/nodes", "", NODE_NAME).is_some()
    })
    .await;
    match Kubectl::new(h) {
        Some(k) => k.json(&["get", "node", NODE_NAME]).await,
        None => get(h, "core/nodes", "", NODE_NAME).unwrap(),
    }
}

/// `MemTotal` of this machine in `Ki`, as the test reads it, or the documented fallback.
fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
        })
        .map_or_else(
            || embedded_cluster::node::FALLBACK_MEMORY.to_owned(),
            |kib| format!("{kib}Ki"),
        )
}

#[tokio::test]
async fn the_process_node_reports_this_machines_cpus_and_memory() {
    let h = server(NodeRuntime::Process).await;
    let node = node(&h).await;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    for field in ["capacity", "allocatable"] {
        let size = &node["status"][field];
        assert_eq!(size["cpu"], cpus.to_string(), "{field}: {size}");
        assert_eq!(size["memory"], mem_total(), "{field}: {size}");
        assert_eq!(size["pods"], "110", "{field}: {size}");
    }
    assert_eq!(
        node["status"]["nodeInfo"]["containerRuntimeVersion"],
        "process://1.0"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn the_simulated_node_reports_its_fixed_size() {
    let h = server(NodeRuntime::Simulated).await;
    let node = node(&h).await;
    for field in ["capacity", "allocatable"] {
        let size = &node["status"][field];
        assert_eq!(size["cpu"], "8", "{field}: {size}");
        assert_eq!(size["memory"], "16Gi", "{field}: {size}");
    }
    h.shutdown().await;
}

const LEASES: &str = "coordination.k8s.io/leases";

fn renew_time(lease: &Value) -> jiff::Timestamp {
    lease["spec"]["renewTime"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("renewTime is a MicroTime: {lease}"))
}

#[tokio::test(start_paused = true)]
async fn the_node_holds_a_lease_it_renews_every_ten_seconds() {
    let h = Cluster::builder()
        .plain_http(true)
        .simulate(true)
        .start()
        .await
        .unwrap();
    wait_until(&h, "the node's lease", |s| {
        s.get(LEASES, LEASE_NAMESPACE, NODE_NAME).is_some()
    })
    .await;
    let lease = get(&h, LEASES, LEASE_NAMESPACE, NODE_NAME).unwrap();
    let node = get(&h, "core/nodes", "", NODE_NAME).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], NODE_NAME, "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40, "{lease}");
    assert_eq!(
        lease["metadata"]["ownerReferences"],
        serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": NODE_NAME,
                            "uid": node["metadata"]["uid"]}]),
        "{lease}"
    );
    // Written by the node, as itself.
    assert_eq!(
        lease["metadata"]["managedFields"][0]["manager"], "kubelet",
        "{lease}"
    );
    let longest = RENEW_INTERVAL.mul_f64(1.0 + JITTER);
    let mut last = lease;
    for round in 1..=3 {
        let before = renew_time(&last);
        wait_until(&h, &format!("renewal {round} of the lease"), |s| {
            s.get(LEASES, LEASE_NAMESPACE, NODE_NAME)
                .is_some_and(|l| renew_time(l) != before)
        })
        .await;
        let now = get(&h, LEASES, LEASE_NAMESPACE, NODE_NAME).unwrap();
        let gap = std::time::Duration::try_from(renew_time(&now).duration_since(before)).unwrap();
        assert!(
            gap >= RENEW_INTERVAL && gap <= longest,
            "renewal {round} came {gap:?} after the last one"
        );
        assert_eq!(now["spec"]["holderIdentity"], NODE_NAME);
        assert_eq!(
            now["metadata"]["uid"], last["metadata"]["uid"],
            "renewed, not recreated"
        );
        last = now;
    }
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_lists_the_nodes_lease_with_its_holder() {
    let h = Cluster::builder().simulate(true).start().await.unwrap();
    let namespaces = get(&h, "core/namespaces", "", LEASE_NAMESPACE);
    assert!(namespaces.is_some(), "a new cluster has {LEASE_NAMESPACE}");
    wait_until(&h, "the node's lease", |s| {
        s.get(LEASES, LEASE_NAMESPACE, NODE_NAME).is_some()
    })
    .await;
    let Some(k) = Kubectl::new(&h) else {
        h.shutdown().await;
        return;
    };
    let out = k.ok(&["get", "leases", "-n", LEASE_NAMESPACE]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "HOLDER", "AGE"], "{out}");
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[..2], [NODE_NAME, NODE_NAME], "{out}");
    // Its renewals are the paused-clock test's (above): waiting for one here costs 10 s.
    h.shutdown().await;
}
