//! What the admin API (`crate::admin`, the `leader` CLI) asks of a backend:
//! read a group's keys, pause and resume it, publish a control request, list
//! the keys under a prefix. `inspect.lua` and `pause.lua` are the Redis side.

use std::time::Duration;

use redis::{Script, Value};

use super::redis::RedisBackend;
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

    /// Every key whose name starts with `{prefix}:{` (the keys of the groups
    /// under `prefix`). On Redis Cluster, `KEYS` on every master (a cluster
    /// connection cannot `SCAN` across nodes); else `SCAN`.
    pub(crate) async fn group_keys(&self, prefix: &str) -> Result<Vec<String>> {
        match self {
            Backend::Redis(b) => b.group_keys(prefix).await,
            Backend::Memory(b) => Ok(b
                .keys()?
                .into_iter()
                .filter(|k| k.starts_with(&format!("{prefix}:{{")))
                .collect()),
        }
    }
}

impl RedisBackend {
    async fn inspect(&self, group: &str, keys: &GroupKeys) -> Result<Inspected> {
        static SCRIPT: std::sync::LazyLock<Script> =
            std::sync::LazyLock::new(|| Script::new(include_str!("inspect.lua")));
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
            std::sync::LazyLock::new(|| Script::new(include_str!("pause.lua")));
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

    async fn group_keys(&self, prefix: &str) -> Result<Vec<String>> {
        let pattern = format!("{prefix}:{{*");
        let mut conn = self.conn();
        let err = |e: redis::RedisError| backend_err("*", &e);
        if self.is_cluster() {
            return redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut conn)
                .await
                .map_err(err);
        }
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
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
    Error::Protocol {
        group: group.to_owned(),
        message: format!("{op} returned {reply:?}"),
    }
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
