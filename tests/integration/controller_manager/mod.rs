//! Tests of the simulated controller manager (crate `embedded-controller-manager`).

mod deployments;
mod gc;
mod rbac;
mod statefulsets;
mod workloads;
