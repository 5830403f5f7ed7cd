//! The sharder: keeps every object of the ring assigned to a live shard, and moves objects
//! when the ring changes, following the state machine of the [module documentation](super).
//!
//! kubernetes-controller-sharding's `pkg/controller/sharder`, in the shape of a client-go
//! controller with one periodic pass instead of a per-object work queue:
//!
//! ```text
//! Lease informer (label sharding.sample-controller.dev/ring=<ring>) ──┐
//! owner informers (At, TDSet, RedisCluster, MyApp, Foo) ──────────────┼──> pass, every sync period
//! owned informers (StatefulSets, Deployments, Services, pods) ────────┘
//! pass: live shards ──> Ring ──> for each owner: assign | drain | move ──> for each owned: follow
//! ```
//!
//! * **Live shards.** A shard Lease is live while its holder is set and its record has
//!   changed within `leaseDurationSeconds`, as observed on this process's monotonic clock
//!   (the rule of [`sample_client_go::leaderelection`]: the sharder never compares the shard's
//!   `renewTime` with its own clock). A Lease released on a graceful stop (holder empty) is
//!   dead at once. A sharder that has just started sees every Lease as changed "now", so it
//!   waits a whole Lease duration before it declares a silent shard dead.
//! * **Owners.** For each object of an owner kind, `desired = ring(namespace/name)` and
//!   `current` its shard label:
//!   - no `current` → **assign** (set the label);
//!   - `current` = `desired` → nothing;
//!   - `current` live → **drain** (add the drain label, once) and wait for the shard's release
//!     ([`super::drain`]);
//!   - `current` dead → **move** (set the label to `desired`, remove a drain label).
//!
//!   Every write is a merge PATCH carrying the `resourceVersion` the decision was made from, so
//!   a decision made on a stale cache answers 409 Conflict and is simply made again on the next
//!   pass with fresh data.
//! * **Owned objects** follow their controller owner's shard once the owner is assigned and not
//!   draining (one PATCH each, also under a `resourceVersion` precondition). A shard
//!   reconciles owned objects only through their owner's sync, so the owner is the only
//!   synchronisation point needed; until the owned object is relabelled, the new shard finds it
//!   by name (409 AlreadyExists) and adopts it.
//!
//! New objects are assigned in admission by the manager's `/mutate-shard` route
//! ([`crate::webhook::shard`]), from the ring each pass publishes; an object the webhook did
//! not label (webhook not configured or unreachable, or served by a replica that does not lead
//! the sharder) is assigned by the next pass (the sync period, 1 s by default).
//!
//! ## What it costs
//!
//! This sharder watches the sharded objects (kubernetes-controller-sharding's first iteration);
//! its second iteration watches only the Leases and lists the objects (metadata only) when the
//! ring changes, so that the sharder's memory does not grow with the objects. Here the
//! sharder's caches hold every owner object and every owned object of the operators, on the
//! process that leads the sharder: about what one leader's caches held. A pass is O(objects)
//! in memory reads and O(objects that must change) in writes.
//!
//! ## Metrics
//!
//! | metric | labels | meaning |
//! |---|---|---|
//! | `sharding_assignments_total` | `ring`, `shard` | unassigned objects given to the shard |
//! | `sharding_movements_total` | `ring`, `shard` | objects moved to the shard from a dead one |
//! | `sharding_drains_total` | `ring`, `shard` | objects the shard was asked to let go |
//! | `sharding_assigned_objects` | `ring`, `shard` | owner objects labelled for the shard (last pass) |
//! | `sharding_ring_shards` | `ring` | live shards on the ring (last pass) |

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use apimachinery::labels::Selector;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::labels::RingLabels;
use super::ring::{Ring, object_key};
use sample_client_go::cache::{
    CacheObject, ClientSource, Lister, ObjectMetaAccess, SharedInformerFactory,
};
use sample_client_go::client::{self, Api, Client, Patch, PatchParams};

/// The ring the leading sharder of this process computed last, for the admission webhook
/// ([`crate::webhook::shard`]); `None` while this process does not lead a sharder.
static PUBLISHED: std::sync::RwLock<Option<(RingLabels, Ring)>> = std::sync::RwLock::new(None);

/// Publishes (or, with `None`, withdraws) the ring the webhook assigns new objects with.
pub fn publish_ring(ring: Option<(RingLabels, Ring)>) {
    *PUBLISHED.write().unwrap_or_else(|p| p.into_inner()) = ring;
}

/// The ring last published by [`publish_ring`].
pub fn published_ring() -> Option<(RingLabels, Ring)> {
    PUBLISHED.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The default time between two passes.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(1);

type Labels = Vec<(String, String)>;

/// The sharder's counters and gauges (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct SharderMetrics {
    assignments: Family<Labels, Counter>,
    movements: Family<Labels, Counter>,
    drains: Family<Labels, Counter>,
    assigned: Family<Labels, Gauge>,
    shards: Family<Labels, Gauge>,
}

impl SharderMetrics {
    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "sharding_assignments",
            "Unassigned objects the sharder gave to a shard.",
            self.assignments.clone(),
        );
        registry.register(
            "sharding_movements",
            "Objects the sharder moved to a shard from a dead one.",
            self.movements.clone(),
        );
        registry.register(
            "sharding_drains",
            "Objects a live shard was asked to let go.",
            self.drains.clone(),
        );
        registry.register(
            "sharding_assigned_objects",
            "Owner objects labelled for each shard, at the last pass.",
            self.assigned.clone(),
        );
        registry.register(
            "sharding_ring_shards",
            "Live shards on the ring, at the last pass.",
            self.shards.clone(),
        );
    }

    fn labels(ring: &str, shard: &str) -> Labels {
        vec![
            ("ring".to_string(), ring.to_string()),
            ("shard".to_string(), shard.to_string()),
        ]
    }

    /// `sharding_assignments_total{ring, shard}`.
    pub fn assignments(&self, ring: &str, shard: &str) -> u64 {
        self.assignments
            .get_or_create(&Self::labels(ring, shard))
            .get()
    }

    /// `sharding_movements_total{ring, shard}`.
    pub fn movements(&self, ring: &str, shard: &str) -> u64 {
        self.movements
            .get_or_create(&Self::labels(ring, shard))
            .get()
    }

    /// `sharding_drains_total{ring, shard}`.
    pub fn drains(&self, ring: &str, shard: &str) -> u64 {
        self.drains.get_or_create(&Self::labels(ring, shard)).get()
    }

    /// `sharding_assigned_objects{ring, shard}`.
    pub fn assigned_objects(&self, ring: &str, shard: &str) -> i64 {
        self.assigned
            .get_or_create(&Self::labels(ring, shard))
            .get()
    }
}

/// What the sharder watches and where.
#[derive(Clone, Debug)]
pub struct SharderConfig {
    /// The ring's label keys.
    pub labels: RingLabels,
    /// The namespace of the ring's Leases.
    pub lease_namespace: String,
    /// The time between passes.
    pub sync_period: Duration,
}

/// How a process runs the ring's sharder: leader-elected on the Lease `<ring>-sharder` in the
/// shard Leases' namespace, with leader election's timings. A shard started with
/// `--shard-sharder=true` contends with its shard id ([`super::ShardConfig::sharder_election`]);
/// a process started with `--controllers=sharder` contends with its manager identity and runs
/// nothing else. All candidates of a ring share the one Lease, so exactly one sharder runs
/// whichever processes host it.
#[derive(Clone, Debug, PartialEq)]
pub struct SharderElection {
    /// The ring's label keys.
    pub labels: RingLabels,
    /// The namespace of the ring's Leases, the sharder's own included.
    pub lease_namespace: String,
    /// How long the sharder's Lease stays valid without a renewal.
    pub lease_duration: Duration,
    /// How long the leading sharder keeps retrying a renewal before it stops.
    pub renew_deadline: Duration,
    /// The time between the candidates' attempts.
    pub retry_period: Duration,
}

impl SharderElection {
    /// The sharder's Lease: `<ring>-sharder`.
    pub fn lease_name(&self) -> String {
        format!("{}-sharder", self.labels.ring())
    }
}

/// Which shard each owner (by namespace, kind and name) is settled on: assigned and not
/// draining. Filled by the owners' pass, read by the owned objects'.
type Settled = HashMap<(String, String, String), String>;

struct Pass<'a> {
    client: &'a Client,
    labels: &'a RingLabels,
    ring: &'a Ring,
    metrics: &'a SharderMetrics,
    settled: Settled,
    assigned: BTreeMap<String, i64>,
}

type BoxFut<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One kind the sharder handles, type-erased.
trait KindPass: Send + Sync {
    /// Owned kinds: records in `pass.settled` the shard each object must carry (its controller
    /// owner's), so that what *it* controls can follow it in turn. Nothing is written.
    fn resolve(&self, _pass: &mut Pass<'_>) {}
    fn run<'a>(&'a self, pass: &'a mut Pass<'_>) -> BoxFut<'a>;
    fn synced(&self) -> bool;
}

struct Owners<K: CacheObject>(Lister<K>, sample_client_go::cache::SharedIndexInformer<K>);
struct Owned<K: CacheObject>(Lister<K>, sample_client_go::cache::SharedIndexInformer<K>);

fn api_for<K: CacheObject>(client: &Client, meta: &impl ObjectMetaAccess) -> Api<K> {
    match meta.namespace() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A label write under the `resourceVersion` it was decided from.
async fn patch_labels<K: CacheObject>(
    client: &Client,
    meta: &impl ObjectMetaAccess,
    labels: Value,
) -> Result<(), client::Error> {
    let patch = json!({"metadata": {"resourceVersion": meta.resource_version(), "labels": labels}});
    api_for::<K>(client, meta)
        .patch(
            meta.name().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map(drop)
}

fn log_write_error(kind: &str, meta: &impl ObjectMetaAccess, what: &str, e: &client::Error) {
    if e.is_conflict() || e.is_not_found() {
        // Decided on a stale cache, or gone: the next pass decides again.
        tracing::debug!(kind, name = meta.name(), what, error = %e, "sharder write skipped");
    } else {
        tracing::warn!(kind, namespace = meta.namespace(), name = meta.name(), what, error = %e, "sharder write failed");
    }
}

impl<K> KindPass for Owners<K>
where
    K: CacheObject + Resource + Metadata<Ty = ObjectMeta>,
{
    fn synced(&self) -> bool {
        self.1.has_synced()
    }

    fn run<'a>(&'a self, pass: &'a mut Pass<'_>) -> BoxFut<'a> {
        Box::pin(async move {
            let (shard_key, drain_key) = (pass.labels.shard_key(), pass.labels.drain_key());
            let ring_name = pass.labels.ring();
            for obj in self.0.list(&Selector::everything()) {
                let meta = obj.metadata();
                let labels = meta.labels.clone().unwrap_or_default();
                let current = labels.get(shard_key).cloned();
                let draining = labels.contains_key(drain_key);
                if let Some(c) = &current {
                    *pass.assigned.entry(c.clone()).or_default() += 1;
                }
                let name = meta.name.clone().unwrap_or_default();
                let ns = meta.namespace.clone().unwrap_or_default();
                let Some(desired) = pass
                    .ring
                    .shard_for(&object_key(meta.namespace.as_deref(), &name))
                else {
                    continue;
                };
                let settle = |pass: &mut Pass<'_>, shard: &str| {
                    pass.settled.insert(
                        (ns.clone(), K::KIND.to_string(), name.clone()),
                        shard.to_string(),
                    );
                };
                match current {
                    Some(c) if c == desired => {
                        if !draining {
                            settle(pass, desired);
                        }
                    }
                    Some(c) if pass.ring.contains(&c) => {
                        if draining {
                            continue; // asked already; the shard releases it
                        }
                        match patch_labels::<K>(pass.client, meta, json!({ drain_key: "true" }))
                            .await
                        {
                            Ok(()) => {
                                pass.metrics
                                    .drains
                                    .get_or_create(&SharderMetrics::labels(ring_name, &c))
                                    .inc();
                            }
                            Err(e) => log_write_error(K::KIND, meta, "drain", &e),
                        }
                    }
                    // Unassigned, or its shard left the ring: label it for its shard now.
                    _ => {
                        let (counter, what) = if current.is_none() {
                            (&pass.metrics.assignments, "assign")
                        } else {
                            (&pass.metrics.movements, "move")
                        };
                        let r = patch_labels::<K>(
                            pass.client,
                            meta,
                            json!({ shard_key: desired, drain_key: null }),
                        )
                        .await;
                        match r {
                            Ok(()) => {
                                counter
                                    .get_or_create(&SharderMetrics::labels(ring_name, desired))
                                    .inc();
                                settle(pass, desired);
                            }
                            Err(e) => log_write_error(K::KIND, meta, what, &e),
                        }
                    }
                }
            }
        })
    }
}

/// The shard an owned object must carry: its controller owner's settled shard (an owner of a
/// sharded kind, or an owned object resolved before it, e.g. a RedisCluster's StatefulSet for
/// the StatefulSet's pods).
fn owner_shard<'a>(settled: &'a Settled, meta: &impl ObjectMetaAccess) -> Option<&'a String> {
    let owner = meta.owner_references().find(|r| r.controller)?;
    let ns = meta.namespace().unwrap_or_default().to_owned();
    settled.get(&(ns, owner.kind.to_owned(), owner.name.to_owned()))
}

impl<K> KindPass for Owned<K>
where
    K: CacheObject + Resource,
{
    fn synced(&self) -> bool {
        self.1.has_synced()
    }

    fn resolve(&self, pass: &mut Pass<'_>) {
        for obj in self.0.list(&Selector::everything()) {
            let meta = obj.metadata();
            if let Some(shard) = owner_shard(&pass.settled, meta).cloned() {
                let ns = meta.namespace().unwrap_or_default().to_owned();
                let name = meta.name().unwrap_or_default().to_owned();
                pass.settled.insert((ns, K::KIND.to_string(), name), shard);
            }
        }
    }

    fn run<'a>(&'a self, pass: &'a mut Pass<'_>) -> BoxFut<'a> {
        Box::pin(async move {
            let shard_key = pass.labels.shard_key();
            for obj in self.0.list(&Selector::everything()) {
                let meta = obj.metadata();
                let Some(shard) = owner_shard(&pass.settled, meta) else {
                    continue;
                };
                let current = meta.labels().and_then(|l| l.get(shard_key));
                if current == Some(shard) {
                    continue;
                }
                let r = patch_labels::<K>(pass.client, meta, json!({ shard_key: shard })).await;
                if let Err(e) = r {
                    log_write_error(K::KIND, meta, "follow the owner", &e);
                }
            }
        })
    }
}

/// Tracks when each shard Lease was last seen to change, on this process's clock.
#[derive(Debug, Default)]
struct LeaseTracker {
    seen: HashMap<String, (String, Instant)>,
}

impl LeaseTracker {
    /// The live shard ids among `leases` at `now` (see the module doc).
    fn live(&mut self, leases: &[Arc<Lease>], now: Instant) -> Vec<String> {
        let mut live = Vec::new();
        let mut present = Vec::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let spec = lease.spec.clone().unwrap_or_default();
            let entry = self.seen.entry(name.clone()).or_insert((rv.clone(), now));
            if entry.0 != rv {
                *entry = (rv, now);
            }
            present.push(name.clone());
            let holder = spec.holder_identity.unwrap_or_default();
            let duration = Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15),
            );
            if !holder.is_empty() && now.duration_since(entry.1) < duration {
                live.push(name);
            }
        }
        self.seen.retain(|k, _| present.contains(k));
        live
    }
}

/// The sharder of one ring. Build it with [`Sharder::new`], add the kinds with
/// [`Sharder::with_owner`] and [`Sharder::with_owned`], then [`Sharder::run`] it (on the
/// leader only: two sharders would not break safety, every write being conditional, but
/// would double the writes).
pub struct Sharder {
    client: Client,
    config: SharderConfig,
    factory: SharedInformerFactory<ClientSource>,
    leases: Lister<Lease>,
    lease_informer: sample_client_go::cache::SharedIndexInformer<Lease>,
    owners: Vec<(TypeId, Box<dyn KindPass>)>,
    owned: Vec<(TypeId, Box<dyn KindPass>)>,
    metrics: SharderMetrics,
}

impl Sharder {
    /// A sharder for `config`'s ring, watching through `client`.
    pub fn new(client: Client, config: SharderConfig) -> Self {
        let factory = SharedInformerFactory::new(ClientSource(client.clone()), Duration::ZERO)
            .with_label_selector_for::<Lease>(config.labels.lease_selector());
        // The ring's Leases, in their namespace only: the sharder needs no cluster-wide read of
        // Leases (artifacts/deploy/sharded/ grants list and watch there alone).
        let mut lease_scope = factory.scope_for::<Lease>();
        lease_scope.namespace = Some(config.lease_namespace.clone());
        let lease_informer = factory.informer_for::<Lease>(lease_scope);
        Sharder {
            leases: lease_informer.lister(),
            lease_informer,
            client,
            config,
            factory,
            owners: Vec::new(),
            owned: Vec::new(),
            metrics: SharderMetrics::default(),
        }
    }

    /// Shards objects of kind `K` by their own `namespace/name`.
    pub fn with_owner<K>(mut self) -> Self
    where
        K: CacheObject + Resource + Metadata<Ty = ObjectMeta>,
    {
        if self.owners.iter().any(|(t, _)| *t == TypeId::of::<K>()) {
            return self;
        }
        let informer = self.factory.informer::<K>();
        self.owners.push((
            TypeId::of::<K>(),
            Box::new(Owners(informer.lister(), informer)),
        ));
        self
    }

    /// Objects of kind `K` follow their controller owner's shard: an owner of a kind added
    /// with [`Sharder::with_owner`], or an owned object of a kind added *before* `K` (a pod
    /// whose controller is a RedisCluster's StatefulSet follows the RedisCluster). Each pass
    /// resolves the owned kinds in the order added, then writes them in the reverse order:
    /// the pods of a moved StatefulSet are relabelled before the StatefulSet itself.
    ///
    /// Adding a kind again (two operators own Deployments) moves it after the kinds added
    /// since, so every operator's order holds (RedisCluster adds its StatefulSet before pods
    /// that the At added first).
    pub fn with_owned<K>(mut self) -> Self
    where
        K: CacheObject + Resource,
    {
        if let Some(i) = self.owned.iter().position(|(t, _)| *t == TypeId::of::<K>()) {
            let kind = self.owned.remove(i);
            self.owned.push(kind);
            return self;
        }
        let informer = self.factory.informer::<K>();
        self.owned.push((
            TypeId::of::<K>(),
            Box::new(Owned(informer.lister(), informer)),
        ));
        self
    }

    /// Watches kind `K` with `selector` (call it before the kind is added): the owned kinds are
    /// watched with the selector their operators' caches use, so the sharder sees what the
    /// shards see.
    pub fn with_label_selector_for<K: CacheObject>(mut self, selector: impl Into<String>) -> Self {
        self.factory = self.factory.with_label_selector_for::<K>(selector.into());
        self
    }

    /// Uses `metrics` (e.g. already registered with the manager's registry).
    pub fn with_metrics(mut self, metrics: SharderMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The sharder's metrics (register them with [`SharderMetrics::register`]).
    pub fn metrics(&self) -> SharderMetrics {
        self.metrics.clone()
    }

    fn synced(&self) -> bool {
        self.lease_informer.has_synced()
            && self.owners.iter().all(|(_, k)| k.synced())
            && self.owned.iter().all(|(_, k)| k.synced())
    }

    /// Runs passes every sync period until `stop` is cancelled, then stops the informers.
    pub async fn run(self, stop: CancellationToken) {
        self.factory.start(&stop);
        let mut tracker = LeaseTracker::default();
        let mut known_shards: Vec<String> = Vec::new();
        let ring_name = self.config.labels.ring().to_string();
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.config.sync_period) => {}
            }
            if !self.synced() {
                continue;
            }
            let leases: Vec<Arc<Lease>> = self
                .leases
                .list(&Selector::everything())
                .into_iter()
                .filter(|l| l.metadata.namespace.as_deref() == Some(&self.config.lease_namespace))
                .collect();
            let live = tracker.live(&leases, Instant::now());
            let ring = Ring::new(live);
            publish_ring(Some((self.config.labels.clone(), ring.clone())));
            self.metrics
                .shards
                .get_or_create(&vec![("ring".to_string(), ring_name.clone())])
                .set(i64::try_from(ring.shards().len()).unwrap_or(i64::MAX));
            let mut pass = Pass {
                client: &self.client,
                labels: &self.config.labels,
                ring: &ring,
                metrics: &self.metrics,
                settled: Settled::new(),
                assigned: BTreeMap::new(),
            };
            for (_, kind) in &self.owners {
                kind.run(&mut pass).await;
            }
            for (_, kind) in &self.owned {
                kind.resolve(&mut pass);
            }
            for (_, kind) in self.owned.iter().rev() {
                kind.run(&mut pass).await;
            }
            for s in ring.shards().iter().chain(&known_shards) {
                let n = pass.assigned.get(s).copied().unwrap_or(0);
                self.metrics
                    .assigned
                    .get_or_create(&SharderMetrics::labels(&ring_name, s))
                    .set(n);
            }
            known_shards = pass.assigned.keys().cloned().collect();
        }
        publish_ring(None);
        self.factory.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn lease(name: &str, rv: &str, holder: &str) -> Arc<Lease> {
        Arc::new(Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
        })
    }

    #[test]
    fn a_lease_is_live_until_a_lease_duration_passes_without_a_change() {
        let mut t = LeaseTracker::default();
        let t0 = Instant::now();
        let l = vec![
            lease("a", "1", "a"),
            lease("b", "1", "b"),
            lease("c", "1", ""),
        ];
        // a released Lease (holder empty) is dead at once
        assert_eq!(t.live(&l, t0), ["a", "b"]);
        // b renews at 10 s; a does not
        let l = vec![lease("a", "1", "a"), lease("b", "2", "b")];
        assert_eq!(t.live(&l, t0 + Duration::from_secs(10)), ["a", "b"]);
        assert_eq!(t.live(&l, t0 + Duration::from_secs(16)), ["b"]);
        assert_eq!(
            t.live(&l, t0 + Duration::from_secs(26)),
            Vec::<String>::new()
        );
    }
}
