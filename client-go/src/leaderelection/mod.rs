//! # Leader election: one active controller among many replicas
//!
//! client-go's `tools/leaderelection`. A controller is usually deployed with two or more
//! replicas so that a crashed pod or a drained node does not stop reconciliation. But two
//! replicas reconciling the same objects at once would fight: both create the Pod for an `At`,
//! both write its status. Leader election makes exactly one replica *active*; the others wait,
//! caches warm, ready to take over.
//!
//! ## How a Lease makes one leader
//!
//! All candidates contend for one `coordination.k8s.io/v1` Lease (conventionally
//! `<namespace>/<controller name>`). Its spec says who holds it and for how long:
//!
//! ```yaml
//! spec:
//!   holderIdentity: pod-a_4f1c...          # the leader
//!   leaseDurationSeconds: 15               # how long others wait after the last change
//!   acquireTime: "2026-01-01T10:00:00.000000Z"
//!   renewTime:   "2026-01-01T10:03:58.000000Z"
//!   leaseTransitions: 3                    # how often it changed hands
//! ```
//!
//! Two rules make it safe:
//!
//! 1. **Writes are compare-and-swap.** Every update carries the `resourceVersion` the writer
//!    last saw; if anyone wrote in between, the API server answers 409 Conflict. Two candidates
//!    racing for a free lease cannot both win.
//! 2. **Expiry is measured on the observer's own clock.** A standby does not compare the
//!    leader's `renewTime` with its own clock (they may disagree by minutes). It notes *when it
//!    saw the record change* (`observed_time`, local monotonic time) and considers the lease
//!    expired only after `leaseDurationSeconds` pass with no change. The leader renews every
//!    `retry_period`, so a live leader's record keeps changing and never looks expired.
//!
//! ## Timeline
//!
//! Defaults: lease 15 s, renew deadline 10 s, retry 2 s (acquire retries jittered to 2–4.4 s).
//!
//! ```text
//! time (s)   0    2    4    6    8   10   12   14   16   18   20   22   24
//!            |    |    |    |    |    |    |    |    |    |    |    |    |
//! A (leader) C----R----R----R----x----x----x----x----x----S
//!            |              |    renewal round from t=8: a try every 2 s,
//!            |              |    deadline t=8+10=18 -> S: stop leading, cancel work
//!            |              last successful renewal (t=6)
//! B (standby) g----g----g----g------g------g------g------g-------T
//!             g = GET; whenever the record changed since the last GET,
//!             observed_time = now (B's clock). Last change B saw: A's t=6
//!             renewal, seen at t>=6, so the lease expires for B at >= 6+15 = 21;
//!             B's first try after that (jittered 2-4.4 s apart) takes over:
//!             T = update holder B, leaseTransitions + 1
//!
//! With release_on_cancel, a graceful shutdown of A writes holderIdentity "" and
//! leaseDurationSeconds 1: B's next attempt (within 2-4.4 s) takes the lease at once.
//! ```
//!
//! The numbers are chosen so a leader that cannot renew stops working *before* anyone else may
//! start: it gives up at most `retry_period + renew_deadline` (12 s) after its last successful
//! renewal, while a standby waits at least `lease_duration` (15 s) after *seeing* that renewal.
//! There is a gap, never an overlap, as long as the clocks *tick* at the same rate (they need
//! not agree on the time of day).
//!
//! ## What leader election gates
//!
//! **Leader election gates the workers, not the informers.** Every replica starts its informers
//! at once, syncs its caches, and reports ready on `/readyz`; only the leader starts the
//! controllers' workers (in `on_started_leading`). A standby therefore keeps warm caches and,
//! when it takes over, starts reconciling from a synced cache instead of a cold start. When
//! leadership is lost, the token handed to `on_started_leading` is cancelled: the workers must
//! stop. client-go's callers then exit the process (`klog.Fatal("leaderelection lost")`); here
//! [`LeaderElector::run`] returns and the manager decides.
//!
//! ## Use
//!
//! ```no_run
//! # async fn demo(client: sample_client_go::client::Client) {
//! use sample_client_go::leaderelection::{
//!     LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! let lock = LeaseLock::new(client, "kube-system", "cnat-controller");
//! let mut config = LeaderElectionConfig::new(lock, "pod-a_4f1c");
//! config.release_on_cancel = true;
//! let callbacks = LeaderCallbacks::new(
//!     |leading: CancellationToken| async move {
//!         // start the workers; return when `leading` is cancelled
//!         leading.cancelled().await;
//!     },
//!     || tracing::info!("stopped leading"),
//! )
//! .on_new_leader(|id| tracing::info!(leader = id, "new leader"));
//! let elector = LeaderElector::new(config, callbacks).expect("valid config");
//! elector.run(CancellationToken::new()).await;
//! # }
//! ```
//!
//! ## Differences from client-go
//!
//! * On the way out, `run` cancels the leader's token and **waits** for `on_started_leading`
//!   to return before it releases the lease, so release-on-cancel can never hand the lease to a
//!   successor while this process still works. client-go releases concurrently and documents
//!   that the caller must make sure the work has stopped.
//! * `on_new_leader` runs inline on the election task (client-go starts a goroutine), so calls
//!   arrive in order; it must not block.
//! * Every lock call is bounded by the renew deadline (client-go relies on the HTTP client's
//!   timeout, set to half the renew deadline by `NewFromKubeconfig`).
//! * Coordinated leader election (`preferredHolder`, `strategy`) is carried through the record
//!   but not acted on.

pub mod elector;
pub mod lease_lock;

pub use elector::{
    ConfigError, DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
    JITTER_FACTOR, LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaderMetrics,
};
pub use lease_lock::{LeaderElectionRecord, LeaseLock, ResourceLock};
