//! # The embedded Kubernetes API server
//!
//! An in-process Kubernetes API server that speaks the real wire protocol over real HTTP(S):
//! kubectl, client-go, kube-rs and this project's own client cannot tell it from a
//! kube-apiserver for everything a controller does. It is the test backbone of the project
//! and, with the rest of the embedded cluster, the zero-setup default of the demo. Use it in
//! your own tests the way Go users use envtest — except that it starts in milliseconds, needs
//! no binaries, and many can run in one test process:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
//!
//! let server = ApiServer::builder().start().await?;   // HTTPS on 127.0.0.1:<random port>
//! server.write_kubeconfig("/tmp/kubeconfig")?;         // kubectl --kubeconfig /tmp/kubeconfig get ns
//! println!("serving at {}", server.url());
//! assert_eq!(server.request_log().count("get", "pods"), 0);
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! This crate is the API server alone, as envtest's is: nothing runs pods or collects
//! garbage. The `embedded-cluster` crate starts it together with the two other programs of a
//! cluster, each a crate of its own that reaches this server only through the interfaces
//! below, as kube-controller-manager and the kubelet reach kube-apiserver only through its
//! API:
//!
//! ```text
//!  kubectl, client-go, kube-rs ──HTTPS──▶ ┌───────────────────────────────────────┐
//!                                         │ embedded-apiserver (this crate)       │
//!  embedded-controller-manager ─loopback─▶│   handler chain ─▶ registry ─▶ storage │
//!  embedded-node (its kubelet) ─loopback─▶│                                       │
//!        ▲                                └──────────────┬────────────────────────┘
//!        └──────────── Kubelet trait: pods/log, exec, attach, portforward
//! ```
//!
//! * [`loopback::Loopback`] ([`ApiServerHandle::loopback`]): the API's verbs in process, as an
//!   identified user (`system:kube-controller-manager`, `system:node:<name>`), through
//!   authorization, admission and validation like any client's request.
//! * [`kubelet::Kubelet`] ([`ApiServerHandle::register_kubelet`]): what the server asks of a
//!   node for the subresources it cannot answer from storage, after its own checks.
//!
//! ## The public surface
//!
//! Everything a caller can name is in this table; every module not linked here is the crate's
//! own (`pub(crate)`), described in the module map for readers of the source.
//!
//! | item | what it is |
//! |---|---|
//! | [`ApiServer`], [`ApiServerBuilder`] | starting a server: address, TLS or plain HTTP, tokens, RBAC, history bounds, data and certificate directories, APF, connection limits, webhooks' service endpoints |
//! | [`ApiServerHandle`] | a running server: URL, token, CA, kubeconfigs (token or client certificate), the request log, faults, manifests, the two interfaces, shutdown |
//! | [`StartError`], [`TlsError`], [`ManifestError`], [`DiskError`] | why a server could not start, or a manifest was refused |
//! | [`loopback`] | the in-process client of the controller manager and the node (the interface between the three components) |
//! | [`kubelet`] | the interface a node implements for logs and streams |
//! | [`faults`] | fault injection for tests (also `POST /admin/faults`) |
//! | [`RequestLog`], [`RequestKey`], [`UNROUTED`] | counts of the requests served (also at `/metrics`) |
//! | [`ApiError`] | an API error as a `metav1.Status` (what the interfaces return) |
//! | [`apiextensions`] | checking a CRD's schema and CEL rules offline, as the server will |
//! | [`ServingLimits`], [`parse_token_auth_file`], [`StaticToken`], [`ADMIN_TOKEN_FILE`] | the options a command line needs |
//!
//! **Not part of the API:** the cargo feature `unstable-internals` (off by default) compiles a
//! module `internals` and `ApiServerHandle::store`, which hand the store and the registry's
//! verbs to the workspace's own tests and benchmarks. Like tokio's `tokio_unstable`, it may
//! change in any release; nothing outside this repository should turn it on.
//!
//! ## Module map
//!
//! The modules are layered: each uses only the ones above it in this table, and no two of them
//! form a cycle (`tests/integration/sample_controller/workspace_modules.rs` checks it). They follow
//! kube-apiserver's packages.
//!
//! | module | kube-apiserver | what lives there |
//! |---|---|---|
//! | `api` | `apimachinery/pkg/api`, `apis/meta/v1` | the wire-level types every layer shares: Status errors, query and list options, object metadata rules, selectors, users, Go's JSON field order, request and object size limits |
//! | `storage` | etcd and the watch cache's history | objects, the revision counter, the watch history and its bounds, durability (`--data-dir`), resting unread objects as bytes |
//! | `auth` | `pkg/authentication`, `plugin/pkg/auth/authorizer/rbac`, `pkg/registry/rbac/validation` | tokens and client certificates, the RBAC authorizer, escalation checks |
//! | `webhook` | `pkg/util/webhook` | the one HTTPS client every webhook call goes through (admission and conversion) |
//! | `registry` | `pkg/registry`, `registry/generic/registry.Store` | the resource table, the generic store (get, list, create, update, patch, apply, delete), a `Strategy` per resource under `registry/<group>/` |
//! | [`apiextensions`] | `apiextensions-apiserver` | CRDs: structural schemas, CEL rules, the custom resources' strategy, conversion webhooks; the offline schema checks are its public part |
//! | `admission` | `pkg/admission/plugin/webhook` | mutating and validating admission webhooks around every write |
//! | `filters` | `pkg/server/filters`, `endpoints/filters` | one filter per file: authentication, impersonation, priority and fairness, body limit, authorization, faults, the request log |
//! | [`kubelet`] | `pkg/kubelet/client` | what the server asks of a node |
//! | `endpoints` | `pkg/endpoints/handlers`, discovery, OpenAPI | routing and the handlers, watch, discovery, OpenAPI, Tables and printers, partial metadata, protobuf bodies, the reviews |
//! | [`loopback`] | the loopback client | the in-process client of the cluster's own components |
//! | `server` | `pkg/server`, `cmd/kube-apiserver` | the handler chain (`DefaultBuildHandlerChain`), serving connections, TLS, a fresh cluster's objects, manifests |
//!
//! ## How a request flows
//!
//! ```text
//! TCP ─ TLS (rustls, ALPN h2/http1.1) ─ hyper ─ server::chain
//!         filters: authentication → impersonation → priority and fairness (seat, fair queue,
//!                  or 429) → body limit (≤ 3 MiB, else 413)
//!         endpoints: route (discovery | OpenAPI | reviews | resource URL)
//!                  → authorization (RBAC, if enforced) → faults
//!                  → decode (JSON | YAML | protobuf | patch types)
//!         writes:  admission (webhooks) → registry: the generic store and the resource's
//!                  strategy, under the store lock                         ──┐
//!         reads:   registry (get, list) │ watch (follows the revision) ◄──┘ changes
//!         → encode (JSON | Table) → request log
//! ```
//!
//! ## resourceVersion, in one paragraph
//!
//! Every object carries `metadata.resourceVersion`, and every list and watch event does too.
//! They all come from one counter for the whole server (etcd's *revision*): each write bumps it.
//! It serves two purposes. **Optimistic concurrency**: an update must carry the version it was
//! based on; if someone wrote in between, the versions differ and the update fails with `409
//! Conflict`, and the controller re-reads and retries instead of silently overwriting. **Resuming
//! streams**: a client that has seen everything up to version N can ask for "everything after N"
//! (a watch from N) and miss nothing. Details in the `storage` module.
//!
//! ## Watch, the history window and 410
//!
//! A watch is a `GET ...?watch=true` whose response never ends: one JSON event per line
//! (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`). To replay "everything after N" the
//! server keeps a window of recent changes (the last 5 minutes, at most 256 MiB by default:
//! [`ApiServerBuilder::history_max_age`], [`ApiServerBuilder::history_max_bytes`]).
//! A client that asks for a version older than the window gets an `ERROR` event holding a `410
//! Expired` Status: it has missed changes the server no longer remembers, so it must list again
//! from scratch. That is the *relist* every informer knows how to do. Details in `endpoints/watch`.
//!
//! ## Status subresources
//!
//! Kinds with a `status` subresource (pods, deployments, most custom resources) split their
//! object into two halves with two owners: **spec** (what the user wants) is written through the
//! main endpoint, whose writes silently keep the stored `.status`; **status** (what a controller
//! observed) is written through `.../status`, whose writes keep everything else. So a user's
//! `kubectl apply` can never clobber what the controller reported and vice versa, and
//! `metadata.generation` — bumped only by spec changes — lets a controller publish
//! `status.observedGeneration` to say which spec its status describes. Details in the `registry` module.
//!
//! ## What is served
//!
//! core/v1 namespaces, pods (+status, +log: [`kubelet`], +exec, +attach, +portforward:
//! [`kubelet`]), services (`registry/core/services`) and nodes (each +status), events, configmaps, secrets,
//! serviceaccounts, resourcequotas (+status: `status.used` kept current by the registry, and
//! quota admission refusing creates that would exceed them, `registry/core/resourcequotas`); apps/v1 deployments, statefulsets, replicasets (+status, +scale);
//! coordination.k8s.io/v1 leases; networking.k8s.io/v1 ingresses (+status), ingress classes and
//! network policies, validated and defaulted as kube does (`registry/networking`, nothing
//! routes or filters traffic); events.k8s.io/v1 events (the same stored events); RBAC
//! objects (stored; enforced with [`ApiServerBuilder::enforce_rbac`]); authorization.k8s.io/v1
//! access reviews answered by the same authorizer, for `kubectl auth can-i` (`endpoints/access_review`);
//! authentication.k8s.io/v1 token reviews, for components that authenticate their own callers
//! (`endpoints/token_review`); and impersonation (`kubectl --as`, `filters/impersonation`); apiextensions.k8s.io/v1
//! CustomResourceDefinitions, each of which serves its custom resources the moment it is
//! created ([`apiextensions`]), in every served version, converted by the CRD's conversion webhook when
//! it has one ([`apiextensions`]); admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations and
//! MutatingWebhookConfigurations, whose webhooks every write goes through (`admission`); flowcontrol.apiserver.k8s.io/v1 FlowSchemas and
//! PriorityLevelConfigurations, which configure API Priority and Fairness (`filters/flowcontrol`). Plus discovery (legacy and aggregated), `/openapi/v3` and `/openapi/v2`,
//! Table output for `kubectl get`, protobuf request bodies for built-in kinds, the request log
//! (also at `/metrics`) and fault injection ([`faults`], also at `/admin/faults`).
//!
//! ## Fidelity to kube-apiserver (what other projects' cluster tests see)
//!
//! Suites written for real clusters pass against this server where it behaves as below. The
//! Python client's `kubernetes/e2e_test` (kubernetes-client/python at `024658493`, the
//! `kubernetes` 37.0.2 package) against `sample-controller apiserver --node-runtime process`:
//! 31 passed and 14 failed on a server behaviour before this list was done; now 42 pass, 1
//! skips (it needs the Metrics API) and 2 fail (its `kubernetes/aio/e2e_test`: 6 of 6 pass), the port-forward tests, on what their
//! pods need from a real node: `test_portforward_http` an `nginx` image, `test_portforward_raw`
//! a `python` executable and a startup probe (with `python3` and a 3 s wait in its place it
//! passes). Each item names where it is done:
//!
//! * **Services** (`registry/core/services`): defaulted as `SetDefaults_Service` does, given a cluster IP
//!   from `10.96.0.0/12` (node ports from `30000-32767`), `status: {loadBalancer: {}}`, and a
//!   DELETE answers with the Service;
//! * **a new cluster's objects** (`server/bootstrap`): the `kubernetes` Service (`10.96.0.1:443`),
//!   the bootstrap ClusterRoles and bindings (`cluster-admin`, `admin`, `edit`, `view`,
//!   `system:discovery`, ...), a `default` ServiceAccount in every namespace, and in the
//!   standalone server each namespace's `kube-root-ca.crt`;
//! * **JSON bytes** (`api/json_order`): Go's field order for built-in objects, lists and Status
//!   (custom resources sorted, as unstructured), each body ending in `\n`;
//! * **`as=PartialObjectMetadata`** and `as=PartialObjectMetadataList` (`endpoints/partial`) on GET,
//!   LIST, writes and WATCH;
//! * **field selectors** read an absent Go boolean as `false` (`spec.unschedulable==false`,
//!   `api/selectors`);
//! * **x509 client certificates** (`server/tls`, `auth/x509`): user = CN, groups = O, signed by the
//!   server's client CA or `--client-ca-file`; `--kubeconfig-client-cert` writes a kind-like
//!   kubeconfig;
//! * **webhook TLS** (`auth/x509`): a self-signed `CA:TRUE` certificate that is
//!   its own `caBundle` is trusted, as Go's TLS trusts it.
//!
//! * **more kinds** stored and served: batch/v1 Jobs (run to completion by a simulated Job
//!   controller of the controller manager) and CronJobs (a Job per schedule time), apps/v1
//!   DaemonSets and v1 ReplicationControllers (+scale) with their pods (the controller manager's),
//!   policy/v1 PodDisruptionBudgets, apiregistration.k8s.io/v1 APIServices,
//!   certificates.k8s.io/v1 CertificateSigningRequests (+status, +approval).
//!
//! * **`pods/NAME/ephemeralcontainers`** (`registry/core/pods`): GET, PUT and PATCH as
//!   `EphemeralContainersREST` (only `spec.ephemeralContainers` changes; containers are added,
//!   never removed or changed, with the real validation messages), in discovery; the node
//!   runs and reports them (`status.ephemeralContainerStatuses`).
//!
//! * **action subresources** (`registry/core/pod_actions`): `serviceaccounts/<name>/token` (TokenRequest:
//!   an opaque token that authenticates as the service account until it expires) and
//!   `pods/<name>/eviction` (PodDisruptionBudgets honoured).
//!
//! * **ComponentStatuses**, computed (`scheduler`, `controller-manager`, `etcd-0`, all
//!   `Healthy`), get and list only (`registry/core/pod_actions`).
//!
//! * **`pods/exec`, `pods/attach`, `pods/portforward`** over WebSocket (`v5`, `v4` and the
//!   older channel subprotocols, the node's, frames by `tungstenite`)
//!   against the process node (through [`kubelet`]), with `configMap`,
//!   `secret` and `emptyDir` volumes (volumes); and over SPDY/3.1, what kubectl
//!   1.29 and older speak, what later ones fall back to, and what kubectl 1.31+ port-forward
//!   tunnels inside a WebSocket.
//!
//! Not served: kubectl's protobuf bodies are decoded for the kinds it sent before (the new
//! kinds take JSON, which every client but kubectl ≥ 1.32's typed `create` sends). A DELETE on
//! any subresource is `405`.
//!
//! kube-rs's cluster tests (kube-rs/kube at `ac95b199`: `cargo test --lib --workspace --exclude
//! e2e --all-features -- --ignored`, 31 tests) against `sample-controller apiserver
//! --node-runtime process --kubeconfig-client-cert kubernetes-admin/system:masters`: 28 passed
//! and 3 failed before `pods/ephemeralcontainers` and `pods/exec` were served; now 30 pass and
//! 1 fails: `pod_can_exec_and_write_to_stdin_from_node_proxy`, which talks to a kubelet at
//! `https://localhost:10250`, a port this server does not run. With the token kubeconfig (no
//! `--kubeconfig-client-cert`) `custom_client_openssl_tls_configuration` gets 401, as on any
//! cluster: it builds a client without the token. Its e2e `job` binary (a Job whose container
//! has no command) passes: the process runtime ends such a container of a Job at once
//! (the node's process runtime) instead of keeping it running.
//!
//! ## Hostile input: no single request takes the server down
//!
//! Every bound kube-apiserver and etcd put on a request is kept, with their answers
//! (`api/limits`): 3 MiB bodies (`413`, also over HTTP/2), JSON patches of at most 10,000
//! operations whose `copy`s add at most 3 MiB, YAML depth-limited and alias-bounded before it is
//! parsed, ConfigMap and Secret data of at most 1 MiB, objects of at most etcd's 1.5 MiB
//! (`etcdserver: request is too large`), validation errors de-duplicated and bounded (a million
//! empty `ownerReferences` is four causes), built-in fields typed as Go decodes them
//! (`registry/typed`); CRD `pattern`s have RE2's meaning, are compiled once and are refused at CRD
//! create when RE2 would refuse them ([`apiextensions`]). A full server sheds its oldest silent
//! connections for new clients rather than locking them out (`server/connections`); a data directory
//! that cannot commit turns the store read-only as etcd's `NOSPACE` does (`storage/durable`); memory
//! is handed back after bursts (`storage/memory`, the `apiserver` command: idle RSS 37 MiB after
//! `hack/bench-hostile.sh`'s payloads, whose peak was 67 MiB). The same script prints each
//! payload's time, peak RSS and the latency a fresh client saw meanwhile.
//!
//! ## How it differs from a real cluster
//!
//! A few of a cluster's controllers are simulated in-process, each in its own module that
//! explains what the real one does and what the simulation keeps:
//!
//! * the **garbage collector** (the controller manager's, on by default): deleting an owner deletes or orphans its
//!   dependents by `ownerReferences` and `propagationPolicy`, and releases the `orphan` /
//!   `foregroundDeletion` finalizers. Without it (`.garbage_collector(false)`) dependents stay
//!   and those finalizers stay until something removes them;
//! * the **scheduler and kubelet** (the node, with the cluster's `simulate`): pods are
//!   bound to `embedded-node`, run, end `Succeeded` or `Failed` by their command, and a bound
//!   pod deleted with a grace period is finished. Without it pods stay `Pending` unless a test
//!   moves them, and a pod deleted with a grace period after a test bound it to a node waits
//!   for a kubelet that never comes. With the cluster's `node_runtime` set to
//!   `NodeRuntime::Process` the node instead runs each container's command as a
//!   child process of the server (the node's process runtime, opt-in, with its safety rules), and
//!   `kubectl logs` shows what it printed;
//! * the **Deployment, ReplicaSet and StatefulSet controllers** (the controller manager's, also with
//!   `simulate`): status follows `spec.replicas`; StatefulSets create and delete their pods
//!   `<name>-<ordinal>`;
//! * the **Job, CronJob, ReplicationController and DaemonSet controllers** (the controller manager's, also with `simulate`): Jobs run pods to completion, CronJobs
//!   create Jobs on their schedule, ReplicationControllers keep `spec.replicas` pods and
//!   DaemonSets one pod on each node.
//!
//! Namespace deletion is finished inline (content deleted, the `kubernetes` finalizer
//! released, the namespace removed once empty), and deleting a CRD removes its custom resources
//! at once. The watch history is one window shared by all resources (etcd's, not the
//! per-resource watch cache's). No in-tree admission plugins (admission webhooks are called: `admission`); RBAC enforced only on request (`auth/rbac`; without
//! it every request and every `kubectl auth can-i` is allowed, as with
//! `--authorization-mode=AlwaysAllow`); no defaulting of built-in kinds (but Services, Jobs, CronJobs and a pod's `securityContext: {}`), no conversion
//! webhooks; built-in kinds get the real metadata validation and their kinds' main rules
//! (`registry/validation`), and RBAC writes the escalation checks; server-side apply tracks managers but is simpler than the real structured-merge-diff.
//! Tables for built-in kinds follow the real printers for pods, namespaces, configmaps,
//! secrets, serviceaccounts, services, events, deployments, statefulsets, replicasets, nodes,
//! role bindings and leases (`endpoints/printers`); roles, cluster roles and CRDs
//! get the `Name` / `Created At` columns, as on a real server.

#![forbid(unsafe_code)]
// `unstable-internals` re-exports internal modules (hidden) whose docs link to other internals;
// without it, the published documentation, links to private items stay errors.
#![cfg_attr(
    feature = "unstable-internals",
    allow(rustdoc::private_intra_doc_links)
)]

pub(crate) mod admission;
pub(crate) mod api;
pub mod apiextensions;
pub(crate) mod auth;
pub(crate) mod endpoints;
pub(crate) mod filters;
pub mod kubelet;
pub mod loopback;
pub(crate) mod registry;
pub(crate) mod server;
pub(crate) mod storage;
pub(crate) mod webhook;

// Not part of the API, so not in its documentation either (read `src/internals.rs`).
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod internals;

use apiextensions::conversion;
use filters::{flowcontrol, request_log};

use auth::rbac;
use endpoints::watch;
/// Fault injection for tests: drop watches, compact, fail or delay requests.
pub use filters::faults;
use server::{bootstrap, tls};
use storage::{durable, memory, store, stored};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::registry::Store;
/// An API error as a `metav1.Status`: what the server answers, and what the interfaces return.
pub use api::status::ApiError;
pub use apimachinery::serving::ServingLimits;
/// kube-apiserver's `--token-auth-file` format, for commands that take one.
pub use auth::tokens::{StaticToken, parse_token_auth_file};
use endpoints::Shared;
pub use request_log::{RequestKey, RequestLog, UNROUTED};
/// Why manifests were refused ([`ApiServerHandle::load_manifests`], [`StartError::Manifests`]).
pub use server::manifests::ManifestError;
/// Why certificates could not be made, read or used ([`StartError::Tls`]).
pub use server::tls::TlsError;
/// Why the data directory could not be used ([`StartError::Storage`]).
pub use storage::durable::DiskError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding the listen address failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Creating certificates failed.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A token file (standalone `--token-auth-file`) could not be used.
    #[error("token file {path}: {message}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Manifests to preload (standalone `--manifests`) were refused.
    #[error(transparent)]
    Manifests(#[from] crate::server::manifests::ManifestError),
    /// The configuration would be unsafe (standalone: anonymous admin on a network address).
    #[error("{0}")]
    Unsafe(String),
    /// The data directory (`--data-dir`) could not be opened or read.
    #[error(transparent)]
    Storage(#[from] durable::DiskError),
}

/// The entry point: `ApiServer::builder()...start().await`.
#[derive(Debug)]
pub struct ApiServer;

impl ApiServer {
    /// A builder with the documented defaults.
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }
}

/// Configures a server. Defaults: HTTPS, a random token, `127.0.0.1:0`, a history window of
/// 5 minutes and at most 256 MiB, state in memory only, bookmarks every 60 s, `sendInitialEvents` supported; the garbage collector
/// on; the simulated node and workload controllers off (when on: pods run 1 s, workloads react
/// after 500 ms); RBAC not enforced.
#[derive(Clone, Debug)]
pub struct ApiServerBuilder {
    plain_http: bool,
    token: Option<String>,
    extra_tokens: Vec<(String, String)>,
    listen: SocketAddr,
    history: store::HistoryLimits,
    data_dir: Option<PathBuf>,
    cert_dir: Option<PathBuf>,
    bookmark_interval: Duration,
    watch_unresponsive: watch::Unresponsive,
    kubeconfig_path: Option<PathBuf>,
    kubeconfig_client_cert: Option<(String, Option<String>)>,
    reject_send_initial_events: bool,
    enforce_rbac: bool,
    user_groups: std::collections::HashMap<String, Vec<String>>,
    flow_control: flowcontrol::Settings,
    rest_unread_objects: bool,
    rest_unread_after: Duration,
    serving: ServingLimits,
    service_endpoints: std::collections::HashMap<String, String>,
    conversion_timeout: Duration,
    client_ca_pems: Vec<String>,
    memory_release: Option<fn()>,
    event_ttl: Duration,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        ApiServerBuilder {
            plain_http: false,
            token: None,
            extra_tokens: vec![],
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: store::HistoryLimits::default(),
            data_dir: None,
            cert_dir: None,
            bookmark_interval: Duration::from_secs(60),
            watch_unresponsive: watch::Unresponsive::default(),
            kubeconfig_path: None,
            kubeconfig_client_cert: None,
            reject_send_initial_events: false,
            enforce_rbac: false,
            user_groups: std::collections::HashMap::new(),
            flow_control: flowcontrol::Settings::default(),
            rest_unread_objects: false,
            rest_unread_after: stored::DEFAULT_REST_AFTER,
            serving: ServingLimits::default(),
            service_endpoints: std::collections::HashMap::new(),
            conversion_timeout: conversion::DEFAULT_TIMEOUT,
            client_ca_pems: vec![],
            memory_release: None,
            event_ttl: DEFAULT_EVENT_TTL,
        }
    }
}

impl ApiServerBuilder {
    /// The address the server will listen on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Whether RBAC will be enforced.
    pub fn rbac_enforced(&self) -> bool {
        self.enforce_rbac
    }

    /// Serve plain HTTP instead of HTTPS (default: HTTPS with a generated CA).
    pub fn plain_http(mut self, yes: bool) -> Self {
        self.plain_http = yes;
        self
    }

    /// The bearer token of user `admin` (default: 32 random characters; with a
    /// [`Self::cert_dir`] or [`Self::data_dir`], the one kept there in [`ADMIN_TOKEN_FILE`],
    /// made on the first start, so it survives restarts).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Accepts another token, authenticating as `user`.
    pub fn extra_token(mut self, token: impl Into<String>, user: impl Into<String>) -> Self {
        self.extra_tokens.push((token.into(), user.into()));
        self
    }

    /// Accepts a token for the service account `namespace/name`: the user
    /// `system:serviceaccount:<namespace>:<name>` in the groups `system:serviceaccounts` and
    /// `system:serviceaccounts:<namespace>` (what a pod's projected token authenticates as).
    pub fn service_account_token(
        self,
        token: impl Into<String>,
        namespace: &str,
        name: &str,
    ) -> Self {
        self.extra_token(token, format!("system:serviceaccount:{namespace}:{name}"))
    }

    /// Puts `user` in `groups` (every user is also in `system:authenticated`; a member of
    /// `system:masters` bypasses RBAC).
    pub fn user_groups(mut self, user: impl Into<String>, groups: &[&str]) -> Self {
        self.user_groups
            .entry(user.into())
            .or_default()
            .extend(groups.iter().map(|g| (*g).to_owned()));
        self
    }

    /// Enforce RBAC (`auth/rbac`; default off, everything allowed): requests are authorized
    /// against the Roles, ClusterRoles, RoleBindings and ClusterRoleBindings stored in the
    /// server, and denied with 403; access reviews (`kubectl auth can-i`) and impersonation
    /// follow the same rules. The bootstrap token stays all-powerful. Off, every request,
    /// every impersonation and every access review is allowed.
    pub fn enforce_rbac(mut self, yes: bool) -> Self {
        self.enforce_rbac = yes;
        self
    }

    /// Address to listen on (default `127.0.0.1:0`, a free port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// An extra bound on how many changes the watch history keeps (default: none, only the
    /// age and byte bounds); older watches and continue tokens get 410.
    pub fn history_window(mut self, n: usize) -> Self {
        self.history.max_changes = Some(n.max(1));
        self
    }

    /// How long a revision stays usable for watches and continue tokens (default 5 minutes,
    /// etcd's compaction interval in kube-apiserver), whatever the write rate, unless the byte
    /// bound forces an earlier compaction.
    pub fn history_max_age(mut self, d: Duration) -> Self {
        self.history.max_age = d;
        self
    }

    /// How long an event is kept after its last write (kube-apiserver's `--event-ttl`, default
    /// [`DEFAULT_EVENT_TTL`], one hour); then it is deleted and its watchers see `DELETED`.
    /// Zero keeps events until they are deleted. See `storage::store`, "Objects that expire".
    pub fn event_ttl(mut self, ttl: Duration) -> Self {
        self.event_ttl = ttl;
        self
    }

    /// The most bytes the watch history may hold (default 256 MiB).
    pub fn history_max_bytes(mut self, bytes: usize) -> Self {
        self.history.max_bytes = bytes;
        self
    }

    /// Keep objects, the revision counter and the watch history in `dir` (kube-apiserver keeps
    /// them in etcd): a restart resumes with the same objects and revisions. The server's
    /// identity lives there too unless [`Self::cert_dir`] names another directory: its CA,
    /// serving certificate and client CA and the admin token ([`ADMIN_TOKEN_FILE`]),
    /// so a kubeconfig written before a restart works after it. Default: memory only. See
    /// `storage/durable`.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Keep the CA and the serving certificate in `dir` (kube-apiserver's `--cert-dir`): made
    /// on the first start, reused after, so clients keep verifying the server across
    /// restarts. Default: the data directory ([`Self::data_dir`]) when there is one, else a new
    /// CA at every start.
    pub fn cert_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cert_dir = Some(dir.into());
        self
    }

    /// Interval of watch bookmarks (default 60 s).
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Close a watch as unresponsive when its client leaves a frame untaken for `after` while
    /// `backlog` events wait for it (default 5 s and 1,000 events; see `endpoints/watch`, "Watchers
    /// that do not read").
    pub fn watch_unresponsive(mut self, after: Duration, backlog: usize) -> Self {
        self.watch_unresponsive = watch::Unresponsive { after, backlog };
        self
    }

    /// Write a kubeconfig for this server to `path` once it listens.
    pub fn kubeconfig_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig_path = Some(path.into());
        self
    }

    /// The kubeconfig written by [`Self::kubeconfig_path`] authenticates with a client
    /// certificate for `user` in `group` instead of the token
    /// ([`ApiServerHandle::kubeconfig_yaml_for_client_cert`]; HTTPS only).
    pub fn kubeconfig_client_cert(mut self, user: &str, group: Option<&str>) -> Self {
        self.kubeconfig_client_cert = Some((user.to_owned(), group.map(str::to_owned)));
        self
    }

    /// Answer `sendInitialEvents` with 422, as a server with the WatchList feature off does
    /// (lets tests exercise clients' fallback to list + watch).
    pub fn reject_send_initial_events(mut self, yes: bool) -> Self {
        self.reject_send_initial_events = yes;
        self
    }

    /// Whether objects nobody has read for a while ([`ApiServerBuilder::rest_unread_after`])
    /// rest as their JSON bytes (`storage/stored`; `--rest-unread-objects`). After 10,000 Ats created
    /// at once and a minute idle, the standalone server's RSS grew by about 1.8 times their JSON
    /// with it, against 7.8 times without. Runs a thread of its own (`apiserver-shed`) while the
    /// server runs. Off by default here, on by default in the standalone server
    /// (the `sample-controller apiserver` command): a server a test starts lives for seconds, less than an object takes to
    /// rest, and without the thread nothing changes under a test but what it does itself.
    pub fn rest_unread_objects(mut self, on: bool) -> Self {
        self.rest_unread_objects = on;
        self
    }

    /// How long an object goes unread before it rests (default
    /// 30 s by default; `--rest-unread-after`): it rests between two and
    /// three thirds of this after its last read. Shorter saves memory sooner and costs CPU
    /// under writes: every version of an object that outlives it is encoded once, and decoded
    /// again when read. Under the At benchmark (10,000 Ats written four times each in about 30
    /// s) the server spent about 6 % more CPU with 30 s than without resting, and about 40 %
    /// more with 3 s (`stored`'s module docs).
    pub fn rest_unread_after(mut self, d: Duration) -> Self {
        self.rest_unread_after = d;
        self
    }

    /// API Priority and Fairness (`filters/flowcontrol`; default on). Off, the server keeps the
    /// plain max-in-flight limits instead (`--enable-priority-and-fairness=false`).
    pub fn priority_and_fairness(mut self, yes: bool) -> Self {
        self.flow_control.enabled = yes;
        self
    }

    /// `--max-requests-inflight` (default 400): with APF, part of the seats the priority
    /// levels share; without, the limit on concurrent read-only requests.
    pub fn max_requests_inflight(mut self, n: usize) -> Self {
        self.flow_control.max_requests_inflight = n;
        self
    }

    /// `--max-mutating-requests-inflight` (default 200): with APF, the rest of the seats;
    /// without, the limit on concurrent mutating requests.
    pub fn max_mutating_requests_inflight(mut self, n: usize) -> Self {
        self.flow_control.max_mutating_requests_inflight = n;
        self
    }

    /// How long a request may wait in an APF queue before it gets 429 (default 15 s).
    pub fn flow_control_queue_wait(mut self, d: Duration) -> Self {
        self.flow_control.queue_wait = d;
        self
    }

    /// Connection limits ([`apimachinery::serving`]; defaults: 10,000 connections, 32 s to
    /// finish the TLS handshake and send a request, 90 s idle, 250 HTTP/2 streams, 1 MiB
    /// HTTP/1 buffer).
    pub fn serving_limits(mut self, limits: ServingLimits) -> Self {
        self.serving = limits;
        self
    }

    /// Hands freed memory back to the system after large requests: every
    /// 5 s, if the request and response bodies handled since the last
    /// call total more than 16 MiB, `release` runs on a blocking
    /// thread (for glibc's malloc: `malloc_trim`,
    /// [`apimachinery::malloc::release_freed_memory`]; the `apiserver` command passes the one
    /// its binary installed, [`apimachinery::serving::memory_release`], jemalloc's purge for
    /// `sample-controller`). Off by default: a library does not change its host's allocator
    /// behaviour unasked (`storage/memory`).
    pub fn memory_release(mut self, release: fn()) -> Self {
        self.memory_release = Some(release);
        self
    }

    /// Where the Service `namespace/name` is reached (`host:port`), for admission webhooks
    /// and CRD conversion webhooks whose `clientConfig.service` names it
    /// (`--service-endpoint`): this
    /// server has no cluster network, so a webhook service must be mapped to an address. The
    /// webhook's certificate must still name `NAME.NAMESPACE.svc`, as in a cluster.
    pub fn service_endpoint(mut self, namespace_name: &str, host_port: &str) -> Self {
        self.service_endpoints
            .insert(namespace_name.to_owned(), host_port.to_owned());
        self
    }

    /// Also accept client certificates signed by the CA(s) of this PEM (`--client-ca-file`),
    /// besides the server's own client CA ([`ApiServerHandle::client_certificate`]).
    pub fn client_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.client_ca_pems.push(pem.into());
        self
    }

    /// How long a CRD conversion webhook call may take before it fails with `context deadline
    /// exceeded` (default 30 s, the real server's).
    pub fn conversion_webhook_timeout(mut self, timeout: Duration) -> Self {
        self.conversion_timeout = timeout;
        self
    }

    /// Binds, creates certificates, seeds the immortal namespaces and starts serving.
    ///
    /// The future is boxed so that the server is compiled here, once, at this crate's
    /// optimisation level. An `async fn`'s body is a coroutine, and Rust compiles a coroutine
    /// (like a generic function) in the crate that polls it: a caller awaiting a plain
    /// `async fn start` would compile the whole server again, everything this future spawns
    /// included, at its own optimisation level. The box is made in this crate, so callers only
    /// poll it through its vtable.
    pub fn start(self) -> BoxFuture<'static, Result<ApiServerHandle, StartError>> {
        Box::pin(self.bind_and_serve())
    }

    async fn bind_and_serve(mut self) -> Result<ApiServerHandle, StartError> {
        let (listener, addr) = self.bind().await?;
        // The identity is as durable as the data: with a data directory and no certificate
        // directory, the certificates live with the data.
        let cert_dir = self.cert_dir.as_ref().or(self.data_dir.as_ref());
        let tls = match (cert_dir, self.plain_http) {
            (_, true) => None,
            (Some(dir), false) => Some(tls::load_or_generate(dir, &self.client_ca_pems)?),
            (None, false) => Some(tls::generate(&self.client_ca_pems)?),
        };
        let token = self.admin_token()?;
        let store = Arc::new(match &self.data_dir {
            Some(dir) => Store::open(self.history, dir, |state| {
                apiextensions::crd::install(&mut state.registry);
                apiextensions::crd::serve_stored(state);
            })?,
            None => {
                let store = Store::with_limits(self.history);
                store.write(|state| apiextensions::crd::install(&mut state.registry));
                store
            }
        });
        store.expire_after(crate::registry::resources::EVENTS_STORAGE, self.event_ttl);
        // Events are written far more than read (nothing in the cluster reads them back but
        // `kubectl describe` and `get events`): kept as bytes from their write.
        store.rest_on_write(crate::registry::resources::EVENTS_STORAGE);
        bootstrap::seed(&store, addr.port());
        flowcontrol::FlowControl::seed(&store);
        let flow_control = flowcontrol::FlowControl::new(self.flow_control.clone(), &store);
        let shutdown = CancellationToken::new();
        let log = RequestLog::default();
        let tracker = TaskTracker::new();
        let shared = Arc::new(Shared {
            kubelets: kubelet::Kubelets::default(),
            faults: faults::Faults::new(store.clone(), log.clone(), shutdown.clone()),
            rbac: rbac::Authorizer::new(self.enforce_rbac, std::mem::take(&mut self.user_groups)),
            store: store.clone(),
            log,
            authn: filters::authentication::Authenticator {
                tokens: self.token_table(&token),
                unauthenticated_user: self.plain_http.then(|| rbac::ADMIN_USER.to_owned()),
            },
            bookmark_interval: self.bookmark_interval,
            watch_unresponsive: self.watch_unresponsive,
            reject_send_initial_events: self.reject_send_initial_events,
            shutdown: shutdown.clone(),
            server_address: addr.to_string(),
            flowcontrol: flow_control.clone(),
            backend: registry::Backend {
                store: store.clone(),
                webhooks: Arc::new(webhook::Webhooks {
                    conversion_timeout: self.conversion_timeout,
                    ..webhook::Webhooks::new(self.service_endpoints.clone())
                }),
            },
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let acceptor = tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
        tracker.spawn(server::serve::accept_loop(
            listener,
            acceptor,
            shared.clone(),
            tracker.clone(),
            Arc::new(self.serving.clone()),
        ));
        flow_control.spawn_config_watch(store.clone(), shutdown.clone(), &tracker);
        tracker.spawn(storage::store::compact_on_time(
            store.clone(),
            shutdown.clone(),
        ));
        if let Some(release) = self.memory_release {
            tracker.spawn(memory::release_after_bursts(release, shutdown.clone()));
        }
        if self.rest_unread_objects {
            tracker.spawn(memory::shed_rested(
                store.clone(),
                stored::shed_interval(self.rest_unread_after),
                shutdown.clone(),
            ));
        }
        // Debug: the `apiserver` command prints the URL on stdout itself, once.
        tracing::debug!(%url, "embedded API server listening");
        let handle = ApiServerHandle {
            url,
            token,
            client_ca: tls.as_ref().map(|t| t.client_ca.clone()),
            ca_pem: tls.map(|t| t.ca_pem),
            shared,
            tracker,
        };
        self.write_requested_kubeconfig(&handle, addr).await?;
        Ok(handle)
    }

    /// Step one of starting: refuses an unsafe combination (real processes on a reachable
    /// address with no RBAC), then binds the listening socket and reads back its address.
    async fn bind(&self) -> Result<(TcpListener, SocketAddr), StartError> {
        let listener =
            apimachinery::serving::bind(self.listen).map_err(|source| StartError::Bind {
                addr: self.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: self.listen,
            source,
        })?;
        Ok((listener, addr))
    }

    /// The admin token: the one configured, else the one kept from an earlier run, else a
    /// fresh random one.
    fn admin_token(&mut self) -> Result<String, StartError> {
        // The admin token survives restarts with the state it guards: kept in the cert
        // directory (or the data directory), so kubeconfigs handed out before still work.
        Ok(
            match (
                self.token.take(),
                self.cert_dir.as_ref().or(self.data_dir.as_ref()),
            ) {
                (Some(t), _) => t,
                (None, Some(dir)) => persisted_token(dir)?,
                (None, None) => auth::tokens::random_token(),
            },
        )
    }

    /// The bearer tokens the server accepts: the admin token, then the extra ones configured.
    fn token_table(&mut self, token: &str) -> auth::tokens::TokenTable {
        let mut tokens = auth::tokens::TokenTable::default();
        tokens.insert(token.to_owned(), "admin");
        for (t, u) in std::mem::take(&mut self.extra_tokens) {
            tokens.insert(t, u);
        }
        tokens
    }

    /// The last step: writes the kubeconfig when one was asked for (for the admin token, or
    /// for a client certificate). If that fails the server is shut down again and the error
    /// returned.
    async fn write_requested_kubeconfig(
        &self,
        handle: &ApiServerHandle,
        addr: SocketAddr,
    ) -> Result<(), StartError> {
        let written = match (&self.kubeconfig_path, &self.kubeconfig_client_cert) {
            (None, _) => Ok(()),
            (Some(path), None) => handle.write_kubeconfig(path),
            (Some(path), Some((user, group))) => {
                match handle.kubeconfig_yaml_for_client_cert(user, group.as_deref()) {
                    None => Err(std::io::Error::other(
                        "a client certificate needs HTTPS (not --plain-http)",
                    )),
                    Some(Err(e)) => Err(std::io::Error::other(e.to_string())),
                    Some(Ok(yaml)) => write_private(path, &yaml),
                }
            }
        };
        if let (Some(path), Err(e)) = (&self.kubeconfig_path, written) {
            handle.shutdown().await;
            return Err(StartError::Bind {
                addr,
                source: std::io::Error::other(format!(
                    "writing kubeconfig {}: {e}",
                    path.display()
                )),
            });
        }
        Ok(())
    }
}

/// The kubeconfig of [`ApiServerHandle::kubeconfig_yaml`] for a server at `url`.
fn kubeconfig_text(url: &str, token: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = match ca_pem {
        Some(ca) => format!(
            "    certificate-authority-data: {}\n",
            yaml_str(&base64::engine::general_purpose::STANDARD.encode(ca))
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\n\
             clusters:\n\
             - cluster:\n\
             {ca}    server: {server}\n  \
             name: sample-controller\n\
             contexts:\n\
             - context:\n    \
             cluster: sample-controller\n    \
             namespace: default\n    \
             user: admin\n  \
             name: sample-controller\n\
             current-context: sample-controller\n\
             kind: Config\n\
             preferences: {{}}\n\
             users:\n\
             - name: admin\n  \
             user:\n    \
             token: {token}\n",
        server = yaml_str(url),
        token = yaml_str(token),
    )
}

/// `s` as a YAML scalar that reads back as the string `s`: plain (as a YAML serializer writes
/// it, and as scripts that cut a kubeconfig's `token:` line expect) when it holds only letters,
/// digits and `._/:+=-`, starts with a letter or a digit, and YAML would not read it as
/// anything but a string (a boolean or null word, a number, a hexadecimal, octal or binary
/// integer, a sexagesimal one); else double-quoted (a JSON string is a valid double-quoted
/// YAML scalar).
fn yaml_str(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let safe = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/:+=-".contains(&b))
        && !s.contains(": ");
    let word = matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
    );
    let numeric = s.starts_with(|c: char| c.is_ascii_digit())
        && (s.parse::<f64>().is_ok()
            || s.contains(':')
            || !s.bytes().any(|b| b.is_ascii_alphabetic())
            || ["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p)));
    if safe && !word && !numeric {
        s.to_owned()
    } else {
        serde_json::Value::from(s).to_string()
    }
}

/// Writes `text` to `path`, readable by its owner only on Unix (kubeconfigs hold credentials).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// How long events are kept after their last write by default: kube-apiserver's
/// `--event-ttl` default, one hour ([`ApiServerBuilder::event_ttl`]).
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// The file of a cert or data directory that holds the admin token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// The admin token kept in `dir` ([`ADMIN_TOKEN_FILE`]), made (32 random characters, mode 0600)
/// on the first start. kube-apiserver's credentials live in files that outlive the process
/// (`--token-auth-file`, the CA and its keys), so a kubeconfig written before a restart works
/// after it; this is the same for the server's own token. A file that is empty or not a token
/// (not printable ASCII) is refused rather than silently replaced.
fn persisted_token(dir: &Path) -> Result<String, StartError> {
    let path = dir.join(ADMIN_TOKEN_FILE);
    let fail = |message: String| StartError::TokenFile {
        path: path.clone(),
        message,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim();
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(fail(
                    "does not hold a token (printable ASCII, no spaces); delete it to have a new one made"
                        .into(),
                ));
            }
            Ok(token.to_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
            let token = auth::tokens::random_token();
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&path).map_err(|e| fail(e.to_string()))?;
            std::io::Write::write_all(&mut file, format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| fail(e.to_string()))?;
            Ok(token)
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

/// A running server. [`ApiServerHandle::shutdown`] stops it and waits until every connection has
/// closed; dropping the handle also stops it, without waiting.
pub struct ApiServerHandle {
    url: String,
    token: String,
    ca_pem: Option<String>,
    client_ca: Option<Arc<tls::ClientCa>>,
    shared: Arc<Shared>,
    tracker: TaskTracker,
}

impl std::fmt::Debug for ApiServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerHandle")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Drop for ApiServerHandle {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl ApiServerHandle {
    /// `https://127.0.0.1:<port>` (or `http://` with plain HTTP).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token of user `admin`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// PEM of the CA that signed the serving certificate (`None` with plain HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A kubeconfig (context `sample-controller`, namespace `default`) with the CA data and token.
    ///
    /// Written out directly rather than through a YAML serializer: a test calls this once per
    /// server it starts, and the serializer took about as long as the server's own start.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_text(&self.url, &self.token, self.ca_pem.as_deref())
    }

    /// [`Self::kubeconfig_yaml`] authenticating with another token, e.g. one added with
    /// [`ApiServerBuilder::service_account_token`], to run a client under that identity.
    pub fn kubeconfig_yaml_for_token(&self, token: &str) -> String {
        let mut doc: serde_json::Value =
            serde_yaml_ng::from_str(&self.kubeconfig_yaml()).unwrap_or_default();
        if let Some(user) = doc
            .get_mut("users")
            .and_then(|u| u.get_mut(0))
            .and_then(|u| u.get_mut("user"))
        {
            user["token"] = json!(token);
        }
        serde_yaml_ng::to_string(&doc).unwrap_or_default()
    }

    /// A client certificate for `user` (its common name) in `group` (its organization, if
    /// any), signed by the server's client CA: `(certificate PEM, key PEM)`. `None` with plain
    /// HTTP. (The server authenticates it as that user in that group.)
    pub fn client_certificate(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Option<Result<(String, String), tls::TlsError>> {
        let ca = self.client_ca.as_ref()?;
        Some(ca.issue(user, group.as_slice()))
    }

    /// PEM of the client CA (`None` with plain HTTP).
    pub fn client_ca_pem(&self) -> Option<&str> {
        self.client_ca.as_ref().map(|c| c.ca_pem.as_str())
    }

    /// [`Self::kubeconfig_yaml`] authenticating with a client certificate for `user` in
    /// `group` instead of the token, as the kubeconfigs of kind, k3d or minikube do (theirs is
    /// `kubernetes-admin` in `system:masters`, or `kubeadm:cluster-admins`). `None` with plain
    /// HTTP.
    pub fn kubeconfig_yaml_for_client_cert(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Option<Result<String, tls::TlsError>> {
        use base64::Engine;
        let (cert, key) = match self.client_certificate(user, group)? {
            Ok(pair) => pair,
            Err(e) => return Some(Err(e)),
        };
        let mut doc: serde_json::Value =
            serde_yaml_ng::from_str(&self.kubeconfig_yaml()).unwrap_or_default();
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        doc["users"] = json!([{"name": user, "user": {
            "client-certificate-data": b64(&cert), "client-key-data": b64(&key)}}]);
        doc["contexts"][0]["context"]["user"] = json!(user);
        Some(Ok(serde_yaml_ng::to_string(&doc).unwrap_or_default()))
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path` (mode 0600 on Unix: it holds a token).
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        write_private(path.as_ref(), &self.kubeconfig_yaml())
    }

    /// Counts of the requests served so far.
    pub fn request_log(&self) -> RequestLog {
        self.shared.log.clone()
    }

    /// Maps the Service `namespace/name` to `host:port` from now on, as
    /// [`ApiServerBuilder::service_endpoint`] does before the start: a webhook server started
    /// after the API server, on port 0, is wired in once it knows its port (the demo's manager
    /// does this). Calls already under way keep the address they dialled.
    pub fn set_service_endpoint(&self, namespace_name: &str, host_port: &str) {
        self.shared
            .backend
            .webhooks
            .clients
            .set_endpoint(namespace_name, host_port);
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }

    /// The store itself, for the project's own tests and benchmarks that seed or inspect it
    /// directly (the `unstable-internals` feature; not part of the API).
    #[cfg(feature = "unstable-internals")]
    #[doc(hidden)]
    pub fn store(&self) -> Arc<Store> {
        self.shared.store.clone()
    }

    /// Drops the whole watch history: watches and exact lists from older revisions now get 410.
    pub fn compact(&self) {
        self.shared.store.write(|s| s.compact());
    }

    /// A [`loopback::Loopback`] for an in-process component acting as `user` in `groups` (plus
    /// the groups the user's name implies and `system:authenticated`), whose writes are
    /// recorded under the field manager `field_manager`: how the simulated controller manager
    /// and node reach this server (see [`loopback`]).
    pub fn loopback(&self, user: &str, groups: &[&str], field_manager: &str) -> loopback::Loopback {
        loopback::Loopback::new(self.shared.clone(), user, groups, field_manager)
    }

    /// Registers the kubelet of `node`: the server hands it the logs, exec, attach and
    /// port-forward requests of the pods bound to that node ([`kubelet`]).
    pub fn register_kubelet(&self, node: &str, kubelet: Arc<dyn kubelet::Kubelet>) {
        self.shared.kubelets.register(node, kubelet);
    }

    /// Forgets the kubelet of `node` (its pods' logs and streams then fail as for an
    /// unreachable node).
    pub fn unregister_kubelet(&self, node: &str) {
        self.shared.kubelets.unregister(node);
    }

    /// Cancelled when the server shuts down: components started beside it stop with it.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shared.shutdown.clone()
    }

    /// The task tracker of the server: components that should stop with it and be waited for
    /// by [`ApiServerHandle::shutdown`] spawn their tasks here.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Fault injection: drop watches, compact, fail or delay requests, force conflicts
    /// ([`faults`]).
    pub fn faults(&self) -> &faults::Faults {
        &self.shared.faults
    }

    /// Creates (or replaces) every object of a multi-document YAML string, in-process and
    /// without authorization: RBAC objects, service accounts, namespaces, CRDs, ...
    /// Returns `Kind/name` of each object.
    pub fn load_manifests(
        &self,
        yaml: &str,
    ) -> Result<Vec<String>, crate::server::manifests::ManifestError> {
        crate::server::manifests::load_manifests(&self.shared.store, yaml, "<string>")
    }

    /// [`Self::load_manifests`] for a YAML file or every YAML file of a directory (such as
    /// `artifacts/deploy/base/`; `kustomization.yaml` is skipped).
    pub fn load_manifest_path(
        &self,
        path: impl AsRef<Path>,
    ) -> Result<Vec<String>, crate::server::manifests::ManifestError> {
        crate::server::manifests::load_manifest_path(&self.shared.store, path.as_ref())
    }

    /// Stops accepting, ends every watch and connection, and waits for them.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// The kubeconfig reads back as the document it stands for, whatever the token holds.
    #[test]
    fn the_kubeconfig_reads_back_as_its_document() {
        use base64::Engine;
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        for (url, token, ca_pem) in [
            (
                "https://127.0.0.1:40123",
                "Ab3xYz09Ab3xYz09Ab3xYz09Ab3xYz09",
                Some(ca),
            ),
            ("http://[::1]:8080", "12345", None),
            ("https://localhost:6443", "true", Some(ca)),
            (
                "https://localhost:6443",
                "a: b #c \"d\" 'e' \\ é\n",
                Some(ca),
            ),
            ("https://localhost:6443", "", None),
            ("https://localhost:6443", "0x1f", None),
            ("https://localhost:6443", "1e5", None),
            ("https://localhost:6443", "1:20", None),
            ("https://localhost:6443", "0o17abc", None),
            ("https://localhost:6443", "9abcdefghij0123456789", None),
        ] {
            let text = super::kubeconfig_text(url, token, ca_pem);
            let read: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
            let mut cluster = json!({"server": url});
            if let Some(ca) = ca_pem {
                cluster["certificate-authority-data"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(ca));
            }
            let want = json!({
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sample-controller", "cluster": cluster}],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "sample-controller",
                              "context": {"cluster": "sample-controller", "user": "admin", "namespace": "default"}}],
                "current-context": "sample-controller",
                "preferences": {},
            });
            assert_eq!(read, want, "{text}");
        }
        // What scripts cut out of the file: a random token and the URL stand plain on their lines.
        let text = super::kubeconfig_text("https://127.0.0.1:1", "9abc0def", None);
        assert!(text.contains("\n    token: 9abc0def\n"), "{text}");
        assert!(
            text.contains("\n    server: https://127.0.0.1:1\n"),
            "{text}"
        );
    }
}
