//! Tests of the assembled embedded cluster and its command (crate `embedded-cluster`, `sample-controller apiserver`).

mod command_defaults;
mod command_process;
