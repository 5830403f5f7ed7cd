//! # client-go, in Rust
//!
//! The client side of every Kubernetes controller, written out by hand the way
//! `k8s.io/client-go` is: generic over any [`k8s_openapi::Resource`] (built-in kinds and custom
//! resources alike) and knowing no API group of its own. Read the modules in the order data flows
//! through them:
//!
//! ```text
//! API server --watch--> Reflector --deltas--> Informer store (Indexer) --> Lister (reads)
//!                                    \--> event handlers --key--> WorkQueue
//! WorkQueue --get--> your worker --> reads the Lister, writes through Api<K> --> API server
//! ```
//!
//! | # | module | what it is | client-go analogue |
//! |---|---|---|---|
//! | 1 | [`client`] | config, transport, `Api<K>` verbs, errors by kind, the watch decoder, the QPS throttle | `rest`, `clientcmd`, typed clientsets, `apierrors`, `watch`, `flowcontrol` |
//! | 2 | [`cache`] | reflector, store/indexer, shared informers and their factory, listers | `tools/cache`, `informers` |
//! | 3 | [`workqueue`] | dedup, delay, rate-limited retry of keys | `util/workqueue` |
//! | 4 | [`record`] | events, correlated and written without blocking the work | `tools/record` |
//! | 5 | [`leaderelection`] | one active replica, through a Lease | `tools/leaderelection` |
//! | 6 | [`keytrace`] | why each key was queued (its triggers), and the hops of a followed key through all of the above | (none) |
//! | | [`small_string`] | the inline strings of keys, names and resourceVersions (re-exported by [`cache`]) | |
//!
//! The worker loop, the manager, metrics and probes are the next layer up, the
//! `sample-controller-runtime` crate (controller-runtime's place); the operators of *Programming
//! Kubernetes* sit on both in `sample-operators`. Metrics and health reach this crate only through
//! hooks it owns ([`cache::WatchObserver`], [`leaderelection::LeaderMetrics`]), as client-go's
//! metrics providers do, and the work queue's Prometheus families are registered into a registry
//! the caller owns.
//!
//! ## Use it
//!
//! ```toml
//! [dependencies]
//! sample-client-go = { path = "../sample-controller/client-go" }
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//! ```
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use sample_client_go::client::{Api, Client, Config, ConfigOptions, ListParams};
//!
//! # async fn demo() -> Result<(), sample_client_go::client::Error> {
//! sample_client_go::install_crypto_provider();
//! let client = Client::new(Config::infer(&ConfigOptions::default())?)?;
//! let cms: Api<ConfigMap> = Api::namespaced(client, "default");
//! for cm in cms.list(&ListParams::default()).await?.items {
//!     println!("{}", cm.metadata.name.unwrap_or_default());
//! }
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod cache;
pub mod client;
pub mod keytrace;
pub mod leaderelection;
pub mod record;
pub mod small_string;
pub mod workqueue;

/// Installs rustls' process-wide crypto provider (ring) if none is installed yet; see
/// [`apimachinery::crypto`]. Calling it more than once is harmless.
pub use apimachinery::crypto::install_provider as install_crypto_provider;
