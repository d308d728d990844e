//! The protocol side: the scripts' replies parsed into the backend's types
//! (`Acquire`, members, the flat reply of `acquire_many.lua`) and Redis
//! errors sorted into the crate's `Error`.

use std::time::Duration;

use redis::Value;

use crate::backend::{Acquire, Counts, Member, SafeStart};
use crate::{Error, Result};

/// One group's part of `acquire_many.lua`'s flat reply.
#[derive(Debug, PartialEq)]
pub(super) enum FlatReply {
    /// What `acquire.lua` would have replied for that group alone.
    Acquire(Value),
    /// That group's own error (`{-1, message}`).
    Error(Vec<u8>),
}

/// `acquire_many.lua`'s flat reply cut into `groups` replies: each starts
/// with its kind, which tells its length (1 won: 5 entries, 0 held: 3,
/// 2 paused and -1 error: 2). Anything else, or entries left over or missing,
/// is an error: the reply, or the part that does not parse (a protocol error
/// for every group).
pub(super) fn split_flat(
    groups: usize,
    reply: Value,
) -> std::result::Result<Vec<FlatReply>, Value> {
    let Value::Array(items) = reply else {
        return Err(reply);
    };
    let mut out = Vec::with_capacity(groups);
    let mut items = items.into_iter();
    while let Some(kind) = items.next() {
        let len = match kind {
            Value::Int(1) => 5,
            Value::Int(0) => 3,
            Value::Int(2 | -1) => 2,
            other => return Err(other),
        };
        let mut part = Vec::with_capacity(len);
        part.push(kind);
        part.extend(items.by_ref().take(len - 1));
        if part.len() < len || out.len() == groups {
            return Err(Value::Array(part));
        }
        out.push(match part.as_mut_slice() {
            [Value::Int(-1), Value::BulkString(e)] => FlatReply::Error(std::mem::take(e)),
            [Value::Int(-1), _] => return Err(Value::Array(part)),
            _ => FlatReply::Acquire(Value::Array(part)),
        });
    }
    if out.len() == groups {
        Ok(out)
    } else {
        Err(Value::Array(Vec::new()))
    }
}

pub(super) fn parse_acquire(group: &str, reply: Value) -> Result<Acquire> {
    let items = match reply {
        Value::Array(items) if items.len() == 2 => {
            return match items.as_slice() {
                [Value::Int(2), Value::BulkString(word)] if word == b"paused" => {
                    Ok(Acquire::Paused)
                }
                _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
            };
        }
        Value::Array(items) if items.len() == 3 || items.len() == 5 => items,
        other => return Err(protocol_err(group, "acquire", &other)),
    };
    match (&items[0], &items[1], &items[2]) {
        (Value::Int(1), Value::BulkString(token), Value::Int(wait)) => {
            let why = match items.get(3) {
                Some(Value::BulkString(why)) => SafeStart::from_script(why),
                _ => None,
            };
            // Tokens travel as decimal strings: exact up to u64::MAX.
            let decimal = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<u64>().ok();
            let token = decimal(token).filter(|t| *t > 0);
            // The token before it; empty: there was no record.
            let last = match items.get(4) {
                Some(Value::BulkString(last)) if last.is_empty() => Some(None),
                Some(Value::BulkString(last)) => decimal(last).map(Some),
                _ => None,
            };
            match (token, u64::try_from(*wait), why, last) {
                (Some(token), Ok(wait), Some(why), Some(last)) => Ok(Acquire::Won {
                    token,
                    wait: Duration::from_millis(wait),
                    why,
                    last,
                }),
                _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
            }
        }
        (Value::Int(0), Value::BulkString(holder), Value::Int(pttl)) => Ok(Acquire::Held {
            holder: String::from_utf8_lossy(holder).into_owned(),
            pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        _ => Err(protocol_err(group, "acquire", &Value::Array(items))),
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX).max(1)
}

pub(super) fn backend_err(group: &str, e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::redis(Some(group), e.to_string(), e.clone())
}

/// A connection-level error: no group's call failed.
pub(super) fn connection_err(e: &redis::RedisError) -> Error {
    // RedisError's Display carries the server's message, never the URL.
    Error::redis(None, e.to_string(), e.clone())
}

/// The release-notice connection did not answer in time.
pub(super) fn timeout_err(after: Duration) -> Error {
    Error::Connection {
        message: format!("no answer within {after:?}"),
        source: None,
    }
}

/// `members.lua`'s reply: id, leading, campaigns of each live member.
pub(super) fn parse_members(reply: Value) -> Result<Vec<Member>> {
    let bad = |reply: &Value| protocol_err("members", "members", reply);
    let Value::Array(items) = reply else {
        return Err(bad(&reply));
    };
    if items.len() % 3 != 0 {
        return Err(bad(&Value::Array(items)));
    }
    let text = |item: &Value| match item {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        other => Err(bad(other)),
    };
    // Digits (the script checks); a count beyond u32, which no fleet has,
    // counts as u32::MAX rather than failing every round until it expires.
    let count = |item: &Value| {
        let digits = text(item)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(item));
        }
        Ok(digits.parse::<u32>().unwrap_or(u32::MAX))
    };
    items
        .chunks_exact(3)
        .map(|m| {
            Ok(Member {
                id: text(&m[0])?,
                counts: Counts {
                    leading: count(&m[1])?,
                    campaigns: count(&m[2])?,
                },
            })
        })
        .collect()
}

pub(super) fn protocol_err(group: &str, op: &str, reply: &Value) -> Error {
    Error::unexpected_reply(group, op, reply)
}
