//! # The operators: one `controller.go` each
//!
//! Each submodule is one operator, written the way sample-controller's `controller.go` reads:
//! the struct, the constructor that wires informers to event handlers, and `sync_handler`.
//! What they share (the worker loop, [`Operator`](sample_controller_runtime::controller::Operator),
//! expectations, owner references) is `sample_controller_runtime`'s; [`myapp`] is the smallest
//! complete one, [`at`] the book's.

pub mod at;
pub mod foo;
pub mod myapp;
pub mod rediscluster;
pub mod tdset;
