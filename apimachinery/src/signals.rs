//! Waiting for the signals that ask a process to stop: SIGINT (Ctrl-C) and SIGTERM (what the
//! kubelet sends a container before its grace period ends).
//!
//! controller-runtime's `signals.SetupSignalHandler` (and sample-controller's own
//! `pkg/signals`) cancel a context on the first signal, so everything can shut down in order,
//! and exit with code 1 on the second, for an operator who does not want to wait. The manager
//! uses both halves ([`shutdown_on_signal`]); the embedded API server's command needs only
//! [`wait_for_signal`].

/// Resolves at the first SIGINT or SIGTERM. Where SIGTERM cannot be listened for (or on a
/// platform without it), only SIGINT counts, and a warning says so.
///
/// The handlers are installed when this function is *called*, not when the future is first
/// polled: a process that calls it before it announces itself (prints its URL, say) cannot be
/// killed by a SIGTERM sent right after the announcement, before anything awaited. Call it
/// from inside the tokio runtime.
pub fn wait_for_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt());
        let term = signal(SignalKind::terminate());
        async move {
            match (int, term) {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                (int, term) => {
                    if let Err(e) = &term {
                        tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT (Ctrl-C) stops the process");
                    }
                    match (int, term) {
                        (Ok(mut int), _) => {
                            int.recv().await;
                        }
                        (Err(_), Ok(mut term)) => {
                            term.recv().await;
                        }
                        (Err(_), Err(_)) => {
                            let _ = tokio::signal::ctrl_c().await;
                        }
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// sample-controller's `SetupSignalHandler`: on the first signal calls `shutdown` (cancel a
/// token, say) and logs that a second signal exits at once; on the second exits with code 1.
/// Never returns after the second signal; spawn it.
pub async fn shutdown_on_signal(shutdown: impl FnOnce() + Send + 'static) {
    let first = wait_for_signal();
    first.await;
    tracing::info!("signal received; shutting down (a second signal exits immediately)");
    shutdown();
    wait_for_signal().await;
    tracing::warn!("second signal received; exiting immediately");
    std::process::exit(1);
}
