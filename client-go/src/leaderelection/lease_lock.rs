//! The lock: a `coordination.k8s.io/v1` Lease read and written with optimistic concurrency.
//!
//! client-go's `tools/leaderelection/resourcelock` (`interface.go`, `leaselock.go`). The elector
//! speaks only to the small [`ResourceLock`] trait (get, create, update the
//! [`LeaderElectionRecord`]); [`LeaseLock`] implements it on a Lease object:
//!
//! | record field | Lease `spec` field |
//! |---|---|
//! | `holder_identity` | `holderIdentity` |
//! | `lease_duration_seconds` | `leaseDurationSeconds` |
//! | `acquire_time` | `acquireTime` (MicroTime) |
//! | `renew_time` | `renewTime` (MicroTime) |
//! | `leader_transitions` | `leaseTransitions` |
//! | `preferred_holder`, `strategy` | `preferredHolder`, `strategy` (written only when set) |
//!
//! **Optimistic concurrency is the whole trick.** [`LeaseLock`] keeps the Lease object it last
//! read or wrote; an update PUTs that object with the new spec, so it carries the
//! `resourceVersion` this candidate last saw. If anyone wrote the Lease since, the API server
//! answers 409 Conflict and the update fails: two candidates can never both believe their write
//! won. The elector treats a conflict as one failed attempt and reads again.

use std::future::Future;
use std::sync::Mutex;

use k8s_openapi::Resource;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::client::{Api, Client, Error, PostParams, Result};

/// What a lock stores about the current leader (client-go's `LeaderElectionRecord`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaderElectionRecord {
    /// Who holds the lock; empty when released.
    pub holder_identity: String,
    /// How long others must wait, after last seeing this record change, before taking over.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired the lock.
    pub acquire_time: Option<MicroTime>,
    /// When the current holder last renewed (informational: expiry is judged on the reader's
    /// own clock, see the [module documentation](super)).
    pub renew_time: Option<MicroTime>,
    /// How many times the lock changed hands.
    pub leader_transitions: i32,
    /// Coordinated leader election: the candidate the coordinator prefers.
    pub preferred_holder: Option<String>,
    /// Coordinated leader election: the strategy in use.
    pub strategy: Option<String>,
}

impl LeaderElectionRecord {
    /// The record stored in a Lease's spec.
    pub fn from_lease_spec(spec: &LeaseSpec) -> Self {
        LeaderElectionRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.clone(),
            renew_time: spec.renew_time.clone(),
            leader_transitions: spec.lease_transitions.unwrap_or_default(),
            preferred_holder: spec.preferred_holder.clone(),
            strategy: spec.strategy.clone(),
        }
    }

    /// The Lease spec holding this record.
    pub fn to_lease_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.clone(),
            renew_time: self.renew_time.clone(),
            lease_transitions: Some(self.leader_transitions),
            preferred_holder: self.preferred_holder.clone(),
            strategy: self.strategy.clone(),
        }
    }
}

/// A lock candidates contend for (client-go's `resourcelock.Interface`).
pub trait ResourceLock: Send + Sync + 'static {
    /// Reads the record; an error for which [`Error::is_not_found`] holds means the lock
    /// object does not exist yet.
    fn get(&self) -> impl Future<Output = Result<LeaderElectionRecord>> + Send;
    /// Creates the lock object holding `record`.
    fn create(&self, record: &LeaderElectionRecord) -> impl Future<Output = Result<()>> + Send;
    /// Replaces the record, failing (409 Conflict) if the object changed since this lock last
    /// read or wrote it.
    fn update(&self, record: &LeaderElectionRecord) -> impl Future<Output = Result<()>> + Send;
    /// `namespace/name`, for logs and the metrics label.
    fn describe(&self) -> String;
    /// The lock object, for events about the election.
    fn object_reference(&self) -> ObjectReference;
}

/// A [`ResourceLock`] on a `coordination.k8s.io/v1` Lease.
#[derive(Debug)]
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    /// The Lease as last read or written (its resourceVersion guards updates).
    cached: Mutex<Option<Lease>>,
}

impl LeaseLock {
    /// The Lease `namespace/name`, read and written through `client`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        LeaseLock::from_api(Api::namespaced(client, namespace), namespace, name)
    }

    /// The same, from an existing `Api<Lease>` (its namespace is replaced by `namespace`).
    pub fn from_api(api: Api<Lease>, namespace: &str, name: &str) -> Self {
        let api = Api::namespaced(api.client().clone(), namespace);
        LeaseLock {
            api,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            labels: Default::default(),
            cached: Mutex::new(None),
        }
    }

    /// Labels merged into the Lease's metadata on every write (client-go's `Labels`).
    pub fn with_labels(mut self, labels: std::collections::BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    fn cached(&self) -> Option<Lease> {
        match self.cached.lock() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn store(&self, lease: Lease) {
        match self.cached.lock() {
            Ok(mut c) => *c = Some(lease),
            Err(poisoned) => *poisoned.into_inner() = Some(lease),
        }
    }

    fn merge_labels(&self, meta: &mut ObjectMeta) {
        if self.labels.is_empty() {
            return;
        }
        let labels = meta.labels.get_or_insert_with(Default::default);
        for (k, v) in &self.labels {
            labels.insert(k.clone(), v.clone());
        }
    }
}

impl ResourceLock for LeaseLock {
    async fn get(&self) -> Result<LeaderElectionRecord> {
        let lease = self.api.get(&self.name).await?;
        let record = LeaderElectionRecord::from_lease_spec(&lease.spec.clone().unwrap_or_default());
        self.store(lease);
        Ok(record)
    }

    async fn create(&self, record: &LeaderElectionRecord) -> Result<()> {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            spec: Some(record.to_lease_spec()),
        };
        self.merge_labels(&mut lease.metadata);
        let created = self.api.create(&PostParams::default(), &lease).await?;
        self.store(created);
        Ok(())
    }

    async fn update(&self, record: &LeaderElectionRecord) -> Result<()> {
        let Some(mut lease) = self.cached() else {
            return Err(Error::Other(format!(
                "lease {} not initialized, call get or create first",
                self.describe()
            )));
        };
        lease.spec = Some(record.to_lease_spec());
        self.merge_labels(&mut lease.metadata);
        let updated = self.api.update(&PostParams::default(), &lease).await?;
        self.store(updated);
        Ok(())
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn object_reference(&self) -> ObjectReference {
        let cached = self.cached();
        ObjectReference {
            kind: Some(Lease::KIND.to_owned()),
            api_version: Some(Lease::API_VERSION.to_owned()),
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: cached.as_ref().and_then(|l| l.metadata.uid.clone()),
            resource_version: None,
            field_path: None,
        }
    }
}
