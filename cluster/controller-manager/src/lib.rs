//! # The embedded cluster's controller manager
//!
//! (module docs are rewritten when the controllers reach the API server only through its
//! loopback interface)

#![forbid(unsafe_code)]

pub mod background;
pub mod cronjobs;
pub mod daemonsets;
pub mod gc;
pub mod informer;
pub mod jobs;
pub mod pod_control;
pub mod replicationcontrollers;
pub mod serviceaccounts;
pub mod statefulsets;
pub mod worker;
pub mod workloads;

use std::time::Duration;

use embedded_apiserver::ApiServerHandle;

/// The user the controllers act as (kube-controller-manager's; the bootstrap RBAC policy
/// binds it to the ClusterRole of the same name).
pub const USER: &str = "system:kube-controller-manager";

/// The field manager of the controllers' writes (kube-controller-manager's user agent).
pub const FIELD_MANAGER: &str = "kube-controller-manager";

/// The entry point: `ControllerManager::builder()...start(&server)`.
#[derive(Debug)]
pub struct ControllerManager;

impl ControllerManager {
    /// A builder with the documented defaults.
    pub fn builder() -> ControllerManagerBuilder {
        ControllerManagerBuilder::default()
    }
}

/// Which controllers run. Defaults: the garbage collector and the ServiceAccount controller;
/// the root CA publisher and the workload controllers (Deployments, ReplicaSets, StatefulSets,
/// Jobs, CronJobs, ReplicationControllers, DaemonSets) off; workloads react after 500 ms.
#[derive(Clone, Debug)]
pub struct ControllerManagerBuilder {
    garbage_collector: bool,
    service_accounts: bool,
    root_ca_publisher: bool,
    workloads: bool,
    workload_delay: Duration,
}

impl Default for ControllerManagerBuilder {
    fn default() -> Self {
        ControllerManagerBuilder {
            garbage_collector: true,
            service_accounts: true,
            root_ca_publisher: false,
            workloads: false,
            workload_delay: Duration::from_millis(500),
        }
    }
}

impl ControllerManagerBuilder {
    /// Run the garbage collector ([`gc`], default on).
    pub fn garbage_collector(mut self, yes: bool) -> Self {
        self.garbage_collector = yes;
        self
    }

    /// Run the ServiceAccount controller ([`serviceaccounts`], default on).
    pub fn service_accounts(mut self, yes: bool) -> Self {
        self.service_accounts = yes;
        self
    }

    /// Run the root CA publisher (default off).
    pub fn root_ca_publisher(mut self, yes: bool) -> Self {
        self.root_ca_publisher = yes;
        self
    }

    /// Run the workload controllers (default off).
    pub fn workloads(mut self, yes: bool) -> Self {
        self.workloads = yes;
        self
    }

    /// How long the Deployment and StatefulSet controllers take to react (default 500 ms).
    pub fn workload_delay(mut self, d: Duration) -> Self {
        self.workload_delay = d;
        self
    }

    /// Starts the controllers that are on against `server`; they stop when it shuts down.
    pub fn start(self, server: &ApiServerHandle) {
        let store = server.store();
        let shutdown = server.shutdown_token();
        let tracker = server.tracker();
        let clock = background::VirtualClock::new();
        let lb = server.loopback(USER, &[], FIELD_MANAGER);
        if self.garbage_collector {
            tracker.spawn(gc::run(lb.clone()));
        }
        if self.service_accounts || self.root_ca_publisher {
            let ca_pem = server
                .ca_pem()
                .filter(|_| self.root_ca_publisher)
                .map(str::to_owned);
            tracker.spawn(worker::run(
                serviceaccounts::ServiceAccountsController::new(
                    lb.clone(),
                    self.service_accounts,
                    ca_pem,
                ),
                lb.clone(),
            ));
        }
        if self.workloads {
            tracker.spawn(worker::run(
                jobs::JobController::new(lb.clone(), clock),
                lb.clone(),
            ));
            tracker.spawn(worker::run(
                replicationcontrollers::ReplicationControllerManager::new(lb.clone()),
                lb.clone(),
            ));
            tracker.spawn(worker::run(
                daemonsets::DaemonSetController::new(lb.clone()),
                lb.clone(),
            ));
            tracker.spawn(worker::run(
                cronjobs::CronJobController::new(lb.clone(), clock),
                lb.clone(),
            ));
            tracker.spawn(worker::run(
                statefulsets::StatefulSetController::new(lb.clone(), self.workload_delay),
                lb.clone(),
            ));
            workloads::spawn(
                store,
                workloads::WorkloadConfig {
                    delay: self.workload_delay,
                    clock,
                },
                shutdown,
                tracker,
            );
        }
    }
}
