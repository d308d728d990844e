//! What the admin API (`crate::admin`, the `leader` CLI) asks of a backend:
//! read a group's keys, pause and resume it, publish a control request, list
//! the keys under a prefix. `inspect.lua` and `pause.lua` are the Redis side.

use std::time::Duration;

use redis::{Script, Value};

use super::redis::{Conn, RedisBackend};
use super::Backend;
use crate::names::GroupKeys;
use crate::{Error, Result};

/// A pause key's fields (see `names.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PauseMark {
    pub(crate) by: String,
    /// Unix ms.
    pub(crate) at: i64,
    /// Empty: none given.
    pub(crate) reason: String,
}

/// What one group's keys hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inspected {
    /// The holder, and the lease's time left (`None`: no expiry).
    pub(crate) holder: Option<(String, Option<Duration>)>,
    /// The last token issued.
    pub(crate) token: Option<u64>,
    pub(crate) paused: Option<PauseMark>,
}

/// Pause or resume, and the control message that announces it.
pub(crate) struct PauseRequest<'a> {
    pub(crate) group: &'a str,
    pub(crate) keys: &'a GroupKeys,
    /// `Some`: pause with this mark; `None`: resume.
    pub(crate) mark: Option<&'a PauseMark>,
    pub(crate) channel: &'a str,
    pub(crate) message: &'a str,
}

impl Backend {
    pub(crate) async fn inspect(&self, group: &str, keys: &GroupKeys) -> Result<Inspected> {
        match self {
            Backend::Redis(b) => b.inspect(group, keys).await,
            Backend::Memory(b) => b.inspect(group, keys),
        }
    }

    /// Pause or resume; whether that changed anything.
    pub(crate) async fn pause(&self, req: &PauseRequest<'_>) -> Result<bool> {
        match self {
            Backend::Redis(b) => b.pause(req).await,
            Backend::Memory(b) => {
                let changed = match req.mark {
                    Some(mark) => b.set_paused(req.group, &req.keys.paused, mark.clone())?,
                    None => b.clear_paused(req.group, &req.keys.paused)?,
                };
                b.publish(req.channel, req.message.to_owned());
                Ok(changed)
            }
        }
    }

    pub(crate) async fn publish(&self, group: &str, channel: &str, message: &str) -> Result<()> {
        match self {
            Backend::Redis(b) => {
                let mut conn = b.conn();
                redis::cmd("PUBLISH")
                    .arg(channel)
                    .arg(message)
                    .query_async::<Value>(&mut conn)
                    .await
                    .map_err(|e| backend_err(group, &e))?;
                Ok(())
            }
            Backend::Memory(b) => {
                b.check_available(group)?;
                b.publish(channel, message.to_owned());
                Ok(())
            }
        }
    }

    /// Every key whose name starts with `start` (no glob characters: group
    /// names and prefixes have none), by `SCAN`. On Redis Cluster, `SCAN`
    /// on each master (listed by `CLUSTER SLOTS`), or on the master of the
    /// group's slot alone when `start` is within one group
    /// (`{prefix}:{group}:…`). Keys whose names are not UTF-8 are left
    /// out: no group or job name is, so they hold nothing of this crate's.
    pub(crate) async fn keys_starting_with(&self, start: &str) -> Result<Vec<String>> {
        match self {
            Backend::Redis(b) => b.keys_starting_with(start).await,
            Backend::Memory(b) => Ok(b
                .keys()?
                .into_iter()
                .filter(|k| k.starts_with(start))
                .collect()),
        }
    }
}

impl RedisBackend {
    async fn inspect(&self, group: &str, keys: &GroupKeys) -> Result<Inspected> {
        static SCRIPT: std::sync::LazyLock<Script> =
            std::sync::LazyLock::new(|| Script::new(include_str!("scripts/inspect.lua")));
        let reply: Value = SCRIPT
            .key(&keys.lease)
            .key(&keys.record)
            .key(&keys.paused)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| backend_err(group, &e))?;
        parse_inspect(group, reply)
    }

    async fn pause(&self, req: &PauseRequest<'_>) -> Result<bool> {
        static SCRIPT: std::sync::LazyLock<Script> =
            std::sync::LazyLock::new(|| Script::new(include_str!("scripts/pause.lua")));
        let mut call = SCRIPT.key(&req.keys.paused);
        call.arg(if req.mark.is_some() {
            "pause"
        } else {
            "resume"
        })
        .arg(req.channel)
        .arg(req.message);
        if let Some(mark) = req.mark {
            call.arg(&mark.by).arg(mark.at).arg(&mark.reason);
        }
        let reply: Value = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| backend_err(req.group, &e))?;
        match reply {
            Value::Int(n) => Ok(n == 1),
            other => Err(protocol_err(req.group, "pause", &other)),
        }
    }

    async fn keys_starting_with(&self, start: &str) -> Result<Vec<String>> {
        use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
        let pattern = format!("{start}*");
        let mut conn = self.conn();
        if !matches!(conn, Conn::Cluster(_)) {
            return scan(&mut conn, None, &pattern).await;
        }
        // A cluster: one SCAN per node. Within one group, the keys share
        // the slot of `{group}`: its master alone.
        let nodes = if start.contains('}') {
            let slot = super::slot(start.as_bytes());
            vec![SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            ))]
        } else {
            masters(&mut conn).await?
        };
        let mut keys = Vec::new();
        for node in nodes {
            keys.extend(scan(&mut conn, Some(node), &pattern).await?);
        }
        Ok(keys)
    }
}

/// Every key matching `pattern` whose name is UTF-8, by `SCAN` on `node` (a
/// cluster's) or the server.
async fn scan(
    conn: &mut Conn,
    node: Option<redis::cluster_routing::SingleNodeRoutingInfo>,
    pattern: &str,
) -> Result<Vec<String>> {
    let err = |e: redis::RedisError| backend_err("*", &e);
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let reply: Value = match (&mut *conn, &node) {
            (Conn::Cluster(c), Some(node)) => {
                let route = redis::cluster_routing::RoutingInfo::SingleNode(node.clone());
                c.route_command(cmd, route).await
            }
            (conn, _) => cmd.query_async(conn).await,
        }
        .map_err(err)?;
        // Names as bytes: one stray key with a binary name must not fail
        // the whole list (`Admin::groups` lists what it can read).
        let (next, batch): (u64, Vec<Vec<u8>>) =
            redis::from_redis_value(reply).map_err(|e| Error::Protocol {
                group: "*".to_owned(),
                message: format!("SCAN returned {e}"),
            })?;
        keys.extend(batch.into_iter().filter_map(|k| String::from_utf8(k).ok()));
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// The masters of a cluster, by address, from `CLUSTER SLOTS`.
async fn masters(conn: &mut Conn) -> Result<Vec<redis::cluster_routing::SingleNodeRoutingInfo>> {
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(|e| backend_err("*", &e))?;
    let bad = || protocol_err("*", "CLUSTER SLOTS", &reply);
    let Value::Array(ranges) = &reply else {
        return Err(bad());
    };
    let mut out = Vec::new();
    for range in ranges {
        // [start, end, [host, port, id, …], replicas…]
        let Value::Array(range) = range else {
            return Err(bad());
        };
        let Some(Value::Array(master)) = range.get(2) else {
            return Err(bad());
        };
        let (Some(Value::BulkString(host)), Some(Value::Int(port))) =
            (master.first(), master.get(1))
        else {
            return Err(bad());
        };
        let host = String::from_utf8_lossy(host).into_owned();
        let port = u16::try_from(*port).map_err(|_| bad())?;
        let node = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port };
        if !out.contains(&node) {
            out.push(node);
        }
    }
    Ok(out)
}

fn parse_inspect(group: &str, reply: Value) -> Result<Inspected> {
    let bad = |reply: &Value| protocol_err(group, "inspect", reply);
    let Value::Array(items) = &reply else {
        return Err(bad(&reply));
    };
    let [holder, pttl, token, pause] = items.as_slice() else {
        return Err(bad(&reply));
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    let holder = text(holder).map(|h| {
        let left = match pttl {
            Value::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
            _ => None,
        };
        (h, left)
    });
    let token = text(token).and_then(|t| t.parse().ok());
    let paused = match pause {
        Value::Array(f) if f.len() == 3 => Some(PauseMark {
            by: text(&f[0]).unwrap_or_default(),
            at: text(&f[1]).and_then(|t| t.parse().ok()).unwrap_or_default(),
            reason: text(&f[2]).unwrap_or_default(),
        }),
        Value::Nil => None,
        _ => return Err(bad(&reply)),
    };
    Ok(Inspected {
        holder,
        token,
        paused,
    })
}

fn backend_err(group: &str, e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::redis(Some(group), e.to_string(), e.clone())
}

fn protocol_err(group: &str, op: &str, reply: &Value) -> Error {
    Error::unexpected_reply(group, op, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_replies() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let held = Value::Array(vec![
            s("a"),
            Value::Int(1500),
            s("42"),
            Value::Array(vec![s("ops"), s("1700000000000"), s("")]),
        ]);
        let got = parse_inspect("g", held).unwrap();
        assert_eq!(
            got.holder,
            Some(("a".into(), Some(Duration::from_millis(1500))))
        );
        assert_eq!(got.token, Some(42));
        assert_eq!(got.paused.unwrap().at, 1_700_000_000_000);
        let empty = Value::Array(vec![Value::Nil, Value::Int(-2), Value::Nil, Value::Nil]);
        let got = parse_inspect("g", empty).unwrap();
        assert!(got.holder.is_none() && got.token.is_none() && got.paused.is_none());
        assert!(parse_inspect("g", Value::Int(1)).is_err());
    }
}
