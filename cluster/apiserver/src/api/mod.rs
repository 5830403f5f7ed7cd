//! api

pub mod object_meta;
pub mod query;
pub mod selectors;
pub mod status;
