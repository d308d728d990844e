//! The faults of the chaos suite, each injected into a settled fleet,
//! healed, and checked against its liveness bound.

use std::fmt;
use std::time::Duration;

use leader_testkit::monotonic_now_ns;

use super::checker::{Line, Violation};
use super::fleet::Fleet;
use super::{after, ns_to_ms, sleep_until_ns};

/// One fault we can produce on one machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// kill -9 the leader (then start a new process in its slot).
    Kill9Leader,
    /// SIGTERM the leader: it shuts down, releasing its lease.
    SigtermLeader,
    /// SIGSTOP the leader for 2 × ttl, then SIGCONT.
    SigstopLeader,
    /// Black-hole the leader's connections for 3 × ttl, then heal.
    BlackholeLeader,
    /// Black-hole one follower's connections for 3 × ttl, then heal.
    BlackholeFollower,
    /// Latency on every connection: a round trip of ttl/4 for 2 × ttl (the
    /// leader keeps leading), then of ttl/2 for 3 × ttl (leaderships are
    /// short, leaderless gaps bounded), then heal.
    SlowNetwork,
    /// Kill redis-server and start it again, empty (no persistence).
    RedisRestart,
    /// Stop redis-server for 2 × ttl, then start it again, empty.
    RedisDown,
    /// Someone `SET`s the lease key to another value (no expiry) for one
    /// ttl, then deletes it.
    ForeignValue,
    /// Someone replaces the lease key by a hash for one ttl, then deletes it.
    WrongType,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::Kill9Leader,
        Fault::SigtermLeader,
        Fault::SigstopLeader,
        Fault::BlackholeLeader,
        Fault::BlackholeFollower,
        Fault::SlowNetwork,
        Fault::RedisRestart,
        Fault::RedisDown,
        Fault::ForeignValue,
        Fault::WrongType,
    ];

    /// The promised bound on the time until the group leads again, from
    /// the fault (crash-like faults) or from the repair (Redis back, key
    /// fixed); for the slow network, on the longest leaderless gap; `None`
    /// where the leader must simply keep leading.
    pub fn bound(self, fleet: &Fleet) -> Option<Duration> {
        let (ttl, renew) = (fleet.cfg.ttl, fleet.cfg.renew);
        match self {
            Fault::Kill9Leader | Fault::SigstopLeader | Fault::BlackholeLeader => {
                Some(ttl + Duration::from_millis(250))
            }
            Fault::SigtermLeader => Some(Duration::from_millis(100)),
            Fault::RedisRestart
            | Fault::RedisDown
            | Fault::ForeignValue
            | Fault::WrongType
            | Fault::SlowNetwork => Some(ttl + renew),
            Fault::BlackholeFollower => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What one injected fault did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub fault: Fault,
    /// Time from the fault (or repair) to the next leadership, if the
    /// fault ended one.
    pub recovery: Option<Duration>,
    /// Where the time went, for the slowest cases of a report.
    pub detail: String,
}

/// How long a test waits for something that must happen before it gives
/// up. Not a bound: bounds are checked on the measured times.
const PATIENCE: Duration = Duration::from_secs(10);

fn dur(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

/// Inject `fault` into a settled fleet whose leader is in `leader` (every
/// slot live, every proxy passing), heal it, and wait until the group
/// leads again. Errors describe a broken promise.
pub async fn inject(
    fleet: &mut Fleet,
    fault: Fault,
    leader: usize,
    pick: u64,
) -> Result<Outcome, String> {
    let cfg = fleet.cfg.clone();
    let ttl = cfg.ttl;
    let bound = fault.bound(fleet);
    let leader_name = fleet.member(leader).name.clone();
    let leader_token = fleet.token_of(leader).ok_or("the leader has no token")?;
    let followers: Vec<usize> = fleet
        .live_slots()
        .into_iter()
        .filter(|s| *s != leader)
        .collect();
    let err = |e: std::io::Error| e.to_string();
    let mut recovery = None;
    let mut detail = String::new();
    // Wait for the next `elected` after `t` and check it against the bound.
    macro_rules! recovered_after {
        ($t:expr, $what:expr) => {{
            let t = $t;
            let (slot, line) = fleet
                .wait_elected_after(t, ttl + PATIENCE)
                .await
                .map_err(|e| format!("no leader after {}: {e}", $what))?;
            let Line::Elected { at, token, .. } = line else {
                unreachable!()
            };
            if token <= leader_token {
                return Err(format!("new token {token} not above {leader_token}"));
            }
            let took = dur(at - t);
            recovery = Some(took);
            if let Some(bound) = bound {
                if took > bound {
                    return Err(format!(
                        "{fault}: leader again {:.1} ms after {}, bound {bound:?}",
                        ns_to_ms(at - t),
                        $what
                    ));
                }
            }
            slot
        }};
    }
    match fault {
        Fault::Kill9Leader => {
            let t = fleet.kill9(leader).await;
            recovered_after!(t, "kill -9");
            fleet.spawn(leader);
            fleet.wait_ready(leader).await;
        }
        Fault::SigtermLeader => {
            let t = fleet.terminate(leader).await;
            let lost = fleet
                .history()
                .windows_of(&leader_name)
                .last()
                .and_then(|w| w.lost.clone());
            let Some(("shutdown", released)) = lost.as_ref().map(|(r, at)| (r.as_str(), *at))
            else {
                return Err(format!("stopped leader's loss: {lost:?}"));
            };
            detail = format!(
                "the leader's view ended {:.1} ms after the signal",
                ns_to_ms(released.saturating_sub(t))
            );
            recovered_after!(t, format!("SIGTERM ({detail})"));
            fleet.spawn(leader);
            fleet.wait_ready(leader).await;
        }
        Fault::SigstopLeader => {
            let t = fleet.pause(leader);
            let new = recovered_after!(t, "SIGSTOP");
            sleep_until_ns(after(t, 2 * ttl)).await;
            let resumed = fleet.resume(leader);
            // Back as a follower: its view ended, and the new leader goes on.
            let (_, lost) = fleet
                .member(leader)
                .wait_line(
                    0,
                    |l| matches!(l, Line::Lost { token, .. } if *token == leader_token),
                    PATIENCE,
                )
                .await
                .map_err(err)?;
            let Line::Lost { reason, .. } = lost else {
                unreachable!()
            };
            if reason != "expired" && reason != "superseded" {
                return Err(format!("resumed leader lost with reason {reason}"));
            }
            keeps_leading(fleet, new, resumed, 2).await?;
            if elected_since(fleet, leader, resumed) {
                return Err("the resumed leader was elected again while another led".into());
            }
        }
        Fault::BlackholeLeader => {
            let t = monotonic_now_ns();
            fleet.proxies[leader].blackhole();
            let new = recovered_after!(t, "the leader's partition");
            fleet
                .member(leader)
                .wait_line(
                    0,
                    |l| matches!(l, Line::Lost { token, .. } if *token == leader_token),
                    PATIENCE,
                )
                .await
                .map_err(err)?;
            sleep_until_ns(after(t, 3 * ttl)).await;
            fleet.proxies[leader].pass();
            let healed = monotonic_now_ns();
            keeps_leading(fleet, new, healed, 2).await?;
            if elected_since(fleet, leader, t) {
                return Err("the partitioned leader was elected again".into());
            }
        }
        Fault::BlackholeFollower => {
            let follower = followers[(pick as usize) % followers.len()];
            let t = monotonic_now_ns();
            fleet.proxies[follower].blackhole();
            sleep_until_ns(after(t, 3 * ttl)).await;
            fleet.proxies[follower].pass();
            let healed = monotonic_now_ns();
            keeps_leading(fleet, leader, healed, 2).await?;
            lost_since(fleet, leader, t)?;
            if elected_since(fleet, follower, t) {
                return Err("the partitioned follower was elected".into());
            }
        }
        Fault::SlowNetwork => {
            // A round trip of ttl/4: the leader just keeps leading.
            let t = monotonic_now_ns();
            for p in &fleet.proxies {
                p.delay(ttl / 8);
            }
            sleep_until_ns(after(t, 2 * ttl)).await;
            lost_since(fleet, leader, t)?;
            keeps_leading(fleet, leader, monotonic_now_ns(), 1).await?;
            // A round trip of ttl/2: no renewal can come back inside the
            // view that the acquisition left (ttl - margin - rtt < rtt), so
            // leaderships are short; the group must still never be without
            // a leader for longer than ttl + renew.
            let slow = monotonic_now_ns();
            for p in &fleet.proxies {
                p.delay(ttl / 4);
            }
            sleep_until_ns(after(slow, 3 * ttl)).await;
            for p in &fleet.proxies {
                p.pass();
            }
            let healed = monotonic_now_ns();
            let history = fleet.history();
            let mut covered_until = slow;
            let mut longest = 0;
            for w in history
                .windows
                .iter()
                .filter(|w| w.end > slow && w.start < healed)
            {
                longest = longest.max(w.start.saturating_sub(covered_until));
                covered_until = covered_until.max(w.end);
            }
            longest = longest.max(healed.saturating_sub(covered_until));
            recovery = Some(dur(longest));
            let limit = cfg.ttl + cfg.renew;
            if dur(longest) > limit {
                return Err(format!(
                    "{fault}: {:.1} ms without a leader at a round trip of ttl/2 (bound {limit:?})",
                    ns_to_ms(longest)
                ));
            }
        }
        Fault::RedisRestart => {
            fleet.redis.restart().await.map_err(err)?;
            let back = monotonic_now_ns();
            recovered_after!(back, "Redis restarted empty");
        }
        Fault::RedisDown => {
            let t = monotonic_now_ns();
            fleet.redis.stop().await.map_err(err)?;
            sleep_until_ns(after(t, 2 * ttl)).await;
            fleet.redis.start_again().await.map_err(err)?;
            let back = monotonic_now_ns();
            recovered_after!(back, "Redis came back empty");
        }
        Fault::ForeignValue => {
            let key = fleet.lease_key();
            let t = monotonic_now_ns();
            fleet
                .redis
                .cmd(&["SET", key, "intruder"])
                .await
                .map_err(err)?
                .ok()
                .map_err(err)?;
            let limit = cfg.renew + cfg.call_timeout.unwrap_or(ttl) + Duration::from_millis(100);
            let (_, lost) = fleet
                .member(leader)
                .wait_line(
                    0,
                    |l| matches!(l, Line::Lost { token, .. } if *token == leader_token),
                    PATIENCE,
                )
                .await
                .map_err(err)?;
            let Line::Lost { reason, at, .. } = lost else {
                unreachable!()
            };
            if reason != "superseded" || dur(at - t) > limit {
                return Err(format!(
                    "leader lost {:.1} ms after the foreign SET, reason {reason} (want superseded within {limit:?})",
                    ns_to_ms(at.saturating_sub(t))
                ));
            }
            sleep_until_ns(after(t, ttl)).await;
            let fixed = monotonic_now_ns();
            fleet.redis.cmd(&["DEL", key]).await.map_err(err)?;
            if let Some(w) = fleet.history().first_window_after(t) {
                if w.start < fixed {
                    return Err(format!("elected while the key held another value: {w:?}"));
                }
            }
            recovered_after!(fixed, "the foreign value was deleted");
        }
        Fault::WrongType => {
            let key = fleet.lease_key();
            let t = monotonic_now_ns();
            fleet
                .redis
                .cmd(&[
                    "EVAL",
                    "redis.call('DEL', KEYS[1]) return redis.call('HSET', KEYS[1], 'f', 'v')",
                    "1",
                    key,
                ])
                .await
                .map_err(err)?
                .ok()
                .map_err(err)?;
            let (_, lost) = fleet
                .member(leader)
                .wait_line(
                    0,
                    |l| matches!(l, Line::Lost { token, .. } if *token == leader_token),
                    PATIENCE,
                )
                .await
                .map_err(err)?;
            let Line::Lost { at, .. } = lost else {
                unreachable!()
            };
            let limit = ttl + Duration::from_millis(250);
            if dur(at.saturating_sub(t)) > limit {
                return Err(format!(
                    "leader lost {:.1} ms after the key became a hash (want within {limit:?})",
                    ns_to_ms(at.saturating_sub(t))
                ));
            }
            sleep_until_ns(after(t, ttl)).await;
            let fixed = monotonic_now_ns();
            fleet.redis.cmd(&["DEL", key]).await.map_err(err)?;
            if let Some(w) = fleet.history().first_window_after(t) {
                if w.start < fixed {
                    return Err(format!("elected while the key was a hash: {w:?}"));
                }
            }
            recovered_after!(fixed, "the hash was deleted");
        }
    }
    Ok(Outcome {
        fault,
        recovery,
        detail,
    })
}

/// The leader in `slot` still leads after `since`: it renews `renewals`
/// times after it (each renewal within ttl + renew of the previous).
async fn keeps_leading(
    fleet: &Fleet,
    slot: usize,
    since: u64,
    renewals: usize,
) -> Result<(), String> {
    let member = fleet.member(slot);
    let token = fleet.token_of(slot).ok_or("no token")?;
    let mut from = super::fleet::index_after(&member.lines(), since);
    let limit = fleet.cfg.ttl + fleet.cfg.renew;
    for _ in 0..renewals {
        let (i, line) = member
            .wait_line(
                from,
                |l| matches!(l, Line::Renewed { token: t, .. } | Line::Lost { token: t, .. } if *t == token),
                limit,
            )
            .await
            .map_err(|e| format!("{} stopped leading: {e}", member.name))?;
        if let Line::Lost { reason, .. } = line {
            return Err(format!("{} lost its lease ({reason})", member.name));
        }
        from = i + 1;
    }
    Ok(())
}

/// Error if the process in `slot` logged a loss at or after `t`.
fn lost_since(fleet: &Fleet, slot: usize, t: u64) -> Result<(), String> {
    let lost =
        fleet
            .member(slot)
            .lines()
            .iter()
            .find_map(|l| match super::checker::parse_line(l) {
                Some(Line::Lost { reason, at, .. }) if at >= t => Some(reason),
                _ => None,
            });
    match lost {
        Some(reason) => Err(format!(
            "{} lost its lease ({reason})",
            fleet.member(slot).name
        )),
        None => Ok(()),
    }
}

/// Whether the process in `slot` was elected at or after `t`.
fn elected_since(fleet: &Fleet, slot: usize, t: u64) -> bool {
    fleet
        .member(slot)
        .lines()
        .iter()
        .any(|l| matches!(super::checker::parse_line(l), Some(Line::Elected { at, .. }) if at >= t))
}

/// Fencing over a whole run: every write the store rejected came from an
/// instance that did not believe it led when it started the write, or was
/// stopped (SIGSTOP) between starting it and the store receiving it.
#[derive(Debug, Default)]
pub struct FencingReport {
    pub accepted: usize,
    /// Rejected, and the writer's view had ended when it started the write.
    pub rejected_not_leader: usize,
    /// Rejected, the writer believed it led, and was paused mid-write.
    pub rejected_paused: usize,
    /// Rejected though the writer believed it led and was never paused.
    pub violations: Vec<String>,
}

pub fn check_fencing(fleet: &Fleet) -> FencingReport {
    let mut report = FencingReport::default();
    let Some(store) = &fleet.store else {
        return report;
    };
    let history = fleet.history();
    for w in store.writes() {
        if w.accepted {
            report.accepted += 1;
            continue;
        }
        let believed = history
            .writes
            .iter()
            .find(|iw| iw.process == w.instance && iw.token == w.token && iw.start == w.start_ns)
            .map(|iw| iw.believed);
        match believed {
            Some(false) => report.rejected_not_leader += 1,
            _ if fleet.was_paused(&w.instance, w.start_ns, w.received_ns) => report.rejected_paused += 1,
            // Killed before it printed its line: it did not live to see the
            // answer; judge by whether it was paused (above) only.
            b => report.violations.push(format!(
                "stale write rejected from {} (token {}, believed {b:?}, last {}, started {}, received {} ns)",
                w.instance, w.token, w.last_before, w.start_ns, w.received_ns
            )),
        }
    }
    report
}

/// Percentile (0..=100) of a sorted slice.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Safety violations, formatted.
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
