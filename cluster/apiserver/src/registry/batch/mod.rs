//! batch

pub mod cronjobs;
pub mod jobs;
