//! The `apps` group's resources: Deployments, ReplicaSets and StatefulSets share one strategy
//! ([`workloads`]); DaemonSets have none beyond the resource table's flags.

pub mod workloads;
