//! A real `redis-server` per test, on a free loopback port.

use std::fmt;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::{signal, stop_or_continue, Signal};
use crate::resp::{Reply, RespConn};
use crate::rng::XorShift;

/// Ports are picked at random from this range: below Linux's default
/// ephemeral range (32768–60999), so outgoing connections of other tests do
/// not take them between our check and the server's `bind`.
const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;
/// Fresh ports to try when a start fails because the port was taken.
const FRESH_PORT_ATTEMPTS: usize = 20;
/// How long a restart on the same port keeps retrying while it is busy.
const SAME_PORT_RETRY: Duration = Duration::from_secs(5);
/// Timeout of [`RedisServer::cmd`].
const CMD_TIMEOUT: Duration = Duration::from_secs(5);

static SERVER_SEQ: AtomicU32 = AtomicU32::new(0);

/// The files in a server's dir that [`RedisServer::start_again_from`] loads:
/// a restart that keeps (part of) the data, as a real deployment with
/// persistence does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Persisted {
    /// The RDB snapshot `dump.rdb` (written by `SAVE`, `BGSAVE` or a `save`
    /// rule). The server starts with `--appendonly no`.
    Rdb,
    /// The append-only files in `appendonlydir` (turned on with the
    /// builder's `--appendonly yes` or `CONFIG SET appendonly yes`). The
    /// server starts with `--appendonly yes`.
    Aof,
}

/// Configures a [`RedisServer`] before starting it.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use leader_testkit::RedisServer;
///
/// let server = RedisServer::builder()
///     .password("s3cret")
///     .acl_user("app", "apppw", "~leader:* +@all")
///     .args(["--maxclients", "64"])
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisServerBuilder {
    binary: PathBuf,
    config_file: Option<PathBuf>,
    args: Vec<String>,
    password: Option<String>,
    startup_timeout: Duration,
}

impl Default for RedisServerBuilder {
    fn default() -> Self {
        RedisServerBuilder {
            binary: PathBuf::from("redis-server"),
            config_file: None,
            args: Vec::new(),
            password: None,
            startup_timeout: Duration::from_secs(10),
        }
    }
}

impl RedisServerBuilder {
    /// The server binary; default `redis-server` from `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = path.into();
        self
    }

    /// A config file, passed as the first argument (before the harness's
    /// options, which override it). `redis-server --sentinel` needs one it
    /// can rewrite; it is kept across restarts.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// One extra command-line argument, appended after the harness's own
    /// (`--port`, `--bind 127.0.0.1`, `--save ""`, `--appendonly no`,
    /// `--dir`, `--logfile`), so it can override them.
    ///
    /// Redis joins the words after each `--option` into one config line, so
    /// pass each word separately: `.args(["--tls-port", "0"])`. Readiness is
    /// checked on the plain TCP port, so keep it enabled (do not pass
    /// `--port 0`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Several extra arguments; see [`arg`](Self::arg).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `--requirepass PASSWORD`. [`RedisServer::cmd`] then authenticates
    /// with it; [`RedisServer::url`] stays without credentials.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        let password = password.into();
        self.args.push("--requirepass".into());
        self.args.push(password.clone());
        self.password = Some(password);
        self
    }

    /// An ACL user, enabled, with `password` and the given space-separated
    /// `rules` (e.g. `"~leader:* +@all"` or `"~* &* +@all -flushall"`):
    /// `--user NAME on >PASSWORD RULES...`.
    pub fn acl_user(mut self, name: &str, password: &str, rules: &str) -> Self {
        self.args
            .extend(["--user".to_owned(), name.to_owned(), "on".to_owned()]);
        self.args.push(format!(">{password}"));
        self.args
            .extend(rules.split_whitespace().map(str::to_owned));
        self
    }

    /// How long a start waits for the server to answer; default 10 s.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Starts the server on a free port and waits until it answers.
    ///
    /// # Errors
    ///
    /// If the binary cannot be spawned, the server exits during startup
    /// (the error includes its log) or does not answer within the startup
    /// timeout.
    pub async fn start(self) -> io::Result<RedisServer> {
        let seq = SERVER_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("leader-testkit-redis-{}-{seq}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut server = RedisServer {
            config: self,
            port: 0,
            dir,
            child: None,
        };
        let mut rng = XorShift::seeded();
        let mut last_busy = String::new();
        for _ in 0..FRESH_PORT_ATTEMPTS {
            server.port = pick_port(&mut rng)?;
            match server.launch(None).await {
                Ok(()) => return Ok(server),
                Err(Launch::PortBusy(why)) => last_busy = why,
                Err(Launch::Failed(e)) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("no free port after {FRESH_PORT_ATTEMPTS} attempts; last: {last_busy}"),
        ))
    }

    /// Start this server and one replica of it (`--replicaof`, default
    /// settings), and wait until the replica is online: its first sync is
    /// done and `WAIT 1` can be answered. The primary syncs diskless
    /// without its default 5 s wait for more replicas.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start), for either server, or the replica not
    /// online within 10 s (the error holds the primary's replication info
    /// and log).
    pub async fn start_with_replica(self) -> io::Result<(RedisServer, RedisServer)> {
        let primary = self
            .args(["--repl-diskless-sync-delay", "0"])
            .start()
            .await?;
        let replica = RedisServer::builder()
            .args(["--replicaof", "127.0.0.1", &primary.port().to_string()])
            .start()
            .await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info = primary.cmd(&["INFO", "replication"]).await?;
            let info = info.as_str().unwrap_or_default().to_owned();
            if info.contains("connected_slaves:1") && info.contains("state=online") {
                return Ok((primary, replica));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("replica not online:\n{info}\n{}", primary.report()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

enum Launch {
    /// The port was taken (by someone else, or still held by the kernel).
    PortBusy(String),
    Failed(io::Error),
}

/// A `redis-server` process owned by one test.
///
/// It listens on `127.0.0.1` on a port of its own (never 6379), persists
/// nothing by itself (`--save "" --appendonly no`; an explicit `SAVE` or
/// `CONFIG SET appendonly yes` still writes to its dir), keeps its files in
/// a temp dir of its own and logs to a file there ([`log`](Self::log)). It
/// can be killed, restarted on the same port with empty data, or from the
/// RDB snapshot or AOF in its dir ([`restart_from`](Self::restart_from)),
/// stopped and started again, paused and resumed. Dropping it kills the process (and removes the temp
/// dir unless the thread is panicking, so the log survives a failed test).
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use leader_testkit::RedisServer;
///
/// let mut server = RedisServer::start().await?;
/// let url = server.url(); // "redis://127.0.0.1:PORT": give it to the code under test
/// assert_eq!(server.cmd(&["SET", "k", "v"]).await?, "OK");
/// server.restart().await?; // same port, all data and scripts gone
/// let v = server.cmd(&["GET", "k"]).await?;
/// server.check(v.is_nil(), format!("data survived a restart: {v}"));
/// # Ok(()) }
/// ```
pub struct RedisServer {
    config: RedisServerBuilder,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir)
            .finish()
    }
}

impl RedisServer {
    /// Configure a server before starting it.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Starts a server with the default configuration on a free port and
    /// waits until it answers PING.
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::start`].
    pub async fn start() -> io::Result<RedisServer> {
        Self::builder().start().await
    }

    /// The TCP port; the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid of the running process; `None` after [`kill`](Self::kill) or
    /// [`stop`](Self::stop).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            None => false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        }
    }

    /// The server's temp dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the server log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The whole server log, across restarts (empty if it cannot be read).
    pub fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Panics with `msg`, the port and the server log unless `cond` holds:
    /// an `assert!` whose failure tells what the server saw.
    ///
    /// # Panics
    ///
    /// If `cond` is false.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl fmt::Display) {
        if !cond {
            self.fail(msg)
        }
    }

    /// Panics with `msg`, the port and the server log.
    ///
    /// # Panics
    ///
    /// Always.
    #[track_caller]
    pub fn fail(&self, msg: impl fmt::Display) -> ! {
        panic!("{msg}\n{}", self.report())
    }

    /// The port, pid, temp dir and server log (plus anything the process
    /// wrote to stdout/stderr), formatted for a failure message.
    pub fn report(&self) -> String {
        let mut out = format!(
            "--- redis-server on port {} (pid {:?}, dir {}) log ---\n{}",
            self.port,
            self.pid(),
            self.dir.display(),
            self.log()
        );
        let stdout = fs::read(self.dir.join("stdout.log")).unwrap_or_default();
        if !stdout.is_empty() {
            out.push_str("--- redis-server stdout/stderr ---\n");
            out.push_str(&String::from_utf8_lossy(&stdout));
        }
        out.push_str("--- end of redis-server log ---");
        out
    }

    /// Sends one command on a new connection and returns the reply
    /// (authenticating first if the builder set a
    /// [`password`](RedisServerBuilder::password)). An error reply is
    /// `Ok(Reply::Error(..))`.
    ///
    /// # Errors
    ///
    /// If the server cannot be reached or does not answer within 5 s.
    pub async fn cmd(&self, args: &[&str]) -> io::Result<Reply> {
        let exchange = async {
            let mut conn = self.connect().await?;
            conn.cmd(args).await
        };
        tokio::time::timeout(CMD_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{args:?} got no reply within {CMD_TIMEOUT:?}"),
                ))
            })
    }

    /// A new raw connection, authenticated if the builder set a password.
    ///
    /// # Errors
    ///
    /// If the server cannot be reached or rejects the password.
    pub async fn connect(&self) -> io::Result<RespConn> {
        let mut conn = RespConn::connect(self.addr()).await?;
        if let Some(password) = &self.config.password {
            conn.cmd(&["AUTH", password]).await?.ok()?;
        }
        Ok(conn)
    }

    /// SIGKILL and wait for the process to exit; no-op if it is not running.
    /// Clients see their connections drop; the port refuses connections
    /// until [`start_again`](Self::start_again).
    ///
    /// # Errors
    ///
    /// If the process cannot be waited for.
    pub async fn kill(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = child.kill();
        wait_exit(&mut child, Duration::from_secs(10))
            .await
            .map(drop)
    }

    /// SIGTERM (graceful shutdown; the process is continued first if it was
    /// paused) and wait for it to exit, falling back to SIGKILL after 10 s.
    /// No-op if it is not running.
    ///
    /// # Errors
    ///
    /// If the process cannot be waited for.
    pub async fn stop(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = signal(child.id(), Signal::SIGTERM);
        let _ = signal(child.id(), Signal::SIGCONT);
        if wait_exit(&mut child, Duration::from_secs(10))
            .await?
            .is_none()
        {
            let _ = child.kill();
            wait_exit(&mut child, Duration::from_secs(10)).await?;
        }
        Ok(())
    }

    /// Starts the server again on the same port after [`kill`](Self::kill)
    /// or [`stop`](Self::stop), with empty data and no cached scripts (any
    /// RDB or AOF file in its dir is deleted first), and waits until it
    /// answers. Retries for up to 5 s while the port is still busy.
    ///
    /// # Errors
    ///
    /// If the server is running, the port stays busy, or the start fails.
    pub async fn start_again(&mut self) -> io::Result<()> {
        self.relaunch(None).await
    }

    /// Starts the server again on the same port after [`kill`](Self::kill)
    /// or [`stop`](Self::stop), loading the data `from` the files in its
    /// dir (with the builder's arguments plus `--appendonly no` for
    /// [`Persisted::Rdb`] or `--appendonly yes` for [`Persisted::Aof`]),
    /// and waits until it answers (not while it still replies `-LOADING`).
    /// The script cache is empty, and the server has a new `run_id`.
    ///
    /// # Errors
    ///
    /// As [`start_again`](Self::start_again); also if the file to load is
    /// missing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> std::io::Result<()> {
    /// use leader_testkit::{Persisted, RedisServer};
    ///
    /// let mut server = RedisServer::start().await?;
    /// server.cmd(&["SET", "k", "old"]).await?;
    /// server.cmd(&["SAVE"]).await?.ok()?;
    /// server.cmd(&["SET", "k", "new"]).await?;
    /// server.restart_from(Persisted::Rdb).await?; // kill -9, load dump.rdb
    /// assert_eq!(server.cmd(&["GET", "k"]).await?, "old");
    /// # Ok(()) }
    /// ```
    pub async fn start_again_from(&mut self, from: Persisted) -> io::Result<()> {
        let needed = match from {
            Persisted::Rdb => self.dir.join("dump.rdb"),
            Persisted::Aof => self.dir.join("appendonlydir"),
        };
        if !needed.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("nothing to load: {} is missing", needed.display()),
            ));
        }
        self.relaunch(Some(from)).await
    }

    /// [`kill`](Self::kill) (SIGKILL: no shutdown save) then
    /// [`start_again_from`](Self::start_again_from): a crash and a restart
    /// that loads the snapshot or AOF as it was on disk.
    ///
    /// # Errors
    ///
    /// As [`start_again_from`](Self::start_again_from).
    pub async fn restart_from(&mut self, from: Persisted) -> io::Result<()> {
        self.kill().await?;
        self.start_again_from(from).await
    }

    /// The incremental AOF file that the server appends to now (from the
    /// manifest in `appendonlydir`), e.g. to cut off its tail and model the
    /// writes a host crash loses under `appendfsync everysec`.
    ///
    /// # Errors
    ///
    /// If there is no manifest or it names no incremental file.
    pub fn aof_incr_file(&self) -> io::Result<PathBuf> {
        let aof_dir = self.dir.join("appendonlydir");
        let manifest = fs::read_dir(&aof_dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "manifest"))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no AOF manifest in {}", aof_dir.display()),
                )
            })?;
        // Lines like `file appendonly.aof.2.incr.aof seq 2 type i`; the last
        // incremental one is current.
        fs::read_to_string(&manifest)?
            .lines()
            .filter_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let file = words.windows(2).find(|w| w[0] == "file")?[1];
                words
                    .windows(2)
                    .any(|w| w[0] == "type" && w[1] == "i")
                    .then(|| aof_dir.join(file))
            })
            .next_back()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no incremental AOF in {}", manifest.display()),
                )
            })
    }

    /// One field of `INFO <section>` (e.g. `("server", "run_id")`), or
    /// `None` if the server does not report it.
    ///
    /// # Errors
    ///
    /// As [`cmd`](Self::cmd), or an error reply.
    pub async fn info_field(&self, section: &str, field: &str) -> io::Result<Option<String>> {
        let info = self.cmd(&["INFO", section]).await?.ok()?;
        Ok(info.as_str().and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        }))
    }

    async fn relaunch(&mut self, from: Option<Persisted>) -> io::Result<()> {
        if self.is_running() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("redis-server on port {} is already running", self.port),
            ));
        }
        let deadline = Instant::now() + SAME_PORT_RETRY;
        loop {
            match self.launch(from).await {
                Ok(()) => return Ok(()),
                Err(Launch::Failed(e)) => return Err(e),
                Err(Launch::PortBusy(why)) if Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "port {} still busy after {SAME_PORT_RETRY:?}: {why}",
                            self.port
                        ),
                    ))
                }
                Err(Launch::PortBusy(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// [`kill`](Self::kill) then [`start_again`](Self::start_again): a crash
    /// and restart on the same port; all data and the script cache are gone.
    ///
    /// # Errors
    ///
    /// As [`start_again`](Self::start_again).
    pub async fn restart(&mut self) -> io::Result<()> {
        self.kill().await?;
        self.start_again().await
    }

    /// SIGSTOP: the server stops answering but keeps its connections and
    /// data (a hung server). When this returns the process is stopped.
    ///
    /// # Errors
    ///
    /// If it is not running or the signal fails.
    pub fn pause(&self) -> io::Result<()> {
        stop_or_continue(self.running_pid()?, true)
    }

    /// SIGCONT after [`pause`](Self::pause): queued commands are answered.
    ///
    /// # Errors
    ///
    /// If it is not running or the signal fails.
    pub fn resume(&self) -> io::Result<()> {
        stop_or_continue(self.running_pid()?, false)
    }

    fn running_pid(&self) -> io::Result<u32> {
        self.pid().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("redis-server on port {} is not running", self.port),
            )
        })
    }

    /// Spawns the process on `self.port` and waits until it is ready,
    /// empty or loading the data `from` its dir.
    async fn launch(&mut self, from: Option<Persisted>) -> Result<(), Launch> {
        debug_assert!(self.child.is_none());
        let failed = Launch::Failed;
        // Only the files asked for are loaded: an empty start deletes both
        // kinds (even when the builder's arguments turn persistence on), a
        // start from the snapshot the AOF (which it would not read anyway).
        if from.is_none() {
            let _ = fs::remove_file(self.dir.join("dump.rdb"));
        }
        if from != Some(Persisted::Aof) {
            let _ = fs::remove_dir_all(self.dir.join("appendonlydir"));
        }
        let log_path = self.log_path();
        let log_offset = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) as usize;
        let out_path = self.dir.join("stdout.log");
        let out_offset = fs::metadata(&out_path).map(|m| m.len()).unwrap_or(0) as usize;
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out_path)
            .map_err(failed)?;
        let mut cmd = Command::new(&self.config.binary);
        if let Some(file) = &self.config.config_file {
            cmd.arg(file);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log_path)
            .args(&self.config.args)
            .args(match from {
                None => &[][..],
                Some(Persisted::Rdb) => &["--appendonly", "no"][..],
                Some(Persisted::Aof) => &["--appendonly", "yes"][..],
            })
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(failed)?)
            .stderr(out);
        let child = cmd.spawn().map_err(|e| {
            Launch::Failed(io::Error::new(
                e.kind(),
                format!("cannot spawn {}: {e}", self.config.binary.display()),
            ))
        })?;
        let pid = child.id();
        self.child = Some(child);

        let new_output = |server: &RedisServer| {
            let log = fs::read(server.log_path()).unwrap_or_default();
            let out = fs::read(server.dir.join("stdout.log")).unwrap_or_default();
            format!(
                "{}{}",
                String::from_utf8_lossy(log.get(log_offset..).unwrap_or_default()),
                String::from_utf8_lossy(out.get(out_offset..).unwrap_or_default())
            )
        };
        let deadline = Instant::now() + self.config.startup_timeout;
        loop {
            let child = self.child.as_mut().expect("spawned above");
            if let Some(status) = child.try_wait().map_err(failed)? {
                self.child = None;
                let output = new_output(self);
                return Err(if output.contains("Address already in use") {
                    Launch::PortBusy(output)
                } else {
                    Launch::Failed(io::Error::other(format!(
                        "redis-server on port {} exited during startup ({status}):\n{output}\n{}",
                        self.port,
                        self.report()
                    )))
                });
            }
            if ping(self.addr()).await {
                // Make sure it is our process answering, not another server
                // that took the port while ours failed to bind.
                return match self.answering_pid().await {
                    Some(p) if p != pid => {
                        let _ = self.kill().await;
                        Err(Launch::PortBusy(format!(
                            "port {} answered by pid {p}, not ours ({pid})",
                            self.port
                        )))
                    }
                    _ => Ok(()),
                };
            }
            if Instant::now() >= deadline {
                let _ = self.kill().await;
                return Err(Launch::Failed(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server on port {} did not answer PING within {:?}\n{}",
                        self.port,
                        self.config.startup_timeout,
                        self.report()
                    ),
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The `process_id` in `INFO server`, if it can be read (not, e.g., when
    /// the default user is disabled).
    async fn answering_pid(&self) -> Option<u32> {
        let info = tokio::time::timeout(CMD_TIMEOUT, async {
            self.connect()
                .await
                .ok()?
                .cmd(&["INFO", "server"])
                .await
                .ok()
        })
        .await
        .ok()??;
        info.as_str()?
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also ends a stopped process; the wait is immediate.
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls until `child` exits or `timeout` passes (`Ok(None)`).
async fn wait_exit(
    child: &mut Child,
    timeout: Duration,
) -> io::Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A port in [`PORT_RANGE`] that we could bind just now.
fn pick_port(rng: &mut XorShift) -> io::Result<u16> {
    let span = u64::from(PORT_RANGE.end - PORT_RANGE.start);
    let mut last = None;
    for _ in 0..100 {
        let port = PORT_RANGE.start + (rng.next_u64() % span) as u16;
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port")))
}

/// One raw `PING\r\n`; true if the server answered with anything but
/// `-LOADING` (`+PONG`, or `-NOAUTH` when a password is required).
async fn ping(addr: SocketAddr) -> bool {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).await?;
        io::Result::Ok(buf[..n].to_vec())
    };
    match tokio::time::timeout(Duration::from_millis(500), exchange).await {
        Ok(Ok(reply)) => {
            reply.starts_with(b"+PONG")
                || (reply.starts_with(b"-") && !reply.starts_with(b"-LOADING"))
        }
        _ => false,
    }
}
