//! A fleet of `leader-instance` processes against one real `redis-server`,
//! optionally each behind its own [`FaultProxy`], with a fenced store.

use std::fmt::Write as _;
use std::io;
use std::time::Duration;

use leader_testkit::{
    monotonic_now_ns, ChildProcess, FaultProxy, RedisCluster, RedisSentinel, RedisServer,
};
use tokio::process::Command;
use tokio::task::JoinSet;

use super::checker::{parse_line, History, Line, ProcessLog};
use super::store::FencedStore;

/// The lease key of the fleet's group (`chaos`).
const LEASE_KEY: &str = "leader:{chaos}:lease";

/// The instance binary of this package.
pub const INSTANCE_BIN: &str = env!("CARGO_BIN_EXE_leader-instance");

/// How an instance process is configured (see the binary's docs).
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub instances: usize,
    pub ttl: Duration,
    pub renew: Duration,
    pub retry: Duration,
    pub call_timeout: Option<Duration>,
    pub tick: Duration,
    pub body: Duration,
    /// Each instance reaches Redis only through its own [`FaultProxy`].
    pub proxied: bool,
    /// Start a [`FencedStore`] and have every gated body write to it.
    pub store: bool,
    /// Elect on a Sentinel deployment (a primary, a replica, three
    /// sentinels) instead of one server; not with `proxied`.
    pub sentinel: bool,
    /// Elect on a 3-master Redis Cluster (`LEADER_REDIS_CLUSTER_URLS`);
    /// not with `proxied` (the cluster names its nodes' own addresses).
    pub cluster: bool,
    /// Balanced leadership (`LEADER_BALANCE=1` in the test's environment,
    /// which the instances inherit): the settled leader is the live
    /// instance first by name, and a leader that comes back from a fault
    /// takes its group back by a hand-over.
    pub balanced: bool,
    pub env: Vec<(String, String)>,
}

impl FleetConfig {
    /// Three instances, ttl 1 s, renew ttl/3 and retry ttl/10 (the
    /// proportions of the defaults: 15 s, 5 s, 2 s), a call timeout of 0.6
    /// × ttl (so a round trip of ttl/2 still succeeds), a tick every 50 ms,
    /// bodies of 10 ms.
    ///
    /// Retry well below renew: after Redis returns, a follower's next
    /// attempt comes within `retry`, and the safe start after data loss adds
    /// one ttl, so the group leads again within ttl + renew.
    pub fn new() -> Self {
        Self::with_ttl(Duration::from_secs(1))
    }

    /// As [`new`](Self::new), with every timing scaled to `ttl`.
    pub fn with_ttl(ttl: Duration) -> Self {
        FleetConfig {
            instances: 3,
            ttl,
            renew: ttl / 3,
            retry: ttl / 10,
            call_timeout: Some(ttl * 6 / 10),
            tick: Duration::from_millis(50),
            body: Duration::from_millis(10),
            proxied: false,
            store: false,
            sentinel: false,
            cluster: false,
            balanced: std::env::var("LEADER_BALANCE").as_deref() == Ok("1"),
            env: Vec::new(),
        }
    }

    pub fn proxied(mut self) -> Self {
        self.proxied = true;
        self
    }

    /// Elect on a Sentinel deployment: instances find the master through
    /// the sentinels (`LEADER_REDIS_SENTINEL_*`), with no proxy.
    pub fn sentinel(mut self) -> Self {
        self.sentinel = true;
        self
    }

    /// Elect on a 3-master Redis Cluster: instances get every node's URL
    /// (`LEADER_REDIS_CLUSTER_URLS`), with no proxy.
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    pub fn with_store(mut self) -> Self {
        self.store = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// The command that starts one instance named `name` on `url`.
pub fn instance_command(cfg: &FleetConfig, name: &str, url: &str, store: Option<&str>) -> Command {
    let mut cmd = Command::new(INSTANCE_BIN);
    let ms = |d: Duration| d.as_millis().to_string();
    cmd.env("LEADER_REDIS_URL", url)
        .env("INSTANCE_ID", name)
        .env("TTL_MS", ms(cfg.ttl))
        .env("RENEW_MS", ms(cfg.renew))
        .env("RETRY_MS", ms(cfg.retry))
        .env("TICK_MS", ms(cfg.tick))
        .env("BODY_MS", ms(cfg.body))
        .env("RUST_LOG", "info")
        .env_remove("REDIS_URL")
        .env_remove("GROUP");
    if let Some(t) = cfg.call_timeout {
        cmd.env("CALL_TIMEOUT_MS", ms(t));
    }
    if let Some(store) = store {
        cmd.env("STORE_ADDR", store);
    }
    if cfg.balanced {
        // Followers print too, so `hands_back` knows when the harness has
        // read an instance's output up to the returning leader's election.
        cmd.env("STATS_MS", ms(cfg.renew));
    }
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    cmd
}

/// One instance process (a slot is re-filled with a new process, under a
/// new name, after a kill or stop).
pub struct Member {
    pub name: String,
    pub slot: usize,
    pub child: ChildProcess,
}

impl Member {
    pub fn lines(&self) -> Vec<String> {
        self.child.stdout().snapshot()
    }

    /// Waits for a line at index `from` or later that parses and satisfies
    /// `pred`; returns its index and the parsed line.
    pub async fn wait_line(
        &self,
        from: usize,
        mut pred: impl FnMut(&Line) -> bool,
        timeout: Duration,
    ) -> io::Result<(usize, Line)> {
        let (i, raw) = self
            .child
            .stdout()
            .wait_for_from(from, |l| parse_line(l).is_some_and(|p| pred(&p)), timeout)
            .await?;
        Ok((i, parse_line(&raw).expect("matched lines parse")))
    }
}

/// The index of the first line printed at or after `t_ns` (lines are in
/// time order; lines without a time are included).
pub fn index_after(lines: &[String], t_ns: u64) -> usize {
    let mut i = lines.len();
    while i > 0 {
        match parse_line(&lines[i - 1]) {
            Some(l) if l.time() < t_ns => break,
            _ => i -= 1,
        }
    }
    i
}

/// What a fleet's instances elect on.
pub enum Backend {
    /// One `redis-server` (reached through the proxies when proxied).
    Standalone(RedisServer),
    /// A Sentinel deployment, and which of its nodes is the master now.
    Sentinel {
        deployment: Box<RedisSentinel>,
        master: usize,
    },
    /// A Redis Cluster, and which of its nodes serves the group's slot.
    Cluster {
        cluster: Box<RedisCluster>,
        master: usize,
    },
}

pub struct Fleet {
    pub cfg: FleetConfig,
    backend: Backend,
    /// One per slot when [`FleetConfig::proxied`].
    pub proxies: Vec<FaultProxy>,
    pub store: Option<FencedStore>,
    /// Every process ever started, in order.
    members: Vec<Member>,
    /// Per slot: the index in `members` of its current process (`None`
    /// while the slot is empty).
    live: Vec<Option<usize>>,
    /// Per member index: the intervals it was stopped (SIGSTOP to SIGCONT).
    pub pauses: Vec<(usize, u64, u64)>,
    generation: usize,
}

impl Fleet {
    /// Starts Redis, the proxies and store if configured, and every
    /// instance; waits until each printed `ready`.
    pub async fn start(cfg: FleetConfig) -> Fleet {
        if cfg.sentinel {
            assert!(!cfg.proxied, "a Sentinel fleet has no proxies");
            // Sentinel repoints a replica cut off by `REPLICAOF` elsewhere
            // (the lagging-replica fault) `failover-timeout` after it
            // notices: longer than the fault's cut of 2 × ttl.
            let deployment = RedisSentinel::builder()
                .failover_timeout((cfg.ttl * 4).max(Duration::from_secs(5)))
                .start()
                .await
                .expect("the Sentinel deployment starts");
            let master = deployment
                .master()
                .await
                .expect("the sentinels name a master");
            return Self::start_with(
                cfg,
                Backend::Sentinel {
                    deployment: Box::new(deployment),
                    master,
                },
            )
            .await;
        }
        if cfg.cluster {
            assert!(!cfg.proxied, "a cluster fleet has no proxies");
            let cluster = RedisCluster::start().await.expect("the cluster starts");
            let master = cluster
                .master_of(LEASE_KEY)
                .await
                .expect("a node serves the group's slot");
            return Self::start_with(
                cfg,
                Backend::Cluster {
                    cluster: Box::new(cluster),
                    master,
                },
            )
            .await;
        }
        let redis = RedisServer::start().await.expect("redis-server starts");
        Self::start_on(cfg, redis).await
    }

    pub async fn start_on(cfg: FleetConfig, redis: RedisServer) -> Fleet {
        Self::start_with(cfg, Backend::Standalone(redis)).await
    }

    async fn start_with(cfg: FleetConfig, backend: Backend) -> Fleet {
        let mut proxies = Vec::new();
        if let (true, Backend::Standalone(redis)) = (cfg.proxied, &backend) {
            for _ in 0..cfg.instances {
                proxies.push(FaultProxy::start(redis.addr()).await.expect("proxy starts"));
            }
        }
        let store = if cfg.store {
            Some(FencedStore::start().await.expect("store starts"))
        } else {
            None
        };
        let mut fleet = Fleet {
            live: vec![None; cfg.instances],
            cfg,
            backend,
            proxies,
            store,
            members: Vec::new(),
            pauses: Vec::new(),
            generation: 0,
        };
        for slot in 0..fleet.cfg.instances {
            fleet.spawn(slot);
        }
        for slot in 0..fleet.cfg.instances {
            fleet.wait_ready(slot).await;
        }
        fleet
    }

    /// The Redis server the instances use now: the standalone server, or
    /// the Sentinel deployment's master.
    pub fn redis(&self) -> &RedisServer {
        match &self.backend {
            Backend::Standalone(redis) => redis,
            Backend::Sentinel { deployment, master } => deployment.node(*master),
            Backend::Cluster { cluster, master } => cluster.node(*master),
        }
    }

    /// As [`redis`](Self::redis), to kill, restart or stop it.
    pub fn redis_mut(&mut self) -> &mut RedisServer {
        match &mut self.backend {
            Backend::Standalone(redis) => redis,
            Backend::Sentinel { deployment, master } => deployment.node_mut(*master),
            Backend::Cluster { cluster, master } => cluster.node_mut(*master),
        }
    }

    /// The Sentinel deployment and its master node, if the fleet has one.
    pub fn sentinel(&self) -> Option<(&RedisSentinel, usize)> {
        match &self.backend {
            Backend::Sentinel { deployment, master } => Some((deployment, *master)),
            _ => None,
        }
    }

    /// The Redis Cluster and the node that serves the group's slot (as
    /// last noted), if the fleet has one.
    pub fn cluster(&self) -> Option<(&RedisCluster, usize)> {
        match &self.backend {
            Backend::Cluster { cluster, master } => Some((cluster, *master)),
            _ => None,
        }
    }

    /// Data node `i` of the Sentinel deployment.
    ///
    /// # Panics
    ///
    /// If the fleet has no Sentinel deployment.
    pub fn sentinel_node_mut(&mut self, i: usize) -> &mut RedisServer {
        match &mut self.backend {
            Backend::Sentinel { deployment, .. } => deployment.node_mut(i),
            _ => panic!("not a Sentinel fleet"),
        }
    }

    /// Note that the sentinels promoted `node`, or that the group's slot
    /// moved to cluster node `node`.
    pub fn set_master(&mut self, node: usize) {
        match &mut self.backend {
            Backend::Sentinel { master, .. } | Backend::Cluster { master, .. } => *master = node,
            Backend::Standalone(_) => {}
        }
    }

    /// The lease key of the fleet's group.
    pub fn lease_key(&self) -> &'static str {
        LEASE_KEY
    }

    /// The Redis URL instances of `slot` use.
    pub fn url_for(&self, slot: usize) -> String {
        match self.proxies.get(slot) {
            Some(proxy) => proxy.url(),
            None => self.redis().url(),
        }
    }

    /// Starts a new process in `slot` (which must be empty or about to be
    /// replaced), named `i<slot>-<generation>`.
    pub fn spawn(&mut self, slot: usize) -> &Member {
        self.generation += 1;
        let name = format!("i{slot}-{}", self.generation);
        let store = self.store.as_ref().map(|s| s.addr().to_string());
        let mut cmd = instance_command(&self.cfg, &name, &self.url_for(slot), store.as_deref());
        if let Some((cluster, _)) = self.cluster() {
            cmd.env_remove("LEADER_REDIS_URL")
                .env("LEADER_REDIS_CLUSTER_URLS", cluster.urls().join(","));
        }
        if let Some((deployment, _)) = self.sentinel() {
            cmd.env_remove("LEADER_REDIS_URL")
                .env("LEADER_REDIS_SENTINEL_MASTER", deployment.master_name())
                .env(
                    "LEADER_REDIS_SENTINEL_URLS",
                    deployment.sentinel_urls().join(","),
                );
        }
        let child = ChildProcess::spawn(cmd).expect("leader-instance spawns");
        self.members.push(Member { name, slot, child });
        self.live[slot] = Some(self.members.len() - 1);
        self.members.last().expect("just pushed")
    }

    pub async fn wait_ready(&self, slot: usize) {
        let member = self.member(slot);
        if let Err(e) = member
            .wait_line(
                0,
                |l| matches!(l, Line::Ready { .. }),
                Duration::from_secs(20),
            )
            .await
        {
            self.fail(format!("{} not ready: {e}", member.name));
        }
    }

    /// The current process of `slot`.
    pub fn member(&self, slot: usize) -> &Member {
        let i = self.live[slot].unwrap_or_else(|| panic!("slot {slot} is empty"));
        &self.members[i]
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The slots that have a process.
    pub fn live_slots(&self) -> Vec<usize> {
        (0..self.live.len())
            .filter(|s| self.live[*s].is_some())
            .collect()
    }

    /// The live slot whose last `elected`/`lost` line is `elected`.
    pub fn leader_slot(&self) -> Option<usize> {
        self.live_slots().into_iter().find(|slot| {
            let lines = self.member(*slot).lines();
            let last = lines.iter().rev().find_map(|l| match parse_line(l) {
                Some(Line::Elected { .. }) => Some(true),
                Some(Line::Lost { .. }) | Some(Line::Exit { .. }) => Some(false),
                _ => None,
            });
            last == Some(true)
        })
    }

    /// The token of the last `elected` line of `slot`.
    pub fn token_of(&self, slot: usize) -> Option<u64> {
        self.member(slot)
            .lines()
            .iter()
            .rev()
            .find_map(|l| match parse_line(l) {
                Some(Line::Elected { token, .. }) => Some(token),
                _ => None,
            })
    }

    /// Waits until some live process prints `elected` with a time at or
    /// after `t_ns`; returns its slot and the line.
    pub async fn wait_elected_after(
        &self,
        t_ns: u64,
        timeout: Duration,
    ) -> io::Result<(usize, Line)> {
        self.wait_any_after(
            t_ns,
            timeout,
            move |l| matches!(l, Line::Elected { at, .. } if *at >= t_ns),
        )
        .await
    }

    /// How many lines each live process printed so far, by slot: where
    /// [`wait_any_from`](Self::wait_any_from) starts to miss nothing printed
    /// after this look.
    pub fn lines_read(&self) -> Vec<(usize, usize)> {
        let slots = self.live_slots().into_iter();
        slots
            .map(|slot| (slot, self.member(slot).lines().len()))
            .collect()
    }

    /// Waits until some live process prints a line satisfying `pred`,
    /// looking only at lines stamped at or after `t_ns`. An `elected` or
    /// `lost` line is stamped with the time of its transition, before it
    /// is printed: one printed after `t_ns` may still be skipped. To wait
    /// for what comes after a look at the lines, use
    /// [`wait_any_from`](Self::wait_any_from).
    pub async fn wait_any_after(
        &self,
        t_ns: u64,
        timeout: Duration,
        pred: impl Fn(&Line) -> bool + Clone + Send + Sync + 'static,
    ) -> io::Result<(usize, Line)> {
        let from = self
            .live_slots()
            .into_iter()
            .map(|slot| (slot, index_after(&self.member(slot).lines(), t_ns)))
            .collect::<Vec<_>>();
        self.wait_any_from(&from, timeout, pred).await
    }

    /// Waits until the process of one of the `(slot, index)` pairs prints,
    /// at that index or later, a line satisfying `pred`. (Lines are in the
    /// order printed, but an `elected` or `lost` line carries the earlier
    /// time of the transition: to miss no line printed after a look at the
    /// lines, wait from the index that look ended at.)
    pub async fn wait_any_from(
        &self,
        from: &[(usize, usize)],
        timeout: Duration,
        pred: impl Fn(&Line) -> bool + Clone + Send + Sync + 'static,
    ) -> io::Result<(usize, Line)> {
        let mut waits = JoinSet::new();
        for &(slot, from) in from {
            let member = self.member(slot);
            let out = member.child.stdout().clone();
            let pred = pred.clone();
            waits.spawn(async move {
                let found = out
                    .wait_for_from(from, |l| parse_line(l).is_some_and(|p| pred(&p)), timeout)
                    .await;
                (slot, found)
            });
        }
        let mut last_err = io::Error::new(io::ErrorKind::NotFound, "no live instance");
        while let Some(done) = waits.join_next().await {
            match done {
                Ok((slot, Ok((_, raw)))) => {
                    return Ok((slot, parse_line(&raw).expect("matched lines parse")));
                }
                Ok((_, Err(e))) => last_err = e,
                Err(e) => last_err = io::Error::other(e),
            }
        }
        Err(io::Error::new(
            last_err.kind(),
            format!("no matching line from any instance within {timeout:?}"),
        ))
    }

    /// The largest token any process ever logged.
    pub fn max_token(&self) -> u64 {
        self.members
            .iter()
            .flat_map(|m| m.lines())
            .filter_map(|l| match parse_line(&l) {
                Some(Line::Elected { token, .. }) => Some(token),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The slot whose process leads once a balanced fleet settled: with one
    /// group, the live instance first by id (`i<slot>-<generation>`).
    pub fn balanced_slot(&self) -> Option<usize> {
        self.live_slots()
            .into_iter()
            .min_by_key(|slot| self.member(*slot).name.clone())
    }

    /// Waits until the group has a leader that ran the gated body at least
    /// once in its current leadership (balanced: the
    /// [`balanced_slot`](Self::balanced_slot), after the hand-overs that
    /// take it there); returns its slot.
    pub async fn settle(&self, timeout: Duration) -> io::Result<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            // Snapshot the largest token before looking for a leader: one
            // elected in between is then either seen as leader or awaited
            // (from the lines read before the snapshot: its line carries
            // the earlier time of the transition, so "printed after now"
            // could miss it).
            let read = self.lines_read();
            let max = self.max_token();
            let settled = |slot| !self.cfg.balanced || self.balanced_slot() == Some(slot);
            if let Some(slot) = self.leader_slot().filter(|s| settled(*s)) {
                let token = self.token_of(slot).expect("a leader has a token");
                let member = self.member(slot);
                let lines = member.lines();
                let from = lines
                    .iter()
                    .rposition(|l| matches!(parse_line(l), Some(Line::Elected { token: t, .. }) if t == token))
                    .unwrap_or(0);
                let ran = member
                    .wait_line(
                        from,
                        |l| match l {
                            Line::Run { token: t, .. } => *t == token,
                            Line::Lost { .. } | Line::Exit { .. } => true,
                            _ => false,
                        },
                        left,
                    )
                    .await?;
                if matches!(ran.1, Line::Run { .. }) {
                    return Ok(slot);
                }
                continue;
            }
            self.wait_any_from(
                &read,
                left,
                move |l| matches!(l, Line::Elected { token, .. } if *token > max),
            )
            .await?;
        }
    }

    /// kill -9 the process of `slot` and wait until it is gone; the slot is
    /// empty afterwards.
    pub async fn kill9(&mut self, slot: usize) -> u64 {
        let i = self.live[slot].take().expect("slot has a process");
        let at = monotonic_now_ns();
        let child = &mut self.members[i].child;
        child.kill9().expect("SIGKILL");
        child
            .wait_timeout(Duration::from_secs(10))
            .await
            .expect("killed child exits");
        // Every line it printed is captured once its stdout is closed.
        let _ = child.stdout().wait_closed(Duration::from_secs(10)).await;
        at
    }

    /// SIGTERM the process of `slot` and wait until it exits (it must exit
    /// 0 by itself); the slot is empty afterwards. Returns when the signal
    /// was sent.
    pub async fn terminate(&mut self, slot: usize) -> u64 {
        let i = self.live[slot].expect("slot has a process");
        let at = monotonic_now_ns();
        self.members[i].child.terminate().expect("SIGTERM");
        let status = self.members[i]
            .child
            .wait_timeout(Duration::from_secs(10))
            .await;
        let _ = self.members[i]
            .child
            .stdout()
            .wait_closed(Duration::from_secs(10))
            .await;
        match status {
            Ok(s) if s.success() => {}
            other => self.fail(format!(
                "{} did not exit cleanly on SIGTERM: {other:?}",
                self.members[i].name
            )),
        }
        self.live[slot] = None;
        at
    }

    /// SIGSTOP the process of `slot`; returns when it is stopped.
    pub fn pause(&mut self, slot: usize) -> u64 {
        let i = self.live[slot].expect("slot has a process");
        self.members[i].child.pause().expect("SIGSTOP");
        let at = monotonic_now_ns();
        self.pauses.push((i, at, u64::MAX));
        at
    }

    /// SIGCONT the process of `slot`.
    pub fn resume(&mut self, slot: usize) -> u64 {
        let i = self.live[slot].expect("slot has a process");
        let at = monotonic_now_ns();
        self.members[i].child.resume().expect("SIGCONT");
        if let Some(p) = self
            .pauses
            .iter_mut()
            .rev()
            .find(|p| p.0 == i && p.2 == u64::MAX)
        {
            p.2 = monotonic_now_ns();
        }
        at
    }

    /// Whether member `name` was stopped at some point in `[from, to]`.
    pub fn was_paused(&self, name: &str, from: u64, to: u64) -> bool {
        self.pauses
            .iter()
            .any(|(i, a, b)| self.members[*i].name == name && *a <= to && *b >= from)
    }

    /// The stdout lines of every process ever started.
    pub fn logs(&self) -> Vec<ProcessLog> {
        self.members
            .iter()
            .map(|m| ProcessLog::new(m.name.clone(), m.lines()))
            .collect()
    }

    pub fn history(&self) -> History {
        History::from_logs(&self.logs())
    }

    /// SIGTERM every live process and wait for them to exit cleanly.
    pub async fn stop_all(&mut self) {
        for slot in self.live_slots() {
            self.terminate(slot).await;
        }
    }

    /// Check safety over everything logged so far; panics with the report.
    pub fn assert_safe(&self) -> History {
        let history = self.history();
        history.assert_safe(&|| self.report());
        history
    }

    /// The tail of every process's output and of the Redis log.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            let lines = m.lines();
            let err = m.child.stderr().snapshot();
            let _ = writeln!(
                out,
                "--- {} (slot {}, pid {}): last {} of {} stdout lines ---",
                m.name,
                m.slot,
                m.child.pid(),
                lines.len().min(60),
                lines.len()
            );
            for l in &lines[lines.len().saturating_sub(60)..] {
                let _ = writeln!(out, "{l}");
            }
            let _ = writeln!(
                out,
                "--- {} stderr (last {} of {}) ---",
                m.name,
                err.len().min(30),
                err.len()
            );
            for l in &err[err.len().saturating_sub(30)..] {
                let _ = writeln!(out, "{l}");
            }
        }
        if let Some((deployment, master)) = self.sentinel() {
            let _ = writeln!(out, "--- Sentinel deployment (master: node {master}) ---");
            out.push_str(&deployment.report());
            return out;
        }
        if let Some((cluster, master)) = self.cluster() {
            let _ = writeln!(
                out,
                "--- Redis Cluster (the group's slot: node {master}) ---"
            );
            out.push_str(&cluster.report());
            return out;
        }
        let log = self.redis().log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let _ = writeln!(out, "--- redis-server log (tail) ---");
        for l in tail.iter().rev() {
            let _ = writeln!(out, "{l}");
        }
        out
    }

    pub fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!("{msg}\n{}", self.report())
    }

    pub fn check(&self, cond: bool, msg: impl std::fmt::Display) {
        if !cond {
            self.fail(msg);
        }
    }
}
