//! A real Redis Cluster per test: several `redis-server --cluster-enabled yes`
//! on free loopback ports, joined with `redis-cli --cluster create`.

use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, RedisServerBuilder};

/// How long the cluster may take to agree on its slots after `create`.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Configures a [`RedisCluster`] before starting it.
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    masters: usize,
    node: RedisServerBuilder,
    node_timeout: Duration,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            masters: 3,
            node: RedisServerBuilder::default(),
            node_timeout: Duration::from_millis(2000),
        }
    }
}

impl RedisClusterBuilder {
    /// Number of masters (no replicas); default 3, at least 3 (Redis's minimum).
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// Extra `redis-server` arguments for every node (see
    /// [`RedisServerBuilder::args`]), e.g.
    /// `["--cluster-require-full-coverage", "no"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.node = self.node.args(args);
        self
    }

    /// `--cluster-node-timeout` (default 2 s): how long before a silent node
    /// is considered failing.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Starts the nodes, creates the cluster (slots spread evenly over the
    /// masters) and waits until every node reports `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// If a node does not start, `redis-cli --cluster create` fails, or the
    /// cluster is not ok within 30 s; the error includes the nodes' logs.
    pub async fn start(self) -> io::Result<RedisCluster> {
        if self.masters < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a Redis Cluster needs at least 3 masters",
            ));
        }
        let mut nodes = Vec::with_capacity(self.masters);
        for _ in 0..self.masters {
            // The config file path is relative to the node's own --dir.
            let node = self
                .node
                .clone()
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args([
                    "--cluster-node-timeout".to_owned(),
                    self.node_timeout.as_millis().to_string(),
                ])
                .start()
                .await?;
            nodes.push(node);
        }
        let cluster = RedisCluster { nodes };
        cluster.create().await?;
        cluster.wait_ok().await?;
        Ok(cluster)
    }
}

/// A running Redis Cluster of masters only; every node is killed on drop.
///
/// # Examples
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use leader_testkit::RedisCluster;
///
/// let cluster = RedisCluster::start().await?;
/// let seeds: Vec<String> = cluster.urls();
/// let owner = cluster.master_of("leader:{jobs}:lease").await?;
/// let value = cluster.node(owner).cmd(&["GET", "leader:{jobs}:lease"]).await?;
/// # Ok(()) }
/// ```
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field(
                "ports",
                &self.nodes.iter().map(RedisServer::port).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RedisCluster {
    /// Configure a cluster before starting it.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// Starts a cluster of 3 masters; see [`RedisClusterBuilder::start`].
    ///
    /// # Errors
    ///
    /// As [`RedisClusterBuilder::start`].
    pub async fn start() -> io::Result<RedisCluster> {
        Self::builder().start().await
    }

    /// `redis://127.0.0.1:PORT` of every node, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// If there is no node `i`.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Node `i`, to kill, pause or restart it.
    ///
    /// # Panics
    ///
    /// If there is no node `i`.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The index of the node that serves `key`'s hash slot (as that node
    /// itself reports it).
    ///
    /// # Errors
    ///
    /// If the nodes cannot be asked or no node claims the slot.
    pub async fn master_of(&self, key: &str) -> io::Result<usize> {
        let slot = self.nodes[0]
            .cmd(&["CLUSTER", "KEYSLOT", key])
            .await?
            .ok()?
            .as_int()
            .ok_or_else(|| io::Error::other("CLUSTER KEYSLOT: not an integer"))?;
        for (i, node) in self.nodes.iter().enumerate() {
            if node.pid().is_none() {
                continue;
            }
            let Ok(reply) = node.cmd(&["CLUSTER", "NODES"]).await else {
                continue;
            };
            let text = reply.as_str().unwrap_or_default().to_owned();
            let Some(myself) = text.lines().find(|l| l.contains("myself")) else {
                continue;
            };
            if owns_slot(myself, slot) {
                return Ok(i);
            }
        }
        Err(io::Error::other(format!(
            "no node claims slot {slot} of {key:?}\n{}",
            self.report()
        )))
    }

    /// Panics with `msg` and every node's log unless `cond` holds.
    ///
    /// # Panics
    ///
    /// If `cond` is false.
    #[track_caller]
    pub fn check(&self, cond: bool, msg: impl fmt::Display) {
        if !cond {
            panic!("{msg}\n{}", self.report())
        }
    }

    /// Every node's port, pid and log, for a failure message.
    pub fn report(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::report)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn create(&self) -> io::Result<()> {
        let mut cmd = tokio::process::Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for node in &self.nodes {
            cmd.arg(node.addr().to_string());
        }
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(FORM_TIMEOUT, cmd.output())
            .await
            .map_err(|_| {
                io::Error::other(format!(
                    "redis-cli --cluster create hung\n{}",
                    self.report()
                ))
            })?
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run redis-cli: {e}")))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed ({}):\n{}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.report()
            )));
        }
        Ok(())
    }

    /// Until every node says `cluster_state:ok` and knows every other node.
    async fn wait_ok(&self) -> io::Result<()> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        loop {
            let mut all_ok = true;
            for node in &self.nodes {
                let info = node.cmd(&["CLUSTER", "INFO"]).await?;
                let text = info.as_str().unwrap_or_default();
                if !(text.contains("cluster_state:ok") && text.contains(&known)) {
                    all_ok = false;
                    break;
                }
            }
            if all_ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("cluster not ok within {FORM_TIMEOUT:?}\n{}", self.report()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether a `CLUSTER NODES` line lists `slot` among its ranges.
fn owns_slot(line: &str, slot: i64) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        if range.starts_with('[') {
            return false; // a slot being migrated or imported
        }
        match range.split_once('-') {
            Some((a, b)) => match (a.parse::<i64>(), b.parse::<i64>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                _ => false,
            },
            None => range.parse::<i64>() == Ok(slot),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges() {
        let line = "abc 127.0.0.1:1@2 myself,master - 0 0 1 connected 0-5460 7000 [6000-<-x]";
        assert!(owns_slot(line, 0));
        assert!(owns_slot(line, 5460));
        assert!(owns_slot(line, 7000));
        assert!(!owns_slot(line, 5461));
        assert!(!owns_slot(line, 6000));
    }
}
