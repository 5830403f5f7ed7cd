//! Time for the node: the virtual clock its timestamps come from.
//!
//! All waiting in the node goes through `tokio::time`, so a test with a paused clock
//! (`#[tokio::test(start_paused = true)]`) can advance an hour in a millisecond. Timestamps
//! the node writes into objects (`startedAt`, `finishedAt`, `startTime`,
//! `lastTransitionTime`, events' `firstTimestamp`) come from a [`VirtualClock`]: the wall-clock
//! time when the node started plus the `tokio::time` elapsed since, so `finishedAt -
//! startedAt` is exactly the simulated run time even when the clock is paused.
//!
//! What the node learns of the cluster it learns through the API ([`crate::client`]).

/// Wall-clock timestamps that advance with `tokio::time` (see the module docs): the shared
/// `apimachinery::clock::Clock`, under the name the node knows it by.
pub use apimachinery::clock::Clock as VirtualClock;
