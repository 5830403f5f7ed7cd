//! apiextensions

pub mod cel_rules;
pub mod conversion;
pub mod crd;
pub mod custom_resources;
pub mod schema;
