//! The ServiceAccount controller and the root CA publisher.
//!
//! ## What they do in a real cluster
//!
//! Two small controllers of kube-controller-manager give every namespace what a pod in it
//! expects to find:
//!
//! * the **ServiceAccount controller** (`serviceaccount-controller`,
//!   `pkg/controller/serviceaccount/serviceaccounts_controller.go`) creates the `default`
//!   ServiceAccount in every namespace when the namespace appears, and again when someone
//!   deletes it, but never in a namespace that is being deleted;
//! * the **root CA publisher** (`root-ca-cert-publisher`, `pkg/controller/certificates/rootcacertpublisher`)
//!   keeps a ConfigMap `kube-root-ca.crt` in every namespace whose `ca.crt` is the cluster's
//!   CA bundle (and the annotation `kubernetes.io/description`), putting the content back when
//!   it is changed and the ConfigMap back when it is deleted.
//!
//! ## Here
//!
//! [`ServiceAccountsController`] is both, on the crate's worker loop ([`crate::worker`]), keyed
//! by namespace: its informer follows Namespaces, the `default` ServiceAccounts and (with the
//! publisher on) the `kube-root-ca.crt` ConfigMaps — only those names, as the real
//! controllers' field selectors do. The ServiceAccount controller is on by default; the
//! publisher is on in the standalone server and opt-in for the library
//! (`ClusterBuilder::root_ca_publisher` (crate `embedded-cluster`)), so that a test's ConfigMaps
//! are its own, and has nothing to publish when the server serves plain HTTP (no CA).

use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Resource, WatchEvent};
use serde_json::{Value, json};

use crate::informer::{Informer, Kind, is_deleting, meta_str};
use crate::worker::Controller;

/// The ConfigMap the root CA publisher keeps in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// The annotation the root CA publisher puts on `kube-root-ca.crt`.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

fn namespaces() -> Resource {
    Resource::core("namespaces")
}

fn service_accounts() -> Resource {
    Resource::core("serviceaccounts")
}

fn configmaps() -> Resource {
    Resource::core("configmaps")
}

/// The ServiceAccount controller and the root CA publisher (see the module docs).
#[derive(Debug)]
pub struct ServiceAccountsController {
    lb: Loopback,
    service_accounts: bool,
    ca_pem: Option<String>,
}

impl ServiceAccountsController {
    /// Creates `default` ServiceAccounts when `service_accounts`, publishes `ca_pem` when
    /// `Some`, writing through `lb`.
    pub fn new(lb: Loopback, service_accounts: bool, ca_pem: Option<String>) -> Self {
        ServiceAccountsController {
            lb,
            service_accounts,
            ca_pem,
        }
    }
}

fn default_sa(o: &Value) -> bool {
    meta_str(o, "name") == "default"
}

fn root_ca(o: &Value) -> bool {
    meta_str(o, "name") == ROOT_CA_CONFIGMAP
}

impl Controller for ServiceAccountsController {
    /// A namespace's name.
    type Key = String;

    fn name(&self) -> &'static str {
        "serviceaccount-controller"
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = vec![Kind::all(namespaces())];
        if self.service_accounts {
            kinds.push(Kind::only(service_accounts(), default_sa));
        }
        if self.ca_pem.is_some() {
            kinds.push(Kind::only(configmaps(), root_ca));
        }
        kinds
    }

    fn keys_for(&self, ev: &WatchEvent, _: &Informer) -> Vec<String> {
        let field = if ev.resource == namespaces() {
            "name"
        } else {
            "namespace"
        };
        vec![meta_str(&ev.object, field).to_owned()]
    }

    fn all_keys(&self, cache: &Informer) -> Vec<String> {
        cache
            .list(&namespaces())
            .map(|n| meta_str(n, "name").to_owned())
            .collect()
    }

    async fn sync(&mut self, ns: &String, cache: &Informer) -> Result<Option<Duration>, ApiError> {
        let Some(namespace) = cache.get(&namespaces(), "", ns) else {
            return Ok(None);
        };
        if is_deleting(namespace) {
            return Ok(None);
        }
        if self.service_accounts && cache.get(&service_accounts(), ns, "default").is_none() {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "default", "namespace": ns}});
            created(self.lb.create(&service_accounts(), ns, sa).await)?;
        }
        let Some(ca) = self.ca_pem.as_deref() else {
            return Ok(None);
        };
        let data = json!({"ca.crt": ca});
        match cache.get(&configmaps(), ns, ROOT_CA_CONFIGMAP) {
            Some(cm) if cm["data"] == data => {}
            Some(cm) => {
                let mut cm = cm.to_value();
                cm["data"] = data;
                self.lb.update(&configmaps(), ns, cm).await?;
            }
            None => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns,
                                 "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                    "data": data});
                created(self.lb.create(&configmaps(), ns, cm).await)?;
            }
        }
        Ok(None)
    }
}

/// A create's outcome, where finding the object there already is success (another writer
/// was first; the informer brings it before the next sync), and so is a namespace that
/// started terminating meanwhile (403 from the namespace lifecycle admission: nothing is to be
/// created there any more).
fn created(result: Result<Value, ApiError>) -> Result<(), ApiError> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) if e.code == 403 && e.message.contains("terminat") => Ok(()),
        Err(e) => Err(e),
    }
}
