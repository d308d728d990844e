//! The run-once operations on Redis: `once.lua`, and `HMGET` to read.

use std::sync::OnceLock;

use redis::{Script, Value};

use super::super::once::{Done, Holder, OnceKeys, Step, Stored, Verdict};
use super::{backend_err, protocol_err, RedisBackend};
use crate::Result;

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("../record.lua"),
            include_str!("../once.lua")
        ))
    })
}

/// The fields of the result hash, in the order `once.lua` returns them
/// after its verdict.
const FIELDS: [&str; 7] = [
    "attempts",
    "failures",
    "error",
    "done_token",
    "done_by",
    "done_at",
    "summary",
];

impl RedisBackend {
    pub(in crate::backend) async fn once_step(
        &self,
        holder: &Holder<'_>,
        step: Step<'_>,
    ) -> Result<(Verdict, Stored)> {
        let mut inv = script().prepare_invoke();
        inv.key(&holder.keys.group.lease)
            .key(&holder.keys.group.record)
            .key(&holder.keys.result);
        match step {
            Step::Begin { .. } => inv.arg("begin"),
            Step::Done { .. } => inv.arg("done"),
            Step::Fail { .. } => inv.arg("fail"),
        };
        inv.arg(holder.id).arg(holder.token.to_string());
        match step {
            Step::Begin { limit } => inv.arg(limit),
            Step::Done { summary } => inv.arg(summary),
            Step::Fail { error } => inv.arg(error),
        };
        self.invoke_once(holder.group, &inv).await
    }

    pub(in crate::backend) async fn once_reset(
        &self,
        group: &str,
        keys: &OnceKeys,
    ) -> Result<Stored> {
        let mut inv = script().prepare_invoke();
        inv.key(&keys.group.lease)
            .key(&keys.group.record)
            .key(&keys.result)
            .arg("reset");
        Ok(self.invoke_once(group, &inv).await?.1)
    }

    async fn invoke_once(
        &self,
        group: &str,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<(Verdict, Stored)> {
        let reply: Value = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        let bad = || protocol_err(group, "once", &reply);
        let Value::Array(words) = &reply else {
            return Err(bad());
        };
        let Some((Value::BulkString(verdict), fields)) = words.split_first() else {
            return Err(bad());
        };
        let verdict = Verdict::from_script(verdict).ok_or_else(bad)?;
        Ok((verdict, parse(fields).ok_or_else(bad)?))
    }

    pub(in crate::backend) async fn once_read(
        &self,
        group: &str,
        keys: &OnceKeys,
    ) -> Result<Stored> {
        let reply: Value = redis::cmd("HMGET")
            .arg(&keys.result)
            .arg(&FIELDS[..])
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        let Value::Array(fields) = &reply else {
            return Err(protocol_err(group, "HMGET", &reply));
        };
        parse(fields).ok_or_else(|| protocol_err(group, "HMGET", &reply))
    }
}

/// The seven fields of [`FIELDS`]: strings, or nil (`HMGET`) for absent.
fn parse(fields: &[Value]) -> Option<Stored> {
    let strings: Vec<String> = fields
        .iter()
        .map(|v| match v {
            Value::Nil => Some(String::new()),
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let [attempts, failures, error, token, by, at, summary]: [String; 7] =
        strings.try_into().ok()?;
    let count = |s: &str| -> Option<u32> {
        if s.is_empty() {
            Some(0)
        } else {
            s.parse().ok()
        }
    };
    let done = if token.is_empty() {
        None
    } else {
        Some(Done {
            token: token.parse().ok()?,
            by,
            at_ms: at.parse().ok()?,
            summary,
        })
    };
    Some(Stored {
        attempts: count(&attempts)?,
        failures: count(&failures)?,
        error,
        done,
    })
}
