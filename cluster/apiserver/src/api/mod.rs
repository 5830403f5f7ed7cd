//! api

pub mod folded;
pub mod json_order;
pub mod limits;
pub mod object_meta;
pub mod query;
pub mod selectors;
pub mod status;
pub mod user;

/// The response body type of every answer (JSON documents, watch streams, logs and the
/// streams' upgrade answers alike).
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>;
