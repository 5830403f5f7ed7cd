//! Container logs: the bounded buffers the node writes into, and `GET .../pods/NAME/log`.
//!
//! ## What a real cluster does
//!
//! The container runtime writes each container's stdout and stderr to a file on the node, one
//! record per line, each stamped with the time it was written (the CRI log format). `kubectl
//! logs` asks the API server for the `log` subresource of a pod; the server looks the pod up,
//! checks the container, and proxies the request to the kubelet of the pod's node, which reads
//! the file and streams it back as `text/plain`. The options (`PodLogOptions`) are:
//!
//! | query parameter | meaning |
//! |---|---|
//! | `container` | which container; may be left out only when the pod has exactly one |
//! | `follow` | keep the response open and send lines as they are written, until the container ends |
//! | `previous` | the log of the container's previous instance (before its last restart) |
//! | `timestamps` | prefix every line with its RFC 3339 time (nanoseconds) and a space |
//! | `tailLines` | only the last N lines |
//! | `sinceSeconds` / `sinceTime` | only lines written in the last N seconds / since a time (not both) |
//! | `limitBytes` | stop after N bytes of output (the line that crosses the limit is cut) |
//!
//! The kubelet rotates log files by size, so old output eventually disappears: a log is never
//! complete history.
//!
//! ## What this module keeps
//!
//! The node ([`crate::kubelet`] and [`crate::runtime`]) writes each container *instance* (one
//! run of the container; a restart starts a new instance) into a [`LogBuffer`]: a queue of
//! timestamped lines holding at most a configured number of bytes
//! (`ClusterBuilder::pod_log_bytes` (crate `embedded-cluster`), default [`DEFAULT_LOG_BYTES`]). When a write
//! passes the cap, the **oldest lines go first**; a single line larger than the whole cap keeps
//! only its last bytes. The [`LogStore`] keeps, per pod (and pod uid) and container, the current
//! instance and the previous one, which is what `previous=true` reads. The logs of a pod go
//! when the pod object goes.
//!
//! [`serve`] answers the subresource with the real server's errors for the common mistakes
//! (`a container name must be specified for pod p, choose one of: [a b]`, `container c is not
//! valid for pod p`, `container "c" in pod "p" is waiting to start: ContainerCreating`,
//! `previous terminated container "c" in pod "p" not found`) and the real validation of the
//! options (422 `PodLogOptions ... is invalid`). A `follow` response is a stream that ends when
//! the instance ends (the process exits) or the server shuts down.
//!
//! Lines are split at `\n`; a line longer than [`MAX_LINE`] bytes is split into several
//! records, as the CRI splits long lines into partial records.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use embedded_apiserver::ApiError;
use embedded_apiserver::kubelet::Body;
use embedded_apiserver::kubelet::{LogOptions, LogsRequest};

/// Default cap of one container instance's log buffer: 1 MiB.
pub const DEFAULT_LOG_BYTES: usize = 1024 * 1024;

/// Longest record: a longer line is stored as several records (the CRI's 16 KiB).
pub const MAX_LINE: usize = 16 * 1024;

/// One record: a line (with its `\n`, unless it was cut or is the last, unfinished one) and
/// the time it was written.
#[derive(Clone, Debug)]
pub struct Line {
    /// When the node read it.
    pub time: jiff::Timestamp,
    /// The bytes.
    pub text: Bytes,
}

#[derive(Debug, Default)]
struct Inner {
    lines: VecDeque<Line>,
    bytes: usize,
    /// Sequence number of `lines[0]`; numbers grow by one per record and are never reused.
    first_seq: u64,
    /// The instance has ended: no more lines will come.
    closed: bool,
}

/// The log of one container instance: at most `cap` bytes of timestamped lines.
#[derive(Debug)]
pub struct LogBuffer {
    cap: usize,
    inner: Mutex<Inner>,
    /// Bumped on every append and on close, for followers.
    changed: watch::Sender<u64>,
}

impl LogBuffer {
    /// An empty, open buffer holding at most `cap` bytes (at least 1).
    pub fn new(cap: usize) -> Self {
        LogBuffer {
            cap: cap.max(1),
            inner: Mutex::new(Inner::default()),
            changed: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends one record written at `time`, dropping the oldest records beyond the cap.
    pub fn append(&self, time: jiff::Timestamp, text: impl Into<Bytes>) {
        let mut text: Bytes = text.into();
        if text.is_empty() {
            return;
        }
        if text.len() > self.cap {
            text = text.slice(text.len() - self.cap..);
        }
        {
            let mut g = self.lock();
            g.bytes += text.len();
            g.lines.push_back(Line { time, text });
            while g.bytes > self.cap {
                let Some(old) = g.lines.pop_front() else {
                    break;
                };
                g.bytes -= old.text.len();
                g.first_seq += 1;
            }
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Appends every line of `text` (a convenience for messages the node writes itself).
    pub fn append_text(&self, time: jiff::Timestamp, text: &str) {
        for line in text.split_inclusive('\n') {
            self.append(time, Bytes::copy_from_slice(line.as_bytes()));
        }
    }

    /// Marks the instance ended: followers finish once they have sent everything.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether the instance has ended.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Bytes held now (at most the cap).
    pub fn len_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The whole log as one byte string (what `kubectl logs` without options prints).
    pub fn contents(&self) -> Vec<u8> {
        self.lock()
            .lines
            .iter()
            .flat_map(|l| l.text.iter().copied())
            .collect()
    }

    /// Records from sequence number `from` on (from the oldest kept, if `from` was dropped),
    /// the sequence number after the last one returned, and whether the instance has ended.
    fn read_from(&self, from: u64) -> (Vec<Line>, u64, bool) {
        let g = self.lock();
        let start = from.max(g.first_seq);
        let skip = usize::try_from(start - g.first_seq).unwrap_or(usize::MAX);
        let lines: Vec<Line> = g.lines.iter().skip(skip).cloned().collect();
        let next = g.first_seq + g.lines.len() as u64;
        (lines, next, g.closed)
    }
}

/// Accumulates a process's output and cuts it into records at `\n` (or at [`MAX_LINE`]).
#[derive(Debug, Default)]
pub struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes; returns the complete records they finish.
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<Bytes> {
        let mut out = vec![];
        while !data.is_empty() {
            let room = MAX_LINE - self.partial.len();
            let window = &data[..data.len().min(room)];
            match window.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.partial.extend_from_slice(&window[..=i]);
                    out.push(Bytes::from(std::mem::take(&mut self.partial)));
                    data = &data[i + 1..];
                }
                None => {
                    self.partial.extend_from_slice(window);
                    data = &data[window.len()..];
                    if self.partial.len() >= MAX_LINE {
                        out.push(Bytes::from(std::mem::take(&mut self.partial)));
                    }
                }
            }
        }
        out
    }

    /// The unfinished last line, if any (at end of output).
    pub fn finish(&mut self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.partial)))
    }
}

#[derive(Debug)]
struct ContainerLogs {
    current: Arc<LogBuffer>,
    previous: Option<Arc<LogBuffer>>,
}

#[derive(Debug)]
struct PodLogs {
    uid: String,
    containers: HashMap<String, ContainerLogs>,
}

/// Every pod's container logs, by namespace, pod name and container. Cheap to share.
#[derive(Debug)]
pub struct LogStore {
    cap: usize,
    pods: Mutex<HashMap<(String, String), PodLogs>>,
}

impl Default for LogStore {
    fn default() -> Self {
        LogStore::new(DEFAULT_LOG_BYTES)
    }
}

impl LogStore {
    /// A store whose buffers hold at most `cap` bytes each.
    pub fn new(cap: usize) -> Self {
        LogStore {
            cap,
            pods: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), PodLogs>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a new instance of `container` in pod `namespace/pod` (with `uid`): the current
    /// buffer (closed) becomes the previous one. Logs of an older pod of the same name go.
    pub fn start_instance(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
    ) -> Arc<LogBuffer> {
        let buf = Arc::new(LogBuffer::new(self.cap));
        let mut pods = self.lock();
        let entry = pods
            .entry((namespace.to_owned(), pod.to_owned()))
            .or_insert_with(|| PodLogs {
                uid: uid.to_owned(),
                containers: HashMap::new(),
            });
        if entry.uid != uid {
            entry.uid = uid.to_owned();
            entry.containers.clear();
        }
        let previous = entry.containers.remove(container).map(|c| {
            c.current.close();
            c.current
        });
        entry.containers.insert(
            container.to_owned(),
            ContainerLogs {
                current: buf.clone(),
                previous,
            },
        );
        buf
    }

    /// The current (or, with `previous`, the previous) instance of a container of the pod
    /// with `uid`.
    pub fn get(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
        previous: bool,
    ) -> Option<Arc<LogBuffer>> {
        let pods = self.lock();
        let p = pods.get(&(namespace.to_owned(), pod.to_owned()))?;
        if p.uid != uid {
            return None;
        }
        let c = p.containers.get(container)?;
        if previous {
            c.previous.clone()
        } else {
            Some(c.current.clone())
        }
    }

    /// Forgets the logs of pod `namespace/pod` if they belong to `uid` (the pod is gone).
    pub fn remove_pod(&self, namespace: &str, pod: &str, uid: &str) {
        let mut pods = self.lock();
        let key = (namespace.to_owned(), pod.to_owned());
        if pods.get(&key).is_some_and(|p| p.uid == uid)
            && let Some(p) = pods.remove(&key)
        {
            for c in p.containers.values() {
                c.current.close();
            }
        }
    }

    /// Forgets the logs of pod `namespace/pod`, whatever its uid (the object is gone).
    pub fn remove(&self, namespace: &str, pod: &str) {
        if let Some(p) = self.lock().remove(&(namespace.to_owned(), pod.to_owned())) {
            for c in p.containers.values() {
                c.current.close();
            }
        }
    }

    /// Forgets the logs of the pods at `keys` (namespace, name) that the node no longer holds
    /// (`uid_of` answers `None`) or holds as another pod (another uid): what
    /// [`LogStore::retain_existing`] does, for the pods a batch of changes touched, at the cost
    /// of the batch rather than of every pod the node holds. Then, if the store still holds logs
    /// of more pods than `held` (the node's pod count), some pod left without passing through a
    /// batch (a log started after its pod went), and the whole store is swept.
    pub fn forget_gone<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k (String, String)>,
        uid_of: impl Fn(&(String, String)) -> Option<String>,
        held: usize,
        alive: impl FnOnce() -> std::collections::HashSet<(String, String, String)>,
    ) {
        let mut pods = self.lock();
        for key in keys {
            let gone = match pods.get(key) {
                Some(p) => uid_of(key).is_none_or(|uid| uid != p.uid),
                None => false,
            };
            if gone && let Some(p) = pods.remove(key) {
                for c in p.containers.values() {
                    c.current.close();
                }
            }
        }
        if pods.len() > held {
            drop(pods);
            self.retain_existing(&alive());
        }
    }

    /// Forgets the logs of every pod not in `alive` (by namespace, name and uid): the pods the
    /// node still knows of.
    pub fn retain_existing(&self, alive: &std::collections::HashSet<(String, String, String)>) {
        let mut pods = self.lock();
        pods.retain(|(ns, name), p| {
            let keep = alive.contains(&(ns.clone(), name.clone(), p.uid.clone()));
            if !keep {
                for c in p.containers.values() {
                    c.current.close();
                }
            }
            keep
        });
    }
}

/// RFC 3339 with nanoseconds, as the kubelet prefixes lines with `timestamps=true`.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%fZ").to_string()
}

/// Renders records with the options' `timestamps`, counting against `left` (`limitBytes`).
/// Returns the bytes and whether the limit is used up.
fn render(lines: &[Line], timestamps: bool, left: &mut Option<u64>) -> (Vec<u8>, bool) {
    let mut out = vec![];
    for l in lines {
        let mut rec = vec![];
        if timestamps {
            rec.extend_from_slice(format_time(l.time).as_bytes());
            rec.push(b' ');
        }
        rec.extend_from_slice(&l.text);
        if let Some(n) = left {
            let take = usize::try_from(*n).unwrap_or(usize::MAX).min(rec.len());
            out.extend_from_slice(&rec[..take]);
            *n -= take as u64;
            if *n == 0 {
                return (out, true);
            }
        } else {
            out.extend_from_slice(&rec);
        }
    }
    (out, false)
}

/// The first lines to send: `since` then `tailLines` applied to what the buffer holds.
fn initial(buf: &LogBuffer, opts: &LogOptions) -> (Vec<Line>, u64, bool) {
    let (mut lines, next, closed) = buf.read_from(0);
    if let Some(since) = opts.since {
        lines.retain(|l| l.time >= since);
    }
    if let Some(n) = opts.tail_lines {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if lines.len() > n {
            lines.drain(..lines.len() - n);
        }
    }
    (lines, next, closed)
}

fn text_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

/// The kubelet's `/containerLogs`: the log of one container instance as `text/plain`, streamed
/// with `follow=true` until the instance ends or `shutdown` fires. The API server has checked
/// the options and the container ([`embedded_apiserver::kubelet::LogsRequest`]).
pub fn serve(
    logs: &Arc<LogStore>,
    request: LogsRequest,
    shutdown: CancellationToken,
) -> Result<Response<Body>, ApiError> {
    let LogsRequest {
        pod,
        container,
        options: opts,
    } = request;
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let Some(buf) = logs.get(namespace, name, uid, &container, opts.previous) else {
        if opts.previous {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        let reason = ["containerStatuses", "initContainerStatuses"]
            .iter()
            .filter_map(|f| pod["status"][*f].as_array())
            .flatten()
            .find(|s| s["name"] == container.as_str())
            .and_then(|s| s["state"]["waiting"]["reason"].as_str())
            .unwrap_or("ContainerCreating")
            .to_owned();
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    };
    let (lines, next, closed) = initial(&buf, &opts);
    let mut left = opts.limit_bytes;
    let (first, used_up) = render(&lines, opts.timestamps, &mut left);
    if !opts.follow || used_up || closed {
        return Ok(text_response(Full::new(Bytes::from(first)).boxed()));
    }
    let state = Follow {
        buf,
        rx: None,
        next,
        left,
        timestamps: opts.timestamps,
        pending: (!first.is_empty()).then(|| Bytes::from(first)),
        done: false,
        shutdown,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(b) = st.pending.take() {
                return Some((Ok::<_, Infallible>(Frame::data(b)), st));
            }
            if st.done {
                return None;
            }
            st.wait().await;
        }
    });
    Ok(text_response(BodyExt::boxed(StreamBody::new(stream))))
}

/// A `follow` stream's position.
struct Follow {
    buf: Arc<LogBuffer>,
    rx: Option<watch::Receiver<u64>>,
    next: u64,
    left: Option<u64>,
    timestamps: bool,
    pending: Option<Bytes>,
    done: bool,
    shutdown: CancellationToken,
}

impl Follow {
    /// Waits for new lines (or the end) and queues them.
    async fn wait(&mut self) {
        let rx = self.rx.get_or_insert_with(|| self.buf.changed.subscribe());
        loop {
            // Subscribed before reading, so no append between read and wait is missed.
            rx.borrow_and_update();
            let (lines, next, closed) = self.buf.read_from(self.next);
            self.next = next;
            if !lines.is_empty() {
                let (bytes, used_up) = render(&lines, self.timestamps, &mut self.left);
                self.done = used_up || closed;
                if !bytes.is_empty() {
                    self.pending = Some(Bytes::from(bytes));
                }
                return;
            }
            if closed {
                self.done = true;
                return;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => {
                    self.done = true;
                    return;
                }
                r = rx.changed() => if r.is_err() {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    #[test]
    fn the_oldest_lines_go_first_when_the_buffer_is_full() {
        let b = LogBuffer::new(10);
        b.append(t(0), "aaaa\n");
        b.append(t(1), "bbbb\n");
        assert_eq!(b.contents(), b"aaaa\nbbbb\n");
        b.append(t(2), "cc\n");
        assert_eq!(b.contents(), b"bbbb\ncc\n");
        assert!(b.len_bytes() <= 10);
        // A line larger than the whole buffer keeps its last bytes.
        b.append(t(3), "0123456789abcdef\n");
        assert_eq!(b.contents(), b"789abcdef\n");
    }

    #[test]
    fn the_splitter_cuts_at_newlines_and_long_lines() {
        let mut s = LineSplitter::default();
        assert_eq!(s.feed(b"one\ntw"), vec![Bytes::from("one\n")]);
        assert_eq!(s.feed(b"o\nthree"), vec![Bytes::from("two\n")]);
        assert_eq!(s.finish(), Some(Bytes::from("three")));
        let long = vec![b'x'; MAX_LINE + 5];
        let recs = s.feed(&long);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].len(), MAX_LINE);
        assert_eq!(s.finish().map(|b| b.len()), Some(5));
    }

    #[test]
    fn tail_since_timestamps_and_limit() {
        let b = LogBuffer::new(1000);
        for i in 0..5 {
            b.append(t(i), format!("line{i}\n"));
        }
        let opts = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        let (lines, _, _) = initial(&b, &opts);
        assert_eq!(render(&lines, false, &mut None).0, b"line3\nline4\n");
        let opts = LogOptions {
            since: Some(t(3)),
            ..Default::default()
        };
        let (lines, _, _) = initial(&b, &opts);
        assert_eq!(lines.len(), 2);
        let (out, _) = render(&lines[..1], true, &mut None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{} line3\n", format_time(t(3)))
        );
        let (lines, _, _) = initial(&b, &LogOptions::default());
        let mut left = Some(8);
        let (out, used_up) = render(&lines, false, &mut left);
        assert_eq!(out, b"line0\nli");
        assert!(used_up);
    }

    #[test]
    fn a_restart_keeps_the_previous_instance() {
        let s = LogStore::new(100);
        let first = s.start_instance("ns", "p", "u1", "c");
        first.append(t(0), "one\n");
        let second = s.start_instance("ns", "p", "u1", "c");
        second.append(t(1), "two\n");
        assert!(first.is_closed());
        let prev = s.get("ns", "p", "u1", "c", true).unwrap();
        assert_eq!(prev.contents(), b"one\n");
        assert_eq!(
            s.get("ns", "p", "u1", "c", false).unwrap().contents(),
            b"two\n"
        );
        assert!(s.get("ns", "p", "u2", "c", false).is_none());
        s.remove_pod("ns", "p", "u1");
        assert!(s.get("ns", "p", "u1", "c", false).is_none());
    }
}
