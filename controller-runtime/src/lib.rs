//! # controller-runtime, in Rust
//!
//! What every controller needs around its reconcile function, written once on
//! `sample-client-go`: the worker loop, a manager that hosts many controllers on one set of
//! shared caches, and the servers a controller runs in production. It knows no API group of its
//! own: the operators of *Programming Kubernetes* (`sample-operators`) and a controller of your
//! own (`examples/configmap-controller`) use exactly the same public API.
//!
//! ```text
//! informer handlers ──key──▶ RateLimitingQueue ──get──▶ worker ──▶ sync_handler(key)
//!                                 ▲                                    │
//!                                 │  Err(e)       → add_rate_limited   │
//!                                 ├─ Ok(Some(d))  → forget + add_after │
//!                                 └─ Ok(None)     → forget             │
//!                                      and always → done(key) ◀────────┘
//! ```
//!
//! | # | module | what it is | controller-runtime analogue |
//! |---|---|---|---|
//! | 1 | [`controller`], [`builder`] | the `SyncHandler` contract and the worker loop; [`builder::Builder`] (`For` / `Owns` / `Complete`) | `pkg/controller`, `pkg/builder`, `pkg/reconcile` |
//! | 2 | [`resource`] | custom resources as Rust types ([`custom_resource!`]) | kubebuilder's types, kube-rs' `CustomResource` |
//! | 3 | [`expectations`], [`ownership`] | "I created this", owner references, adoption, status writes | `controllerutil`, kube-controller-manager's expectations |
//! | 4 | [`manager`] | flags, wiring, leader election, graceful shutdown; [`manager::Manager::register`] takes any controller | `pkg/manager` |
//! | 5 | [`metrics`], [`metrics_auth`], [`health`] | `/metrics` (optionally HTTPS with TokenReview / SubjectAccessReview), `/healthz`, `/readyz` | `pkg/metrics`, `metrics/filters`, `pkg/healthz` |
//! | 6 | [`logging`], [`otlp`] | klog's `-v` levels, JSON logs; spans over OTLP/HTTP | `pkg/log`, an OpenTelemetry SDK |
//! | 7 | [`webhook`] | the admission and conversion webhook server | `pkg/webhook` |
//! | 8 | [`sharding`] | a ring of shards instead of one leader | kubernetes-controller-sharding |
//! | 9 | [`machinery`] | `/trace` (one key's hops, live, as JSON lines) and `/machinery` (the book's diagram with live counts) beside `/metrics` | (none: see `sample_client_go::keytrace`) |
//!
//! ## Use it
//!
//! ```toml
//! [dependencies]
//! sample-client-go = { path = "../sample-controller/client-go" }
//! sample-controller-runtime = { path = "../sample-controller/controller-runtime" }
//! ```
//!
//! and see `examples/configmap-controller` in the repository: a controller that keeps a
//! ConfigMap in step with a custom resource, registered on the manager with
//! [`builder::Builder`], and its test against the embedded API server.

#![forbid(unsafe_code)]

pub mod builder;
pub mod controller;
pub mod expectations;
pub mod health;
pub mod logging;
pub mod machinery;
pub mod manager;
pub mod metrics;
pub mod metrics_auth;
pub mod otlp;
pub mod ownership;
pub mod resource;
pub mod sharding;
pub mod webhook;

pub use sample_client_go::install_crypto_provider;
