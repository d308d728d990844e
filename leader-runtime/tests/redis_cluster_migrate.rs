//! Resharding a real 3-master Redis Cluster under a running fleet: the hash
//! slot of a few groups moves from one master to another exactly as an
//! operator (or `redis-cli --cluster reshard`) moves it — `CLUSTER SETSLOT
//! IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of the
//! slot's keys in a few batches, then `SETSLOT NODE` on every master.
//!
//! Leadership windows are taken from each instance's events, as in
//! `redis_sentinel.rs`: a window begins when `Elected` arrives and ends at
//! the earlier of its `Lost` and the last `valid_until` it reported.
//! Windows of different instances must never overlap, tokens only grow,
//! and every group leads again soon after the move.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader_runtime::{Event, LostReason, Runtime};
use leader_testkit::{RedisCluster, Reply};
use tokio::sync::broadcast;
use tokio::time::Instant;

mod support;
use support::{config, runtime, TTL};

/// The Redis Cluster hash slot of a group's keys (`{prefix}:{group}:…`):
/// CRC16 (XMODEM) of the group name, mod 16384.
fn slot_of(group: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in group.as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `n` group names whose keys share one hash slot.
fn groups_in_one_slot(n: usize) -> (u16, Vec<String>) {
    let mut by_slot: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        let group = format!("g{i}");
        let same = by_slot.entry(slot_of(&group)).or_default();
        same.push(group);
        if same.len() == n {
            let slot = slot_of(&same[0]);
            return (slot, same.clone());
        }
    }
    unreachable!()
}

#[derive(Debug, Clone)]
struct Window {
    instance: String,
    group: String,
    token: u64,
    start: Instant,
    /// Last `valid_until` reported (Elected or Renewed).
    valid_until: Instant,
    lost: Option<(Instant, LostReason)>,
}

impl Window {
    fn end(&self) -> Instant {
        match self.lost {
            Some((at, _)) => at.min(self.valid_until),
            None => self.valid_until,
        }
    }
}

/// Records every instance's leadership windows, per group, and the backend
/// errors it reported.
#[derive(Clone, Default)]
struct Recorder {
    windows: Arc<Mutex<Vec<Window>>>,
    errors: Arc<Mutex<Vec<(Instant, String, String)>>>,
}

impl Recorder {
    fn watch(&self, runtime: &Runtime, id: &str) {
        let mut events = runtime.subscribe();
        let (windows, errors) = (self.windows.clone(), self.errors.clone());
        let id = id.to_owned();
        tokio::spawn(async move {
            loop {
                let e = match events.recv().await {
                    Ok(e) => e,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        panic!("{id}: lost {n} events")
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let now = Instant::now();
                let mut windows = windows.lock().unwrap();
                let group = e.group().to_owned();
                let open = windows
                    .iter_mut()
                    .rev()
                    .find(|w| w.instance == id && w.group == group && w.lost.is_none());
                match (e, open) {
                    (
                        Event::Elected {
                            token, valid_until, ..
                        },
                        _,
                    ) => windows.push(Window {
                        instance: id.clone(),
                        group,
                        token,
                        start: now,
                        valid_until,
                        lost: None,
                    }),
                    (Event::Renewed { valid_until, .. }, Some(w)) => w.valid_until = valid_until,
                    (Event::Lost { reason, .. }, Some(w)) => w.lost = Some((now, reason)),
                    (Event::BackendError { message, .. }, _) => {
                        errors.lock().unwrap().push((now, id.clone(), message));
                    }
                    _ => {}
                }
            }
        });
    }

    fn windows(&self, group: &str) -> Vec<Window> {
        let mut out: Vec<Window> = (self.windows.lock().unwrap().iter())
            .filter(|w| w.group == group)
            .cloned()
            .collect();
        out.sort_by_key(|w| w.start);
        out
    }

    /// Every pair of windows of `group` held by different instances that
    /// overlap.
    fn overlaps(&self, group: &str) -> Vec<(Window, Window)> {
        let windows = self.windows(group);
        let mut out = Vec::new();
        for (i, a) in windows.iter().enumerate() {
            for b in &windows[i + 1..] {
                if a.instance != b.instance && a.start < b.end() && b.start < a.end() {
                    out.push((a.clone(), b.clone()));
                }
            }
        }
        out
    }

    fn describe(&self, group: &str, origin: Instant) -> String {
        let ms = |t: Instant| t.saturating_duration_since(origin).as_millis();
        self.windows(group)
            .iter()
            .map(|w| {
                format!(
                    "  {group} {} token {}: {}..{} ms ({:?})",
                    w.instance,
                    w.token,
                    ms(w.start),
                    ms(w.end()),
                    w.lost.map(|(_, r)| r)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn text(reply: Reply) -> String {
    reply.ok().unwrap().as_str().unwrap().to_owned()
}

fn ok(reply: std::io::Result<Reply>, what: &str) {
    let reply = reply.unwrap();
    assert!(!reply.is_error(), "{what}: {reply:?}");
}

/// Moves a group slot between masters while three instances campaign for
/// its groups (the leader renewing), with the slot's few keys in batches of
/// two and 300 ms between batches: the source keeps the keys it has not
/// migrated yet for a while, as a real resharding of a slot with more keys
/// does, and the slot stays open longer than a ttl, so the leader's view
/// ends during the move.
#[tokio::test]
async fn a_slot_moved_in_batches_under_a_running_fleet_keeps_one_leader_and_returns_soon() {
    move_slot_under_a_fleet(2, Duration::from_millis(300)).await;
}

/// The same with every key in one `MIGRATE`, as `redis-cli --cluster
/// reshard` moves a slot of at most `--cluster-pipeline` (10) keys: the
/// slot is open for a few milliseconds.
#[tokio::test]
async fn a_slot_moved_at_once_under_a_running_fleet_keeps_one_leader_and_returns_soon() {
    move_slot_under_a_fleet(100, Duration::ZERO).await;
}

/// Moves the slot of three groups from its master to the next one, in
/// `MIGRATE`s of `batch` keys with `pause` before each, while instances
/// `a`, `b` and `c` campaign for the groups; checks the windows (see the
/// module docs) and prints what happened.
async fn move_slot_under_a_fleet(batch: usize, pause: Duration) {
    let cluster = RedisCluster::start().await.unwrap();
    let (slot, groups) = groups_in_one_slot(3);
    let from = cluster
        .master_of(&format!("leader:{{{}}}:lease", groups[0]))
        .await
        .unwrap();
    let to = (from + 1) % 3;
    let other = (from + 2) % 3;
    let cluster = &cluster;
    let id =
        |i: usize| async move { text(cluster.node(i).cmd(&["CLUSTER", "MYID"]).await.unwrap()) };
    let (from_id, to_id) = (id(from).await, id(to).await);

    let origin = Instant::now();
    let recorder = Recorder::default();
    let ids = ["a", "b", "c"];
    let runtimes: Vec<Runtime> = ids
        .iter()
        .map(|id| runtime(config(id).redis_cluster_urls(cluster.urls())))
        .collect();
    for (rt, id) in runtimes.iter().zip(ids) {
        recorder.watch(rt, id);
        for g in &groups {
            rt.is_leader(g);
        }
    }
    let led_by_all = |runtimes: &[Runtime]| {
        groups
            .iter()
            .all(|g| runtimes.iter().filter(|rt| rt.is_leader(g)).count() == 1)
    };
    // The first elections wait one ttl (safe start); then some renewals.
    let deadline = Instant::now() + TTL * 5;
    while !led_by_all(&runtimes) {
        cluster.check(Instant::now() < deadline, "no leaders before the move");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(TTL).await;

    // The move, as `redis-cli --cluster reshard` does it.
    let slot_s = slot.to_string();
    let moving = Instant::now();
    ok(
        cluster
            .node(to)
            .cmd(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])
            .await,
        "IMPORTING",
    );
    ok(
        cluster
            .node(from)
            .cmd(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])
            .await,
        "MIGRATING",
    );
    let keys = cluster
        .node(from)
        .cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"])
        .await
        .unwrap();
    let Reply::Array(keys) = keys else {
        panic!("GETKEYSINSLOT: {keys:?}")
    };
    let keys: Vec<String> = keys
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert!(keys.len() >= 4, "keys in slot {slot}: {keys:?}");
    let port = cluster.node(to).port().to_string();
    for batch in keys.chunks(batch) {
        tokio::time::sleep(pause).await;
        let mut cmd = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        cmd.extend(batch.iter().map(String::as_str));
        ok(cluster.node(from).cmd(&cmd).await, "MIGRATE");
    }
    for i in [to, from, other] {
        ok(
            cluster
                .node(i)
                .cmd(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])
                .await,
            "SETSLOT NODE",
        );
    }
    let moved = Instant::now();

    // Watch until well past ttl + 1 s after the move.
    tokio::time::sleep(TTL + Duration::from_secs(2)).await;
    let watched = Instant::now();
    let all_lead = led_by_all(&runtimes);
    let owner = cluster
        .master_of(&format!("leader:{{{}}}:lease", groups[0]))
        .await
        .unwrap();
    for rt in &runtimes {
        rt.shutdown().await;
    }

    let ms = |t: Instant| t.saturating_duration_since(origin).as_millis();
    let errors = recorder.errors.lock().unwrap().clone();
    let mut report = format!(
        "slot {slot} of {groups:?} moved from node {from} to node {to}: \
         {}..{} ms, {} keys\n",
        ms(moving),
        ms(moved),
        keys.len()
    );
    // Per group: the times without a leader from the start of the move on,
    // and when the last of them ended (relative to the end of the move).
    let mut back = Duration::ZERO;
    for g in &groups {
        report += &recorder.describe(g, origin);
        report += "\n";
        let mut covered = moving;
        // (Not the handovers of the shutdown at the end.)
        for w in recorder
            .windows(g)
            .into_iter()
            .filter(|w| w.start < watched)
        {
            if w.start > covered {
                report += &format!(
                    "  {g}: no leader {}..{} ms ({:?})\n",
                    ms(covered),
                    ms(w.start),
                    w.start - covered
                );
                back = back.max(w.start.saturating_duration_since(moved));
            }
            covered = covered.max(w.end());
        }
    }
    for (at, id, message) in &errors {
        report += &format!("  {} ms {id}: {message}\n", ms(*at));
    }
    println!("{report}");

    assert_eq!(owner, to, "the slot moved\n{report}");
    for g in &groups {
        let overlaps = recorder.overlaps(g);
        assert!(
            overlaps.is_empty(),
            "{g}: overlapping views {overlaps:#?}\n{report}"
        );
        let tokens: Vec<u64> = recorder.windows(g).iter().map(|w| w.token).collect();
        assert!(
            tokens.windows(2).all(|t| t[0] < t[1]),
            "{g}: tokens {tokens:?}\n{report}"
        );
    }
    assert!(
        all_lead,
        "not every group leads {:?} after the move\n{report}",
        watched - moved
    );
    assert!(
        back <= TTL + Duration::from_secs(1),
        "leadership back {back:?} after the move\n{report}"
    );
}
