//! Shared by the harness binaries (`latency`, `load`): each runs as the
//! coordinator, and re-runs itself as `instance` processes.
//!
//! An instance joins its groups on the Redis at `--redis`, prints one line per
//! transition with the `CLOCK_MONOTONIC` time in nanoseconds (comparable
//! across processes), and obeys its standard input:
//!
//! ```text
//! ready <group> <is_leader> <ns>      after the first round of each group (≤ 100 groups)
//! all_ready <ns>                      after the first round of every group
//! elected <group> <token> <ns>        (≤ 100 groups)
//! elected <group> <token> <began_ns> <ns>   with --print-elected, every group: from the
//!                                     on_elected callback; <began_ns> when the view began, as
//!                                     the runtime logged it (leader_e2e::transitions), or -
//! all_elected <ns>                    once this instance leads every group (polled every 10 ms)
//! renewed <group> <ns>
//! lost <group> <reason> <ns>
//! stats <group> <acquire_attempts> <renewals> <elected>   on "stats"
//! usage <utime_ticks> <stime_ticks> <rss_kib> <clk_tck>   on "usage"
//! ```
//!
//! Commands: `step_down <group>`, `stats`, `usage`, `exit` (shutdown, then
//! exit); SIGTERM also shuts down (releasing every lease) and exits.

#![allow(dead_code)] // each harness uses part of it

use std::io::Write;
use std::time::Duration;

use leader_e2e::transitions;
use leader_runtime::{Config, Event, Runtime};
use leader_testkit::{monotonic_now_ns, ChildProcess};
use tokio::io::AsyncWriteExt;
use tracing_subscriber::layer::SubscriberExt;

/// Options of an instance, as command-line flags.
#[derive(Clone, Debug)]
pub struct InstanceArgs {
    pub redis: String,
    pub id: String,
    pub groups: Vec<String>,
    pub ttl: Duration,
    pub renew: Duration,
    /// Print `renewed` lines (off for many groups).
    pub print_renewals: bool,
    /// Print an `elected` line for every group, however many (from the
    /// `on_elected` callback, which loses none), with the view's start.
    pub print_elected: bool,
    /// Follower attempts one by one, as before they were batched (the
    /// `load scale` baseline).
    pub unbatched: bool,
    /// Balanced leadership (`load rebalance`).
    pub balance: bool,
}

impl InstanceArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "instance".into(),
            "--redis".into(),
            self.redis.clone(),
            "--id".into(),
            self.id.clone(),
            "--groups".into(),
            self.groups.join(","),
            "--ttl-ms".into(),
            self.ttl.as_millis().to_string(),
            "--renew-ms".into(),
            self.renew.as_millis().to_string(),
            "--print-renewals".into(),
            self.print_renewals.to_string(),
            "--print-elected".into(),
            self.print_elected.to_string(),
            "--unbatched".into(),
            self.unbatched.to_string(),
            "--balance".into(),
            self.balance.to_string(),
        ]
    }

    fn parse(args: &[String]) -> Self {
        let get = |name: &str| flag(args, name).unwrap_or_else(|| panic!("instance needs {name}"));
        Self {
            redis: get("--redis"),
            id: get("--id"),
            groups: get("--groups").split(',').map(str::to_owned).collect(),
            ttl: Duration::from_millis(get("--ttl-ms").parse().expect("--ttl-ms")),
            renew: Duration::from_millis(get("--renew-ms").parse().expect("--renew-ms")),
            print_renewals: get("--print-renewals") == "true",
            print_elected: flag(args, "--print-elected").as_deref() == Some("true"),
            unbatched: flag(args, "--unbatched").as_deref() == Some("true"),
            balance: flag(args, "--balance").as_deref() == Some("true"),
        }
    }
}

/// The value after `name` in `args`.
pub fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A flag parsed, or its default.
pub fn flag_or<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    flag(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}: cannot parse {v:?}"))
    })
}

/// If this process was started as an instance, run it and exit.
pub fn run_if_instance() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some("instance") {
        return;
    }
    let args = InstanceArgs::parse(&args);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    tokio.block_on(instance(args));
    std::process::exit(0);
}

fn out(line: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(line);
    let _ = stdout.write_all(b"\n");
    let _ = stdout.flush();
}

async fn instance(args: InstanceArgs) {
    let mut config = Config::builder()
        .redis_url(&args.redis)
        .ttl(args.ttl)
        .renew_interval(args.renew)
        .instance_id(&args.id);
    if args.print_elected {
        // The view's start, as the runtime logged it, in each line: the
        // callback runs on a thread of its own, maybe milliseconds later.
        let subscriber = tracing_subscriber::registry().with(transitions::layer());
        tracing::subscriber::set_global_default(subscriber).expect("tracing subscriber");
        config = config.on_elected(|group, lease| {
            let now = monotonic_now_ns();
            let began = transitions::take_elected(group, lease.token());
            out(format_args!(
                "elected {group} {} {} {now}",
                lease.token(),
                began.map_or_else(|| "-".to_owned(), |ns| ns.to_string())
            ))
        });
    }
    if args.unbatched {
        config = config.unbatched_follower_attempts();
    }
    if args.balance {
        config = config.balance_leadership(true);
    }
    let runtime = Runtime::new(config.build().expect("config")).expect("runtime");
    let mut events = runtime.subscribe();
    let print_renewals = args.print_renewals;
    let many = args.groups.len() > 100 || args.print_elected;
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(Event::Elected { group, token, .. }) if !many => out(format_args!(
                    "elected {group} {token} {}",
                    monotonic_now_ns()
                )),
                Ok(Event::Renewed { group, .. }) if print_renewals => {
                    out(format_args!("renewed {group} {}", monotonic_now_ns()))
                }
                Ok(Event::Lost { group, reason, .. }) => {
                    out(format_args!("lost {group} {reason} {}", monotonic_now_ns()))
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    });
    // Poll the local views (the event channel may lag with many groups).
    // Gives up after 3 ttl (a follower of some group never leads them all).
    let (poll_runtime, poll_groups) = (runtime.clone(), args.groups.clone());
    let give_up = tokio::time::Instant::now() + args.ttl * 3;
    tokio::spawn(async move {
        while !poll_groups.iter().all(|g| poll_runtime.is_leader(g)) {
            if tokio::time::Instant::now() > give_up {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        out(format_args!("all_elected {}", monotonic_now_ns()));
    });
    // Join every group at once: each first call waits for its first round.
    let mut joins = tokio::task::JoinSet::new();
    for group in &args.groups {
        let (runtime, group) = (runtime.clone(), group.clone());
        joins.spawn(async move {
            let _ = runtime.run_if_leader(&group, || async {}).await;
            let leads = runtime.is_leader(&group);
            if !many {
                out(format_args!("ready {group} {leads} {}", monotonic_now_ns()));
            }
        });
    }
    while joins.join_next().await.is_some() {}
    out(format_args!("all_ready {}", monotonic_now_ns()));

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    // Standard input on a thread of its own (tokio's `io-std` is not enabled here).
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            line = lines.recv() => {
                let Some(line) = line else { break };
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["step_down", group] => {
                        let result = runtime.step_down(group).await;
                        out(format_args!("stepped_down {group} {} {}", result.is_ok(), monotonic_now_ns()));
                    }
                    ["stats"] => {
                        for group in &args.groups {
                            if let Some(s) = runtime.stats(group) {
                                out(format_args!("stats {group} {} {} {}", s.acquire_attempts, s.renewals, s.elected));
                            }
                        }
                        out(format_args!("stats_end"));
                    }
                    ["usage"] => {
                        let (utime, stime) = cpu_ticks();
                        out(format_args!("usage {utime} {stime} {} {}", rss_kib(), clock_ticks()));
                    }
                    ["exit"] => break,
                    _ => out(format_args!("unknown command {line:?}")),
                }
            }
        }
    }
    runtime.shutdown().await;
    out(format_args!("shutdown {}", monotonic_now_ns()));
}

/// utime and stime of this process, in clock ticks (`/proc/self/stat`).
pub fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which may contain spaces) start at ") ".
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    (
        fields[11].parse().expect("utime"),
        fields[12].parse().expect("stime"),
    )
}

/// Resident set size of this process in KiB (`VmRSS` of `/proc/self/status`).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Clock ticks per second (`getconf CLK_TCK`): 100 on Linux.
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// Start an instance process (this same binary).
pub fn spawn_instance(args: &InstanceArgs) -> ChildProcess {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(args.to_args());
    cmd.env("RUST_LOG", "off");
    ChildProcess::spawn(cmd).expect("spawn instance")
}

/// Write one command line to an instance's standard input.
pub async fn command(child: &mut ChildProcess, line: &str) {
    let stdin = child.stdin().as_mut().expect("stdin");
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .await
        .expect("write to instance");
    stdin.flush().await.expect("flush");
}

/// The last whitespace-separated field of `line`, as nanoseconds.
pub fn ns_of(line: &str) -> u64 {
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp in {line:?}"))
}

/// min / median / p99 / max of `samples` (milliseconds), as a table row.
pub fn summary(name: &str, samples: &mut [f64]) -> String {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return format!("| {name} | 0 | – | – | – | – |");
    }
    let at = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    format!(
        "| {name} | {n} | {:.2} | {:.2} | {:.2} | {:.2} |",
        samples[0],
        at(0.5),
        at(0.99),
        samples[n - 1]
    )
}

pub const SUMMARY_HEADER: &str =
    "| measure (ms) | rounds | min | median | p99 | max |\n| --- | --- | --- | --- | --- | --- |";

/// The machine, for the record: cores, CPU model (with its family and
/// model numbers: one model name covers several generations on cloud
/// guests), load.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    // The first CPU's value of `key` ("model name\t: AMD EPYC").
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let (model, family, number) = (field("model name"), field("cpu family"), field("model"));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{cpus} cpus, {model} (family {family} model {number}), loadavg {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}
