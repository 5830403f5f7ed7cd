//! # Controllers: one `controller.go` per operator
//!
//! Each submodule is one operator, written the way sample-controller's `controller.go` reads:
//! the struct, the constructor that wires informers to event handlers, `run`, the worker loop,
//! `sync_handler`, and the enqueue helpers. Shared pieces live here:
//!
//! * [`clock`]: wall-clock time that follows tokio's (paused) clock;
//! * [`expectations`]: "I created this, the lister just has not seen it yet".

pub mod at;
pub mod clock;
pub mod expectations;

pub use clock::Clock;
pub use expectations::Expectations;
