//! filters

pub mod authentication;
pub mod authorization;
pub mod body_limit;
pub mod faults;
pub mod flowcontrol;
pub mod impersonation;
pub mod request_log;
