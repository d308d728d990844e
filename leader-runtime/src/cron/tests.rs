//! Tick ids and fleet-wide dedupe on the in-memory backend, with paused time
//! and simulated host clocks: the scheduler firings of two hosts whose clocks
//! disagree, handovers between them, every tick exactly once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::{sleep_until, Instant};

use super::{JobBuilder, Shared};
use crate::{Config, Error, MemoryBackend, Runtime};

const G: &str = "cron";
const EVERY_SECOND: &str = "* * * * * *";

fn instance(mem: &MemoryBackend, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .memory(mem.clone())
            .ttl(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

type Ran = Arc<Mutex<Vec<(&'static str, String)>>>;

/// A job on `rt` whose body records `(host, tick id)` in `ran`.
fn recording_job(
    schedule: &str,
    rt: &Runtime,
    host: &'static str,
    offset_ms: i64,
    ran: &Ran,
) -> Shared {
    let ran = ran.clone();
    JobBuilder::new(schedule, G)
        .runtime(rt)
        .clock_offset_ms(offset_ms)
        .prepare(move |tick| {
            ran.lock().unwrap().push((host, tick.id().to_owned()));
            async {}
        })
        .unwrap()
}

fn at(secs: i64, millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap() + TimeDelta::milliseconds(millis)
}

#[tokio::test(start_paused = true)]
async fn the_tick_is_the_latest_scheduled_time_at_or_before_now() {
    let rt = instance(&MemoryBackend::new(), "a");
    let ran = Ran::default();
    let mut job = recording_job("0 * * * * *", &rt, "a", 0, &ran);
    job.created = at(0, 0);
    // 1_700_000_040 is a whole minute.
    let minute = 1_700_000_040;
    // Fired a little late, or right on time: the same tick.
    assert_eq!(job.due(at(minute, 0)), [at(minute, 0)]);
    assert_eq!(job.due(at(minute, 450)), [at(minute, 0)]);
    assert_eq!(job.due(at(minute + 59, 999)), [at(minute, 0)]);
    // Per second, the look-back covers the tolerance (5 s) before the tick.
    let mut job = recording_job(EVERY_SECOND, &rt, "a", 0, &ran);
    job.created = at(0, 0);
    let due = job.due(at(minute, 700));
    assert_eq!(due.len(), 6);
    assert_eq!(due[0], at(minute - 5, 0));
    assert_eq!(due[5], at(minute, 0));
    // ... but never before the job was built.
    job.created = at(minute - 2, 300);
    assert_eq!(job.due(at(minute, 700)), [at(minute - 1, 0), at(minute, 0)]);
    // ... and not at ticks already tried.
    job.tried(at(minute - 1, 0));
    assert_eq!(job.due(at(minute, 700)), [at(minute, 0)]);
    job.tried(at(minute, 0));
    assert!(job.due(at(minute, 900)).is_empty());
}

#[tokio::test(start_paused = true)]
async fn names_and_schedules_are_checked() {
    let rt = instance(&MemoryBackend::new(), "a");
    let build = |b: JobBuilder| b.runtime(&rt).build(|_| async {});
    assert!(matches!(
        build(JobBuilder::new("not a schedule", G)),
        Err(Error::Config {
            field: "schedule",
            ..
        })
    ));
    assert!(matches!(
        build(JobBuilder::new(EVERY_SECOND, "bad group")),
        Err(Error::InvalidGroup { .. })
    ));
    assert!(matches!(
        build(JobBuilder::new(EVERY_SECOND, G).name("a b")),
        Err(Error::Config { field: "name", .. })
    ));
    assert!(build(JobBuilder::new(EVERY_SECOND, G).name("purge")).is_ok());
    let ran = Ran::default();
    assert_eq!(
        recording_job("0 */5 * * * *", &rt, "a", 0, &ran).name,
        "0_*/5_*_*_*_*"
    );
}

/// Two hosts, `b`'s clock `skew_ms` ahead of `a`'s (behind when negative),
/// each with its scheduler firing a per-second job a little after each second
/// of its own clock; leadership moves a → b → a in the middle of seconds.
/// Every tick from the first to the last runs exactly once.
async fn two_hosts_with_skew(skew_ms: i64) {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let ran = Ran::default();
    // True time at the simulation's start: a whole second, after the jobs
    // were built.
    let base = Utc::now().timestamp() + 10;
    let mut job_a = recording_job(EVERY_SECOND, &a, "a", 0, &ran);
    let mut job_b = recording_job(EVERY_SECOND, &b, "b", skew_ms, &ran);
    job_a.created = at(base, 0);
    job_b.created = at(base, skew_ms);

    // Firings, in true milliseconds since the start: each host fires at its
    // clock's whole seconds plus its scheduler's lateness.
    let horizon_ms = 20_000;
    let mut firings: Vec<(i64, &Shared, i64)> = Vec::new();
    for (job, offset, late) in [(&job_a, 0, 120), (&job_b, skew_ms, 380)] {
        for second in -5..30 {
            let true_ms = second * 1000 + late - offset;
            if (0..horizon_ms).contains(&true_ms) {
                firings.push((true_ms, job, offset));
            }
        }
    }
    firings.sort_by_key(|f| f.0);
    let handovers = [5_500, 12_500];

    let t0 = Instant::now();
    let mut next_handover = 0;
    for (true_ms, job, offset) in firings {
        while next_handover < handovers.len() && handovers[next_handover] <= true_ms {
            let when = handovers[next_handover];
            sleep_until(t0 + Duration::from_millis(when as u64)).await;
            let leader = if a.is_leader(G) { &a } else { &b };
            leader.step_down(G).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(a.is_leader(G) ^ b.is_leader(G), "handed over at {when}");
            next_handover += 1;
        }
        sleep_until(t0 + Duration::from_millis(true_ms as u64)).await;
        job.fire_at(at(base, true_ms + offset)).await;
    }

    let ran = ran.lock().unwrap().clone();
    let hosts: Vec<_> = ran.iter().map(|(h, _)| *h).collect();
    assert!(hosts.contains(&"a") && hosts.contains(&"b"), "{ran:?}");
    let mut ticks: Vec<i64> = ran
        .iter()
        .map(|(_, id)| id.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    ticks.sort();
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let expected: Vec<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .collect();
    assert_eq!(
        ticks, expected,
        "skew {skew_ms} ms: each tick once, none missing: {ran:?}"
    );
    assert!(ticks.len() >= 18, "{ran:?}");
}

#[tokio::test(start_paused = true)]
async fn each_tick_once_with_a_clock_a_second_ahead() {
    two_hosts_with_skew(1000).await;
}

#[tokio::test(start_paused = true)]
async fn each_tick_once_with_a_clock_a_second_behind() {
    two_hosts_with_skew(-1000).await;
}

#[tokio::test(start_paused = true)]
async fn each_tick_once_with_fractional_skews() {
    for skew in [-2700, -400, 0, 250, 1700] {
        two_hosts_with_skew(skew).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_claim_is_retried_at_the_next_firing() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let mut job = recording_job(EVERY_SECOND, &a, "a", 0, &ran);
    let base = Utc::now().timestamp() + 10;
    job.created = at(base, 0);
    mem.set_available(false);
    job.fire_at(at(base + 1, 100)).await;
    assert!(ran.lock().unwrap().is_empty());
    mem.set_available(true);
    job.fire_at(at(base + 2, 100)).await;
    let ids: Vec<_> = ran
        .lock()
        .unwrap()
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    let ms = |s: i64| format!("*_*_*_*_*_*:{}", s * 1000);
    assert_eq!(ids, [ms(base), ms(base + 1), ms(base + 2)]);
}
