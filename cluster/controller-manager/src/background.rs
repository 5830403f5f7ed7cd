//! The virtual clock the controllers stamp objects with.
//!
//! All waiting goes through `tokio::time`, so a test with a paused clock
//! (`#[tokio::test(start_paused = true)]`) can advance an hour in a millisecond. Timestamps
//! the controllers write into objects (`startTime`, `completionTime`, `lastTransitionTime`,
//! `lastUpdateTime`) come from a [`VirtualClock`]: the wall-clock time when the manager
//! started plus the `tokio::time` elapsed since, so the time between two timestamps is exactly
//! the simulated time even when the clock is paused. kube-controller-manager reads the wall
//! clock (`metav1.Now()`); with the tokio clock running the two agree.

/// Wall-clock timestamps that advance with `tokio::time` (see the module docs): the shared
/// `apimachinery::clock::Clock`, under the name the node and workload controllers know it by.
pub(crate) use apimachinery::clock::Clock as VirtualClock;
