//! Expectations: remembering what this controller created until its informer has seen it.
//!
//! A controller reads from listers, and a lister lags the API server: after
//! `create(pod)` returns, the pod reaches the pod informer's store only when its watch event
//! arrives, a few milliseconds (or, on a loaded server, seconds) later. If the owner is synced
//! again inside that window, the lister says "no pod" and a naive controller creates a second
//! one (or, with a fixed name, gets `409 AlreadyExists`). kube-controller-manager's ReplicaSet
//! and Job controllers solve this with `ControllerExpectations`
//! (`pkg/controller/controller_utils.go`); this is the same idea, reduced to what an owner with
//! a handful of children needs:
//!
//! 1. **before** calling `create`, the sync records [`expect_creations`](Expectations::expect_creations)
//!    for the owner's key (before, so that a watch event that beats the create's response
//!    cannot be missed);
//! 2. the child informer's add handler calls [`creation_observed`](Expectations::creation_observed)
//!    for the owner found through the child's controller ownerReference;
//! 3. a failed `create` also calls `creation_observed`: nothing will arrive
//!    ([`expecting`](Expectations::expecting) does steps 1 and 3 around one create);
//! 4. while [`satisfied`](Expectations::satisfied) is false, the sync does not trust "absent"
//!    in the lister.
//!
//! Expectations expire after a TTL (5 minutes, as `ExpectationsTimeout`), so a lost watch
//! event can delay an owner but never wedge it; expiry is judged with `tokio::time`, so paused
//! tests control it. Deleting the owner should [`forget`](Expectations::forget) its entry.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// kube-controller-manager's `ExpectationsTimeout`.
pub const DEFAULT_EXPECTATIONS_TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy)]
struct Pending {
    creations: i64,
    since: Instant,
}

/// Outstanding creations per owner key. Shared by the sync handler and the event handlers.
#[derive(Debug)]
pub struct Expectations {
    ttl: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

impl Default for Expectations {
    fn default() -> Self {
        Expectations::new(DEFAULT_EXPECTATIONS_TTL)
    }
}

impl Expectations {
    /// Expectations that expire after `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Expectations {
            ttl,
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        // A panic while holding this lock cannot leave the map inconsistent (every update is a
        // single insert or remove), so a poisoned lock is safe to keep using.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `n` creations for `key` are about to be issued.
    pub fn expect_creations(&self, key: &str, n: i64) {
        self.lock().insert(
            key.to_string(),
            Pending {
                creations: n,
                since: Instant::now(),
            },
        );
    }

    /// One expected creation for `key` was observed (or will never happen).
    pub fn creation_observed(&self, key: &str) {
        let mut map = self.lock();
        if let Some(p) = map.get_mut(key) {
            p.creations -= 1;
            if p.creations <= 0 {
                map.remove(key);
            }
        }
    }

    /// Steps 1 and 3 around one create: records one expected creation for `key`, runs
    /// `create` (a future not yet polled, such as `api.create(&pp, &obj)`), and takes the
    /// expectation back when it fails, since nothing will arrive. Every owning operator
    /// creates its dependents through this.
    pub async fn expecting<T, E>(
        &self,
        key: &str,
        create: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.expect_creations(key, 1);
        let result = create.await;
        if result.is_err() {
            self.creation_observed(key);
        }
        result
    }

    /// True when nothing is outstanding for `key`, or what was expected has expired.
    pub fn satisfied(&self, key: &str) -> bool {
        let mut map = self.lock();
        match map.get(key) {
            None => true,
            Some(p) if p.creations <= 0 => {
                map.remove(key);
                true
            }
            Some(p) if p.since.elapsed() >= self.ttl => {
                tracing::info!(key, "expectations expired; trusting the lister again");
                map.remove(key);
                true
            }
            Some(_) => false,
        }
    }

    /// Drops whatever is recorded for `key` (the owner was deleted).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    /// How many keys have outstanding expectations.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no key has outstanding expectations.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lifecycle_and_expiry() {
        let e = Expectations::new(Duration::from_secs(60));
        assert!(e.satisfied("ns/a"));
        e.expect_creations("ns/a", 1);
        assert!(!e.satisfied("ns/a"));
        assert!(e.satisfied("ns/b"));
        e.creation_observed("ns/b");
        assert!(!e.satisfied("ns/a"));
        e.creation_observed("ns/a");
        assert!(e.satisfied("ns/a"));
        assert!(e.is_empty());

        e.expect_creations("ns/a", 2);
        e.creation_observed("ns/a");
        assert!(!e.satisfied("ns/a"));
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!e.satisfied("ns/a"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(e.satisfied("ns/a"));

        e.expect_creations("ns/c", 1);
        e.forget("ns/c");
        assert!(e.satisfied("ns/c"));
    }

    #[tokio::test(start_paused = true)]
    async fn expecting_holds_the_expectation_while_the_create_runs_and_returns_it_on_failure() {
        let e = Expectations::new(Duration::from_secs(60));
        // The expectation is recorded before the create runs.
        let seen = e
            .expecting("ns/a", async { Ok::<_, ()>(e.satisfied("ns/a")) })
            .await;
        assert_eq!(seen, Ok(false));
        // A create that succeeded waits for the informer...
        assert!(!e.satisfied("ns/a"));
        e.creation_observed("ns/a");
        assert!(e.satisfied("ns/a"));
        // ...one that failed expects nothing.
        let failed = e.expecting("ns/b", async { Err::<(), _>("refused") }).await;
        assert_eq!(failed, Err("refused"));
        assert!(e.satisfied("ns/b"));
    }
}
