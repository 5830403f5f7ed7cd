//! # The embedded cluster's controller manager
//!
//! (module docs are rewritten when the controllers reach the API server only through its
//! loopback interface)

#![forbid(unsafe_code)]

pub mod background;
pub mod cronjobs;
pub mod deployments;

pub mod gc;
pub mod jobs;
pub mod owned;
pub mod podsets;
pub mod replicasets;
pub mod serviceaccounts;
pub mod workloads;

use std::time::Duration;

use embedded_apiserver::ApiServerHandle;

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
    deployment_pods: bool,
}

impl Default for ControllerManagerBuilder {
    fn default() -> Self {
        ControllerManagerBuilder {
            garbage_collector: true,
            service_accounts: true,
            root_ca_publisher: false,
            workloads: false,
            workload_delay: Duration::from_millis(500),
            deployment_pods: true,
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

    /// How long the Deployment, ReplicaSet and StatefulSet controllers take to react (default
    /// 500 ms).
    pub fn workload_delay(mut self, d: Duration) -> Self {
        self.workload_delay = d;
        self
    }

    /// Run Deployments and ReplicaSets as Kubernetes does, with the [`deployments`] and
    /// [`replicasets`] controllers: ReplicaSets per template revision, pods run by the node
    /// (default on, when the workload controllers run). Off, a **departure from Kubernetes**
    /// for tests that want Deployments to roll out without the cost of pods: their status
    /// alone follows `spec.replicas` after the workload delay ([`workloads`]), and no
    /// ReplicaSet or pod is created.
    pub fn deployment_pods(mut self, yes: bool) -> Self {
        self.deployment_pods = yes;
        self
    }

    /// Starts the controllers that are on against `server`; they stop when it shuts down.
    pub fn start(self, server: &ApiServerHandle) {
        let store = server.store();
        let shutdown = server.shutdown_token();
        let tracker = server.tracker();
        let clock = background::VirtualClock::new();
        if self.garbage_collector {
            gc::spawn(store.clone(), shutdown.clone(), tracker);
        }
        if self.service_accounts || self.root_ca_publisher {
            serviceaccounts::spawn_service_accounts(
                store.clone(),
                self.service_accounts,
                server
                    .ca_pem()
                    .filter(|_| self.root_ca_publisher)
                    .map(str::to_owned),
                shutdown.clone(),
                tracker,
            );
        }
        if self.workloads {
            jobs::spawn(store.clone(), shutdown.clone(), tracker);
            podsets::spawn(store.clone(), shutdown.clone(), tracker);
            cronjobs::spawn(store.clone(), clock, shutdown.clone(), tracker);
            if self.deployment_pods {
                let lb = server.loopback(replicasets::USER, &[], replicasets::FIELD_MANAGER);
                let config = replicasets::Config {
                    delay: self.workload_delay,
                    clock,
                };
                replicasets::spawn(lb.clone(), config, tracker);
                deployments::spawn(lb, config, tracker);
            }
            workloads::spawn(
                store,
                workloads::WorkloadConfig {
                    delay: self.workload_delay,
                    clock,
                    deployments_status_only: !self.deployment_pods,
                },
                shutdown,
                tracker,
            );
        }
    }
}
