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
    /// The close signal of the connection to shed, if any may be (see the module docs).
    fn victim(&self) -> Option<CancellationToken> {
        let idle = |s: &State| s.in_flight.load(Ordering::Relaxed) == 0;
        let silent = self
            .by_age
            .values()
            .find(|(s, c)| s.requests.load(Ordering::Relaxed) == 0 && !c.is_cancelled());
        silent
            .or_else(|| {
                self.by_age
                    .values()
                    .find(|(s, c)| idle(s) && !c.is_cancelled())
            })
            .map(|(_, c)| c.clone())
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

/// The gate is full: closes the connection to shed and waits (at most [`SHED_WAIT`]) for its
/// slot. `None` when no connection may be shed (every one is busy) or none gave a slot back.
pub async fn shed_for(open: &Mutex<Open>, gate: &ConnectionGate) -> Option<Slot> {
    let victim = open.lock().unwrap_or_else(|p| p.into_inner()).victim()?;
    victim.cancel();
    tracing::debug!("connection limit reached; closed the oldest idle connection for a new one");
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
        let v = open.lock().unwrap().victim().unwrap();
        v.cancel();
        assert!(silent_close.is_cancelled() && !idle_close.is_cancelled());
        let v = open.lock().unwrap().victim().unwrap();
        v.cancel();
        assert!(idle_close.is_cancelled());
        assert!(
            open.lock().unwrap().victim().is_none(),
            "busy connections stay"
        );
    }
}
