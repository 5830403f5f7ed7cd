//! Every integration test of the workspace, in one test binary.
//!
//! The folders are named after the crate whose behaviour they test, and each file after the
//! part, so a failure's name says where to look: `apiserver::watch::...` is the API server
//! (`cluster/apiserver`), `node::exec::...` the simulated node (`cluster/node`),
//! `client_go::reflector::...` the client-go layer, and so on:
//!
//! | folder | crate |
//! |---|---|
//! | `apiserver/` | `embedded-apiserver`: requests, storage, admission, CRDs, auth, watch, faults |
//! | `cluster/` | `embedded-cluster`: the assembled cluster and `sample-controller apiserver` |
//! | `controller_manager/` | `embedded-controller-manager`: garbage collector, workloads |
//! | `node/` | `embedded-node`: pods, runtimes, exec, attach, port-forward, logs |
//! | `client_go/` | `sample-client-go`: client, cache, work queue, events, leader election |
//! | `controller_runtime/` | `sample-controller-runtime`: the manager, its endpoints, sharding |
//! | `operators/` | `sample-operators`: the operators and the seeds' walkthroughs |
//! | `sample_controller/` | the package itself: demo, docs, flags, Helm chart, workspace |
//! | `support/` | what the tests share: servers, clients, kubectl, the binary, waiting |
//!
//! They run against the embedded API server over real HTTP(S).
//!
//! Why one binary instead of one per file: every integration-test binary links the whole crate
//! and its dependencies, about 280 MB each with debug info. Forty-odd binaries cost many
//! gigabytes of disk and minutes of linking on a fresh machine; one costs one link. Isolation is
//! unchanged under `cargo nextest`, which runs every test in its own process. Select a crate or
//! a part with a filter: `cargo nextest run --test integration client_go::` or
//! `cargo nextest run --test integration apiserver::watch::`.

mod support;

mod apiserver;
mod client_go;
mod cluster;
mod controller_manager;
mod controller_runtime;
mod node;
mod operators;
mod sample_controller;
