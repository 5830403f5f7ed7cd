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
use super::reflector::ReflectorConfig;

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

trait Control: Send + Sync {
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, ()>;
    fn has_synced(&self) -> bool;
}

impl<K: CacheObject> Control for SharedIndexInformer<K> {
    fn run(&self, cancel: CancellationToken) -> BoxFuture<'static, ()> {
        let me = self.clone();
        Box::pin(async move { me.run(cancel).await })
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct InformerKey {
    type_id: TypeId,
    scope: InformerScope,
}

struct Entry {
    name: String,
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
    reflector: ReflectorConfig,
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
            reflector: ReflectorConfig::default(),
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

    /// Reflector settings for every informer (paging, streaming lists, backoff). The name and
    /// selectors are filled in per informer.
    pub fn with_reflector_config(mut self, config: ReflectorConfig) -> Self {
        self.reflector = config;
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared informer for `K` in the factory's default scope.
    pub fn informer<K: CacheObject>(&self) -> SharedIndexInformer<K> {
        self.informer_for::<K>(self.default_scope.clone())
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
            },
        );
        state.informers.insert(
            key,
            Entry {
                name,
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
