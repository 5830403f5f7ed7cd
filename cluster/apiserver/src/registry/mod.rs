//! registry

pub mod admissionregistration;
pub mod apps;
pub mod batch;
pub mod core;
pub mod generic;
pub mod patch;
pub mod resources;
pub mod strategy;
pub mod typed;
pub mod validation;
#[doc(hidden)]
pub use resources::{CustomInfo, Registry, ResourceDef, ScaleSpec, View};
