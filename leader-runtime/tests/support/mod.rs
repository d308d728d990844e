//! What the runtime's integration tests share: runtimes with the tests'
//! timings, waiting for events, leading, and the server's identity. Each
//! test file has `mod support;` and uses a part of it.

#![allow(dead_code)] // each test binary uses a part

use std::time::Duration;

use leader_runtime::{Config, ConfigBuilder, Event, Runtime};
use leader_testkit::{RedisServer, RespConn};
use tokio::sync::broadcast;
use tokio::time::timeout;

/// The tests' usual lease ttl, renewal and retry intervals.
pub(crate) const TTL: Duration = Duration::from_millis(1000);
pub(crate) const RENEW: Duration = Duration::from_millis(300);
pub(crate) const RETRY: Duration = Duration::from_millis(200);

/// The group most tests elect on.
pub(crate) const G: &str = "jobs";

/// The ACL rules an application user needs for the default prefix, exactly
/// as the docs of `ConfigBuilder::redis_url` and DEPLOYING.md list them
/// (Cluster adds `+cluster|slots`, a Sentinel-managed master `+role`).
pub(crate) const ACL_RULES: &str = "~leader:* &leader:released &leader:control +evalsha +eval \
    +script|load +get +set +pexpire +pttl +del +time +info +type +exists +hmget +hset \
    +publish +subscribe +ping";

/// What balanced leadership adds to [`ACL_RULES`], as DEPLOYING.md and the
/// docs of `ConfigBuilder::balance_leadership` list it (`members.lua` on
/// the hash `{prefix}:balance`; `HSET` is in [`ACL_RULES`] already).
pub(crate) const BALANCE_RULES: &str = " +hdel +hgetall";

/// A config builder for instance `id` with [`TTL`], [`RENEW`] and
/// [`RETRY`]; the caller names the backend (and may change the timings).
pub(crate) fn config(id: &str) -> ConfigBuilder {
    Config::builder()
        .ttl(TTL)
        .renew_interval(RENEW)
        .retry_interval(RETRY)
        .instance_id(id)
}

/// A runtime from `config`.
pub(crate) fn runtime(config: ConfigBuilder) -> Runtime {
    Runtime::new(config.build().unwrap()).unwrap()
}

/// Instance `id` on the Redis at `url`, with the usual timings.
pub(crate) fn instance(url: impl Into<String>, id: &str) -> Runtime {
    runtime(config(id).redis_url(url))
}

/// The next event matching `want` within `limit`; `None` when none came
/// or the runtime stopped. Skips what a lagging receiver lost.
pub(crate) async fn next_event(
    rx: &mut broadcast::Receiver<Event>,
    limit: Duration,
    want: impl Fn(&Event) -> bool,
) -> Option<Event> {
    timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(e) if want(&e) => return Some(e),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
}

/// The next transition (not a renewal or a backend error), within `limit`.
pub(crate) async fn transition(rx: &mut broadcast::Receiver<Event>, limit: Duration) -> Event {
    timeout(limit, async {
        loop {
            match rx.recv().await.unwrap() {
                Event::Renewed { .. } | Event::BackendError { .. } => {}
                e => return e,
            }
        }
    })
    .await
    .expect("no transition in time")
}

/// The token of the next `Elected` (of any group), within `limit`.
pub(crate) async fn elected(rx: &mut broadcast::Receiver<Event>, limit: Duration) -> u64 {
    timeout(limit, async {
        loop {
            if let Event::Elected { token, .. } = rx.recv().await.unwrap() {
                return token;
            }
        }
    })
    .await
    .expect("not elected in time")
}

/// The token of the next `Elected` of `group` within `limit`; panics if
/// `group` is lost meanwhile.
pub(crate) async fn elected_in(
    rx: &mut broadcast::Receiver<Event>,
    group: &str,
    limit: Duration,
) -> u64 {
    timeout(limit, async {
        loop {
            match rx.recv().await.unwrap() {
                Event::Elected {
                    group: g, token, ..
                } if g == group => return token,
                Event::Lost { group: g, .. } if g == group => panic!("lost {group} while waiting"),
                _ => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{group}: not elected within {limit:?}"))
}

/// The token of an `Elected` event.
pub(crate) fn elected_token(e: Event) -> u64 {
    match e {
        Event::Elected { token, .. } => token,
        other => panic!("expected Elected, got {other:?}"),
    }
}

/// Start `rt`'s election on `group` and wait, at most `limit`, until it
/// leads; the token.
pub(crate) async fn lead(rt: &Runtime, group: &str, limit: Duration) -> u64 {
    let mut events = rt.subscribe();
    let token = rt
        .run_if_leader(group, || async {
            leader_runtime::current_lease().unwrap().token()
        })
        .await;
    match token {
        Some(token) => token,
        None => elected_in(&mut events, group, limit).await,
    }
}

/// The server's identity as the scripts name it (`run_id/master_replid`),
/// which vouches for the records it wrote.
pub(crate) async fn run_id(server: &RedisServer) -> String {
    let field = |section: &'static str, name: &'static str| async move {
        let info = server.cmd(&["INFO", section]).await.unwrap();
        let prefix = format!("{name}:");
        info.as_str()
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .unwrap()
            .trim()
            .to_owned()
    };
    format!(
        "{}/{}",
        field("server", "run_id").await,
        field("replication", "master_replid").await
    )
}

/// How many times `server` ran `command` (lower case, e.g. "evalsha") since
/// it started or its last `CONFIG RESETSTAT`, from `INFO commandstats`.
pub(crate) async fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).await.unwrap();
    let text = info.as_str().unwrap_or_else(|| panic!("{info:?}"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("calls=")))
        .map_or(0, |c| c.parse().unwrap())
}

/// A server with an admin password and an ACL user `app` with `rules`, for
/// running the scripts directly: the server, an admin connection, and one
/// authenticated as `app`.
pub(crate) async fn script_user(rules: &str) -> (RedisServer, RespConn, RespConn) {
    let server = RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", "app-pw", rules)
        .start()
        .await
        .unwrap();
    let admin = server.connect().await.unwrap();
    let mut app = RespConn::connect(server.addr()).await.unwrap();
    assert_eq!(app.cmd(&["AUTH", "app", "app-pw"]).await.unwrap(), "OK");
    (server, admin, app)
}
