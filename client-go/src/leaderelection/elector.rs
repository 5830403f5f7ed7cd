//! The elector: acquire, renew, release, and the callbacks around them.
//!
//! client-go's `tools/leaderelection/leaderelection.go`, step for step. See the
//! [module documentation](super) for the timeline; the rules are:
//!
//! * **acquire**: try at once, then every `retry_period × (1 + rand·1.2)` (2 s to 4.4 s) until
//!   the lock is ours or `run`'s token is cancelled;
//! * **renew**: every `retry_period`, renew; a renewal may retry every `retry_period` but must
//!   succeed within `renew_deadline` of its start, else leadership is lost;
//! * **expiry** is judged by the *local* time at which this elector last saw the record change
//!   (`observed_time`), plus the record's `leaseDurationSeconds`; the `renewTime` written by
//!   another process, on another clock, is never compared with ours;
//! * `on_stopped_leading` always runs when [`LeaderElector::run`] returns, even if leadership
//!   was never acquired; `run` does not try again (processes normally exit and restart).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lease_lock::{LeaderElectionRecord, ResourceLock};
use crate::record::{EventRecorder, EventType};

/// client-go's `JitterFactor`: acquire retries wait `retry_period × (1 + rand × 1.2)`.
pub const JITTER_FACTOR: f64 = 1.2;

/// Lease duration of core components (15 s).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Renew deadline of core components (10 s).
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Retry period of core components (2 s).
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// How an election is run. Build with [`LeaderElectionConfig::new`] (client-go's defaults) and
/// adjust the public fields.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig<L> {
    /// The lock all candidates contend for (a [`super::LeaseLock`]).
    pub lock: L,
    /// This candidate's unique identity (conventionally `<hostname>_<uuid>`).
    pub identity: String,
    /// How long non-leaders wait after last seeing the record change before taking over
    /// (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a renewal before it gives up leading (10 s).
    pub renew_deadline: Duration,
    /// Wait between attempts (2 s).
    pub retry_period: Duration,
    /// On cancellation, write an empty holder with a 1 s lease so a successor takes over at
    /// once. Only safe when all work guarded by the election has stopped, which
    /// [`LeaderElector::run`] waits for before it releases.
    pub release_on_cancel: bool,
    /// The election's name for metrics and logs (default: the lock's description).
    pub name: String,
}

impl<L: ResourceLock> LeaderElectionConfig<L> {
    /// A config with client-go's defaults: 15 s / 10 s / 2 s, no release on cancel.
    pub fn new(lock: L, identity: impl Into<String>) -> Self {
        let name = lock.describe();
        LeaderElectionConfig {
            lock,
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: false,
            name,
        }
    }
}

/// A config that cannot work.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `lease_duration` must exceed `renew_deadline`.
    #[error(
        "leaseDuration ({lease_duration:?}) must be greater than renewDeadline ({renew_deadline:?})"
    )]
    LeaseNotLongerThanRenew {
        /// The lease duration given.
        lease_duration: Duration,
        /// The renew deadline given.
        renew_deadline: Duration,
    },
    /// `renew_deadline` must exceed 1.2 × `retry_period`.
    #[error(
        "renewDeadline ({renew_deadline:?}) must be greater than retryPeriod*JitterFactor ({retry_period:?} * 1.2)"
    )]
    RenewNotLongerThanRetry {
        /// The renew deadline given.
        renew_deadline: Duration,
        /// The retry period given.
        retry_period: Duration,
    },
    /// A duration is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// `lease_duration`, `renew_deadline` or `retry_period`.
        field: &'static str,
    },
    /// `lease_duration` is not at least one whole second (the Lease stores whole seconds).
    #[error("leaseDuration ({0:?}) must be at least one second")]
    LeaseTooShort(Duration),
    /// The identity is empty.
    #[error("lock identity is empty")]
    EmptyIdentity,
}

type StartedFn = dyn Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + Sync;
type StoppedFn = dyn Fn() + Send + Sync;
type NewLeaderFn = dyn Fn(&str) + Send + Sync;

/// What to do when leadership starts, stops or moves (client-go's `LeaderCallbacks`).
#[derive(Clone)]
pub struct LeaderCallbacks {
    on_started_leading: Arc<StartedFn>,
    on_stopped_leading: Arc<StoppedFn>,
    on_new_leader: Option<Arc<NewLeaderFn>>,
}

impl fmt::Debug for LeaderCallbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderCallbacks")
            .field("on_new_leader", &self.on_new_leader.is_some())
            .finish_non_exhaustive()
    }
}

impl LeaderCallbacks {
    /// `on_started_leading(token)` runs on its own task when leadership is acquired; it must
    /// stop its work and return once `token` is cancelled (leadership lost or shutting down).
    /// `on_stopped_leading()` runs when [`LeaderElector::run`] returns.
    pub fn new<S, Fut, T>(on_started_leading: S, on_stopped_leading: T) -> Self
    where
        S: Fn(CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        T: Fn() + Send + Sync + 'static,
    {
        LeaderCallbacks {
            on_started_leading: Arc::new(move |t| Box::pin(on_started_leading(t))),
            on_stopped_leading: Arc::new(on_stopped_leading),
            on_new_leader: None,
        }
    }

    /// `on_new_leader(identity)` runs whenever the observed holder changes (including to this
    /// candidate). It runs inline on the election task, so it must not block.
    pub fn on_new_leader(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_new_leader = Some(Arc::new(f));
        self
    }
}

#[derive(Debug, Default)]
struct State {
    observed: Option<LeaderElectionRecord>,
    observed_time: Option<Instant>,
    reported_leader: String,
    leading: bool,
}

struct Inner<L> {
    config: LeaderElectionConfig<L>,
    callbacks: LeaderCallbacks,
    state: Mutex<State>,
    metrics: Option<Arc<dyn LeaderMetrics>>,
    recorder: Option<EventRecorder>,
}

/// Where an elector reports whether it leads: client-go's leader-election metrics provider
/// (`leaderelection.SetProvider`, whose `leader_election_master_status` gauge
/// controller-runtime exports). `sample_controller_runtime::metrics::LeaderElectionMetrics`
/// implements it.
pub trait LeaderMetrics: Send + Sync + 'static {
    /// This process leads election `name` (`true`), or does not.
    fn set_leading(&self, name: &str, leading: bool);
}

/// Runs one candidate in a leader election. Cheap to clone; clones share state, so one clone
/// can `run` while another answers [`LeaderElector::is_leader`].
pub struct LeaderElector<L> {
    inner: Arc<Inner<L>>,
}

impl<L> Clone for LeaderElector<L> {
    fn clone(&self) -> Self {
        LeaderElector {
            inner: self.inner.clone(),
        }
    }
}

impl<L: ResourceLock> fmt::Debug for LeaderElector<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("identity", &self.inner.config.identity)
            .field("lock", &self.inner.config.lock.describe())
            .field("leader", &self.get_leader())
            .finish()
    }
}

/// How one renewal round ended.
enum Renewal {
    Renewed,
    Lost,
    Cancelled,
}

impl<L: ResourceLock> LeaderElector<L> {
    /// Validates `config` (lease > renew deadline > 1.2 × retry period, all non-zero, a
    /// non-empty identity) and builds an elector.
    pub fn new(
        config: LeaderElectionConfig<L>,
        callbacks: LeaderCallbacks,
    ) -> Result<Self, ConfigError> {
        for (field, d) in [
            ("leaseDuration", config.lease_duration),
            ("renewDeadline", config.renew_deadline),
            ("retryPeriod", config.retry_period),
        ] {
            if d.is_zero() {
                return Err(ConfigError::Zero { field });
            }
        }
        if config.lease_duration <= config.renew_deadline {
            return Err(ConfigError::LeaseNotLongerThanRenew {
                lease_duration: config.lease_duration,
                renew_deadline: config.renew_deadline,
            });
        }
        if config.renew_deadline.as_secs_f64() <= JITTER_FACTOR * config.retry_period.as_secs_f64()
        {
            return Err(ConfigError::RenewNotLongerThanRetry {
                renew_deadline: config.renew_deadline,
                retry_period: config.retry_period,
            });
        }
        if config.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::LeaseTooShort(config.lease_duration));
        }
        if config.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        Ok(LeaderElector {
            inner: Arc::new(Inner {
                config,
                callbacks,
                state: Mutex::new(State::default()),
                metrics: None,
                recorder: None,
            }),
        })
    }

    /// Reports leadership in `leader_election_master_status{name}` (1 leading, 0 not).
    /// Call before [`LeaderElector::run`] and before cloning.
    pub fn with_metrics(mut self, metrics: impl LeaderMetrics) -> Self {
        let metrics: Arc<dyn LeaderMetrics> = Arc::new(metrics);
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            metrics.set_leading(&inner.config.name, false);
            inner.metrics = Some(metrics);
        }
        self
    }

    /// Records `"<identity> became leader"` / `"<identity> stopped leading"` events on the lock
    /// object, as client-go's resource locks do. Call before [`LeaderElector::run`] and before
    /// cloning.
    pub fn with_event_recorder(mut self, recorder: EventRecorder) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.recorder = Some(recorder);
        }
        self
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.inner.config.identity
    }

    /// True from the moment this candidate acquired the lease until its renew loop ended
    /// (renewal failed or `run` was cancelled): exactly the span in which
    /// `on_started_leading`'s token is live. (client-go's `IsLeader` instead compares the last
    /// observed holder with the identity, which stays true for a leader whose renewals are
    /// silently failing; that comparison is [`LeaderElector::holds_observed_record`].)
    pub fn is_leader(&self) -> bool {
        self.state().leading
    }

    /// True when the last observed record names this candidate as holder (client-go's
    /// `IsLeader`).
    pub fn holds_observed_record(&self) -> bool {
        self.state()
            .observed
            .as_ref()
            .is_some_and(|r| r.holder_identity == self.inner.config.identity)
    }

    /// The holder identity last observed (empty when the lease is released or unknown).
    pub fn get_leader(&self) -> String {
        self.state()
            .observed
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .unwrap_or_default()
    }

    /// Health check (client-go's `HealthzAdaptor.Check`): fails when this candidate believes
    /// it leads but has not renewed for longer than the lease duration plus `tolerance`, i.e.
    /// the renew loop is stuck and another process may already lead.
    pub fn check(&self, tolerance: Duration) -> Result<(), String> {
        if !self.is_leader() {
            return Ok(());
        }
        let since = self
            .state()
            .observed_time
            .map(|t| Instant::now().duration_since(t))
            .unwrap_or_default();
        if since > self.inner.config.lease_duration + tolerance {
            return Err(format!(
                "failed election to renew leadership on lease {}: last renewed {since:?} ago",
                self.inner.config.name
            ));
        }
        Ok(())
    }

    /// Runs the election until `cancel` fires or leadership is lost, then returns. See the
    /// [module documentation](super) for the sequence.
    pub async fn run(&self, cancel: CancellationToken) {
        let name = self.inner.config.name.clone();
        let identity = self.inner.config.identity.clone();
        if self.acquire(&cancel).await {
            self.state().leading = true;
            let leading = cancel.child_token();
            let work = tokio::spawn((self.inner.callbacks.on_started_leading)(leading.clone()));
            self.renew(&cancel).await;
            self.state().leading = false;
            tracing::info!(lease = %name, identity = %identity, "stopped leading");
            self.set_metric(false);
            self.record_event(format!("{identity} stopped leading"));
            leading.cancel();
            if let Err(e) = work.await
                && e.is_panic()
            {
                tracing::error!(lease = %name, error = %e, "on_started_leading panicked");
            }
            if self.inner.config.release_on_cancel {
                self.release().await;
            }
        }
        (self.inner.callbacks.on_stopped_leading)();
    }

    async fn acquire(&self, cancel: &CancellationToken) -> bool {
        let cfg = &self.inner.config;
        tracing::info!(lease = %cfg.name, identity = %cfg.identity, "attempting to acquire leader lease");
        loop {
            let acquired = tokio::select! {
                _ = cancel.cancelled() => return false,
                ok = tokio::time::timeout(cfg.renew_deadline, self.try_acquire_or_renew()) => ok.unwrap_or(false),
            };
            self.maybe_report_transition();
            if acquired {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "successfully acquired lease");
                self.set_metric(true);
                self.record_event(format!("{} became leader", cfg.identity));
                return true;
            }
            tracing::debug!(lease = %cfg.name, leader = %self.get_leader(), "lease is held by another candidate or could not be read");
            let wait = cfg
                .retry_period
                .mul_f64(1.0 + fastrand::f64() * JITTER_FACTOR);
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn renew(&self, cancel: &CancellationToken) {
        let cfg = &self.inner.config;
        loop {
            let outcome = self.renew_once(cancel).await;
            self.maybe_report_transition();
            match outcome {
                Renewal::Renewed => {
                    tracing::trace!(lease = %cfg.name, "renewed lease");
                }
                Renewal::Lost => {
                    tracing::warn!(lease = %cfg.name, identity = %cfg.identity, deadline = ?cfg.renew_deadline, "failed to renew lease");
                    return;
                }
                Renewal::Cancelled => return,
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(cfg.retry_period) => {}
            }
        }
    }

    /// One renewal: try now, then every retry period, until success or the renew deadline.
    async fn renew_once(&self, cancel: &CancellationToken) -> Renewal {
        let cfg = &self.inner.config;
        let deadline = Instant::now() + cfg.renew_deadline;
        loop {
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return Renewal::Cancelled,
                r = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(true) => return Renewal::Renewed,
                Ok(false) => {}
                Err(_elapsed) => return Renewal::Lost,
            }
            let next = Instant::now() + cfg.retry_period;
            if next >= deadline {
                tokio::select! {
                    _ = cancel.cancelled() => return Renewal::Cancelled,
                    _ = tokio::time::sleep_until(deadline) => return Renewal::Lost,
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Renewal::Cancelled,
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`; see the [module documentation](super).
    async fn try_acquire_or_renew(&self) -> bool {
        let cfg = &self.inner.config;
        let now = Instant::now();
        let wall = MicroTime(jiff::Timestamp::now());
        let mut desired = LeaderElectionRecord {
            holder_identity: cfg.identity.clone(),
            lease_duration_seconds: i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX),
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            leader_transitions: 0,
            preferred_holder: None,
            strategy: None,
        };

        // 1. Fast path: we hold a lease that is still valid by our own observation; update
        //    straight from the cached object (its resourceVersion guards against races).
        if self.holds_observed_record() && self.lease_valid(now) {
            if let Some(old) = self.state().observed.clone() {
                desired.acquire_time = old.acquire_time;
                desired.leader_transitions = old.leader_transitions;
            }
            match cfg.lock.update(&desired).await {
                Ok(()) => {
                    self.set_observed(desired, now);
                    return true;
                }
                Err(e) => {
                    tracing::debug!(lease = %cfg.name, error = %e, "fast-path renewal failed, falling back to a fresh read");
                }
            }
        }

        // 2. Slow path: read the lock; create it if it does not exist.
        let old = match cfg.lock.get().await {
            Ok(record) => record,
            Err(e) if e.is_not_found() => {
                return match cfg.lock.create(&desired).await {
                    Ok(()) => {
                        self.set_observed(desired, now);
                        true
                    }
                    Err(e) => {
                        tracing::debug!(lease = %cfg.name, error = %e, "creating the lease failed");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "error retrieving the lease");
                return false;
            }
        };

        // 3. A changed record restarts the expiry clock, measured on *our* clock.
        {
            let mut state = self.state();
            if state.observed.as_ref() != Some(&old) {
                state.observed = Some(old.clone());
                state.observed_time = Some(now);
            }
        }

        // 4. Someone else holds an unexpired lease: not ours to take.
        if !old.holder_identity.is_empty() && self.lease_valid(now) && !self.holds_observed_record()
        {
            tracing::trace!(lease = %cfg.name, holder = %old.holder_identity, "lock is held and has not yet expired");
            return false;
        }

        // 5. Keep acquireTime and transitions on renewal; count a transition on takeover.
        if self.holds_observed_record() {
            desired.acquire_time = old.acquire_time.clone();
            desired.leader_transitions = old.leader_transitions;
        } else {
            desired.leader_transitions = old.leader_transitions.saturating_add(1);
        }

        // 6. Write; a conflict (someone else wrote first) is a failed attempt.
        match cfg.lock.update(&desired).await {
            Ok(()) => {
                self.set_observed(desired, now);
                true
            }
            Err(e) => {
                tracing::debug!(lease = %cfg.name, error = %e, "updating the lease failed");
                false
            }
        }
    }

    /// Gives the lease up: holder "", duration 1 s, so a successor takes over at once. Tries
    /// every retry period for at most the renew deadline.
    async fn release(&self) {
        let cfg = &self.inner.config;
        let deadline = Instant::now() + cfg.renew_deadline;
        loop {
            if let Ok(true) = tokio::time::timeout_at(deadline, self.try_release()).await {
                return;
            }
            let next = Instant::now() + cfg.retry_period;
            if next >= deadline {
                tracing::warn!(lease = %cfg.name, "failed to release lease before the renew deadline");
                return;
            }
            tokio::time::sleep_until(next).await;
        }
    }

    async fn try_release(&self) -> bool {
        let cfg = &self.inner.config;
        let old = match cfg.lock.get().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "failed to read the lease to release it");
                return false;
            }
        };
        if old.holder_identity != cfg.identity {
            tracing::info!(lease = %cfg.name, holder = %old.holder_identity, "lease not held by this identity, nothing to release");
            return true;
        }
        let wall = MicroTime(jiff::Timestamp::now());
        let released = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(wall.clone()),
            renew_time: Some(wall),
            leader_transitions: old.leader_transitions,
            preferred_holder: None,
            strategy: None,
        };
        match cfg.lock.update(&released).await {
            Ok(()) => {
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "released lease");
                self.set_observed(released, Instant::now());
                true
            }
            Err(e) => {
                tracing::warn!(lease = %cfg.name, error = %e, "failed to release lease");
                false
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        match self.inner.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn lease_valid(&self, now: Instant) -> bool {
        let state = self.state();
        match (&state.observed, state.observed_time) {
            (Some(record), Some(at)) => {
                let secs = u64::try_from(record.lease_duration_seconds).unwrap_or(0);
                at + Duration::from_secs(secs) > now
            }
            _ => false,
        }
    }

    fn set_observed(&self, record: LeaderElectionRecord, at: Instant) {
        let mut state = self.state();
        state.observed = Some(record);
        state.observed_time = Some(at);
    }

    fn maybe_report_transition(&self) {
        let holder = {
            let mut state = self.state();
            let holder = state
                .observed
                .as_ref()
                .map(|r| r.holder_identity.clone())
                .unwrap_or_default();
            if state.reported_leader == holder {
                return;
            }
            state.reported_leader = holder.clone();
            holder
        };
        tracing::info!(lease = %self.inner.config.name, leader = %holder, "new leader observed");
        if let Some(f) = &self.inner.callbacks.on_new_leader {
            f(&holder);
        }
    }

    fn set_metric(&self, leading: bool) {
        if let Some(m) = &self.inner.metrics {
            m.set_leading(&self.inner.config.name, leading);
        }
    }

    fn record_event(&self, message: String) {
        if let Some(recorder) = &self.inner.recorder {
            recorder.event_for_reference(
                self.inner.config.lock.object_reference(),
                EventType::Normal,
                "LeaderElection",
                &message,
            );
        }
    }
}
