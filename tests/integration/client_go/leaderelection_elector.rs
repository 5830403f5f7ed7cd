//! The elector's state machine on a paused clock, over an in-memory lock that behaves like a
//! Lease on the API server: one shared record with a resourceVersion, updates that must carry
//! the resourceVersion the writer last read (else 409 Conflict), and per-candidate fault
//! injection (a partitioned candidate's calls all fail). The same election against the embedded
//! API server lives in `tests/leaderelection_apiserver.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use sample_client_go::client::{Error, Result, TransportError, TransportKind};
use sample_client_go::leaderelection::{
    ConfigError, LeaderCallbacks, LeaderElectionConfig, LeaderElectionRecord, LeaderElector,
    ResourceLock,
};
use sample_controller_runtime::metrics::Metrics;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Stored {
    record: Option<LeaderElectionRecord>,
    rv: u64,
    log: Vec<String>,
}

/// One candidate's view of the shared lock.
#[derive(Clone)]
struct MemLock {
    who: String,
    shared: Arc<Mutex<Stored>>,
    seen_rv: Arc<Mutex<Option<u64>>>,
    partitioned: Arc<AtomicBool>,
}

impl MemLock {
    fn new(who: &str, shared: &Arc<Mutex<Stored>>) -> Self {
        MemLock {
            who: who.into(),
            shared: shared.clone(),
            seen_rv: Arc::default(),
            partitioned: Arc::default(),
        }
    }
    fn check_partition(&self) -> Result<()> {
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(Error::Transport(TransportError::new(
                TransportKind::ConnectionRefused,
                "PUT lease",
                "partitioned",
            )));
        }
        Ok(())
    }
}

impl ResourceLock for MemLock {
    async fn get(&self) -> Result<LeaderElectionRecord> {
        self.check_partition()?;
        let s = self.shared.lock().unwrap();
        match &s.record {
            None => Err(Error::status(404, "NotFound", "leases \"lock\" not found")),
            Some(r) => {
                *self.seen_rv.lock().unwrap() = Some(s.rv);
                Ok(r.clone())
            }
        }
    }
    async fn create(&self, record: &LeaderElectionRecord) -> Result<()> {
        self.check_partition()?;
        let mut s = self.shared.lock().unwrap();
        if s.record.is_some() {
            return Err(Error::status(409, "AlreadyExists", "exists"));
        }
        s.rv += 1;
        s.record = Some(record.clone());
        *self.seen_rv.lock().unwrap() = Some(s.rv);
        let line = format!("{} create", self.who);
        s.log.push(line);
        Ok(())
    }
    async fn update(&self, record: &LeaderElectionRecord) -> Result<()> {
        self.check_partition()?;
        let mut s = self.shared.lock().unwrap();
        let seen = *self.seen_rv.lock().unwrap();
        if seen != Some(s.rv) {
            let line = format!("{} update 409", self.who);
            s.log.push(line);
            return Err(Error::status(
                409,
                "Conflict",
                "the object has been modified",
            ));
        }
        s.rv += 1;
        s.record = Some(record.clone());
        *self.seen_rv.lock().unwrap() = Some(s.rv);
        let line = format!("{} update {}", self.who, record.holder_identity);
        s.log.push(line);
        Ok(())
    }
    fn describe(&self) -> String {
        "demo/lock".into()
    }
    fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            kind: Some("Lease".into()),
            name: Some("lock".into()),
            namespace: Some("demo".into()),
            ..Default::default()
        }
    }
}

/// What a candidate's callbacks observed.
#[derive(Clone, Default)]
struct Seen {
    started: Arc<AtomicUsize>,
    /// Set while the leader's work runs (between started and its token's cancellation).
    working: Arc<AtomicBool>,
    stopped: Arc<AtomicUsize>,
    new_leaders: Arc<Mutex<Vec<String>>>,
}

fn elector(lock: MemLock, id: &str, release: bool, seen: &Seen) -> LeaderElector<MemLock> {
    let mut config = LeaderElectionConfig::new(lock, id);
    config.release_on_cancel = release;
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    let callbacks = LeaderCallbacks::new(
        move |token: CancellationToken| {
            let s = s1.clone();
            async move {
                s.started.fetch_add(1, Ordering::SeqCst);
                s.working.store(true, Ordering::SeqCst);
                token.cancelled().await;
                s.working.store(false, Ordering::SeqCst);
            }
        },
        move || {
            s2.stopped.fetch_add(1, Ordering::SeqCst);
        },
    )
    .on_new_leader(move |id| s3.new_leaders.lock().unwrap().push(id.to_owned()));
    LeaderElector::new(config, callbacks).unwrap()
}

struct Candidate {
    elector: LeaderElector<MemLock>,
    lock: MemLock,
    seen: Seen,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(id: &str, shared: &Arc<Mutex<Stored>>, release: bool) -> Candidate {
    let lock = MemLock::new(id, shared);
    let seen = Seen::default();
    let elector = elector(lock.clone(), id, release, &seen);
    let cancel = CancellationToken::new();
    let (e, c) = (elector.clone(), cancel.clone());
    let task = tokio::spawn(async move { e.run(c).await });
    Candidate {
        elector,
        lock,
        seen,
        cancel,
        task,
    }
}

/// Steps the paused clock in 100 ms ticks until `cond` holds; asserts "never two leaders" and
/// "a leader's work runs only while it leads" at every tick. Returns the virtual time taken.
async fn run_until(cands: &[&Candidate], limit: Duration, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let leaders = cands.iter().filter(|c| c.elector.is_leader()).count();
        assert!(leaders <= 1, "two candidates lead at once");
        let working = cands
            .iter()
            .filter(|c| c.seen.working.load(Ordering::SeqCst))
            .count();
        assert!(working <= 1, "two candidates do leader work at once");
    }
    start.elapsed()
}

fn holder(shared: &Arc<Mutex<Stored>>) -> LeaderElectionRecord {
    shared.lock().unwrap().record.clone().unwrap()
}

#[tokio::test(start_paused = true)]
async fn two_electors_exactly_one_leads() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let a = start("a", &shared, false);
    let b = start("b", &shared, false);
    run_until(&[&a, &b], Duration::from_secs(10), || {
        a.elector.is_leader() || b.elector.is_leader()
    })
    .await;
    // A minute of steady state: one leader, renewing; the other never gets in.
    let (leader, standby) = if a.elector.is_leader() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let before = shared.lock().unwrap().rv;
    run_until(&[&a, &b], Duration::from_secs(61), false_after(60)).await;
    assert!(leader.elector.is_leader() && !standby.elector.is_leader());
    assert_eq!(leader.seen.started.load(Ordering::SeqCst), 1);
    assert_eq!(standby.seen.started.load(Ordering::SeqCst), 0);
    let record = holder(&shared);
    assert_eq!(record.holder_identity, leader.elector.identity());
    assert_eq!(record.lease_duration_seconds, 15);
    assert_eq!(record.leader_transitions, 0);
    assert!(shared.lock().unwrap().rv >= before + 25, "renews every 2 s");
    assert_eq!(
        *standby.seen.new_leaders.lock().unwrap(),
        [leader.elector.identity().to_owned()]
    );
    assert_eq!(standby.elector.get_leader(), leader.elector.identity());
    for c in [&a, &b] {
        c.cancel.cancel();
    }
    for c in [a, b] {
        c.task.await.unwrap();
        assert_eq!(c.seen.stopped.load(Ordering::SeqCst), 1);
    }
}

/// A condition that becomes true once `secs` of virtual time have passed since it was made.
fn false_after(secs: u64) -> impl Fn() -> bool {
    let start = Instant::now();
    move || start.elapsed() >= Duration::from_secs(secs)
}

#[tokio::test(start_paused = true)]
async fn when_the_leaders_renewals_fail_the_standby_takes_over_after_expiry() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let a = start("a", &shared, false);
    run_until(&[&a], Duration::from_secs(5), || a.elector.is_leader()).await;
    let b = start("b", &shared, false);
    run_until(&[&a, &b], Duration::from_secs(10), false_after(6)).await;
    assert!(!b.elector.is_leader());

    // Partition the leader: every call it makes now fails.
    a.lock.partitioned.store(true, Ordering::SeqCst);
    let partitioned_at = Instant::now();
    let a_gave_up = run_until(&[&a, &b], Duration::from_secs(60), || {
        !a.elector.is_leader()
    })
    .await;
    assert!(
        a_gave_up <= Duration::from_secs(2 + 10),
        "A stops within retry period + renew deadline: {a_gave_up:?}"
    );
    assert!(!b.elector.is_leader());
    run_until(&[&a, &b], Duration::from_secs(60), || b.elector.is_leader()).await;
    let takeover = partitioned_at.elapsed();
    // A gives up within retry period + renew deadline of its last renewal; B may only take over
    // after a full lease duration without seeing a change, and does so on its next try.
    assert!(!a.elector.is_leader());
    assert!(
        a.task.is_finished(),
        "A's run returned after losing the lease"
    );
    assert!(
        takeover >= Duration::from_secs(15) - Duration::from_secs(2),
        "took over before the lease could expire: {takeover:?}"
    );
    assert!(
        takeover <= Duration::from_secs(15) + Duration::from_millis(2 * 4400),
        "takeover took {takeover:?}"
    );
    let record = holder(&shared);
    assert_eq!(record.holder_identity, "b");
    assert_eq!(record.leader_transitions, 1);
    assert_eq!(a.seen.stopped.load(Ordering::SeqCst), 1);
    assert!(
        !a.seen.working.load(Ordering::SeqCst),
        "A's work was cancelled"
    );
    assert_eq!(*b.seen.new_leaders.lock().unwrap(), ["a", "b"]);
    b.cancel.cancel();
    b.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_on_cancel_hands_over_at_once() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let a = start("a", &shared, true);
    run_until(&[&a], Duration::from_secs(5), || a.elector.is_leader()).await;
    let b = start("b", &shared, false);
    run_until(&[&a, &b], Duration::from_secs(10), false_after(5)).await;

    let cancelled_at = Instant::now();
    a.cancel.cancel();
    run_until(&[&a, &b], Duration::from_secs(15), || b.elector.is_leader()).await;
    let handover = cancelled_at.elapsed();
    assert!(
        handover <= Duration::from_millis(4400 + 200),
        "a released lease is taken at the next try, not after 15 s: {handover:?}"
    );
    a.task.await.unwrap();
    let log = shared.lock().unwrap().log.clone();
    assert!(
        log.contains(&"a update ".to_owned()),
        "a wrote an empty holder: {log:?}"
    );
    let record = holder(&shared);
    assert_eq!(record.holder_identity, "b");
    assert_eq!(record.leader_transitions, 1);
    b.cancel.cancel();
    b.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stale_resource_version_gets_409_and_the_leader_recovers() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let a = start("a", &shared, false);
    run_until(&[&a], Duration::from_secs(5), || a.elector.is_leader()).await;
    // Someone else (kubectl label, say) writes the Lease: A's cached resourceVersion is stale.
    {
        let mut s = shared.lock().unwrap();
        s.rv += 1;
    }
    run_until(&[&a], Duration::from_secs(10), false_after(5)).await;
    assert!(
        a.elector.is_leader(),
        "one conflict does not cost leadership"
    );
    let log = shared.lock().unwrap().log.clone();
    let conflict = log
        .iter()
        .position(|l| l == "a update 409")
        .expect("a 409 happened");
    assert_eq!(
        log[conflict + 1],
        "a update a",
        "re-read, then renewed: {log:?}"
    );
    assert_eq!(a.seen.started.load(Ordering::SeqCst), 1);
    a.cancel.cancel();
    a.task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_candidates_racing_for_a_free_lease_cannot_both_win() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    // A lease released by an earlier leader: free for the taking.
    shared.lock().unwrap().record = Some(LeaderElectionRecord {
        holder_identity: String::new(),
        lease_duration_seconds: 1,
        leader_transitions: 4,
        ..Default::default()
    });
    shared.lock().unwrap().rv = 10;
    let a = start("a", &shared, false);
    let b = start("b", &shared, false);
    run_until(&[&a, &b], Duration::from_secs(10), || {
        a.elector.is_leader() || b.elector.is_leader()
    })
    .await;
    run_until(&[&a, &b], Duration::from_secs(31), false_after(30)).await;
    assert_eq!(holder(&shared).leader_transitions, 5);
    for c in [a, b] {
        c.cancel.cancel();
        c.task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn on_stopped_leading_runs_even_without_leadership_and_metrics_follow() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let metrics = Metrics::new();
    let lock = MemLock::new("a", &shared);
    lock.partitioned.store(true, Ordering::SeqCst);
    let seen = Seen::default();
    let e = elector(lock.clone(), "a", false, &seen).with_metrics(metrics.leader_election());
    let cancel = CancellationToken::new();
    let (e2, c2) = (e.clone(), cancel.clone());
    let task = tokio::spawn(async move { e2.run(c2).await });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!e.is_leader());
    assert!(
        metrics
            .encode()
            .contains("leader_election_master_status{name=\"demo/lock\"} 0")
    );
    lock.partitioned.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(e.is_leader());
    assert!(
        metrics
            .encode()
            .contains("leader_election_master_status{name=\"demo/lock\"} 1")
    );
    assert!(e.check(Duration::from_secs(20)).is_ok());
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(seen.stopped.load(Ordering::SeqCst), 1);
    assert!(
        metrics
            .encode()
            .contains("leader_election_master_status{name=\"demo/lock\"} 0")
    );

    let never = Seen::default();
    let e = elector(MemLock::new("b", &shared), "b", false, &never);
    let cancel = CancellationToken::new();
    cancel.cancel();
    e.run(cancel).await;
    assert_eq!(never.stopped.load(Ordering::SeqCst), 1);
    assert_eq!(never.started.load(Ordering::SeqCst), 0);
}

#[test]
fn invalid_configs_are_refused_with_the_field_named() {
    let shared = Arc::new(Mutex::new(Stored::default()));
    let make = |lease: u64, renew: u64, retry: u64, id: &str| {
        let mut c = LeaderElectionConfig::new(MemLock::new("x", &shared), id);
        c.lease_duration = Duration::from_secs(lease);
        c.renew_deadline = Duration::from_secs(renew);
        c.retry_period = Duration::from_secs(retry);
        LeaderElector::new(c, LeaderCallbacks::new(|_| async {}, || {})).map(|_| ())
    };
    assert_eq!(make(15, 10, 2, "a"), Ok(()));
    assert!(matches!(
        make(10, 10, 2, "a"),
        Err(ConfigError::LeaseNotLongerThanRenew { .. })
    ));
    let e = make(15, 10, 9, "a").unwrap_err();
    assert!(e.to_string().contains("renewDeadline"), "{e}");
    assert_eq!(
        make(15, 10, 0, "a"),
        Err(ConfigError::Zero {
            field: "retryPeriod"
        })
    );
    assert_eq!(make(15, 10, 2, ""), Err(ConfigError::EmptyIdentity));
}
