//! The operators this crate ships, in one typed table: for each, its name, how to build it,
//! the custom resource it reconciles, and the start-up check of that resource.
//!
//! kube-controller-manager keeps the same kind of table (`NewControllerDescriptors`: a name,
//! an `initFunc`, the aliases, whether it is on by default); `--controllers` is checked against
//! it, and everything that needs "all the operators" reads it rather than listing names again:
//!
//! ```text
//!   OPERATORS[i] = Registration { name: AtController::NAME, build, crd_name, list_one, install_crd }
//!        │
//!        ├── manager::KNOWN_CONTROLLERS      the names, in table order (the start order)
//!        ├── manager::resolve_controllers    --controllers=at,-foo,*  → checked against the names
//!        ├── Manager::run                    (entry.build)(&BuildContext)  → Arc<dyn Controller>
//!        ├── manager::preflight              (entry.list_one)(client, ns): is the CRD served?
//!        └── the demo                        (entry.install_crd)(client), --operators lookup
//! ```
//!
//! Adding an operator is one entry here (plus its module); a name that is not in the table is
//! a [`UnknownOperator`] error that lists the known ones. The name of an entry is the
//! operator's [`Operator::NAME`], so it cannot drift from the name in
//! its log lines and metrics.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Clock, Controller, Operator, RunError, SyncStats};
use super::{at::AtController, foo, myapp, rediscluster, tdset};
use crate::apis::{At, CustomResourceExt, Foo, MyApp, RedisCluster, TDSet};
use crate::cache::{CacheObject, ClientSource, SharedInformerFactory};
use crate::client::{self, Api, Client, ListParams};
use crate::controllers::QueueKey;
use crate::metrics::ControllerMetrics;
use crate::record::EventBroadcaster;
use crate::workqueue::{QueueMetrics, RateLimitingQueue};

/// What every operator is built from: the shared client, informer factory, event broadcaster,
/// queue metrics and clock of one manager.
pub struct BuildContext<'a> {
    /// The client the operator writes with.
    pub client: &'a Client,
    /// The manager's one informer factory (shared caches, one watch per type).
    pub factory: &'a SharedInformerFactory<ClientSource>,
    /// Where the operator's event recorder comes from.
    pub broadcaster: &'a EventBroadcaster,
    /// The registry the operator's named queue reports to.
    pub queue_metrics: &'a QueueMetrics,
    /// The `controller_sync_*` families.
    pub controller_metrics: ControllerMetrics,
    /// Wall-clock time (virtual in tests).
    pub clock: Clock,
}

impl BuildContext<'_> {
    /// A rate-limited queue named after operator `O` (so it has `workqueue_*` metrics).
    pub fn queue<O: Operator>(&self) -> RateLimitingQueue<QueueKey> {
        RateLimitingQueue::named_with_default_controller_rate_limiter(O::NAME, self.queue_metrics)
    }

    /// Sync counters that also feed the `controller_sync_*` metrics.
    pub fn stats(&self) -> SyncStats {
        SyncStats::with_metrics(self.controller_metrics.clone())
    }
}

/// One operator in the table.
pub struct Registration {
    /// [`Operator::NAME`]: what `--controllers` selects.
    pub name: &'static str,
    /// Builds the operator: registers its handlers on the shared informers.
    pub build: fn(&BuildContext<'_>) -> Result<Arc<dyn Controller>, RunError>,
    /// The name of its CustomResourceDefinition (`ats.cnat.programming-kubernetes.info`).
    pub crd_name: fn() -> String,
    /// One `LIST ?limit=1` of its custom resource (in `namespace`, or in all): the start-up
    /// check that the CRD is installed (a 404 says it is not).
    pub list_one: for<'a> fn(&'a Client, Option<&'a str>) -> BoxFuture<'a, client::Result<()>>,
    /// Creates its CRD from the embedded manifest (an existing one is left alone).
    #[cfg(feature = "crds")]
    pub install_crd:
        for<'a> fn(&'a Client) -> BoxFuture<'a, Result<(), crate::apis::crds::InstallError>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("crd", &(self.crd_name)())
            .finish_non_exhaustive()
    }
}

fn list_one<K: CustomResourceExt + CacheObject>(
    client: &Client,
    namespace: Option<&str>,
) -> BoxFuture<'static, client::Result<()>> {
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

#[cfg(feature = "crds")]
fn install_crd<K: CustomResourceExt + 'static>(
    client: &Client,
) -> BoxFuture<'_, Result<(), crate::apis::crds::InstallError>> {
    Box::pin(crate::apis::crds::install::<K>(client))
}

/// Every operator, in start order: At first (the book's), then the ones that grew beside it.
pub const OPERATORS: &[Registration] = &[
    Registration {
        name: AtController::NAME,
        build: |cx| {
            Ok(AtController::new(
                cx.client.clone(),
                cx.factory,
                cx.broadcaster.new_recorder(super::at::CONTROLLER_NAME),
                cx.queue::<AtController>(),
                cx.clock,
                cx.stats(),
            )?)
        },
        crd_name: At::crd_name,
        list_one: list_one::<At>,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<At>,
    },
    Registration {
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
        crd_name: TDSet::crd_name,
        list_one: list_one::<TDSet>,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<TDSet>,
    },
    Registration {
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
        crd_name: RedisCluster::crd_name,
        list_one: list_one::<RedisCluster>,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<RedisCluster>,
    },
    Registration {
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
        crd_name: MyApp::crd_name,
        list_one: list_one::<MyApp>,
        #[cfg(feature = "crds")]
        install_crd: install_crd::<MyApp>,
    },
    Registration {
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
        crd_name: Foo::crd_name,
        list_one: list_one::<Foo>,
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
pub fn lookup(name: &str) -> Result<&'static Registration, UnknownOperator> {
    OPERATORS
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| UnknownOperator {
            name: name.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
