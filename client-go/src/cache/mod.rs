//! # tools/cache: reflector, store, shared informers, listers
//!
//! This is the heart of the book's diagram: how a controller knows what is in the cluster
//! without asking the API server on every decision.
//!
//! ```text
//!                       LIST (once, then on relist)     WATCH (for ever, resumed by RV)
//!  API server  ------------------------------------------------------------------------+
//!      |                                                                               |
//!      v                                                                               v
//!  Reflector  (reflector.rs)  list → replace, watch → add/update/delete, backoff, 410 → relist
//!      |
//!      v   under one lock: apply to the cache, then notify
//!  Indexer   (store.rs)   key "ns/name" → Arc<K>; indexes: namespace, yours (owner-uid, ...)
//!      |                                   ^
//!      | notifications                     | reads, never the network
//!      v                                   |
//!  handler queues (informer.rs)        Lister (lister.rs)  ← sync_handler(key)
//!      |  one unbounded queue + task per handler
//!      v
//!  on_add / on_update / on_delete(Final | Tombstone)  → workqueue.add(key)
//! ```
//!
//! Read the files in this order:
//!
//! 1. [`keys`]: how objects are named in the cache (`"ns/name"`), and tombstones; [`meta_access`]:
//!    the metadata accessor the cache reads objects through (client-go's `meta.Accessor`).
//! 2. [`store`]: the [`Indexer`], a thread-safe map of `Arc<K>` with indexes.
//! 3. [`lister_watcher`]: [`ListerWatcher`], the two calls (list, watch) a reflector makes,
//!    and [`api_source`]: the client's `Api<K>` as one, and [`ClientSource`], which gives the
//!    factory one per type and scope.
//! 4. [`reflector`]: the list-then-watch loop with client-go's exact rules and numbers.
//! 5. [`informer`]: [`SharedIndexInformer`], which wires a reflector to an indexer and to any
//!    number of event handlers, each with its own buffer.
//! 6. [`factory`]: [`SharedInformerFactory`], one informer per type and scope per process.
//! 7. [`lister`] and [`selector`]: typed reads from the cache, label selectors (the selector
//!    language is shared with the API server: `apimachinery::labels`, re-exported here).
//! 8. [`testing`]: an in-memory lister-watcher that plays a server, for tests and benchmarks.
//!
//! ## Example
//!
//! An informer over an in-memory source (in a controller the source is an `Api<Pod>`, and
//! the informer comes from a [`SharedInformerFactory`]):
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use k8s_openapi::api::core::v1::Pod;
//! use sample_client_go::cache::testing::{FakeListerWatcher, meta};
//! use sample_client_go::cache::{EventHandlerFns, InformerOptions, SharedIndexInformer, key_of};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let server = FakeListerWatcher::<Pod>::new();
//! server.upsert(Pod { metadata: meta("default", "web-1", &[("app", "web")]), ..Default::default() });
//!
//! let informer = SharedIndexInformer::new(server.clone(), InformerOptions::default());
//! // Handlers only say *which* object changed; a worker reads the rest from the lister.
//! informer
//!     .add_event_handler(EventHandlerFns::new().on_add(|pod: Arc<Pod>, _initial| {
//!         println!("enqueue {}", key_of(pod.as_ref()));
//!     }))
//!     .unwrap();
//!
//! let cancel = CancellationToken::new();
//! let run = tokio::spawn({
//!     let (informer, cancel) = (informer.clone(), cancel.clone());
//!     async move { informer.run(cancel).await }
//! });
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
//! assert!(informer.wait_for_cache_sync(deadline).await);
//!
//! let web = informer.lister().namespace("default").get("web-1").unwrap();
//! assert_eq!(web.metadata.labels.as_ref().unwrap()["app"], "web");
//! assert!(informer.lister().namespace("default").get("nope").unwrap_err().is_not_found());
//!
//! cancel.cancel();
//! run.await.unwrap();
//! # }
//! ```
//!
//! ## Invariants a controller relies on
//!
//! * **Eventually equal.** Once the server stops changing, the cache holds exactly the
//!   server's objects: no missing key, no stale resourceVersion. Watch events keep it current;
//!   every relist (after 410 Gone or an error) replaces it wholesale, and keys that vanished
//!   while disconnected are reported as tombstones.
//! * **Cache first, then handlers.** A handler (or a worker it wakes) that reads the lister sees
//!   the state that triggered it or a newer one.
//! * **Per-handler order.** Each handler sees its notifications one at a time, in the order the
//!   cache changed; a slow handler never delays the reflector or other handlers.
//! * **Consistent history per handler.** No update for a key it was not told about, no second
//!   add without a delete in between, and a delete only for a key it was told about.
//! * **Shared, immutable objects.** The cache stores each object once as `Arc<K>`; handlers and
//!   listers get clones of the `Arc`. Never mutate through them: clone the `K` first.
//!
//! ## Memory
//!
//! Objects are stored once. The default transform drops `metadata.managedFields` before an
//! object is stored. During a relist each incoming object is transformed and compared with the
//! cache as it arrives; an object whose resourceVersion did not change is dropped at once and
//! the cached `Arc` is reused, so the new store shares every unchanged object with the old one.
//! With a streaming list (the default) objects arrive one event at a time, so the peak is the
//! old store plus the changed objects; with a paged LIST, plus one page (500 objects). A relist
//! at a specific resourceVersion is not paged (so the server can answer it from its watch
//! cache, as client-go does), and then one whole list response is decoded before it is
//! compared.
//!
//! ## Mirrors client-go
//!
//! `tools/cache`: `reflector.go`, `store.go` + `thread_safe_store.go` + `index.go`,
//! `shared_informer.go`, `informers/factory.go`, generated listers, and
//! `k8s.io/apimachinery/pkg/labels` for selectors. The main difference is that there is no
//! DeltaFIFO: see [`informer`] for why none is needed.

pub mod api_source;
pub mod factory;
pub mod informer;
pub mod keys;
pub mod lister;
pub mod lister_watcher;
pub mod meta_access;
pub mod reflector;
/// Strings that stay inline when short (keys, names, resourceVersions): [`crate::small_string`],
/// re-exported where the cache's readers have always found them.
pub use crate::small_string;
/// Label selectors: `apimachinery::labels`, the same parser and matcher the embedded API server
/// uses, re-exported where a reader of client-go's `tools/cache` looks for them.
pub use apimachinery::labels as selector;
pub mod store;
pub mod testing;

pub use crate::small_string::{InlineString, SmallString, UidString};
pub use api_source::ClientSource;
pub use factory::{InformerInfo, InformerScope, ListerWatcherSource, SharedInformerFactory};
pub use informer::{
    EventHandlerFns, FilteringHandler, HandlerRegistration, HasSynced, InformerError,
    InformerOptions, ResourceEventHandler, SharedIndexInformer, shrink_metadata_lists,
    wait_for_cache_sync,
};
pub use keys::{Deleted, ObjectKey, key_of, split_key};
pub use lister::{Lister, NamespaceLister};
pub use lister_watcher::{BoxListerWatcher, ListerWatcher};
pub use meta_access::{ObjectMetaAccess, OwnerRef};
pub use reflector::{
    Reflector, ReflectorConfig, ReflectorStats, ReflectorStatus, WatchObserver, WatchObservers,
};
pub use selector::{Selector, SelectorError};
pub use store::{IndexError, Indexer, NAMESPACE_INDEX, OWNER_UID_INDEX, Store, owner_uid_index};

use k8s_openapi::Metadata;

/// What the cache can hold: any Kubernetes object type whose metadata the cache can read
/// ([`ObjectMetaAccess`]): built-in (`Pod`) or custom (`At`), with a whole `ObjectMeta`, or a
/// type made for a cache with a smaller one (`sample_operators::slim::MetaSummary`). Implemented
/// automatically.
pub trait CacheObject:
    k8s_openapi::Resource
    + Metadata<Ty: ObjectMetaAccess>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<T> CacheObject for T where
    T: k8s_openapi::Resource
        + Metadata<Ty: ObjectMetaAccess>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}
