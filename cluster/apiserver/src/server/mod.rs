//! server

pub mod bootstrap;
pub mod chain;
pub mod connections;
pub mod manifests;
pub mod serve;
pub mod tls;
