//! The shared informer factory: one informer per (type, namespace, selectors), process-wide.
//!
//! Several controllers in one process often watch the same type: the At controller and a
//! metrics exporter both want pods. Two informers would mean two list+watch connections and
//! two caches. The factory (client-go's `SharedInformerFactory`) hands out the *same*
//! [`SharedIndexInformer`] to every caller asking for the same [`InformerScope`] and type, so
//! one connection and one cache serve them all.
//!
//! ```text
//!  controller A --informer::<Pod>()--+
//!                                    +--> factory map[(Pod, scope)] --> one informer --> one watch
//!  controller B --informer::<Pod>()--+
//! ```
//!
//! Lifecycle, as in client-go:
//!
//! 1. controllers ask for informers and register handlers (nothing runs yet);
//! 2. [`SharedInformerFactory::start`] spawns every informer created and not yet started, each
//!    in its own task owned by the factory; informers created later need another `start`;
//! 3. [`SharedInformerFactory::wait_for_cache_sync`] waits for the started informers;
//! 4. on shutdown, cancel the token given to `start` (or call
//!    [`SharedInformerFactory::shutdown`], which cancels for you) and await `shutdown`: it waits
//!    until every informer task has returned and every handler queue has drained. After
//!    `shutdown` begins, `start` does nothing.
//!
//! ## Observing every informer
//!
//! A process must not lose track of what it watches. [`SharedInformerFactory::informers`]
//! lists every informer the factory has created, with its resource, scope, reflector counters
//! and store size, so metrics can be registered for exactly the informers that exist (the
//! manager registers each one, read at scrape time). Built
//! [`with_watch_health`](SharedInformerFactory::with_watch_health), the factory also hands each
//! new informer's reflector a [`WatchObserver`](super::WatchObserver) named after it (see
//! [`InformerInfo::name`]), so `/healthz` fails, naming the resource, when that watch is stuck
//! on 403 or relists endlessly. client-go's factory has neither: its callers keep their own
//! list of informers for metrics, and its health checks do not look at reflectors.
//!
//! ## Per-type selectors and transforms (controller-runtime's `ByObject`)
//!
//! A controller caches what it owns, not the cluster. [`SharedInformerFactory::with_label_selector_for`]
//! gives one type a `labelSelector` of its own (ANDed with the factory's default selector), and
//! [`SharedInformerFactory::with_transform_for`] a transform installed on its informer when the
//! informer is created (client-go: `WithTweakListOptions` is factory-wide, so per-type
//! filtering there takes a second factory; controller-runtime's `cache.Options.ByObject` sets
//! `Label` and `Transform` per type, which is what this mirrors). [`SharedInformerFactory::informer`]
//! then returns the informer in that narrowed scope, still named after the plural alone
//! (`"pods"`), so metrics and health names do not change with the selector.
//!
//! The factory does not know how to talk to a server. It asks a [`ListerWatcherSource`] for a
//! [`ListerWatcher`](super::ListerWatcher) for each type and scope; the client's `Client`
//! implements it with `Api<K>`, and tests use [`super::testing::FakeSource`]. Selectors are
//! applied by the reflector on every list and watch, so a source only needs the namespace.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::CacheObject;
use super::informer::{InformerOptions, SharedIndexInformer, wait_until};
use super::lister::Lister;
use super::lister_watcher::BoxListerWatcher;
use super::reflector::WatchObservers;
use super::reflector::{ReflectorConfig, ReflectorStatus};
use crate::client::{Api, Client};
use crate::keytrace::KeyTracer;

/// Which slice of a type an informer watches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InformerScope {
    /// One namespace, or `None` for all namespaces (and for cluster-scoped types).
    pub namespace: Option<String>,
    /// `labelSelector` applied to list and watch.
    pub label_selector: Option<String>,
    /// `fieldSelector` applied to list and watch.
    pub field_selector: Option<String>,
}

impl std::fmt::Display for InformerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "namespace={}", self.namespace.as_deref().unwrap_or("*"))?;
        if let Some(l) = &self.label_selector {
            write!(f, ",labels={l}")?;
        }
        if let Some(s) = &self.field_selector {
            write!(f, ",fields={s}")?;
        }
        Ok(())
    }
}

/// Makes a [`ListerWatcher`](super::ListerWatcher) for any cached type and scope.
pub trait ListerWatcherSource: Send + Sync + 'static {
    /// A lister-watcher for `K` restricted to `scope.namespace` (the reflector adds the
    /// selectors to every request itself).
    fn lister_watcher<K: CacheObject>(&self, scope: &InformerScope) -> BoxListerWatcher<K>;
}

/// The client's [`Client`] makes [`crate::client::Api`]s: namespaced
/// when the scope names a namespace, all namespaces otherwise (which is also the right URL for
/// cluster-scoped types).
impl ListerWatcherSource for Client {
    fn lister_watcher<K: CacheObject>(&self, scope: &InformerScope) -> BoxListerWatcher<K> {
        match scope.namespace.as_deref() {
            Some(ns) => BoxListerWatcher::new(Api::<K>::namespaced(self.clone(), ns)),
            None => BoxListerWatcher::new(Api::<K>::all(self.clone())),
        }
    }
}

trait Control: Send + Sync {
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, ()>;
    fn has_synced(&self) -> bool;
    fn status(&self) -> ReflectorStatus;
    fn store_len(&self) -> usize;
}

impl<K: CacheObject> Control for SharedIndexInformer<K> {
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, ()> {
        let me = self.clone();
        Box::pin(async move { me.run(cancel).await })
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn status(&self) -> ReflectorStatus {
        SharedIndexInformer::status(self)
    }
    fn store_len(&self) -> usize {
        self.indexer().len()
    }
}

/// One informer of a factory, as [`SharedInformerFactory::informers`] reports it.
#[derive(Clone)]
pub struct InformerInfo {
    /// The name metrics and health checks use: the resource plural (`"ats"`, `"pods"`) for an
    /// informer in the scope [`SharedInformerFactory::informer`] uses for its type, the plural and the scope otherwise
    /// (`"pods (namespace=kube-system)"`).
    pub name: String,
    /// The resource plural (`K::URL_PATH_SEGMENT`).
    pub resource: &'static str,
    /// What the informer watches.
    pub scope: InformerScope,
    /// Whether [`SharedInformerFactory::start`] has started it.
    pub started: bool,
    control: Arc<dyn Control>,
}

impl std::fmt::Debug for InformerInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerInfo")
            .field("name", &self.name)
            .field("resource", &self.resource)
            .field("scope", &self.scope)
            .field("started", &self.started)
            .finish()
    }
}

impl InformerInfo {
    /// The reflector's counters (live: the handle stays current while the informer runs).
    pub fn status(&self) -> ReflectorStatus {
        self.control.status()
    }

    /// Objects in the informer's cache now.
    pub fn store_len(&self) -> usize {
        self.control.store_len()
    }

    /// True once the informer's first list is in its cache.
    pub fn has_synced(&self) -> bool {
        self.control.has_synced()
    }

    /// A function reading the cache size, for a metrics collector.
    pub fn store_len_fn(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let control = Arc::clone(&self.control);
        move || control.store_len()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InformerKey {
    type_id: TypeId,
    scope: InformerScope,
}

struct Entry {
    name: String,
    short_name: String,
    resource: &'static str,
    scope: InformerScope,
    informer: Box<dyn Any + Send + Sync>,
    control: Arc<dyn Control>,
    started: bool,
}

#[derive(Default)]
struct State {
    informers: HashMap<InformerKey, Entry>,
    tasks: Vec<JoinHandle<()>>,
    tokens: Vec<CancellationToken>,
    shutting_down: bool,
}

/// Shares informers between controllers (see the module doc).
pub struct SharedInformerFactory<S> {
    source: S,
    default_resync: Duration,
    default_scope: InformerScope,
    custom_resync: HashMap<TypeId, Duration>,
    custom_labels: HashMap<TypeId, String>,
    custom_transforms: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    reflector: ReflectorConfig,
    health: Option<WatchObservers>,
    on_undecodable: Option<super::reflector::UndecodableHandler>,
    key_tracer: Option<KeyTracer>,
    state: Mutex<State>,
}

impl<S: ListerWatcherSource> SharedInformerFactory<S> {
    /// A factory whose informers resync every `default_resync` (zero = never), over all
    /// namespaces, without selectors.
    pub fn new(source: S, default_resync: Duration) -> Self {
        SharedInformerFactory {
            source,
            default_resync,
            default_scope: InformerScope::default(),
            custom_resync: HashMap::new(),
            custom_labels: HashMap::new(),
            custom_transforms: HashMap::new(),
            reflector: ReflectorConfig::default(),
            health: None,
            on_undecodable: None,
            key_tracer: None,
            state: Mutex::new(State::default()),
        }
    }

    /// Restricts the default scope to one namespace (client-go's `WithNamespace`).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.default_scope.namespace = Some(namespace.into());
        self
    }

    /// Default selectors for every informer (client-go's `WithTweakListOptions`).
    pub fn with_selectors(
        mut self,
        label_selector: Option<String>,
        field_selector: Option<String>,
    ) -> Self {
        self.default_scope.label_selector = label_selector;
        self.default_scope.field_selector = field_selector;
        self
    }

    /// A resync period for one type (client-go's `WithCustomResyncConfig`).
    pub fn with_resync_for<K: CacheObject>(mut self, period: Duration) -> Self {
        self.custom_resync.insert(TypeId::of::<K>(), period);
        self
    }

    /// A `labelSelector` for one type only, ANDed with the default scope's (controller-runtime's
    /// `ByObject{Label}`): [`Self::informer`] for `K` watches only objects matching both.
    pub fn with_label_selector_for<K: CacheObject>(mut self, selector: impl Into<String>) -> Self {
        self.custom_labels
            .insert(TypeId::of::<K>(), selector.into());
        self
    }

    /// A transform for one type (controller-runtime's `ByObject{Transform}`), installed on every
    /// informer of `K` this factory creates, before it runs. It replaces the informer's default
    /// (which drops `managedFields`), so it should drop them too.
    pub fn with_transform_for<K: CacheObject>(
        mut self,
        transform: impl Fn(&mut K) + Send + Sync + 'static,
    ) -> Self {
        let f: super::informer::TransformFn<K> = Arc::new(transform);
        self.custom_transforms
            .insert(TypeId::of::<K>(), Box::new(f));
        self
    }

    /// The scope [`Self::informer`] uses for `K`: the default scope, with `K`'s own label
    /// selector (if any) ANDed to the default one.
    pub fn scope_for<K: CacheObject>(&self) -> InformerScope {
        let mut scope = self.default_scope.clone();
        if let Some(own) = self.custom_labels.get(&TypeId::of::<K>()) {
            scope.label_selector = Some(match scope.label_selector.take() {
                Some(default) if !default.trim().is_empty() => format!("{default},{own}"),
                _ => own.clone(),
            });
        }
        scope
    }

    /// Reflector settings for every informer (paging, streaming lists, backoff). The name and
    /// selectors are filled in per informer.
    pub fn with_reflector_config(mut self, config: ReflectorConfig) -> Self {
        self.reflector = config;
        self
    }

    /// Every informer created from now on reports its reflector's 403s, relists and watch
    /// progress to the observer `health` makes for its [`InformerInfo::name`] (the manager's
    /// `/healthz` shows `watch:<name>`).
    pub fn with_watch_health(
        mut self,
        health: impl Fn(&str) -> Arc<dyn super::WatchObserver> + Send + Sync + 'static,
    ) -> Self {
        self.health = Some(Arc::new(health));
        self
    }

    /// Every informer created from now on stamps its notifications and finds write echoes for
    /// `tracer`'s readers (see [`super::informer`], "Why, and when"). The manager passes its
    /// own tracer, the one its `/trace` endpoint reads.
    pub fn with_key_tracer(mut self, tracer: KeyTracer) -> Self {
        self.key_tracer = Some(tracer);
        self
    }

    /// Every informer created from now on calls `handler` once for each object (and
    /// resourceVersion of it) that does not decode as its type and is left out of its cache
    /// (the manager counts it in a metric and records a Warning event on the object).
    pub fn with_undecodable_handler(
        mut self,
        handler: super::reflector::UndecodableHandler,
    ) -> Self {
        self.on_undecodable = Some(handler);
        self
    }

    /// Every informer created so far, sorted by name.
    pub fn informers(&self) -> Vec<InformerInfo> {
        let mut out: Vec<InformerInfo> = self
            .state()
            .informers
            .values()
            .map(|e| InformerInfo {
                name: e.short_name.clone(),
                resource: e.resource,
                scope: e.scope.clone(),
                started: e.started,
                control: Arc::clone(&e.control),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared informer for `K` in the factory's default scope, narrowed by `K`'s own
    /// label selector if [`Self::with_label_selector_for`] gave it one.
    pub fn informer<K: CacheObject>(&self) -> SharedIndexInformer<K> {
        self.informer_for::<K>(self.scope_for::<K>())
    }

    /// The shared informer for `K` in `scope`; created on first use.
    pub fn informer_for<K: CacheObject>(&self, scope: InformerScope) -> SharedIndexInformer<K> {
        let key = InformerKey {
            type_id: TypeId::of::<K>(),
            scope: scope.clone(),
        };
        let mut state = self.state();
        if let Some(existing) = state
            .informers
            .get(&key)
            .and_then(|e| e.informer.downcast_ref::<SharedIndexInformer<K>>())
        {
            return existing.clone();
        }
        let name = format!("{} ({scope})", K::URL_PATH_SEGMENT);
        let informer = SharedIndexInformer::new(
            self.source.lister_watcher::<K>(&scope),
            InformerOptions {
                default_resync: self
                    .custom_resync
                    .get(&TypeId::of::<K>())
                    .copied()
                    .unwrap_or(self.default_resync),
                reflector: ReflectorConfig {
                    name: name.clone(),
                    label_selector: scope.label_selector.clone(),
                    field_selector: scope.field_selector.clone(),
                    ..self.reflector.clone()
                },
                key_tracer: self.key_tracer.clone(),
            },
        );
        if let Some(t) = self
            .custom_transforms
            .get(&TypeId::of::<K>())
            .and_then(|t| t.downcast_ref::<super::informer::TransformFn<K>>())
        {
            let t = Arc::clone(t);
            // A new informer has not started: this cannot fail.
            if let Err(e) = informer.set_transform(Some(move |obj: &mut K| t(obj))) {
                warn!(informer = %name, error = %e, "could not install the type's transform");
            }
        }
        let short_name = if scope == self.scope_for::<K>() {
            K::URL_PATH_SEGMENT.to_owned()
        } else {
            name.clone()
        };
        if let Some(health) = &self.health {
            informer.set_watch_health(health(&short_name));
        }
        if let Some(handler) = &self.on_undecodable {
            informer.set_undecodable_handler(Arc::clone(handler));
        }
        state.informers.insert(
            key,
            Entry {
                name,
                short_name,
                resource: K::URL_PATH_SEGMENT,
                scope,
                informer: Box::new(informer.clone()),
                control: Arc::new(informer.clone()),
                started: false,
            },
        );
        informer
    }

    /// The lister of the shared informer for `K` in the default scope.
    pub fn lister<K: CacheObject>(&self) -> Lister<K> {
        self.informer::<K>().lister()
    }

    /// Starts every informer not started yet, each in a task owned by the factory, stopping
    /// when `cancel` fires (or on [`Self::shutdown`]). Does not block.
    pub fn start(&self, cancel: &CancellationToken) {
        let mut state = self.state();
        if state.shutting_down {
            return;
        }
        let token = cancel.child_token();
        let mut spawned = Vec::new();
        for entry in state.informers.values_mut().filter(|e| !e.started) {
            entry.started = true;
            spawned.push(tokio::spawn(entry.control.run(token.clone())));
        }
        state.tasks.extend(spawned);
        state.tokens.push(token);
    }

    /// Waits until every *started* informer has synced or `deadline` passes; returns each
    /// informer's name and whether it synced.
    pub async fn wait_for_cache_sync(&self, deadline: Instant) -> BTreeMap<String, bool> {
        let started: Vec<(String, Arc<dyn Control>)> = self
            .state()
            .informers
            .values()
            .filter(|e| e.started)
            .map(|e| (e.name.clone(), Arc::clone(&e.control)))
            .collect();
        let mut out = BTreeMap::new();
        for (name, control) in started {
            let synced = wait_until(deadline, || control.has_synced()).await;
            out.insert(name, synced);
        }
        out
    }

    /// Stops every informer (cancelling the tokens `start` derived) and waits until all their
    /// tasks have returned. Later `start` calls do nothing.
    pub async fn shutdown(&self) {
        let tasks = {
            let mut state = self.state();
            state.shutting_down = true;
            for t in &state.tokens {
                t.cancel();
            }
            std::mem::take(&mut state.tasks)
        };
        for t in tasks {
            if let Err(e) = t.await {
                warn!(error = %e, "informer task ended abnormally");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::{FakeSource, Request, meta};
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec};

    /// controller-runtime's `ByObject`: one type watched with its own selector (ANDed with the
    /// factory's) and stored through its own transform; other types keep the defaults; names
    /// stay the plural.
    #[tokio::test]
    async fn a_type_gets_its_own_selector_and_transform() {
        let source = FakeSource::new();
        let factory = SharedInformerFactory::new(source.clone(), Duration::ZERO)
            .with_namespace("ns")
            .with_selectors(Some("tier=web".into()), None)
            .with_label_selector_for::<Pod>("app.kubernetes.io/managed-by=me")
            .with_transform_for::<Pod>(|p: &mut Pod| {
                p.spec = None;
                p.metadata.annotations = None;
            });
        let pods = factory.informer::<Pod>();
        let _same = factory.informer::<Pod>();
        let _cms = factory.informer::<ConfigMap>();
        let pod_scope = factory.scope_for::<Pod>();
        assert_eq!(
            pod_scope.label_selector.as_deref(),
            Some("tier=web,app.kubernetes.io/managed-by=me")
        );
        assert_eq!(
            factory.scope_for::<ConfigMap>().label_selector.as_deref(),
            Some("tier=web")
        );
        let names: Vec<String> = factory.informers().into_iter().map(|i| i.name).collect();
        assert_eq!(
            names,
            ["configmaps", "pods"],
            "one pod informer, named by its plural"
        );

        let fake = source.fake::<Pod>(&pod_scope);
        let mut pod = Pod {
            metadata: meta("ns", "a", &[("app.kubernetes.io/managed-by", "me")]),
            spec: Some(PodSpec::default()),
            status: None,
        };
        pod.metadata.annotations = Some([("big".to_string(), "x".to_string())].into());
        fake.upsert(pod);
        let cancel = CancellationToken::new();
        factory.start(&cancel);
        let synced = factory
            .wait_for_cache_sync(Instant::now() + Duration::from_secs(10))
            .await;
        assert!(synced.values().all(|s| *s), "{synced:?}");
        let cached = pods.lister().namespace("ns").get("a").expect("cached");
        assert!(cached.spec.is_none() && cached.metadata.annotations.is_none());
        let first = fake.requests().into_iter().next();
        match first {
            Some(Request::List(p)) => assert_eq!(
                p.label_selector.as_deref(),
                Some("tier=web,app.kubernetes.io/managed-by=me")
            ),
            Some(Request::Watch(p)) => assert_eq!(
                p.label_selector.as_deref(),
                Some("tier=web,app.kubernetes.io/managed-by=me")
            ),
            None => panic!("the pod informer asked nothing"),
        }
        factory.shutdown().await;
    }
}
