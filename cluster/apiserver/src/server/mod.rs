//! server

pub mod bootstrap;
pub mod connections;
pub mod tls;
pub mod x509;
