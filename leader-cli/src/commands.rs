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

/// How often a waiting command reads the holder again.
const POLL: Duration = Duration::from_millis(50);

pub(crate) async fn run(config: Config, command: Command) -> Result<(), String> {
    let admin = Admin::new(&config).map_err(|e| e.to_string())?;
    let fail = |e: Error| failure(&admin, e);
    match command {
        Command::Status { json } => status(&admin, json).await.map_err(fail),
        Command::Watch { interval } => watch(&admin, Duration::from_millis(interval.max(10))).await,
        Command::StepDown { group, wait } => step_down(&admin, &group, seconds(wait)?).await,
        Command::Pause {
            group,
            reason,
            by,
            wait,
        } => {
            let by = by.unwrap_or_else(who);
            pause(&admin, &group, &by, reason.as_deref(), seconds(wait)?).await
        }
        Command::Resume { group } => resume(&admin, &group).await.map_err(fail),
        Command::History { group, job, json } => history(&admin, &group, job, json).await,
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

fn seconds(s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("a wait of {s} seconds is not a duration"))
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
    for info in groups {
        let jobs = last_runs(admin, &info, STATUS_RUNS).await?;
        rows.push((info, jobs));
    }
    if json {
        let groups: Vec<_> = rows.iter().map(|(i, j)| format::group_json(i, j)).collect();
        let out = json!({ "prefix": admin.prefix(), "groups": groups });
        println!("{out:#}");
        return Ok(());
    }
    if rows.is_empty() {
        println!("no groups under the prefix `{}`", admin.prefix());
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
    println!("{}", line(&header));
    for (row, (_, jobs)) in table.iter().zip(&rows) {
        println!("{}", line(row));
        for (job, runs) in jobs {
            if runs.is_empty() {
                println!("    cron {job}: no runs yet");
            }
            for r in runs {
                println!("    cron {}", format::run(job, r));
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
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    println!(
        "{} watching {} (prefix `{}`); Ctrl-C to stop",
        format::now(),
        admin.target(),
        admin.prefix()
    );
    poll(admin, &mut seen).await.map_err(fail)?;
    let mut tick = tokio::time::interval(every);
    let mut failing = false;
    loop {
        tokio::select! {
            notice = notices.recv() => {
                let Some(notice) = notice else { return Err("the notice subscription ended".to_owned()) };
                println!("{} {}", format::now(), describe(&notice));
            }
            _ = tick.tick() => {}
        }
        match poll(admin, &mut seen).await {
            Ok(()) if failing => {
                failing = false;
                println!("{} reachable again", format::now());
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                println!("{} {}; retrying", format::now(), fail(e));
            }
            Err(_) => {}
        }
    }
}

/// Read every group; print what changed since the last read.
async fn poll(admin: &Admin, seen: &mut BTreeMap<String, Seen>) -> Result<(), Error> {
    let groups = admin.groups().await?;
    let now = format::now();
    let names: Vec<String> = groups.iter().map(|g| g.group.clone()).collect();
    for info in groups {
        let new = Seen {
            holder: info.holder.clone(),
            token: info.token,
            paused: info.paused.is_some(),
        };
        let old = seen.get(&info.group);
        if old == Some(&new) {
            continue;
        }
        let group = &info.group;
        if old.is_none_or(|o| o.paused != new.paused) {
            match format::pause(&info) {
                Some(p) => println!("{now} {group}: paused {p}"),
                None if old.is_some() => println!("{now} {group}: resumed"),
                None => {}
            }
        }
        if old.is_none_or(|o| o.holder != new.holder || o.token != new.token) {
            match (&new.holder, new.token) {
                (Some(h), Some(t)) => println!("{now} {group}: led by {h} (token {t})"),
                (Some(h), None) => println!("{now} {group}: led by {h}"),
                (None, _) => println!("{now} {group}: no leader"),
            }
        }
        seen.insert(info.group, new);
    }
    seen.retain(|g, _| names.contains(g));
    Ok(())
}

fn describe(notice: &Notice) -> String {
    match notice {
        Notice::Released { group, instance_id } => format!("{group}: released by {instance_id}"),
        Notice::Paused { group } => format!("{group}: pause requested"),
        Notice::Resumed { group } => format!("{group}: resume requested"),
        Notice::StepDownRequested { group, holder } => {
            format!("{group}: step-down of {holder} requested")
        }
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
    println!("asked {holder} to hand `{group}` over");
    if wait.is_zero() {
        return Ok(());
    }
    let deadline = Instant::now() + wait;
    loop {
        let now = admin.group(group).await.map_err(fail)?.holder;
        match now {
            Some(h) if h == holder => {}
            Some(h) => {
                println!("`{group}` is now led by {h}");
                return Ok(());
            }
            None => {
                println!("{holder} released `{group}`; nobody leads it yet");
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
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
        println!("paused `{group}` fleet-wide (by {by})");
    } else {
        println!("`{group}` was paused already; now by {by}");
    }
    if wait.is_zero() {
        return Ok(());
    }
    let deadline = Instant::now() + wait;
    loop {
        match admin.group(group).await.map_err(fail)?.holder {
            None => {
                println!("nobody leads `{group}`");
                return Ok(());
            }
            Some(h) if Instant::now() >= deadline => {
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
        println!("resumed `{group}`");
    } else {
        println!("`{group}` was not paused");
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
    let jobs = match job {
        Some(job) => vec![job],
        None => {
            admin.group(group).await.map_err(fail)?;
            let groups = admin.groups().await.map_err(fail)?;
            let jobs = groups
                .into_iter()
                .find(|g| g.group == group)
                .map(|g| g.cron_jobs)
                .unwrap_or_default();
            if jobs.is_empty() {
                return Err(format!("no cron job of `{group}` has a history"));
            }
            jobs
        }
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
        println!("{:#}", json!({ "group": group, "jobs": jobs }));
        return Ok(());
    }
    for (job, runs) in &all {
        if runs.is_empty() {
            println!("{job}: no runs");
        }
        for r in runs {
            println!("{}", format::run(job, r));
        }
    }
    Ok(())
}
