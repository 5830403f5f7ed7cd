//! Connection hygiene shared by the embedded API server and the manager's metrics/probe server:
//! how many connections a server holds, how long a connection may take to send a request, how
//! long it may sit idle, and how much it may buffer.
//!
//! Go servers get these from `net/http.Server` (`ReadHeaderTimeout`, `IdleTimeout`,
//! `MaxHeaderBytes`) and `golang.org/x/net/http2.Server` (`MaxConcurrentStreams`);
//! kube-apiserver sets `ReadHeaderTimeout` 32 s, `IdleTimeout` 90 s, `MaxHeaderBytes` 1 MiB
//! and 250 HTTP/2 streams per connection (`--http2-max-streams-per-connection` unset). hyper
//! offers some of them; this module adds the rest:
//!
//! * [`ConnectionGate`]: at most `max_connections` connections at once. A connection accepted
//!   beyond that is closed at once (its file descriptor is freed immediately, so a flood can
//!   never exhaust the process's descriptors and make `accept` itself fail).
//!   [`accept_connections`] is the accept loop the manager's servers run around it.
//! * [`Activity`]: per-connection bookkeeping of requests in flight and the time of the last
//!   one, from which [`Activity::expired`] decides that a connection has gone idle: no request
//!   within [`ServingLimits::header_read_timeout`] of opening (a client that connects and sends
//!   nothing, or never finishes its TLS handshake), or none for
//!   [`ServingLimits::idle_timeout`] since the last response. A connection with a request in
//!   flight (a watch, a slow list) is never idle.
//!
//! * [`ServingFlags`]: the same limits as command-line flags (`--max-connections`,
//!   `--header-read-timeout`, `--idle-timeout`, `--http2-max-streams-per-connection`, the last
//!   one kube-apiserver's own name), shared by `sample-controller apiserver` and the manager's
//!   `run`. Each server keeps its own defaults; a flag given overrides one field, and a value
//!   that would disable a limit (zero connections, a zero timeout, zero streams) is refused with
//!   an error naming the flag.
//!
//! * Memory after a flood ([`set_memory_release`]): what a connection allocates (its task,
//!   hyper's read buffer, TLS state: 15-25 KB for a connection that sent part of a request)
//!   is freed when it closes, but glibc's malloc keeps freed memory in its arenas instead of
//!   handing it back to the system: 6,000 such connections took a server from 23 to 148 MB, and
//!   it stayed at 114 MB after every one had closed (`malloc_trim(0)` brought it back to
//!   24 MB). Counting closed connections here, a server calls the process's release function
//!   (the binaries install [`crate::malloc::release_freed_memory`], glibc's `malloc_trim`) once
//!   [`RELEASE_AFTER_CLOSES`] connections have closed: a second after the first of them (so the
//!   rest of a flood closes first), on a blocking thread, and at most once every
//!   [`RELEASE_INTERVAL`]. A few hundred closed connections cost a trim of a few milliseconds;
//!   a steady trickle of them (kubectl runs) costs one now and then. The hook is a plain `fn()`
//!   the binary installs (a library does not change its host's allocator behind its back); a
//!   program embedding a server can install the same one.
//!
//! * [`bind`]: the listening socket as Go's `net.Listen` makes it: `SO_REUSEADDR`, and a
//!   backlog of `/proc/sys/net/core/somaxconn` (Go's `maxListenerBacklog`; 4,096 on current
//!   kernels) where tokio's `TcpListener::bind` asks for 1,024. A client that opens a connection
//!   per request in flight (the kube-rs At controller of the benchmark opens thousands at once)
//!   overflowed the shorter queue: the kernel dropped 3,470 connection attempts of one
//!   30,000-At run (`TcpExtListenOverflows`), each a `Connect` error and a retry a second later
//!   for that client, where kube-apiserver's queue would have held them.
//!
//! Data in: accepted connections and the requests on them. Data out: admission permits and an
//! idle verdict; the servers close what these say to close.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections that close before the release function runs (see the module docs).
pub const RELEASE_AFTER_CLOSES: usize = 256;
/// The shortest time between two runs of the release function.
pub const RELEASE_INTERVAL: Duration = Duration::from_secs(5);
/// How long after the threshold is reached the release runs (the rest of a flood closes
/// meanwhile, so one release covers it).
const RELEASE_DELAY: Duration = Duration::from_secs(1);

static RELEASE: OnceLock<fn()> = OnceLock::new();
static CLOSED: AtomicUsize = AtomicUsize::new(0);
static RELEASE_SCHEDULED: AtomicBool = AtomicBool::new(false);
static RELEASES: AtomicU64 = AtomicU64::new(0);

/// Installs the process's way of handing freed memory back to the system (glibc:
/// `malloc_trim(0)`), run after connection floods; see the module docs. The first call wins.
pub fn set_memory_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// The release function installed by [`set_memory_release`], if any (a server of the same
/// process can run it after its own bursts).
pub fn memory_release() -> Option<fn()> {
    RELEASE.get().copied()
}

/// How many times the release function has run in this process.
pub fn memory_releases() -> u64 {
    RELEASES.load(Ordering::Relaxed)
}

/// One connection closed: counts it, and schedules a release once enough have.
fn connection_closed() {
    let Some(release) = RELEASE.get().copied() else {
        return;
    };
    if CLOSED.fetch_add(1, Ordering::Relaxed) + 1 < RELEASE_AFTER_CLOSES {
        return;
    }
    if RELEASE_SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        RELEASE_SCHEDULED.store(false, Ordering::Release);
        return;
    };
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(RELEASE_DELAY).await;
            CLOSED.store(0, Ordering::Relaxed);
            let _ = tokio::task::spawn_blocking(release).await;
            RELEASES.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(RELEASE_INTERVAL.saturating_sub(RELEASE_DELAY)).await;
            RELEASE_SCHEDULED.store(false, Ordering::Release);
            // Closed during the pause: go again (unless a close just did).
            if CLOSED.load(Ordering::Relaxed) < RELEASE_AFTER_CLOSES
                || RELEASE_SCHEDULED.swap(true, Ordering::AcqRel)
            {
                return;
            }
        }
    });
}

/// Limits of one server's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingLimits {
    /// Most connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Time a new connection has to complete its TLS handshake and send its first request
    /// headers (Go's `ReadHeaderTimeout`); also hyper's HTTP/1 header read timeout.
    pub header_read_timeout: Duration,
    /// Time a connection with no request in flight stays open (Go's `IdleTimeout`).
    pub idle_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once.
    pub http2_max_concurrent_streams: u32,
    /// Largest HTTP/1 read buffer per connection (bounds request headers; Go's `MaxHeaderBytes`).
    pub max_buf_size: usize,
}

impl Default for ServingLimits {
    fn default() -> Self {
        ServingLimits {
            max_connections: 10_000,
            header_read_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            http2_max_concurrent_streams: 250,
            max_buf_size: 1024 * 1024,
        }
    }
}

impl ServingLimits {
    /// How often a connection checks whether it has gone idle.
    pub fn check_interval(&self) -> Duration {
        (self.header_read_timeout.min(self.idle_timeout) / 4).max(Duration::from_millis(50))
    }
}

/// Connection limits as command-line flags (flatten into a clap parser). Unset flags keep the
/// server's own defaults ([`ServingFlags::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct ServingFlags {
    /// Most connections the server holds open at once; more are closed as soon as they are
    /// accepted (default: 10000 for the API server, 1024 for the metrics/probe server).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Time a new connection has to finish its TLS handshake and send its request headers, like
    /// Go's ReadHeaderTimeout (`32s`, `500ms`; default: 32s for the API server, 10s for the
    /// metrics/probe server).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub header_read_timeout: Option<Duration>,
    /// Time a keep-alive connection with no request in flight stays open, like Go's IdleTimeout
    /// (default: 90s).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub idle_timeout: Option<Duration>,
    /// HTTP/2 streams one connection may have open at once (kube-apiserver's flag; default:
    /// 250, Go's default; the metrics/probe server speaks HTTP/1.1 only and ignores it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub http2_max_streams_per_connection: Option<u32>,
}

impl ServingFlags {
    /// `defaults` with every flag that was given put in its place.
    pub fn apply(&self, defaults: ServingLimits) -> ServingLimits {
        ServingLimits {
            max_connections: self
                .max_connections
                .map_or(defaults.max_connections, |n| n as usize),
            header_read_timeout: self
                .header_read_timeout
                .unwrap_or(defaults.header_read_timeout),
            idle_timeout: self.idle_timeout.unwrap_or(defaults.idle_timeout),
            http2_max_concurrent_streams: self
                .http2_max_streams_per_connection
                .unwrap_or(defaults.http2_max_concurrent_streams),
            max_buf_size: defaults.max_buf_size,
        }
    }
}

/// A duration flag that must be above zero (a zero timeout would close every connection).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match crate::duration::parse(s)? {
        d if d.is_zero() => Err(format!(
            "{s:?} is zero; the timeout must be above zero, e.g. 30s"
        )),
        d => Ok(d),
    }
}

/// The backlog Go's `net.Listen` asks for on Linux (`maxListenerBacklog`): the kernel's
/// `somaxconn`, 4,096 when it cannot be read (Go's `syscall.SOMAXCONN`), at most 65,535.
pub fn listen_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(4096)
        .min(u32::from(u16::MAX))
}

/// Binds a listening socket as Go's `net.Listen("tcp", addr)` does: `SO_REUSEADDR` on, the
/// backlog [`listen_backlog`] (see the module docs).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(listen_backlog())
}

/// Counts open connections against [`ServingLimits::max_connections`].
#[derive(Clone, Debug)]
pub struct ConnectionGate {
    slots: Arc<Semaphore>,
}

impl ConnectionGate {
    /// A gate for `max` connections (at least one).
    pub fn new(max: usize) -> Self {
        ConnectionGate {
            slots: Arc::new(Semaphore::new(max.max(1))),
        }
    }

    /// A slot for one connection, held until dropped; `None` when the server is full.
    pub fn try_admit(&self) -> Option<Slot> {
        self.slots
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|p| Slot { _permit: p })
    }

    /// Connections that could still be admitted.
    pub fn available(&self) -> usize {
        self.slots.available_permits()
    }
}

/// The first pause after a failed `accept`, doubled on each failure in a row up to
/// [`ACCEPT_RETRY_MAX`] (Go's `net/http.Server.Serve`: 5 ms to 1 s).
pub const ACCEPT_RETRY_MIN: Duration = Duration::from_millis(5);
/// The longest pause after failed `accept`s in a row.
pub const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(1);

/// The accept loop of the manager's probe, metrics and webhook servers (the embedded API
/// server runs one of its own that does the same and, at its limit, sheds the oldest silent
/// connection for a newcomer): accepts connections on `listener` until `stop` completes, sets
/// `TCP_NODELAY` on each as Go does, and hands each one `gate` admits to `admitted` with its
/// [`Slot`] (which the connection's task holds until it ends). A connection over the limit is
/// closed at once. An
/// `accept` that fails (out of file descriptors, a connection reset before it was accepted) is
/// logged and retried after a pause that doubles while the failures last, as Go's
/// `net/http.Server` does, so a persistent failure is neither a hot loop nor fatal. `name`
/// says which server in the log lines.
pub async fn accept_connections<F>(
    name: &str,
    listener: &TcpListener,
    gate: &ConnectionGate,
    stop: impl Future<Output = ()>,
    mut admitted: F,
) where
    F: FnMut(TcpStream, SocketAddr, Slot),
{
    let mut stop = std::pin::pin!(stop);
    let mut pause = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                pause = Duration::ZERO;
                a
            }
            Err(e) => {
                pause = (pause * 2).clamp(ACCEPT_RETRY_MIN, ACCEPT_RETRY_MAX);
                tracing::warn!(server = name, error = %e, retry_in = ?pause, "accept failed");
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        // As Go's net package does on every TCP connection: a response written in pieces
        // (headers, then body, each a TLS record) goes out at once rather than after the
        // client's delayed ACK (about 40 ms on Linux).
        let _ = stream.set_nodelay(true);
        let Some(slot) = gate.try_admit() else {
            tracing::debug!(server = name, %peer, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        };
        admitted(stream, peer, slot);
    }
}

/// One admitted connection's place in a [`ConnectionGate`]; dropping it frees the place and
/// counts the connection as closed (towards a memory release, see the module docs).
#[derive(Debug)]
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        connection_closed();
    }
}

/// Requests in flight on one connection and when the last one began or ended.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last request start or end.
    last_ms: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }
}

impl Activity {
    /// A connection opened now.
    pub fn new() -> Arc<Self> {
        Arc::new(Activity::default())
    }

    fn touch(&self) {
        let ms = self.opened.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// A request began; it counts as in flight until the guard is dropped (hold it in the
    /// response body so a streaming response keeps the connection busy).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.touch();
        InFlight(self.clone())
    }

    /// Whether the connection should be closed: nothing in flight, and no request within the
    /// header timeout of opening, or none within the idle timeout since the last one.
    pub fn expired(&self, limits: &ServingLimits) -> bool {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return false;
        }
        let since_open = self.opened.elapsed();
        if self.requests.load(Ordering::Relaxed) == 0 {
            return since_open >= limits.header_read_timeout;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        since_open.saturating_sub(last) >= limits.idle_timeout
    }
}

/// One request in flight; see [`Activity::begin`].
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_is_the_kernels_somaxconn_as_go_asks() {
        let backlog = listen_backlog();
        match std::fs::read_to_string("/proc/sys/net/core/somaxconn") {
            Ok(text) => {
                let n: u32 = text.trim().parse().unwrap();
                let want = if n == 0 { 4096 } else { n.min(65_535) };
                assert_eq!(backlog, want);
            }
            Err(_) => assert_eq!(backlog, 4096),
        }
    }

    #[tokio::test]
    async fn bind_listens_and_a_taken_address_is_an_error() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        assert_eq!(
            accepted.unwrap().0.peer_addr().unwrap(),
            client.unwrap().local_addr().unwrap()
        );
        let err = bind(addr).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        flags: ServingFlags,
    }

    fn parse(args: &[&str]) -> Result<ServingFlags, String> {
        use clap::Parser;
        let argv = std::iter::once("server").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map(|c| c.flags)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_override_only_what_they_name() {
        let defaults = ServingLimits::default();
        assert_eq!(parse(&[]).unwrap().apply(defaults.clone()), defaults);
        let flags = parse(&[
            "--max-connections",
            "64",
            "--header-read-timeout",
            "500ms",
            "--idle-timeout",
            "2m",
            "--http2-max-streams-per-connection",
            "8",
        ])
        .unwrap();
        let limits = flags.apply(defaults.clone());
        assert_eq!(limits.max_connections, 64);
        assert_eq!(limits.header_read_timeout, Duration::from_millis(500));
        assert_eq!(limits.idle_timeout, Duration::from_secs(120));
        assert_eq!(limits.http2_max_concurrent_streams, 8);
        assert_eq!(limits.max_buf_size, defaults.max_buf_size);
    }

    #[test]
    fn bad_flag_values_are_refused_naming_the_flag() {
        for (flag, value) in [
            ("--max-connections", "0"),
            ("--max-connections", "-3"),
            ("--max-connections", "many"),
            ("--header-read-timeout", "0s"),
            ("--header-read-timeout", "10"),
            ("--idle-timeout", "0"),
            ("--idle-timeout", "-1s"),
            ("--http2-max-streams-per-connection", "0"),
            ("--http2-max-streams-per-connection", "99999999999"),
        ] {
            let arg = format!("{flag}={value}");
            let e = parse(&[&arg]).expect_err(&format!("{arg} accepted"));
            assert!(e.contains(flag), "{flag} {value}: {e}");
            assert!(e.contains(value), "{flag} {value}: {e}");
        }
    }

    static TEST_RELEASES: AtomicUsize = AtomicUsize::new(0);

    fn count_release() {
        TEST_RELEASES.fetch_add(1, Ordering::SeqCst);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_closed_connections_releases_memory_once() {
        set_memory_release(count_release);
        let gate = ConnectionGate::new(10_000);
        let slots: Vec<Slot> = (0..RELEASE_AFTER_CLOSES - 1)
            .map(|_| gate.try_admit().unwrap())
            .collect();
        drop(slots);
        tokio::time::sleep(RELEASE_INTERVAL * 2).await;
        assert_eq!(
            TEST_RELEASES.load(Ordering::SeqCst),
            0,
            "below the threshold"
        );
        // The flood: many more close within the delay; one release covers them all.
        let slots: Vec<Slot> = (0..3 * RELEASE_AFTER_CLOSES)
            .map(|_| gate.try_admit().unwrap())
            .collect();
        drop(slots);
        for _ in 0..100 {
            if TEST_RELEASES.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(TEST_RELEASES.load(Ordering::SeqCst), 1);
        tokio::time::sleep(RELEASE_INTERVAL * 2).await;
        assert_eq!(
            TEST_RELEASES.load(Ordering::SeqCst),
            1,
            "nothing closed since"
        );
        assert_eq!(gate.available(), 10_000);
    }

    #[tokio::test]
    async fn the_accept_loop_hands_over_what_the_gate_admits_and_closes_the_rest() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = ConnectionGate::new(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (kept_tx, mut kept_rx) = tokio::sync::mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            let stop = async {
                let _ = stop_rx.await;
            };
            accept_connections("test", &listener, &gate, stop, |stream, _peer, slot| {
                // The connection keeps its slot while it is open.
                kept_tx.send((stream, slot)).unwrap();
            })
            .await;
        });
        let _first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let kept = kept_rx
            .recv()
            .await
            .expect("the first connection is admitted");
        // The second finds the gate full: closed at once, so the client reads end of stream.
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), second.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
        assert!(kept_rx.try_recv().is_err(), "nothing else was handed over");
        // Closing the first frees its place for the next.
        drop(kept);
        let _third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            kept_rx.recv().await.is_some(),
            "the third connection is admitted"
        );
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the loop returns once stopped")
            .unwrap();
    }

    #[test]
    fn the_gate_admits_up_to_its_limit() {
        let gate = ConnectionGate::new(2);
        let a = gate.try_admit().unwrap();
        let _b = gate.try_admit().unwrap();
        assert!(gate.try_admit().is_none());
        drop(a);
        assert!(gate.try_admit().is_some());
    }

    #[test]
    fn idle_means_nothing_in_flight_for_long_enough() {
        let limits = ServingLimits {
            header_read_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            ..ServingLimits::default()
        };
        let act = Activity::new();
        assert!(act.expired(&limits), "no request at all");
        let req = act.begin();
        assert!(!act.expired(&limits), "a request in flight");
        drop(req);
        assert!(act.expired(&limits));
        let patient = ServingLimits::default();
        assert!(!Activity::new().expired(&patient));
    }
}
