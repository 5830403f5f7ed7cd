//! # sample-controller, in Rust, the client-go way
//!
//! The book *Programming Kubernetes*'s sample-controller and its `cnat` "At" operator, with
//! every moving part of a controller written out by hand: no kube-rs, no kube-runtime.
//! Read the modules in the order data flows through them:
//!
//! ```text
//! API server --watch--> Reflector --deltas--> Informer store (Indexer) --> Lister (reads)
//!                                    \--> event handlers --key--> WorkQueue
//! WorkQueue --get--> worker --> sync_handler(key) --reads--> Lister
//!                                  \--writes--> Api<K> --> API server
//! sync_handler result: Err -> add_rate_limited(key) | Ok(Some(d)) -> forget(key), add_after(key, d)
//!                      | Ok(None) -> forget(key); and always done(key)
//! ```
//!
//! | # | module | what it is | client-go analogue |
//! |---|---|---|---|
//! | 1 | [`apis`] | the custom resource types (At, TDSet, RedisCluster, MyApp, Foo) and their CRDs | `pkg/apis/...` |
//! | 2 | [`client`] | config, transport, `Api<K>` verbs, errors by kind, the watch decoder | `rest`, `clientcmd`, typed clientsets, `apierrors`, `watch` |
//! | 3 | [`cache`] | reflector, store/indexer, shared informers, listers | `tools/cache` |
//! | 4 | [`workqueue`] | dedup, delay, rate-limited retry of keys | `util/workqueue` |
//! | 5 | [`controllers`] | the worker loop, each operator's `sync_handler`, the operator table | each operator's `controller.go` |
//! | 6 | [`record`] | events, correlated and written without blocking the work | `tools/record` |
//! | 7 | [`leaderelection`] | one active replica, through a Lease | `tools/leaderelection` |
//! | 8 | [`metrics`], [`metrics_auth`], [`health`] | `/metrics` (HTTPS with TokenReview / SubjectAccessReview under `--metrics-secure`), `/healthz`, `/readyz` | controller-runtime's servers and `metrics/filters` |
//! | 9 | [`logging`], [`otlp`] | klog's `-v` levels, colour and one line per event; the sync and request spans exported over OTLP/HTTP | klog; an OpenTelemetry SDK's batch span processor and OTLP exporter |
//! | 10 | [`manager`] | flags, wiring, preflight, shutdown | `kube-controller-manager` / sample-controller's `main.go` |
//!
//! ## One At, from `kubectl apply` to `DONE`
//!
//! 1. The API server stores the At and sends `ADDED` to every open watch.
//! 2. [`client`]: the controller's `Api<At>` watch decodes it into a [`client::WatchEvent`].
//! 3. [`cache::reflector`] applies it to the indexed store ([`cache::store`]) and the informer
//!    ([`cache::informer`]) hands it to the At controller's handler.
//! 4. The handler puts the key `ns/name` (never the object) on the [`workqueue`].
//! 5. A worker ([`controllers::process_next_work_item`]) calls [`controllers::at`]'s
//!    `sync_handler`, which reads the At from the lister: not yet due → `Ok(Some(until_due))`,
//!    so the queue forgets its failures and wakes it at the schedule; due → a pod with a
//!    controller owner reference, and nothing else in that sync.
//! 6. The pod's events come back through the pod informer and enqueue the owning At: seeing
//!    the pod, `sync_handler` writes status `RUNNING`; when the pod has finished, `DONE`. Each
//!    step records an Event ([`record`]).
//! 7. [`manager`] wires it all: one informer factory, the operators of
//!    [`controllers::registry`], leader election gating the workers, metrics and health, and a
//!    shutdown that drains the queues.
//!
//! This crate is the controller library alone. Two sibling crates of the workspace complete it:
//! `apimachinery` (the helpers this library and the API server share) and `embedded_apiserver`
//! (an in-process Kubernetes API server for tests and the demo, the envtest of this workspace).
//! This crate never depends on the server. Its one binary, `controller-manager` (`src/bin/`),
//! is what the container image ships: [`manager::main`] behind the `run` command, built from
//! this crate alone (`cargo build -p sample-controller --bin controller-manager`).

#![forbid(unsafe_code)]

pub mod apis;
pub mod cache;
pub mod client;
pub mod controllers;
pub mod health;
pub mod leaderelection;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod metrics_auth;
pub mod otlp;
pub mod record;
pub mod sharding;
pub mod webhook;
pub mod workqueue;

/// Installs rustls' process-wide crypto provider (ring) if none is installed yet; see
/// [`apimachinery::crypto`]. Calling it more than once is harmless.
pub use apimachinery::crypto::install_provider as install_crypto_provider;
