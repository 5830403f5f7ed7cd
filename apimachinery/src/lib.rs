//! # apimachinery: the pieces both sides of the wire need
//!
//! Kubernetes keeps the code that clients and the API server share in one module,
//! `k8s.io/apimachinery`: label selectors, name validation, durations, UIDs, wait and clock
//! helpers. This crate is that module for this workspace. The controller library
//! (`sample_controller`) and the embedded API server (`embedded_apiserver`) both depend on it
//! and on nothing of each other, so a helper they both need is written once, here.
//!
//! | module | apimachinery / client-go analogue |
//! |---|---|
//! | [`clock`] | `k8s.io/utils/clock`: a wall clock that follows tokio's (pausable) clock |
//! | [`cron`] | `robfig/cron/v3` (`ParseStandard`): CronJob schedules, as the API server validates and the CronJob controller runs them |
//! | [`crypto`] | (none: rustls' process-wide crypto provider, installed once) |
//! | [`duration`] | Go's `time.ParseDuration` and `Duration.String`, as every component's flags use them |
//! | [`labels`] | `pkg/labels`: label selectors, parsed and matched |
//! | [`malloc`] | (none: Go's runtime returns memory by itself; glibc's malloc is tuned and trimmed here) |
//! | [`quantity`] | `pkg/api/resource`: quantities (`500m`, `64Mi`) parsed, added, compared and printed canonically |
//! | [`serving`] | Go's `http.Server` limits: connections, header-read and idle timeouts, HTTP/2 streams |
//! | [`shrink`] | (none: Go's maps never shrink either) collections that give back a burst's room once drained |
//! | [`signals`] | sample-controller's `pkg/signals`: SIGINT/SIGTERM, twice to exit |
//! | [`token_bucket`] | `golang.org/x/time/rate.Limiter` (client-go's throttle, workqueue and event spam filter) |
//! | [`uuid`] | `util/uuid`: random version-4 UUIDs for `metadata.uid` |
//! | [`validation`] | `pkg/util/validation`, `pkg/api/validation` (names, labels, metadata) |
//!
//! No unsafe code, except in [`malloc`]'s two calls into glibc (`mallopt`, `malloc_trim`),
//! which are allowed there alone: the crate denies `unsafe_code` (the workspace lint) instead of
//! forbidding it, since a `forbid` cannot be lifted for one module.

#![deny(unsafe_code)]

pub mod clock;
pub mod cron;
pub mod crypto;
pub mod duration;
pub mod labels;
pub mod malloc;
pub mod quantity;
pub mod serving;
pub mod shrink;
pub mod signals;
pub mod token_bucket;
pub mod uuid;
pub mod validation;
