//! # The embedded Kubernetes API server
//!
//! (This module's documentation arrives with its implementation.)

pub mod logic;
