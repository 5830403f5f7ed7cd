//! # tools/cache: reflector, store, shared informers, listers
//!
//! (This module doc is completed with the cache implementation.)

pub mod lister_watcher;

pub use lister_watcher::ListerWatcher;
