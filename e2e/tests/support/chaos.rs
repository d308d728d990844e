//! The faults of the chaos suite, each injected into a settled fleet,
//! healed, and checked against its liveness bound.

use std::fmt;
use std::time::Duration;

use leader_testkit::{monotonic_now_ns, Persisted, Reply};

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
    /// Someone `DEL`s the lease key while the leader holds it.
    DelLease,
    /// As [`DelLease`](Self::DelLease), and a new instance joins right
    /// after (a rolling deploy: a follower was stopped just before).
    DelLeaseJoin,
    /// Memory pressure under a real `maxmemory` with `maxmemory-policy
    /// volatile-ttl`: a filler writes keys with an expiry (in db 1) until
    /// eviction deletes the lease key (seen as a keyspace notification),
    /// then the limit is lifted and the filler's keys deleted.
    EvictVolatileTtl,
    /// As [`EvictVolatileTtl`](Self::EvictVolatileTtl), and a new instance joins.
    EvictVolatileTtlJoin,
    /// As [`EvictVolatileTtl`](Self::EvictVolatileTtl) under `volatile-lru`.
    EvictVolatileLru,
    /// As [`EvictVolatileLru`](Self::EvictVolatileLru), and a new instance joins.
    EvictVolatileLruJoin,
    /// `SAVE` an RDB snapshot, let renewals go on for 1.5 × ttl (the
    /// snapshot's lease expires), then kill -9 redis-server and restart it
    /// from that snapshot: the lease key is gone, the token record older.
    RdbRestore,
    /// As [`RdbRestore`](Self::RdbRestore), and a new instance joins.
    RdbRestoreJoin,
    /// The AOF on with `appendfsync everysec`; kill -9 redis-server and
    /// restart it from its AOF without the writes of the last 1.5 × ttl
    /// (what a host crash loses when fsyncs lag: everysec fsyncs once a
    /// second and lets a slow fsync fall up to 2 s behind).
    AofRestore,
    /// As [`AofRestore`](Self::AofRestore), and a new instance joins.
    AofRestoreJoin,
    /// Sentinel fleets only: cut the replica's replication link for
    /// 2 × ttl, then `SENTINEL FAILOVER` to it (a lagging replica promoted,
    /// without the renewals of the last 2 × ttl); Sentinel demotes the old
    /// primary some seconds later and disconnects its clients.
    ReplicaPromotion,
    /// As [`ReplicaPromotion`](Self::ReplicaPromotion), and a new instance
    /// joins once the old primary is demoted.
    ReplicaPromotionJoin,
    /// One `redis-server` fleets: a replica process of the server attaches
    /// (the primary's first: its replication id changes), stays for a few
    /// renewals, then is killed, and the primary frees its backlog
    /// `repl-backlog-ttl` (set to 1 s) later (a new replication id again).
    /// The same data throughout: the leader keeps leading.
    ReplicaAttachDetach,
    /// Redis Cluster fleets only: the hash slot of the group moved to
    /// another master under the running fleet, as `redis-cli --cluster
    /// reshard` moves a slot of a few keys (`SETSLOT IMPORTING` /
    /// `MIGRATING`, one `MIGRATE` of every key, `SETSLOT NODE` on every
    /// master).
    SlotMigration,
}

impl Fault {
    /// The faults a fleet on a Sentinel deployment takes (no proxies, and
    /// a killed master would be failed over, not restarted).
    pub const SENTINEL: [Fault; 7] = [
        Fault::Kill9Leader,
        Fault::SigtermLeader,
        Fault::SigstopLeader,
        Fault::DelLease,
        Fault::DelLeaseJoin,
        Fault::ReplicaPromotion,
        Fault::ReplicaPromotionJoin,
    ];

    /// Whether a fleet on one `redis-server` (`false`) or on a Sentinel
    /// deployment (`true`) takes this fault.
    pub fn applies(self, sentinel: bool) -> bool {
        if sentinel {
            Fault::SENTINEL.contains(&self)
        } else {
            !matches!(
                self,
                Fault::ReplicaPromotion | Fault::ReplicaPromotionJoin | Fault::SlotMigration
            )
        }
    }

    /// Whether the fault needs a fleet on a Redis Cluster (which takes no
    /// other fault yet).
    pub fn needs_cluster(self) -> bool {
        self == Fault::SlotMigration
    }

    pub const ALL: [Fault; 24] = [
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
        Fault::DelLease,
        Fault::DelLeaseJoin,
        Fault::EvictVolatileTtl,
        Fault::EvictVolatileTtlJoin,
        Fault::EvictVolatileLru,
        Fault::EvictVolatileLruJoin,
        Fault::RdbRestore,
        Fault::RdbRestoreJoin,
        Fault::AofRestore,
        Fault::AofRestoreJoin,
        Fault::ReplicaPromotion,
        Fault::ReplicaPromotionJoin,
        Fault::ReplicaAttachDetach,
        Fault::SlotMigration,
    ];

    /// Whether the fault deletes the leader's lease key behind its back
    /// (the key, not the token record, is lost).
    pub fn loses_lease_key(self) -> bool {
        matches!(
            self,
            Fault::DelLease
                | Fault::DelLeaseJoin
                | Fault::EvictVolatileTtl
                | Fault::EvictVolatileTtlJoin
                | Fault::EvictVolatileLru
                | Fault::EvictVolatileLruJoin
                | Fault::RdbRestore
                | Fault::RdbRestoreJoin
                | Fault::AofRestore
                | Fault::AofRestoreJoin
                | Fault::ReplicaPromotion
                | Fault::ReplicaPromotionJoin
        )
    }

    /// Whether a new instance joins right after the fault (a rolling
    /// deploy: one follower is stopped just before it, and a new process
    /// starts in its slot right after).
    pub fn joins(self) -> bool {
        matches!(
            self,
            Fault::DelLeaseJoin
                | Fault::EvictVolatileTtlJoin
                | Fault::EvictVolatileLruJoin
                | Fault::RdbRestoreJoin
                | Fault::AofRestoreJoin
                | Fault::ReplicaPromotionJoin
        )
    }

    /// The promised bound on the time until the group leads again, from
    /// the fault (crash-like faults, a lost lease key) or from the repair
    /// (Redis back, key fixed); for the slow network, on the longest
    /// leaderless gap; `None` where the leader must simply keep leading.
    ///
    /// A lost lease key (`DEL`, eviction) is like a crash of the leader:
    /// the token record still says until when the last holder may lead
    /// (at most one ttl after the loss), and the next leader starts then.
    /// A restore from disk is like a restart: the record is not vouched
    /// for by the new server process, so the first acquisition after it
    /// (within `retry_interval` of Redis answering) waits one full ttl.
    /// So is a promoted replica, from when Sentinel demotes the old primary
    /// and disconnects its clients (until then they keep using it).
    pub fn bound(self, fleet: &Fleet) -> Option<Duration> {
        let (ttl, renew) = (fleet.cfg.ttl, fleet.cfg.renew);
        match self {
            Fault::Kill9Leader
            | Fault::SigstopLeader
            | Fault::BlackholeLeader
            | Fault::DelLease
            | Fault::DelLeaseJoin
            | Fault::EvictVolatileTtl
            | Fault::EvictVolatileTtlJoin
            | Fault::EvictVolatileLru
            | Fault::EvictVolatileLruJoin => Some(ttl + Duration::from_millis(250)),
            Fault::RdbRestore
            | Fault::RdbRestoreJoin
            | Fault::AofRestore
            | Fault::AofRestoreJoin
            | Fault::ReplicaPromotion
            | Fault::ReplicaPromotionJoin => Some(ttl + renew),
            // The bound for a resharding: the new master's safe
            // start (one ttl from its first script after the move) plus a
            // loaded cluster's redirections and scheduling.
            Fault::SlotMigration => Some(ttl + Duration::from_secs(1)),
            Fault::SigtermLeader => Some(Duration::from_millis(100)),
            Fault::RedisRestart
            | Fault::RedisDown
            | Fault::ForeignValue
            | Fault::WrongType
            | Fault::SlowNetwork => Some(ttl + renew),
            Fault::BlackholeFollower | Fault::ReplicaAttachDetach => None,
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

/// Timeout of one command on a raw connection of the test's own.
const CMD_TIMEOUT: Duration = Duration::from_secs(5);

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
    // A rolling deploy: stop one follower now, start a new process in its
    // slot right after the fault.
    let joiner = if fault.joins() {
        let slot = followers[(pick as usize) % followers.len()];
        fleet.terminate(slot).await;
        Some(slot)
    } else {
        None
    };
    macro_rules! join {
        () => {
            if let Some(slot) = joiner {
                fleet.spawn(slot);
            }
        };
    }
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
            if cfg.balanced {
                hands_back(fleet, leader, resumed).await?;
            } else {
                keeps_leading(fleet, new, resumed, 2).await?;
                if elected_since(fleet, leader, resumed) {
                    return Err("the resumed leader was elected again while another led".into());
                }
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
            // Read before the proxy passes: it delivers what it buffered at
            // once, on other threads, and what follows (the leader's
            // membership refresh, a hand-over) may be logged before a clock
            // read after `pass` (a preempted harness thread) — as if it had
            // happened during the partition.
            let healed = monotonic_now_ns();
            fleet.proxies[leader].pass();
            if cfg.balanced {
                hands_back(fleet, leader, healed).await?;
            } else {
                keeps_leading(fleet, new, healed, 2).await?;
                if elected_since(fleet, leader, t) {
                    return Err("the partitioned leader was elected again".into());
                }
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
        Fault::ReplicaAttachDetach => {
            let t = monotonic_now_ns();
            detail = attach_and_detach_a_replica(fleet, leader).await?;
            // No change of leadership at all: the leader renewed across
            // both changes (checked on the way), still does, never lost its
            // lease, and nobody else was elected.
            keeps_leading(fleet, leader, monotonic_now_ns(), 2).await?;
            lost_since(fleet, leader, t)?;
            if let Some(f) = followers.iter().find(|f| elected_since(fleet, **f, t)) {
                return Err(format!(
                    "{} was elected while a replica came and went ({detail})",
                    fleet.member(*f).name
                ));
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
            fleet.redis_mut().restart().await.map_err(err)?;
            let back = monotonic_now_ns();
            recovered_after!(back, "Redis restarted empty");
        }
        Fault::RedisDown => {
            let t = monotonic_now_ns();
            fleet.redis_mut().stop().await.map_err(err)?;
            sleep_until_ns(after(t, 2 * ttl)).await;
            fleet.redis_mut().start_again().await.map_err(err)?;
            let back = monotonic_now_ns();
            recovered_after!(back, "Redis came back empty");
        }
        Fault::ForeignValue => {
            let key = fleet.lease_key();
            let t = monotonic_now_ns();
            fleet
                .redis()
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
            fleet.redis().cmd(&["DEL", key]).await.map_err(err)?;
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
                .redis()
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
            fleet.redis().cmd(&["DEL", key]).await.map_err(err)?;
            if let Some(w) = fleet.history().first_window_after(t) {
                if w.start < fixed {
                    return Err(format!("elected while the key was a hash: {w:?}"));
                }
            }
            recovered_after!(fixed, "the hash was deleted");
        }
        Fault::DelLease | Fault::DelLeaseJoin => {
            let t = monotonic_now_ns();
            let deleted = fleet
                .redis()
                .cmd(&["DEL", fleet.lease_key()])
                .await
                .map_err(err)?;
            if deleted != 1 {
                return Err(format!("DEL of the held lease key replied {deleted}"));
            }
            join!();
            recovered_after!(t, "DEL of the lease key");
        }
        Fault::EvictVolatileTtl
        | Fault::EvictVolatileTtlJoin
        | Fault::EvictVolatileLru
        | Fault::EvictVolatileLruJoin => {
            let policy = match fault {
                Fault::EvictVolatileTtl | Fault::EvictVolatileTtlJoin => "volatile-ttl",
                _ => "volatile-lru",
            };
            let eviction = evict_lease_key(fleet, policy).await?;
            detail = eviction.detail;
            join!();
            recovered_after!(eviction.at, format!("eviction ({detail})"));
        }
        Fault::RdbRestore | Fault::RdbRestoreJoin => {
            let t = monotonic_now_ns();
            fleet
                .redis()
                .cmd(&["SAVE"])
                .await
                .map_err(err)?
                .ok()
                .map_err(err)?;
            let saved_run = fleet
                .redis()
                .info_field("server", "run_id")
                .await
                .map_err(err)?;
            // Renewals go on; the snapshot's lease expires meanwhile.
            sleep_until_ns(after(t, ttl * 3 / 2)).await;
            let log_from = fleet.redis().log().len();
            fleet
                .redis_mut()
                .restart_from(Persisted::Rdb)
                .await
                .map_err(err)?;
            let back = monotonic_now_ns();
            join!();
            detail = restored(fleet, log_from, "DB loaded from disk", saved_run).await?;
            recovered_after!(
                back,
                format!("Redis restarted from the snapshot ({detail})")
            );
        }
        Fault::AofRestore | Fault::AofRestoreJoin => {
            aof_on(fleet).await?;
            // At least one renewal in the file before the part that is cut.
            let member = fleet.member(leader);
            let from = member.lines().len();
            member
                .wait_line(
                    from,
                    |l| matches!(l, Line::Renewed { token, .. } if *token == leader_token),
                    ttl + PATIENCE,
                )
                .await
                .map_err(|e| format!("no renewal with the AOF on: {e}"))?;
            let incr = fleet.redis().aof_incr_file().map_err(err)?;
            let t = monotonic_now_ns();
            let kept = std::fs::metadata(&incr).map_err(err)?.len();
            let run = fleet
                .redis()
                .info_field("server", "run_id")
                .await
                .map_err(err)?;
            sleep_until_ns(after(t, ttl * 3 / 2)).await;
            let log_from = fleet.redis().log().len();
            fleet.redis_mut().kill().await.map_err(err)?;
            // Still the file Redis appended to (no rewrite in between).
            if fleet.redis().aof_incr_file().map_err(err)? != incr {
                return Err(format!(
                    "the AOF was rewritten; {} is not current",
                    incr.display()
                ));
            }
            let written = std::fs::metadata(&incr).map_err(err)?.len();
            if written <= kept {
                return Err(format!(
                    "nothing was appended to the AOF in {:?}",
                    ttl * 3 / 2
                ));
            }
            std::fs::OpenOptions::new()
                .write(true)
                .open(&incr)
                .and_then(|f| f.set_len(kept))
                .map_err(err)?;
            fleet
                .redis_mut()
                .start_again_from(Persisted::Aof)
                .await
                .map_err(err)?;
            let back = monotonic_now_ns();
            join!();
            detail = format!(
                "{} of {written} AOF bytes lost, {}",
                written - kept,
                restored(fleet, log_from, "DB loaded from append only file", run).await?
            );
            recovered_after!(back, format!("Redis restarted from the AOF ({detail})"));
        }
        Fault::SlotMigration => {
            let moved = move_group_slot(fleet).await?;
            detail = moved.detail;
            recovered_after!(moved.at, format!("the group's slot moved ({detail})"));
        }
        Fault::ReplicaPromotion | Fault::ReplicaPromotionJoin => {
            let promotion = promote_lagging_replica(fleet).await?;
            detail = promotion.detail;
            join!();
            recovered_after!(
                promotion.promoted_at,
                format!("the lagging replica was promoted ({detail})")
            );
            // The old leader's view must have outlived the promotion: else
            // a new leader could start at once and still not overlap, and
            // the lagging record would be tested for nothing.
            let (why, view_end) = fleet
                .history()
                .windows_of(&leader_name)
                .find(|w| w.token == leader_token)
                .map(|w| {
                    w.lost
                        .clone()
                        .unwrap_or_else(|| ("no `lost` line".to_owned(), w.end))
                })
                .ok_or("no window of the old leader")?;
            if view_end <= promotion.promoted_at {
                return Err(format!(
                    "the old leader's view ended {:.0} ms before the promotion: nothing to overlap ({detail})",
                    ns_to_ms(promotion.promoted_at - view_end)
                ));
            }
            detail = format!(
                "{detail}; the old leader's view ended {:.0} ms after the promotion ({why})",
                ns_to_ms(view_end - promotion.promoted_at)
            );
            restore_replica(fleet, promotion.killed).await?;
        }
    }
    if let Some(slot) = joiner {
        fleet.wait_ready(slot).await;
    }
    // A moved slot: the target vouches for no moved record, so the old
    // leader's renewal there fails.
    if fault.loses_lease_key() || fault == Fault::SlotMigration {
        // The old leader's lease is gone: it must find out (and its view
        // end) by itself; wait for that so the checker sees whole windows.
        fleet
            .member(leader)
            .wait_line(
                0,
                |l| matches!(l, Line::Lost { token, .. } if *token == leader_token),
                ttl + PATIENCE,
            )
            .await
            .map_err(|e| format!("the old leader {leader_name} never lost its lease: {e}"))?;
    }
    Ok(Outcome {
        fault,
        recovery,
        detail,
    })
}

/// When [`move_group_slot`] finished the move.
struct Moved {
    /// After the last `SETSLOT NODE`.
    at: u64,
    detail: String,
}

/// On a cluster fleet: move the group's hash slot from its master to the
/// next node, as `redis-cli --cluster reshard` moves a slot of at most
/// `--cluster-pipeline` keys (the steps of
/// `leader-runtime/tests/redis_cluster_migrate.rs`): `SETSLOT IMPORTING`
/// on the target, `MIGRATING` on the source, one `MIGRATE` of every key in
/// the slot (which must include the lease key: the leader's lease moves),
/// `SETSLOT NODE` on every master, the target first. Checks that the slot
/// is the target's afterwards and notes it as the fleet's master.
async fn move_group_slot(fleet: &mut Fleet) -> Result<Moved, String> {
    let err = |e: std::io::Error| e.to_string();
    let lease_key = fleet.lease_key();
    let (cluster, from) = fleet.cluster().ok_or("needs a cluster fleet")?;
    let n = cluster.nodes().len();
    let to = (from + 1) % n;
    let node = |i: usize| cluster.node(i);
    let cmd = |i: usize, args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match node(i).cmd(&args).await.map_err(err)? {
            Reply::Error(e) => Err(format!("node {i}: {}: {e}", args.join(" "))),
            reply => Ok(reply),
        }
    };
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let slot = cmd(from, strings(&["CLUSTER", "KEYSLOT", lease_key]))
        .await?
        .as_int()
        .ok_or("CLUSTER KEYSLOT: not an integer")?
        .to_string();
    let id = |i: usize| async move {
        cmd(i, strings(&["CLUSTER", "MYID"]))
            .await?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("node {i}: CLUSTER MYID: not a string"))
    };
    let (from_id, to_id) = (id(from).await?, id(to).await?);
    let started = monotonic_now_ns();
    cmd(
        to,
        strings(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
    )
    .await?;
    cmd(
        from,
        strings(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
    )
    .await?;
    let keys: Vec<String> =
        match cmd(from, strings(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])).await? {
            Reply::Array(keys) => keys
                .iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            other => return Err(format!("GETKEYSINSLOT: {other:?}")),
        };
    if !keys.iter().any(|k| k == lease_key) {
        return Err(format!(
            "the lease key is not among the slot's keys {keys:?}"
        ));
    }
    let port = node(to).port().to_string();
    let mut migrate = strings(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"]);
    migrate.extend(keys.iter().cloned());
    cmd(from, migrate).await?;
    let mut order: Vec<usize> = vec![to, from];
    order.extend((0..n).filter(|i| *i != to && *i != from));
    for i in order {
        cmd(i, strings(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])).await?;
    }
    let at = monotonic_now_ns();
    let owner = cluster.master_of(lease_key).await.map_err(err)?;
    if owner != to {
        return Err(format!(
            "slot {slot} is node {owner}'s after the move, not {to}'s"
        ));
    }
    fleet.set_master(to);
    Ok(Moved {
        at,
        detail: format!(
            "slot {slot}, {} keys ({}), node {from} to node {to} in {:.1} ms",
            keys.len(),
            keys.join(" "),
            ns_to_ms(at - started)
        ),
    })
}

/// The primary's replication id (`master_replid`).
async fn replid(fleet: &Fleet) -> Result<String, String> {
    fleet
        .redis()
        .info_field("replication", "master_replid")
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "no master_replid in INFO".to_owned())
}

/// Waits until the primary's replication id is no longer `from` (Redis
/// sends no notice for it: polled, bounded); returns the new one and when
/// it was seen.
async fn replid_changes(fleet: &Fleet, from: &str, what: &str) -> Result<(String, u64), String> {
    let deadline = monotonic_now_ns() + PATIENCE.as_nanos() as u64;
    loop {
        let now = replid(fleet).await?;
        if now != from {
            return Ok((now, monotonic_now_ns()));
        }
        if monotonic_now_ns() > deadline {
            return Err(format!(
                "the replication id did not change within {PATIENCE:?} after {what}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`Fault::ReplicaAttachDetach`]: start a replica process of the fleet's
/// server, wait until the primary's replication id changed (its first
/// replica: a new backlog, a new id), let the leader in `leader` renew
/// three times across it, set `repl-backlog-ttl` to 1 s, kill the replica,
/// wait until the primary freed its backlog (a new id again), and let the
/// leader renew three times across that. Any loss of the leader's lease on
/// the way is an error. `repl-backlog-ttl` is put back afterwards.
async fn attach_and_detach_a_replica(fleet: &Fleet, leader: usize) -> Result<String, String> {
    let err = |e: std::io::Error| e.to_string();
    let started = monotonic_now_ns();
    let before = replid(fleet).await?;
    let port = fleet.redis().port().to_string();
    let mut replica = leader_testkit::RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", &port])
        .start()
        .await
        .map_err(|e| format!("the replica does not start: {e}"))?;
    let (attached, attached_at) = replid_changes(fleet, &before, "the replica attached").await?;
    let second = fleet
        .redis()
        .info_field("replication", "master_replid2")
        .await
        .map_err(err)?;
    keeps_leading(fleet, leader, attached_at, 3)
        .await
        .map_err(|e| format!("after the replica attached: {e}"))?;
    let backlog_ttl = match fleet
        .redis()
        .cmd(&["CONFIG", "GET", "repl-backlog-ttl"])
        .await
        .map_err(err)?
    {
        Reply::Array(v) if v.len() == 2 => v[1].as_str().unwrap_or("3600").to_owned(),
        other => return Err(format!("CONFIG GET repl-backlog-ttl: {other:?}")),
    };
    let set_ttl = |v: String| async move {
        fleet
            .redis()
            .cmd(&["CONFIG", "SET", "repl-backlog-ttl", &v])
            .await
            .map_err(err)?
            .ok()
            .map_err(err)
            .map(drop)
    };
    set_ttl("1".to_owned()).await?;
    let killed_at = monotonic_now_ns();
    replica.kill().await.map_err(err)?;
    drop(replica);
    let freed = replid_changes(fleet, &attached, "the replica was killed").await;
    set_ttl(backlog_ttl).await?;
    let (_, freed_at) = freed?;
    keeps_leading(fleet, leader, freed_at, 3)
        .await
        .map_err(|e| format!("after the backlog was freed: {e}"))?;
    Ok(format!(
        "replication id changed {:.0} ms after the replica started (master_replid2 {second:?}), \
         again {:.0} ms after it was killed; {:.0} ms in all",
        ns_to_ms(attached_at - started),
        ns_to_ms(freed_at - killed_at),
        ns_to_ms(monotonic_now_ns() - started)
    ))
}

/// What [`promote_lagging_replica`] did.
struct Promotion {
    /// When the first sentinel announced the new master (`+switch-master`):
    /// from then on instances that resolve the master find the replica.
    promoted_at: u64,
    /// The node killed (the old primary).
    killed: usize,
    detail: String,
}

/// On a Sentinel fleet: wait until the replica is in sync, cut its
/// replication link for 2 × ttl, check that it lacks what the primary got
/// meanwhile (the lease key expired there, the record's `until` at least
/// one ttl behind), kill -9 the primary, force a failover to the replica
/// (`SENTINEL FAILOVER`) and note when the first sentinel switches.
///
/// The cut is `REPLICAOF` a port nobody listens on, sent to the replica (to
/// it, a network cut: link down, reconnects refused; its data stays). The
/// harness's proxied link ([`RedisSentinel::cut_replication`]) is bypassed
/// once Sentinel repoints the replica at the primary itself, seconds after
/// the start. Sentinel repoints this one too, but only `failover-timeout`
/// after it noticed (the fleet sets it above 2 × ttl).
///
/// The primary is killed, not demoted: after a forced failover with the
/// old primary alive, Sentinel demotes it only some seconds later, and an
/// instance connected to it keeps renewing there meanwhile: two primaries,
/// which no lease on Redis can prevent. Killed, the old leader's view runs
/// on for up to a ttl from its last renew, so the promotion falls within
/// it (checked by the caller): a new leader on the lagging record must
/// wait, or two lead.
async fn promote_lagging_replica(fleet: &mut Fleet) -> Result<Promotion, String> {
    let err = |e: std::io::Error| e.to_string();
    let ttl = fleet.cfg.ttl;
    let lease_key = fleet.lease_key();
    let (deployment, master) = fleet.sentinel().ok_or("needs a Sentinel fleet")?;
    let replica = 1 - master;
    deployment
        .wait_in_sync(master, replica, PATIENCE)
        .await
        .map_err(err)?;
    // Every sentinel's announcements of a new master, from now on.
    let (switched_tx, mut switched_rx) = tokio::sync::mpsc::channel(8);
    let mut listeners = tokio::task::JoinSet::new();
    for sentinel in deployment.sentinels() {
        let mut conn = sentinel.connect().await.map_err(err)?;
        tokio::time::timeout(CMD_TIMEOUT, conn.cmd(&["SUBSCRIBE", "+switch-master"]))
            .await
            .map_err(|_| "SUBSCRIBE +switch-master: no reply".to_owned())?
            .map_err(err)?;
        let tx = switched_tx.clone();
        listeners.spawn(async move {
            while let Ok(reply) = conn.read_reply().await {
                if let Reply::Array(m) = reply {
                    if m.len() == 3 && m[0] == "message" {
                        let what = m[2].as_str().unwrap_or_default().to_owned();
                        let _ = tx.send((monotonic_now_ns(), what)).await;
                    }
                }
            }
        });
    }
    let nowhere = leader_testkit::free_port().map_err(err)?.to_string();
    let cut = monotonic_now_ns();
    deployment
        .node(replica)
        .cmd(&["REPLICAOF", "127.0.0.1", &nowhere])
        .await
        .map_err(err)?
        .ok()
        .map_err(err)?;
    // The fault's duration, not a synchronisation.
    sleep_until_ns(after(cut, 2 * ttl)).await;
    // The replica lacks the renewals of the cut: its lease key expired
    // (a replica answers an expired key as missing), the primary's lives,
    // and its record's `until` is behind the primary's by at least a ttl.
    let until = |node: usize| async move {
        let reply = deployment
            .node(node)
            .cmd(&["HGET", RECORD_KEY, "until"])
            .await
            .map_err(err)?;
        reply
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("node {node}: no `until` in {RECORD_KEY}: {reply:?}"))
    };
    let pttl = |node: usize| async move {
        let reply = deployment
            .node(node)
            .cmd(&["PTTL", lease_key])
            .await
            .map_err(err)?;
        match reply {
            Reply::Integer(n) => Ok(n),
            other => Err(format!("node {node}: PTTL {lease_key}: {other:?}")),
        }
    };
    let link = deployment
        .node(replica)
        .info_field("replication", "master_link_status")
        .await
        .map_err(err)?;
    let (on_primary, on_replica) = (until(master).await?, until(replica).await?);
    let (pttl_primary, pttl_replica) = (pttl(master).await?, pttl(replica).await?);
    let lag = on_primary.saturating_sub(on_replica);
    if link.as_deref() != Some("down")
        || lag < ttl.as_millis() as u64
        || pttl_primary <= 0
        || pttl_replica != -2
    {
        return Err(format!(
            "the replica does not lag after a cut of {:?}: link {link:?}, `until` {lag} ms \
             behind, PTTL of the lease {pttl_primary} on the primary, {pttl_replica} on the replica",
            2 * ttl
        ));
    }
    let killed_at = monotonic_now_ns();
    fleet.redis_mut().kill().await.map_err(err)?;
    let (deployment, _) = fleet.sentinel().ok_or("needs a Sentinel fleet")?;
    let promoted = deployment.failover().await.map_err(err)?;
    if promoted != replica {
        return Err(format!(
            "the sentinels promoted node {promoted}, not {replica}"
        ));
    }
    let new_port = format!(" {}", deployment.node(replica).port());
    let switched = tokio::time::timeout(PATIENCE, async {
        while let Some((at, what)) = switched_rx.recv().await {
            if what.ends_with(&new_port) {
                return Some(at);
            }
        }
        None
    })
    .await;
    listeners.abort_all();
    let promoted_at = switched
        .ok()
        .flatten()
        .ok_or("no sentinel announced +switch-master to the replica")?;
    fleet.set_master(promoted);
    Ok(Promotion {
        promoted_at,
        killed: master,
        detail: format!(
            "the replica's `until` {lag} ms behind, its lease key gone (the primary's: {pttl_primary} ms left); \
             primary killed {:.0} ms after the cut, replica promoted {:.0} ms after the kill",
            ns_to_ms(killed_at - cut),
            ns_to_ms(promoted_at.saturating_sub(killed_at))
        ),
    })
}

/// Starts the node a [`promote_lagging_replica`] killed again, as a replica
/// of the new master (it starts empty; the sentinels name the new master
/// throughout, so no instance reaches it before its `REPLICAOF`), and
/// waits until it is in sync, ready for the next fault.
pub async fn restore_replica(fleet: &mut Fleet, killed: usize) -> Result<(), String> {
    let err = |e: std::io::Error| e.to_string();
    let Some((_, master)) = fleet.sentinel() else {
        return Ok(());
    };
    let node = fleet.sentinel_node_mut(killed);
    if node.pid().is_none() {
        node.start_again().await.map_err(err)?;
    }
    let (deployment, _) = fleet.sentinel().ok_or("needs a Sentinel fleet")?;
    let port = deployment.node(master).port().to_string();
    deployment
        .node(killed)
        .cmd(&["REPLICAOF", "127.0.0.1", &port])
        .await
        .map_err(err)?
        .ok()
        .map_err(err)?;
    deployment
        .wait_in_sync(master, killed, PATIENCE)
        .await
        .map_err(err)
}

/// The token record of the fleet's group (v2: a hash).
const RECORD_KEY: &str = "leader:{chaos}:token";

/// When and how the lease key was evicted.
struct Eviction {
    /// When the eviction notice arrived (just after the eviction).
    at: u64,
    detail: String,
}

/// Fill Redis (db 1, keys with a 10-minute expiry) under a `maxmemory`
/// just above its use and `maxmemory-policy policy` until eviction deletes
/// the lease key, seen on `__keyevent@0__:evicted`; then lift the limit,
/// delete the filler's keys and restore the settings. Bounded in writes and
/// time.
async fn evict_lease_key(fleet: &Fleet, policy: &str) -> Result<Eviction, String> {
    const VALUE_BYTES: usize = 16 * 1024;
    const HEADROOM: u64 = 256 * 1024;
    const MAX_WRITES: usize = 20_000;
    let err = |e: std::io::Error| e.to_string();
    let redis = &fleet.redis();
    let lease_key = fleet.lease_key().to_owned();
    let config_get = |name: &'static str| async move {
        match redis.cmd(&["CONFIG", "GET", name]).await {
            Ok(Reply::Array(v)) if v.len() == 2 => Ok(v[1].as_str().unwrap_or_default().to_owned()),
            other => Err(format!("CONFIG GET {name}: {other:?}")),
        }
    };
    let notify = config_get("notify-keyspace-events").await?;
    let old_policy = config_get("maxmemory-policy").await?;
    let set = |name: &'static str, value: String| async move {
        redis
            .cmd(&["CONFIG", "SET", name, &value])
            .await
            .map_err(err)?
            .ok()
            .map_err(err)
            .map(drop)
    };
    // Notices of evictions only (E: keyevent channels, e: evicted).
    set("notify-keyspace-events", "Ee".to_owned()).await?;
    let mut sub = redis.connect().await.map_err(err)?;
    tokio::time::timeout(
        CMD_TIMEOUT,
        sub.cmd(&["SUBSCRIBE", "__keyevent@0__:evicted"]),
    )
    .await
    .map_err(|_| "SUBSCRIBE: no reply".to_owned())?
    .map_err(err)?;
    let (evicted_tx, mut evicted_rx) = tokio::sync::oneshot::channel();
    let listener = tokio::spawn(async move {
        loop {
            match sub.read_reply().await {
                Ok(Reply::Array(m)) if m.len() == 3 && m[2] == lease_key.as_str() => {
                    let _ = evicted_tx.send(monotonic_now_ns());
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let evicted_before = evicted_keys(fleet).await?;
    let mut filler = redis.connect().await.map_err(err)?;
    filler
        .cmd(&["SELECT", "1"])
        .await
        .map_err(err)?
        .ok()
        .map_err(err)?;
    set("maxmemory-policy", policy.to_owned()).await?;
    let used: u64 = redis
        .info_field("memory", "used_memory")
        .await
        .map_err(err)?
        .and_then(|v| v.parse().ok())
        .ok_or("no used_memory in INFO")?;
    set("maxmemory", (used + HEADROOM).to_string()).await?;
    let value = "x".repeat(VALUE_BYTES);
    let deadline = monotonic_now_ns() + PATIENCE.as_nanos() as u64;
    let mut writes = 0;
    let mut oom = 0;
    let evicted_at = loop {
        if let Ok(at) = evicted_rx.try_recv() {
            break Ok(at);
        }
        if writes >= MAX_WRITES || monotonic_now_ns() > deadline {
            break Err(format!(
                "{policy}: the lease key was not evicted after {writes} writes of {VALUE_BYTES} bytes"
            ));
        }
        let key = format!("filler:{writes}");
        let args = ["SET", &key, &value, "PX", "600000"];
        match tokio::time::timeout(CMD_TIMEOUT, filler.cmd(&args))
            .await
            .map_err(|_| format!("filler SET: no reply within {CMD_TIMEOUT:?}"))?
            .map_err(err)?
        {
            Reply::Error(e) if e.starts_with("OOM") => oom += 1,
            Reply::Error(e) => break Err(format!("filler SET: {e}")),
            _ => {}
        }
        writes += 1;
        // Let the notice arrive before the next write.
        tokio::task::yield_now().await;
    };
    // Heal: no limit, no filler, the settings as they were.
    let healed = async {
        set("maxmemory", "0".to_owned()).await?;
        filler
            .cmd(&["FLUSHDB"])
            .await
            .map_err(err)?
            .ok()
            .map_err(err)?;
        set("maxmemory-policy", old_policy).await?;
        set("notify-keyspace-events", notify).await
    }
    .await;
    listener.abort();
    let at = evicted_at?;
    healed?;
    let evicted = evicted_keys(fleet).await? - evicted_before;
    Ok(Eviction {
        at,
        detail: format!(
            "{policy}: lease key evicted after {writes} filler writes ({} KiB), {evicted} keys evicted, {oom} OOM replies",
            writes * VALUE_BYTES / 1024
        ),
    })
}

/// Lift any memory limit and delete the filler's keys (db 1): the repair
/// after an eviction fault that failed half-way.
pub async fn heal_memory(fleet: &Fleet) -> std::io::Result<()> {
    fleet
        .redis()
        .cmd(&["CONFIG", "SET", "maxmemory", "0"])
        .await?
        .ok()?;
    let flush = async {
        let mut conn = fleet.redis().connect().await?;
        conn.cmd(&["SELECT", "1"]).await?.ok()?;
        conn.cmd(&["FLUSHDB"]).await?.ok().map(drop)
    };
    tokio::time::timeout(CMD_TIMEOUT, flush)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

async fn evicted_keys(fleet: &Fleet) -> Result<u64, String> {
    fleet
        .redis()
        .info_field("stats", "evicted_keys")
        .await
        .map_err(|e| e.to_string())?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "no evicted_keys in INFO".to_owned())
}

/// Turn the AOF on (`appendfsync everysec`) unless it is, and wait until
/// its base file is written. Automatic rewrites are off, so the file the
/// fault cuts stays the one Redis appends to (in a long mix, eviction
/// faults append megabytes of filler to it).
async fn aof_on(fleet: &Fleet) -> Result<(), String> {
    let err = |e: std::io::Error| e.to_string();
    let redis = &fleet.redis();
    let on = redis
        .info_field("persistence", "aof_enabled")
        .await
        .map_err(err)?
        == Some("1".into());
    let mut settings = vec![
        ("appendfsync", "everysec"),
        ("auto-aof-rewrite-percentage", "0"),
    ];
    if !on {
        settings.push(("appendonly", "yes"));
    }
    for (name, value) in settings {
        redis
            .cmd(&["CONFIG", "SET", name, value])
            .await
            .map_err(err)?
            .ok()
            .map_err(err)?;
    }
    let deadline = monotonic_now_ns() + PATIENCE.as_nanos() as u64;
    loop {
        let field = |f: &'static str| redis.info_field("persistence", f);
        let (rewriting, scheduled, enabled) = (
            field("aof_rewrite_in_progress").await.map_err(err)?,
            field("aof_rewrite_scheduled").await.map_err(err)?,
            field("aof_enabled").await.map_err(err)?,
        );
        if rewriting.as_deref() == Some("0")
            && scheduled.as_deref() == Some("0")
            && enabled.as_deref() == Some("1")
            && redis.aof_incr_file().is_ok()
        {
            return Ok(());
        }
        if monotonic_now_ns() > deadline {
            return Err(format!("the AOF base was not written within {PATIENCE:?}"));
        }
        // No notice for the end of a rewrite: poll, bounded.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Check that the server that came back loaded its data from disk (its
/// log since `log_from` says `loaded`) and is a new process (a new
/// `run_id`); describe what it loaded.
async fn restored(
    fleet: &Fleet,
    log_from: usize,
    loaded: &str,
    old_run: Option<String>,
) -> Result<String, String> {
    let log = fleet.redis().log();
    let new = log.get(log_from..).unwrap_or_default();
    if !new.contains(loaded) {
        return Err(format!(
            "Redis did not log {loaded:?} on its restart:\n{new}"
        ));
    }
    let run = fleet
        .redis()
        .info_field("server", "run_id")
        .await
        .map_err(|e| e.to_string())?;
    if run == old_run {
        return Err(format!("the restored server kept its run_id {run:?}"));
    }
    // e.g. "Done loading RDB, keys loaded: 1, keys expired: 1."
    Ok(new
        .lines()
        .filter_map(|l| {
            l.find("keys loaded")
                .map(|i| l[i..].trim_end_matches('.').to_owned())
        })
        .next_back()
        .unwrap_or_else(|| loaded.to_owned()))
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

/// Balanced: the leader in `slot`, back from a fault at `since`, is first
/// by id again, so its group comes back to it — by hand-overs only: every
/// leadership of the others that ends after `since` ends `stepped_down`,
/// the last one within the SIGTERM bound before `slot` is elected, and
/// `slot` then keeps leading. (The checker sees to it that no two overlap.)
async fn hands_back(fleet: &Fleet, slot: usize, since: u64) -> Result<(), String> {
    let member = fleet.member(slot);
    let from = super::fleet::index_after(&member.lines(), since);
    let (_, elected) = member
        .wait_line(
            from,
            // Lines read late may still be older than `since`.
            |l| matches!(l, Line::Elected { at, .. } if *at >= since),
            PATIENCE,
        )
        .await
        .map_err(|e| format!("{} did not lead again: {e}", member.name))?;
    let Line::Elected { at: elected_at, .. } = elected else {
        unreachable!()
    };
    // The others' output is read by tasks of this process, which may lag
    // behind (seen under CPU hogs: the hand-over's `lost` line, printed
    // before its release and so before the returning leader's election,
    // not read yet). Each pipe keeps its order: once a line an instance
    // printed at or after the election is read, all it printed before is
    // too. So wait for one from every other live instance (balanced, each
    // prints `stats` every renew interval), at most one ttl in all, then
    // judge once: a verdict read early passes on a loss not read yet (one
    // that is not a hand-over), and one that fails waits for nothing.
    let deadline = tokio::time::Instant::now() + fleet.cfg.ttl;
    for other in fleet.live_slots().into_iter().filter(|s| *s != slot) {
        let other = fleet.member(other);
        let from = super::fleet::index_after(&other.lines(), elected_at);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Nothing read in time (a stalled pipe): judge what was read.
        let _ = other
            .wait_line(from, |l| l.time() >= elected_at, left)
            .await;
    }
    handed_back(fleet, slot, since, elected_at)?;
    keeps_leading(fleet, slot, elected_at, 2).await
}

/// [`hands_back`]'s verdict on the others' output as read so far: every
/// leadership of theirs that ended between `since` and `elected_at` ended
/// `stepped_down`, the last within the SIGTERM bound of `elected_at`. No
/// filter by group: the fleet's instances all run the one group `chaos`
/// (`instance_command` removes `GROUP`) and print only its events.
fn handed_back(fleet: &Fleet, slot: usize, since: u64, elected_at: u64) -> Result<(), String> {
    let member = fleet.member(slot);
    let mut last_handover = None;
    for other in fleet.live_slots().into_iter().filter(|s| *s != slot) {
        let lines = fleet.member(other).lines();
        for (i, line) in lines.iter().enumerate() {
            if let Some(Line::Lost { reason, at, .. }) = super::checker::parse_line(line) {
                if at < since || at > elected_at {
                    continue;
                }
                if reason != "stepped_down" {
                    // What it logged before (its renewals, backend errors),
                    // to tell a stall from a protocol fault.
                    let before = lines[i.saturating_sub(30)..=i].join("\n");
                    return Err(format!(
                        "{} lost its lease ({reason}) while handing the group back, {:.1} ms after the fault ended (the returning leader elected {:.1} ms after it); its log up to the loss:\n{before}",
                        fleet.member(other).name,
                        ns_to_ms(at - since),
                        ns_to_ms(elected_at - since),
                    ));
                }
                last_handover = last_handover.max(Some(at));
            }
        }
    }
    let handover = last_handover.ok_or_else(|| {
        // The others' losses around the fault's end, to tell a hand-over
        // logged just before `since` from none.
        let from = since.saturating_sub(2 * fleet.cfg.ttl.as_nanos() as u64);
        let lost: Vec<String> = fleet
            .live_slots()
            .into_iter()
            .filter(|s| *s != slot)
            .flat_map(|other| {
                let name = fleet.member(other).name.clone();
                fleet.member(other).lines().into_iter().filter_map(move |l| {
                    match super::checker::parse_line(&l) {
                        Some(Line::Lost { reason, at, .. }) if at >= from => Some(format!(
                            "{name} lost ({reason}) at {:+.1} ms",
                            (at as f64 - since as f64) / 1e6
                        )),
                        _ => None,
                    }
                })
            })
            .collect();
        format!(
            "no hand-over before the group came back (elected {:.1} ms after the fault ended; the others' losses from 2 ttl before it: {lost:?})",
            ns_to_ms(elected_at - since)
        )
    })?;
    let bound = Fault::SigtermLeader.bound(fleet).expect("a bound");
    if dur(elected_at - handover) > bound {
        return Err(format!(
            "{} led again {:.1} ms after the hand-over, bound {bound:?}",
            member.name,
            ns_to_ms(elected_at - handover)
        ));
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
