//! server

pub mod bootstrap;
pub mod connections;
pub mod manifests;
pub mod tls;
