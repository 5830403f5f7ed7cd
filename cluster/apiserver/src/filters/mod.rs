//! filters

pub mod faults;
pub mod flowcontrol;
pub mod impersonation;
pub mod request_log;
