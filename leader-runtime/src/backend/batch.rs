//! Renewals of many groups in a few round trips.
//!
//! Leaders renew on a grid shared by every group of one backend
//! ([`RenewBatcher::align`]), so that after their first renewal the leaders of
//! one runtime renew at the same instants. Renewals that arrive together are
//! sent as one `renew_many.lua` call per chunk of keys (per hash slot on a
//! cluster), the chunks at once on the one multiplexed connection: 10,000
//! leaders cost about twenty commands per tick, not 10,000 round trips.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Renew;
use crate::names::GroupKeys;
use crate::{Error, Result};

/// At most this many groups per script call (three keys each), which bounds how long one call
/// keeps the server busy (well under a millisecond).
const MAX_GROUPS: usize = 500;

/// The grid is at most this fine; it is finer for renew intervals under 500 ms.
const MAX_GRID: Duration = Duration::from_millis(250);

struct Request {
    group: String,
    /// The lease key, the record key and the pause key.
    keys: GroupKeys,
    id: String,
    ttl_ms: u64,
    reply: oneshot::Sender<Result<Renew>>,
}

/// Collects renewals and sends them in batches, on a task of its own that
/// ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct RenewBatcher {
    requests: mpsc::UnboundedSender<Request>,
    /// Zero point of the renew grid.
    epoch: Instant,
}

struct Scripts {
    one: Script,
    many: Script,
}

impl RenewBatcher {
    /// A batcher sending on `conn`; `cluster`: keep every call in one hash slot.
    /// Must be called inside a tokio runtime.
    pub(crate) fn new<C>(conn: C, cluster: bool) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let (requests, rx) = mpsc::unbounded_channel();
        let scripts = Arc::new(Scripts {
            one: Script::new(concat!(
                include_str!("record.lua"),
                include_str!("renew.lua")
            )),
            many: Script::new(concat!(
                include_str!("record.lua"),
                include_str!("renew_many.lua")
            )),
        });
        tokio::spawn(run(conn, cluster, scripts, rx));
        Self {
            requests,
            epoch: Instant::now(),
        }
    }

    /// When to renew a lease due for renewal at `due` (renewing every
    /// `every`): `due` moved back onto this backend's grid, by less than one
    /// step of at most `every / 2`. Renewing early is always safe: a renewal
    /// extends the view from the instant it is sent. A leader renewing on the
    /// grid stays on it: its next renewal is exactly `every` later.
    pub(crate) fn align(&self, due: Instant, every: Duration) -> Instant {
        let steps = every
            .as_nanos()
            .div_ceil(MAX_GRID.as_nanos())
            .clamp(2, u128::from(u32::MAX));
        let step = (every / steps as u32).as_nanos().max(1);
        let past = due.saturating_duration_since(self.epoch).as_nanos() % step;
        due - Duration::from_nanos(past as u64)
    }

    /// Renew one group's lease as part of the next batch.
    pub(crate) async fn renew(
        &self,
        group: &str,
        keys: &GroupKeys,
        id: &str,
        ttl_ms: u64,
    ) -> Result<Renew> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            group: group.to_owned(),
            keys: keys.clone(),
            id: id.to_owned(),
            ttl_ms,
            reply,
        };
        let stopped = || Error::backend(group, "the renewal batcher has stopped");
        self.requests.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run<C>(
    conn: C,
    cluster: bool,
    scripts: Arc<Scripts>,
    mut rx: mpsc::UnboundedReceiver<Request>,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        // Leaders renewing on the same grid instant wake together: let the
        // rest of them queue up before sending.
        loop {
            tokio::task::yield_now().await;
            let before = batch.len();
            while let Ok(request) = rx.try_recv() {
                batch.push(request);
            }
            if batch.len() == before {
                break;
            }
        }
        // An election that gave up waiting no longer counts on this renewal.
        batch.retain(|r| !r.reply.is_closed());
        let mut chunks: HashMap<(String, u64, u16), Vec<Request>> = HashMap::new();
        for request in batch {
            let slot = if cluster {
                slot(request.keys.lease.as_bytes())
            } else {
                0
            };
            let chunk = chunks
                .entry((request.id.clone(), request.ttl_ms, slot))
                .or_default();
            chunk.push(request);
            if chunk.len() == MAX_GROUPS {
                let full = std::mem::take(chunk);
                tokio::spawn(send(conn.clone(), scripts.clone(), full));
            }
        }
        for chunk in chunks.into_values().filter(|c| !c.is_empty()) {
            tokio::spawn(send(conn.clone(), scripts.clone(), chunk));
        }
    }
}

/// One script call for `chunk` (same id, ttl and slot), answering each request.
async fn send<C: ConnectionLike>(mut conn: C, scripts: Arc<Scripts>, chunk: Vec<Request>) {
    let (id, ttl_ms) = (&chunk[0].id, chunk[0].ttl_ms);
    let script = if chunk.len() == 1 {
        &scripts.one
    } else {
        &scripts.many
    };
    let mut call = script.prepare_invoke();
    for request in &chunk {
        call.key(&request.keys.lease)
            .key(&request.keys.record)
            .key(&request.keys.paused);
    }
    call.arg(id).arg(ttl_ms);
    let reply: redis::RedisResult<Value> = call.invoke_async(&mut conn).await;
    let replies = match reply {
        Ok(Value::Array(items)) if items.len() == chunk.len() => items,
        Ok(one @ Value::Int(_)) if chunk.len() == 1 => vec![one],
        Ok(other) => {
            for r in chunk {
                let e = protocol_err(&r.group, &other);
                let _ = r.reply.send(Err(e));
            }
            return;
        }
        Err(e) => {
            // RedisError's Display carries the server's message, never the URL.
            let message = e.to_string();
            for r in chunk {
                let e = Error::redis(Some(&r.group), message.clone(), e.clone());
                let _ = r.reply.send(Err(e));
            }
            return;
        }
    };
    for (r, value) in chunk.into_iter().zip(replies) {
        let result = match value {
            Value::Int(1) => Ok(Renew::Renewed),
            Value::Int(0) => Ok(Renew::Gone),
            Value::Int(-1) => Ok(Renew::Other),
            Value::Int(-2) => Ok(Renew::Unvouched),
            Value::Int(-3) => Ok(Renew::Paused),
            // That key's own error (the script reports it as a string).
            Value::BulkString(e) => Err(Error::backend(&r.group, String::from_utf8_lossy(&e))),
            other => Err(protocol_err(&r.group, &other)),
        };
        let _ = r.reply.send(result);
    }
}

fn protocol_err(group: &str, reply: &Value) -> Error {
    Error::Protocol {
        group: group.to_owned(),
        message: format!("renew returned {reply:?}"),
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the
/// part between the first `{` and the next `}`, when not empty), mod 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"leader:{jobs}:lease"), slot(b"jobs"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_times_fall_on_a_grid_and_stay_there() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let batcher = RenewBatcher {
            requests: tx,
            epoch: Instant::now(),
        };
        let every = Duration::from_secs(5);
        let step = Duration::from_millis(250);
        let epoch = batcher.epoch;
        // Leaders elected at different instants renew on the same grid point.
        let a = batcher.align(epoch + Duration::from_millis(5_010), every);
        let b = batcher.align(epoch + Duration::from_millis(5_240), every);
        assert_eq!(a, epoch + every);
        assert_eq!(a, b);
        // Early by less than one step, never late.
        for due_ms in [5_000, 5_001, 5_249, 5_250, 7_777] {
            let due = epoch + Duration::from_millis(due_ms);
            let at = batcher.align(due, every);
            assert!(at <= due && due - at < step, "{due_ms}");
        }
        // A renewal sent a little after a grid point keeps the next one on the grid.
        let next = batcher.align(a + Duration::from_millis(3) + every, every);
        assert_eq!(next, a + every);
        // Short intervals: at least two steps per interval.
        let short = Duration::from_millis(300);
        let at = batcher.align(epoch + Duration::from_millis(310), short);
        assert_eq!(at, epoch + Duration::from_millis(300));
        let at = batcher.align(epoch + Duration::from_millis(440), short);
        assert_eq!(at, epoch + Duration::from_millis(300));
    }
}
