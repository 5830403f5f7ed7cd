//! The Node object each runtime registers: the process node reports this machine's CPUs and
//! memory as its capacity and allocatable, the simulated node a fixed 8 CPUs and 16 GiB.

use crate::support::cluster;

use cluster::*;
use embedded_cluster::node::NODE_NAME;
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
