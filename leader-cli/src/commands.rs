//! The commands, on [`Admin`]. Each returns the message of its failure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leader_runtime::admin::{Admin, GroupInfo, Notice};
use leader_runtime::cron::Run;
use leader_runtime::{Config, Error};
use serde_json::json;

use crate::args::Command;
use crate::format;

/// Runs shown per cron job by `status` (all that are kept: `history`).
const STATUS_RUNS: usize = 3;

/// How often `watch` lists the groups under the prefix (a `SCAN` of the
/// whole keyspace, on each master of a cluster), beyond the groups that
/// notices name.
const DISCOVER: Duration = Duration::from_secs(15);

/// How often a waiting command reads the holder again.
const POLL: Duration = Duration::from_millis(50);

pub(crate) async fn run(config: Config, command: Command) -> Result<(), String> {
    let admin = Admin::new(&config).map_err(|e| e.to_string())?;
    let fail = |e: Error| failure(&admin, e);
    match command {
        Command::Status { json } => status(&admin, json).await.map_err(fail),
        Command::Watch { interval } => watch(&admin, Duration::from_millis(interval)).await,
        Command::StepDown { group, wait } => {
            known_group(&admin, &group).await?;
            step_down(&admin, &group, wait).await
        }
        Command::Pause {
            group,
            reason,
            by,
            wait,
            force,
        } => {
            if !force {
                known_group(&admin, &group).await?;
            }
            let by = by.unwrap_or_else(who);
            pause(&admin, &group, &by, reason.as_deref(), wait).await
        }
        Command::Resume { group } => {
            known_group(&admin, &group).await?;
            resume(&admin, &group).await.map_err(fail)
        }
        Command::History { group, job, json } => {
            known_group(&admin, &group).await?;
            history(&admin, &group, job, json).await
        }
    }
}

/// Refuses a group that no instance has named under the prefix (a typo, or
/// the wrong `--prefix`), listing the groups that are there. A group is
/// named once it has a lease, a token record, a pause or a cron history.
async fn known_group(admin: &Admin, group: &str) -> Result<(), String> {
    let fail = |e| failure(admin, e);
    let info = admin.group(group).await.map_err(fail)?;
    if info.holder.is_some() || info.token.is_some() || info.paused.is_some() {
        return Ok(());
    }
    let known = admin.groups().await.map_err(fail)?;
    if known.iter().any(|g| g.group == group) {
        return Ok(());
    }
    let names: Vec<&str> = known.iter().map(|g| g.group.as_str()).collect();
    Err(format!(
        "unknown group `{group}` under the prefix `{}`: no instance has named it; known: {}",
        admin.prefix(),
        list_or_none(&names)
    ))
}

/// `a, b, c`, or `none` for an empty list.
fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// A failure as one line: what could not be done, and why, with a hint for
/// the usual causes. Never a password (the library's messages carry none,
/// and `Admin::target` is redacted).
fn failure(admin: &Admin, e: Error) -> String {
    // Redis refused the configuration: the library's own hint says what to check.
    if let Error::Misconfigured { message, hint, .. } = &e {
        return format!("{}: {message} ({hint})", admin.target());
    }
    let why = match &e {
        Error::Backend { message, .. } => message.clone(),
        Error::Timeout { after, .. } => format!("no answer within {after:?}"),
        other => other.to_string(),
    };
    let lower = why.to_lowercase();
    let hint = if ["wrongpass", "noauth", "authentication"]
        .iter()
        .any(|w| lower.contains(w))
    {
        " (check the user and password in the URL)"
    } else if lower.contains("noperm") {
        " (the ACL user lacks a command or key: see DEPLOYING.md)"
    } else if matches!(e, Error::Timeout { .. }) || lower.contains("refused") {
        " (is Redis running there, and reachable from here?)"
    } else {
        ""
    };
    format!("{}: {why}{hint}", admin.target())
}

/// Who is pausing: `user@host`, as far as the environment says.
fn who() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("{user}@{host}")
}

/// The last `n` runs of each of `info`'s cron jobs.
async fn last_runs(
    admin: &Admin,
    info: &GroupInfo,
    n: usize,
) -> Result<Vec<(String, Vec<Run>)>, Error> {
    let mut out = Vec::new();
    for job in &info.cron_jobs {
        let mut runs = admin.history(&info.group, job).await?;
        runs.truncate(n);
        out.push((job.clone(), runs));
    }
    Ok(out)
}

async fn status(admin: &Admin, json: bool) -> Result<(), Error> {
    let groups = admin.groups().await?;
    let mut rows = Vec::with_capacity(groups.len());
    for mut info in groups {
        // One group's unreadable history does not hide the others.
        let jobs = match last_runs(admin, &info, STATUS_RUNS).await {
            Ok(jobs) => jobs,
            Err(e) => {
                info.error.get_or_insert_with(|| e.to_string());
                Vec::new()
            }
        };
        rows.push((info, jobs));
    }
    if json {
        let groups: Vec<_> = rows.iter().map(|(i, j)| format::group_json(i, j)).collect();
        let out = json!({ "prefix": admin.prefix(), "groups": groups });
        out!("{out:#}");
        return Ok(());
    }
    if rows.is_empty() {
        out!("no groups under the prefix `{}`", admin.prefix());
        return Ok(());
    }
    let table: Vec<[String; 5]> = rows
        .iter()
        .map(|(info, _)| {
            [
                info.group.clone(),
                info.holder.clone().unwrap_or_else(|| "-".to_owned()),
                info.token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                info.expires_in
                    .map_or_else(|| "-".to_owned(), format::duration),
                format::pause(info).map_or_else(|| "no".to_owned(), |p| format!("yes, {p}")),
            ]
        })
        .collect();
    let header = ["GROUP", "HOLDER", "TOKEN", "EXPIRES IN", "PAUSED"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |row: &[String; 5]| {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        cells.join("  ").trim_end().to_owned()
    };
    out!("{}", line(&header));
    for (row, (info, jobs)) in table.iter().zip(&rows) {
        out!("{}", line(row));
        if let Some(e) = &info.error {
            out!("    cannot read all of it: {e}");
        }
        for (job, runs) in jobs {
            if runs.is_empty() {
                out!("    cron {job}: no runs yet");
            }
            for r in runs {
                out!("    cron {}", format::run(job, r));
            }
        }
    }
    Ok(())
}

/// What `watch` compares between two reads.
#[derive(PartialEq, Eq)]
struct Seen {
    holder: Option<String>,
    token: Option<u64>,
    paused: bool,
}

async fn watch(admin: &Admin, every: Duration) -> Result<(), String> {
    let fail = |e| failure(admin, e);
    let mut notices = admin.notices();
    let mut seen: BTreeMap<String, Option<Seen>> = BTreeMap::new();
    out!(
        "{} watching {} (prefix `{}`); Ctrl-C to stop",
        format::now(),
        admin.target(),
        admin.prefix()
    );
    discover(admin, &mut seen).await.map_err(fail)?;
    poll(admin, &mut seen).await.map_err(fail)?;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_discovery = Instant::now() + DISCOVER;
    let mut failing = false;
    loop {
        tokio::select! {
            notice = notices.recv() => {
                let Some(notice) = notice else { return Err("the notice subscription ended".to_owned()) };
                out!("{} {}", format::now(), describe(&notice));
                // A group no read showed yet: read it from now on.
                if let Some(group) = notice_group(&notice) {
                    seen.entry(group.to_owned()).or_default();
                }
            }
            _ = tick.tick() => {}
        }
        let mut result = Ok(());
        if Instant::now() >= next_discovery {
            next_discovery = Instant::now() + DISCOVER;
            result = discover(admin, &mut seen).await;
        }
        if result.is_ok() {
            result = poll(admin, &mut seen).await;
        }
        match result {
            Ok(()) if failing => {
                failing = false;
                out!("{} reachable again", format::now());
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                out!("{} {}; retrying", format::now(), fail(e));
            }
            Err(_) => {}
        }
    }
}

/// The group a notice names, if any.
fn notice_group(notice: &Notice) -> Option<&str> {
    match notice {
        Notice::Released { group, .. }
        | Notice::Paused { group }
        | Notice::Resumed { group }
        | Notice::StepDownRequested { group, .. } => Some(group),
        _ => None,
    }
}

/// List the groups under the prefix: watch the new ones, forget those gone.
async fn discover(admin: &Admin, seen: &mut BTreeMap<String, Option<Seen>>) -> Result<(), Error> {
    let names: Vec<String> = admin.groups().await?.into_iter().map(|g| g.group).collect();
    seen.retain(|g, _| names.contains(g));
    for name in names {
        seen.entry(name).or_default();
    }
    Ok(())
}

/// Read the known groups; print what changed since the last read.
async fn poll(admin: &Admin, seen: &mut BTreeMap<String, Option<Seen>>) -> Result<(), Error> {
    for (group, old) in seen.iter_mut() {
        let info = admin.group(group).await?;
        let now = format::now();
        let new = Seen {
            holder: info.holder.clone(),
            token: info.token,
            paused: info.paused.is_some(),
        };
        if old.as_ref() == Some(&new) {
            continue;
        }
        if old.as_ref().is_none_or(|o| o.paused != new.paused) {
            match format::pause(&info) {
                Some(p) => out!("{now} {group}: paused {p}"),
                None if old.is_some() => out!("{now} {group}: resumed"),
                None => {}
            }
        }
        if old
            .as_ref()
            .is_none_or(|o| o.holder != new.holder || o.token != new.token)
        {
            match (&new.holder, new.token) {
                (Some(h), Some(t)) => out!("{now} {group}: led by {h} (token {t})"),
                (Some(h), None) => out!("{now} {group}: led by {h}"),
                (None, _) => out!("{now} {group}: no leader"),
            }
        }
        *old = Some(new);
    }
    Ok(())
}

fn describe(notice: &Notice) -> String {
    match notice {
        Notice::Released { group, instance_id } => format!("{group}: released by {instance_id}"),
        Notice::Paused { group } => format!("{group}: pause requested"),
        Notice::Resumed { group } => format!("{group}: resume requested"),
        Notice::StepDownRequested {
            group,
            holder,
            token,
        } => format!("{group}: step-down of {holder} (token {token}) requested"),
        Notice::Reconnected => "notice connection back (notices may have been missed)".to_owned(),
        other => format!("{other:?}"),
    }
}

async fn step_down(admin: &Admin, group: &str, wait: Duration) -> Result<(), String> {
    let fail = |e| failure(admin, e);
    let Some(holder) = admin.step_down(group).await.map_err(fail)? else {
        return Err(format!(
            "nobody holds `{group}` under the prefix `{}`: nothing to hand over",
            admin.prefix()
        ));
    };
    out!("asked {holder} to hand `{group}` over");
    if wait.is_zero() {
        return Ok(());
    }
    // `--wait` is bounded, so the sum does not overflow; unchecked it would panic.
    let deadline = Instant::now().checked_add(wait);
    // Once the holder has released, wait (within `--wait`) for the next one.
    let mut released = false;
    loop {
        let now = admin.group(group).await.map_err(fail)?.holder;
        let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
        match now {
            Some(h) if h == holder && released => {
                out!("{holder} released `{group}` and took it back: no other instance took it");
                return Ok(());
            }
            Some(h) if h == holder => {}
            Some(h) => {
                out!("`{group}` is now led by {h}");
                return Ok(());
            }
            None if out_of_time => {
                out!(
                    "{holder} released `{group}`; nobody leads it yet (waited {})",
                    format::duration(wait)
                );
                return Ok(());
            }
            None => released = true,
        }
        if out_of_time {
            return Err(format!(
                "{holder} still holds `{group}` after {wait:?}: it may be draining a long \
                 run, or it did not get the request (an older version, or an ACL user without \
                 the channel `{}:control`)",
                admin.prefix()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn pause(
    admin: &Admin,
    group: &str,
    by: &str,
    reason: Option<&str>,
    wait: Duration,
) -> Result<(), String> {
    let fail = |e| failure(admin, e);
    let new = admin.pause(group, by, reason).await.map_err(fail)?;
    if new {
        out!("paused `{group}` fleet-wide (by {by})");
    } else {
        out!("`{group}` was paused already; now by {by}");
    }
    if wait.is_zero() {
        return Ok(());
    }
    // As in `step_down`: no overflow, and no panic if there were one.
    let deadline = Instant::now().checked_add(wait);
    loop {
        match admin.group(group).await.map_err(fail)?.holder {
            None => {
                out!("nobody leads `{group}`");
                return Ok(());
            }
            Some(h) if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Err(format!(
                    "paused, but {h} still holds `{group}` after {wait:?} (it may be draining \
                     a long run, or run a version without pause support)"
                ));
            }
            Some(_) => tokio::time::sleep(POLL).await,
        }
    }
}

async fn resume(admin: &Admin, group: &str) -> Result<(), Error> {
    if admin.resume(group).await? {
        out!("resumed `{group}`");
    } else {
        out!("`{group}` was not paused");
    }
    Ok(())
}

async fn history(
    admin: &Admin,
    group: &str,
    job: Option<String>,
    json: bool,
) -> Result<(), String> {
    let fail = |e| failure(admin, e);
    let known = admin.cron_jobs(group).await.map_err(fail)?;
    let jobs = match job {
        Some(job) if known.contains(&job) => vec![job],
        Some(job) => {
            let names: Vec<&str> = known.iter().map(String::as_str).collect();
            return Err(format!(
                "unknown job `{job}` of `{group}`: no run of it is recorded; known: {}",
                list_or_none(&names)
            ));
        }
        None if known.is_empty() => {
            return Err(format!("no cron job of `{group}` has a history"));
        }
        None => known,
    };
    let mut all = Vec::new();
    for job in jobs {
        let runs = admin.history(group, &job).await.map_err(fail)?;
        all.push((job, runs));
    }
    if json {
        let jobs: Vec<_> = all
            .iter()
            .map(|(job, runs)| {
                json!({
                    "job": job,
                    "runs": runs.iter().map(|r| format::run_json(job, r)).collect::<Vec<_>>(),
                })
            })
            .collect();
        out!("{:#}", json!({ "group": group, "jobs": jobs }));
        return Ok(());
    }
    for (job, runs) in &all {
        if runs.is_empty() {
            out!("{job}: no runs");
        }
        for r in runs {
            out!("{}", format::run(job, r));
        }
    }
    Ok(())
}
