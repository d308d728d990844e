//! Load harness: what the library costs a shared Redis, and one process with
//! many groups.
//!
//! ```text
//! cargo bench -p leader-e2e --bench load -- fleet [--groups 1] [--instances 3] [--secs 60]
//!     [--ttl-ms 15000] [--renew-ms 5000]
//! cargo bench -p leader-e2e --bench load -- many [--groups 10000] [--secs 60] [--ttl-ms 15000] [--renew-ms 5000]
//! cargo bench -p leader-e2e --bench load -- scale [--groups 5000] [--instances 20] [--secs 60]
//!     [--ttl-ms 15000] [--renew-ms 5000] [--modes batched,unbatched] [--crash true] [--balance]
//!     [--crashes 1]
//! cargo bench -p leader-e2e --bench load -- rebalance [--groups 1000] [--ttl-ms 15000] [--renew-ms 5000]
//! cargo bench -p leader-e2e --bench load -- scripts [--dirs DIR,DIR] [--rounds 5]
//! ```
//!
//! `fleet`: N instance processes (this binary, re-run as `instance`) join the
//! same groups on a `redis-server` of their own; after one ttl of settling,
//! `CONFIG RESETSTAT`, then `INFO commandstats` after `--secs`. Prints the
//! commands per second per group, and the lease operations behind them
//! (leaders' renewals, followers' acquire attempts, from the instances'
//! `stats`).
//!
//! `many`: one instance process with `--groups` groups, started three
//! times, each timed from spawn to every group led. First on an empty Redis
//! (no server marker yet: a new epoch, so each view turns true only one ttl
//! after its acquisition, by design); then `exit` (releasing every lease)
//! and a restart with the same groups; then `exit` again and, while a
//! second instance leading one group keeps renewing (the rest of a fleet,
//! in a rolling deploy) and once the server marker is more than a ttl old
//! (a healthy server the fleet has used before), a start with as many
//! groups never named before. Then, in
//! steady state, CPU (utime + stime of `/proc/self/stat`) and RSS
//! (`/proc/self/status`) of that last instance over `--secs`, and the renew
//! script calls per renew tick from `INFO commandstats`.
//!
//! `scale`: N instance processes in the same G groups on one Redis; `i0`
//! leads every group (started first), or with `--balance` every instance
//! leads ⌊G/N⌋ or ⌈G/N⌉ (all started at once; the shares read from Redis,
//! `GET` of each lease, until they settle). Script calls/s and Redis CPU in
//! steady state, then `kill -9` of the leader of `g0` right after its
//! renewal, and the failover of each group it led: until the new leader's
//! view began (the time the runtime logged `elected`, which is when the
//! gate starts to admit), and, for comparison, until its `on_elected`
//! callback ran (on the callbacks' thread, on a busy host later). With
//! `--balance`, `--crashes N` kills N instances one after the other (the
//! leader of `g0` each time, once the shares settled again at one member
//! fewer), and sums up the N waves: more samples from one fleet's settling.
//! With `LOAD_WAVE_DUMP=<file>` in the environment, it also writes one line
//! per group re-elected after the (last) crash: the group's index, its
//! lease's expiry, Redis's grant time (the token), the view's start (all ns
//! of `CLOCK_MONOTONIC`) and the winner's instance index — a wave's
//! timeline, for analysis. With `LOAD_CALL_DUMP=<file>` as well, every
//! instance appends a line per follower `acquire_many` call to that file
//! (`leader_e2e::transitions`: instance, attempts, close attempts, and when
//! the first was handed over, the call sent and answered): a group's
//! take-over is the winner's call whose send and answer enclose the grant,
//! and a retry is a call sent well after its hand-over (BENCHMARKS.md,
//! "What they wait for").
//!
//! `rebalance`: two balanced instance processes; `i0` leads every group
//! alone, `i1` joins (the time until it leads its share), then `i1` stops
//! cleanly (the time until `i0` leads its groups again).
//!
//! `scripts`: what the lease scripts cost Redis per group, in calls of 500
//! (`INFO commandstats` usec): a first acquisition (no record), renewals, a
//! take-over of expired leases, refused attempts. Each `--dirs` entry is a
//! folder with `record.lua`, `acquire_many.lua` and `renew_many.lua` (the
//! default: this checkout's; an older version: `git show REV:path` into a
//! folder), measured in turn, round by round, on one server.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    command, flag, flag_or, machine, ns_of, run_if_instance, spawn_instance, summary, InstanceArgs,
    SUMMARY_HEADER,
};
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
            "scale" => scale(&args).await,
            "rebalance" => rebalance(&args).await,
            "scripts" => scripts(&args).await,
            other => panic!("unknown mode {other} (fleet, many, scale, rebalance or scripts)"),
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
            print_elected: false,
            unbatched: false,
            balance: false,
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
    let mut a = InstanceArgs {
        redis: server.url(),
        id: "many".to_owned(),
        groups: group_names(groups),
        ttl,
        renew,
        print_renewals: false,
        print_elected: false,
        unbatched: false,
        balance: false,
    };
    let limit = ttl * 4;
    let ms = |from: u64, to: u64| (to - from) as f64 / 1e6;
    // (start, every first round done, every group led), ms after spawn.
    let mut starts: Vec<(String, f64, f64)> = Vec::new();
    // First start ever: no marker, no record (a new epoch: one ttl).
    let first_spawn = monotonic_now_ns();
    let child = start(&a, limit).await;
    let (ready, elected) = ready_and_elected(&child, limit).await;
    starts.push((
        "first start, empty Redis (a server new to the fleet: one ttl, by design)".to_owned(),
        ms(first_spawn, ready),
        ms(first_spawn, elected),
    ));
    let t = monotonic_now_ns();
    stop(child).await;
    let exit_ms = ms(t, monotonic_now_ns());
    // Restart: the same groups, their records present, leases released.
    let t0 = monotonic_now_ns();
    let child = start(&a, limit).await;
    let (ready, elected) = ready_and_elected(&child, limit).await;
    starts.push((
        "restart, the same groups (records present)".to_owned(),
        ms(t0, ready),
        ms(t0, elected),
    ));
    stop(child).await;
    // The rest of the fleet keeps running (a rolling deploy): one instance
    // leading one group renews, so the server marker is checked at least
    // once a ttl (a marker no acquire or renew touched for longer than a
    // ttl may have been put back in place, so new groups would wait).
    let keeper = InstanceArgs {
        id: "keeper".to_owned(),
        groups: vec!["keeper".to_owned()],
        ..a.clone()
    };
    let keeper = start(&keeper, limit).await;
    // New groups on a healthy server: names never used, once the marker
    // (or, before markers, the fleet's first use) is more than a ttl old.
    let aged = ttl.as_secs_f64() + 0.5;
    let age = loop {
        let age = marker_age(&server).await;
        let since_first = ms(first_spawn, monotonic_now_ns()) / 1e3;
        if age.unwrap_or(since_first) >= aged {
            break age;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    a.groups = (0..groups).map(|i| format!("new{i}")).collect();
    let t0 = monotonic_now_ns();
    let mut child = start(&a, limit).await;
    let (ready, elected) = ready_and_elected(&child, limit).await;
    starts.push((
        format!(
            "{groups} new groups, healthy server ({})",
            age.map_or_else(
                || "no server marker".to_owned(),
                |s| format!("marker {s:.1} s old")
            )
        ),
        ms(t0, ready),
        ms(t0, elected),
    ));
    println!(
        "| start | every first round done (ms after spawn) | every group led (ms after spawn) |"
    );
    println!("| --- | --- | --- |");
    for (name, ready, elected) in &starts {
        println!("| {name} | {ready:.0} | {elected:.0} |");
    }
    println!("exit after the first start (releasing {groups} leases): {exit_ms:.0} ms");
    println!("targets: restart ≤ 5000 ms, new groups ≤ 2000 ms");
    // Steady state of the new groups' instance: settle two renew
    // intervals, then measure.
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
        "steady state (the new groups' instance) over {window:.1} s: CPU {cpu:.2}% of one core (target < 5%), RSS {:.1} MiB (target ≤ 64 MiB)",
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
    stop(keeper).await;
}

/// Seconds since the server marker's `since` (see `record.lua`), on the
/// server's clock; `None` without a marker (before markers existed).
async fn marker_age(server: &RedisServer) -> Option<f64> {
    let since: f64 = server
        .cmd(&["HGET", "leader:server", "since"])
        .await
        .expect("HGET marker")
        .as_str()?
        .parse()
        .ok()?;
    let time = server.cmd(&["TIME"]).await.expect("TIME");
    let Reply::Array(parts) = time else {
        panic!("TIME: {time:?}")
    };
    let field = |i: usize| -> f64 {
        parts[i]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("TIME field")
    };
    Some((field(0) * 1000.0 + field(1) / 1000.0 - since) / 1000.0)
}

/// `used_cpu_sys + used_cpu_user` of `INFO cpu`, in seconds.
async fn redis_cpu(server: &RedisServer) -> f64 {
    let reply = server.cmd(&["INFO", "cpu"]).await.expect("INFO cpu");
    reply_text(&reply)
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// Script calls per second that the model predicts for one Redis (see
/// BENCHMARKS.md), as (low, high): `instances` processes following `groups`
/// groups that one of them leads, renewing every `renew`, with leases of
/// `ttl`; `slots`: hash slots the groups' keys fall in (1 on one server).
/// Every call carries at most 500 groups of one slot. The leader renews its
/// groups once per `renew`; a follower asks for each group once per
/// `ttl - renew` (its early attempt lands before the leader's renewal due at
/// the same grid instant) to `ttl` (after it).
fn model(
    instances: usize,
    groups: usize,
    slots: usize,
    ttl: Duration,
    renew: Duration,
) -> (f64, f64) {
    const PER_CALL: usize = 500;
    let chunks = slots.max(groups.div_ceil(PER_CALL)) as f64;
    let leader = chunks / renew.as_secs_f64();
    let followers = (instances - 1) as f64 * chunks;
    (
        leader + followers / ttl.as_secs_f64(),
        leader + followers / (ttl - renew).as_secs_f64(),
    )
}

async fn scale(args: &[String]) {
    let groups: usize = flag_or(args, "--groups", 5_000);
    let instances: usize = flag_or(args, "--instances", 20);
    let secs: u64 = flag_or(args, "--secs", 60);
    let ttl = Duration::from_millis(flag_or(args, "--ttl-ms", 15_000));
    let renew = Duration::from_millis(flag_or(args, "--renew-ms", 5_000));
    let modes: String = flag_or(args, "--modes", "batched,unbatched".to_owned());
    let crash: bool = flag_or(args, "--crash", true);
    // With `--balance`: crash this many instances, one after the other,
    // each once the shares settled again.
    let crashes: usize = flag_or(args, "--crashes", 1);
    // `--balance` alone, or `--balance true|false`.
    let balance = args.iter().any(|a| a == "--balance")
        && flag(args, "--balance").as_deref() != Some("false");
    println!("# load harness: scale");
    println!("machine: {}", machine());
    println!(
        "{groups} groups x {instances} instances ({}), ttl {ttl:?}, renew_interval {renew:?}, window {secs} s",
        if balance {
            "balanced: each leads its share"
        } else {
            "i0 leads all"
        }
    );
    for mode in modes.split(',') {
        let unbatched = match mode {
            "batched" => false,
            "unbatched" => true,
            other => panic!("unknown --modes entry {other} (batched or unbatched)"),
        };
        let server = RedisServer::start().await.expect("redis-server");
        let args_of = |i: usize| InstanceArgs {
            redis: server.url(),
            id: format!("i{i}"),
            groups: group_names(groups),
            ttl,
            renew,
            print_renewals: false,
            print_elected: balance || i > 0,
            unbatched,
            balance,
        };
        let limit = ttl * 4;
        let t0 = monotonic_now_ns();
        let mut children = Vec::new();
        // Each child's instance id (`args_of(i).id`), in the same order.
        let mut ids: Vec<String> = (0..instances).map(|i| format!("i{i}")).collect();
        if balance {
            // All at once: the shares form as they join (one instance first
            // would lead every group and hand them over at most 100 per
            // renew interval).
            for i in 0..instances {
                children.push(spawn_instance(&args_of(i)));
            }
            for child in &children {
                child
                    .stdout()
                    .wait_for(|l| l.starts_with("all_ready"), Duration::from_secs(300))
                    .await
                    .unwrap_or_else(|e| panic!("instance did not start: {e}"));
            }
            println!(
                "## {mode}: {instances} balanced instances ready after {:.0} ms",
                (monotonic_now_ns() - t0) as f64 / 1e6
            );
            let settled = settle_shares(&server, groups, instances, ttl * 40).await;
            println!(
                "## {mode}: shares settled {:.0} ms after spawn: {settled}",
                (monotonic_now_ns() - t0) as f64 / 1e6
            );
        } else {
            // i0 first: it leads every group (after one ttl: a first election).
            let first = start(&args_of(0), limit).await;
            let (_, elected) = ready_and_elected(&first, limit).await;
            children.push(first);
            for i in 1..instances {
                children.push(start(&args_of(i), Duration::from_secs(120)).await);
            }
            println!(
                "## {mode}: i0 led every group {:.0} ms after spawn; {} followers joined after {:.0} ms",
                (elected - t0) as f64 / 1e6,
                instances - 1,
                (monotonic_now_ns() - t0) as f64 / 1e6
            );
        }
        // Settle: every follower has seen each lease expire (and so moved
        // onto the expiry instants) at least once.
        tokio::time::sleep(ttl + renew).await;
        let holders0 = lease_holders(&server, groups).await;
        let marks: Vec<usize> = children.iter().map(|c| c.stdout().len()).collect();
        server
            .cmd(&["CONFIG", "RESETSTAT"])
            .await
            .expect("RESETSTAT");
        let cpu0 = redis_cpu(&server).await;
        let t = monotonic_now_ns();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let commands = commandstats(&server).await;
        let cpu1 = redis_cpu(&server).await;
        let window = (monotonic_now_ns() - t) as f64 / 1e9;
        let calls: u64 = ["evalsha", "eval"]
            .iter()
            .filter_map(|c| commands.get(*c))
            .sum();
        let cpu = (cpu1 - cpu0) / window * 100.0;
        let (low, high) = model(instances, groups, 1, ttl, renew);
        println!(
            "{mode}: {calls} script calls in {window:.1} s = {:.1}/s (model, batched, one leader: {low:.1} to {high:.1}/s; target <= 50); \
             Redis CPU {cpu:.2}% of one core (target < 10%)",
            calls as f64 / window
        );
        let inner: Vec<String> = commands
            .iter()
            .filter(|(n, _)| {
                !matches!(n.as_str(), "info" | "config|resetstat" | "evalsha" | "eval")
            })
            .map(|(n, c)| format!("{n} {:.0}/s", *c as f64 / window))
            .collect();
        println!("{mode}: commands inside the scripts: {}", inner.join(", "));
        // Churn in the window: leases that changed holder, elected/lost lines.
        let holders1 = lease_holders(&server, groups).await;
        let moved = holders0
            .iter()
            .zip(&holders1)
            .filter(|(a, b)| a != b)
            .count();
        let count_lines = |prefix: &str| -> usize {
            children
                .iter()
                .zip(&marks)
                .map(|(c, &from)| {
                    c.stdout().snapshot()[from..]
                        .iter()
                        .filter(|l| l.starts_with(prefix))
                        .count()
                })
                .sum()
        };
        println!(
            "{mode}: in the window {moved} leases changed holder (GET before/after), {} elected and {} lost lines; \
             leaderless at the end: {}; shares at the end: {}",
            count_lines("elected "),
            count_lines("lost "),
            holders1.iter().filter(|h| h.is_none()).count(),
            share_text(&holders1)
        );
        // Several crashes only with balanced leadership, where each frees
        // one share: more samples from one fleet's settling.
        let crashes = match (crash, balance) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => crashes.min(instances - 1),
        };
        let mut after_expiry = Vec::new();
        for n in 0..crashes {
            if n > 0 {
                let settled = settle_shares(&server, groups, children.len(), ttl * 40).await;
                println!("## {mode}: before crash {}: {settled}", n + 1);
            }
            let (victim, samples) =
                crash_failover(&server, &mut children, &ids, groups, ttl, mode).await;
            children.remove(victim);
            ids.remove(victim);
            after_expiry.extend(samples);
        }
        if crashes > 1 {
            println!("{SUMMARY_HEADER}");
            println!(
                "{}",
                summary(
                    &format!("{crashes} crashes: after the lease's expiry to the view"),
                    &mut after_expiry
                )
            );
        }
        for child in children {
            stop(child).await;
        }
    }
}

/// Each instance id → how many leases it holds, as text (fewest first).
fn share_text(holders: &[Option<String>]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for h in holders.iter().flatten() {
        *counts.entry(h.as_str()).or_default() += 1;
    }
    let mut v: Vec<usize> = counts.values().copied().collect();
    v.sort_unstable();
    match (v.first(), v.last()) {
        (Some(lo), Some(hi)) => format!("{} holders, {lo} to {hi} leases each", v.len()),
        _ => "no holders".to_owned(),
    }
}

/// Polls the leases' holders (every 500 ms) until every one of `instances`
/// holds ⌊G/N⌋ or ⌈G/N⌉ of them and none is free, or `limit` passed
/// (then says so: the run goes on, unsettled).
async fn settle_shares(
    server: &RedisServer,
    groups: usize,
    instances: usize,
    limit: Duration,
) -> String {
    let (lo, hi) = (groups / instances, groups.div_ceil(instances));
    let start = tokio::time::Instant::now();
    let deadline = start + limit;
    let mut report = start;
    loop {
        let holders = lease_holders(server, groups).await;
        // Progress every 10 s: how the shares converge (or stall).
        if report.elapsed() >= Duration::from_secs(10) {
            report = tokio::time::Instant::now();
            println!(
                "   shares after {:.0} s: {} ({} free)",
                start.elapsed().as_secs_f64(),
                share_text(&holders),
                holders.iter().filter(|h| h.is_none()).count()
            );
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for h in holders.iter().flatten() {
            *counts.entry(h.clone()).or_default() += 1;
        }
        let free = holders.iter().filter(|h| h.is_none()).count();
        let even = counts.len() == instances && counts.values().all(|&c| (lo..=hi).contains(&c));
        if (even && free == 0) || tokio::time::Instant::now() > deadline {
            return format!(
                "{}{} ({free} free)",
                if even && free == 0 {
                    ""
                } else {
                    "NOT SETTLED: "
                },
                share_text(&holders)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each of the first `groups` leases' holder (`None`: free).
async fn lease_holders(server: &RedisServer, groups: usize) -> Vec<Option<String>> {
    lease_expiries(server, groups).await.0
}

/// The holder of each of the first `groups` leases and when it expires, in
/// Unix ms of Redis's clock (`PEXPIRETIME`, Redis 7.0 or later: exact to the
/// ms; 0 for a lease that is gone). Not `TIME` once + each key's `PTTL`:
/// on Redis 7.0 a script's `PTTL` counts from the clock at that command, so
/// over 5,000 keys (about 20 ms of script) later keys read up to that much
/// earlier, which overstated their failover after the expiry.
async fn lease_expiries(server: &RedisServer, groups: usize) -> (Vec<Option<String>>, Vec<u64>) {
    const SCRIPT: &str = "local out = {} for i = 1, #KEYS do \
         out[2 * i - 1] = redis.call('GET', KEYS[i]) or '' \
         local at = redis.call('PEXPIRETIME', KEYS[i]) \
         out[2 * i] = at > 0 and at or 0 end return out";
    let keys: Vec<String> = (0..groups)
        .map(|g| format!("leader:{{g{g}}}:lease"))
        .collect();
    let count = groups.to_string();
    let mut call = vec!["EVAL", SCRIPT, &count];
    call.extend(keys.iter().map(String::as_str));
    let reply = server.cmd(&call).await.expect("expiry script");
    let Reply::Array(items) = reply else {
        panic!("expiry script reply {reply:?}")
    };
    let mut holders = Vec::with_capacity(groups);
    let mut expiries = Vec::with_capacity(groups);
    for pair in items.chunks(2) {
        let holder = reply_text(&pair[0]);
        holders.push((!holder.is_empty()).then_some(holder));
        expiries.push(match &pair[1] {
            Reply::Integer(ms) => u64::try_from(*ms).unwrap_or(0),
            other => panic!("expiry reply {other:?}"),
        });
    }
    (holders, expiries)
}

/// Redis's clock (`TIME`: the host's real-time clock, Redis runs here) on
/// this process's monotonic one, which the instances' lines use.
struct RedisClock {
    /// Real-time minus monotonic, in ns, read back to back.
    offset: i128,
}

impl RedisClock {
    fn here() -> Self {
        let real = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let mono = monotonic_now_ns();
        Self {
            offset: real as i128 - i128::from(mono),
        }
    }

    fn monotonic_of_unix_us(&self, us: u64) -> u64 {
        u64::try_from(i128::from(us) * 1_000 - self.offset).unwrap_or(0)
    }
}

/// Sum of the evalsha calls and their `usec` in `INFO commandstats`.
async fn evalsha_usec(server: &RedisServer) -> (u64, u64) {
    let reply = server
        .cmd(&["INFO", "commandstats"])
        .await
        .expect("INFO commandstats");
    reply_text(&reply)
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .map(|rest| {
            let field = |name: &str| {
                rest.split(',')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            (field("calls="), field("usec="))
        })
        .next()
        .unwrap_or_default()
}

/// `kill -9` of the leader of `g0` (`i0`, leading every group, when
/// unbalanced; one with its share when balanced) right after one of its
/// renewals, the worst case (its leases then live a full ttl on), and per
/// group it led the time to its next leader's `elected` line: from the kill,
/// and from the lease's expiry (Redis's `TIME` + `PTTL` of each lease, read
/// right after the kill), and when Redis granted the new lease (its token). Also what the re-election wave cost: Redis's time in
/// `evalsha` and its CPU, the survivors' CPU, from 100 ms before the first
/// expiry to 1 s after the last. `ids`: each child's instance id. Returns
/// the index of the killed child, and each of its groups' failover after
/// the expiry (ms).
async fn crash_failover(
    server: &RedisServer,
    children: &mut [ChildProcess],
    ids: &[String],
    groups: usize,
    ttl: Duration,
    mode: &str,
) -> (usize, Vec<f64>) {
    let holders = lease_holders(server, groups).await;
    let victim_id = holders[0].clone().expect("g0 has a leader");
    // By id: after an earlier crash the children are no longer i0, i1, ...
    let victim = ids
        .iter()
        .position(|id| *id == victim_id)
        .expect("g0's leader is a child");
    // Wait for a renewal: g0's PTTL jumps up. Every group of one leader
    // renews at the same grid instant, in calls of 500 groups sent at once;
    // give them 50 ms.
    let key = "leader:{g0}:lease";
    let pttl = |r: Reply| match r {
        Reply::Integer(ms) => ms,
        other => panic!("PTTL {other:?}"),
    };
    let mut conn = server.connect().await.expect("connect");
    let mut last = pttl(conn.cmd(&["PTTL", key]).await.expect("PTTL"));
    let limit = tokio::time::Instant::now() + ttl;
    loop {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let now = pttl(conn.cmd(&["PTTL", key]).await.expect("PTTL"));
        if now > last + 100 || tokio::time::Instant::now() > limit {
            break;
        }
        last = now;
    }
    let seen = monotonic_now_ns();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let marks: Vec<usize> = children.iter().map(|c| c.stdout().len()).collect();
    let killed = monotonic_now_ns();
    children[victim].kill9().expect("kill -9");
    let clock = RedisClock::here();
    let (holders, expiries) = lease_expiries(server, groups).await;
    // The groups the victim led (its leases outlive it by up to a ttl), and
    // when each lease expires, on this process's monotonic clock.
    let led: Vec<usize> = (0..groups)
        .filter(|&g| holders[g].as_deref() == Some(victim_id.as_str()))
        .collect();
    let expiry: BTreeMap<usize, u64> = led
        .iter()
        .map(|&g| (g, clock.monotonic_of_unix_us(expiries[g] * 1_000)))
        .collect();
    let first = *expiry.values().min().expect("the victim led groups");
    let last_expiry = *expiry.values().max().expect("the victim led groups");
    println!(
        "{mode}: killed {victim_id} (leading {} of {groups} groups) {:.0} ms after its renewal of g0 was seen; \
         its leases expire {:.0} to {:.0} ms after the kill",
        led.len(),
        (killed - seen) as f64 / 1e6,
        (first - killed) as f64 / 1e6,
        (last_expiry - killed) as f64 / 1e6
    );
    // The wave's cost: from 100 ms before the first expiry.
    let before = Duration::from_nanos(first.saturating_sub(monotonic_now_ns() + 100_000_000));
    tokio::time::sleep(before).await;
    let mut cpu_before = BTreeMap::new();
    for (i, child) in children.iter_mut().enumerate() {
        if i != victim {
            cpu_before.insert(i, usage(child).await.0);
        }
    }
    server
        .cmd(&["CONFIG", "RESETSTAT"])
        .await
        .expect("RESETSTAT");
    let redis0 = redis_cpu(server).await;
    let deadline = tokio::time::Instant::now() + ttl * 2;
    let mut latencies: BTreeMap<usize, u64> = BTreeMap::new();
    // When Redis granted each new lease: its token, Redis's clock in µs at
    // the acquisition (record.lua: max(now, last + 1); the last is the
    // victim's, from long before). Read off the `elected` lines, so nothing
    // polls the measured Redis during the wave. Tells a late attempt (late
    // in Redis) from a late winner (late after Redis).
    let mut acquired: BTreeMap<usize, u64> = BTreeMap::new();
    // When each winner's `on_elected` callback ran (its line's own time).
    let mut callback_at: BTreeMap<usize, u64> = BTreeMap::new();
    // Which instance each group went to (for LOAD_WAVE_DUMP).
    let mut winner: BTreeMap<usize, usize> = BTreeMap::new();
    while latencies.len() < led.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        for (i, (child, &from)) in children.iter().zip(&marks).enumerate() {
            if i == victim {
                continue;
            }
            for line in &child.stdout().lines_from(from) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let ["elected", g, token, began, line_ns] = f.as_slice() {
                    let g: usize = g[1..].parse().expect("group index");
                    if expiry.contains_key(&g) {
                        let ns: u64 = began.parse().unwrap_or_else(|_| {
                            panic!("no transition time in {line:?}: the view's start is unknown")
                        });
                        let line_ns: u64 = line_ns.parse().expect("ns");
                        keep_earliest(&mut callback_at, g, line_ns);
                        let token: u64 = token.parse().expect("token");
                        let at = clock.monotonic_of_unix_us(token);
                        keep_earliest(&mut latencies, g, ns);
                        keep_earliest(&mut acquired, g, at);
                        winner.entry(g).or_insert(i);
                    }
                }
            }
        }
    }
    let wave_end = last_expiry + 1_000_000_000;
    let rest = Duration::from_nanos(wave_end.saturating_sub(monotonic_now_ns()));
    tokio::time::sleep(rest).await;
    let (calls, usec) = evalsha_usec(server).await;
    let redis1 = redis_cpu(server).await;
    let mut survivor_cpu = 0.0;
    for (i, c0) in &cpu_before {
        survivor_cpu += usage(&mut children[*i]).await.0 - c0;
    }
    // Moves after the crash: every `elected` line of the survivors since the
    // kill (the victim's groups taken, then any hand-overs to even out the
    // shares at one member fewer).
    let elected_since: usize = children
        .iter()
        .zip(&marks)
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, (c, &from))| {
            c.stdout().snapshot()[from..]
                .iter()
                .filter(|l| l.starts_with("elected "))
                .count()
        })
        .sum();
    let holders = lease_holders(server, groups).await;
    println!(
        "{mode}: 1 s after the last expiry: {elected_since} elected lines since the kill; \
         {} groups leaderless; shares: {}",
        holders.iter().filter(|h| h.is_none()).count(),
        share_text(&holders)
    );
    // Each group's expiry, acquisition (Redis's clock), view and winner, in
    // ns of CLOCK_MONOTONIC, to a file: the wave's timeline, for analysis.
    if let Ok(path) = std::env::var("LOAD_WAVE_DUMP") {
        let rows: Vec<String> = latencies
            .iter()
            .map(|(g, ns)| {
                let acq = acquired.get(g).copied().unwrap_or_default();
                let by = winner.get(g).copied().unwrap_or(usize::MAX);
                format!("{g} {} {acq} {ns} {by}", expiry[g])
            })
            .collect();
        std::fs::write(&path, rows.join("\n")).expect("LOAD_WAVE_DUMP");
    }
    let ms = |ns: u64, from: u64| (ns as f64 - from as f64) / 1e6;
    let mut from_kill: Vec<f64> = latencies.values().map(|&ns| ms(ns, killed)).collect();
    let mut from_expiry: Vec<f64> = latencies.iter().map(|(g, &ns)| ms(ns, expiry[g])).collect();
    println!(
        "{mode}: kill -9 of {victim_id} -> each of its groups' next leader ({} of {} groups re-elected; bound: ttl + 50 ms = {} ms from the kill, 50 ms from the expiry)",
        from_kill.len(),
        led.len(),
        ttl.as_millis() + 50
    );
    println!("{SUMMARY_HEADER}");
    println!(
        "{}",
        summary("crash failover per group, from the kill", &mut from_kill)
    );
    println!(
        "{}",
        summary(
            "after the lease's expiry (Redis's clock) to the view",
            &mut from_expiry
        )
    );
    let mut in_redis: Vec<f64> = acquired.iter().map(|(g, &ns)| ms(ns, expiry[g])).collect();
    println!(
        "{}",
        summary(
            "  of which: expiry -> acquired in Redis (the token)",
            &mut in_redis
        )
    );
    let mut to_line: Vec<f64> = latencies
        .iter()
        .filter_map(|(g, &ns)| Some(ms(ns, *acquired.get(g)?)))
        .collect();
    println!(
        "{}",
        summary("  of which: acquired -> view began", &mut to_line)
    );
    let mut callback: Vec<f64> = callback_at
        .iter()
        .map(|(g, &ns)| ms(ns, expiry[g]))
        .collect();
    println!(
        "{}",
        summary(
            "after the expiry, to the on_elected callback",
            &mut callback
        )
    );
    println!(
        "{mode}: the wave (100 ms before the first expiry to 1 s after the last): {calls} evalsha calls, \
         {:.0} ms in evalsha (INFO commandstats usec), Redis CPU {:.0} ms; the {} survivors' CPU {:.0} ms (on {} cores)",
        usec as f64 / 1e3,
        (redis1 - redis0) * 1e3,
        cpu_before.len(),
        survivor_cpu * 1e3,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    (victim, from_expiry)
}

/// `at` for group `g` in `map`, unless an earlier time is there already
/// (a group may be elected more than once in the wave: the first counts).
fn keep_earliest(map: &mut BTreeMap<usize, u64>, g: usize, at: u64) {
    map.entry(g).and_modify(|e| *e = (*e).min(at)).or_insert(at);
}

async fn rebalance(args: &[String]) {
    let groups: usize = flag_or(args, "--groups", 1_000);
    let ttl = Duration::from_millis(flag_or(args, "--ttl-ms", 15_000));
    let renew = Duration::from_millis(flag_or(args, "--renew-ms", 5_000));
    println!("# load harness: rebalance");
    println!("machine: {}", machine());
    println!("{groups} groups, balanced, ttl {ttl:?}, renew_interval {renew:?}");
    let server = RedisServer::start().await.expect("redis-server");
    let args_of = |i: usize| InstanceArgs {
        redis: server.url(),
        id: format!("i{i}"),
        groups: group_names(groups),
        ttl,
        renew,
        print_renewals: false,
        print_elected: true,
        unbatched: false,
        balance: true,
    };
    let limit = ttl * 4;
    let first = start(&args_of(0), limit).await;
    ready_and_elected(&first, limit).await;
    let t0 = monotonic_now_ns();
    let second = start(&args_of(1), Duration::from_secs(120)).await;
    let half = groups / 2;
    let mut marks = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while marks.len() < half && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        marks = second
            .stdout()
            .snapshot()
            .iter()
            .filter(|l| l.starts_with("elected "))
            .map(|l| (ns_of(l) - t0) as f64 / 1e6)
            .collect();
    }
    marks.sort_by(f64::total_cmp);
    let at = |n: usize| marks.get(n.saturating_sub(1)).copied().unwrap_or(f64::NAN);
    println!(
        "i1 joined: first group moved after {:.0} ms, {} after {:.0} ms, {half} (its share) after {:.0} ms; \
         moves are at most 100 per renew interval per instance",
        at(1),
        half / 2,
        at(half / 2),
        at(half)
    );
    // i1 stops cleanly: it leaves the membership, then releases its share;
    // i0 (at its old share) asks for a membership round on the notices and
    // takes them at once.
    let t1 = monotonic_now_ns();
    stop(second).await;
    let mut back = Vec::new();
    let deadline = tokio::time::Instant::now() + ttl * 2;
    while back.len() < half && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        back = first
            .stdout()
            .snapshot()
            .iter()
            .filter(|l| l.starts_with("elected ") && ns_of(l) > t1)
            .map(|l| (ns_of(l) - t1) as f64 / 1e6)
            .collect();
    }
    back.sort_by(f64::total_cmp);
    let at = |n: usize| back.get(n.saturating_sub(1)).copied().unwrap_or(f64::NAN);
    println!(
        "i1 stopped cleanly: i0 led {} of its {half} groups again; first after {:.1} ms, {} after {:.1} ms, all after {:.1} ms \
         (from the stop command; the share grace it no longer waits is 50 ms)",
        back.len(),
        at(1),
        half / 2,
        at(half / 2),
        at(half),
    );
    stop(first).await;
}

/// The `scripts` mode (see the module docs).
async fn scripts(args: &[String]) {
    const CALLS: usize = 10;
    const PER_CALL: usize = 500;
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/../leader-runtime/src/backend").to_owned();
    let dirs: Vec<String> = flag_or(args, "--dirs", here)
        .split(',')
        .map(str::to_owned)
        .collect();
    let rounds: usize = flag_or(args, "--rounds", 5);
    println!("# load harness: scripts");
    println!("machine: {}", machine());
    println!("{CALLS} calls of {PER_CALL} groups per measure, {rounds} rounds, µs of Redis (`INFO commandstats`) per group");
    let server = RedisServer::start().await.expect("redis-server");
    let load = |dir: &str, script: &str| {
        let read = |name: &str| {
            std::fs::read_to_string(format!("{dir}/{name}"))
                .unwrap_or_else(|e| panic!("{dir}/{name}: {e}"))
        };
        format!("{}\n{}", read("record.lua"), read(script))
    };
    let keys = |base: &str, call: usize| -> Vec<String> {
        (0..PER_CALL)
            .flat_map(|i| {
                let g = format!("{base}{call}_{i}");
                ["lease", "record", "paused"].map(|k| format!("leader:{{{g}}}:{k}"))
            })
            .collect()
    };
    let measures = ["first acquisition", "renewal", "take-over", "refused"];
    // results[dir][measure] = µs per group, one per round.
    let mut results = vec![vec![Vec::new(); measures.len()]; dirs.len()];
    for round in 0..rounds {
        for (d, dir) in dirs.iter().enumerate() {
            server.cmd(&["FLUSHALL"]).await.expect("FLUSHALL");
            let mut shas = Vec::new();
            for script in ["acquire_many.lua", "renew_many.lua"] {
                let text = load(dir, script);
                let sha = server
                    .cmd(&["SCRIPT", "LOAD", &text])
                    .await
                    .expect("SCRIPT LOAD");
                shas.push(reply_text(&sha));
            }
            let (acquire, renew) = (&shas[0], &shas[1]);
            let base = format!("r{round}d{d}_");
            // (script, instance id, delete the leases first)
            let steps = [
                (acquire, "one", false),
                (renew, "one", false),
                (acquire, "two", true),
                (acquire, "three", false),
            ];
            for (m, (sha, id, expire)) in steps.into_iter().enumerate() {
                if expire {
                    for call in 0..CALLS {
                        let leases: Vec<String> = keys(&base, call)
                            .into_iter()
                            .filter(|k| k.ends_with(":lease"))
                            .collect();
                        let mut del = vec!["DEL"];
                        del.extend(leases.iter().map(String::as_str));
                        server.cmd(&del).await.expect("DEL");
                    }
                }
                server
                    .cmd(&["CONFIG", "RESETSTAT"])
                    .await
                    .expect("RESETSTAT");
                for call in 0..CALLS {
                    let keys = keys(&base, call);
                    let count = keys.len().to_string();
                    let mut cmd = vec!["EVALSHA", sha.as_str(), &count];
                    cmd.extend(keys.iter().map(String::as_str));
                    cmd.extend([id, "15000"]);
                    let reply = server.cmd(&cmd).await.expect("EVALSHA");
                    assert!(matches!(reply, Reply::Array(_)), "{reply:?}");
                }
                let (_, usec) = evalsha_usec(&server).await;
                results[d][m].push(usec as f64 / (CALLS * PER_CALL) as f64);
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    print!("| µs per group (median of {rounds}; min) |");
    for dir in &dirs {
        print!(" {dir} |");
    }
    println!(" ratio (last / first, medians) |");
    println!("|{}", " --- |".repeat(dirs.len() + 2));
    for (m, name) in measures.iter().enumerate() {
        print!("| {name} |");
        for r in &results {
            let min = r[m].iter().copied().fold(f64::INFINITY, f64::min);
            print!(" {:.2} ({:.2}) |", median(&r[m]), min);
        }
        let first = median(&results[0][m]);
        let last = median(&results[dirs.len() - 1][m]);
        println!(" {:.2} |", last / first);
    }
}
