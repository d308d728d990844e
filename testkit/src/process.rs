//! Child processes for multi-process tests: spawn with env vars, capture
//! stdout/stderr lines, send signals, read the shared monotonic clock.
//!
//! Nothing here knows what an "instance" is: a test spawns any program
//! (usually an example binary or the test binary itself) and talks to it
//! through its output lines and signals.

use std::fmt;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

pub use nix::sys::signal::Signal;

/// Nanoseconds on `CLOCK_MONOTONIC`.
///
/// Every process on the machine reads the same clock, so values printed by
/// different processes can be compared directly — which a checker of
/// leadership windows needs. (`std::time::Instant` reads the same clock on
/// Linux but does not expose its value.)
///
/// # Examples
///
/// ```
/// let a = leader_testkit::monotonic_now_ns();
/// let b = leader_testkit::monotonic_now_ns();
/// assert!(b >= a);
/// ```
///
/// # Panics
///
/// If `clock_gettime(CLOCK_MONOTONIC)` fails, which it does not on Linux.
pub fn monotonic_now_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime(CLOCK_MONOTONIC)");
    // Both fields are non-negative for CLOCK_MONOTONIC.
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Sends `sig` to process `pid`.
///
/// Prefer the methods of [`ChildProcess`]: they refuse to signal a child that
/// was already reaped, whose pid may have been reused.
///
/// # Errors
///
/// The `kill(2)` error, e.g. `ESRCH` when no such process exists.
pub fn signal(pid: u32, sig: Signal) -> io::Result<()> {
    let pid =
        i32::try_from(pid).map_err(|_| io::Error::other(format!("pid {pid} out of range")))?;
    kill(Pid::from_raw(pid), sig).map_err(io::Error::from)
}

/// The state letter of a process from `/proc/PID/stat` (`R`, `S`, `T` for
/// stopped, `Z` for zombie, …); `None` if the process does not exist.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Sends SIGSTOP or SIGCONT and waits (briefly, blocking) until the kernel
/// reports the process stopped or running again, so that the caller can rely
/// on the new state as soon as this returns.
pub(crate) fn stop_or_continue(pid: u32, stop: bool) -> io::Result<()> {
    signal(
        pid,
        if stop {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        },
    )?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match process_state(pid) {
            // Gone or a zombie: nothing left to stop or continue.
            None | Some('Z') | Some('X') => return Ok(()),
            Some(s) if (s == 'T') == stop => return Ok(()),
            Some(s) if Instant::now() >= deadline => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "process {pid} still in state {s:?} after SIG{}",
                        if stop { "STOP" } else { "CONT" }
                    ),
                ))
            }
            Some(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// The lines a child wrote to one of its output streams, shared and growing.
///
/// Cheap to clone; every clone sees the same lines. Lines are captured by a
/// background task as they arrive (without their line terminator, decoded
/// as UTF-8 lossily).
#[derive(Clone)]
pub struct OutputLines {
    rx: watch::Receiver<Vec<String>>,
}

impl fmt::Debug for OutputLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputLines")
            .field("lines", &*self.rx.borrow())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl OutputLines {
    fn capture<R: AsyncRead + Unpin + Send + 'static>(stream: R) -> OutputLines {
        let (tx, rx) = watch::channel(Vec::new());
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let end = buf.len() - usize::from(buf.ends_with(b"\n"));
                        let end = end - usize::from(buf[..end].ends_with(b"\r"));
                        let line = String::from_utf8_lossy(&buf[..end]).into_owned();
                        tx.send_modify(|lines| lines.push(line));
                    }
                }
            }
            // Dropping `tx` marks the stream closed for every waiter.
        });
        OutputLines { rx }
    }

    /// A copy of all lines so far.
    pub fn snapshot(&self) -> Vec<String> {
        self.rx.borrow().clone()
    }

    /// A copy of the lines from index `from` on (none if there are fewer).
    pub fn lines_from(&self, from: usize) -> Vec<String> {
        self.rx
            .borrow()
            .get(from..)
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }

    /// The number of lines so far.
    pub fn len(&self) -> usize {
        self.rx.borrow().len()
    }

    /// Whether no line arrived yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the stream reached its end (the child closed it or exited).
    pub fn is_closed(&self) -> bool {
        self.rx.has_changed().is_err()
    }

    /// Waits for the first line (from the start) for which `pred` holds and
    /// returns it.
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`, `UnexpectedEof` if the stream ends first;
    /// both messages include every line seen.
    pub async fn wait_for(
        &self,
        pred: impl FnMut(&str) -> bool,
        timeout: Duration,
    ) -> io::Result<String> {
        self.wait_for_from(0, pred, timeout)
            .await
            .map(|(_, line)| line)
    }

    /// Waits for the first line at index `from` or later for which `pred`
    /// holds; returns its index and text. Pass `index + 1` of a previous
    /// match to wait for the next one.
    ///
    /// # Errors
    ///
    /// As [`wait_for`](Self::wait_for).
    pub async fn wait_for_from(
        &self,
        from: usize,
        mut pred: impl FnMut(&str) -> bool,
        timeout: Duration,
    ) -> io::Result<(usize, String)> {
        let mut rx = self.rx.clone();
        let mut found = None;
        let waited = tokio::time::timeout(
            timeout,
            rx.wait_for(|lines| {
                found = lines
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, l)| pred(l))
                    .map(|(i, l)| (i, l.clone()));
                found.is_some()
            }),
        )
        .await;
        match waited {
            Ok(Ok(_)) => Ok(found.expect("wait_for returned after a match")),
            Ok(Err(_)) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "output ended without a matching line (from index {from}); lines:\n{}",
                    self.snapshot().join("\n")
                ),
            )),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no matching line within {timeout:?} (from index {from}); lines:\n{}",
                    self.snapshot().join("\n")
                ),
            )),
        }
    }

    /// Waits until the stream ends and returns all lines.
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`.
    pub async fn wait_closed(&self, timeout: Duration) -> io::Result<Vec<String>> {
        let mut rx = self.rx.clone();
        let closed =
            tokio::time::timeout(timeout, async { while rx.changed().await.is_ok() {} }).await;
        match closed {
            Ok(()) => Ok(self.snapshot()),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("output still open after {timeout:?}"),
            )),
        }
    }
}

/// A child process whose stdout and stderr are captured line by line.
///
/// The child is killed (SIGKILL) when this is dropped.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use std::time::Duration;
/// use leader_testkit::ChildProcess;
/// use tokio::process::Command;
///
/// let mut cmd = Command::new("target/debug/examples/quickstart");
/// cmd.env("REDIS_URL", "redis://127.0.0.1:7001").env("INSTANCE", "a");
/// let mut child = ChildProcess::spawn(cmd)?;
/// child.stdout().wait_for(|l| l.starts_with("leader"), Duration::from_secs(5)).await?;
/// child.pause()?; // SIGSTOP
/// child.resume()?; // SIGCONT
/// child.kill9()?;
/// let status = child.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    pid: u32,
    stdout: OutputLines,
    stderr: OutputLines,
}

impl ChildProcess {
    /// Spawns `cmd` with stdin, stdout and stderr piped (env vars, args and
    /// working directory as configured on `cmd`) and starts capturing its
    /// output.
    ///
    /// Must be called within a Tokio runtime.
    ///
    /// # Errors
    ///
    /// If the program cannot be spawned.
    pub fn spawn(mut cmd: Command) -> io::Result<ChildProcess> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let stdout = OutputLines::capture(child.stdout.take().expect("stdout is piped"));
        let stderr = OutputLines::capture(child.stderr.take().expect("stderr is piped"));
        Ok(ChildProcess {
            child,
            pid,
            stdout,
            stderr,
        })
    }

    /// The child's pid (kept after it exited, for reports).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's stdout lines.
    pub fn stdout(&self) -> &OutputLines {
        &self.stdout
    }

    /// The child's stderr lines.
    pub fn stderr(&self) -> &OutputLines {
        &self.stderr
    }

    /// The child's stdin (piped); `take()` it and drop it to send EOF.
    pub fn stdin(&mut self) -> &mut Option<ChildStdin> {
        &mut self.child.stdin
    }

    /// Sends `sig` to the child.
    ///
    /// # Errors
    ///
    /// `NotFound` if the child was already reaped (by [`wait`](Self::wait)
    /// or [`try_wait`](Self::try_wait)): its pid may belong to another
    /// process by now. Otherwise the `kill(2)` error.
    pub fn signal(&self, sig: Signal) -> io::Result<()> {
        signal(self.live_pid()?, sig)
    }

    /// SIGKILL (`kill -9`): the child dies at once, without cleanup.
    ///
    /// # Errors
    ///
    /// As [`signal`](Self::signal).
    pub fn kill9(&self) -> io::Result<()> {
        self.signal(Signal::SIGKILL)
    }

    /// SIGTERM: asks the child to shut down gracefully.
    ///
    /// # Errors
    ///
    /// As [`signal`](Self::signal).
    pub fn terminate(&self) -> io::Result<()> {
        self.signal(Signal::SIGTERM)
    }

    /// SIGSTOP, then waits until the kernel reports the child stopped: when
    /// this returns, the child runs no more code until
    /// [`resume`](Self::resume).
    ///
    /// # Errors
    ///
    /// As [`signal`](Self::signal); `TimedOut` if the child is not reported
    /// stopped within 2 s.
    pub fn pause(&self) -> io::Result<()> {
        stop_or_continue(self.live_pid()?, true)
    }

    /// SIGCONT, then waits until the child is no longer reported stopped.
    ///
    /// # Errors
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&self) -> io::Result<()> {
        stop_or_continue(self.live_pid()?, false)
    }

    /// Waits for the child to exit.
    ///
    /// # Errors
    ///
    /// If waiting fails.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Waits at most `timeout` for the child to exit.
    ///
    /// # Errors
    ///
    /// `TimedOut` (with the child's output in the message) if it is still
    /// running.
    pub async fn wait_timeout(&mut self, timeout: Duration) -> io::Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "child still running after {timeout:?}\n{}",
                    self.transcript()
                ),
            )),
        }
    }

    /// The exit status if the child has exited, without waiting.
    ///
    /// # Errors
    ///
    /// If querying the child fails.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// The pid and every captured stdout and stderr line, for failure
    /// messages.
    pub fn transcript(&self) -> String {
        format!(
            "--- pid {} stdout ---\n{}\n--- pid {} stderr ---\n{}\n--- end ---",
            self.pid,
            self.stdout.snapshot().join("\n"),
            self.pid,
            self.stderr.snapshot().join("\n"),
        )
    }

    fn live_pid(&self) -> io::Result<u32> {
        self.child.id().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("child {} was already reaped", self.pid),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_now_ns();
        std::thread::sleep(Duration::from_millis(5));
        let b = monotonic_now_ns();
        assert!(b - a >= 5_000_000, "{a} -> {b}");
        assert!(b - a < 5_000_000_000, "{a} -> {b}");
    }

    #[test]
    fn process_state_of_self_and_of_nobody() {
        // The main thread of the test harness may be running or waiting.
        let state = process_state(std::process::id());
        assert!(matches!(state, Some('R' | 'S')), "{state:?}");
        assert_eq!(process_state(u32::MAX), None);
    }
}
