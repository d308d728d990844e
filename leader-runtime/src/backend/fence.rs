//! Fenced writes in the backends: one Lua script per write on Redis
//! (`fence.lua` checks the token against the group's high-water mark, a
//! `fence_<op>.lua` writes), and the same rule on the memory backend's keys.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};
use tokio::time::Instant;

use super::redis::Conn;
use super::{slot, Backend};
use crate::names::GroupKeys;
use crate::{Error, Result};

/// The scripts of the built-in writes (their hashes are computed once).
struct Scripts {
    set: Script,
    del: Script,
    hset: Script,
    incr: Script,
    expire: Script,
}

/// The prefix of every fenced script: the record helpers, then the check.
macro_rules! fenced_script {
    ($op:literal) => {
        Script::new(concat!(
            include_str!("scripts/record.lua"),
            include_str!("scripts/fence.lua"),
            include_str!(concat!("scripts/", $op))
        ))
    };
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    set: fenced_script!("fence_set.lua"),
    del: fenced_script!("fence_del.lua"),
    hset: fenced_script!("fence_hset.lua"),
    incr: fenced_script!("fence_incr.lua"),
    expire: fenced_script!("fence_expire.lua"),
});

/// Where a user's body goes in `fence_script.lua`.
const BODY_MARK: &str = "--{body}\n";

/// The full text of a user's fenced script with `body`.
pub(crate) fn user_script(body: &str) -> Script {
    let wrapper = include_str!("scripts/fence_script.lua");
    let (before, after) = wrapper.split_once(BODY_MARK).unwrap_or((wrapper, ""));
    let mut text = String::with_capacity(8192 + body.len());
    text.push_str(include_str!("scripts/record.lua"));
    text.push_str(include_str!("scripts/fence.lua"));
    text.push_str(before);
    text.push_str(body);
    text.push('\n');
    text.push_str(after);
    Script::new(&text)
}

/// Where the fenced writes of one group go: shared by its leaderships.
pub(crate) struct Target {
    pub(crate) backend: Backend,
    pub(crate) prefix: Arc<str>,
    /// The group's record key: its `token` is the high-water mark.
    pub(crate) record: String,
    /// The hash slot of the group's keys.
    pub(crate) slot: u16,
    pub(crate) timeout: Duration,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl Target {
    pub(crate) fn new(backend: Backend, prefix: &str, group: &str, timeout: Duration) -> Arc<Self> {
        let record = GroupKeys::new(prefix, group).record;
        Arc::new(Self {
            backend,
            prefix: Arc::from(prefix),
            slot: slot(record.as_bytes()),
            record,
            timeout,
        })
    }
}

/// What a [`FencedScript`](crate::fence::FencedScript) returned, as Redis converts Lua values.
///
/// # Examples
///
/// ```
/// use leader_runtime::fence::Reply;
///
/// let reply = Reply::Data(b"42".to_vec());
/// assert_eq!(reply.as_bytes(), Some(&b"42"[..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// `nil` or `false`.
    Nil,
    /// A Lua number (truncated to an integer) or `true` (1).
    Int(i64),
    /// A Lua string.
    Data(Vec<u8>),
    /// A status such as `redis.status_reply('OK')`.
    Status(String),
    /// A Lua table (up to its first `nil`).
    Array(Vec<Reply>),
}

impl Reply {
    /// The bytes of a [`Reply::Data`] or [`Reply::Status`].
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_runtime::fence::Reply;
    ///
    /// assert_eq!(Reply::Status("OK".into()).as_bytes(), Some(&b"OK"[..]));
    /// assert_eq!(Reply::Nil.as_bytes(), None);
    /// ```
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Reply::Data(b) => Some(b),
            Reply::Status(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    pub(crate) fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Data(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// One fenced write.
pub(crate) enum Write<'a> {
    Set {
        key: &'a str,
        value: &'a [u8],
    },
    Delete {
        key: &'a str,
    },
    HSet {
        key: &'a str,
        field: &'a [u8],
        value: &'a [u8],
    },
    Incr {
        key: &'a str,
        by: i64,
    },
    Expire {
        key: &'a str,
        ttl: Duration,
    },
    Script {
        script: &'a Script,
        keys: &'a [&'a str],
        args: &'a [&'a str],
    },
}

impl Write<'_> {
    /// The keys it writes.
    pub(crate) fn keys(&self) -> &[&str] {
        match self {
            Write::Set { key, .. }
            | Write::Delete { key }
            | Write::HSet { key, .. }
            | Write::Incr { key, .. }
            | Write::Expire { key, .. } => std::slice::from_ref(key),
            Write::Script { keys, .. } => keys,
        }
    }

    /// The name of the write, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Write::Set { .. } => "set",
            Write::Delete { .. } => "delete",
            Write::HSet { .. } => "hset",
            Write::Incr { .. } => "incr",
            Write::Expire { .. } => "expire",
            Write::Script { .. } => "eval",
        }
    }
}

/// One group's fenced write, as the backend sees it.
pub(crate) struct Call<'a> {
    pub(crate) group: &'a str,
    /// The group's record key: its `token` is the high-water mark.
    pub(crate) record: &'a str,
    pub(crate) token: u64,
    pub(crate) write: Write<'a>,
}

/// What the check decided.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Written; the write's own reply.
    Applied(Reply),
    /// Refused: the mark (`None`: no record, or none the server vouches
    /// for, to vouch for any token).
    Stale(Option<u64>),
}

/// Run `call` on Redis: one script call.
pub(super) async fn redis(mut conn: Conn, call: &Call<'_>) -> Result<Outcome> {
    let scripts = &*SCRIPTS;
    let (script, args): (&Script, Vec<Vec<u8>>) = match &call.write {
        Write::Set { value, .. } => (&scripts.set, vec![value.to_vec()]),
        Write::Delete { .. } => (&scripts.del, vec![]),
        Write::HSet { field, value, .. } => (&scripts.hset, vec![field.to_vec(), value.to_vec()]),
        Write::Incr { by, .. } => (&scripts.incr, vec![by.to_string().into_bytes()]),
        Write::Expire { ttl, .. } => {
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            (&scripts.expire, vec![ms.to_string().into_bytes()])
        }
        Write::Script { script, args, .. } => (
            *script,
            args.iter().map(|a| a.as_bytes().to_vec()).collect(),
        ),
    };
    let cluster = matches!(conn, Conn::Cluster(_));
    let mut invocation = script.key(call.record);
    for key in call.write.keys() {
        invocation.key(*key);
    }
    invocation.key(super::marker_key(call.record, cluster));
    invocation.arg(call.token.to_string());
    for arg in args {
        invocation.arg(arg);
    }
    let reply: Value = invocation.invoke_async(&mut conn).await.map_err(|e| {
        // RedisError's Display carries the server's message, never the URL.
        let message = format!("fenced {}: {e}", call.write.name());
        Error::redis(Some(call.group), message, e)
    })?;
    parse(call.group, call.write.name(), reply)
}

/// A fenced script's reply: `{1, …}` applied, `{0, mark}` or `{0}` stale.
fn parse(group: &str, op: &str, reply: Value) -> Result<Outcome> {
    let bad = |reply: &Value| Error::unexpected_reply(group, &format!("fenced {op}"), reply);
    let Value::Array(mut items) = reply else {
        return Err(bad(&reply));
    };
    match (items.first(), items.len()) {
        (Some(Value::Int(0)), 1) => Ok(Outcome::Stale(None)),
        (Some(Value::Int(0)), 2) => match &items[1] {
            Value::BulkString(mark) => std::str::from_utf8(mark)
                .ok()
                .and_then(|m| m.parse::<u64>().ok())
                .map(|m| Outcome::Stale(Some(m)))
                .ok_or_else(|| bad(&Value::Array(items.clone()))),
            _ => Err(bad(&Value::Array(items))),
        },
        (Some(Value::Int(1)), 1) => Ok(Outcome::Applied(Reply::Nil)),
        (Some(Value::Int(1)), 2) => {
            let value = items.pop().unwrap_or(Value::Nil);
            Ok(Outcome::Applied(reply_of(group, op, value)?))
        }
        (Some(Value::Int(1)), _) => {
            // A user's body that returned several values.
            let values = items.split_off(1);
            let values = values
                .into_iter()
                .map(|v| reply_of(group, op, v))
                .collect::<Result<_>>()?;
            Ok(Outcome::Applied(Reply::Array(values)))
        }
        _ => Err(bad(&Value::Array(items))),
    }
}

/// A Lua reply as a [`Reply`]; an error inside it fails the call.
fn reply_of(group: &str, op: &str, value: Value) -> Result<Reply> {
    Ok(match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Data(b),
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Array(items) => Reply::Array(
            items
                .into_iter()
                .map(|v| reply_of(group, op, v))
                .collect::<Result<_>>()?,
        ),
        Value::ServerError(e) => {
            return Err(Error::Backend {
                group: group.to_owned(),
                message: format!("fenced {op}: {}", e.details().unwrap_or_else(|| e.code())),
                source: None,
            })
        }
        other => {
            return Err(Error::unexpected_reply(
                group,
                &format!("fenced {op}"),
                &other,
            ))
        }
    })
}

/// The keys that fenced writes made in a memory backend.
#[derive(Debug, Default, Clone)]
pub(crate) struct MemoryKeys {
    map: HashMap<String, (MemoryValue, Option<Instant>)>,
}

#[derive(Debug, Clone)]
enum MemoryValue {
    Str(Vec<u8>),
    Hash(HashMap<Vec<u8>, Vec<u8>>),
}

impl MemoryKeys {
    /// The live value of `key`, dropping it if expired.
    fn live(&mut self, key: &str) -> Option<&mut (MemoryValue, Option<Instant>)> {
        if self
            .map
            .get(key)
            .is_some_and(|(_, exp)| exp.is_some_and(|e| e <= Instant::now()))
        {
            self.map.remove(key);
        }
        self.map.get_mut(key)
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.live(key) {
            Some((MemoryValue::Str(v), _)) => Some(v.clone()),
            _ => None,
        }
    }

    pub(crate) fn hget(&mut self, key: &str, field: &[u8]) -> Option<Vec<u8>> {
        match self.live(key) {
            Some((MemoryValue::Hash(h), _)) => h.get(field).cloned(),
            _ => None,
        }
    }

    /// The memory backend's fenced write: `mark` is the group's record token
    /// (`None`: no record, or one the server does not vouch for).
    pub(crate) fn apply(&mut self, mark: Option<&mut u64>, call: &Call<'_>) -> Result<Outcome> {
        let Some(mark) = mark else {
            return Ok(Outcome::Stale(None));
        };
        if *mark > call.token {
            return Ok(Outcome::Stale(Some(*mark)));
        }
        let wrong_type = || Error::Backend {
            group: call.group.to_owned(),
            message: format!(
                "fenced {}: WRONGTYPE Operation against a key holding the wrong kind of value",
                call.write.name()
            ),
            source: None,
        };
        let reply = match &call.write {
            Write::Set { key, value } => {
                self.map
                    .insert((*key).to_owned(), (MemoryValue::Str(value.to_vec()), None));
                Reply::Int(1)
            }
            Write::Delete { key } => Reply::Int(i64::from(
                self.live(key).is_some() && self.map.remove(*key).is_some(),
            )),
            Write::HSet { key, field, value } => {
                let entry = match self.live(key) {
                    Some(entry) => entry,
                    None => self
                        .map
                        .entry((*key).to_owned())
                        .or_insert((MemoryValue::Hash(HashMap::new()), None)),
                };
                let MemoryValue::Hash(hash) = &mut entry.0 else {
                    return Err(wrong_type());
                };
                Reply::Int(i64::from(
                    hash.insert(field.to_vec(), value.to_vec()).is_none(),
                ))
            }
            Write::Incr { key, by } => {
                let entry = match self.live(key) {
                    Some(entry) => entry,
                    None => self
                        .map
                        .entry((*key).to_owned())
                        .or_insert((MemoryValue::Str(b"0".to_vec()), None)),
                };
                let MemoryValue::Str(value) = &mut entry.0 else {
                    return Err(wrong_type());
                };
                let next = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<i64>().ok())
                    .and_then(|v| v.checked_add(*by))
                    .ok_or_else(|| Error::Backend {
                        group: call.group.to_owned(),
                        message: "fenced incr: ERR value is not an integer or out of range"
                            .to_owned(),
                        source: None,
                    })?;
                *value = next.to_string().into_bytes();
                Reply::Data(value.clone())
            }
            Write::Expire { key, ttl } => match self.live(key) {
                Some(entry) => {
                    entry.1 = Some(crate::util::clock::deadline_in(*ttl));
                    Reply::Int(1)
                }
                None => Reply::Int(0),
            },
            Write::Script { .. } => {
                return Err(Error::Backend {
                    group: call.group.to_owned(),
                    message: "fenced eval: the memory backend runs no Lua; it fences set, \
                              delete, hset, incr and expire (the check itself ran: the \
                              token is current)"
                        .to_owned(),
                    source: None,
                })
            }
        };
        *mark = call.token;
        Ok(Outcome::Applied(reply))
    }
}
