//! Test support for the leader workspace (not published).
//!
//! - [`RedisServer`]: a real `redis-server` per test, on a free loopback
//!   port, that a test can kill, restart on the same port, stop and start
//!   again, pause and resume; its log goes into failure messages.
//! - [`FaultProxy`]: a TCP proxy between the code under test and Redis that
//!   adds delay or jitter, black-holes traffic, resets connections or refuses
//!   new ones, switchable while connections are live.
//! - [`ChildProcess`] and friends: spawn instance processes, capture their
//!   output lines, send them signals, and read [`monotonic_now_ns`], the clock
//!   every process shares.
//! - [`RedisCluster`]: a real Redis Cluster (3 masters by default) on free
//!   ports, created with `redis-cli --cluster create`.
//! - [`TlsFiles`]: a throw-away CA with server and client certificates (made
//!   by `openssl`), and [`free_port`] for a `--tls-port`.
//! - [`RespConn`] / [`Reply`]: a tiny raw RESP client, so tests can look at
//!   Redis without a client crate.
//!
//! Nothing here touches a Redis that is already running (e.g. on 6379).
#![warn(missing_docs)]

mod cluster;
mod process;
mod proxy;
mod redis_server;
mod resp;
mod rng;
mod tls;

pub use cluster::{RedisCluster, RedisClusterBuilder};
pub use process::{monotonic_now_ns, process_state, signal, ChildProcess, OutputLines, Signal};
pub use proxy::{FaultProxy, Mode};
pub use redis_server::{RedisServer, RedisServerBuilder};
pub use resp::{Reply, RespConn};
pub use tls::{free_port, TlsFiles};
