//! The informer: a controller's cached view of the resources it follows.
//!
//! ## What an informer does in Kubernetes
//!
//! A kube-controller-manager controller never asks the API server "what are my pods?" while it
//! works. Its informers (client-go's `Reflector` feeding a `ThreadSafeStore`, shared through a
//! `SharedInformerFactory`) **list** each resource once, keep the objects in a local cache
//! (the *indexer*, read through *listers*), then **watch** from the list's resourceVersion so
//! every later change is applied to the cache and handed to the controller's event handlers,
//! which put keys on its work queue. When the watch answers `410 Gone` (the server's history no
//! longer reaches back to the informer's revision) the reflector lists again and replaces the
//! cache: a *relist*, after which the controller re-examines everything.
//!
//! ## This crate's informer
//!
//! [`Informer`] does the same over the loopback interface ([`Loopback::list`],
//! [`Loopback::watch`]) for a handful of resources at once (a controller's whole view: the Job
//! controller's Jobs and pods, the CronJob controller's CronJobs and Jobs), keyed
//! `(namespace, name)`, with one index — the objects each owner *controls* (the
//! `ownerReferences` entry with `controller: true`), which is what every workload controller
//! asks (`controlled_by`). A [`Kind`] may carry a filter that keeps only the objects the
//! controller cares about (the root CA publisher follows one ConfigMap name per namespace, as
//! the real one's field selector does).
//!
//! [`Informer::next`] waits for changes and hands them over after applying them; on
//! [`WatchError::Gone`] it relists that resource and reports [`Update::Relisted`].
//!
//! ## Where it departs from client-go
//!
//! One informer per controller rather than one shared per resource (the objects themselves are
//! shared: an [`Object`] is the server's own stored object, not a copy). And the cache is
//! brought up to date *before every sync* ([`Informer::catch_up`]): the loopback watch reads
//! the server's history in process, so a controller's own write is in its cache the moment the
//! write returns. That is what client-go's *expectations* (`ControllerExpectations`: "I created
//! 3 pods, wait until the informer saw them before counting again") exist to approximate; here
//! a controller never counts a stale cache, so it needs none.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{
    EventType, ListParams, Loopback, Object, Resource, Watch, WatchError, WatchEvent,
};
use serde_json::Value;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// The key of an object.
pub fn key_of(obj: &Value) -> Key {
    (
        meta_str(obj, "namespace").to_owned(),
        meta_str(obj, "name").to_owned(),
    )
}

/// `metadata.<field>` as a string (empty when absent).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// Whether the object has a `deletionTimestamp`.
pub fn is_deleting(obj: &Value) -> bool {
    !meta_str(obj, "deletionTimestamp").is_empty()
}

/// The `ownerReferences` entry with `controller: true`, if any.
pub fn controller_ref_of(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
}

/// One resource an [`Informer`] follows, and which of its objects it keeps.
pub struct Kind {
    resource: Resource,
    filter: Option<fn(&Value) -> bool>,
    watch: Option<Watch>,
    cache: BTreeMap<Key, Object>,
    /// controller uid → keys of the objects it controls.
    controlled: HashMap<String, BTreeSet<Key>>,
}

impl Kind {
    /// Every object of `resource`.
    pub fn all(resource: Resource) -> Self {
        Kind {
            resource,
            filter: None,
            watch: None,
            cache: BTreeMap::new(),
            controlled: HashMap::new(),
        }
    }

    /// Only the objects of `resource` that `keep` accepts.
    pub fn only(resource: Resource, keep: fn(&Value) -> bool) -> Self {
        Kind {
            filter: Some(keep),
            ..Kind::all(resource)
        }
    }

    fn keeps(&self, obj: &Value) -> bool {
        self.filter.is_none_or(|f| f(obj))
    }

    fn insert(&mut self, obj: Object) {
        let key = key_of(&obj);
        self.remove(&key);
        if let Some(uid) = controller_ref_of(&obj).and_then(|r| r["uid"].as_str()) {
            self.controlled
                .entry(uid.to_owned())
                .or_default()
                .insert(key.clone());
        }
        self.cache.insert(key, obj);
    }

    fn remove(&mut self, key: &Key) {
        let Some(old) = self.cache.remove(key) else {
            return;
        };
        if let Some(uid) = controller_ref_of(&old).and_then(|r| r["uid"].as_str())
            && let Some(set) = self.controlled.get_mut(uid)
        {
            set.remove(key);
            if set.is_empty() {
                self.controlled.remove(uid);
            }
        }
    }

    /// Applies one watch event to the cache; whether the controller should hear of it.
    fn apply(&mut self, ev: &WatchEvent) -> bool {
        let key = key_of(&ev.object);
        let was_kept = self.cache.contains_key(&key);
        match ev.kind {
            EventType::Deleted => {
                self.remove(&key);
                was_kept
            }
            EventType::Added | EventType::Modified => {
                if self.keeps(&ev.object) {
                    self.insert(ev.object.clone());
                    true
                } else {
                    self.remove(&key);
                    was_kept
                }
            }
        }
    }
}

/// What [`Informer::next`] and [`Informer::catch_up`] report.
#[derive(Debug)]
pub enum Update {
    /// Changes, already applied to the cache, oldest first.
    Events(Vec<WatchEvent>),
    /// The history was compacted past a watch: its resource was listed again and the cache
    /// replaced; look at everything again.
    Relisted,
}

/// A list-then-watch cache of a few resources (see the module docs).
pub struct Informer {
    lb: Loopback,
    kinds: Vec<Kind>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resources: Vec<String> = self.kinds.iter().map(|k| k.resource.to_string()).collect();
        f.debug_struct("Informer")
            .field("resources", &resources)
            .finish_non_exhaustive()
    }
}

/// Longest wait between two attempts to list a resource that failed.
const MAX_LIST_BACKOFF: Duration = Duration::from_secs(30);

impl Informer {
    /// An informer of `kinds`, acting as `lb`'s user. Nothing is listed before [`Self::start`].
    pub fn new(lb: Loopback, kinds: Vec<Kind>) -> Self {
        Informer { lb, kinds }
    }

    /// Lists every resource and starts its watch, retrying a list that fails (a resource
    /// forbidden to the user, say) with a growing back-off; `false` once the server shuts
    /// down first.
    pub async fn start(&mut self) -> bool {
        let shutdown = self.lb.shutdown();
        for i in 0..self.kinds.len() {
            let mut backoff = Duration::from_millis(100);
            loop {
                match self.relist(i).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(resource = %self.kinds[i].resource, error = %e.message, "listing failed; retrying");
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => return false,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_LIST_BACKOFF);
            }
        }
        true
    }

    /// Lists kind `i` again, replaces its cache and watches from the list's revision.
    async fn relist(&mut self, i: usize) -> Result<(), ApiError> {
        let resource = self.kinds[i].resource.clone();
        let list = self
            .lb
            .list(&resource, None, &ListParams::default())
            .await?;
        let watch = self.lb.watch(&resource, None, list.resource_version)?;
        let kind = &mut self.kinds[i];
        kind.cache.clear();
        kind.controlled.clear();
        for obj in list.items {
            if kind.keeps(&obj) {
                kind.insert(obj);
            }
        }
        kind.watch = Some(watch);
        Ok(())
    }

    /// Relists kind `i` until it succeeds or the server shuts down (`false`).
    async fn relist_retrying(&mut self, i: usize) -> bool {
        let shutdown = self.lb.shutdown();
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.relist(i).await {
                Ok(()) => return true,
                Err(e) => {
                    tracing::warn!(resource = %self.kinds[i].resource, error = %e.message, "relisting failed; retrying");
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_LIST_BACKOFF);
        }
    }

    /// Waits for changes of any followed resource and applies them; `None` once the server
    /// shuts down.
    pub async fn next(&mut self) -> Option<Update> {
        loop {
            match self.catch_up_or_gone() {
                Ok(events) if !events.is_empty() => return Some(Update::Events(events)),
                Ok(_) => {}
                Err(Some(i)) => {
                    return self.relist_retrying(i).await.then_some(Update::Relisted);
                }
                Err(None) => return None,
            }
            // Wait until one of the watches has something (a watch's `next` is cancel-safe:
            // it hands events over only when it returns them).
            let (i, result) = {
                let mut pending: Vec<WatchFuture<'_>> = self
                    .kinds
                    .iter_mut()
                    .filter_map(|k| k.watch.as_mut())
                    .map(|w| Box::pin(w.next()) as WatchFuture<'_>)
                    .collect();
                if pending.is_empty() {
                    return None;
                }
                std::future::poll_fn(|cx| {
                    for (i, f) in pending.iter_mut().enumerate() {
                        if let Poll::Ready(r) = f.as_mut().poll(cx) {
                            return Poll::Ready((i, r));
                        }
                    }
                    Poll::Pending
                })
                .await
            };
            match result {
                Ok(events) => {
                    let kind = &mut self.kinds[i];
                    let mut heard: Vec<WatchEvent> =
                        events.into_iter().filter(|ev| kind.apply(ev)).collect();
                    match self.catch_up_or_gone() {
                        Ok(more) => heard.extend(more),
                        Err(Some(j)) => {
                            return self.relist_retrying(j).await.then_some(Update::Relisted);
                        }
                        Err(None) => return None,
                    }
                    if !heard.is_empty() {
                        return Some(Update::Events(heard));
                    }
                }
                Err(WatchError::Gone(_)) => {
                    return self.relist_retrying(i).await.then_some(Update::Relisted);
                }
                Err(WatchError::Closed) => return None,
            }
        }
    }

    /// Applies every change written so far, without waiting (see the module docs: a
    /// controller calls it before each sync). `None` when there was nothing.
    pub async fn catch_up(&mut self) -> Option<Update> {
        match self.catch_up_or_gone() {
            Ok(events) if events.is_empty() => None,
            Ok(events) => Some(Update::Events(events)),
            Err(Some(i)) => self.relist_retrying(i).await.then_some(Update::Relisted),
            Err(None) => None,
        }
    }

    /// Polls every watch once: the events heard, or the index of a watch that is gone (`None`:
    /// closed).
    fn catch_up_or_gone(&mut self) -> Result<Vec<WatchEvent>, Option<usize>> {
        let mut heard = vec![];
        for (i, kind) in self.kinds.iter_mut().enumerate() {
            let Some(watch) = kind.watch.as_mut() else {
                continue;
            };
            match watch.poll() {
                Ok(events) => heard.extend(events.into_iter().filter(|ev| kind.apply(ev))),
                Err(WatchError::Gone(_)) => return Err(Some(i)),
                Err(WatchError::Closed) => return Err(None),
            }
        }
        heard.sort_by_key(|ev| ev.resource_version);
        Ok(heard)
    }

    fn kind(&self, resource: &Resource) -> Option<&Kind> {
        self.kinds.iter().find(|k| &k.resource == resource)
    }

    /// The cached object `namespace/name` of `resource`.
    pub fn get(&self, resource: &Resource, namespace: &str, name: &str) -> Option<&Object> {
        self.kind(resource)?
            .cache
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Every cached object of `resource`, in key order.
    pub fn list(&self, resource: &Resource) -> impl Iterator<Item = &Object> {
        self.kind(resource)
            .into_iter()
            .flat_map(|k| k.cache.values())
    }

    /// The cached objects of `resource` in `namespace`, in name order.
    pub fn list_namespace<'a>(
        &'a self,
        resource: &Resource,
        namespace: &str,
    ) -> impl Iterator<Item = &'a Object> + use<'a> {
        let start = (namespace.to_owned(), String::new());
        let ns = namespace.to_owned();
        self.kind(resource).into_iter().flat_map(move |k| {
            let ns = ns.clone();
            k.cache
                .range(start.clone()..)
                .take_while(move |((n, _), _)| *n == ns)
                .map(|(_, o)| o)
        })
    }

    /// The cached objects of `resource` whose controller reference has `uid`, in key order.
    pub fn controlled_by(&self, resource: &Resource, uid: &str) -> Vec<&Object> {
        let Some(kind) = self.kind(resource) else {
            return vec![];
        };
        kind.controlled
            .get(uid)
            .map(|keys| keys.iter().filter_map(|k| kind.cache.get(k)).collect())
            .unwrap_or_default()
    }
}

type WatchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<WatchEvent>, WatchError>> + Send + 'a>>;
