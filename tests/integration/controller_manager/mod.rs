//! Tests of the simulated controller manager (crate `embedded-controller-manager`).

mod gc;
mod statefulsets;
mod workloads;
