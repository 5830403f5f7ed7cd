//! The `apps` group's resources: Deployments, ReplicaSets and StatefulSets share one strategy
//! ([`replicas`]); DaemonSets have none beyond the resource table's flags.

pub mod replicas;
