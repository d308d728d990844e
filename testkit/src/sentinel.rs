//! A Redis Sentinel deployment per test: a primary, a replica and three
//! sentinels, on free loopback ports.

use std::fmt;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::proxy::FaultProxy;
use crate::redis_server::{RedisServer, RedisServerBuilder};
use crate::resp::Reply;
use crate::tls::{free_port, TlsFiles};

static DEPLOYMENT_SEQ: AtomicU32 = AtomicU32::new(0);

/// How often the harness polls the sentinels while it waits for a change.
const POLL: Duration = Duration::from_millis(20);

/// Configures a [`RedisSentinel`] before starting it.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use std::time::Duration;
/// use leader_testkit::RedisSentinel;
///
/// let deployment = RedisSentinel::builder()
///     .master_name("mymaster")
///     .down_after(Duration::from_millis(500))
///     .acl_user("app", "apppw", "~leader:* &leader:* +@all")
///     .start()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisSentinelBuilder {
    master_name: String,
    sentinels: usize,
    quorum: usize,
    down_after: Duration,
    failover_timeout: Duration,
    password: Option<String>,
    acl_users: Vec<(String, String, String)>,
    sentinel_password: Option<String>,
    node_args: Vec<String>,
    /// `--tls-*` arguments without `--tls-port` (see [`RedisSentinelBuilder::tls`]).
    tls: Option<Vec<String>>,
}

impl Default for RedisSentinelBuilder {
    fn default() -> Self {
        RedisSentinelBuilder {
            master_name: "mymaster".to_owned(),
            sentinels: 3,
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(5),
            password: None,
            acl_users: Vec::new(),
            sentinel_password: None,
            node_args: Vec::new(),
            tls: None,
        }
    }
}

impl RedisSentinelBuilder {
    /// The name the sentinels monitor the primary under; default `mymaster`.
    pub fn master_name(mut self, name: impl Into<String>) -> Self {
        self.master_name = name.into();
        self
    }

    /// How many sentinels (default 3) and the quorum that agrees a master is
    /// down (default 2).
    pub fn sentinels(mut self, count: usize, quorum: usize) -> Self {
        self.sentinels = count;
        self.quorum = quorum;
        self
    }

    /// `sentinel down-after-milliseconds` (default 1 s): how long a master
    /// must be unreachable before a sentinel deems it down. A killed primary
    /// is replaced about this long, plus one or two seconds of agreement and
    /// promotion, after the kill. Much shorter (500 ms) makes a busy machine
    /// (a parallel `cargo test`) see spurious failovers, e.g. back to a
    /// primary just restarted empty.
    pub fn down_after(mut self, after: Duration) -> Self {
        self.down_after = after;
        self
    }

    /// `sentinel failover-timeout` (default 5 s). A failover attempt that
    /// did not finish is retried after twice this.
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// `requirepass` on the primary and the replica (the replica uses it as
    /// `masterauth`, the sentinels as `auth-pass`).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// An ACL user on the primary and the replica (see
    /// [`RedisServerBuilder::acl_user`]). Replication and the sentinels keep
    /// using the default user (with [`password`](Self::password) if set).
    pub fn acl_user(mut self, name: &str, password: &str, rules: &str) -> Self {
        self.acl_users
            .push((name.to_owned(), password.to_owned(), rules.to_owned()));
        self
    }

    /// `requirepass` on the sentinels themselves (they authenticate to each
    /// other with it, `sentinel sentinel-pass`): clients then need it in
    /// their sentinel URLs.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_password = Some(password.into());
        self
    }

    /// Extra arguments for the primary and the replica (see
    /// [`RedisServerBuilder::arg`]), e.g. `["--maxmemory", "10mb"]`.
    pub fn node_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.node_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Serve TLS everywhere with `files`' certificates: every node and
    /// sentinel gets a TLS port next to its plain one (which the harness's
    /// own commands keep using), replication and the sentinels' links run
    /// over TLS (`tls-replication yes`), the sentinels monitor the nodes'
    /// TLS ports, and [`sentinel_urls`](RedisSentinel::sentinel_urls) are
    /// `rediss://` URLs of the sentinels' TLS ports. Clients need no
    /// certificate.
    pub fn tls(mut self, files: &TlsFiles) -> Self {
        let mut args = files.server_args(0);
        // server_args starts with `--tls-port PORT`; each process gets its own.
        args.drain(..2);
        args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
        self.tls = Some(args);
        self
    }

    /// A free TLS port and the arguments for it, when TLS is on.
    fn tls_args(&self) -> io::Result<Option<(u16, Vec<String>)>> {
        let Some(args) = &self.tls else {
            return Ok(None);
        };
        let port = free_port()?;
        let mut all = vec!["--tls-port".to_owned(), port.to_string()];
        all.extend(args.iter().cloned());
        Ok(Some((port, all)))
    }

    fn node(&self) -> RedisServerBuilder {
        // Diskless sync without its default 5 s wait for more replicas.
        let mut node = RedisServer::builder()
            .args(["--repl-diskless-sync-delay", "0"])
            .args(self.node_args.iter().cloned());
        if let Some(password) = &self.password {
            node = node
                .password(password.clone())
                .args(["--masterauth", password]);
        }
        for (name, password, rules) in &self.acl_users {
            node = node.acl_user(name, password, rules);
        }
        node
    }

    /// Starts the primary, the replica (replicating through a
    /// [`FaultProxy`], see [`RedisSentinel::replication_link`]) and the
    /// sentinels, and waits until every sentinel knows the replica and the
    /// other sentinels (so a failover can happen) and the replica is in sync.
    ///
    /// # Errors
    ///
    /// If a process fails to start, or the deployment does not settle within
    /// 30 s (the error includes every log).
    pub async fn start(self) -> io::Result<RedisSentinel> {
        let seq = DEPLOYMENT_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "leader-testkit-sentinel-{}-{seq}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let mut tls_ports = Vec::new();
        let mut node = |builder: RedisServerBuilder| -> io::Result<RedisServerBuilder> {
            Ok(match self.tls_args()? {
                Some((port, args)) => {
                    tls_ports.push(port);
                    builder.args(args)
                }
                None => builder,
            })
        };
        let primary = node(self.node())?.start().await?;
        let replica_builder = node(self.node())?;
        // The replica replicates from the port the sentinels monitor.
        let monitored = |server: &RedisServer, i: usize| -> u16 {
            tls_ports.get(i).copied().unwrap_or(server.port())
        };
        let primary_port = monitored(&primary, 0);
        let link = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], primary_port))).await?;
        let replica = replica_builder
            .args(["--replicaof", "127.0.0.1", &link.addr().port().to_string()])
            .start()
            .await?;
        let mut sentinels = Vec::with_capacity(self.sentinels);
        for i in 0..self.sentinels {
            let file = dir.join(format!("sentinel-{i}.conf"));
            let mut conf = format!(
                "sentinel monitor {name} 127.0.0.1 {port} {quorum}\n\
                 sentinel down-after-milliseconds {name} {down}\n\
                 sentinel failover-timeout {name} {failover}\n\
                 sentinel parallel-syncs {name} 1\n",
                name = self.master_name,
                port = primary_port,
                quorum = self.quorum,
                down = self.down_after.as_millis(),
                failover = self.failover_timeout.as_millis(),
            );
            if let Some(password) = &self.password {
                conf.push_str(&format!(
                    "sentinel auth-pass {} {password}\n",
                    self.master_name
                ));
            }
            if let Some(password) = &self.sentinel_password {
                conf.push_str(&format!("sentinel sentinel-pass {password}\n"));
            }
            fs::write(&file, conf)?;
            let mut sentinel = RedisServer::builder().config_file(&file).arg("--sentinel");
            let mut sentinel_tls_port = None;
            if let Some((port, args)) = self.tls_args()? {
                sentinel = sentinel.args(args);
                sentinel_tls_port = Some(port);
            }
            if let Some(password) = &self.sentinel_password {
                sentinel = sentinel.password(password.clone());
            }
            sentinels.push((sentinel.start().await?, sentinel_tls_port));
        }
        let (sentinels, sentinel_tls_ports): (Vec<_>, Vec<_>) = sentinels.into_iter().unzip();
        let deployment = RedisSentinel {
            config: self,
            nodes: vec![primary, replica],
            tls_ports,
            sentinels,
            sentinel_tls_ports,
            link,
            dir,
        };
        deployment.settle(Duration::from_secs(30)).await?;
        Ok(deployment)
    }
}

/// A Sentinel deployment owned by one test: node 0 starts as the primary,
/// node 1 as its replica, and three sentinels (by default) monitor them.
///
/// - [`sentinel_urls`](Self::sentinel_urls) and
///   [`master_name`](Self::master_name) go to the code under test.
/// - [`master`](Self::master) asks the sentinels which node is the master
///   now; [`failover`](Self::failover) forces a failover (`SENTINEL
///   FAILOVER`) and [`kill_master`](Self::kill_master) kills the master's
///   process, each returning the node promoted once every sentinel names it.
/// - **Replication link.** Node 1 replicates from node 0 through a
///   [`FaultProxy`] ([`replication_link`](Self::replication_link)):
///   [`cut_replication`](Self::cut_replication) breaks the link (the replica
///   sees it drop and cannot reconnect) and
///   [`blackhole_replication`](Self::blackhole_replication) silences it (a
///   half-open link), while clients and sentinels still reach both nodes;
///   [`heal_replication`](Self::heal_replication) undoes either. Writes made
///   meanwhile are missing on the replica, so promoting it then (e.g.
///   [`failover`](Self::failover) or [`kill_master`](Self::kill_master)
///   while cut) is the "lagging replica promoted" fault. The proxy only
///   carries the replication of the *starting* topology: after a failover,
///   the sentinels point the old primary straight at the new one.
///
/// Every process is killed on drop. Failure messages should include
/// [`report`](Self::report) (every log), e.g. through [`check`](Self::check).
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use std::time::Duration;
/// use leader_testkit::RedisSentinel;
///
/// let mut deployment = RedisSentinel::start().await?;
/// let urls = deployment.sentinel_urls(); // with deployment.master_name(): the code under test's config
/// assert_eq!(deployment.master().await?, 0);
///
/// // The lagging-replica fault: cut the link for a while, then promote.
/// deployment.cut_replication().await;
/// tokio::time::sleep(Duration::from_secs(2)).await;
/// let promoted = deployment.failover().await?; // node 1, without the writes of the last 2 s
/// deployment.heal_replication();
/// assert_eq!(promoted, 1);
///
/// // Kill the master: the sentinels promote the other node.
/// let next = deployment.kill_master().await?;
/// assert_eq!(next, 0); // the old primary, a replica after the first failover
/// # Ok(()) }
/// ```
pub struct RedisSentinel {
    config: RedisSentinelBuilder,
    nodes: Vec<RedisServer>,
    /// With TLS: each node's TLS port (what the sentinels know it by).
    tls_ports: Vec<u16>,
    sentinels: Vec<RedisServer>,
    /// With TLS: each sentinel's TLS port.
    sentinel_tls_ports: Vec<Option<u16>>,
    link: FaultProxy,
    dir: PathBuf,
}

impl fmt::Debug for RedisSentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSentinel")
            .field("master_name", &self.config.master_name)
            .field("nodes", &self.nodes)
            .field("sentinels", &self.sentinels)
            .field("link", &self.link)
            .finish()
    }
}

impl RedisSentinel {
    /// Configure a deployment before starting it.
    pub fn builder() -> RedisSentinelBuilder {
        RedisSentinelBuilder::default()
    }

    /// Starts a deployment with the default configuration.
    ///
    /// # Errors
    ///
    /// As [`RedisSentinelBuilder::start`].
    pub async fn start() -> io::Result<RedisSentinel> {
        Self::builder().start().await
    }

    /// The name the sentinels know the master by.
    pub fn master_name(&self) -> &str {
        &self.config.master_name
    }

    /// `redis://127.0.0.1:PORT` of every sentinel (without credentials), or
    /// `rediss://127.0.0.1:TLS_PORT` with [`tls`](RedisSentinelBuilder::tls).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .zip(&self.sentinel_tls_ports)
            .map(|(s, tls)| match tls {
                Some(port) => format!("rediss://127.0.0.1:{port}"),
                None => s.url(),
            })
            .collect()
    }

    /// The data nodes: 0 started as the primary, 1 as the replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Data node `i`.
    ///
    /// # Panics
    ///
    /// If there is no node `i` (there are two).
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Data node `i`, to kill, restart, pause it…
    ///
    /// # Panics
    ///
    /// If there is no node `i`.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// Sentinel `i`, to kill or pause it.
    ///
    /// # Panics
    ///
    /// If there is no sentinel `i`.
    pub fn sentinel_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.sentinels[i]
    }

    /// The proxy node 1 replicates from node 0 through (in the starting
    /// topology): for faults beyond the cut, e.g. a delay.
    pub fn replication_link(&self) -> &FaultProxy {
        &self.link
    }

    /// Breaks node 1's replication link: current link connections are reset
    /// and new ones refused until [`heal_replication`](Self::heal_replication).
    /// The replica reports `master_link_status:down` at once.
    ///
    /// Only while the link still runs through the proxy: Sentinel repoints
    /// a replica whose master address is not the monitored one
    /// (`+fix-slave-config`, `failover-timeout` after it notices, about 5 s
    /// after the start by default), after which this cuts nothing. For a
    /// cut that works in any topology, send the replica `REPLICAOF` a port
    /// nobody listens on (its data stays, the link is down, Sentinel undoes
    /// it `failover-timeout` after it notices), as the chaos suite's
    /// lagging-replica fault does.
    pub async fn cut_replication(&self) {
        self.link.refuse(true);
        self.link.reset_all().await;
    }

    /// Silences node 1's replication link: nothing is delivered in either
    /// direction (and nothing is lost: bytes are delivered on
    /// [`heal_replication`](Self::heal_replication), unless the link is
    /// dropped first, e.g. by a promotion). The replica only notices after
    /// its `repl-timeout`.
    pub fn blackhole_replication(&self) {
        self.link.blackhole();
    }

    /// Undoes [`cut_replication`](Self::cut_replication) and
    /// [`blackhole_replication`](Self::blackhole_replication).
    pub fn heal_replication(&self) {
        self.link.refuse(false);
        self.link.pass();
    }

    /// The node that the sentinels name master now: the answer of the
    /// majority of the sentinels that answer `SENTINEL
    /// GET-MASTER-ADDR-BY-NAME`.
    ///
    /// # Errors
    ///
    /// If no majority of the sentinels agrees on a node of this deployment.
    pub async fn master(&self) -> io::Result<usize> {
        let mut votes = vec![0usize; self.nodes.len()];
        let mut answers = Vec::new();
        for sentinel in &self.sentinels {
            let addr = self.named_master(sentinel).await;
            if let Ok(addr) = &addr {
                if let Some(i) = self.node_index(*addr) {
                    votes[i] += 1;
                }
            }
            answers.push(format!("{}: {addr:?}", sentinel.port()));
        }
        let majority = self.sentinels.len() / 2 + 1;
        votes.iter().position(|&v| v >= majority).ok_or_else(|| {
            io::Error::other(format!(
                "no majority of the sentinels names one master: {}",
                answers.join("; ")
            ))
        })
    }

    /// The address the node `i` listens on (its plain port; see
    /// [`node_tls_port`](Self::node_tls_port)).
    ///
    /// # Panics
    ///
    /// If there is no node `i`.
    pub fn node_addr(&self, i: usize) -> SocketAddr {
        self.nodes[i].addr()
    }

    /// With [`tls`](RedisSentinelBuilder::tls): node `i`'s TLS port, which
    /// the sentinels name.
    pub fn node_tls_port(&self, i: usize) -> Option<u16> {
        self.tls_ports.get(i).copied()
    }

    /// `SENTINEL FAILOVER` (on the first sentinel that accepts it): the
    /// replica is promoted without the sentinels agreeing that the master is
    /// down. The old master is told to replicate from the new one, which
    /// Sentinel does some seconds later (it disconnects that node's clients
    /// then). Returns the promoted node once every sentinel names it and it
    /// reports `role:master`.
    ///
    /// # Errors
    ///
    /// If no sentinel accepts the failover or it does not complete within
    /// 30 s (the error includes every log).
    pub async fn failover(&self) -> io::Result<usize> {
        let before = self.master().await?;
        let mut refusals = Vec::new();
        let mut accepted = false;
        for sentinel in &self.sentinels {
            match sentinel
                .cmd(&["SENTINEL", "FAILOVER", &self.config.master_name])
                .await
            {
                Ok(Reply::Simple(_)) => {
                    accepted = true;
                    break;
                }
                other => refusals.push(format!("{}: {other:?}", sentinel.port())),
            }
        }
        if !accepted {
            return Err(io::Error::other(format!(
                "no sentinel started a failover: {}\n{}",
                refusals.join("; "),
                self.report()
            )));
        }
        self.wait_master_change(before, Duration::from_secs(30))
            .await
    }

    /// SIGKILLs the node the sentinels name master, and returns the node
    /// they promote instead (once every sentinel names it and it reports
    /// `role:master`). The killed node stays down; restart it with
    /// [`node_mut`](Self::node_mut)`(i).start_again()` (the sentinels then
    /// make it a replica of the new master).
    ///
    /// # Errors
    ///
    /// If the master cannot be found or killed, or no other node is
    /// promoted within 60 s (the error includes every log).
    pub async fn kill_master(&mut self) -> io::Result<usize> {
        let before = self.master().await?;
        self.nodes[before].kill().await?;
        self.wait_master_change(before, Duration::from_secs(60))
            .await
    }

    /// Waits until every sentinel names a node other than `from` as master
    /// and that node reports `role:master`; returns it.
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`, with every log.
    pub async fn wait_master_change(&self, from: usize, timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(to) = self.unanimous_master().await {
                if to != from && self.role(to).await.as_deref() == Some("master") {
                    return Ok(to);
                }
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the sentinels did not move the master away from node {from} within {timeout:?}\n{}",
                        self.report()
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until node `replica` reports `master_link_status:up` and has
    /// every byte the master `master` wrote (equal replication offsets).
    ///
    /// # Errors
    ///
    /// `TimedOut` after `timeout`, with every log.
    pub async fn wait_in_sync(
        &self,
        master: usize,
        replica: usize,
        timeout: Duration,
    ) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.replication(master).await;
            let r = self.replication(replica).await;
            let offset = |info: &str, key: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(|v| v.trim().to_owned())
            };
            if let (Some(m), Some(r)) = (&m, &r) {
                let synced = offset(r, "master_link_status:").as_deref() == Some("up")
                    && offset(m, "master_repl_offset:").is_some()
                    && offset(m, "master_repl_offset:") == offset(r, "slave_repl_offset:");
                if synced {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "node {replica} not in sync with node {master} within {timeout:?}:\n{m:?}\n{r:?}\n{}",
                        self.report()
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Panics with `msg` and every log unless `cond` holds.
    ///
    /// # Panics
    ///
    /// If `cond` is false.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl fmt::Display) {
        if !cond {
            panic!("{msg}\n{}", self.report());
        }
    }

    /// Every node's and sentinel's log, for a failure message.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            out.push_str(&format!("=== node {i} ===\n{}\n", node.report()));
        }
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            out.push_str(&format!("=== sentinel {i} ===\n{}\n", sentinel.report()));
        }
        out
    }

    /// The node each sentinel names, if they all name the same one.
    async fn unanimous_master(&self) -> Option<usize> {
        let mut agreed = None;
        for sentinel in &self.sentinels {
            let node = self.node_index(self.named_master(sentinel).await.ok()?)?;
            match agreed {
                None => agreed = Some(node),
                Some(n) if n == node => {}
                Some(_) => return None,
            }
        }
        agreed
    }

    async fn named_master(&self, sentinel: &RedisServer) -> io::Result<SocketAddr> {
        let reply = sentinel
            .cmd(&[
                "SENTINEL",
                "GET-MASTER-ADDR-BY-NAME",
                &self.config.master_name,
            ])
            .await?;
        let parse = || {
            let Reply::Array(items) = &reply else {
                return None;
            };
            let host = items.first()?.as_str()?;
            let port = items.get(1)?.as_str()?;
            format!("{host}:{port}").parse().ok()
        };
        parse().ok_or_else(|| io::Error::other(format!("unexpected reply {reply:?}")))
    }

    fn node_index(&self, addr: SocketAddr) -> Option<usize> {
        self.nodes.iter().enumerate().position(|(i, n)| {
            n.addr() == addr
                || self
                    .node_tls_port(i)
                    .is_some_and(|p| addr == SocketAddr::from(([127, 0, 0, 1], p)))
        })
    }

    async fn replication(&self, i: usize) -> Option<String> {
        let reply = self.nodes[i].cmd(&["INFO", "replication"]).await.ok()?;
        reply.as_str().map(str::to_owned)
    }

    /// `role:` of `INFO replication` of node `i`.
    async fn role(&self, i: usize) -> Option<String> {
        let info = self.replication(i).await?;
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_owned())
    }

    /// Until every sentinel knows the replica and all other sentinels, and
    /// the replica is in sync.
    async fn settle(&self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let others = self.sentinels.len().saturating_sub(1).to_string();
        loop {
            let mut ready = true;
            for sentinel in &self.sentinels {
                let reply = sentinel
                    .cmd(&["SENTINEL", "MASTER", &self.config.master_name])
                    .await;
                let field = |name: &str| -> Option<String> {
                    let Ok(Reply::Array(items)) = &reply else {
                        return None;
                    };
                    items
                        .chunks(2)
                        .find(|kv| kv.first().and_then(Reply::as_str) == Some(name))
                        .and_then(|kv| kv.get(1)?.as_str().map(str::to_owned))
                };
                ready &= field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some(others.as_str())
                    && field("flags").as_deref() == Some("master");
            }
            if ready
                && self
                    .wait_in_sync(0, 1, Duration::from_millis(1))
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the Sentinel deployment did not settle within {timeout:?}\n{}",
                        self.report()
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        // The servers kill themselves; the sentinel configs are ours.
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
