//! webhook

pub mod client;
