//! Leader election on a real `coordination.k8s.io/v1` Lease in the embedded API server, through
//! [`LeaseLock`] and the crate's client: the server's resourceVersion checks are what keep two
//! candidates from both winning.
//!
//! These run on the real clock with short durations (lease 4-60 s, renew deadline 1 s, retry 200 ms), and assert
//! order and outcome, never elapsed time; the timing bounds of takeover and hand-over are
//! asserted on a paused clock in `tests/leaderelection_elector.rs`. The embedded server has no
//! fault injection yet, so a leader's failing renewals come from [`Partitionable`], a wrapper
//! around its lock that fails every call while its switch is on.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use sample_client_go::client::{
    Api, Client, Error, Patch, PatchParams, Result, TransportError, TransportKind,
};
use sample_client_go::leaderelection::{
    LeaderCallbacks, LeaderElectionConfig, LeaderElectionRecord, LeaderElector, LeaseLock,
    ResourceLock,
};
use support::record::*;
use tokio_util::sync::CancellationToken;

/// A lock whose calls all fail while `down` is set (a partitioned candidate).
struct Partitionable {
    inner: LeaseLock,
    down: Arc<AtomicBool>,
}

impl Partitionable {
    fn check(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::Transport(TransportError::new(
                TransportKind::ConnectionClosed,
                "PUT lease",
                "connection reset by peer",
            )));
        }
        Ok(())
    }
}

impl ResourceLock for Partitionable {
    async fn get(&self) -> Result<LeaderElectionRecord> {
        self.check()?;
        self.inner.get().await
    }
    async fn create(&self, record: &LeaderElectionRecord) -> Result<()> {
        self.check()?;
        self.inner.create(record).await
    }
    async fn update(&self, record: &LeaderElectionRecord) -> Result<()> {
        self.check()?;
        self.inner.update(record).await
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn object_reference(&self) -> ObjectReference {
        self.inner.object_reference()
    }
}

struct Candidate {
    elector: LeaderElector<Partitionable>,
    down: Arc<AtomicBool>,
    working: Arc<AtomicBool>,
    leaders_seen: Arc<Mutex<Vec<String>>>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(client: &Client, id: &str, lease_secs: u64, release: bool) -> Candidate {
    let down = Arc::new(AtomicBool::new(false));
    let lock = Partitionable {
        inner: LeaseLock::new(client.clone(), "kube-system", "cnat-controller"),
        down: down.clone(),
    };
    let mut config = LeaderElectionConfig::new(lock, id);
    config.lease_duration = Duration::from_secs(lease_secs);
    config.renew_deadline = Duration::from_secs(1);
    config.retry_period = Duration::from_millis(200);
    config.release_on_cancel = release;
    let working = Arc::new(AtomicBool::new(false));
    let leaders_seen = Arc::new(Mutex::new(Vec::new()));
    let (w, l) = (working.clone(), leaders_seen.clone());
    let callbacks = LeaderCallbacks::new(
        move |token: CancellationToken| {
            let w = w.clone();
            async move {
                w.store(true, Ordering::SeqCst);
                token.cancelled().await;
                w.store(false, Ordering::SeqCst);
            }
        },
        || {},
    )
    .on_new_leader(move |id| l.lock().unwrap().push(id.to_owned()));
    let elector = LeaderElector::new(config, callbacks).unwrap();
    let cancel = CancellationToken::new();
    let (e, c) = (elector.clone(), cancel.clone());
    let task = tokio::spawn(async move { e.run(c).await });
    Candidate {
        elector,
        down,
        working,
        leaders_seen,
        cancel,
        task,
    }
}

/// Polls every 20 ms until `cond` holds, checking that no two candidates do leader work at once;
/// gives up (fails) after 60 s so a broken election cannot hang the suite.
async fn wait_for(cands: &[&Candidate], what: &str, cond: impl Fn() -> bool) {
    let mut polls = 0u32;
    while !cond() {
        let working = cands
            .iter()
            .filter(|c| c.working.load(Ordering::SeqCst))
            .count();
        assert!(working <= 1, "two candidates do leader work at once");
        polls += 1;
        assert!(polls < 3000, "gave up waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn lease(client: &Client) -> Lease {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.get("cnat-controller").await.unwrap()
}

#[tokio::test]
async fn two_electors_on_one_lease_exactly_one_leads_and_takes_over_when_renewals_fail() {
    let server = server().await;
    let client = client(&server);
    let a = start(&client, "a", 4, false);
    wait_for(&[&a], "a leads", || a.elector.is_leader()).await;
    let b = start(&client, "b", 4, false);
    wait_for(&[&a, &b], "b sees a as leader", || {
        b.leaders_seen.lock().unwrap().first().map(String::as_str) == Some("a")
    })
    .await;
    assert!(a.elector.is_leader() && !b.elector.is_leader());
    let spec = lease(&client).await.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_duration_seconds, Some(4));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.renew_time.is_some() && spec.acquire_time.is_some());

    // The leader's renewals fail from now on.
    a.down.store(true, Ordering::SeqCst);
    wait_for(&[&a, &b], "b takes over", || b.elector.is_leader()).await;
    assert!(a.task.is_finished(), "a gave up before b could take over");
    assert!(!a.working.load(Ordering::SeqCst));
    let spec = lease(&client).await.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(*b.leaders_seen.lock().unwrap(), ["a", "b"]);
    b.cancel.cancel();
    b.task.await.unwrap();
}

#[tokio::test]
async fn release_on_shutdown_hands_over_without_waiting_for_expiry() {
    let server = server().await;
    let client = client(&server);
    // A one-minute lease: without the release, b would wait a minute (and the test give up).
    let a = start(&client, "a", 60, true);
    wait_for(&[&a], "a leads", || a.elector.is_leader()).await;
    a.cancel.cancel();
    a.task.await.unwrap();
    assert!(!a.working.load(Ordering::SeqCst));
    // Released: empty holder, one-second lease, transitions unchanged.
    let spec = lease(&client).await.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(0));

    let b = start(&client, "b", 60, false);
    wait_for(&[&b], "b takes the released lease", || {
        b.elector.is_leader()
    })
    .await;
    let spec = lease(&client).await.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    b.cancel.cancel();
    b.task.await.unwrap();
}

#[tokio::test]
async fn a_stale_resource_version_gets_409_and_the_elector_copes() {
    let server = server().await;
    let client = client(&server);
    let a = start(&client, "a", 5, false);
    wait_for(&[&a], "a leads", || a.elector.is_leader()).await;
    // Someone else writes the Lease (a label), so a's cached resourceVersion is stale.
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    api.patch(
        "cnat-controller",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    let log = server.request_log();
    wait_for(&[&a], "a's update is refused with 409", || {
        log.count_code("update", "leases", 409) >= 1
    })
    .await;
    let renewals = log.count_code("update", "leases", 200);
    wait_for(&[&a], "a renews again after re-reading", || {
        log.count_code("update", "leases", 200) > renewals
    })
    .await;
    assert!(
        a.elector.is_leader(),
        "a conflict is one failed try, not lost leadership"
    );
    let lease = lease(&client).await;
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));
    assert_eq!(
        lease
            .metadata
            .labels
            .unwrap()
            .get("touched")
            .map(String::as_str),
        Some("yes"),
        "the elector's update kept the other writer's change"
    );
    a.cancel.cancel();
    a.task.await.unwrap();
}

#[tokio::test]
async fn the_elector_records_leadership_events_on_the_lease() {
    use k8s_openapi::api::core::v1::Event;
    use sample_client_go::client::ListParams;
    use sample_client_go::record::{ApiEventSink, EventBroadcaster};

    let server = server().await;
    let client = client(&server);
    let broadcaster = EventBroadcaster::new();
    let sink = broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let lock = LeaseLock::new(client.clone(), "kube-system", "cnat-controller");
    let mut config = LeaderElectionConfig::new(lock, "pod-a");
    config.retry_period = Duration::from_millis(200);
    config.renew_deadline = Duration::from_secs(1);
    config.lease_duration = Duration::from_secs(4);
    let elector = LeaderElector::new(
        config,
        LeaderCallbacks::new(
            |t: CancellationToken| async move { t.cancelled().await },
            || {},
        ),
    )
    .unwrap()
    .with_event_recorder(broadcaster.new_recorder("cnat-controller"));
    let cancel = CancellationToken::new();
    let (e, c) = (elector.clone(), cancel.clone());
    let task = tokio::spawn(async move { e.run(c).await });
    let mut polls = 0;
    while !elector.is_leader() {
        polls += 1;
        assert!(polls < 3000, "never became leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    task.await.unwrap();
    broadcaster.shutdown();
    sink.join().await;

    let api: Api<Event> = Api::namespaced(client.clone(), "kube-system");
    let events = api.list(&ListParams::default()).await.unwrap().items;
    let messages: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
        .map(|e| {
            assert_eq!(e.involved_object.kind.as_deref(), Some("Lease"));
            assert_eq!(e.involved_object.name.as_deref(), Some("cnat-controller"));
            assert!(
                e.involved_object.uid.is_some(),
                "the Lease's uid is referenced"
            );
            e.message.clone().unwrap_or_default()
        })
        .collect();
    assert!(
        messages.contains(&"pod-a became leader".to_owned()),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"pod-a stopped leading".to_owned()),
        "{messages:?}"
    );
}
