//! The `batch` group's resources: [`jobs`] and [`cronjobs`].

pub mod cronjobs;
pub mod jobs;
