//! # Work queues: what sits between the informer and the workers
//!
//! This module is client-go's `util/workqueue`. It answers a question every controller author
//! meets on day one: *why not just reconcile inside the informer's event handler?*
//!
//! ```text
//!  informer event handlers                      workers (N tasks)
//!  on_add / on_update / on_delete               loop {
//!        │  key = "ns/name"                        key = queue.get().await?   ◀── never the same key
//!        ▼                                         sync_handler(key)               on two workers
//!  ┌──────────────────────────────────────┐       match result {
//!  │ RateLimitingQueue                    │         Err(_)      => queue.add_rate_limited(key)
//!  │  ┌────────────────────────────────┐  │         Ok(Some(d)) => queue.add_after(key, d)
//!  │  │ waiting: key ↦ deadline        │──┼──▶      Ok(None)    => queue.forget(&key)
//!  │  │ (DelayingQueue, timer task)    │  │       }
//!  │  └───────────────┬────────────────┘  │       queue.done(&key)
//!  │                  ▼ deadline passed   │     }
//!  │  FIFO  [k3][k1][k7]   dirty {k3,k1,k7,k2}   processing {k2}
//!  │  (Queue)                             │
//!  └──────────────────────────────────────┘
//! ```
//!
//! A queue of **keys** (not objects) between the two sides gives a controller four properties
//! it needs:
//!
//! 1. **Dedup.** Ten updates to one object before a worker is free become one reconcile. The
//!    worker reads the *latest* object from the lister, so nothing is lost by collapsing them:
//!    controllers are level-based (they compare desired and actual state), not edge-based.
//! 2. **Ordering and fairness.** Keys are served first in, first out, so one busy object cannot
//!    starve the others, and a slow handler never blocks the informer's event delivery.
//! 3. **One worker per key.** A key handed to a worker is *processing* until `done`; events for
//!    it meanwhile mark it *dirty* and it is queued again after `done`. So N workers run in
//!    parallel, but never two reconciles of the same object, and no change is missed.
//! 4. **Backoff.** A failing key is retried after a growing delay (`add_rate_limited`), bounded
//!    per key (exponential) and overall (token bucket), so a broken object or a down API server
//!    does not turn the controller into a hot loop; `forget` resets the key after a success.
//!
//! ## The pieces, one per file
//!
//! | type | file | client-go |
//! |---|---|---|
//! | [`Queue`] | `queue.rs` | `queue.go`: FIFO + dirty + processing sets, shutdown and drain |
//! | [`DelayingQueue`] | `delaying.rs` | `delaying_queue.go`: `add_after`, earliest deadline wins |
//! | [`RateLimitingQueue`] | `rate_limiting.rs` | `rate_limiting_queue.go`: `add_rate_limited`, `forget`, `num_requeues` |
//! | [`RateLimiter`] and friends | `rate_limiters.rs` | `default_rate_limiters.go` |
//! | [`QueueMetrics`] | `metrics.rs` | `metrics.go` + component-base's Prometheus provider |
//!
//! Each layer wraps the one before it; all handles are cheap to clone (an `Arc` inside), so the
//! informer's handlers and every worker hold their own clone. Items are generic
//! (`T: Clone + Eq + Hash + Send + Sync + 'static`), where client-go before 1.31 used
//! `interface{}`: a key type that does not hash cannot compile.
//!
//! ## A worker loop
//!
//! ```
//! use sample_client_go::workqueue::RateLimitingQueue;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let queue: RateLimitingQueue<String> = RateLimitingQueue::with_default_controller_rate_limiter();
//! queue.add("default/web".to_owned());
//! queue.add("default/web".to_owned()); // deduplicated
//! assert_eq!(queue.len(), 1);
//!
//! let key = queue.get().await.unwrap();
//! // sync_handler(&key) failed: retry after the backoff (5 ms for the first failure).
//! queue.add_rate_limited(key.clone());
//! queue.done(&key);
//! assert_eq!(queue.num_requeues(&key), 1);
//!
//! // The retry arrives once the backoff has passed (the paused clock jumps there).
//! let again = queue.get().await.unwrap();
//! // This time it succeeded: clear the failure history.
//! queue.forget(&again);
//! queue.done(&again);
//! assert_eq!(queue.num_requeues(&again), 0);
//! queue.shut_down();
//! assert_eq!(queue.get().await, None);
//! # }
//! ```
//!
//! ## How this differs from client-go
//!
//! - `get` is async and returns `None` after shutdown; waiting is a parked Tokio task.
//! - Events for an item waiting out a failure backoff join the pending retry instead of running
//!   it early (see [`rate_limiting`] for why, and kubernetes/kubernetes issue 132805).
//! - `add_after` never blocks (client-go's request channel holds 1000 entries), and no 10 s
//!   heartbeat is needed.
//! - Metrics go to a registry the caller passes in, not a process-global provider.
//! - `add_rate_limited` after shutdown is ignored before the limiter is asked, so a shut-down
//!   queue records no more failures (client-go asks the limiter first, then drops the item).
//!
//! ## Tasks and runtimes
//!
//! [`Queue::new`] needs nothing. Every other constructor starts one small task (the delaying
//! queue's timer, or a named queue's 500 ms metrics refresh), so it must be called inside a Tokio
//! runtime. Each task is owned by the queue: it ends when the queue shuts down or when its last
//! handle is dropped.
//!
//! All waiting goes through `tokio::time`, so tests drive every delay with a paused clock.

pub mod delaying;
pub mod metrics;
pub mod queue;
pub mod rate_limiters;
pub mod rate_limiting;

pub use delaying::DelayingQueue;
pub use metrics::QueueMetrics;
pub use queue::Queue;
pub use rate_limiters::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, RateLimiterConfigError, WithMaxWaitRateLimiter,
    controller_rate_limiter, default_controller_rate_limiter, default_item_based_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;
