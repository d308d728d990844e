//! The Redis backend: one Lua script per lease operation, an auto-reconnecting
//! connection manager for commands, and a pub/sub connection for release notices.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use tokio_util::sync::CancellationToken;

use super::{Acquire, NoticeSink, Op, Renew};
use crate::names::GroupKeys;
use crate::{Error, Result};

#[derive(Clone)]
pub(crate) struct RedisBackend {
    client: redis::Client,
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
}

/// `redis::Script` retries with `SCRIPT LOAD` on `NOSCRIPT`, which is what a
/// restarted (script cache emptied) server needs.
struct Scripts {
    acquire: Script,
    renew: Script,
    release: Script,
}

impl RedisBackend {
    /// A backend for `url`; connects lazily, so an unreachable Redis at
    /// start-up is not an error (the elections retry).
    pub(crate) fn new(url: &str, call_timeout: Duration) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| Error::Config {
            field: "redis_url",
            rule: format!("must be a valid redis:// URL: {}", e.category()),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(call_timeout))
            .set_response_timeout(Some(call_timeout))
            // One connection attempt per call: a failed call fails at once,
            // and the election's own pacing (retry_interval, the leader's
            // quick renew retries) decides when to try again. The manager's
            // own retries sleep 100 ms or more inside the call, which delays
            // the first acquisition after Redis returns.
            .set_number_of_retries(0)
            .set_max_delay(call_timeout);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| backend_err("*", &e))?;
        Ok(Self {
            client,
            conn,
            scripts: Arc::new(Scripts {
                acquire: Script::new(include_str!("acquire.lua")),
                renew: Script::new(include_str!("renew.lua")),
                release: Script::new(include_str!("release.lua")),
            }),
        })
    }

    pub(super) async fn acquire(&self, op: &Op<'_>, ttl: Duration) -> Result<Acquire> {
        let reply: Value = self
            .scripts
            .acquire
            .key(&op.keys.lease)
            .key(&op.keys.token)
            .arg(op.id)
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(op.group, &e))?;
        parse_acquire(op.group, reply)
    }

    pub(super) async fn renew(&self, op: &Op<'_>, ttl: Duration) -> Result<Renew> {
        let reply: Value = self
            .scripts
            .renew
            .key(&op.keys.lease)
            .arg(op.id)
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(op.group, &e))?;
        match reply {
            Value::Int(1) => Ok(Renew::Renewed),
            Value::Int(0) => Ok(Renew::Gone),
            Value::Int(-1) => Ok(Renew::Other),
            other => Err(protocol_err(op.group, "renew", &other)),
        }
    }

    pub(super) async fn release(&self, op: &Op<'_>, channel: &str) -> Result<bool> {
        let reply: Value = self
            .scripts
            .release
            .key(&op.keys.lease)
            .arg(op.id)
            .arg(channel)
            .arg(op.group)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(op.group, &e))?;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(protocol_err(op.group, "release", &other)),
        }
    }

    pub(super) async fn holder(&self, group: &str, keys: &GroupKeys) -> Result<Option<String>> {
        let reply: Value = redis::cmd("GET")
            .arg(&keys.lease)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        match reply {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            other => Err(protocol_err(group, "GET", &other)),
        }
    }

    pub(super) fn spawn_notices(
        &self,
        channel: String,
        sink: NoticeSink,
        up: Arc<AtomicBool>,
        retry: Duration,
        stop: CancellationToken,
    ) {
        let client = self.client.clone();
        tokio::spawn(async move {
            let mut failing = false;
            while !stop.is_cancelled() {
                match listen(&client, &channel, &sink, &up, retry, &stop).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "release-notice connection down; followers fall back to retry_interval");
                    }
                    Err(e) => tracing::debug!(error = %e, "release-notice connection still down"),
                }
                up.store(false, Ordering::SeqCst);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
            }
        });
    }
}

/// Subscribe and forward notices until the connection ends or `stop`.
async fn listen(
    client: &redis::Client,
    channel: &str,
    sink: &NoticeSink,
    up: &AtomicBool,
    timeout: Duration,
    stop: &CancellationToken,
) -> Result<()> {
    let err = |e: redis::RedisError| backend_err("*", &e);
    let mut pubsub = tokio::time::timeout(timeout, client.get_async_pubsub())
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    tokio::time::timeout(timeout, pubsub.subscribe(channel))
        .await
        .map_err(|_| timeout_err(timeout))?
        .map_err(err)?;
    up.store(true, Ordering::SeqCst);
    tracing::debug!(channel, "listening for release notices");
    let mut messages = pubsub.on_message();
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            msg = messages.next() => msg,
        };
        let Some(msg) = msg else {
            return Err(Error::Backend {
                group: "*".to_owned(),
                message: "release-notice connection closed".to_owned(),
            });
        };
        let payload: String = match msg.get_payload() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a release notice that is not a string");
                continue;
            }
        };
        match crate::names::parse_notice(&payload) {
            Some((group, by)) => sink(group, by),
            None => tracing::warn!(payload, "ignoring a malformed release notice"),
        }
    }
}

fn parse_acquire(group: &str, reply: Value) -> Result<Acquire> {
    let items = match reply {
        Value::Array(items) if items.len() == 3 => items,
        other => return Err(protocol_err(group, "acquire", &other)),
    };
    match (&items[0], &items[1], &items[2]) {
        (Value::Int(1), Value::Int(token), Value::Int(fresh)) if *token > 0 => Ok(Acquire::Won {
            token: *token as u64,
            fresh: *fresh == 1,
        }),
        (Value::Int(0), Value::BulkString(holder), Value::Int(pttl)) => Ok(Acquire::Held {
            holder: String::from_utf8_lossy(holder).into_owned(),
            pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX).max(1)
}

fn backend_err(group: &str, e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::Backend {
        group: group.to_owned(),
        message: e.to_string(),
    }
}

fn timeout_err(after: Duration) -> Error {
    Error::Timeout {
        group: "*".to_owned(),
        after,
    }
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
    fn acquire_replies() {
        let won = Value::Array(vec![Value::Int(1), Value::Int(42), Value::Int(1)]);
        assert_eq!(
            parse_acquire("g", won).unwrap(),
            Acquire::Won {
                token: 42,
                fresh: true
            }
        );
        let held = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"b".to_vec()),
            Value::Int(1500),
        ]);
        assert_eq!(
            parse_acquire("g", held).unwrap(),
            Acquire::Held {
                holder: "b".into(),
                pttl: Some(Duration::from_millis(1500))
            }
        );
        let no_expiry = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(b"b".to_vec()),
            Value::Int(-1),
        ]);
        assert!(matches!(
            parse_acquire("g", no_expiry).unwrap(),
            Acquire::Held { pttl: None, .. }
        ));
        for bad in [
            Value::Nil,
            Value::Int(1),
            Value::Array(vec![Value::Int(1), Value::Int(-5), Value::Int(0)]),
            Value::Array(vec![Value::Int(7), Value::Int(1), Value::Int(0)]),
        ] {
            assert!(matches!(
                parse_acquire("g", bad),
                Err(Error::Protocol { .. })
            ));
        }
    }
}
