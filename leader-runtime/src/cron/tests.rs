//! The cron module on the in-memory backend, with paused time and simulated
//! host clocks: tick ids, policies, DST, and each tick at most once through
//! handovers, skew, lost replies, lost leases and lost or restored data.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::scenarios::{self, at, base, ids, recording, Ran, G};
use super::{JobBuilder, JobShared, Missed, Outcome, Overlap, Planned};
use crate::backend::cron::{ClaimRequest, JobKeys, Mode};
use crate::{Config, Error, MemoryBackend, Runtime};

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

/// A per-second job whose tolerance is the instances' ttl (3 s): a wider
/// one makes a job's first claim under a lease record refuse the ticks of
/// the excess (see `data_loss`).
fn every_second(name: &str) -> JobBuilder {
    JobBuilder::new(EVERY_SECOND, G)
        .name(name)
        .tolerance(Duration::from_secs(3))
}

fn skewed(
    rt: &Runtime,
    offset_ms: i64,
    ran: &Ran,
    created: chrono::DateTime<chrono::Utc>,
) -> Arc<JobShared> {
    recording(
        every_second("tick").clock_offset_ms(offset_ms),
        rt,
        ran,
        created,
    )
}

fn planned(plan: &[Planned]) -> Vec<(i64, Mode)> {
    plan.iter().map(|p| (p.at.timestamp(), p.mode)).collect()
}

/// The scheduler's firings of `job`: one a second for `n` seconds, each its
/// own task, at `first` and every second after it (by the job's clock) as
/// paused time passes; returns the tasks once the last has started.
async fn fire_every_second(
    job: &Arc<JobShared>,
    first: chrono::DateTime<chrono::Utc>,
    n: i64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let start = Instant::now();
    let mut firings = Vec::new();
    for s in 0..n {
        let job = job.clone();
        firings.push(tokio::spawn(async move {
            job.fire_at(first + chrono::TimeDelta::seconds(s)).await
        }));
        sleep_until(start + Duration::from_secs(s.unsigned_abs() + 1)).await;
    }
    firings
}

/// Wait (paused time) until `rt` leads `G`.
async fn until_leader(rt: &Runtime) {
    for _ in 0..200 {
        if rt.is_leader(G) {
            return;
        }
        rt.run_if_leader(G, || async {}).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never led", rt.instance_id());
}

#[tokio::test(start_paused = true)]
async fn the_plan_is_every_tick_since_the_last_decided_one() {
    let rt = instance(&MemoryBackend::new(), "a");
    let ran = Ran::default();
    // 1_700_000_040 is a whole minute.
    let minute = 1_700_000_040;
    let job = recording(
        JobBuilder::new("0 * * * * *", G).name("m"),
        &rt,
        &ran,
        at(0, 0),
    );
    // Fired a little late, or right on time: the same tick.
    let once = |t| planned(&job.plan(t, None)).last().copied();
    assert_eq!(once(at(minute, 0)), Some((minute, Mode::Run)));
    assert_eq!(once(at(minute, 450)), Some((minute, Mode::Run)));
    // Later than the tolerance, it is missed (Missed::Skip).
    assert_eq!(once(at(minute + 5, 0)), Some((minute, Mode::Run)));
    assert_eq!(once(at(minute + 59, 999)), Some((minute, Mode::Miss)));
    // Per second: within the tolerance (3 s) on time, earlier missed
    // (Missed::Skip), back to LOOK_BACK_TICKS ticks (also before the job
    // was built: the backend drops those while it decided none) or a floor.
    let job = recording(every_second("s"), &rt, &ran, at(minute - 8, 0));
    let plan = planned(&job.plan(at(minute, 700), None));
    let want: Vec<(i64, Mode)> = (-(super::LOOK_BACK_TICKS as i64) + 1..=0)
        .map(|s| (minute + s, if s <= -3 { Mode::Miss } else { Mode::Run }))
        .collect();
    assert_eq!(plan, want);
    assert_eq!(
        planned(&job.plan(at(minute, 700), Some(at(minute - 1, 300)))),
        [(minute, Mode::Run)]
    );
    // ... and not at ticks already decided.
    job.tried(&job.plan(at(minute - 1, 100), None));
    assert_eq!(
        planned(&job.plan(at(minute, 700), None)),
        [(minute, Mode::Run)]
    );
}

#[tokio::test(start_paused = true)]
async fn names_are_required_and_unique_and_settings_bounded() {
    let rt = instance(&MemoryBackend::new(), "a");
    let build = |b: JobBuilder| b.runtime(&rt).build(|_| async {});
    let field = |r: crate::Result<tokio_cron_scheduler::Job>| match r {
        Err(Error::Config { field, .. }) => field,
        Err(e) => panic!("{e}"),
        Ok(_) => "ok",
    };
    assert_eq!(
        field(build(JobBuilder::new("not a schedule", G).name("x"))),
        "schedule"
    );
    assert!(matches!(
        build(JobBuilder::new(EVERY_SECOND, "bad group").name("x")),
        Err(Error::InvalidGroup { .. })
    ));
    assert_eq!(field(build(JobBuilder::new(EVERY_SECOND, G))), "name");
    assert_eq!(field(build(every_second("a b"))), "name");
    let purge = build(every_second("purge")).unwrap();
    assert_eq!(
        field(build(every_second("purge"))),
        "name",
        "one name twice in a group"
    );
    assert_eq!(
        field(build(JobBuilder::new("0 * * * * *", "other").name("purge"))),
        "ok"
    );
    drop(purge);
    assert_eq!(
        field(build(every_second("purge"))),
        "ok",
        "a dropped job frees its name"
    );
    // Extreme settings are errors, never panics.
    assert_eq!(
        field(build(every_second("t").tolerance(Duration::MAX))),
        "tolerance"
    );
    assert_eq!(
        field(build(every_second("w").missed(Missed::All {
            window: Duration::MAX
        }))),
        "missed"
    );
    assert_eq!(
        field(build(every_second("c").max_catch_up(0))),
        "max_catch_up"
    );
    assert_eq!(
        field(build(every_second("c").max_catch_up(usize::MAX))),
        "max_catch_up"
    );
    assert_eq!(field(build(every_second("h").history(0))), "history");
    assert_eq!(
        field(build(every_second("o").clock_offset_ms(i64::MAX))),
        "clock_offset_ms"
    );
    assert_eq!(
        field(build(every_second("o").clock_offset_ms(i64::MIN))),
        "clock_offset_ms"
    );
    assert_eq!(
        field(build(every_second("z").tolerance(Duration::ZERO))),
        "ok"
    );
    // The shorthand names a job after its schedule.
    let job = rt
        .scope(async { super::job("0 */5 * * * *", G, |_| async {}) })
        .await;
    assert!(job.is_ok());
    let again = rt
        .scope(async { super::job("0 */5 * * * *", G, |_| async {}) })
        .await;
    assert!(
        again.is_err(),
        "the shorthand's name is its schedule: used once per group"
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
    let base = base();
    // The default tolerance (5 s) covers the skews and the firings' delays;
    // 2 s above the ttl, the job's first claim refuses 2 s of ticks.
    let job = |rt: &Runtime, offset_ms: i64| {
        recording(
            every_second("tick")
                .tolerance(super::DEFAULT_TOLERANCE)
                .clock_offset_ms(offset_ms),
            rt,
            &ran,
            at(base, offset_ms),
        )
    };
    let job_a = job(&a, 0);
    let job_b = job(&b, skew_ms);

    // Firings, in true milliseconds since the start: each host fires at its
    // clock's whole seconds plus its scheduler's lateness.
    let horizon_ms = 20_000;
    let mut firings: Vec<(i64, &Arc<JobShared>, i64)> = Vec::new();
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
    let hosts: Vec<_> = ran.iter().map(|(h, _, _)| h.as_str()).collect();
    assert!(hosts.contains(&"a") && hosts.contains(&"b"), "{ran:?}");
    let mut ticks: Vec<i64> = ran
        .iter()
        .map(|(_, id, _)| id.rsplit(':').next().unwrap().parse().unwrap())
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
    assert!(ticks.len() >= 16, "{ran:?}");
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
    let base = base();
    let job = skewed(&a, 0, &ran, at(base - 1, 0));
    // The job's first claim under this lease record refuses ticks before
    // its firing (see claim.lua): a first firing the tick before.
    job.fire_at(at(base - 1, 100)).await;
    assert!(ran.lock().unwrap().is_empty());
    mem.set_available(false);
    job.fire_at(at(base + 1, 100)).await;
    assert!(ran.lock().unwrap().is_empty());
    mem.set_available(true);
    job.fire_at(at(base + 2, 100)).await;
    let ms = |s: i64| format!("tick:{}", s * 1000);
    assert_eq!(ids(&ran), [ms(base), ms(base + 1), ms(base + 2)]);
}

/// A claim that went through but whose reply was lost: the retry finds the
/// tick claimed under our token, and runs it (once).
#[tokio::test(start_paused = true)]
async fn a_claim_whose_reply_was_lost_is_ours_on_retry() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let token = a.status()[0].token.unwrap();
    let ran = Ran::default();
    let t = base();
    let job = skewed(&a, 0, &ran, at(t, 0));
    // The claim of tick t, as the job would send it; its answer "lost".
    let ticks = [(t * 1000, Mode::Run)];
    let keys = JobKeys::new("leader", G, "tick");
    let req = ClaimRequest {
        group: G,
        keys: &keys,
        id: "a",
        token,
        clock_ms: t * 1000 + 100,
        skip_overlap: true,
        busy_ttl: Duration::from_secs(3),
        history_len: 20,
        floor_ms: 0,
        restore_floor_ms: 0,
        created_ms: 0,
        claimer: job.claimer,
        ticks: &ticks,
    };
    let answer = a.cron_ctx().backend.cron_claim(&req).await.unwrap();
    assert_eq!(answer, Some(vec![crate::backend::cron::Claimed::New]));
    job.fire_at(at(t, 300)).await;
    job.fire_at(at(t, 800)).await;
    assert_eq!(ids(&ran), [format!("tick:{}", t * 1000)]);
    // Another instance's claim of the same tick is not ours.
    let b = instance(&mem, "b");
    let other = recording(every_second("tick"), &b, &ran, at(t, 0));
    other.fire_at(at(t, 900)).await;
    assert_eq!(ran.lock().unwrap().len(), 1);
}

/// A job built again on the same leader (dropped and rebuilt, same name)
/// does not run the tick its predecessor ran: that claim was the other
/// object's, not a retry of its own. (Before: answered `ours`, it ran the
/// tick a second time.)
#[tokio::test(start_paused = true)]
async fn a_job_built_again_does_not_run_its_predecessors_tick() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    let first = skewed(&a, 0, &ran, at(t - 1, 0));
    first.fire_at(at(t - 1, 100)).await;
    first.fire_at(at(t, 100)).await;
    assert_eq!(ids(&ran), [format!("tick:{}", t * 1000)]);
    drop(first);
    let again = skewed(&a, 0, &ran, at(t - 1, 0));
    again.fire_at(at(t, 300)).await;
    assert_eq!(ids(&ran), [format!("tick:{}", t * 1000)]);
    // Its own next tick runs.
    again.fire_at(at(t + 1, 100)).await;
    assert_eq!(ran.lock().unwrap().len(), 2);
}

/// The lease is taken away on the server while our view still looks
/// valid: the claim (made in the same script that checks the lease) fails,
/// and nothing runs. (Before: the claim was checked against the local view
/// only, and the body ran.)
#[tokio::test(start_paused = true)]
async fn no_tick_runs_once_the_lease_is_someone_elses() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    let job = skewed(&a, 0, &ran, at(t - 1, 0));
    job.fire_at(at(t - 1, 100)).await;
    job.fire_at(at(t, 100)).await;
    mem.overwrite("leader", G, "intruder", Duration::from_secs(60));
    assert!(a.is_leader(G), "the local view has not noticed yet");
    job.fire_at(at(t + 1, 100)).await;
    assert_eq!(ids(&ran), [format!("tick:{}", t * 1000)]);
}

/// Ticks run by `a`, then the data is lost (`lose`) and `a` crashes; `b`
/// takes over and looks back as far as it can (tolerance 30 s, every missed
/// tick of a minute caught up). No tick runs twice. The tolerance is 27 s
/// above the ttl: each first claim under a new lease record refuses 27 s of
/// ticks (an earlier leader's clock may have been that far ahead).
async fn data_loss(lose: impl FnOnce(&MemoryBackend)) {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    let wide = || {
        every_second("tick")
            .tolerance(Duration::from_secs(30))
            .missed(Missed::All {
                window: Duration::from_secs(60),
            })
            .max_catch_up(100)
    };
    let job_a = recording(wide(), &a, &ran, at(t - 30, 0));
    for s in -30..3 {
        job_a.fire_at(at(t + s, 100)).await;
    }
    assert!(ids(&ran).contains(&format!("tick:{}", (t + 2) * 1000)));
    lose(&mem);
    // a "crashes": its election stops without a release.
    mem.set_available(false);
    a.shutdown().await;
    mem.set_available(true);
    let b = instance(&mem, "b");
    let job_b = recording(wide(), &b, &ran, at(t, 0));
    until_leader(&b).await;
    let now = tokio::time::Instant::now();
    for s in 3..45 {
        job_b.fire_at(at(t + s, 100)).await;
        // The job's clock and tokio's move together.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut got = ids(&ran);
    let all = got.len();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), all, "a tick ran twice: {:?}", ids(&ran));
    assert!(
        ids(&ran)
            .iter()
            .any(|id| id.ends_with(&format!(":{}", (t + 44) * 1000))),
        "{:?} {now:?}",
        ids(&ran)
    );
}

#[tokio::test(start_paused = true)]
async fn no_tick_runs_twice_after_the_data_was_flushed() {
    data_loss(MemoryBackend::flush).await;
}

/// Data loss with a tolerance wider than the ttl (30 s against 3 s) and the
/// next leader's clock 20 s behind, within that tolerance: `a` runs ticks
/// t-3..t, the data is flushed, `a` crashes; `b` leads after the safe start,
/// its clock still before the ticks `a` ran. None of them runs again: the
/// floors add the skew beyond the ttl. (Before: `b`'s floor was its own
/// start, ~17 s before them, and they ran twice.)
#[tokio::test(start_paused = true)]
async fn no_tick_runs_twice_after_data_loss_with_a_clock_skewed_beyond_the_ttl() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    let wide = || every_second("tick").tolerance(Duration::from_secs(30));
    // The job's first claim under the record refuses 27 s of ticks (the
    // tolerance beyond the ttl): a fires from t-30 on.
    let job_a = recording(wide(), &a, &ran, at(t - 30, 0));
    for s in -30..=0 {
        job_a.fire_at(at(t + s, 100)).await;
    }
    let by_a = ids(&ran);
    assert!(by_a.contains(&format!("tick:{}", t * 1000)), "{by_a:?}");
    mem.flush();
    mem.set_available(false);
    a.shutdown().await;
    mem.set_available(true);
    // b's clock is 20 s behind (within the 30 s tolerance).
    let skew = 20;
    let b = instance(&mem, "b");
    let job_b = recording(
        wide().clock_offset_ms(-skew * 1000),
        &b,
        &ran,
        at(t - skew, 0),
    );
    let start = Instant::now();
    until_leader(&b).await;
    // True time goes on until b's clock passes t, b firing every second.
    while start.elapsed() < Duration::from_secs(skew as u64 + 1) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let elapsed_ms = start.elapsed().as_millis() as i64;
        job_b.fire_at(at(t - skew, 100 + elapsed_ms)).await;
    }
    assert!(b.is_leader(G));
    let all = ids(&ran);
    let mut uniq = all.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(
        uniq.len(),
        all.len(),
        "a tick ran twice: a ran {by_a:?}; all {all:?}"
    );
    let history = b.cron_history(G, "tick").await.unwrap();
    assert!(
        history.iter().any(|r| r.outcome == Outcome::Missed),
        "the refused ticks are recorded as missed: {history:?}"
    );
}

/// The only instance runs minute m's tick, crashes, and its process comes
/// back (the job built again) 90 s later: tick m+60, due while it was down,
/// is caught up (`Missed::Latest`), though it is before the new job was
/// built: the look-back reaches back to the backend's last decided tick.
/// (Before: it was neither run nor recorded.)
#[tokio::test(start_paused = true)]
async fn a_tick_missed_while_the_process_was_down_is_caught_up() {
    let mem = MemoryBackend::new();
    let m = (base() / 60 + 1) * 60;
    let minutely = || {
        JobBuilder::new("0 * * * * *", G)
            .name("minutely")
            .missed(Missed::Latest)
            .tolerance(Duration::from_secs(1))
    };
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let job_a = recording(minutely(), &a, &ran, at(m - 30, 0));
    job_a.fire_at(at(m - 1, 100)).await;
    job_a.fire_at(at(m, 100)).await;
    assert_eq!(ids(&ran), [format!("minutely:{}", m * 1000)]);
    mem.set_available(false);
    a.shutdown().await;
    mem.set_available(true);
    let a2 = instance(&mem, "a2");
    let job_a2 = recording(minutely(), &a2, &ran, at(m + 90, 0));
    until_leader(&a2).await;
    job_a2.fire_at(at(m + 95, 100)).await;
    assert_eq!(
        ran.lock().unwrap().clone(),
        [
            ("a".to_owned(), format!("minutely:{}", m * 1000), false),
            (
                "a2".to_owned(),
                format!("minutely:{}", (m + 60) * 1000),
                true
            ),
        ]
    );
    // Nothing before the first job was built is decided, nor recorded.
    let history = a2.cron_history(G, "minutely").await.unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
}

/// `Missed::Latest` with `Overlap::Skip`: the gap tick chosen for the
/// catch-up waits for a run in flight; a later tick, seen on time, turns
/// late behind it. The catch-up stays the gap tick's. (Before: the later
/// tick became the latest missed one, the gap tick was recorded as missed
/// and the later one skipped as overlapping: nothing caught up.)
#[tokio::test(start_paused = true)]
async fn missed_latest_keeps_a_waiting_catch_up() {
    let rt = instance(&MemoryBackend::new(), "a");
    let ran = Ran::default();
    let m = (base() / 60 + 1) * 60;
    let job = recording(
        JobBuilder::new("*/10 * * * * *", G)
            .name("latest")
            .tolerance(Duration::from_secs(1))
            .missed(Missed::Latest),
        &rt,
        &ran,
        at(m - 30, 0),
    );
    let floor = Some(at(m + 5, 0));
    let plan = |s, ms| planned(&job.plan(at(m + s, ms), floor));
    // First seen late (a gap): caught up; it waits, undecided.
    assert_eq!(plan(12, 100), [(m + 10, Mode::CatchUp)]);
    // The next tick, on time, behind it.
    assert_eq!(
        plan(20, 100),
        [(m + 10, Mode::CatchUp), (m + 20, Mode::Run)]
    );
    // Both late now: still the gap tick's catch-up.
    assert_eq!(
        plan(21, 500),
        [(m + 10, Mode::CatchUp), (m + 20, Mode::Miss)]
    );
}

/// `Missed::All` with the default `Overlap::Skip` and a body of two
/// seconds, fired every second as the scheduler does (each firing its own
/// task): after a gap, the three missed ticks run one after the other, each
/// waiting for the run before; a later tick seen on time while one runs is
/// still skipped. (Before: the second firing found the first catch-up
/// running and recorded the other two as skipped-overlap.)
#[tokio::test(start_paused = true)]
async fn missed_all_catches_up_every_tick_with_a_slow_body() {
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let m = (base() / 60 + 1) * 60;
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut job = {
        let ran = ran.clone();
        JobBuilder::new("0 * * * * *", G)
            .name("catch-up")
            .runtime(&rt)
            .tolerance(Duration::from_secs(1))
            .missed(Missed::All {
                window: Duration::from_secs(3600),
            })
            .prepare(move |tick| {
                ran.lock().unwrap().push(tick.id().to_owned());
                async { tokio::time::sleep(Duration::from_secs(2)).await }
            })
            .unwrap()
    };
    job.created = at(m - 30, 0);
    let job = Arc::new(job);
    job.fire_at(at(m - 1, 100)).await;
    job.fire_at(at(m, 100)).await;
    // Nobody fired for three and a half minutes; then every second.
    let now = at(m + 4 * 60 - 30, 100);
    for f in fire_every_second(&job, now, 12).await {
        f.await.unwrap();
    }
    let minutes = |r: &crate::cron::Run| (super::history::unix_ms(r.scheduled) / 1000 - m) / 60;
    let mut outcomes: Vec<(i64, Outcome)> = rt
        .cron_history(G, "catch-up")
        .await
        .unwrap()
        .iter()
        .map(|r| (minutes(r), r.outcome.clone()))
        .collect();
    outcomes.sort_by_key(|o| o.0);
    assert_eq!(
        outcomes,
        [
            (0, Outcome::Ok),
            (1, Outcome::Ok),
            (2, Outcome::Ok),
            (3, Outcome::Ok)
        ],
        "ran {:?}",
        ran.lock().unwrap()
    );
}

/// A run longer than the look-back (1,100 s of a per-second job, skipping
/// overlaps): the firing that ran it goes on planning after it, and must
/// neither run its tick again nor ask for the same ticks at every turn.
/// (Before: that firing planned from its own old time, past what `tried`
/// still held; the claim answered its tick `ours` (its claim mark was never
/// replaced, the ticks since only skipped), so it ran twice; with that
/// answer fixed, the firing asked for the same old ticks forever.)
#[tokio::test(start_paused = true)]
async fn a_run_longer_than_the_look_back_runs_once_and_its_firing_ends() {
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let t = base();
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut job = {
        let ran = ran.clone();
        every_second("long")
            .runtime(&rt)
            .prepare(move |tick| {
                let first = {
                    let mut ran = ran.lock().unwrap();
                    ran.push(tick.id().to_owned());
                    ran.len() == 1
                };
                async move {
                    if first {
                        tokio::time::sleep(Duration::from_secs(1100)).await;
                    }
                }
            })
            .unwrap()
    };
    job.created = at(t - 1, 0);
    let job = Arc::new(job);
    for f in fire_every_second(&job, at(t, 100), 1110).await {
        f.await.unwrap();
    }
    let ran = ran.lock().unwrap().clone();
    let first = ran.first().cloned().expect("the first tick ran");
    assert_eq!(
        ran.iter().filter(|id| **id == first).count(),
        1,
        "the long run's tick ran twice: {:?}",
        &ran[..ran.len().min(5)]
    );
}

/// A step-down while a per-second job's slow body runs waits for that run
/// only: the firing's loop does not go on to the ticks that came due
/// meanwhile (it plans from the firing's own time, and their own firings
/// were refused by the drain), so the lease is released, not left to
/// expire.
#[tokio::test(start_paused = true)]
async fn a_step_down_waits_for_the_run_in_flight_only() {
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let t = base();
    let mut job = every_second("slow")
        .runtime(&rt)
        .prepare(|_| async { tokio::time::sleep(Duration::from_millis(1500)).await })
        .unwrap();
    job.created = at(t - 1, 0);
    let job = Arc::new(job);
    let start = Instant::now();
    let firings = fire_every_second(&job, at(t, 100), 3).await;
    // t+2's run is in flight (from 2 s to 3.5 s): step down at 3.2 s.
    sleep_until(start + Duration::from_millis(3200)).await;
    let asked = Instant::now();
    rt.step_down(G).await.unwrap();
    let took = asked.elapsed();
    assert!(
        took <= Duration::from_millis(400),
        "the step-down waited {took:?}, not just for the run in flight"
    );
    assert!(!rt.is_leader(G));
    for f in firings {
        f.await.unwrap();
    }
}

/// The restore scenarios' start: `a` leads and runs a wide every-second
/// job at t-1 and t, the data is snapshotted, `a` runs t+1 to t+3, then the
/// snapshot is restored.
struct Restored {
    mem: MemoryBackend,
    a: Runtime,
    ran: Ran,
    t: i64,
    job_a: Arc<JobShared>,
}

/// A job that catches up to a minute of missed ticks, with a wide tolerance.
fn wide() -> JobBuilder {
    every_second("tick")
        .tolerance(Duration::from_secs(30))
        .missed(Missed::All {
            window: Duration::from_secs(60),
        })
}

async fn restored_after_three_runs() -> Restored {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    // The job's first claim under the record refuses 27 s of ticks (its
    // tolerance beyond the ttl): a runs t-2 to t.
    let job_a = recording(wide(), &a, &ran, at(t - 30, 0));
    for s in -30..=0 {
        job_a.fire_at(at(t + s, 100)).await;
    }
    let snapshot = mem.snapshot();
    for s in 1..4 {
        job_a.fire_at(at(t + s, 100)).await;
    }
    mem.restore(&snapshot);
    Restored {
        mem,
        a,
        ran,
        t,
        job_a,
    }
}

#[tokio::test(start_paused = true)]
async fn no_tick_runs_twice_after_a_restore_from_a_snapshot() {
    // The snapshot was taken before a's runs; a keeps its lease through the
    // restore (it is in the snapshot), renews, and hands over to b.
    let Restored {
        mem,
        a,
        ran,
        t,
        job_a,
    } = restored_after_three_runs().await;
    // a's lease is in the snapshot, but the restored server vouches for no
    // record: a's next renew fails and a takes its own key back after a
    // one-ttl safe start. It goes on, and remembers what it ran.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(!a.is_leader(G), "a renew on a restored record fails");
    until_leader(&a).await;
    job_a.fire_at(at(t + 4, 100)).await;
    let b = instance(&mem, "b");
    let job_b = recording(wide(), &b, &ran, at(t, 0));
    b.run_if_leader(G, || async {}).await;
    a.step_down(G).await.unwrap();
    until_leader(&b).await;
    for s in 5..40 {
        job_b.fire_at(at(t + s, 100)).await;
    }
    // No tick ran twice. a's new leadership began after a safe start for
    // restored data: it looks back to its start only, and b's first claim
    // under a's new record refuses the ticks up to b's clock plus the
    // tolerance beyond the ttl (27 s) rather than risk a repeat: t+4 to
    // t+32 did not run.
    let ms = |s: i64| format!("tick:{}", (t + s) * 1000);
    let expected: Vec<String> = (-2..=3).chain(33..40).map(ms).collect();
    assert_eq!(ids(&ran), expected);
}

#[tokio::test(start_paused = true)]
async fn no_tick_runs_twice_after_a_restore_and_a_handover() {
    // As above, but a hands over right after the restore, before it fired
    // again: b must not take a's lost claims for unclaimed ticks.
    let Restored { mem, a, ran, t, .. } = restored_after_three_runs().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let b = instance(&mem, "b");
    let job_b = recording(wide(), &b, &ran, at(t, 0));
    b.run_if_leader(G, || async {}).await;
    a.step_down(G).await.unwrap();
    until_leader(&b).await;
    for s in 4..8 {
        job_b.fire_at(at(t + s, 100)).await;
    }
    let mut got = ids(&ran);
    let all = got.len();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), all, "a tick ran twice: {:?}", ids(&ran));
    let history = b.cron_history(G, "tick").await.unwrap();
    assert!(
        history.iter().any(|r| r.outcome == Outcome::Missed),
        "{history:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tick_of_a_job_key_lost_on_its_own_does_not_run_again() {
    let mem = MemoryBackend::new();
    let rt = instance(&mem, "a");
    scenarios::a_lost_job_key(&rt, |key| {
        mem.lose_cron_job(&key);
        async {}
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_claim_drops_ticks_before_a_new_job_and_leaves_a_waiting_catch_up_undecided() {
    scenarios::claim_rules(&instance(&MemoryBackend::new(), "a")).await;
}

#[tokio::test(start_paused = true)]
async fn missed_run_policies() {
    scenarios::missed_policies(&instance(&MemoryBackend::new(), "a")).await;
}

#[tokio::test(start_paused = true)]
async fn dst_spring_forward_and_fall_back() {
    scenarios::dst(&instance(&MemoryBackend::new(), "a")).await;
}

async fn overlap(overlap: Overlap) {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    scenarios::overlap_across_handover(
        &a,
        &b,
        overlap,
        async {
            mem.lose_lease("leader", G);
            // Out of the race, so b takes over (this waits for a's run to
            // drain, bounded by the view: not awaited here).
            let a = a.clone();
            tokio::spawn(async move { a.set_eligible(G, false).await });
        },
        until_leader(&b),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_waits_for_a_previous_leaders_run() {
    overlap(Overlap::Skip).await;
}

#[tokio::test(start_paused = true)]
async fn overlap_allow_runs_beside_it() {
    overlap(Overlap::Allow).await;
}

/// `scenarios::a_claim_that_never_started` on the memory backend: `a`'s
/// lease lost (as when it died), `a` out of the race, `b` leads.
#[tokio::test(start_paused = true)]
async fn a_claim_that_never_started_is_decided_again() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    b.run_if_leader(G, || async {}).await;
    scenarios::a_claim_that_never_started(
        &a,
        &b,
        async {
            mem.lose_lease("leader", G);
            a.set_eligible(G, false).await.unwrap();
        },
        until_leader(&b),
    )
    .await;
}

/// The claim's reply arrives after the claimer's view ended (`a` cut off
/// from the lease while it waits for it): `a` does not run the tick, and
/// `b`, the next leader, catches it up (`Missed::Latest`); the history
/// says `abandoned` (by `a`), then `ok` (by `b`). (Before: `a` recorded it
/// `cancelled`, `b` found it `taken`, and it never ran.)
#[tokio::test(start_paused = true)]
async fn a_claim_answered_after_the_view_ended_is_caught_up_by_the_next_leader() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    b.run_if_leader(G, || async {}).await;
    let m = (base() / 60 + 1) * 60;
    let minutely = || {
        JobBuilder::new("0 * * * * *", G)
            .name("late-reply")
            .missed(Missed::Latest)
            .tolerance(Duration::from_secs(1))
    };
    let ran = Ran::default();
    let job_a = recording(minutely(), &a, &ran, at(m - 30, 0));
    job_a.fire_at(at(m - 1, 100)).await;
    mem.delay_cron_claim_replies(Some(("a", Duration::from_secs(10))));
    let firing = tokio::spawn({
        let job_a = job_a.clone();
        async move { job_a.fire_at(at(m, 100)).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The claim went through; a's renewals fail from now on.
    mem.cut_off(Some("a"));
    until_leader(&b).await;
    firing.await.unwrap();
    assert!(!a.is_leader(G));
    assert!(
        ran.lock().unwrap().is_empty(),
        "a ran it after its view ended"
    );
    let job_b = recording(minutely(), &b, &ran, at(m - 30, 0));
    job_b.fire_at(at(m + 5, 100)).await;
    job_b.fire_at(at(m + 60, 100)).await;
    let tick = |s: i64| format!("late-reply:{}", s * 1000);
    assert_eq!(
        ran.lock().unwrap().clone(),
        [
            ("b".to_owned(), tick(m), true),
            ("b".to_owned(), tick(m + 60), false)
        ]
    );
    let history: Vec<(i64, Outcome, String)> = b
        .cron_history(G, "late-reply")
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| {
            (
                super::history::unix_ms(r.scheduled) / 1000,
                r.outcome,
                r.instance,
            )
        })
        .collect();
    assert_eq!(
        history,
        [
            (m, Outcome::Abandoned, "a".to_owned()),
            (m, Outcome::Ok, "b".to_owned()),
            (m + 60, Outcome::Ok, "b".to_owned()),
        ]
    );
}

/// The start of a claimed tick fails (the backend is out right then) while
/// the view is still valid: the body does not start, and the next firing
/// asks for the tick again, finds its own unstarted claim (`ours`) and
/// runs it, once.
#[tokio::test(start_paused = true)]
async fn a_tick_whose_start_failed_runs_at_the_next_firing_once() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let ran = Ran::default();
    let t = base();
    let job = skewed(&a, 0, &ran, at(t - 1, 0));
    job.fire_at(at(t - 1, 100)).await;
    assert!(ran.lock().unwrap().is_empty());
    mem.delay_cron_claim_replies(Some(("a", Duration::from_millis(100))));
    let firing = tokio::spawn({
        let job = job.clone();
        async move { job.fire_at(at(t, 100)).await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    mem.set_available(false);
    firing.await.unwrap();
    assert!(ran.lock().unwrap().is_empty());
    assert!(a.is_leader(G));
    mem.set_available(true);
    mem.delay_cron_claim_replies(None);
    job.fire_at(at(t, 600)).await;
    job.fire_at(at(t, 900)).await;
    assert_eq!(ids(&ran), [format!("tick:{}", t * 1000)]);
    let history: Vec<Outcome> = a
        .cron_history(G, "tick")
        .await
        .unwrap()
        .into_iter()
        .filter(|r| super::history::unix_ms(r.scheduled) == t * 1000)
        .map(|r| r.outcome)
        .collect();
    assert_eq!(history, [Outcome::Ok]);
}

#[tokio::test(start_paused = true)]
async fn outcomes_errors_and_panics_are_recorded() {
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let t = base();
    let mut job = JobBuilder::new(EVERY_SECOND, G)
        .name("flaky")
        .tolerance(Duration::from_secs(1))
        .runtime(&rt)
        .prepare(|tick| async move {
            match tick
                .scheduled()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 3
            {
                0 => Ok(()),
                1 => Err("no database"),
                _ => panic!("boom"),
            }
        })
        .unwrap();
    job.created = at(t, 0);
    for s in 0..3 {
        job.fire_at(at(t + s, 100)).await;
    }
    let history = rt.cron_history(G, "flaky").await.unwrap();
    let mut outcomes: Vec<(u64, Outcome)> = history
        .iter()
        .map(|r| {
            (
                r.scheduled
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    % 3,
                r.outcome.clone(),
            )
        })
        .collect();
    outcomes.sort_by_key(|o| o.0);
    assert_eq!(
        outcomes,
        [
            (0, Outcome::Ok),
            (1, Outcome::Error("no database".into())),
            (2, Outcome::Panicked)
        ]
    );
    assert!(history.iter().all(|r| r.instance == "a"));
    let _ = Instant::now();
    let _ = sleep_until;
}

/// A body's error that names a URL with its password: the log, the
/// fleet-wide history and this instance's recent runs show it redacted,
/// also when the body's own `TickResult` says it, and also when the 256
/// bytes kept end inside the URL.
#[tokio::test(start_paused = true)]
async fn a_password_in_a_body_error_is_redacted_everywhere() {
    struct Own;
    impl super::TickResult for Own {
        fn outcome(self) -> Outcome {
            Outcome::Error("own redis://ops:0wn-pw@cache".into())
        }
    }
    enum Said {
        Plain,
        Own,
    }
    impl super::TickResult for Said {
        fn outcome(self) -> Outcome {
            match self {
                Said::Plain => Err::<(), _>(format!(
                    "{} connect postgres://app:s3cret-pw@db/x refused",
                    "x".repeat(228)
                ))
                .outcome(),
                Said::Own => Own.outcome(),
            }
        }
    }
    let captured = crate::test_support::Captured::default();
    let _capture = crate::test_support::capture_this_thread(&captured);
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let t = base();
    let mut job = JobBuilder::new(EVERY_SECOND, G)
        .name("leaky")
        .tolerance(Duration::from_secs(1))
        .runtime(&rt)
        .prepare(|tick| async move {
            let secs = tick
                .scheduled()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            if secs % 2 == 0 {
                Said::Plain
            } else {
                Said::Own
            }
        })
        .unwrap();
    job.created = at(t, 0);
    for s in 0..2 {
        job.fire_at(at(t + s, 100)).await;
    }
    let history = rt.cron_history(G, "leaky").await.unwrap();
    let recent: Vec<_> = job.recent.lock().unwrap().iter().cloned().collect();
    let logged = captured.lines("WARN", "cron tick body failed");
    assert_eq!((history.len(), recent.len(), logged.len()), (2, 2, 2));
    let shown: Vec<String> = history
        .iter()
        .chain(&recent)
        .map(|r| r.outcome.to_string())
        .chain(logged)
        .collect();
    for text in &shown {
        assert!(
            !text.contains("s3cret-pw") && !text.contains("0wn-pw") && !text.contains("s3cr"),
            "{text}"
        );
        assert!(text.contains(":***@"), "{text}");
    }
}

/// The per-job metrics (feature `metrics`): runs by outcome and their
/// durations, read back through the test binary's debugging recorder.
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn runs_are_counted_by_outcome_with_their_durations() {
    use crate::observe::metrics::tests::{counter, metrics_of, SERIAL};
    use metrics_util::debugging::DebugValue;
    use metrics_util::MetricKind;
    const GM: &str = "cron-metrics";
    let _serial = SERIAL.lock().await;
    let _ = metrics_of(GM); // start from a clean snapshot
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(GM, || async {}).await.is_some());
    let t = base();
    let mut job = JobBuilder::new(EVERY_SECOND, GM)
        .name("flaky")
        .tolerance(Duration::from_secs(1))
        .runtime(&rt)
        .prepare(|tick| async move {
            match tick
                .scheduled()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 3
            {
                0 => Ok(()),
                1 => Err("no database"),
                _ => panic!("boom"),
            }
        })
        .unwrap();
    job.created = at(t, 0);
    for s in 0..3 {
        job.fire_at(at(t + s, 100)).await;
    }
    let m = metrics_of(GM);
    for outcome in ["ok", "error", "panicked"] {
        assert_eq!(
            counter(
                &m,
                "leader_cron_runs_total",
                &[("job", "flaky"), ("outcome", outcome)]
            ),
            1,
            "{outcome}: {m:?}"
        );
    }
    let key = (
        MetricKind::Histogram,
        "leader_cron_run_seconds".to_owned(),
        vec![("job".to_owned(), "flaky".to_owned())],
    );
    match m.get(&key) {
        Some(DebugValue::Histogram(samples)) => assert_eq!(samples.len(), 3),
        other => panic!("{other:?}"),
    }
}

/// A `JobShared` for `schedule` in `tz`, only to compute ticks.
fn in_zone(schedule: &str, tz: chrono_tz::Tz) -> JobShared {
    JobBuilder::new(schedule, G)
        .name("dst")
        .time_zone(tz)
        .prepare(|_| async {})
        .unwrap()
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

/// The ticks of `job` in `[from, to]`, as `plan()` walks them (backwards).
fn ticks_between(
    job: &JobShared,
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
) -> Vec<chrono::DateTime<chrono::Utc>> {
    let mut out = Vec::new();
    let mut next = job.previous(&to, true);
    while let Some(t) = next.filter(|t| *t >= from) {
        out.push(t);
        next = job.previous(&t, false);
    }
    out.reverse();
    out
}

/// Spring forward: a daily time the day has (01:30 in Berlin, New York and
/// Lord Howe; midnight in London; 02:30 where the gap starts at midnight)
/// runs once that day, at that time — not again when the clock jumps
/// (croner's gap snapping, which `previous()` used to copy, added a tick at
/// the end of the gap: this test failed before).
#[test]
fn a_daily_time_outside_the_gap_runs_once_on_the_spring_forward_day() {
    use chrono_tz::{America, Australia, Europe};
    for (tz, schedule, day, want) in [
        // 01:30 CET; the gap is 02:00–03:00.
        (
            Europe::Berlin,
            "0 30 1 * * *",
            utc(2025, 3, 29, 23, 0),
            utc(2025, 3, 30, 0, 30),
        ),
        // 00:00 GMT; the gap is 01:00–02:00.
        (
            Europe::London,
            "0 0 0 * * *",
            utc(2025, 3, 29, 23, 0),
            utc(2025, 3, 30, 0, 0),
        ),
        (
            America::New_York,
            "0 30 1 * * *",
            utc(2025, 3, 9, 5, 0),
            utc(2025, 3, 9, 6, 30),
        ),
        // 01:30 +10:30; the gap is 02:00–02:30.
        (
            Australia::Lord_Howe,
            "0 30 1 * * *",
            utc(2025, 10, 4, 13, 0),
            utc(2025, 10, 4, 15, 0),
        ),
        // Santiago 2025-09-07: 00:00–01:00 is the gap; 02:30 -03.
        (
            America::Santiago,
            "0 30 2 * * *",
            utc(2025, 9, 7, 4, 0),
            utc(2025, 9, 7, 5, 30),
        ),
        (
            America::Santiago,
            "0 45 23 * * *",
            utc(2025, 9, 7, 4, 0),
            utc(2025, 9, 8, 2, 45),
        ),
        (
            America::Havana,
            "0 30 2 * * *",
            utc(2025, 3, 9, 5, 0),
            utc(2025, 3, 9, 6, 30),
        ),
    ] {
        let job = in_zone(schedule, tz);
        let got = ticks_between(
            &job,
            day,
            day + chrono::TimeDelta::hours(24) - chrono::TimeDelta::seconds(1),
        );
        assert_eq!(got, [want], "{tz} {schedule}");
    }
}

/// The same through firings: the Berlin 01:30 job and London's midnight
/// job each run once on the spring-forward day (each ran twice before).
#[tokio::test(start_paused = true)]
async fn a_daily_job_runs_once_through_the_spring_forward_night() {
    let rt = instance(&MemoryBackend::new(), "a");
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    for (name, tz, schedule) in [
        ("berlin-0130", chrono_tz::Europe::Berlin, "0 30 1 * * *"),
        ("london-midnight", chrono_tz::Europe::London, "0 0 0 * * *"),
    ] {
        let ran = Ran::default();
        let job = recording(
            JobBuilder::new(schedule, G)
                .name(name)
                .time_zone(tz)
                .tolerance(Duration::from_secs(1)),
            &rt,
            &ran,
            utc(2025, 3, 29, 22, 0),
        );
        // A little after every quarter hour, 22:00 to 04:00 UTC.
        let mut t = utc(2025, 3, 29, 22, 0);
        while t <= utc(2025, 3, 30, 4, 0) {
            job.fire_at(t + chrono::TimeDelta::milliseconds(300)).await;
            t += chrono::TimeDelta::minutes(15);
        }
        assert_eq!(ids(&ran).len(), 1, "{name}: {:?}", ids(&ran));
    }
}

/// Spring forward with a list of hours: `2,14` at :30 runs its 02:30 at
/// the first instant after the gap, as a single 02:30 does (croner snaps
/// only when every time field is a single value: this test failed
/// before, the 02:30 tick was lost).
#[test]
fn a_gap_time_of_a_multi_hour_schedule_runs_after_the_gap() {
    use chrono_tz::{America, Europe};
    for (tz, day, gap_end, afternoon) in [
        (
            Europe::Berlin,
            utc(2025, 3, 29, 23, 0),
            utc(2025, 3, 30, 1, 0),
            utc(2025, 3, 30, 12, 30),
        ),
        (
            America::New_York,
            utc(2025, 3, 9, 5, 0),
            utc(2025, 3, 9, 7, 0),
            utc(2025, 3, 9, 18, 30),
        ),
    ] {
        let job = in_zone("0 30 2,14 * * *", tz);
        let got = ticks_between(
            &job,
            day,
            day + chrono::TimeDelta::hours(24) - chrono::TimeDelta::seconds(1),
        );
        assert_eq!(got, [gap_end, afternoon], "{tz}");
    }
    // An hourly :30 job, too: 01:30, 03:00 (for 02:30), 03:30 CEST...
    let job = in_zone("0 30 * * * *", Europe::Berlin);
    assert_eq!(
        ticks_between(&job, utc(2025, 3, 30, 0, 0), utc(2025, 3, 30, 1, 30)),
        [
            utc(2025, 3, 30, 0, 30),
            utc(2025, 3, 30, 1, 0),
            utc(2025, 3, 30, 1, 30)
        ]
    );
}

/// Every transition of `tz` in `year` (the first instant of the new offset,
/// to the minute).
fn transitions(tz: chrono_tz::Tz, year: i32) -> Vec<chrono::DateTime<chrono::Utc>> {
    use chrono::{Offset, TimeZone};
    let off = |t: chrono::DateTime<chrono::Utc>| {
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc()
    };
    let mut out = Vec::new();
    let mut t = utc(year, 1, 1, 0, 0);
    while t < utc(year + 1, 1, 1, 0, 0) {
        let n = t + chrono::TimeDelta::minutes(15);
        if off(t) != off(n) {
            let mut m = t;
            while off(m) == off(t) {
                m += chrono::TimeDelta::minutes(1);
            }
            out.push(m);
        }
        t = n;
    }
    out
}

/// The DST rule by brute force: every local minute in a window that
/// matches `schedule` (second 0), mapped to its instant — itself, its first
/// occurrence if repeated, the first instant after the gap if skipped.
fn expected_ticks(
    job: &JobShared,
    tz: chrono_tz::Tz,
    around: chrono::DateTime<chrono::Utc>,
) -> BTreeSet<chrono::DateTime<chrono::Utc>> {
    use chrono::TimeZone;
    let mut out = BTreeSet::new();
    let centre = around.naive_utc();
    let mut m = centre - chrono::TimeDelta::hours(60);
    while m < centre + chrono::TimeDelta::hours(60) {
        if job.cron.is_time_matching(&m.and_utc()).unwrap() {
            let mut n = m;
            let at = loop {
                if let Some(at) = tz.from_local_datetime(&n).earliest() {
                    break at.with_timezone(&chrono::Utc);
                }
                n += chrono::TimeDelta::minutes(1);
            };
            out.insert(at);
        }
        m += chrono::TimeDelta::minutes(1);
    }
    out
}

/// `previous()` against the brute-force rule around every transition of
/// each zone: the chain `plan()` walks, and the answer for times in
/// between (whole and fractional seconds, at and beside each tick).
fn dst_sweep(zones: &[(&str, i32)], schedules: &[&str]) {
    let mut problems = Vec::new();
    for &(zone, year) in zones {
        let tz: chrono_tz::Tz = zone.parse().unwrap();
        let trs = transitions(tz, year);
        assert!(!trs.is_empty(), "{zone} {year}");
        for tr in trs {
            for &schedule in schedules {
                let job = in_zone(schedule, tz);
                let want = expected_ticks(&job, tz, tr);
                let (from, to) = (
                    tr - chrono::TimeDelta::hours(30),
                    tr + chrono::TimeDelta::hours(30),
                );
                let chain = ticks_between(&job, from, to);
                let window: Vec<_> = want.range(from..=to).copied().collect();
                if chain != window {
                    problems.push(format!(
                        "{zone} {schedule} around {tr}: chain {chain:?}, rule {window:?}"
                    ));
                    continue;
                }
                let mut probes: Vec<_> = (0..(60 * 60 / 7))
                    .map(|i| {
                        from + chrono::TimeDelta::minutes(i * 7)
                            + chrono::TimeDelta::milliseconds(i % 3 * 400)
                    })
                    .collect();
                for w in &window {
                    probes.extend([
                        *w - chrono::TimeDelta::seconds(1),
                        *w,
                        *w + chrono::TimeDelta::milliseconds(1),
                    ]);
                }
                for t in probes {
                    for inclusive in [true, false] {
                        let rule = want
                            .range(..=t)
                            .rev()
                            .find(|w| inclusive || **w < t)
                            .copied();
                        if rule.is_some_and(|r| r >= from - chrono::TimeDelta::hours(24))
                            && job.previous(&t, inclusive) != rule
                        {
                            problems.push(format!(
                                "{zone} {schedule} previous({t}, {inclusive}) = {:?}, rule {rule:?}",
                                job.previous(&t, inclusive)
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems: {:#?}",
        problems.len(),
        &problems[..problems.len().min(10)]
    );
}

const DST_SCHEDULES: &[&str] = &[
    "0 30 2 * * *",
    "0 30 1 * * *",
    "0 0 0 * * *",
    "0 30 0 * * *",
    "0 45 23 * * *",
    "0 0 * * * *",
    "0 30 * * * *",
    "0 */15 * * * *",
    "0 30 2,14 * * *",
    "0 0,30 1-3 * * *",
    "0 0 0 * * SUN",
];

/// A short sweep of the DST rule: both transitions of a year in a few
/// zones (a 1 h gap at 02:00, a 30 min shift, a gap at midnight, a skipped
/// day).
#[test]
fn ticks_follow_the_dst_rule_around_transitions() {
    dst_sweep(
        &[
            ("Europe/Berlin", 2025),
            ("Australia/Lord_Howe", 2025),
            ("America/Santiago", 2025),
            ("Pacific/Apia", 2011),
        ],
        DST_SCHEDULES,
    );
}

/// The full sweep: more zones (negative DST, a 2 h shift, gaps at
/// midnight) and years.
#[test]
#[ignore = "slow: the full DST sweep"]
fn ticks_follow_the_dst_rule_around_transitions_everywhere() {
    dst_sweep(
        &[
            ("Europe/Berlin", 2025),
            ("Europe/London", 2025),
            ("Europe/Dublin", 2025),
            ("America/New_York", 2025),
            ("America/Havana", 2025),
            ("America/Santiago", 2025),
            ("America/Sao_Paulo", 2018),
            ("Asia/Beirut", 2025),
            ("Antarctica/Troll", 2025),
            ("Australia/Lord_Howe", 2025),
            ("Australia/Sydney", 2025),
            ("Pacific/Apia", 2011),
            ("Pacific/Chatham", 2025),
        ],
        DST_SCHEDULES,
    );
}
