//! The run-once operations on Redis: `once.lua`.

use std::sync::OnceLock;
use std::time::Duration;

use redis::{Script, Value};

use super::super::once::{Done, Holder, OnceKeys, Step, Stored, Verdict};
use super::{backend_err, protocol_err, RedisBackend};
use crate::Result;

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("../scripts/record.lua"),
            include_str!("../scripts/once.lua")
        ))
    })
}

impl RedisBackend {
    pub(in crate::backend) async fn once_step(
        &self,
        holder: &Holder<'_>,
        step: Step<'_>,
    ) -> Result<(Verdict, Stored)> {
        let mut inv = script().prepare_invoke();
        inv.key(&holder.keys.group.lease)
            .key(&holder.keys.group.record)
            .key(&holder.keys.result)
            .key(self.marker(&holder.keys.group.record));
        match step {
            Step::Begin { .. } => inv.arg("begin"),
            Step::Done { .. } => inv.arg("done"),
            Step::Fail { .. } => inv.arg("fail"),
            Step::Alive { .. } => inv.arg("alive"),
        };
        inv.arg(holder.id).arg(holder.token.to_string());
        match step {
            Step::Begin { limit } => inv.arg(limit),
            Step::Done { summary } => inv.arg(summary),
            Step::Fail { error } => inv.arg(error),
            Step::Alive { ttl } => inv.arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
        };
        self.invoke_once(holder.group, &inv).await
    }

    pub(in crate::backend) async fn once_reset(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        self.once_ask(group, keys, "reset", ttl).await
    }

    pub(in crate::backend) async fn once_read(
        &self,
        group: &str,
        keys: &OnceKeys,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        self.once_ask(group, keys, "read", ttl).await
    }

    /// `op` (`read` or `reset`: no lease needed) on the name's keys.
    /// `ttl`: the lease's, for whether an attempt may still run.
    async fn once_ask(
        &self,
        group: &str,
        keys: &OnceKeys,
        op: &str,
        ttl: Duration,
    ) -> Result<(Verdict, Stored)> {
        let mut inv = script().prepare_invoke();
        inv.key(&keys.group.lease)
            .key(&keys.group.record)
            .key(&keys.result)
            .key(self.marker(&keys.group.record))
            .arg(op)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self.invoke_once(group, &inv).await
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
}

/// The seven fields `once.lua` returns after its verdict (attempts,
/// failures, error, done_token, done_by, done_at, summary): strings, ''
/// (or nil) for absent.
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
