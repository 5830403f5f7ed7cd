//! # How the node reaches the API server: as `system:node:<name>`, through the loopback interface
//!
//! A kubelet is a client of kube-apiserver like any other. It authenticates as
//! `system:node:<node-name>` in the group `system:nodes` (the `system:node` ClusterRole of the
//! bootstrap policy says what it may do), and everything it knows of the cluster it learns
//! through the API:
//!
//! * **its pods**: an informer over `pods` with the field selector `spec.nodeName=<node>`
//!   (`pkg/kubelet/config/apiserver.go`): a LIST, then a WATCH from the list's
//!   resourceVersion, and on `410 Gone` a LIST again, replacing what it knew;
//! * **what it reports**: each pod's `status` through `pods/NAME/status`
//!   (`pkg/kubelet/status/status_manager.go`), a conditional write on the `resourceVersion`
//!   it read, read again and redone on `409 Conflict`; the final deletion of a pod it has
//!   stopped (DELETE with grace period 0 and the pod's uid as precondition); the `Node` object
//!   it registers (`pkg/kubelet/kubelet_node_status.go`), its heartbeat Lease in
//!   `kube-node-lease` (`pkg/kubelet/nodelease`) and Events about its pods;
//! * **what its pods use**: the ConfigMaps and Secrets of their volumes, by GET.
//!
//! The embedded node does the same over [`embedded_apiserver::loopback::Loopback`] (the API's
//! verbs in process, through authorization and admission), made by [`NodeApi::new`] for
//! [`node_user`] in [`NODES_GROUP`]. [`PodInformer`] is the pod informer, [`NodeApi`] the writes.
//!
//! ## Where it departs from a kubelet
//!
//! The embedded node also stands in for the **scheduler**: it binds every pod that has no
//! `spec.nodeName` to itself, through the `pods/NAME/binding` subresource (the scheduler's
//! write; the bootstrap `system:node` role of this server grants it). So its informer follows
//! the pods bound to it *and* the pods bound to no node; a watch over the loopback interface
//! has no field selector, so the informer drops the others as they arrive. The node's heartbeat
//! is its Lease ([`crate::nodelease`], renewed every 10 s); its Node's `status` is written once,
//! at registration, and never refreshed: the embedded node is always `Ready`, and nothing in
//! the embedded cluster judges a node by its heartbeat.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::ApiServerHandle;
use embedded_apiserver::loopback::{
    DeleteParams, EventType, ListParams, Loopback, Object, Resource, Watch, WatchError,
};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A pod's `(namespace, name)`.
pub type Key = (String, String);

/// The group every node's user is in (kube's `system:nodes`).
pub const NODES_GROUP: &str = "system:nodes";

/// The field manager of the node's writes (the kubelet's user agent).
const FIELD_MANAGER: &str = "kubelet";

/// How long the informer waits before listing again after a LIST failed.
const RELIST_RETRY: Duration = Duration::from_secs(1);

/// The user a node's kubelet acts as: `system:node:<node>`.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// The `(namespace, name)` of an object.
pub fn key_of(obj: &Value) -> Key {
    (
        meta_str(obj, "namespace").to_owned(),
        meta_str(obj, "name").to_owned(),
    )
}

/// `metadata.<field>` as a string (`""` when absent).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

fn pods() -> Resource {
    Resource::core("pods")
}

/// The node's client: the loopback interface as [`node_user`] (see the module docs). Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct NodeApi {
    lb: Loopback,
    node: String,
    /// Whether [`NodeApi::register_node`] has run (the node lease waits for it).
    registered: Arc<watch::Sender<bool>>,
}

impl NodeApi {
    /// The client of the node `node` on `server`: user `system:node:<node>`, group
    /// `system:nodes`, field manager `kubelet`.
    pub fn new(server: &ApiServerHandle, node: &str) -> Self {
        NodeApi {
            lb: server.loopback(&node_user(node), &[NODES_GROUP], FIELD_MANAGER),
            node: node.to_owned(),
            registered: Arc::new(watch::Sender::new(false)),
        }
    }

    /// The loopback interface underneath.
    pub fn loopback(&self) -> &Loopback {
        &self.lb
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// GET of the pod `key` if it still has `uid` (`None` when it is gone or replaced; other
    /// errors are logged and read as gone).
    pub async fn pod(&self, key: &Key, uid: &str) -> Option<Value> {
        match self.lb.get(&pods(), &key.0, &key.1).await {
            Ok(p) if meta_str(&p, "uid") == uid => Some(p),
            Ok(_) => None,
            Err(e) => {
                if !e.is_not_found() {
                    tracing::warn!(namespace = %key.0, pod = %key.1, error = %e.message, "reading a pod failed");
                }
                None
            }
        }
    }

    /// GET of any object (`None` when not found; other errors are answered).
    pub async fn get(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        match self.lb.get(resource, namespace, name).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Rewrites the status of the pod `key` (with `uid`) the way a kubelet's status manager
    /// does: `change` edits a copy of the pod (starting from `cached` when given, else from a
    /// GET) and answers `None` to write nothing; the copy is written to `pods/NAME/status`,
    /// conditional on its `resourceVersion`, and on `409 Conflict` the pod is read again and
    /// `change` runs again. Answers what `change` answered and the pod as written; `None`
    /// when nothing was written (the pod is gone or replaced, `change` declined, or the write
    /// failed otherwise, which is logged).
    pub async fn update_pod_status<R>(
        &self,
        key: &Key,
        uid: &str,
        cached: Option<Value>,
        mut change: impl FnMut(&mut Value) -> Option<R>,
    ) -> Option<(R, Value)> {
        let mut cached = cached.filter(|p| meta_str(p, "uid") == uid);
        loop {
            let mut pod = match cached.take() {
                Some(p) => p,
                None => self.pod(key, uid).await?,
            };
            let answer = change(&mut pod)?;
            match self.lb.update_status(&pods(), &key.0, pod).await {
                Ok(written) => return Some((answer, written)),
                Err(e) if e.is_conflict() => {
                    tracing::trace!(namespace = %key.0, pod = %key.1, "pod status conflict; reading it again");
                }
                Err(e) => {
                    if !e.is_not_found() {
                        tracing::warn!(namespace = %key.0, pod = %key.1, error = %e.message, "writing a pod's status failed");
                    }
                    return None;
                }
            }
        }
    }

    /// The scheduler's write: binds the pod `key` (with `uid`) to this node through
    /// `pods/NAME/binding`. `false` when it was not bound (already bound, being deleted,
    /// gone or replaced).
    pub async fn bind(&self, key: &Key, uid: &str) -> bool {
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": key.1, "namespace": key.0, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        });
        match self
            .lb
            .create_subresource(&pods(), &key.0, &key.1, "binding", binding)
            .await
        {
            Ok(_) => true,
            Err(e) => {
                if !e.is_not_found() && !e.is_conflict() {
                    tracing::warn!(namespace = %key.0, pod = %key.1, error = %e.message, "binding a pod failed");
                }
                false
            }
        }
    }

    /// A token of the ServiceAccount `name` in `namespace` for the pod `pod` (with `uid`),
    /// valid `seconds`: a TokenRequest bound to the pod, as the kubelet's token manager asks
    /// for a projected `serviceAccountToken` volume. `Ok(None)` when the ServiceAccount does
    /// not exist.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        pod: &str,
        uid: &str,
        seconds: u64,
    ) -> Result<Option<String>, ApiError> {
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        });
        match self
            .lb
            .create_subresource(
                &Resource::core("serviceaccounts"),
                namespace,
                name,
                "token",
                request,
            )
            .await
        {
            Ok(answer) => Ok(answer["status"]["token"].as_str().map(str::to_owned)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Finishes the graceful deletion of the pod `key` (if it still has `uid`): DELETE with
    /// grace period 0 and the uid as precondition, as a kubelet does once the pod's containers
    /// have stopped. A pod already at grace period 0 and held by finalizers is left alone.
    pub async fn finish_deletion(&self, key: &Key, uid: &str) {
        let Some(pod) = self.pod(key, uid).await else {
            return;
        };
        if pod["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0) {
            return;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            uid: Some(uid.to_owned()),
            ..Default::default()
        };
        if let Err(e) = self.lb.delete(&pods(), &key.0, &key.1, &params).await
            && !e.is_not_found()
            && !e.is_conflict()
        {
            tracing::debug!(namespace = %key.0, pod = %key.1, error = %e.message, "finishing pod deletion failed");
        }
    }

    /// Registers the Node object `node` (a complete `v1` Node, status included, as a kubelet
    /// registers itself); a Node of that name that exists already is kept. Once it has been
    /// tried, [`NodeApi::registered`] returns.
    pub async fn register_node(&self, node: Value) {
        match self.lb.create(&Resource::core("nodes"), "", node).await {
            Ok(_) => tracing::debug!(node = %self.node, "node registered"),
            Err(e) if e.code == 409 => {}
            Err(e) => {
                tracing::warn!(node = %self.node, error = %e.message, "registering the node failed");
            }
        }
        self.registered.send_replace(true);
    }

    /// Returns once this client has tried to register its Node ([`NodeApi::register_node`]).
    pub async fn registered(&self) {
        let mut rx = self.registered.subscribe();
        // The sender lives as long as `self`, so the wait ends only when the flag is set.
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Creates a core/v1 Event (errors are logged: an event is best effort, as the kubelet's
    /// recorder's are).
    pub async fn create_event(&self, namespace: &str, event: Value) {
        if let Err(e) = self
            .lb
            .create(&Resource::core("events"), namespace, event)
            .await
        {
            tracing::debug!(namespace, error = %e.message, "recording an event failed");
        }
    }
}

/// A pod as the informer holds it: shared with the server's store (from a LIST or WATCH) or the
/// answer to one of the node's own writes.
#[derive(Clone, Debug)]
enum Cached {
    Shared(Object),
    Written(Value),
}

impl Cached {
    fn value(&self) -> &Value {
        match self {
            Cached::Shared(o) => o,
            Cached::Written(v) => v,
        }
    }
}

fn rv_of(pod: &Value) -> u64 {
    meta_str(pod, "resourceVersion").parse().unwrap_or(0)
}

/// The node's pod informer (see the module docs): the pods bound to this node or to none, kept
/// by LIST and WATCH.
#[derive(Debug)]
pub struct PodInformer {
    api: NodeApi,
    watch: Option<Watch>,
    pods: HashMap<Key, Cached>,
}

impl PodInformer {
    /// An informer that has listed nothing yet: [`PodInformer::next`] lists first.
    pub fn new(api: NodeApi) -> Self {
        PodInformer {
            api,
            watch: None,
            pods: HashMap::new(),
        }
    }

    fn relevant(&self, pod: &Value) -> bool {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        node.is_empty() || node == self.api.node
    }

    /// The pod at `key`, as last seen.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.pods.get(key).map(Cached::value)
    }

    /// An owned copy of the pod at `key` if it has `uid`.
    pub fn current(&self, key: &Key, uid: &str) -> Option<Value> {
        self.get(key).filter(|p| meta_str(p, "uid") == uid).cloned()
    }

    /// How many pods the informer holds.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// The uid of the pod held at `key`.
    pub fn uid_of(&self, key: &Key) -> Option<String> {
        self.get(key).map(|p| meta_str(p, "uid").to_owned())
    }

    /// `(namespace, name, uid)` of every pod held.
    pub fn alive(&self) -> HashSet<(String, String, String)> {
        self.pods
            .iter()
            .map(|((ns, name), p)| {
                (
                    ns.clone(),
                    name.clone(),
                    meta_str(p.value(), "uid").to_owned(),
                )
            })
            .collect()
    }

    /// Takes the answer to one of the node's own writes, unless the informer has seen a newer
    /// version already: the next write of that pod starts from it.
    pub fn observe(&mut self, written: Value) {
        if !self.relevant(&written) {
            return;
        }
        let key = key_of(&written);
        let newer = self
            .pods
            .get(&key)
            .is_none_or(|c| rv_of(c.value()) < rv_of(&written));
        if newer {
            self.pods.insert(key, Cached::Written(written));
        }
    }

    /// LIST, replacing what the informer held, and WATCH from the list's revision. Answers
    /// every key held before or after (each once), for the caller to look at again.
    async fn relist(&mut self) -> Result<Vec<Key>, ApiError> {
        let list = self
            .api
            .lb
            .list(&pods(), None, &ListParams::default())
            .await?;
        let watch = self.api.lb.watch(&pods(), None, list.resource_version)?;
        let mut keys: Vec<Key> = self.pods.keys().cloned().collect();
        self.pods.clear();
        for p in list.items {
            if self.relevant(&p) {
                let key = key_of(&p);
                keys.push(key.clone());
                self.pods.insert(key, Cached::Shared(p));
            }
        }
        keys.sort();
        keys.dedup();
        self.watch = Some(watch);
        Ok(keys)
    }

    /// Waits for the next changes and answers the keys of the pods that changed (each once),
    /// relisting first when there is no watch yet or the watch's history is gone (410). `None`
    /// when the server shuts down. Cancel-safe: nothing is lost when the future is dropped.
    pub async fn next(&mut self) -> Option<Vec<Key>> {
        loop {
            let Some(watch) = self.watch.as_mut() else {
                match self.relist().await {
                    Ok(keys) => return Some(keys),
                    Err(e) => {
                        tracing::warn!(error = %e.message, "listing pods failed; retrying");
                        let shutdown = self.api.lb.shutdown();
                        tokio::select! {
                            () = tokio::time::sleep(RELIST_RETRY) => continue,
                            () = shutdown.cancelled() => return None,
                        }
                    }
                }
            };
            let events = match watch.next().await {
                Ok(events) => events,
                Err(WatchError::Gone(rv)) => {
                    tracing::debug!(rv, "pod watch too old; listing again");
                    self.watch = None;
                    continue;
                }
                Err(WatchError::Closed) => return None,
            };
            let mut keys = vec![];
            let mut seen = HashSet::new();
            for ev in events {
                let key = key_of(&ev.object);
                let held_rv = self.pods.get(&key).map(|c| rv_of(c.value()));
                match ev.kind {
                    EventType::Deleted => {
                        self.pods.remove(&key);
                    }
                    EventType::Added | EventType::Modified if self.relevant(&ev.object) => {
                        // The node's own write may have put a newer version here already.
                        if held_rv.is_none_or(|held| held <= ev.resource_version) {
                            self.pods.insert(key.clone(), Cached::Shared(ev.object));
                        }
                    }
                    EventType::Added | EventType::Modified => {
                        self.pods.remove(&key);
                    }
                }
                if seen.insert(key.clone()) {
                    keys.push(key);
                }
            }
            if !keys.is_empty() {
                return Some(keys);
            }
        }
    }
}
