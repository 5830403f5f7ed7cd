//! apps

pub mod replicas;
