//! core

pub mod ephemeral_containers;
pub mod events;
pub mod pod_actions;
pub mod services;
