//! endpoints

pub mod access_review;
pub mod discovery;
pub mod handlers;
pub mod openapi;
pub mod openapi_docs;
pub mod openapi_v2_docs;
pub mod partial;
pub mod printers;
pub mod protobuf;
pub mod table;
pub mod token_review;
pub mod watch;
