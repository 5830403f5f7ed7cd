//! Tests of the simulated node (crate `embedded-node`): pods, runtimes, exec, attach, port-forward, logs.

mod exec;
mod image_binary;
mod node_status;
mod pods;
mod process_runtime;
mod proxy;
mod spdy;
