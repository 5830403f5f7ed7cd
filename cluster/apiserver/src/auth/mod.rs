//! auth

pub mod rbac;
pub mod tokens;
