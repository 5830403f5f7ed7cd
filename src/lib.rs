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
//! | [`manager`] | `kube-controller-manager` / sample-controller's `main.go`: flags, wiring, leader election, shutdown |
//! | `demo` | `sample-controller demo`: the whole story on the embedded API server |
//! | [`apiserver`] | an embedded Kubernetes API server (the envtest of this crate) |

pub mod apis;
#[cfg(feature = "embedded")]
pub mod apiserver;
pub mod cache;
pub mod client;
pub mod controllers;
#[cfg(feature = "embedded")]
pub mod demo;
pub mod health;
pub mod leaderelection;
pub mod manager;
pub mod metrics;
pub mod record;
pub mod workqueue;

/// Installs rustls' process-wide crypto provider (ring) if none is installed yet.
///
/// rustls panics with "no process-level CryptoProvider available" when two providers are
/// compiled in and none was chosen; this crate compiles only ring and installs it explicitly
/// before building any TLS configuration. Calling it more than once is harmless.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one first: also fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
