//! Quickstart: three instances of one service in one process, no Redis needed.
//!
//! The instances share one in-memory lease store (`MemoryBackend`), which
//! stands in for Redis. Each ticks every 300 ms and calls the same
//! `#[leader_only(group = "report")]` function; the body runs on exactly one
//! of them. After a few ticks the leader stops (`Runtime::shutdown` releases
//! its lease) and another instance takes over, and the demo prints how long
//! that took against its bound. It exits by itself in about three seconds.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! In a real service each instance is its own process and calls
//! `leader_runtime::init(Config::builder().redis_url(..).build()?)` once at
//! start-up instead of building `Runtime`s; the gated function stays the same.

use std::collections::BTreeMap;
use std::error::Error;
use std::time::Duration;

use leader_runtime::{leader_only, Config, Event, MemoryBackend, Runtime};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{interval_at, Instant};

/// The instances, by id (ids must be unique in a fleet).
pub const INSTANCES: [&str; 3] = ["instance-a", "instance-b", "instance-c"];
/// Lease length: a crashed leader is replaced within this.
pub const TTL: Duration = Duration::from_secs(1);
/// The leader's heartbeat.
pub const RENEW_INTERVAL: Duration = Duration::from_millis(300);
/// How often every instance calls the gated function.
pub const TICK: Duration = Duration::from_millis(300);
/// How many ticks the demo runs.
pub const TICKS: u32 = 9;
/// After this tick the leader stops.
pub const STOP_AFTER_TICK: u32 = 4;
/// A graceful stop hands the lease over in one backend round trip (the
/// release notice wakes the followers at once); the demo checks it against
/// this bound.
pub const HANDOVER_BOUND: Duration = Duration::from_millis(100);

/// The singleton work. Every instance calls it on every tick; the body runs
/// only on the instance that holds the `report` lease, and returns the
/// fencing token of that leadership. Elsewhere the call returns `None`.
#[leader_only(group = "report")]
async fn send_report() -> u64 {
    // Inside a gated body, `current_lease()` is the leadership it runs under.
    leader_runtime::current_lease().map_or(0, |lease| lease.token())
}

/// What happened, for the checks at the end (and the test that runs the demo).
#[derive(Debug)]
pub struct Report {
    /// For each tick (index 0 is tick 1), the instances whose call ran the body.
    pub runs: Vec<Vec<&'static str>>,
    /// The instance that led first and was stopped.
    pub stopped_leader: &'static str,
    /// The instance that took over.
    pub new_leader: &'static str,
    /// From the start of the leader's shutdown to the new leader's election.
    pub handover: Duration,
    /// Fencing tokens of the first and the second leadership.
    pub tokens: (u64, u64),
}

impl Report {
    /// Every tick ran the body on exactly one instance, the handover was
    /// within its bound, and the new leadership's token is greater.
    pub fn ok(&self) -> bool {
        self.runs.iter().all(|ran| ran.len() == 1)
            && self.stopped_leader != self.new_leader
            && self.handover <= HANDOVER_BOUND
            && self.tokens.1 > self.tokens.0
    }
}

/// One instance's call on one tick.
struct Call {
    tick: u32,
    instance: &'static str,
    /// `Some(token)` when the body ran here.
    ran: Option<u64>,
}

/// Run the demo, handing every line of output to `say`.
///
/// # Errors
///
/// A bad configuration, or no election within a few seconds.
pub async fn run(mut say: impl FnMut(String)) -> Result<Report, Box<dyn Error + Send + Sync>> {
    let store = MemoryBackend::new();
    say(format!(
        "{} instances share one in-memory lease store (ttl {TTL:?}, renew every {RENEW_INTERVAL:?});",
        INSTANCES.len()
    ));
    say(format!(
        "each calls send_report(), gated by #[leader_only(group = \"report\")], every {TICK:?}"
    ));

    let (calls_tx, mut calls) = mpsc::channel::<Call>(64);
    let (elected_tx, mut elected) = mpsc::unbounded_channel::<(&'static str, Instant)>();
    let start = Instant::now();
    let mut instances = BTreeMap::new();
    let mut watchers = Vec::new();
    for name in INSTANCES {
        let runtime = Runtime::new(
            Config::builder()
                .memory(store.clone())
                .instance_id(name)
                .ttl(TTL)
                .renew_interval(RENEW_INTERVAL)
                .build()?,
        )?;
        watchers.push(watch_elections(name, &runtime, elected_tx.clone()));
        let ticker = spawn_ticker(name, &runtime, start, calls_tx.clone());
        instances.insert(name, (runtime, ticker));
    }
    drop(calls_tx);

    let mut runs = Vec::new();
    let mut tick_calls: BTreeMap<u32, Vec<Call>> = BTreeMap::new();
    let mut handover = None;
    let mut tokens = Vec::new();
    let deadline = start + TICK * (TICKS + 3) + TTL;
    while let Some(call) = tokio::time::timeout_at(deadline, calls.recv())
        .await
        .map_err(|_| "the ticks did not finish in time")?
    {
        let tick = call.tick;
        let this_tick = tick_calls.entry(tick).or_default();
        this_tick.push(call);
        // Complete once every running instance has called for this tick.
        if !instances
            .keys()
            .all(|name| this_tick.iter().any(|c| c.instance == *name))
        {
            continue;
        }
        let this_tick = tick_calls.remove(&tick).unwrap_or_default();
        let ran: Vec<_> = this_tick
            .iter()
            .filter(|c| c.ran.is_some())
            .map(|c| c.instance)
            .collect();
        let mut skipped: Vec<_> = this_tick
            .iter()
            .filter(|c| c.ran.is_none())
            .map(|c| c.instance)
            .collect();
        skipped.sort_unstable();
        let token = this_tick.iter().find_map(|c| c.ran);
        match (ran.as_slice(), token) {
            ([one], Some(token)) => {
                say(format!(
                    "tick {tick}: {one} ran the job (fencing token {token}); {} skipped it",
                    skipped.join(", ")
                ));
                if tokens.last() != Some(&token) {
                    tokens.push(token);
                }
            }
            _ => say(format!(
                "tick {tick}: the job ran on {} instance(s): {ran:?}",
                ran.len()
            )),
        }
        runs.push(ran.clone());

        if tick == STOP_AFTER_TICK && handover.is_none() {
            let [leader] = ran.as_slice() else {
                return Err(format!("no single leader at tick {tick}: {ran:?}").into());
            };
            let leader = *leader;
            say(format!(
                "stopping {leader}, the leader: its ticks end and shutdown() releases its lease"
            ));
            let (runtime, ticker) = instances.remove(leader).ok_or("unknown leader")?;
            let stopped_at = Instant::now();
            ticker.abort();
            runtime.shutdown().await;
            let (new_leader, elected_at) = loop {
                let (who, at) = tokio::time::timeout(TTL * 2, elected.recv())
                    .await
                    .map_err(|_| "nobody took over within two ttl")?
                    .ok_or("election watchers ended")?;
                if who != leader && at >= stopped_at {
                    break (who, at);
                }
            };
            let took = elected_at - stopped_at;
            say(format!(
                "{new_leader} took over {:.1} ms after {leader} began to stop \
                 (bound for a graceful stop: {} ms; a crashed leader would be \
                 replaced within the ttl, {TTL:?})",
                took.as_secs_f64() * 1000.0,
                HANDOVER_BOUND.as_millis(),
            ));
            handover = Some((leader, new_leader, took));
        }
        if tick == TICKS {
            break;
        }
    }

    for (runtime, ticker) in instances.into_values() {
        ticker.abort();
        runtime.shutdown().await;
    }
    for watcher in watchers {
        watcher.abort();
    }

    let (stopped_leader, new_leader, handover) = handover.ok_or("the leader was never stopped")?;
    let report = Report {
        runs,
        stopped_leader,
        new_leader,
        handover,
        tokens: (
            tokens.first().copied().unwrap_or_default(),
            tokens.get(1).copied().unwrap_or_default(),
        ),
    };
    let once = report.runs.iter().all(|ran| ran.len() == 1);
    say(format!(
        "done: {} ticks, each ran on exactly one instance: {}; handover within {} ms: {}; \
         the new leader's fencing token is greater: {}",
        report.runs.len(),
        yes(once),
        HANDOVER_BOUND.as_millis(),
        yes(report.handover <= HANDOVER_BOUND),
        yes(report.tokens.1 > report.tokens.0),
    ));
    Ok(report)
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "NO"
    }
}

/// An instance's tick loop: every `TICK`, call the gated function with this
/// instance's runtime made current (`Runtime::scope`).
fn spawn_ticker(
    name: &'static str,
    runtime: &Runtime,
    start: Instant,
    calls: mpsc::Sender<Call>,
) -> JoinHandle<()> {
    tokio::spawn(runtime.scope(async move {
        let mut ticks = interval_at(start, TICK);
        for tick in 1..=TICKS {
            ticks.tick().await;
            let ran = send_report().await;
            let call = Call {
                tick,
                instance: name,
                ran,
            };
            if calls.send(call).await.is_err() {
                return;
            }
        }
    }))
}

/// Report when `runtime` is elected, with the instant the event arrived.
fn watch_elections(
    name: &'static str,
    runtime: &Runtime,
    elected: mpsc::UnboundedSender<(&'static str, Instant)>,
) -> JoinHandle<()> {
    let mut events = runtime.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(Event::Elected { .. }) => {
                    if elected.send((name, Instant::now())).is_err() {
                        return;
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
    // RUST_LOG=leader_runtime=debug shows every transition.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let report = run(|line| println!("{line}")).await?;
    if !report.ok() {
        return Err("the demo did not behave as expected (see above)".into());
    }
    Ok(())
}
