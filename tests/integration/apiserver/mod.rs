//! Tests of the API server (crate `embedded-apiserver`): requests, storage, admission, CRDs, auth, watch, faults.

mod admission;
mod auth_review;
mod bindings;
mod bounded;
mod cel;
mod conversion;
mod durable;
mod faults;
mod fidelity;
mod flowcontrol;
mod http;
mod kubectl;
mod kubectl_compat;
mod list_snapshot;
mod managed_fields;
mod many_servers;
mod networking;
mod quota;
mod rbac;
mod restart_memory;
mod trust;
mod watch;
