//! Servers in tests bind port 0 and report the address they got.
//!
//! In-process servers return their address ([`ServerHandle::local_addr`], the manager's
//! [`ListenersHandle`]); a child process logs it, and [`ManagerLog`] reads it back. Where an
//! address must be known before the server starts (the API server's webhook service endpoints are fixed when it is built),
//! or must survive a restart (a client configured once, a server killed and started again),
//! the test binds a [`Forwarder`] to port 0 instead and points it at the server when the
//! server reports its address, as a cluster's Service sits in front of a pod. Picking a free
//! port up front and letting the server bind it later is a race: under nextest another test
//! process may take the port in between.
//!
//!
//! Every socket a test opens to a server sets `TCP_NODELAY` ([`http_connector`], the
//! forwarders), as Go's `net` package does on every TCP connection. Without it, a request
//! written in two pieces (hyper's headers, then its body, each a TLS record) waits for the peer's
//! delayed ACK: about 40 ms a request on Linux loopback, which made 250 sequential creates take
//! 11 s instead of a fraction of one.
//!
//! [`ServerHandle::local_addr`]: sample_controller_runtime::health::ServerHandle::local_addr
//! [`ListenersHandle`]: sample_controller_runtime::manager::ListenersHandle

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The TCP connector of the tests' HTTP clients: `TCP_NODELAY` (see the module docs), and
/// `https://` URLs allowed (the TLS layer wraps it, `HttpsConnectorBuilder::wrap_connector`).
pub(crate) fn http_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http
}

/// Copies both ways between two connections of a proxy, with `TCP_NODELAY` on both (see the
/// module docs), until either side closes.
pub(crate) async fn splice(mut a: tokio::net::TcpStream, mut b: tokio::net::TcpStream) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

/// Listens on a port of its own and forwards each connection to the current target.
pub(crate) struct Forwarder {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    target: Arc<watch::Sender<Option<SocketAddr>>>,
    stop: CancellationToken,
    /// Bumped by [`Forwarder::cut`]: every connection accepted before ends.
    epoch: Arc<watch::Sender<u64>>,
}

/// Sets a [`Forwarder`]'s target from another task.
#[derive(Clone)]
pub(crate) struct Target(Arc<watch::Sender<Option<SocketAddr>>>);

impl Target {
    pub(crate) fn set(&self, to: SocketAddr) {
        self.0.send_replace(Some(to));
    }
}

impl Forwarder {
    /// Binds port 0 on the loopback interface. Connections accepted before the first target is
    /// set wait for it; a connection the target refuses is closed.
    pub(crate) async fn start() -> Forwarder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Arc::new(watch::Sender::new(None::<SocketAddr>));
        let stop = CancellationToken::new();
        let epoch = Arc::new(watch::Sender::new(0u64));
        let (rx, until, epochs) = (target.subscribe(), stop.clone(), epoch.subscribe());
        tokio::spawn(async move {
            loop {
                let inbound = tokio::select! {
                    _ = until.cancelled() => return,
                    r = listener.accept() => match r {
                        Ok((c, _)) => c,
                        Err(_) => continue,
                    },
                };
                let mut rx = rx.clone();
                let mut epochs = epochs.clone();
                epochs.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(Some(to)) = rx.wait_for(Option::is_some).await.map(|t| *t) else {
                        return;
                    };
                    if let Ok(outbound) = tokio::net::TcpStream::connect(to).await {
                        tokio::select! {
                            _ = splice(inbound, outbound) => {}
                            // Cut: both sockets close when the future is dropped.
                            _ = epochs.changed() => {}
                        }
                    }
                });
            }
        });
        Forwarder {
            addr,
            target,
            stop,
            epoch,
        }
    }

    /// Forwards new connections to `to`.
    pub(crate) fn forward_to(&self, to: SocketAddr) {
        self.target.send_replace(Some(to));
    }

    /// A handle that sets the target from another task.
    pub(crate) fn target_setter(&self) -> Target {
        Target(Arc::clone(&self.target))
    }

    /// Waits until a target is set.
    pub(crate) async fn target(&self) -> SocketAddr {
        let mut rx = self.target.subscribe();
        let to = *rx
            .wait_for(Option::is_some)
            .await
            .expect("the forwarder owns the sender");
        to.expect("waited for a target")
    }

    /// Ends every connection accepted so far (both sides see the TCP connection close, as
    /// when a load balancer or NAT drops it); new connections are forwarded as before.
    pub(crate) fn cut(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Stops listening: connections to `addr` are refused from now on.
    pub(crate) fn close(&self) {
        self.stop.cancel();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A port nothing listens on, for as long as the socket lives: bound to port 0 but not
/// listening, so a connection to it is refused, and no other socket can bind it meanwhile
/// (binding one, reading its port and closing it leaves the port free for any other test
/// process to take).
pub(crate) fn closed_port() -> tokio::net::TcpSocket {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    socket
}

/// Where a manager child process (`sample-controller run`) says its servers listen.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Listening {
    pub(crate) metrics: Option<SocketAddr>,
    pub(crate) health: Option<SocketAddr>,
}

/// A manager child process's stderr, drained on a task of its own into a string, and the
/// addresses its info lines `serving /metrics addr=...` and `serving /healthz and /readyz
/// addr=...` name (text or JSON format): start it with `--metrics-bind-address=127.0.0.1:0`
/// and `--health-probe-bind-address=127.0.0.1:0`, then read the ports here. (It logs at info
/// level, the default: leave `-v` alone or raise it, and clear `RUST_LOG`.)
pub(crate) struct ManagerLog {
    bound: watch::Receiver<Listening>,
    text: JoinHandle<String>,
}

impl ManagerLog {
    pub(crate) fn tap(stderr: ChildStderr) -> ManagerLog {
        let (tx, bound) = watch::channel(Listening::default());
        let text = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut text = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = addr_in(&line) {
                    if line.contains("serving /metrics") {
                        tx.send_modify(|l| l.metrics = Some(addr));
                    } else if line.contains("serving /healthz") {
                        tx.send_modify(|l| l.health = Some(addr));
                    }
                }
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        ManagerLog { bound, text }
    }

    async fn wait(&self, what: &str, pick: fn(&Listening) -> Option<SocketAddr>) -> SocketAddr {
        let mut rx = self.bound.clone();
        let found = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            rx.wait_for(|l| pick(l).is_some()),
        )
        .await;
        match found {
            Ok(Ok(l)) => pick(&l).expect("waited for it"),
            _ => panic!("the manager never logged the address of its {what} server"),
        }
    }

    /// The address `/metrics` bound, once logged.
    pub(crate) async fn metrics(&self) -> SocketAddr {
        self.wait("metrics", |l| l.metrics).await
    }

    /// The address the probes bound, once logged.
    pub(crate) async fn health(&self) -> SocketAddr {
        self.wait("probe", |l| l.health).await
    }

    /// Everything the process wrote to stderr (returns once it has closed it: exited).
    pub(crate) async fn text(self) -> String {
        self.text.await.expect("the stderr reader")
    }
}

/// The `addr` field of a log line: `addr=127.0.0.1:1234` (text) or `"addr":"127.0.0.1:1234"`
/// (JSON).
fn addr_in(line: &str) -> Option<SocketAddr> {
    let rest = line
        .split_once("addr=")
        .or_else(|| line.split_once("\"addr\":\""))?
        .1;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[test]
fn addr_in_reads_text_and_json_lines() {
    assert_eq!(
        addr_in(
            "2026-01-01T00:00:00Z  INFO sample_controller_runtime::manager: serving /metrics addr=127.0.0.1:4321 scheme=\"http\""
        ),
        Some(SocketAddr::from(([127, 0, 0, 1], 4321)))
    );
    assert_eq!(
        addr_in(r#"{"fields":{"message":"serving /healthz and /readyz","addr":"127.0.0.1:99"}}"#),
        Some(SocketAddr::from(([127, 0, 0, 1], 99)))
    );
    assert_eq!(addr_in("no address here"), None);
}
