//! The cron operations on Redis: `claim.lua`, `cron_start.lua` and
//! `cron_run.lua`.

use std::sync::OnceLock;
use std::time::Duration;

use redis::{Script, Value};

use super::super::cron::{Abandoned, ClaimRequest, Claimed, JobKeys};
use super::{backend_err, millis, protocol_err, RedisBackend};
use crate::Result;

fn claim_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("../scripts/record.lua"),
            include_str!("../scripts/claim.lua")
        ))
    })
}

fn run_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("../scripts/record.lua"),
            include_str!("../scripts/cron_run.lua")
        ))
    })
}

fn start_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("../scripts/record.lua"),
            include_str!("../scripts/cron_start.lua")
        ))
    })
}

impl RedisBackend {
    pub(in crate::backend) async fn cron_claim(
        &self,
        req: &ClaimRequest<'_>,
    ) -> Result<Option<Vec<Claimed>>> {
        let mut inv = claim_script().prepare_invoke();
        inv.key(&req.keys.group.lease)
            .key(&req.keys.group.record)
            .key(&req.keys.job)
            .key(&req.keys.history)
            .key(self.marker(&req.keys.group.record))
            .arg(req.id)
            .arg(req.token.to_string())
            .arg(req.clock_ms)
            .arg(if req.skip_overlap { "skip" } else { "allow" })
            .arg(millis(req.busy_ttl))
            .arg(req.history_len.max(1))
            .arg(req.floor_ms)
            .arg(req.restore_floor_ms)
            .arg(req.created_ms)
            .arg(req.claimer.to_string());
        for &(tick, mode) in req.ticks {
            inv.arg(tick).arg(mode.word());
        }
        let reply: Value = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(req.group, &e))?;
        let bad = |reply: &Value| protocol_err(req.group, "cron claim", reply);
        let Value::Array(words) = &reply else {
            return Err(bad(&reply));
        };
        if let [Value::BulkString(w)] = words.as_slice() {
            if w == b"lost" {
                return Ok(None);
            }
        }
        if words.len() != req.ticks.len() {
            return Err(bad(&reply));
        }
        words
            .iter()
            .map(|w| match w {
                Value::BulkString(w) => Claimed::from_script(w).ok_or_else(|| bad(&reply)),
                _ => Err(bad(&reply)),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    pub(in crate::backend) async fn cron_start(
        &self,
        group: &str,
        keys: &JobKeys,
        id: &str,
        token: u64,
        tick_ms: i64,
        claimer: u64,
    ) -> Result<bool> {
        let reply: i64 = start_script()
            .key(&keys.group.lease)
            .key(&keys.group.record)
            .key(&keys.job)
            .arg(id)
            .arg(token.to_string())
            .arg(tick_ms)
            .arg(claimer.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        Ok(reply == 1)
    }

    pub(in crate::backend) async fn cron_abandon(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        claimer: u64,
        entry: &str,
        len: usize,
    ) -> Result<Abandoned> {
        let reply: Value = run_script()
            .key(&keys.job)
            .key(&keys.history)
            .arg("abandon")
            .arg(mark)
            .arg(entry)
            .arg(len.max(1))
            .arg(claimer.to_string())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        let word: &[u8] = match &reply {
            Value::BulkString(w) => w,
            Value::SimpleString(w) => w.as_bytes(),
            _ => b"",
        };
        match word {
            b"claimed" => Ok(Abandoned::Claimed),
            b"started" => Ok(Abandoned::Started),
            b"gone" => Ok(Abandoned::Gone),
            _ => Err(protocol_err(group, "cron abandon", &reply)),
        }
    }

    pub(in crate::backend) async fn cron_keep(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let reply: i64 = run_script()
            .key(&keys.job)
            .key(&keys.history)
            .arg("keep")
            .arg(mark)
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        Ok(reply == 1)
    }

    pub(in crate::backend) async fn cron_done(
        &self,
        group: &str,
        keys: &JobKeys,
        mark: &str,
        entry: &str,
        len: usize,
    ) -> Result<()> {
        let _: i64 = run_script()
            .key(&keys.job)
            .key(&keys.history)
            .arg("done")
            .arg(mark)
            .arg(entry)
            .arg(len.max(1))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))?;
        Ok(())
    }

    pub(in crate::backend) async fn cron_history(
        &self,
        group: &str,
        keys: &JobKeys,
    ) -> Result<Vec<String>> {
        redis::cmd("LRANGE")
            .arg(&keys.history)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| backend_err(group, &e))
    }
}
