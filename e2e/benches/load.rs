//! Load harness: what the library costs a shared Redis, and one process with
//! many groups.
//!
//! ```text
//! cargo bench -p leader-e2e --bench load -- fleet [--groups 1] [--instances 3] [--secs 60]
//!     [--ttl-ms 15000] [--renew-ms 5000]
//! cargo bench -p leader-e2e --bench load -- many [--groups 10000] [--secs 60] [--ttl-ms 15000] [--renew-ms 5000]
//! ```
//!
//! `fleet`: N instance processes (this binary, re-run as `instance`) join the
//! same groups on a `redis-server` of their own; after one ttl of settling,
//! `CONFIG RESETSTAT`, then `INFO commandstats` after `--secs`. Prints the
//! commands per second per group, and the lease operations behind them
//! (leaders' renewals, followers' acquire attempts, from the instances'
//! `stats`).
//!
//! `many`: one instance process with `--groups` groups. First start on an
//! empty Redis (every token counter missing: each view turns true only one ttl
//! after its acquisition, by design), then `exit` (releasing every lease) and
//! a restart, timed from spawn to every group led. Then, in steady state,
//! CPU (utime + stime of `/proc/self/stat`) and RSS (`/proc/self/status`) of
//! the instance over `--secs`, and the renew script calls per renew tick
//! from `INFO commandstats`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{command, flag_or, machine, ns_of, run_if_instance, spawn_instance, InstanceArgs};
use leader_testkit::{monotonic_now_ns, ChildProcess, RedisServer, Reply};

fn main() {
    run_if_instance();
    let args: Vec<String> = std::env::args().collect();
    let mode = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_else(|| "fleet".to_owned());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(async {
        match mode.as_str() {
            "fleet" => fleet(&args).await,
            "many" => many(&args).await,
            other => panic!("unknown mode {other} (fleet or many)"),
        }
    });
}

fn group_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("g{i}")).collect()
}

/// `INFO commandstats` as command → calls.
async fn commandstats(server: &RedisServer) -> BTreeMap<String, u64> {
    let reply = server
        .cmd(&["INFO", "commandstats"])
        .await
        .expect("INFO commandstats");
    let text = reply_text(&reply);
    text.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

fn reply_text(reply: &Reply) -> String {
    reply
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{reply:?}"))
}

/// `stats` of every group of an instance: group → (acquire attempts, renewals, elected).
async fn stats(child: &mut ChildProcess) -> BTreeMap<String, (u64, u64, u64)> {
    let from = child.stdout().len();
    command(child, "stats").await;
    let (end, _) = child
        .stdout()
        .wait_for_from(from, |l| l == "stats_end", Duration::from_secs(30))
        .await
        .expect("stats");
    child.stdout().snapshot()[from..end]
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["stats", g, a, r, e] => Some((
                    (*g).to_owned(),
                    (a.parse().ok()?, r.parse().ok()?, e.parse().ok()?),
                )),
                _ => None,
            }
        })
        .collect()
}

/// (cpu seconds, rss KiB) of an instance.
async fn usage(child: &mut ChildProcess) -> (f64, u64) {
    let from = child.stdout().len();
    command(child, "usage").await;
    let (_, line) = child
        .stdout()
        .wait_for_from(from, |l| l.starts_with("usage "), Duration::from_secs(30))
        .await
        .expect("usage");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().expect("usage field"))
        .collect();
    ((f[0] + f[1]) as f64 / f[3] as f64, f[2])
}

async fn start(args: &InstanceArgs, limit: Duration) -> ChildProcess {
    let child = spawn_instance(args);
    child
        .stdout()
        .wait_for(|l| l.starts_with("all_ready"), limit)
        .await
        .unwrap_or_else(|e| panic!("instance did not start: {e}\n{}", child.transcript()));
    child
}

async fn stop(mut child: ChildProcess) {
    command(&mut child, "exit").await;
    let _ = child.wait_timeout(Duration::from_secs(60)).await;
}

/// When the instance reported every group's first round done, and every
/// group led (`CLOCK_MONOTONIC` ns).
async fn ready_and_elected(child: &ChildProcess, limit: Duration) -> (u64, u64) {
    let mut at = [0; 2];
    for (slot, prefix) in at.iter_mut().zip(["all_ready", "all_elected"]) {
        let line = child
            .stdout()
            .wait_for(|l| l.starts_with(prefix), limit)
            .await
            .unwrap_or_else(|e| panic!("no {prefix} line: {e}"));
        *slot = ns_of(&line);
    }
    (at[0], at[1])
}

async fn fleet(args: &[String]) {
    let groups: usize = flag_or(args, "--groups", 1);
    let instances: usize = flag_or(args, "--instances", 3);
    let secs: u64 = flag_or(args, "--secs", 60);
    let ttl = Duration::from_millis(flag_or(args, "--ttl-ms", 15_000));
    let renew = Duration::from_millis(flag_or(args, "--renew-ms", 5_000));
    let server = RedisServer::start().await.expect("redis-server");
    println!("# load harness: fleet");
    println!("machine: {}", machine());
    println!(
        "{groups} group(s) x {instances} instances, ttl {ttl:?}, renew_interval {renew:?}, window {secs} s"
    );
    let mut children = Vec::new();
    for i in 0..instances {
        let a = InstanceArgs {
            redis: server.url(),
            id: format!("i{i}"),
            groups: group_names(groups),
            ttl,
            renew,
            print_renewals: false,
        };
        children.push(start(&a, Duration::from_secs(60)).await);
    }
    // Settle: every follower has learned the lease's expiry at least once.
    tokio::time::sleep(ttl).await;
    let mut before = Vec::new();
    for child in &mut children {
        before.push(stats(child).await);
    }
    server
        .cmd(&["CONFIG", "RESETSTAT"])
        .await
        .expect("RESETSTAT");
    let t0 = monotonic_now_ns();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let commands = commandstats(&server).await;
    let window = (monotonic_now_ns() - t0) as f64 / 1e9;
    let mut after = Vec::new();
    for child in &mut children {
        after.push(stats(child).await);
    }
    // Who leads what: the instance whose renewals grew.
    let (mut renewals, mut follower_acquires, mut leader_groups, mut follower_groups) =
        (0u64, 0u64, 0u64, 0u64);
    for (b, a) in before.iter().zip(&after) {
        for (group, (acq, ren, _)) in a {
            let (acq0, ren0, _) = b.get(group).copied().unwrap_or_default();
            if ren > &ren0 {
                leader_groups += 1;
                renewals += ren - ren0;
            } else {
                follower_groups += 1;
                follower_acquires += acq - acq0;
            }
        }
    }
    println!(
        "window {window:.1} s; commands seen by Redis (INFO commandstats; a script's own \
         commands are counted too, the calls sent are evalsha):"
    );
    println!("| command | calls | per second | per second per group |\n| --- | --- | --- | --- |");
    for (name, calls) in &commands {
        if name == "info" || name == "config|resetstat" {
            continue;
        }
        println!(
            "| {name} | {calls} | {:.3} | {:.4} |",
            *calls as f64 / window,
            *calls as f64 / window / groups as f64
        );
    }
    let total: u64 = commands
        .iter()
        .filter(|(n, _)| n.as_str() != "info" && n.as_str() != "config|resetstat")
        .map(|(_, c)| c)
        .sum();
    println!(
        "all commands counted, including those run inside the scripts (get, pexpire, pttl, ...): \
         {total} = {:.4} per second per group ({:.4} per group per renew interval); \
         the calls sent are the evalsha row",
        total as f64 / window / groups as f64,
        total as f64 / window / groups as f64 * renew.as_secs_f64()
    );
    println!(
        "lease operations: {renewals} renewals over {leader_groups} leader groups = {:.4}/s per leader group (1 per renew interval = {:.4}/s); \
         {follower_acquires} acquire attempts over {follower_groups} follower groups = {:.4}/s per follower group (bound: 1 per ttl - renew_interval = {:.4}/s)",
        renewals as f64 / window / leader_groups.max(1) as f64,
        1.0 / renew.as_secs_f64(),
        follower_acquires as f64 / window / follower_groups.max(1) as f64,
        1.0 / (ttl - renew).as_secs_f64(),
    );
    for child in children {
        stop(child).await;
    }
}

async fn many(args: &[String]) {
    let groups: usize = flag_or(args, "--groups", 10_000);
    let secs: u64 = flag_or(args, "--secs", 60);
    let ttl = Duration::from_millis(flag_or(args, "--ttl-ms", 15_000));
    let renew = Duration::from_millis(flag_or(args, "--renew-ms", 5_000));
    let server = RedisServer::start().await.expect("redis-server");
    println!("# load harness: many groups in one process");
    println!("machine: {}", machine());
    println!("{groups} groups, 1 instance, ttl {ttl:?}, renew_interval {renew:?}, window {secs} s");
    let a = InstanceArgs {
        redis: server.url(),
        id: "many".to_owned(),
        groups: group_names(groups),
        ttl,
        renew,
        print_renewals: false,
    };
    let limit = ttl * 4;
    // First start ever: no token counters (safe start waits one ttl).
    let t0 = monotonic_now_ns();
    let child = start(&a, limit).await;
    let (ready, elected) = ready_and_elected(&child, limit).await;
    println!(
        "first start (empty Redis): every first round done {:.0} ms after spawn; every group led after {:.0} ms (safe start: one ttl after acquisition)",
        (ready - t0) as f64 / 1e6,
        (elected - t0) as f64 / 1e6
    );
    let t = monotonic_now_ns();
    stop(child).await;
    println!(
        "exit (releasing {groups} leases): {:.0} ms",
        (monotonic_now_ns() - t) as f64 / 1e6
    );
    // Restart: token counters exist, leases released.
    let t0 = monotonic_now_ns();
    let mut child = start(&a, limit).await;
    let (ready, elected) = ready_and_elected(&child, limit).await;
    println!(
        "restart: every first round done {:.0} ms after spawn; every group led {:.0} ms after spawn (target: 5000 ms)",
        (ready - t0) as f64 / 1e6,
        (elected - t0) as f64 / 1e6
    );
    // Steady state: settle two renew intervals, then measure.
    tokio::time::sleep(renew * 2).await;
    let (cpu0, _) = usage(&mut child).await;
    server
        .cmd(&["CONFIG", "RESETSTAT"])
        .await
        .expect("RESETSTAT");
    let t0 = monotonic_now_ns();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let commands = commandstats(&server).await;
    let (cpu1, rss) = usage(&mut child).await;
    let window = (monotonic_now_ns() - t0) as f64 / 1e9;
    let cpu = (cpu1 - cpu0) / window * 100.0;
    let clients = server
        .cmd(&["INFO", "clients"])
        .await
        .expect("INFO clients");
    let connected = reply_text(&clients)
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    println!(
        "steady state over {window:.1} s: CPU {cpu:.2}% of one core (target < 5%), RSS {:.1} MiB (target < 64 MiB)",
        rss as f64 / 1024.0
    );
    let ticks = window / renew.as_secs_f64();
    let stats = stats(&mut child).await;
    let renewals: u64 = stats.values().map(|(_, r, _)| r).sum();
    println!("Redis connections (INFO clients, including this harness's): {connected}");
    println!("| command | calls | per renew tick |\n| --- | --- | --- |");
    for (name, calls) in &commands {
        if name == "info" || name == "config|resetstat" {
            continue;
        }
        println!("| {name} | {calls} | {:.1} |", *calls as f64 / ticks);
    }
    println!(
        "{renewals} renewals in total since start ({:.0} per group)",
        renewals as f64 / groups as f64
    );
    stop(child).await;
}
