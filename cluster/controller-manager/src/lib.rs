//! # The embedded cluster's controller manager
//!
//! In Kubernetes, kube-controller-manager is the program that makes the API's objects come
//! true: a Job gets its pods, a deleted owner takes its dependents with it, every namespace
//! gets its `default` ServiceAccount. It is a set of independent **controllers**, each a loop
//! that watches some resources and writes others, registered in one table
//! (`NewControllerDescriptors` in `cmd/kube-controller-manager/app`) and started together.
//! This crate is that program for the embedded cluster: the same controllers, the same table
//! ([`controller_descriptors`]), started against one [`ApiServerHandle`] by
//! [`ControllerManager::builder`] (the `embedded-cluster` crate does it for you).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
//! use embedded_controller_manager::ControllerManager;
//!
//! let server = ApiServer::builder().plain_http(true).start().await?;
//! ControllerManager::builder()
//!     .enable("job-controller", true) // off by default: who runs its pods?
//!     .start(&server);
//! server.shutdown().await; // the controllers stop with the server
//! # Ok(()) }
//! ```
//!
//! ## The controllers
//!
//! | name | on by default | what it does | module |
//! |---|---|---|---|
//! | `garbage-collector-controller` | yes | deletes (or orphans) the dependents of a deleted owner, by `ownerReferences` and the DELETE's `propagationPolicy` | `gc` |
//! | `serviceaccount-controller` | yes | a `default` ServiceAccount in every namespace | `serviceaccounts` |
//! | `root-ca-certificate-publisher-controller` | no | the `kube-root-ca.crt` ConfigMap (the server's CA) in every namespace | `serviceaccounts` |
//! | `job-controller` | no | a Job's pods until enough succeed (or too many fail), and its status | `jobs` |
//! | `cronjob-controller` | no | a Job each time a CronJob's schedule falls due, history limits | `cronjobs` |
//! | `statefulset-controller` | no | pods `<set>-<ordinal>` in order, rolling updates in reverse ordinal order | `statefulsets` |
//! | `replicationcontroller-controller` | no | a ReplicationController's pods and status | `replicationcontrollers` |
//! | `daemonset-controller` | no | one pod of a DaemonSet on every schedulable node | `daemonsets` |
//! | `replicaset-controller` | no | a ReplicaSet's pods `<rs>-<5 chars>` (adoption, release, replacement) and status | `replicasets` |
//! | `deployment-controller` | no | a ReplicaSet per template revision (`pod-template-hash`), rolling updates (`maxSurge`/`maxUnavailable`), `Recreate`, pause, rollback, history limit, status and `Progressing` | `deployments` |
//! | `deployment-replicaset-status` | no | only in the fast mode (`deployment_pods(false)`, a departure from Kubernetes): Deployment and ReplicaSet status as if rolled out, without ReplicaSets or pods; the two rows above then stay off | `workloads` |
//!
//! The workload controllers are off by default because their pods only run when a node runs
//! them: `ClusterBuilder::simulate` (crate `embedded-cluster`) turns them on together with the
//! node ([`ControllerManagerBuilder::workloads`]). kube-controller-manager's
//! `--controllers=*,-foo` flag is [`ControllerManagerBuilder::enable`].
//!
//! ## The seam: the loopback interface
//!
//! kube-controller-manager never touches etcd: it is a client of kube-apiserver like any other,
//! authenticated as `system:kube-controller-manager`, its requests authorized by RBAC and run
//! through admission and validation. So is this crate. It depends on the API server's public
//! loopback interface ([`embedded_apiserver::loopback`]) and nothing else of it: every
//! controller reads through an informer (list, then watch from the list's
//! resourceVersion, relist on 410 Gone) and writes with the API's verbs, conditional on the
//! object's resourceVersion, as [`USER`] (bound by the bootstrap RBAC policy to the ClusterRole
//! of the same name), so a cluster started with RBAC enforced runs them unchanged.
//!
//! ```text
//!   ControllerManager::builder().start(&server)
//!        │  one Loopback as system:kube-controller-manager
//!        ▼
//!   ┌ controller (worker::run) ──────────────────────────────┐
//!   │ Informer: list ─▶ cache ◀─ watch (relist on Gone)      │
//!   │     │ keys_for(change)                                 │
//!   │     ▼                                                  │
//!   │ Queue (keys, due times, back-off) ─▶ sync(key, cache)  │
//!   └───────────────────────────────────────┬────────────────┘
//!                      create / update / update_status / delete (resourceVersion preconditions)
//!                                           ▼
//!   embedded-apiserver: authorization (RBAC) ─▶ admission ─▶ registry ─▶ storage ─▶ watches
//! ```
//!
//! The fast mode's status simulation (`workloads`, only with
//! `ControllerManagerBuilder::deployment_pods(false)`) is a controller of the same kind: an
//! informer of Deployments and ReplicaSets, and `update_status` through the loopback.
//!
//! ## The public surface
//!
//! | item | what it is |
//! |---|---|
//! | [`ControllerManager`], [`ControllerManagerBuilder`] | starting the controllers against a running server: which ones ([`ControllerManagerBuilder::enable`], `--controllers`), the workload set, reaction delay, Deployments with or without pods |
//! | [`controller_descriptors`], [`ControllerDescriptor`], [`WORKLOAD_CONTROLLERS`] | the controller table, by name |
//! | [`USER`], [`FIELD_MANAGER`] | who the controllers are to the server (RBAC subject, field manager) |
//!
//! Everything else is the crate's own (`pub(crate)`): the modules below are documented for
//! readers of the source (`cargo doc --document-private-items`), not for callers.
//!
//! ## Module map
//!
//! | module | kube-controller-manager | what lives there |
//! |---|---|---|
//! | `informer` | client-go `tools/cache` (reflector, indexer, listers) | a controller's list-then-watch cache, with a controlled-by index |
//! | `worker` | `util/workqueue`, sample-controller's worker loop | the `Controller` trait, the keyed queue with back-off, `run` |
//! | `pod_control` | `pkg/controller/controller_utils.go` (`PodControl`) | controller references, pods from templates, deletes with uid preconditions, pod predicates |
//! | `claim` | `pkg/controller/controller_ref_manager.go` | label selectors, claiming by selector and controller reference, adoption and release |
//! | `gc` | `pkg/controller/garbagecollector` | the garbage collector and its graph |
//! | `serviceaccounts` | `pkg/controller/serviceaccount`, `certificates/rootcacertpublisher` | `default` ServiceAccounts, `kube-root-ca.crt` |
//! | `jobs` | `pkg/controller/job` | the Job controller |
//! | `cronjobs` | `pkg/controller/cronjob` | the CronJob controller |
//! | `statefulsets` | `pkg/controller/statefulset` | the StatefulSet controller |
//! | `replicationcontrollers` | `pkg/controller/replication` | the ReplicationController manager |
//! | `daemonsets` | `pkg/controller/daemon` | the DaemonSet controller |
//! | `replicasets` | `pkg/controller/replicaset` | the ReplicaSet controller |
//! | `deployments` | `pkg/controller/deployment` | the Deployment controller (sync, rolling, recreate, rollback, progress) |
//! | `workloads` | (none) | the fast mode: Deployment and ReplicaSet status without pods, on the same worker loop |
//! | `background` | (none) | the virtual clock the controllers stamp objects with |

#![forbid(unsafe_code)]

mod background;
mod claim;
mod cronjobs;
mod daemonsets;
mod deployments;
mod gc;
mod informer;
mod jobs;
mod pod_control;
mod replicasets;
mod replicationcontrollers;
mod serviceaccounts;
mod statefulsets;
mod worker;
mod workloads;

use std::collections::BTreeMap;
use std::time::Duration;

use apimachinery::clock::Clock;
use embedded_apiserver::ApiServerHandle;
use embedded_apiserver::loopback::Loopback;

/// The user the controllers act as (kube-controller-manager's; the bootstrap RBAC policy
/// binds it to the ClusterRole of the same name).
pub const USER: &str = "system:kube-controller-manager";

/// The field manager of the controllers' writes (kube-controller-manager's user agent).
pub const FIELD_MANAGER: &str = "kube-controller-manager";

/// What a controller's start function gets: the server's loopback as [`USER`], and the
/// manager's settings.
#[derive(Debug)]
struct ControllerContext<'a> {
    server: &'a ApiServerHandle,
    loopback: Loopback,
    clock: Clock,
    workload_delay: Duration,
    deployment_pods: bool,
}

impl ControllerContext<'_> {
    /// Runs `controller` on the server's tasks until it shuts down.
    fn spawn<C: worker::Controller>(&self, controller: C) {
        self.server
            .tracker()
            .spawn(worker::run(controller, self.loopback.clone()));
    }
}

/// One row of the controller table (kube-controller-manager's `ControllerDescriptor`).
#[derive(Clone, Copy, Debug)]
pub struct ControllerDescriptor {
    /// The controller's name (`job-controller`), as `--controllers` takes it.
    pub name: &'static str,
    /// Whether it runs unless told otherwise.
    pub enabled_by_default: bool,
    /// Starts it.
    start: fn(&ControllerContext<'_>),
}

/// The table of every controller this crate has (see the crate docs), in start order.
pub fn controller_descriptors() -> Vec<ControllerDescriptor> {
    fn d(
        name: &'static str,
        enabled_by_default: bool,
        start: fn(&ControllerContext<'_>),
    ) -> ControllerDescriptor {
        ControllerDescriptor {
            name,
            enabled_by_default,
            start,
        }
    }
    vec![
        d("garbage-collector-controller", true, |cx| {
            cx.server.tracker().spawn(gc::run(cx.loopback.clone()));
        }),
        d("serviceaccount-controller", true, |cx| {
            cx.spawn(serviceaccounts::ServiceAccountsController::new(
                cx.loopback.clone(),
                true,
                None,
            ));
        }),
        d("root-ca-certificate-publisher-controller", false, |cx| {
            // Nothing to publish from a server without a CA (plain HTTP).
            if let Some(ca) = cx.server.ca_pem() {
                cx.spawn(serviceaccounts::ServiceAccountsController::new(
                    cx.loopback.clone(),
                    false,
                    Some(ca.to_owned()),
                ));
            }
        }),
        d("job-controller", false, |cx| {
            cx.spawn(jobs::JobController::new(cx.loopback.clone(), cx.clock));
        }),
        d("cronjob-controller", false, |cx| {
            cx.spawn(cronjobs::CronJobController::new(
                cx.loopback.clone(),
                cx.clock,
            ));
        }),
        d("statefulset-controller", false, |cx| {
            cx.spawn(statefulsets::StatefulSetController::new(
                cx.loopback.clone(),
                cx.workload_delay,
            ));
        }),
        d("replicationcontroller-controller", false, |cx| {
            cx.spawn(replicationcontrollers::ReplicationControllerManager::new(
                cx.loopback.clone(),
            ));
        }),
        d("daemonset-controller", false, |cx| {
            cx.spawn(daemonsets::DaemonSetController::new(cx.loopback.clone()));
        }),
        d("replicaset-controller", false, |cx| {
            if cx.deployment_pods {
                cx.spawn(replicasets::ReplicaSetController::new(
                    cx.loopback.clone(),
                    cx.workload_delay,
                    cx.clock,
                ));
            }
        }),
        d("deployment-controller", false, |cx| {
            if cx.deployment_pods {
                cx.spawn(deployments::DeploymentController::new(
                    cx.loopback.clone(),
                    cx.workload_delay,
                    cx.clock,
                ));
            }
        }),
        // The fast mode (`deployment_pods(false)`): Deployments and ReplicaSets get their
        // status only.
        d("deployment-replicaset-status", false, |cx| {
            if cx.deployment_pods {
                return;
            }
            cx.spawn(workloads::StatusController::new(
                cx.loopback.clone(),
                workloads::WorkloadConfig {
                    delay: cx.workload_delay,
                    clock: cx.clock,
                },
            ));
        }),
    ]
}

/// The controllers [`ControllerManagerBuilder::workloads`] turns on or off together.
pub const WORKLOAD_CONTROLLERS: &[&str] = &[
    "job-controller",
    "cronjob-controller",
    "statefulset-controller",
    "replicationcontroller-controller",
    "daemonset-controller",
    "replicaset-controller",
    "deployment-controller",
    "deployment-replicaset-status",
];

/// The entry point: `ControllerManager::builder()...start(&server)`.
#[derive(Debug)]
pub struct ControllerManager;

impl ControllerManager {
    /// A builder with the documented defaults.
    pub fn builder() -> ControllerManagerBuilder {
        ControllerManagerBuilder::default()
    }
}

/// Which controllers run (by default those of [`controller_descriptors`] that are
/// `enabled_by_default`: the garbage collector and the ServiceAccount controller) and how fast
/// the StatefulSet controller and the Deployment status simulation react (500 ms).
#[derive(Clone, Debug)]
pub struct ControllerManagerBuilder {
    enabled: BTreeMap<String, bool>,
    workload_delay: Duration,
    deployment_pods: bool,
}

impl Default for ControllerManagerBuilder {
    fn default() -> Self {
        ControllerManagerBuilder {
            enabled: BTreeMap::new(),
            workload_delay: Duration::from_millis(500),
            deployment_pods: true,
        }
    }
}

impl ControllerManagerBuilder {
    /// Turns the controller `name` (a [`ControllerDescriptor::name`]) on or off
    /// (`--controllers=name` / `--controllers=-name`). An unknown name changes nothing.
    pub fn enable(mut self, name: &str, yes: bool) -> Self {
        self.enabled.insert(name.to_owned(), yes);
        self
    }

    /// Run the garbage collector (`garbage-collector-controller`, default on).
    pub fn garbage_collector(self, yes: bool) -> Self {
        self.enable("garbage-collector-controller", yes)
    }

    /// Run the ServiceAccount controller (`serviceaccount-controller`, default on).
    pub fn service_accounts(self, yes: bool) -> Self {
        self.enable("serviceaccount-controller", yes)
    }

    /// Run the root CA publisher (`root-ca-certificate-publisher-controller`, default off).
    pub fn root_ca_publisher(self, yes: bool) -> Self {
        self.enable("root-ca-certificate-publisher-controller", yes)
    }

    /// Run the workload controllers ([`WORKLOAD_CONTROLLERS`], default off).
    pub fn workloads(mut self, yes: bool) -> Self {
        for name in WORKLOAD_CONTROLLERS {
            self = self.enable(name, yes);
        }
        self
    }

    /// How long the Deployment, ReplicaSet and StatefulSet controllers and the Deployment
    /// status simulation take to react (default 500 ms).
    pub fn workload_delay(mut self, d: Duration) -> Self {
        self.workload_delay = d;
        self
    }

    /// Run Deployments and ReplicaSets as Kubernetes does, with the `deployment-controller` and
    /// `replicaset-controller`: ReplicaSets per template revision, pods run by the node
    /// (default on, when the workload controllers run). Off, a **departure from Kubernetes**
    /// for tests that want Deployments to roll out without the cost of pods: their status
    /// alone follows `spec.replicas` after the workload delay (`deployment-replicaset-status`), and no
    /// ReplicaSet or pod is created.
    pub fn deployment_pods(mut self, yes: bool) -> Self {
        self.deployment_pods = yes;
        self
    }

    /// Whether the controller `name` would run.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.enabled.get(name).copied().unwrap_or_else(|| {
            controller_descriptors()
                .iter()
                .any(|d| d.name == name && d.enabled_by_default)
        })
    }

    /// Starts the controllers that are on against `server`, acting as [`USER`] through its
    /// loopback interface; they stop when it shuts down.
    pub fn start(self, server: &ApiServerHandle) {
        let cx = ControllerContext {
            server,
            loopback: server.loopback(USER, &[], FIELD_MANAGER),
            clock: Clock::new(),
            workload_delay: self.workload_delay,
            deployment_pods: self.deployment_pods,
        };
        for d in controller_descriptors() {
            if self.is_enabled(d.name) {
                tracing::debug!(controller = d.name, "starting controller");
                (d.start)(&cx);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_controller_once_and_the_defaults_follow_it() {
        let table = controller_descriptors();
        let mut names: Vec<&str> = table.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), table.len());
        for w in WORKLOAD_CONTROLLERS {
            assert!(names.contains(w), "{w}");
        }
        let b = ControllerManager::builder();
        assert!(b.is_enabled("garbage-collector-controller"));
        assert!(b.is_enabled("serviceaccount-controller"));
        assert!(!b.is_enabled("job-controller"));
        let b = b.workloads(true).garbage_collector(false);
        assert!(b.is_enabled("statefulset-controller"));
        assert!(!b.is_enabled("garbage-collector-controller"));
        assert!(!b.is_enabled("no-such-controller"));
    }
}
