//! Tests of the simulated node (crate `embedded-node`): pods, runtimes, exec, attach, port-forward, logs.

mod exec;
mod pods;
mod process_runtime;
mod spdy;
