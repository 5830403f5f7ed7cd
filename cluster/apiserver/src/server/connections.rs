//! Which connection goes when the server is full: shedding idle connections so that new
//! clients are never locked out.
//!
//! Go's `net/http` server, kube-apiserver's, has no connection cap: every new client is
//! served, and a connection that sends nothing is closed after `ReadHeaderTimeout` (32 s). This
//! server does cap connections ([`apimachinery::serving::ServingLimits::max_connections`],
//! 10,000 by default) so that a flood cannot exhaust file descriptors, but a cap that simply
//! refuses newcomers lets anyone who opens 10,000 silent TCP connections lock every client out
//! until the header timeout closes them. So a full server makes room instead, as a reverse
//! proxy sheds idle keep-alives:
//!
//! 1. the **oldest connection that has not sent a request yet** (a client that connected and
//!    sent nothing, or has not finished its TLS handshake) is closed first;
//! 2. failing that, the **oldest idle connection** (a keep-alive with no request in flight);
//! 3. a connection with a request in flight (a watch, a slow list) is never shed: if every
//!    connection is busy, the newcomer is refused as before.
//!
//! A full server closes a batch of them at once (`SHED_BATCH`), so a flood of newcomers does
//! not pay one close-and-wait each.
//!
//! The shed connection's task sees its close signal and ends at once (there is nothing in
//! flight to finish), its slot returns to the gate, and the new connection takes it. A client
//! whose idle keep-alive was shed reconnects, as it must anyway after an idle timeout.
//!
//! Data in: each accepted connection ([`register`]), and its requests ([`State::begin`]).
//! Data out: the close signal of the connection to shed ([`shed_for`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apimachinery::serving::{ConnectionGate, Slot};
use tokio_util::sync::CancellationToken;

/// What the shedder needs to know of one connection.
#[derive(Debug, Default)]
pub struct State {
    requests: AtomicU64,
    in_flight: AtomicUsize,
}

impl State {
    /// A request began; in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }
}

/// One request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<State>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The open connections, oldest first.
#[derive(Default)]
pub struct Open {
    next: u64,
    by_age: BTreeMap<u64, (Arc<State>, CancellationToken)>,
}

impl Open {
    /// The close signals of up to `n` connections to shed, in the order of the module docs.
    fn victims(&self, n: usize) -> Vec<CancellationToken> {
        let live = |c: &CancellationToken| !c.is_cancelled();
        let mut out: Vec<CancellationToken> = self
            .by_age
            .values()
            .filter(|(s, c)| s.requests.load(Ordering::Relaxed) == 0 && live(c))
            .take(n)
            .map(|(_, c)| c.clone())
            .collect();
        if out.len() < n {
            let more = self
                .by_age
                .values()
                .filter(|(s, c)| {
                    s.requests.load(Ordering::Relaxed) > 0
                        && s.in_flight.load(Ordering::Relaxed) == 0
                        && live(c)
                })
                .take(n - out.len())
                .map(|(_, c)| c.clone());
            out.extend(more);
        }
        out
    }
}

/// Records a new connection; returns its state, its close signal and its id.
pub fn register(open: &Mutex<Open>) -> (Arc<State>, CancellationToken, u64) {
    let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
    let id = o.next;
    o.next += 1;
    let state = Arc::new(State::default());
    let close = CancellationToken::new();
    o.by_age.insert(id, (state.clone(), close.clone()));
    (state, close, id)
}

/// Forgets a connection that ended.
pub fn unregister(open: &Mutex<Open>, id: u64) {
    open.lock()
        .unwrap_or_else(|p| p.into_inner())
        .by_age
        .remove(&id);
}

/// How long the accept loop waits for a shed connection to give its slot back.
const SHED_WAIT: Duration = Duration::from_secs(1);

/// How many connections one shedding closes: a flood of newcomers then finds free slots
/// without waiting for one victim each (the victims are the oldest silent or idle ones, so a
/// batch costs well-behaved clients nothing they would not lose to the idle timeout).
const SHED_BATCH: usize = 64;

/// The gate is full: closes the connections to shed (up to `SHED_BATCH`) and waits (at most
/// `SHED_WAIT`) for a slot. `None` when no connection may be shed (every one is busy) or
/// none gave a slot back.
pub async fn shed_for(open: &Mutex<Open>, gate: &ConnectionGate) -> Option<Slot> {
    let victims = open
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .victims(SHED_BATCH);
    if victims.is_empty() {
        return None;
    }
    for v in &victims {
        v.cancel();
    }
    tracing::debug!(
        closed = victims.len(),
        "connection limit reached; closed the oldest silent or idle connections for new ones"
    );
    let deadline = tokio::time::Instant::now() + SHED_WAIT;
    loop {
        if let Some(slot) = gate.try_admit() {
            return Some(slot);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silent_connections_go_first_then_idle_ones_never_busy_ones() {
        let open = Mutex::new(Open::default());
        let (busy, _, _) = register(&open);
        let _req = busy.begin();
        let (idle, idle_close, _) = register(&open);
        drop(idle.begin());
        let (_silent, silent_close, _) = register(&open);
        for v in open.lock().unwrap().victims(1) {
            v.cancel();
        }
        assert!(silent_close.is_cancelled() && !idle_close.is_cancelled());
        let v = open.lock().unwrap().victims(5);
        assert_eq!(v.len(), 1, "only the idle one is left to shed");
        v[0].cancel();
        assert!(idle_close.is_cancelled());
        assert!(
            open.lock().unwrap().victims(5).is_empty(),
            "busy connections stay"
        );
    }
}
