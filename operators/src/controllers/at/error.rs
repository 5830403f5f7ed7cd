//! The At controller's sync errors.

use super::*;

/// Why a sync failed. Every variant is retried with backoff by the worker loop.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The API server refused or failed the pod create.
    #[error("creating pod {namespace}/{pod}: {source}")]
    CreatePod {
        namespace: String,
        pod: String,
        #[source]
        source: client::Error,
    },
    /// The status write failed (a 409 Conflict means the cache was stale: retry).
    #[error("updating the status of At {key}: {source}")]
    UpdateStatus {
        key: String,
        #[source]
        source: client::Error,
    },
    /// Deleting the finished pod after `ttlSecondsAfterFinished` failed.
    #[error("deleting finished pod {namespace}/{pod}: {source}")]
    DeletePod {
        namespace: String,
        pod: String,
        #[source]
        source: client::Error,
    },
    /// The At in the cache lacks what every stored object has (a uid).
    #[error("At {key} has no metadata.uid; cannot own a pod")]
    MissingUid { key: String },
}
