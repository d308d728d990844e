//! A fault-injecting TCP proxy for partitions and slow networks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::rng::XorShift;

/// Bytes read per chunk; each chunk is delayed as a unit.
const CHUNK: usize = 16 * 1024;
/// Chunks buffered per direction before the proxy stops reading (and TCP
/// flow control pushes back on the sender).
const QUEUE: usize = 64;

/// What a [`FaultProxy`] does to the bytes of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Forward at once.
    #[default]
    Pass,
    /// Hold every chunk for this long, in both directions.
    Delay(Duration),
    /// Hold every chunk for a random time in `min..=max`, in both directions.
    Jitter {
        /// Shortest hold.
        min: Duration,
        /// Longest hold.
        max: Duration,
    },
    /// Deliver nothing, in either direction, while connections stay open.
    Blackhole,
}

impl Mode {
    /// How long a chunk with random `sample` is held; `None` = indefinitely.
    fn hold(self, sample: u64) -> Option<Duration> {
        match self {
            Mode::Pass => Some(Duration::ZERO),
            Mode::Delay(d) => Some(d),
            Mode::Jitter { min, max } => {
                let span = max.saturating_sub(min).as_nanos() as u64;
                Some(min + Duration::from_nanos(sample % span.saturating_add(1)))
            }
            Mode::Blackhole => None,
        }
    }
}

/// A chunk read from one side, on its way to the other.
struct Chunk {
    data: Vec<u8>,
    read_at: Instant,
    sample: u64,
}

/// State shared by the proxy handle and its tasks.
struct Shared {
    upstream: SocketAddr,
    refuse: AtomicBool,
    accepted: AtomicU64,
    /// Ids of the connections whose tasks are still running.
    live: watch::Sender<BTreeSet<u64>>,
    /// Per-connection modes that override the proxy's (`None`: follow it).
    overrides: Mutex<BTreeMap<u64, watch::Sender<Option<Mode>>>>,
    /// The proxy's mode, for a trip wire to switch (weak: dropping the
    /// proxy still closes it, which resets every connection).
    mode: Weak<watch::Sender<Mode>>,
    /// An armed trip wire: the bytes whose sending black-holes the proxy.
    tripwire: Mutex<Option<Vec<u8>>>,
    /// How many times a trip wire went off.
    tripped: watch::Sender<u64>,
}

/// A TCP proxy on `127.0.0.1` that forwards to one upstream (a
/// [`RedisServer`](crate::RedisServer)) and injects faults on command.
///
/// Give the code under test [`url`](Self::url) instead of the server's. The
/// [`mode`](Mode) can be changed at any time and applies to live connections
/// at once:
///
/// - [`pass`](Self::pass): forward bytes immediately.
/// - [`delay`](Self::delay) / [`jitter`](Self::jitter): every chunk read from
///   either side is held for a fixed or random time before it is written to
///   the other side. Byte order per direction is always preserved (a chunk
///   never overtakes an earlier one), and the hold is measured from when the
///   proxy read the chunk, against the mode *at delivery time*: switching
///   from a long delay back to `pass()` releases held bytes at once.
/// - [`blackhole`](Self::blackhole): connections stay open, but nothing is
///   delivered in either direction. Bytes are **buffered, not dropped**
///   (up to about 1 MiB per direction in the proxy, then TCP flow control
///   stalls the sender), and delivered in order when the mode changes —
///   like a partition that heals before TCP gives up. New connections are
///   accepted (and connected upstream) but black-holed too.
///
/// Independent of the mode, [`reset_all`](Self::reset_all) aborts every
/// current connection with a TCP RST, and [`refuse`](Self::refuse) makes
/// new connections be accepted and immediately reset.
///
/// Dropping the proxy stops it: the listener closes and every connection is
/// reset.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use std::time::Duration;
/// use leader_testkit::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start().await?;
/// let proxy = FaultProxy::start(server.addr()).await?;
/// let url = proxy.url(); // give this to the instance under test
///
/// proxy.delay(Duration::from_millis(200)); // slow network
/// proxy.blackhole(); // partition
/// proxy.pass(); // heal
/// proxy.reset_all().await; // every connection sees ECONNRESET
/// # Ok(()) }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    mode: Arc<watch::Sender<Mode>>,
    /// Bumped by `reset_all`; dropping it (with the proxy) resets everything.
    reset: watch::Sender<u64>,
    accept_task: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("mode", &self.mode())
            .field("refusing", &self.shared.refuse.load(Ordering::Relaxed))
            .field("connections", &self.connections())
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port, forwarding to `upstream`,
    /// in [`Mode::Pass`].
    ///
    /// Must be called within a Tokio runtime; the proxy's tasks run on it.
    ///
    /// # Errors
    ///
    /// If the listening socket cannot be bound.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let mode = Arc::new(mode);
        let shared = Arc::new(Shared {
            upstream,
            refuse: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            live: watch::Sender::new(BTreeSet::new()),
            overrides: Mutex::new(BTreeMap::new()),
            mode: Arc::downgrade(&mode),
            tripwire: Mutex::new(None),
            tripped: watch::Sender::new(0),
        });
        let (reset, reset_rx) = watch::channel(0u64);
        let accept_task = tokio::spawn(accept_loop(listener, shared.clone(), mode_rx, reset_rx));
        Ok(FaultProxy {
            addr,
            shared,
            mode,
            reset,
            accept_task,
        })
    }

    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The address connections are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Switches to `mode`; see [`Mode`].
    ///
    /// # Panics
    ///
    /// If `mode` is a [`Mode::Jitter`] with `min > max`.
    pub fn set_mode(&self, mode: Mode) {
        if let Mode::Jitter { min, max } = mode {
            assert!(min <= max, "jitter: min {min:?} > max {max:?}");
        }
        self.mode.send_replace(mode);
    }

    /// Forward bytes immediately (also releases black-holed and delayed
    /// bytes).
    pub fn pass(&self) {
        self.set_mode(Mode::Pass);
    }

    /// Hold every chunk for `latency`, in both directions (a round trip
    /// takes at least `2 × latency`).
    pub fn delay(&self, latency: Duration) {
        self.set_mode(Mode::Delay(latency));
    }

    /// Hold every chunk for a random time in `min..=max`, in both
    /// directions, without reordering bytes.
    ///
    /// # Panics
    ///
    /// If `min > max`.
    pub fn jitter(&self, min: Duration, max: Duration) {
        self.set_mode(Mode::Jitter { min, max });
    }

    /// Deliver nothing in either direction until the mode changes; bytes
    /// are buffered and delivered afterwards (see the type's docs).
    pub fn blackhole(&self) {
        self.set_mode(Mode::Blackhole);
    }

    /// Aborts every current connection with a TCP RST to both the client
    /// and the upstream, and returns once they are all closed. Undelivered
    /// bytes are discarded. Connections made afterwards work normally.
    pub async fn reset_all(&self) {
        let before: BTreeSet<u64> = self.shared.live.borrow().clone();
        self.reset.send_modify(|epoch| *epoch += 1);
        let mut live = self.shared.live.subscribe();
        // `live` is never closed while `self.shared` exists.
        let _ = live
            .wait_for(|now| before.iter().all(|id| !now.contains(id)))
            .await;
    }

    /// While `true`, new connections are accepted and immediately reset
    /// (the upstream is not contacted); existing connections are not
    /// affected.
    pub fn refuse(&self, refuse: bool) {
        self.shared.refuse.store(refuse, Ordering::SeqCst);
    }

    /// The number of connections currently open through the proxy.
    pub fn connections(&self) -> usize {
        self.shared.live.borrow().len()
    }

    /// Waits until exactly `n` connections are open through the proxy (e.g.
    /// until a client reconnected after [`reset_all`](Self::reset_all)).
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`, with the current count in the message.
    pub async fn wait_connections(&self, n: usize, timeout: Duration) -> io::Result<()> {
        let mut live = self.shared.live.subscribe();
        let reached = tokio::time::timeout(timeout, live.wait_for(|live| live.len() == n))
            .await
            .is_ok();
        match reached {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} connections open through the proxy after {timeout:?}, expected {n}",
                    self.connections()
                ),
            )),
        }
    }

    /// The ids of the connections open now, oldest first. Ids count up from
    /// 0 in the order connections were accepted (refused ones get none), so
    /// a test that knows in which order its client opens connections can
    /// tell them apart (e.g. a pub/sub connection opened before the first
    /// command).
    pub fn connection_ids(&self) -> Vec<u64> {
        self.shared.live.borrow().iter().copied().collect()
    }

    /// Overrides the mode for one open connection (see
    /// [`connection_ids`](Self::connection_ids)): e.g. black-hole only a
    /// client's pub/sub connection, a half-open connection among healthy
    /// ones. `None` makes it follow the proxy's mode again. Returns whether
    /// the connection is still open.
    ///
    /// # Panics
    ///
    /// If `mode` is a [`Mode::Jitter`] with `min > max`.
    pub fn set_connection_mode(&self, id: u64, mode: Option<Mode>) -> bool {
        if let Some(Mode::Jitter { min, max }) = mode {
            assert!(min <= max, "jitter: min {min:?} > max {max:?}");
        }
        let overrides = self
            .shared
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match overrides.get(&id) {
            Some(tx) => {
                tx.send_replace(mode);
                true
            }
            None => false,
        }
    }

    /// Arms a trip wire: the first chunk a client sends after this that
    /// contains `pattern` (e.g. the SHA1 of a script, which an `EVALSHA`
    /// carries) switches the proxy to [`Mode::Blackhole`] before it is
    /// forwarded, so that chunk is held too, like everything after it,
    /// until the mode changes. The cut falls exactly between what the
    /// client sent before that command and the command itself, which no
    /// timer in a test could hit. The wire goes off once (arm it again for
    /// another); a pattern split across two reads is not seen (a client
    /// writes a command in one write, which arrives in one read unless it
    /// is larger than the proxy's 16 KiB chunks).
    pub fn blackhole_on_send(&self, pattern: impl Into<Vec<u8>>) {
        let pattern = pattern.into();
        assert!(!pattern.is_empty(), "an empty trip wire");
        *self
            .shared
            .tripwire
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(pattern);
    }

    /// How many times a trip wire ([`blackhole_on_send`](Self::blackhole_on_send))
    /// went off.
    pub fn tripped(&self) -> u64 {
        *self.shared.tripped.borrow()
    }

    /// Waits until a trip wire has gone off `n` times in all.
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`.
    pub async fn wait_tripped(&self, n: u64, timeout: Duration) -> io::Result<()> {
        let mut tripped = self.shared.tripped.subscribe();
        let reached = tokio::time::timeout(timeout, tripped.wait_for(|t| *t >= n))
            .await
            .is_ok();
        match reached {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the trip wire went off {} times in {timeout:?}, not {n}",
                    self.tripped()
                ),
            )),
        }
    }

    /// The number of connections accepted and forwarded so far (refused
    /// ones not counted): a test can see that a client reconnected.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The connection tasks see `reset` and `mode` closed and reset their
        // sockets; the listener goes with the accept task.
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mode: watch::Receiver<Mode>,
    reset: watch::Receiver<u64>,
) {
    let mut next_id = 0u64;
    let mut rng = XorShift::seeded();
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // E.g. EMFILE: back off a little instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if shared.refuse.load(Ordering::SeqCst) {
            abort(&client);
            continue;
        }
        let id = next_id;
        next_id += 1;
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let (override_tx, override_rx) = watch::channel(None);
        shared
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, override_tx);
        shared.live.send_modify(|live| {
            live.insert(id);
        });
        let guard = LiveGuard {
            id,
            shared: shared.clone(),
        };
        let mut reset = reset.clone();
        // Resets from before this connection existed do not concern it.
        reset.borrow_and_update();
        let seeds = (rng.next_u64(), rng.next_u64());
        tokio::spawn(connect_and_pipe(
            client,
            shared.upstream,
            Modes {
                proxy: mode.clone(),
                connection: override_rx,
            },
            reset,
            guard,
            seeds,
        ));
    }
}

/// Removes a connection from the live set once all its tasks are done.
struct LiveGuard {
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.shared
            .overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        self.shared.live.send_modify(|live| {
            live.remove(&self.id);
        });
    }
}

/// SO_LINGER 0, so that closing the socket sends RST instead of FIN.
fn abort(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// The proxy's mode, and one connection's override of it.
#[derive(Clone)]
struct Modes {
    proxy: watch::Receiver<Mode>,
    connection: watch::Receiver<Option<Mode>>,
}

impl Modes {
    /// The mode in force now; marks both as seen.
    fn current(&mut self) -> Mode {
        let proxy = *self.proxy.borrow_and_update();
        self.connection.borrow_and_update().unwrap_or(proxy)
    }

    /// Until either changes; `Err` when the proxy is gone.
    async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        tokio::select! {
            changed = self.proxy.changed() => changed,
            // The override's sender goes with the connection's guard,
            // which outlives the writers: then only the proxy's mode counts.
            changed = self.connection.changed() => match changed {
                Ok(()) => Ok(()),
                Err(_) => self.proxy.changed().await,
            },
        }
    }
}

async fn connect_and_pipe(
    client: TcpStream,
    upstream: SocketAddr,
    mode: Modes,
    mut reset: watch::Receiver<u64>,
    guard: LiveGuard,
    seeds: (u64, u64),
) {
    let server = tokio::select! {
        biased;
        _ = reset.changed() => Err(io::Error::other("reset while connecting")),
        server = TcpStream::connect(upstream) => server,
    };
    let server = match server {
        Ok(server) => server,
        Err(_) => {
            abort(&client);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_rd, client_wr) = client.into_split();
    let (server_rd, server_wr) = server.into_split();
    let (to_server, from_client) = mpsc::channel(QUEUE);
    let (to_client, from_server) = mpsc::channel(QUEUE);
    let pipes = [
        tokio::spawn(reader(
            client_rd,
            to_server,
            reset.clone(),
            XorShift::new(seeds.0),
            Some(guard.shared.clone()),
        )),
        tokio::spawn(writer(server_wr, from_client, mode.clone(), reset.clone())),
        tokio::spawn(reader(
            server_rd,
            to_client,
            reset.clone(),
            XorShift::new(seeds.1),
            None,
        )),
        tokio::spawn(writer(client_wr, from_server, mode, reset)),
    ];
    for pipe in pipes {
        let _ = pipe.await;
    }
    drop(guard);
}

/// Reads chunks from one side and queues them for the writer of the other.
/// Ends on EOF or error (the writer then half-closes its side) or on reset.
/// `tripwire`: the client's side, which may set off an armed trip wire.
async fn reader(
    mut rd: OwnedReadHalf,
    queue: mpsc::Sender<Chunk>,
    mut reset: watch::Receiver<u64>,
    mut rng: XorShift,
    tripwire: Option<Arc<Shared>>,
) {
    // `biased` everywhere: a reset wins over whatever else is ready.
    loop {
        let mut data = vec![0; CHUNK];
        let read = tokio::select! {
            biased;
            _ = reset.changed() => return abort(rd.as_ref()),
            read = rd.read(&mut data) => read,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        data.truncate(n);
        if let Some(shared) = &tripwire {
            trip(shared, &data);
        }
        let chunk = Chunk {
            data,
            read_at: Instant::now(),
            sample: rng.next_u64(),
        };
        tokio::select! {
            biased;
            _ = reset.changed() => return abort(rd.as_ref()),
            sent = queue.send(chunk) => if sent.is_err() { return },
        }
    }
}

/// Sets off the armed trip wire if `data` holds its pattern: the proxy's
/// mode becomes [`Mode::Blackhole`] before `data` is queued, so its writer
/// holds it.
fn trip(shared: &Shared, data: &[u8]) {
    let mut wire = shared
        .tripwire
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let hit = wire
        .as_ref()
        .is_some_and(|p| data.windows(p.len()).any(|w| w == p.as_slice()));
    if !hit {
        return;
    }
    *wire = None;
    if let Some(mode) = shared.mode.upgrade() {
        mode.send_replace(Mode::Blackhole);
    }
    shared.tripped.send_modify(|n| *n += 1);
}

/// Writes queued chunks to one side when the mode lets them through, in
/// order.
async fn writer(
    mut wr: OwnedWriteHalf,
    mut queue: mpsc::Receiver<Chunk>,
    mut mode: Modes,
    mut reset: watch::Receiver<u64>,
) {
    // On reset: RST (not FIN), so the peer sees ECONNRESET.
    let reset_and_close = |wr: OwnedWriteHalf| {
        abort(wr.as_ref());
        wr.forget();
    };
    loop {
        let chunk = tokio::select! {
            biased;
            _ = reset.changed() => return reset_and_close(wr),
            chunk = queue.recv() => chunk,
        };
        let Some(chunk) = chunk else {
            // The reader of the other side stops on a reset too; that is not
            // an end of stream to pass on.
            if !matches!(reset.has_changed(), Ok(false)) {
                return reset_and_close(wr);
            }
            // The other side finished sending: pass the FIN on.
            let _ = wr.shutdown().await;
            return;
        };
        // Wait until the mode (as it is now, and as it changes) releases it.
        loop {
            let current = mode.current();
            let deadline = current.hold(chunk.sample).map(|hold| chunk.read_at + hold);
            if matches!(deadline, Some(d) if d <= Instant::now()) {
                break;
            }
            let expired = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = reset.changed() => return reset_and_close(wr),
                changed = mode.changed() => if changed.is_err() { return reset_and_close(wr) },
                _ = expired => break,
            }
        }
        tokio::select! {
            biased;
            _ = reset.changed() => return reset_and_close(wr),
            written = wr.write_all(&chunk.data) => if written.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_per_mode() {
        let ms = Duration::from_millis;
        assert_eq!(Mode::Pass.hold(7), Some(Duration::ZERO));
        assert_eq!(Mode::Delay(ms(30)).hold(7), Some(ms(30)));
        assert_eq!(Mode::Blackhole.hold(7), None);
        let jitter = Mode::Jitter {
            min: ms(10),
            max: ms(20),
        };
        let mut rng = XorShift::new(1);
        let holds: Vec<Duration> = (0..1000)
            .map(|_| jitter.hold(rng.next_u64()).unwrap())
            .collect();
        assert!(holds.iter().all(|h| (ms(10)..=ms(20)).contains(h)));
        assert!(holds.iter().any(|h| *h < ms(12)) && holds.iter().any(|h| *h > ms(18)));
        let fixed = Mode::Jitter {
            min: ms(5),
            max: ms(5),
        };
        assert_eq!(fixed.hold(u64::MAX), Some(ms(5)));
    }

    #[tokio::test]
    #[should_panic(expected = "jitter: min")]
    async fn jitter_rejects_min_above_max() {
        let proxy = FaultProxy::start("127.0.0.1:9".parse().unwrap())
            .await
            .unwrap();
        proxy.jitter(Duration::from_millis(2), Duration::from_millis(1));
    }
}
