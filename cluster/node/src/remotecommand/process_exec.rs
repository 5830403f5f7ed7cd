//! Exec, attach and port-forward on the process node: the container runtime's part.
//!
//! ## What a container runtime does
//!
//! For `exec`, containerd (its CRI plugin, `internal/cri/server/container_execsync.go` and
//! `streaming.go`) starts a new process in the running container's namespaces, with the
//! container's environment and working directory, and copies the client's streams to and
//! from it; with `tty` the process gets a pseudo-terminal, so its stdout and stderr are one
//! stream, and resize events change the terminal's size. For `attach` it joins the
//! container's own process: the client receives the output the process writes from then on,
//! and, when the container was created with `stdin: true`, what the client sends goes to the
//! process's stdin (`stdinOnce: true`: the first attached client that closes its input closes
//! the container's stdin for good, `pkg/apis/core/types.go`). For `port-forward` it dials
//! `localhost:PORT` inside the pod's network namespace.
//!
//! ## What the process node does
//!
//! * **exec** starts the command as a child of the server with what the container's own
//!   process gets (`runtime::process_command`: the clean environment, the
//!   container's `env` values, its `workingDir`), in a process group of its own. Its stdin is
//!   a pipe when the client sends stdin (closed when the client half-closes), its stdout and
//!   stderr pipes copied to the client's streams through 32 KiB buffers, each chunk flushed.
//!   There is **no pseudo-terminal** (that would need `openpty`, unsafe code this crate does
//!   not contain): with `tty` both stdout and stderr are one pipe, as a terminal has one
//!   output, and resize events are read and discarded. Programs that check `isatty` behave as
//!   without a terminal (a shell prints no prompt);
//! * the command's **end**: its exit code (128 + the signal for a killed one) becomes the
//!   Status of [`super`]. What is left of its process group is killed, and
//!   the output it had written is sent (at most `runtime::DRAIN_TIMEOUT`, 2 s, of
//!   draining). A command that cannot start (not found, not executable) ends the session with
//!   an `InternalError` Status naming the error, as the kubelet reports a runtime error;
//! * the **client going away**: a failed write to its stdout or stderr, or the transport
//!   dropping the session, kills the process group (SIGKILL) and reaps it, on the server's
//!   task tracker; the server shutting down does the same. So an exec never outlives its
//!   client or the server;
//! * **attach** follows the container's live output (chunks as the node reads them from the
//!   process, the same bytes that go to the log; a client that falls 64 chunks behind misses
//!   the oldest), and writes the client's input to the container's stdin pipe when the
//!   container has `stdin: true` (input sent to a container without it is read and dropped).
//!   `stdinOnce` closes that pipe when the client's input ends (or the client goes). The
//!   attach ends, with a Success Status, when the container's process has exited and its
//!   output has been sent;
//! * **port-forward**: the process node runs every pod on the host's network (no network
//!   namespaces), so the pod's port `P` is the host's `127.0.0.1:P` (or `[::1]:P`). A pod
//!   that listens on port 80 therefore needs the right to bind it on the host, and two pods
//!   cannot listen on the same port.

use std::process::Stdio;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio_util::task::TaskTracker;

use super::{Reader, StreamOptions, Streams, Writer, exit_failure, internal_error, success};
use crate::client::Key;
use crate::runtime::{DRAIN_TIMEOUT, NodeHandle, RunningContainer, process_command, signal_group};

/// The buffer each output and input copy uses.
const CHUNK: usize = 32 * 1024;

/// Runs `command` in the container's context with the client's streams (see the module doc);
/// returns the Status for the error stream.
pub(crate) async fn exec(
    node: &NodeHandle,
    key: &Key,
    running: &RunningContainer,
    command: &[String],
    opts: StreamOptions,
    streams: Streams,
) -> Value {
    let Streams {
        stdin,
        stdout,
        stderr,
        resize,
    } = streams;
    let mut cmd = process_command(key, &running.spec, command, &running.mounts);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut merged = None;
    if opts.tty {
        // One pipe behind both stdout and stderr, as a terminal has one output.
        let (reader, writer) = match std::io::pipe() {
            Ok(p) => p,
            Err(e) => return internal_error(&format!("creating the output pipe: {e}")),
        };
        let second = match writer.try_clone() {
            Ok(w) => w,
            Err(e) => return internal_error(&format!("creating the output pipe: {e}")),
        };
        cmd.stdout(writer).stderr(second);
        merged = Some(reader);
    } else {
        let out = |wanted: bool| {
            if wanted {
                Stdio::piped()
            } else {
                Stdio::null()
            }
        };
        cmd.stdout(out(stdout.is_some()))
            .stderr(out(stderr.is_some()));
    }
    let spawned = cmd.spawn();
    // The command holds the parent's copies of the merged pipe's write end: drop them, or the
    // reader never sees the end of the output.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return internal_error(&format!(
                "error executing command in container: failed to exec in container: exec: {:?}: {e}",
                command.first().map(String::as_str).unwrap_or_default()
            ));
        }
    };
    let pid = child.id().unwrap_or(0);
    tracing::debug!(namespace = %key.0, pod = %key.1, pid, "exec started");
    let child_stdin = child.stdin.take();
    let (out_pipe, err_pipe): (Option<Reader>, Option<Reader>) = match merged {
        Some(reader) => {
            let pipe = std::os::fd::OwnedFd::from(reader);
            match tokio::net::unix::pipe::Receiver::from_owned_fd(pipe) {
                Ok(r) => (Some(Box::new(r)), None),
                Err(e) => {
                    kill_now(&mut child, pid).await;
                    return internal_error(&format!("reading the output pipe: {e}"));
                }
            }
        }
        None => (
            child.stdout.take().map(|p| Box::new(p) as Reader),
            child.stderr.take().map(|p| Box::new(p) as Reader),
        ),
    };
    let mut guard = ProcessGuard {
        child: Some(child),
        pgid: pid,
        tracker: node.tracker().clone(),
    };
    let Some(child) = guard.child.as_mut() else {
        return internal_error("the process is gone");
    };
    let (out_writer, err_writer) = if opts.tty {
        (stdout, None)
    } else {
        (stdout, stderr)
    };
    let outputs = async {
        tokio::try_join!(
            pump_out(out_pipe, out_writer),
            pump_out(err_pipe, err_writer)
        )
    };
    let input = pump_in(stdin, child_stdin);
    let resized = drain(resize);
    tokio::pin!(outputs, input, resized);
    let (mut outputs_done, mut input_done, mut resize_done) = (false, false, false);
    let shutdown = node.shutdown().clone();
    let exit = loop {
        tokio::select! {
            s = child.wait() => break s,
            r = &mut outputs, if !outputs_done => {
                outputs_done = true;
                if r.is_err() {
                    // The client went away: nobody reads the Status either.
                    tracing::debug!(namespace = %key.0, pod = %key.1, pid, "exec client gone; killing the command");
                    return internal_error("the client went away");
                }
            }
            () = &mut input, if !input_done => input_done = true,
            () = &mut resized, if !resize_done => resize_done = true,
            () = shutdown.cancelled() => return internal_error("the server is shutting down"),
        }
    };
    // The leader is gone; anything it left in its group goes too (as a container's).
    signal_group(pid, "KILL").await;
    guard.child = None;
    if !outputs_done && let Ok(Err(_)) = tokio::time::timeout(DRAIN_TIMEOUT, &mut outputs).await {
        return internal_error("the client went away");
    }
    let code = match exit {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
        }
        Err(e) => return internal_error(&format!("waiting for the command: {e}")),
    };
    tracing::debug!(namespace = %key.0, pod = %key.1, pid, code, "exec ended");
    if code == 0 {
        success()
    } else {
        exit_failure(code, command)
    }
}

/// Joins the container's own process (see the module doc); returns the Status for the error
/// stream once the process has exited and its output has been sent.
pub(crate) async fn attach(
    running: &Arc<RunningContainer>,
    opts: StreamOptions,
    streams: Streams,
) -> Value {
    let Streams {
        stdin,
        mut stdout,
        stderr,
        resize,
    } = streams;
    let mut stderr = if opts.tty { None } else { stderr };
    let mut out_rx = running.stdout.subscribe();
    let mut err_rx = running.stderr.subscribe();
    let _stdin_once = StdinOnce {
        running: running.clone(),
        armed: stdin.is_some() && running.spec["stdinOnce"] == true,
    };
    let input = attach_input(running, stdin);
    let resized = drain(resize);
    tokio::pin!(input, resized);
    let (mut input_done, mut resize_done) = (false, false);
    loop {
        // With a tty both outputs go to the one output stream.
        tokio::select! {
            chunk = out_rx.recv() => match chunk {
                Ok(b) => {
                    if write_chunk(stdout.as_mut(), &b).await.is_err() {
                        return internal_error("the client went away");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            chunk = err_rx.recv() => match chunk {
                Ok(b) => {
                    let to = if opts.tty { stdout.as_mut() } else { stderr.as_mut() };
                    if write_chunk(to, &b).await.is_err() {
                        return internal_error("the client went away");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            () = running.ended.cancelled() => break,
            () = &mut input, if !input_done => input_done = true,
            () = &mut resized, if !resize_done => resize_done = true,
        }
    }
    // The process has exited and its output has been read: send what is still queued.
    for (rx, to_stderr) in [(&mut out_rx, false), (&mut err_rx, true)] {
        while let Ok(b) = rx.try_recv() {
            let to = if to_stderr && !opts.tty {
                stderr.as_mut()
            } else {
                stdout.as_mut()
            };
            if write_chunk(to, &b).await.is_err() {
                return internal_error("the client went away");
            }
        }
    }
    success()
}

/// Opens a connection to `127.0.0.1:port`, else `[::1]:port` (see the module doc), with
/// `TCP_NODELAY` as the kubelet's Go dial has it: forwarded bytes go out as they arrive.
pub(crate) async fn dial(port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let stream = match tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).await {
        Ok(s) => s,
        Err(v4) => tokio::net::TcpStream::connect((std::net::Ipv6Addr::LOCALHOST, port))
            .await
            .map_err(|_| v4)?,
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Writes one chunk and flushes it; no writer (the client did not ask for the stream) drops it.
async fn write_chunk(to: Option<&mut Writer>, chunk: &[u8]) -> std::io::Result<()> {
    if let Some(w) = to {
        w.write_all(chunk).await?;
        w.flush().await?;
    }
    Ok(())
}

/// Copies a process's output pipe to the client's stream until the pipe ends. A read error
/// ends the copy like the end of the pipe; a write error (the client went away) is returned.
/// Without a writer the output is read and dropped.
async fn pump_out(pipe: Option<Reader>, mut to: Option<Writer>) -> std::io::Result<()> {
    let Some(mut pipe) = pipe else {
        return Ok(());
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => write_chunk(to.as_mut(), &buf[..n]).await?,
        }
    }
}

/// Copies the client's input to the process's stdin until the client half-closes (or its
/// stream fails, or the process stops reading); then closes the process's stdin.
async fn pump_in(from: Option<Reader>, to: Option<tokio::process::ChildStdin>) {
    let (Some(mut from), Some(mut to)) = (from, to) else {
        return std::future::pending().await;
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
    drop(to);
    std::future::pending().await
}

/// Attach's input: the client's stdin to the container's stdin pipe, chunk by chunk (several
/// attached clients interleave by chunk). Ends when the client's input ends.
async fn attach_input(running: &RunningContainer, from: Option<Reader>) {
    let Some(mut from) = from else {
        return std::future::pending().await;
    };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut pipe = running.stdin.lock().await;
                if let Some(p) = pipe.as_mut()
                    && p.write_all(&buf[..n]).await.is_err()
                {
                    pipe.take();
                }
            }
        }
    }
    close_stdin_once(running).await;
    std::future::pending().await
}

/// With `stdinOnce`, the end of an attached client's input closes the container's stdin.
async fn close_stdin_once(running: &RunningContainer) {
    if running.spec["stdinOnce"] == true
        && let Some(mut p) = running.stdin.lock().await.take()
    {
        let _ = p.shutdown().await;
    }
}

/// Closes the container's stdin when an attach with `stdinOnce` is dropped mid-session (the
/// client vanished without closing its input).
struct StdinOnce {
    running: Arc<RunningContainer>,
    armed: bool,
}

impl Drop for StdinOnce {
    fn drop(&mut self) {
        if self.armed
            && let Ok(mut pipe) = self.running.stdin.try_lock()
        {
            pipe.take();
        }
    }
}

/// Reads a stream to its end and drops what it carries (resize events: there is no terminal
/// to resize), then waits forever.
async fn drain(from: Option<Reader>) {
    if let Some(mut from) = from {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    }
    std::future::pending().await
}

/// Kills the group of a process that is still running and reaps it.
async fn kill_now(child: &mut Child, pgid: u32) {
    signal_group(pgid, "KILL").await;
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// An exec'd process not yet reaped. Dropped with the process still in it (the session ended
/// early: the client went away, the server shuts down, the transport dropped the future), it
/// kills the process group and reaps the process on the server's tracker.
struct ProcessGuard {
    child: Option<Child>,
    pgid: u32,
    tracker: TaskTracker,
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pgid = self.pgid;
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tracker.spawn_on(
                    async move {
                        kill_now(&mut child, pgid).await;
                        tracing::debug!(pid = pgid, "exec killed");
                    },
                    &handle,
                );
            }
            // No runtime left: the leader at least is killed (`kill_on_drop`).
            Err(_) => {
                let _ = child.start_kill();
            }
        }
    }
}
