//! Serving connections: the accept loop (bounded by [`ServingLimits`]: a full server sheds its
//! oldest silent connection for a new client, [`crate::server::connections`]), each connection's
//! TLS handshake (a verified client certificate's subject becomes the connection's identity,
//! [`crate::auth::x509`]), and HTTP/1.1 or HTTP/2 with their header, idle and stream bounds,
//! every request handed to the handler chain ([`crate::server::chain`]).

use std::sync::Arc;
use std::time::Duration;

use apimachinery::serving::{Activity, ConnectionGate, ServingLimits};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::x509;
use crate::endpoints::Shared;
use crate::filters::authentication::ClientCertIdentity;
use crate::server::connections;

pub(crate) async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    tracker: TaskTracker,
    limits: Arc<ServingLimits>,
) {
    let gate = ConnectionGate::new(limits.max_connections);
    let conns = Arc::new(std::sync::Mutex::new(connections::Open::default()));
    let mut stop = std::pin::pin!(shared.shutdown.cancelled());
    let mut pause = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => {
                pause = Duration::ZERO;
                a
            }
            Err(e) => {
                // As `apimachinery::serving::accept_connections`: back off, never spin or die.
                pause = (pause * 2).clamp(
                    apimachinery::serving::ACCEPT_RETRY_MIN,
                    apimachinery::serving::ACCEPT_RETRY_MAX,
                );
                tracing::warn!(server = "apiserver", error = %e, retry_in = ?pause, "accept failed");
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let slot = match gate.try_admit() {
            Some(slot) => slot,
            None => match connections::shed_for(&conns, &gate).await {
                Some(slot) => slot,
                None => {
                    tracing::debug!(%peer, "connection limit reached and every connection is busy; closing new connection");
                    drop(tcp);
                    continue;
                }
            },
        };
        let (state, close, id) = connections::register(&conns);
        let (acceptor, shared, limits, conns) = (
            acceptor.clone(),
            shared.clone(),
            limits.clone(),
            conns.clone(),
        );
        tracker.spawn(async move {
            let _slot = slot;
            serve_accepted(tcp, peer, acceptor, shared, &limits, state, close).await;
            connections::unregister(&conns, id);
        });
    }
}

/// One accepted connection: its TLS handshake (bounded by the header timeout, by shutdown and
/// by being shed) when the server speaks HTTPS, then [`serve_connection_as`].
async fn serve_accepted(
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    limits: &ServingLimits,
    state: Arc<connections::State>,
    close: CancellationToken,
) {
    let _ = tcp.set_nodelay(true);
    let Some(acc) = acceptor else {
        return serve_connection_as(TokioIo::new(tcp), shared, limits, None, state, close).await;
    };
    let tls = tokio::select! {
        _ = shared.shutdown.cancelled() => return,
        _ = close.cancelled() => return,
        r = tokio::time::timeout(limits.header_read_timeout, acc.accept(tcp)) => r,
    };
    match tls {
        Ok(Ok(stream)) => {
            // A verified client certificate (see [`tls`]): its subject is the user.
            let identity = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|leaf| x509::subject(leaf.as_ref()))
                .map(|(name, groups)| Arc::new(ClientCertIdentity { name, groups }));
            serve_connection_as(TokioIo::new(stream), shared, limits, identity, state, close).await
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

/// Serves one connection under `limits`: HTTP/1 header timeout and buffer bound, HTTP/2
/// stream limit, and closing once [`apimachinery::serving::Activity::expired`] says it is idle
/// (no request in flight for the idle timeout, or none at all within the header timeout).
async fn serve_connection_as<I>(
    io: I,
    shared: Arc<Shared>,
    limits: &ServingLimits,
    identity: Option<Arc<ClientCertIdentity>>,
    state: Arc<connections::State>,
    close: CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size.max(8192));
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_header_list_size(limits.max_buf_size.min(u32::MAX as usize) as u32);
    let activity = Activity::new();
    let svc_shared = shared.clone();
    let svc_activity = activity.clone();
    let svc_state = state.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        if let Some(id) = &identity {
            req.extensions_mut().insert(id.clone());
        }
        let shared = svc_shared.clone();
        // In flight until the response body (a watch stream, say) is finished or dropped.
        let in_flight = (svc_activity.begin(), svc_state.begin());
        async move {
            let resp = crate::server::chain::handle(shared, req).await?;
            Ok::<_, std::convert::Infallible>(resp.map(|body| {
                body.map_frame(move |frame| {
                    let _ = &in_flight;
                    frame
                })
                .boxed()
            }))
        }
    });
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let mut check = tokio::time::interval(limits.check_interval());
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = close.cancelled() => {
                // Shed to admit a new client: nothing is in flight here, so nothing is lost.
                return;
            }
            _ = shared.shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                // Watches end on the same signal, so in-flight responses finish promptly.
                let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                return;
            }
            _ = check.tick() => {
                if activity.expired(limits) {
                    // Idle: nothing in flight, so closing loses nothing.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
                    return;
                }
            }
        }
    }
}
