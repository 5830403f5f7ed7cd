//! # apimachinery: the pieces both sides of the wire need
//!
//! Kubernetes keeps the code that clients and the API server share in one module,
//! `k8s.io/apimachinery`: label selectors, name validation, durations, UIDs, wait and clock
//! helpers. This crate is that module for this workspace. The controller library
//! (`sample_controller`) and the embedded API server (`embedded_apiserver`) both depend on it
//! and on nothing of each other, so a helper they both need is written once, here.
//!
//! | module | apimachinery / client-go analogue |
//! |---|---|
//! | [`crypto`] | (none: rustls' process-wide crypto provider, installed once) |

#![forbid(unsafe_code)]

pub mod crypto;
pub mod serving;
