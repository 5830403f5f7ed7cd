//! # The operators of *Programming Kubernetes*, on hand-rolled client-go and controller-runtime
//!
//! The book's cnat **At** operator (run a command at a scheduled time: PENDING → RUNNING →
//! DONE), and beside it the other operators of the source material: **TDSet** (time-of-day
//! scaling), **RedisCluster**, **MyApp**, and sample-controller's own **Foo**. Each is written
//! the way sample-controller's `controller.go` reads (a struct, a constructor that wires
//! informers to a queue, `sync_handler`), on the two layers below it:
//!
//! ```text
//! sample-operators            apis, controllers::{at, tdset, rediscluster, myapp, foo}, webhooks, registry
//!   └─ sample-controller-runtime   worker loop, manager, metrics, probes, webhook server, sharding
//!        └─ sample-client-go        client, cache, workqueue, record, leaderelection
//! ```
//!
//! | module | what it is |
//! |---|---|
//! | [`apis`] | the custom resource types and their CRDs |
//! | [`controllers`] | one module per operator: its `sync_handler` |
//! | [`webhooks`] | the At's admission (validate, default) and conversion webhooks |
//! | [`registry`] | the operator table the manager is built from (`--controllers`) |
//! | [`slim`] | the slimmed cached types (`AtSummary`, `PodSummary`, `MetaSummary`): what they save and when to use them |
//!
//! ## One At, from `kubectl apply` to `DONE`
//!
//! 1. The API server stores the At and sends `ADDED` to every open watch.
//! 2. The manager's shared informer (`sample_client_go::cache`) decodes it, stores it and hands
//!    it to the At controller's event handler, which puts the key `ns/name` on its work queue.
//! 3. A worker (`sample_controller_runtime::controller`) calls [`controllers::at`]'s
//!    `sync_handler`, which reads the At from its lister: not yet due → `Ok(Some(until_due))`,
//!    so the queue wakes it at the schedule; due → status `RUNNING`, then a pod with a
//!    controller owner reference.
//! 4. The pod's events come back through the pod informer and enqueue the owning At; when the
//!    pod has finished, `sync_handler` writes `DONE`. Each step records an Event.
//!
//! The crate's one binary, `controller-manager` (`src/bin/`), is what the container image ships:
//! the manager with [`registry::OPERATORS`] registered, built from this crate alone
//! (`cargo build -p sample-operators --bin controller-manager`).

#![forbid(unsafe_code)]

pub mod apis;
pub mod controllers;
pub mod registry;
pub mod slim;
pub mod webhooks;

pub use sample_client_go::install_crypto_provider;
