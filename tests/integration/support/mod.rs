//! What the tests share, one helper per behaviour: the `sample-controller` binary
//! ([`bin`]), kubectl ([`kubectl_bin`]), waiting for a condition ([`eventually`]) and letting
//! spawned tasks run ([`yield_to_tasks`]); servers and clients per area in the submodules.
//!
//! | module | for |
//! |---|---|
//! | [`apiserver`] | an embedded API server and a raw HTTP client for it |
//! | [`at`] | the At operator: a server with its CRD, a manager in process, At helpers |
//! | [`client`] | the client-go layer's tests: a server and a client |
//! | [`cluster`] | a whole embedded cluster, kubectl against it, waiting on its objects |
//! | [`net`] | ports, forwarders that follow (and cut) a server, a manager child's log |
//! | [`operators`] | the operators' manager and their objects |
//! | [`record`] | events: sinks and kubectl |
//! | [`seeds`] | the seeds' walkthroughs: commands as a reader runs them |

pub mod apiserver;
pub mod at;
pub mod client;
pub mod cluster;
pub mod net;
pub mod operators;
pub mod record;
pub mod seeds;

use std::time::Duration;

pub use cluster::kubectl_bin;

/// The `sample-controller` binary under test: `$SAMPLE_CONTROLLER_BIN` when set (another
/// build), else the one Cargo built for this test binary.
pub fn bin() -> String {
    std::env::var("SAMPLE_CONTROLLER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sample-controller").to_string())
}

/// A child process (a standalone server, say) stopped the way an operator stops it when the
/// test ends: SIGTERM, up to 10 s to shut down (a server with a process node ends its pods'
/// processes then), and SIGKILL only after that. A bare `kill_on_drop` would SIGKILL the server
/// and leave its pods' processes running after the test.
pub struct StopOnDrop(pub tokio::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            for _ in 0..200 {
                if matches!(self.0.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.start_kill();
    }
}

/// Polls `cond` every 10 ms until it holds; panics naming `what` after 60,000 polls (ten
/// minutes of real time, or of a paused Tokio clock, which the sleeps advance).
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..60_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// Yields to the runtime `yields` times, so that spawned tasks run until they wait for
/// something, then sleeps `sleep` (zero: not at all; under a paused clock the sleep moves the
/// clock by that much).
pub async fn yield_to_tasks(yields: usize, sleep: Duration) {
    for _ in 0..yields {
        tokio::task::yield_now().await;
    }
    if !sleep.is_zero() {
        tokio::time::sleep(sleep).await;
    }
}
