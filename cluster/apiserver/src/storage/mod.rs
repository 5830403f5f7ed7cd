//! storage

pub mod durable;
pub mod memory;
pub mod store;
pub mod stored;
