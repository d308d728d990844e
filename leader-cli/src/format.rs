//! How things print: times, durations, a group as a line or as JSON.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use leader_runtime::admin::GroupInfo;
use leader_runtime::cron::Run;
use serde_json::{json, Value};

/// A wall-clock time as RFC 3339, UTC, in milliseconds; one chrono cannot
/// represent (its `From<SystemTime>` would panic), or RFC 3339 cannot
/// write (after the year 9999), as the raw Unix ms it is, said so.
pub(crate) fn time(t: SystemTime) -> String {
    let ms: i128 = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i128::try_from(d.as_millis()).unwrap_or(i128::MAX),
        Err(e) => i128::try_from(e.duration().as_millis()).map_or(i128::MIN, |ms| -ms),
    };
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .filter(|d| (0..=9999).contains(&d.year()))
        .map_or_else(
            || format!("{ms} (unix ms, not a date)"),
            |d| d.to_rfc3339_opts(SecondsFormat::Millis, true),
        )
}

/// Now, as [`time`] prints it.
pub(crate) fn now() -> String {
    time(SystemTime::now())
}

/// A duration the way a person reads it: `850 ms`, `4.2 s`, `3 min 12 s`,
/// `2 h 5 min`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, ms / 1_000 % 60)
    } else {
        format!("{} h {} min", ms / 3_600_000, ms / 60_000 % 60)
    }
}

/// What `status` says of a pause: `by ops@host since <time> (reason)`.
pub(crate) fn pause(info: &GroupInfo) -> Option<String> {
    let p = info.paused.as_ref()?;
    let mut out = format!("by {} since {}", p.by, time(p.at));
    if let Some(reason) = &p.reason {
        out.push_str(&format!(": {reason}"));
    }
    Some(out)
}

/// One run of a cron job as a line.
pub(crate) fn run(job: &str, r: &Run) -> String {
    format!(
        "{}  {job}  {}  ran {}  on {} (token {}, started {})",
        time(r.scheduled),
        r.outcome,
        duration(r.duration),
        r.instance,
        r.token,
        time(r.started),
    )
}

pub(crate) fn run_json(job: &str, r: &Run) -> Value {
    json!({
        "job": job,
        "scheduled": time(r.scheduled),
        "started": time(r.started),
        "duration_ms": u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
        "outcome": r.outcome.to_string(),
        "instance": r.instance,
        "token": r.token,
    })
}

pub(crate) fn group_json(info: &GroupInfo, jobs: &[(String, Vec<Run>)]) -> Value {
    json!({
        "group": info.group,
        "holder": info.holder,
        "token": info.token,
        "expires_in_ms": info.expires_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        "paused": info.paused.as_ref().map(|p| json!({
            "by": p.by,
            "at": time(p.at),
            "reason": p.reason,
        })),
        "error": info.error,
        "cron_jobs": jobs.iter().map(|(job, runs)| json!({
            "job": job,
            "last_runs": runs.iter().map(|r| run_json(job, r)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(4_249)), "4.2 s");
        assert_eq!(duration(Duration::from_secs(192)), "3 min 12 s");
        assert_eq!(duration(Duration::from_secs(7_500)), "2 h 5 min");
    }

    #[test]
    fn times_are_utc_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(time(t), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn times_no_date_can_show_print_as_unix_ms() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(9_000_000_000_000_000);
        assert_eq!(time(t), "9000000000000000 (unix ms, not a date)");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(253_402_300_800_000);
        assert_eq!(time(t), "253402300800000 (unix ms, not a date)");
        let t = SystemTime::UNIX_EPOCH - Duration::from_millis(62_167_219_200_001);
        assert_eq!(time(t), "-62167219200001 (unix ms, not a date)");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(253_402_300_799_999);
        assert_eq!(time(t), "9999-12-31T23:59:59.999Z");
    }
}
