//! Tests of the controller-runtime layer (crate `sample-controller-runtime`): the manager, its endpoints, sharding.

mod manager_cli;
mod manager_conversion;
mod manager_handles;
mod manager_health;
mod manager_leader_election;
mod manager_page;
mod manager_rbac;
mod manager_trace;
mod manager_webhook;
mod metrics_secure;
mod metrics_server;
mod serving_flood;
mod sharding;
