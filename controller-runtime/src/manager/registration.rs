//! # Registering a controller with the manager
//!
//! The manager runs whatever it is given: a [`Registration`] says how to build one controller
//! from the manager's shared machinery ([`BuildContext`]: the client, the one informer factory,
//! the event broadcaster, the queue metrics, the clock), and, optionally, what the manager
//! should know about it:
//!
//! | method | what the manager does with it |
//! |---|---|
//! | [`Registration::new`] | the name `--controllers` selects, and the build function, called once per run before the informers start |
//! | [`Registration::with_crd`] | the start-up check: one `LIST ?limit=1` of the custom resource, so a missing CRD is one clear error naming it |
//! | [`Registration::with_cache_scope`] | narrows the shared caches (a label selector or a slim type per kind) before any informer is made |
//! | [`Registration::with_sharding`] | the controller may run as a shard of a ring: which caches to narrow to the shard, which kinds the sharder moves |
//! | [`Registration::with_webhook`] | a path the webhook server routes to this controller's admission or conversion handler |
//!
//! controller-runtime's `builder.ControllerManagedBy(mgr).For(...).Owns(...).Complete(r)` is
//! [`crate::builder::Builder`], which produces a `Registration`; an operator that wires its
//! informers by hand (the five of `sample-operators`) writes its `Registration` directly.
//! Either way it reaches the manager through [`Manager::register`](super::Manager::register), and gets
//! the same leader election, metrics, probes, graceful shutdown and sharding.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use sample_client_go::cache::{CacheObject, ClientSource, SharedInformerFactory};
use sample_client_go::client::{self, Api, Client, ListParams};
use sample_client_go::keytrace::KeyTracer;
use sample_client_go::record::EventBroadcaster;
use sample_client_go::workqueue::{QueueMetrics, RateLimitingQueue};

use crate::controller::{Clock, Controller, Operator, QueueKey, RunError, SyncStats};
use crate::metrics::ControllerMetrics;
use crate::resource::CustomResourceExt;
use crate::sharding::Sharder;
use crate::webhook::Route;

/// What every controller is built from: the shared client, informer factory, event broadcaster,
/// queue metrics, key tracer and clock of one manager.
pub struct BuildContext<'a> {
    /// The client the controller writes with.
    pub client: &'a Client,
    /// The manager's one informer factory (shared caches, one watch per type).
    pub factory: &'a SharedInformerFactory<ClientSource>,
    /// Where the controller's event recorder comes from.
    pub broadcaster: &'a EventBroadcaster,
    /// The registry the controller's named queue reports to.
    pub queue_metrics: &'a QueueMetrics,
    /// The `controller_sync_*` families.
    pub controller_metrics: ControllerMetrics,
    /// Wall-clock time (virtual in tests).
    pub clock: Clock,
    /// The manager's key tracer, which its `/trace` endpoint reads; every queue made here
    /// reports the hops of traced keys to it.
    pub key_tracer: &'a KeyTracer,
}

impl BuildContext<'_> {
    /// A rate-limited queue named after operator `O` (so it has `workqueue_*` metrics).
    pub fn queue<O: Operator>(&self) -> RateLimitingQueue<QueueKey> {
        self.named_queue(O::NAME)
    }

    /// A rate-limited queue named `name` (the controller's name), with client-go's default
    /// controller rate limiter, reporting traced keys' hops to the manager's tracer as `name`'s.
    pub fn named_queue(&self, name: &'static str) -> RateLimitingQueue<QueueKey> {
        let queue =
            RateLimitingQueue::named_with_default_controller_rate_limiter(name, self.queue_metrics);
        queue.set_key_tracer(self.key_tracer.clone(), name);
        queue
    }

    /// Sync counters that also feed the `controller_sync_*` metrics.
    pub fn stats(&self) -> SyncStats {
        SyncStats::with_metrics(self.controller_metrics.clone())
    }
}

/// Builds a controller from a manager's [`BuildContext`].
pub type BuildFn =
    Box<dyn Fn(&BuildContext<'_>) -> Result<Arc<dyn Controller>, RunError> + Send + Sync>;

/// One `LIST ?limit=1` of a custom resource (in a namespace, or in all).
pub type ListOneFn = Box<
    dyn for<'a> Fn(&'a Client, Option<&'a str>) -> BoxFuture<'a, client::Result<()>> + Send + Sync,
>;

/// Narrows the shared caches for the enabled controllers (their names, in start order).
pub type CacheScopeFn =
    fn(SharedInformerFactory<ClientSource>, &[&str]) -> SharedInformerFactory<ClientSource>;

/// How a controller runs as one shard of a ring (see [`crate::sharding`]).
#[derive(Clone, Copy)]
pub struct ShardKinds {
    /// Narrows the caches of the controller's kinds to one shard, given the shard's label
    /// selector (`shard.sample-controller.dev/<ring>=<id>`): its own kind to that selector,
    /// the kinds it owns to that selector and whatever narrows them already.
    pub scope: fn(SharedInformerFactory<ClientSource>, &str) -> SharedInformerFactory<ClientSource>,
    /// Adds the controller's kinds to the ring's sharder: its own kind with
    /// [`Sharder::with_owner`], the kinds it creates with [`Sharder::with_owned`].
    pub sharder: fn(Sharder) -> Sharder,
}

impl std::fmt::Debug for ShardKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardKinds").finish_non_exhaustive()
    }
}

/// A controller the manager can run: see the module documentation.
pub struct Registration {
    pub(crate) name: &'static str,
    pub(crate) build: BuildFn,
    pub(crate) crd: Option<(String, ListOneFn)>,
    pub(crate) cache_scope: Option<CacheScopeFn>,
    pub(crate) sharding: Option<ShardKinds>,
    pub(crate) webhooks: Vec<(&'static str, Route)>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("crd", &self.crd.as_ref().map(|(name, _)| name))
            .field("sharded", &self.sharding.is_some())
            .field(
                "webhooks",
                &self.webhooks.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// A controller named `name` (what `--controllers` selects, its log field and metrics
    /// label), built by `build`.
    pub fn new(
        name: &'static str,
        build: impl Fn(&BuildContext<'_>) -> Result<Arc<dyn Controller>, RunError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Registration {
            name,
            build: Box::new(build),
            crd: None,
            cache_scope: None,
            sharding: None,
            webhooks: Vec::new(),
        }
    }

    /// The controller reconciles the custom resource `K`: before anything starts, the manager
    /// checks that `K`'s CRD is served (a 404 is [`ManagerError::CrdMissing`](super::ManagerError::CrdMissing)
    /// naming it, objects that do not decode are [`ManagerError::Undecodable`](super::ManagerError::Undecodable)).
    pub fn with_crd<K: CustomResourceExt + CacheObject>(mut self) -> Self {
        self.crd = Some((K::crd_name(), Box::new(list_one::<K>)));
        self
    }

    /// Narrows the manager's shared caches before any informer is made (label selectors per
    /// kind, slim cached types). Applied for every enabled controller that has one, in start
    /// order; it must be idempotent, since controllers sharing a kind may apply the same one.
    pub fn with_cache_scope(mut self, scope: CacheScopeFn) -> Self {
        self.cache_scope = Some(scope);
        self
    }

    /// The controller can run as a shard of a ring (`--shard-mode=sharded`); without this, a
    /// sharded manager skips it with a warning.
    pub fn with_sharding(mut self, kinds: ShardKinds) -> Self {
        self.sharding = Some(kinds);
        self
    }

    /// The webhook server routes `path` to `route` (served whenever the webhook server runs).
    pub fn with_webhook(mut self, path: &'static str, route: Route) -> Self {
        self.webhooks.push((path, route));
        self
    }

    /// The controller's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The name of the CRD it needs, when it has one ([`Registration::with_crd`]).
    pub fn crd_name(&self) -> Option<&str> {
        self.crd.as_ref().map(|(name, _)| name.as_str())
    }

    /// Whether it can run as a shard.
    pub fn is_sharded(&self) -> bool {
        self.sharding.is_some()
    }

    /// How it runs as a shard ([`Registration::with_sharding`]).
    pub fn shard_kinds(&self) -> Option<ShardKinds> {
        self.sharding
    }
}

fn list_one<'a, K: CacheObject>(
    client: &'a Client,
    namespace: Option<&'a str>,
) -> BoxFuture<'a, client::Result<()>> {
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams {
        limit: Some(1),
        ..ListParams::default()
    };
    Box::pin(async move { api.list(&params).await.map(drop) })
}

/// The controllers a manager knows: every registered name in start order, and those that can
/// run as shards. `--controllers` is checked against it ([`super::resolve_controllers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownControllers {
    /// Every name, in start order.
    pub names: Vec<&'static str>,
    /// The names of the controllers that can run as shards.
    pub sharded: Vec<&'static str>,
}

impl KnownControllers {
    /// What `registrations` offer.
    pub fn of(registrations: &[Registration]) -> Self {
        KnownControllers {
            names: registrations.iter().map(|r| r.name).collect(),
            sharded: registrations
                .iter()
                .filter(|r| r.is_sharded())
                .map(|r| r.name)
                .collect(),
        }
    }
}
