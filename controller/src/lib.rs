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
//! ```
//!
//! | module | client-go analogue |
//! |---|---|
//! | [`apis`] | `pkg/apis/...`: the custom resource types |
//! | [`client`] | `rest`, `clientcmd`, typed clientsets, `apierrors`, `watch` |
//! | [`cache`] | `tools/cache`: reflector, store/indexer, shared informers, listers |
//! | [`workqueue`] | `util/workqueue` |
//! | [`record`] | `tools/record`: events |
//! | [`leaderelection`] | `tools/leaderelection` |
//! | [`metrics`], [`health`] | the manager's `/metrics`, `/healthz`, `/readyz` (controller-runtime's servers) |
//! | [`controllers`] | each operator's `controller.go` |
//! | [`logging`] | klog's `-v` levels, colour and line discipline for the binaries' logs |
//! | [`manager`] | `kube-controller-manager` / sample-controller's `main.go`: flags, wiring, leader election, shutdown |
//!
//! This crate is the controller library alone. Two sibling crates of the workspace complete it:
//! `apimachinery` (the helpers this library and the API server share) and `embedded_apiserver`
//! (an in-process Kubernetes API server for tests and the demo, the envtest of this workspace).
//! This crate never depends on the server.

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
pub mod record;
pub mod workqueue;

/// Installs rustls' process-wide crypto provider (ring) if none is installed yet; see
/// [`apimachinery::crypto`]. Calling it more than once is harmless.
pub use apimachinery::crypto::install_provider as install_crypto_provider;
