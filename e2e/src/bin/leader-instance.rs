//! One instance of a fleet, for the multi-process and chaos tests.
//!
//! It joins the `chaos` group (or `GROUP`) against Redis, calls a gated
//! function on every tick, and prints one machine-readable line per event to
//! stdout (flushed per line), with times in `CLOCK_MONOTONIC` nanoseconds so
//! that the lines of every process on the machine can be compared:
//!
//! ```text
//! ready <instance_id> <pid> <at_ns>
//! elected <token> <valid_until_ns> <at_ns>
//! renewed <token> <valid_until_ns> <at_ns>
//! lost <token> <reason> <at_ns>
//! begin <token> <start_ns>                      a gated body started
//! write <token> <believed> <ok|stale|error> <start_ns> <end_ns>
//! run <token> <called_ns> <start_ns> <end_ns>   a gated body finished; the gated
//!                                               function was called at called_ns
//! backend_error <at_ns> <message>
//! stats <elected> <acquire_attempts> <renewals> <renew_failures> <at_ns>
//! exit <at_ns>
//! lagged <n> <at_ns>                            n events were lost: distrust this log
//! unstamped <token> <at_ns>                     no transition time for this `elected`
//! ```
//!
//! With `GROUPS=<n>` the instance runs the `n` groups `<GROUP>-0` to
//! `<GROUP>-<n-1>` instead of one, ticks each of them in turn, and puts the
//! group in front of each line of a group: `@<group> elected <token> …`
//! (the checker's `History::per_group` in `e2e/tests/support` reads them). No fenced store then:
//! one store's token order is one group's.
//!
//! `at_ns` is when this process printed the line, except for `elected` and
//! `lost`: there it is when the runtime logged the transition (see
//! [`transitions`]), which is within microseconds after the view really
//! turned on or off. An `elected` whose transition time was not found
//! (never expected) carries the print time, which may start the window too
//! late and hide an overlap, so an `unstamped` line follows it, which the
//! checker counts as a malformed log. The library's own log (`tracing`)
//! goes to stderr.
//!
//! Environment:
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `LEADER_REDIS_URL` | Redis to elect on | required, unless a Sentinel or a cluster is set |
//! | `LEADER_REDIS_SENTINEL_MASTER`, `LEADER_REDIS_SENTINEL_URLS` | elect on the master these sentinels (comma-separated URLs) name | none |
//! | `LEADER_REDIS_CLUSTER_URLS` | elect on the Redis Cluster of these nodes (comma-separated URLs), unless a Sentinel is set | none |
//! | `INSTANCE_ID` | the instance id in the lease | `instance-<pid>` |
//! | `TTL_MS`, `RENEW_MS`, `RETRY_MS`, `CALL_TIMEOUT_MS` | [`Config`] | 1000, 200, 200, library default |
//! | `GROUP` | the group | `chaos` (through `#[leader_only]`) |
//! | `GROUPS` | run this many groups, `<GROUP>-0`, `<GROUP>-1`, …, each line of a group prefixed with `@<group> ` | one group, no prefix |
//! | `TICK_MS` | how often the gated function is called | 50 |
//! | `BODY_MS` | how long a gated body works before its write | 10 |
//! | `STORE_ADDR` | `host:port` of a fenced store to write to from each body | none |
//! | `STATS_MS` | print a `stats` line this often | never |
//! | `LEADER_BALANCE` | `1`: `ConfigBuilder::balance_leadership` (the chaos suite's balanced runs) | off |
//!
//! On SIGTERM it calls `leader_runtime::shutdown()` (which drains gated runs
//! and releases the lease), prints the last events and `exit`, and exits 0.
//!
//! The process runs a current-thread tokio runtime on purpose: the election
//! publishes a new view and sends its `Elected` event without an `.await` in
//! between, so on one thread no gated body can start between the two. Every
//! body first prints the events pending on this process, so an `elected`
//! line always precedes (in order and in time) the runs of its leadership.

use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use leader_e2e::transitions::{self, monotonic_now_ns, take_elected, take_ended};
use leader_runtime::{leader_only, Config, Event};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::broadcast;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// The group of the attribute; `GROUP` set to anything else uses `run_if_leader`.
const DEFAULT_GROUP: &str = "chaos";

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let code = match runtime {
        Ok(rt) => rt.block_on(instance()),
        Err(e) => {
            eprintln!("leader-instance: cannot start tokio: {e}");
            2
        }
    };
    std::process::exit(code);
}

/// Converts tokio/std `Instant`s into `CLOCK_MONOTONIC` nanoseconds.
///
/// On Linux, `std::time::Instant` is read with `clock_gettime(CLOCK_MONOTONIC)`
/// (and `tokio::time::Instant` wraps it when time is not paused), so an
/// `Instant` and the raw clock differ by a constant that std just does not
/// expose. We sample both once, reading the raw clock just before and just
/// after `Instant::now()`, and take the midpoint as the raw value of that
/// `Instant`: the conversion is then exact up to half the sampling gap and
/// never drifts, since both read the same clock. Of several samples the one
/// with the smallest gap is kept (well under a microsecond), so a thread
/// preempted while sampling does not skew every time this process reports.
#[derive(Clone, Copy)]
struct Clock {
    base: std::time::Instant,
    base_ns: u64,
}

impl Clock {
    fn sample() -> Self {
        let mut best: Option<(u64, Clock)> = None;
        for _ in 0..16 {
            let before = monotonic_now_ns();
            let base = std::time::Instant::now();
            let after = monotonic_now_ns();
            let gap = after - before;
            if best.as_ref().is_none_or(|(best_gap, _)| gap < *best_gap) {
                let base_ns = before + gap / 2;
                best = Some((gap, Clock { base, base_ns }));
            }
        }
        best.map(|(_, clock)| clock)
            .unwrap_or_else(|| std::process::exit(3))
    }

    fn ns(&self, t: tokio::time::Instant) -> u64 {
        let t = t.into_std();
        if t >= self.base {
            self.base_ns + (t - self.base).as_nanos() as u64
        } else {
            self.base_ns
                .saturating_sub((self.base - t).as_nanos() as u64)
        }
    }
}

/// Prints event lines, draining the runtime's event channel first so lines
/// stay in the order things happened.
struct Log {
    clock: Clock,
    groups: Vec<String>,
    events: Mutex<broadcast::Receiver<Event>>,
}

static LOG: OnceLock<Log> = OnceLock::new();

fn line(text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // A closed stdout (the test harness went away) must not kill the instance.
    let _ = out.write_fmt(text);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

impl Log {
    /// Print every event received so far.
    fn drain(&self) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match events.try_recv() {
                Ok(event) => self.print(&event),
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    // Never expected (the channel holds 1024); a checker must not trust this log.
                    line(format_args!("lagged {n} {}", monotonic_now_ns()));
                }
                Err(_) => return,
            }
        }
    }

    fn print(&self, event: &Event) {
        let group = event.group();
        if !self.groups.iter().any(|g| g == group) {
            return;
        }
        let tag = tag(group);
        let at = monotonic_now_ns();
        match event {
            Event::Elected {
                token, valid_until, ..
            } => {
                let stamped = take_elected(group, *token);
                line(format_args!(
                    "{tag}elected {token} {} {}",
                    self.clock.ns(*valid_until),
                    stamped.unwrap_or(at)
                ));
                if stamped.is_none() {
                    line(format_args!("{tag}unstamped {token} {at}"));
                }
            }
            Event::Renewed {
                token, valid_until, ..
            } => line(format_args!(
                "{tag}renewed {token} {} {at}",
                self.clock.ns(*valid_until)
            )),
            Event::Lost { token, reason, .. } => line(format_args!(
                "{tag}lost {token} {reason} {}",
                take_ended(group, *token).unwrap_or(at)
            )),
            Event::BackendError { message, .. } => {
                let message = message.replace('\n', " ");
                line(format_args!("{tag}backend_error {at} {message}"));
            }
            _ => {}
        }
    }
}

/// What goes in front of a line of `group`: nothing with one group,
/// `@<group> ` with `GROUPS`.
fn tag(group: &str) -> String {
    let many = SETTINGS.get().is_some_and(|s| s.many);
    if many {
        format!("@{group} ")
    } else {
        String::new()
    }
}

fn log() -> &'static Log {
    // Set in `instance` before any gated call.
    LOG.get().unwrap_or_else(|| std::process::exit(4))
}

/// A connection to the fenced store, opened on first use.
static STORE: tokio::sync::Mutex<Option<BufReader<TcpStream>>> =
    tokio::sync::Mutex::const_new(None);

/// Write to the fenced store with `token`: `W <token> <instance> <start_ns>`,
/// answered by `OK` or `STALE <last>`.
async fn store_write(addr: &str, instance: &str, token: u64, start_ns: u64) -> &'static str {
    let mut conn = STORE.lock().await;
    for _attempt in 0..2 {
        if conn.is_none() {
            match TcpStream::connect(addr).await {
                Ok(stream) => *conn = Some(BufReader::new(stream)),
                Err(_) => return "error",
            }
        }
        let Some(stream) = conn.as_mut() else {
            return "error";
        };
        let request = format!("W {token} {instance} {start_ns}\n");
        let mut reply = String::new();
        let ok = stream.get_mut().write_all(request.as_bytes()).await.is_ok()
            && stream.read_line(&mut reply).await.is_ok_and(|n| n > 0);
        if ok {
            return if reply.starts_with("OK") {
                "ok"
            } else if reply.starts_with("STALE") {
                "stale"
            } else {
                "error"
            };
        }
        *conn = None; // reconnect once
    }
    "error"
}

struct Settings {
    instance_id: String,
    body: Duration,
    store: Option<String>,
    /// `GROUPS` is set: lines carry their group.
    many: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The gated body: note the start, "work" for `BODY_MS`, then write to the
/// fenced store (if any) with this leadership's token — without checking
/// again whether we still lead, as a naive job would; the store's fencing
/// is what protects it. Returns the token and the start time.
async fn body() -> (u64, u64) {
    // Every event up to now (our `elected` first of all) is printed before
    // the run's start time is taken.
    log().drain();
    let start = monotonic_now_ns();
    let Some(lease) = leader_runtime::current_lease() else {
        line(format_args!("error gated body without a lease {start}"));
        return (0, start);
    };
    let token = lease.token();
    let tag = tag(lease.group());
    line(format_args!("{tag}begin {token} {start}"));
    let settings = SETTINGS.get().unwrap_or_else(|| std::process::exit(4));
    tokio::time::sleep(settings.body).await;
    if let Some(addr) = &settings.store {
        let write_start = monotonic_now_ns();
        let believed = u8::from(lease.is_valid());
        let result = store_write(addr, &settings.instance_id, token, write_start).await;
        let write_end = monotonic_now_ns();
        line(format_args!(
            "{tag}write {token} {believed} {result} {write_start} {write_end}"
        ));
    }
    (token, start)
}

#[leader_only(group = "chaos")]
async fn gated_chaos() -> (u64, u64) {
    body().await
}

async fn tick(group: &str) {
    // The run was admitted between `called` and its body's `start`.
    let called = monotonic_now_ns();
    let ran = if group == DEFAULT_GROUP {
        gated_chaos().await
    } else {
        leader_runtime::run_if_leader(group, body).await
    };
    if let Some((token, start)) = ran {
        log().drain();
        let end = monotonic_now_ns();
        line(format_args!(
            "{}run {token} {called} {start} {end}",
            tag(group)
        ));
    }
}

fn env_ms(name: &str, default: Option<u64>) -> Result<Option<Duration>, String> {
    match std::env::var(name) {
        Ok(v) => v
            .parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|e| format!("{name}={v:?}: {e}")),
        Err(_) => Ok(default.map(Duration::from_millis)),
    }
}

fn print_stats(group: &str) {
    // The events so far first: a `stats` line then says the lines before
    // it are complete up to its time.
    log().drain();
    if let Some(s) = leader_runtime::stats(group) {
        line(format_args!(
            "{}stats {} {} {} {} {}",
            tag(group),
            s.elected,
            s.acquire_attempts,
            s.renewals,
            s.renew_failures,
            monotonic_now_ns()
        ));
    }
}

async fn instance() -> i32 {
    let log_filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_filter(log_filter),
        )
        .with(transitions::layer())
        .init();
    match run().await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leader-instance: {e}");
            1
        }
    }
}

async fn run() -> Result<(), String> {
    let instance_id =
        std::env::var("INSTANCE_ID").unwrap_or_else(|_| format!("instance-{}", std::process::id()));
    let group = std::env::var("GROUP").unwrap_or_else(|_| DEFAULT_GROUP.to_owned());
    let many = match std::env::var("GROUPS") {
        Ok(n) => match n.parse::<usize>() {
            Ok(0) => return Err("GROUPS=0: at least one group".into()),
            Ok(n) => Some(n),
            Err(e) => return Err(format!("GROUPS={n:?}: {e}")),
        },
        Err(_) => None,
    };
    let groups: Vec<String> = match many {
        Some(n) => (0..n).map(|i| format!("{group}-{i}")).collect(),
        None => vec![group],
    };
    if many.is_some() && std::env::var("STORE_ADDR").is_ok() {
        return Err("STORE_ADDR with GROUPS: one store orders the tokens of one group".into());
    }
    let tick_every = env_ms("TICK_MS", Some(50))?.unwrap_or_default();
    let stats_every = env_ms("STATS_MS", None)?;
    // A Sentinel deployment when its master name is set, else one URL.
    let config = match std::env::var("LEADER_REDIS_SENTINEL_MASTER") {
        Ok(master) if !master.is_empty() => {
            let urls = std::env::var("LEADER_REDIS_SENTINEL_URLS")
                .map_err(|_| "LEADER_REDIS_SENTINEL_URLS is not set")?;
            Config::builder().redis_sentinel(master, urls.split(',').map(str::to_owned))
        }
        _ => match std::env::var("LEADER_REDIS_CLUSTER_URLS") {
            Ok(urls) if !urls.is_empty() => {
                Config::builder().redis_cluster_urls(urls.split(',').map(str::to_owned))
            }
            _ => Config::builder().redis_url(
                std::env::var("LEADER_REDIS_URL").map_err(|_| "LEADER_REDIS_URL is not set")?,
            ),
        },
    };
    let mut config = config
        .instance_id(instance_id.clone())
        .ttl(env_ms("TTL_MS", Some(1000))?.unwrap_or_default())
        .renew_interval(env_ms("RENEW_MS", Some(200))?.unwrap_or_default())
        .retry_interval(env_ms("RETRY_MS", Some(200))?.unwrap_or_default());
    if let Some(timeout) = env_ms("CALL_TIMEOUT_MS", None)? {
        config = config.call_timeout(timeout);
    }
    if std::env::var("LEADER_BALANCE").as_deref() == Ok("1") {
        config = config.balance_leadership(true);
    }
    let config = config.build().map_err(|e| e.to_string())?;
    let _ = SETTINGS.set(Settings {
        instance_id: instance_id.clone(),
        body: env_ms("BODY_MS", Some(10))?.unwrap_or_default(),
        store: std::env::var("STORE_ADDR").ok(),
        many: many.is_some(),
    });
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    leader_runtime::init(config).map_err(|e| e.to_string())?;
    let events = leader_runtime::subscribe();
    let log = LOG.get_or_init(|| Log {
        clock: Clock::sample(),
        groups: groups.clone(),
        events: Mutex::new(events),
    });
    // A second subscription only to be woken when events arrive; the lines
    // are printed from `log.events` so that every path prints in order.
    let mut wake = leader_runtime::subscribe();
    line(format_args!(
        "ready {instance_id} {} {}",
        std::process::id(),
        monotonic_now_ns()
    ));

    // Gated calls on their own task, so events keep being printed while a
    // body runs (and a body is never dropped half-way by another branch).
    let ticker_groups = groups.clone();
    let ticker = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(tick_every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            for group in &ticker_groups {
                tick(group).await;
            }
        }
    });
    let stats_groups = groups.clone();
    let stats = stats_every.map(|every| {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                stats_groups.iter().for_each(|g| print_stats(g));
            }
        })
    });
    loop {
        tokio::select! {
            _ = sigterm.recv() => break,
            woke = wake.recv() => {
                if let Err(broadcast::error::RecvError::Closed) = woke {
                    break;
                }
                log.drain();
            }
        }
    }

    // Graceful stop: shut down (drain gated runs, release the lease) while
    // still printing events as they happen, so `lost` is logged before the
    // release reaches Redis.
    let mut shutdown = tokio::spawn(leader_runtime::shutdown());
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = wake.recv() => log.drain(),
        }
    }
    ticker.abort();
    if let Some(stats) = stats {
        stats.abort();
    }
    log.drain();
    groups.iter().for_each(|g| print_stats(g));
    line(format_args!("exit {}", monotonic_now_ns()));
    Ok(())
}
