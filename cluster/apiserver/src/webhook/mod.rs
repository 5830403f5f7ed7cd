//! webhook

pub mod client;
pub mod endpoint;
