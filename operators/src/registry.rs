//! The operators this crate ships, in one typed table: for each, its name, how to build it,
//! the custom resource it reconciles, and the start-up check of that resource.
//!
//! kube-controller-manager keeps the same kind of table (`NewControllerDescriptors`: a name,
//! an `initFunc`, the aliases, whether it is on by default); `--controllers` is checked against
//! it, and everything that needs "all the operators" reads it rather than listing names again:
//!
//! ```text
//!   OPERATORS[i] = Entry { name: AtController::NAME, build, registration, crd_name, install_crd }
//!        │
//!        ├── registrations()  → Manager::register_all: each entry as a
//!        │                      sample_controller_runtime::manager::Registration (the public API
//!        │                      any controller uses: build, CRD check, cache scope, sharding, webhooks)
//!        ├── known()          → --controllers=at,-foo,* is checked against the names
//!        └── the demo         (entry.install_crd)(client), --operators lookup
//! ```
//!
//! Adding an operator is one entry here (plus its module); a name that is not in the table is
//! a [`UnknownOperator`] error that lists the known ones. The name of an entry is the
//! operator's [`Operator::NAME`], so it cannot drift from the name in its log lines and
//! metrics. The manager itself knows none of this table: it runs what it is given, the same
//! way it runs a controller of one's own (`examples/configmap-controller`).

use std::sync::Arc;

#[cfg(feature = "crds")]
use futures_util::future::BoxFuture;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use sample_client_go::cache::{
    ClientSource, ListerWatcherSource, ObjectMetaAccess, SharedInformerFactory,
};
use sample_controller_runtime::controller::{Controller, Operator, RunError};
use sample_controller_runtime::manager::{
    BuildContext, KnownControllers, Registration, ShardKinds,
};
use sample_controller_runtime::sharding::Sharder;
use sample_controller_runtime::webhook::{Handler, Route};

#[cfg(feature = "crds")]
use crate::apis::crds::{self, InstallError};
use crate::apis::{At, CustomResourceExt, Foo, MyApp, RedisCluster, TDSet};
use crate::controllers::{
    at::AtController, at::CONTROLLER_NAME as AT_CONTROLLER_NAME, foo, managed_by_selector, myapp,
    rediscluster, tdset,
};
use crate::slim::{AtSummary, PodSummary, keep_conditions, keep_labels, slim_at};
use crate::webhooks;

/// One operator in the table.
pub struct Entry {
    /// [`Operator::NAME`]: what `--controllers` selects.
    pub name: &'static str,
    /// Builds the operator: registers its handlers on the shared informers.
    pub build: fn(&BuildContext<'_>) -> Result<Arc<dyn Controller>, RunError>,
    /// Its CRD check, cache scope, sharding and webhooks, on top of `name` and `build`.
    pub extend: fn(Registration) -> Registration,
    /// The name of its CustomResourceDefinition (`ats.cnat.programming-kubernetes.info`).
    pub crd_name: fn() -> String,
    /// Creates its CRD from the embedded manifest (an existing one is left alone).
    #[cfg(feature = "crds")]
    pub install_crd:
        for<'a> fn(&'a sample_client_go::client::Client) -> BoxFuture<'a, Result<(), InstallError>>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("crd", &(self.crd_name)())
            .finish_non_exhaustive()
    }
}

impl Entry {
    /// The operator as the manager takes it.
    pub fn registration(&self) -> Registration {
        (self.extend)(Registration::new(self.name, self.build))
    }
}

/// Every operator of the table as a [`Registration`], in start order: what
/// `Manager::register_all` takes (both binaries' `run` do exactly that).
pub fn registrations() -> Vec<Registration> {
    OPERATORS.iter().map(Entry::registration).collect()
}

/// A manager for `config` with every operator of the table registered (what both binaries and
/// the demo run); `config.controllers` chooses which of them start.
pub fn manager(
    config: sample_controller_runtime::manager::ManagerConfig,
    client: sample_client_go::client::Client,
) -> sample_controller_runtime::manager::Manager {
    sample_controller_runtime::manager::Manager::new(config, client).register_all(registrations())
}

/// The operators' names, and which of them can run as shards (all five).
pub fn known() -> KnownControllers {
    KnownControllers::of(&registrations())
}

#[cfg(feature = "crds")]
fn install_crd<K: CustomResourceExt + 'static>(
    client: &sample_client_go::client::Client,
) -> BoxFuture<'_, Result<(), InstallError>> {
    Box::pin(crds::install::<K>(client))
}

/// What every operator's registration has: its CRD checked at start, the owned kinds' caches
/// narrowed and slimmed ([`scope_owned_caches`]).
fn common<K: CustomResourceExt + sample_client_go::cache::CacheObject>(
    r: Registration,
) -> Registration {
    r.with_crd::<K>().with_cache_scope(scope_owned_caches)
}

/// The selector of the owned kinds' caches in a shard: what every operator's owned objects
/// carry, and the shard's label.
fn owned_in_shard(shard: &str) -> String {
    format!("{},{shard}", managed_by_selector())
}

type Factory = SharedInformerFactory<ClientSource>;

/// Each operator as a shard: its own kind narrowed to the shard's label, its owned kinds to
/// the managed-by selector and that label; and the kinds the sharder moves (owned kinds follow
/// their owner: a RedisCluster's StatefulSet before its pods).
mod shard_kinds {
    use super::*;

    pub const AT: ShardKinds = ShardKinds {
        scope: |f: Factory, shard: &str| {
            f.with_label_selector_for::<At>(shard)
                // The At controller's own cache (the At's spec and status with slim metadata).
                .with_label_selector_for::<AtSummary>(shard)
                .with_label_selector_for::<PodSummary>(owned_in_shard(shard))
        },
        sharder: |s: Sharder| {
            s.with_owner::<At>()
                .with_label_selector_for::<PodSummary>(managed_by_selector())
                .with_owned::<PodSummary>()
        },
    };
    pub const TDSET: ShardKinds = ShardKinds {
        scope: |f: Factory, shard: &str| {
            f.with_label_selector_for::<TDSet>(shard)
                .with_label_selector_for::<Deployment>(owned_in_shard(shard))
                .with_label_selector_for::<Service>(owned_in_shard(shard))
        },
        sharder: |s: Sharder| {
            s.with_owner::<TDSet>()
                .with_label_selector_for::<Deployment>(managed_by_selector())
                .with_label_selector_for::<Service>(managed_by_selector())
                .with_owned::<Deployment>()
                .with_owned::<Service>()
        },
    };
    pub const REDISCLUSTER: ShardKinds = ShardKinds {
        scope: |f: Factory, shard: &str| {
            f.with_label_selector_for::<RedisCluster>(shard)
                .with_label_selector_for::<StatefulSet>(owned_in_shard(shard))
                .with_label_selector_for::<Service>(owned_in_shard(shard))
                .with_label_selector_for::<PodSummary>(owned_in_shard(shard))
        },
        sharder: |s: Sharder| {
            s.with_owner::<RedisCluster>()
                .with_label_selector_for::<StatefulSet>(managed_by_selector())
                .with_label_selector_for::<Service>(managed_by_selector())
                .with_label_selector_for::<PodSummary>(managed_by_selector())
                .with_owned::<StatefulSet>()
                .with_owned::<Service>()
                .with_owned::<PodSummary>()
        },
    };
    pub const MYAPP: ShardKinds = ShardKinds {
        scope: |f: Factory, shard: &str| {
            f.with_label_selector_for::<MyApp>(shard)
                .with_label_selector_for::<Deployment>(owned_in_shard(shard))
        },
        sharder: |s: Sharder| {
            s.with_owner::<MyApp>()
                .with_label_selector_for::<Deployment>(managed_by_selector())
                .with_owned::<Deployment>()
        },
    };
    pub const FOO: ShardKinds = ShardKinds {
        scope: |f: Factory, shard: &str| {
            f.with_label_selector_for::<Foo>(shard)
                .with_label_selector_for::<Deployment>(owned_in_shard(shard))
        },
        sharder: |s: Sharder| {
            s.with_owner::<Foo>()
                .with_label_selector_for::<Deployment>(managed_by_selector())
                .with_owned::<Deployment>()
        },
    };
}

/// Every operator, in start order: At first (the book's), then the ones that grew beside it.
pub const OPERATORS: &[Entry] = &[
    Entry {
        name: AtController::NAME,
        build: |cx| {
            Ok(AtController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(AT_CONTROLLER_NAME),
                cx.queue::<AtController>(),
                cx.clock,
                cx.stats(),
            )?)
        },
        extend: |r| {
            common::<At>(r)
                .with_sharding(shard_kinds::AT)
                .with_webhook(
                    "/validate-at",
                    Route::Admission(webhooks::at::validate as Handler),
                )
                .with_webhook(
                    "/mutate-at",
                    Route::Admission(webhooks::at::default as Handler),
                )
                .with_webhook("/convert", Route::Conversion(webhooks::convert::answer))
        },
        crd_name: At::crd_name,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<At>,
    },
    Entry {
        name: tdset::TDSetController::NAME,
        build: |cx| {
            Ok(tdset::TDSetController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(tdset::CONTROLLER_NAME),
                cx.queue::<tdset::TDSetController>(),
                cx.clock,
                cx.stats(),
            )?)
        },
        extend: |r| common::<TDSet>(r).with_sharding(shard_kinds::TDSET),
        crd_name: TDSet::crd_name,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<TDSet>,
    },
    Entry {
        name: rediscluster::RedisClusterController::NAME,
        build: |cx| {
            Ok(rediscluster::RedisClusterController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(rediscluster::CONTROLLER_NAME),
                cx.queue::<rediscluster::RedisClusterController>(),
                cx.clock,
                cx.stats(),
            )?)
        },
        extend: |r| common::<RedisCluster>(r).with_sharding(shard_kinds::REDISCLUSTER),
        crd_name: RedisCluster::crd_name,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<RedisCluster>,
    },
    Entry {
        name: myapp::MyAppController::NAME,
        build: |cx| {
            Ok(myapp::MyAppController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(myapp::CONTROLLER_NAME),
                cx.queue::<myapp::MyAppController>(),
                cx.clock,
                cx.stats(),
            )?)
        },
        extend: |r| common::<MyApp>(r).with_sharding(shard_kinds::MYAPP),
        crd_name: MyApp::crd_name,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<MyApp>,
    },
    Entry {
        name: foo::FooController::NAME,
        build: |cx| {
            Ok(foo::FooController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(foo::CONTROLLER_NAME),
                cx.queue::<foo::FooController>(),
                cx.stats(),
            )?)
        },
        extend: |r| common::<Foo>(r).with_sharding(shard_kinds::FOO),
        crd_name: Foo::crd_name,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<Foo>,
    },
];

/// The operators' names, in table order.
pub const NAMES: [&str; OPERATORS.len()] = {
    let mut names = [""; OPERATORS.len()];
    let mut i = 0;
    while i < OPERATORS.len() {
        names[i] = OPERATORS[i].name;
        i += 1;
    }
    names
};

/// A name that is not in [`OPERATORS`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown operator {name:?}; known: {}", NAMES.join(", "))]
pub struct UnknownOperator {
    /// The name asked for.
    pub name: String,
}

/// The table entry named `name`.
pub fn lookup(name: &str) -> Result<&'static Entry, UnknownOperator> {
    OPERATORS
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| UnknownOperator {
            name: name.to_owned(),
        })
}

// ---------------------------------------------------------------------------------------------
// the caches of owned kinds (see crate::slim for what the slim types save)

/// Narrows `factory`'s caches of owned kinds (see the module doc): the label selector for
/// [`PodSummary`], Deployments, StatefulSets and Services, the slim pod metadata, and the At
/// transform. `enabled` names the controllers this process runs (the registry's names, as
/// `--controllers` resolved them): the pods' conditions are kept only when one that reads them
/// runs ([`POD_CONDITIONS_READERS`]).
pub fn scope_owned_caches<S: ListerWatcherSource>(
    factory: SharedInformerFactory<S>,
    enabled: &[&str],
) -> SharedInformerFactory<S> {
    let selector = managed_by_selector();
    let conditions: &'static [&'static str] = if POD_CONDITIONS_READERS
        .iter()
        .any(|reader| enabled.contains(reader))
    {
        &POD_CONDITIONS_READ
    } else {
        &[]
    };
    factory
        .with_label_selector_for::<PodSummary>(selector.clone())
        .with_label_selector_for::<Deployment>(selector.clone())
        .with_label_selector_for::<StatefulSet>(selector.clone())
        .with_label_selector_for::<Service>(selector)
        .with_transform_for::<PodSummary>(|p: &mut PodSummary| {
            p.metadata.trim_for_cache();
            let mut labels = p.metadata.take_labels();
            keep_labels(&mut labels, &POD_LABELS_READ);
            p.metadata.set_labels(labels);
            keep_conditions(p, conditions);
            if let Some(statuses) = p
                .status
                .as_mut()
                .and_then(|s| s.container_statuses.as_mut())
            {
                statuses.shrink_to_fit();
            }
        })
        .with_transform_for::<AtSummary>(slim_at)
}

/// The pod labels a handler or sync reads from the pod cache: RedisCluster's
/// [`LABEL_CLUSTER`](rediscluster::LABEL_CLUSTER), which maps a pod to its cluster. The
/// rest (the At's `app`, the `managed-by` label every cached pod carries since the server
/// selected on it, a StatefulSet's `controller-revision-hash`, ...) is dropped from the cache.
pub const POD_LABELS_READ: [&str; 1] = [rediscluster::LABEL_CLUSTER];

/// The pod conditions a sync reads: `Ready` (RedisCluster counts its ready nodes). The kubelet
/// reports four or five (`PodScheduled`, `Initialized`, `ContainersReady`,
/// `PodReadyToStartContainers`, `Ready`), two strings each: about 400 bytes a pod that nothing
/// reads, 4 MB at 10,000 At pods.
pub const POD_CONDITIONS_READ: [&str; 1] = ["Ready"];

/// The controllers (registry names) that read [`POD_CONDITIONS_READ`]. When none of them runs
/// (`--controllers at`, or a shard of Ats), the pod cache keeps no condition at all: the one
/// `Ready` condition of a finished At pod still cost a 64-byte allocation, 0.6 MB at 10,000.
pub const POD_CONDITIONS_READERS: [&str; 1] =
    [<rediscluster::RedisClusterController as Operator>::NAME];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slim::MetaSummary;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use sample_controller_runtime::ownership::LABEL_MANAGED_BY;
    use std::collections::BTreeMap;

    #[test]
    fn names_are_unique_and_each_operator_owns_its_crd() {
        let mut seen = std::collections::HashSet::new();
        for r in OPERATORS {
            assert!(seen.insert(r.name), "{} twice", r.name);
            assert_eq!(lookup(r.name).unwrap().name, r.name);
        }
        assert_eq!(NAMES, ["at", "tdset", "rediscluster", "myapp", "foo"]);
        assert_eq!(
            lookup("at").map(|r| (r.crd_name)()),
            Ok("ats.cnat.programming-kubernetes.info".to_owned())
        );
        assert_eq!((lookup("foo").unwrap().crd_name)(), Foo::crd_name());
    }

    #[test]
    fn an_unknown_name_is_an_error_that_lists_the_known_ones() {
        let e = lookup("nope").unwrap_err();
        assert_eq!(e.name, "nope");
        assert_eq!(
            e.to_string(),
            "unknown operator \"nope\"; known: at, tdset, rediscluster, myapp, foo"
        );
        assert!(
            lookup("At").is_err(),
            "names are case-sensitive, as kube-controller-manager's"
        );
    }

    #[test]
    fn the_pod_transform_keeps_only_the_labels_a_sync_reads() {
        let mut meta = ObjectMeta {
            labels: Some(BTreeMap::from([
                ("app".to_string(), "a".to_string()),
                (LABEL_MANAGED_BY.to_string(), "at-controller".to_string()),
            ])),
            ..Default::default()
        };
        keep_labels(&mut meta.labels, &POD_LABELS_READ);
        assert_eq!(meta.labels, None, "an At's pod keeps no label map at all");

        let cluster = crate::controllers::rediscluster::LABEL_CLUSTER;
        let mut meta = ObjectMeta {
            labels: Some(BTreeMap::from([
                (cluster.to_string(), "c1".to_string()),
                (
                    LABEL_MANAGED_BY.to_string(),
                    "rediscluster-controller".to_string(),
                ),
                ("controller-revision-hash".to_string(), "c1-5d4".to_string()),
            ])),
            ..Default::default()
        };
        keep_labels(&mut meta.labels, &POD_LABELS_READ);
        assert_eq!(
            meta.labels,
            Some(BTreeMap::from([(cluster.to_string(), "c1".to_string())]))
        );
    }

    /// The manager's pod cache keeps `Ready` while RedisCluster (its one reader) runs, and no
    /// condition at all without it; the pod's phase and metadata stay either way.
    #[tokio::test]
    async fn pod_conditions_are_cached_only_for_a_controller_that_reads_them() {
        use sample_client_go::cache::testing::{FakeSource, meta};
        use std::time::Duration;
        use tokio::time::Instant;
        use tokio_util::sync::CancellationToken;
        for (enabled, want) in [
            (&["at"][..], None),
            (&["at", "tdset", "myapp", "foo"][..], None),
            (&["at", "rediscluster"][..], Some(vec!["Ready"])),
        ] {
            let source = FakeSource::new();
            let factory = scope_owned_caches(
                SharedInformerFactory::new(source.clone(), Duration::ZERO),
                enabled,
            );
            let pods = factory.informer::<PodSummary>();
            let fake = source.fake::<PodSummary>(&factory.scope_for::<PodSummary>());
            let m = meta("ns", "p", &[(LABEL_MANAGED_BY, "at-controller")]);
            let mut pod: PodSummary = serde_json::from_value(serde_json::json!({
                "status": {
                    "phase": "Succeeded",
                    "conditions": [
                        {"type": "Initialized", "status": "False"},
                        {"type": "Ready", "status": "False"},
                        {"type": "PodScheduled", "status": "False"},
                    ],
                },
            }))
            .expect("a pod summary");
            pod.metadata = MetaSummary::from_meta(&m);
            fake.upsert(pod);
            let cancel = CancellationToken::new();
            factory.start(&cancel);
            let synced = factory
                .wait_for_cache_sync(Instant::now() + Duration::from_secs(10))
                .await;
            assert!(synced.values().all(|s| *s), "{synced:?}");
            let cached = pods.lister().namespace("ns").get("p").expect("cached");
            let status = cached.status.as_ref().expect("a status");
            assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{enabled:?}");
            let kept = status
                .conditions
                .as_ref()
                .map(|cs| cs.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>());
            assert_eq!(kept, want, "{enabled:?}");
            cancel.cancel();
        }
    }
}
