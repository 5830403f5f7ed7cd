//! The objects a new cluster starts with, and the ServiceAccount controller.
//!
//! kube-apiserver's post-start hooks and kube-controller-manager create these; test suites
//! written for real clusters expect them:
//!
//! * the **`kubernetes` Service** in `default` (the `kubernetesservice` bootstrap controller):
//!   port 443 `https`, target port the server's own, cluster IP `10.96.0.1`
//!   (`registry::core::services::kubernetes_service` in the API server), seeded in `ClusterBuilder::start` (crate `embedded-cluster`);
//! * the **bootstrap RBAC policy** (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, written by
//!   the `rbac/bootstrap-roles` post-start hook): the user-facing ClusterRoles `cluster-admin`,
//!   `admin`, `edit` and `view` (the last three aggregated from `system:aggregate-to-*`, whose
//!   rules are filled in as the aggregation controller fills them), the discovery roles
//!   `system:discovery`, `system:basic-user`, `system:public-info-viewer` and
//!   `system:monitoring`, and their ClusterRoleBindings (`cluster-admin` to `system:masters`,
//!   the discovery ones to `system:authenticated` and, for public info, `system:unauthenticated`).
//!   Every one carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//!   `rbac.authorization.kubernetes.io/autoupdate: "true"`. Like the hook, a start creates the
//!   missing ones and leaves existing ones alone (their rules are not re-reconciled). The
//!   `system:controller:*` roles of kube-controller-manager's own controllers and the node and
//!   kube-proxy roles are not created: no such component talks to this server. The rules are
//!   those of the real policy restricted to nothing: they name resources this server does not
//!   serve (cronjobs, ingresses, ...) exactly as the real ones do;
//! * a **`default` ServiceAccount** in every namespace ([`spawn_service_accounts`]; the
//!   `serviceaccount-controller` of kube-controller-manager), created when the namespace
//!   appears and again if it is deleted, never in a namespace being deleted, and the
//!   **`kube-root-ca.crt` ConfigMap** (the `root-ca-cert-publisher`) holding the server's CA
//!   (`ca.crt`) when it serves HTTPS, kept at that content. The ServiceAccount controller is on
//!   by default; the publisher is on in the standalone server and opt-in for the library
//!   (`ClusterBuilder::root_ca_publisher` (crate `embedded-cluster`)), so that a test's ConfigMaps are its own.

use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::background::{Batch, ChangeFeed};
use embedded_apiserver::meta;
use embedded_apiserver::store::{State, Store};

/// The ServiceAccount controller and the root CA publisher (see the module docs).
pub fn spawn_service_accounts(
    store: Arc<Store>,
    service_accounts: bool,
    ca_pem: Option<String>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) {
    tracker.spawn(async move {
        let mut feed = ChangeFeed::new(store.clone());
        reconcile_all(&store, service_accounts, ca_pem.as_deref());
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = feed.changed() => {}
            }
            loop {
                let namespaces: Vec<String> = match feed.poll() {
                    Batch::Changes(changes) if changes.is_empty() => break,
                    Batch::Changes(changes) => changes
                        .iter()
                        .filter(|c| {
                            matches!(
                                c.storage.as_str(),
                                "core/namespaces" | "core/serviceaccounts" | "core/configmaps"
                            )
                        })
                        .map(|c| {
                            if c.storage == "core/namespaces" {
                                meta::meta_str(&c.object, "name").to_owned()
                            } else {
                                meta::meta_str(&c.object, "namespace").to_owned()
                            }
                        })
                        .collect(),
                    Batch::Resync => {
                        reconcile_all(&store, service_accounts, ca_pem.as_deref());
                        continue;
                    }
                };
                if !namespaces.is_empty() {
                    store.write(|st| {
                        for ns in dedup(namespaces) {
                            reconcile(st, &ns, service_accounts, ca_pem.as_deref());
                        }
                    });
                }
                tokio::task::yield_now().await;
            }
        }
    });
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}

fn reconcile_all(store: &Store, service_accounts: bool, ca_pem: Option<&str>) {
    store.write(|st| {
        let namespaces: Vec<String> = st
            .list("core/namespaces", None)
            .iter()
            .map(|n| meta::meta_str(n, "name").to_owned())
            .collect();
        for ns in namespaces {
            reconcile(st, &ns, service_accounts, ca_pem);
        }
    });
}

/// Creates the namespace's `default` ServiceAccount and `kube-root-ca.crt` ConfigMap when they
/// are missing (and puts the CA back into the ConfigMap when it differs), unless the
/// namespace is gone or terminating.
fn reconcile(st: &mut State, ns: &str, service_accounts: bool, ca_pem: Option<&str>) {
    let Some(namespace) = st.get("core/namespaces", "", ns) else {
        return;
    };
    if !meta::meta_str(namespace, "deletionTimestamp").is_empty() {
        return;
    }
    if service_accounts && st.get("core/serviceaccounts", ns, "default").is_none() {
        st.create(
            "core/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": ns, "uid": meta::new_uid(),
                                "creationTimestamp": meta::now_time()}}),
        );
    }
    let Some(ca) = ca_pem else {
        return;
    };
    let data = json!({"ca.crt": ca});
    match st.get("core/configmaps", ns, "kube-root-ca.crt") {
        Some(cm) if cm["data"] == data => {}
        Some(cm) => {
            let mut cm = cm.clone();
            cm["data"] = data;
            st.update("core/configmaps", cm);
        }
        None => {
            st.create(
                "core/configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                                    "uid": meta::new_uid(), "creationTimestamp": meta::now_time(),
                                    "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                       "data": data}),
            );
        }
    }
}

/// The annotation the root CA publisher puts on `kube-root-ca.crt`.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
