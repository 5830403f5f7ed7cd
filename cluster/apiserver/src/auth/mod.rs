//! auth

pub mod escalation;
pub mod rbac;
pub mod tokens;
pub mod x509;
