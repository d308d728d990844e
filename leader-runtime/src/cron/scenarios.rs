//! Scenarios run on both backends: the in-memory one with paused time
//! (`tests.rs`) and a real `redis-server` (`redis_tests.rs`). Each drives
//! firings at chosen times by the job's clock (`fire_at`), so the times are
//! exact and the backends see the same calls.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use tokio::sync::Notify;

use super::{JobBuilder, JobShared, Missed, Outcome, Overlap};
use crate::Runtime;

pub(super) const G: &str = "cron";

/// What bodies ran: (host, tick id, catch-up).
pub(super) type Ran = Arc<Mutex<Vec<(String, String, bool)>>>;

pub(super) fn at(secs: i64, millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap() + TimeDelta::milliseconds(millis)
}

/// A whole second a little after now (so leases are valid for these firings).
pub(super) fn base() -> i64 {
    Utc::now().timestamp() + 10
}

pub(super) fn ids(ran: &Ran) -> Vec<String> {
    ran.lock().unwrap().iter().map(|r| r.1.clone()).collect()
}

/// A job of `b` whose body records into `ran`, built at `created`.
pub(super) fn recording(
    b: JobBuilder,
    rt: &Runtime,
    ran: &Ran,
    created: DateTime<Utc>,
) -> Arc<JobShared> {
    let ran = ran.clone();
    let host = rt.instance_id().to_owned();
    let mut job = b
        .runtime(rt)
        .prepare(move |tick| {
            ran.lock()
                .unwrap()
                .push((host.clone(), tick.id().to_owned(), tick.catch_up()));
            async {}
        })
        .unwrap();
    job.created = created;
    Arc::new(job)
}

async fn outcomes(rt: &Runtime, name: &str) -> Vec<(i64, Outcome)> {
    let mut runs: Vec<(i64, Outcome)> = rt
        .cron_history(G, name)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (super::history::unix_ms(r.scheduled) / 1000, r.outcome))
        .collect();
    runs.sort_by_key(|r| r.0);
    runs
}

/// A claim of `ticks` by `rt`'s leadership `token` at clock `t` (unix
/// ms), skipping overlaps, with no floor, the job built at `t`; the tests
/// change what they ask about.
pub(super) fn request<'a>(
    rt: &'a Runtime,
    keys: &'a crate::backend::cron::JobKeys,
    token: u64,
    t: i64,
    ticks: &'a [(i64, crate::backend::cron::Mode)],
) -> crate::backend::cron::ClaimRequest<'a> {
    crate::backend::cron::ClaimRequest {
        group: G,
        keys,
        id: rt.instance_id(),
        token,
        clock_ms: t,
        skip_overlap: true,
        busy_ttl: Duration::from_secs(60),
        history_len: 20,
        floor_ms: 0,
        restore_floor_ms: 0,
        created_ms: t,
        claimer: 7,
        ticks,
    }
}

/// A job key lost on its own (evicted, deleted) while the lease record
/// keeps its mark: a tick it had run is not run again (before: the claim
/// trusted every tick, as for a new job, and ran it twice); `lose` loses
/// the key.
pub(super) async fn a_lost_job_key<F, Fut>(rt: &Runtime, lose: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use crate::backend::cron::{ClaimRequest, Claimed, JobKeys, Mode};
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let token = rt.status()[0].token.unwrap();
    let keys = JobKeys::new("leader", G, "lost");
    let backend = &rt.cron_ctx().backend;
    let t = base() * 1000;
    let ticks = [(t, Mode::Run)];
    let claim = |claimer: u64| {
        let req = ClaimRequest {
            skip_overlap: false,
            // The claimer's clock plus the skew: after the tick.
            restore_floor_ms: t + 1_000,
            created_ms: t - 60_000,
            claimer,
            ..request(rt, &keys, token, t, &ticks)
        };
        async move { backend.cron_claim(&req).await.unwrap().unwrap() }
    };
    assert_eq!(claim(7).await, [Claimed::New]);
    lose(keys.job.clone()).await;
    // A job object that has not decided the tick (another instance's, or
    // one built again) asks for it: refused, recorded as missed.
    assert_eq!(claim(8).await, [Claimed::Refused]);
    assert_eq!(claim(8).await, [Claimed::Taken]);
}

/// The claim's rules for a new job and for catch-ups, asked directly: a
/// job with no decided tick decides none before it was built (answered
/// `taken`, not recorded); a catch-up (`Mode::CatchUp`) while a run is in
/// flight is left undecided (`wait`: not recorded, the watermark not
/// moved) and claimed once the run ended; an on-time tick is skipped.
pub(super) async fn claim_rules(rt: &Runtime) {
    use crate::backend::cron::{busy_mark, Claimed, JobKeys, Mode};
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let token = rt.status()[0].token.unwrap();
    let keys = JobKeys::new("leader", G, "rules");
    let backend = &rt.cron_ctx().backend;
    let t = base() * 1000;
    let claim = |ticks: &'static [(i64, Mode)]| {
        let keys = keys.clone();
        async move {
            let ticks: Vec<(i64, Mode)> = ticks.iter().map(|&(s, m)| (t + s * 1000, m)).collect();
            let req = request(rt, &keys, token, t, &ticks);
            backend.cron_claim(&req).await.unwrap().unwrap()
        }
    };
    use Claimed::{Busy, Missed, New, Ours, Taken, Wait};
    assert_eq!(
        claim(&[(-2, Mode::Miss), (-1, Mode::Run)]).await,
        [Taken, Taken]
    );
    assert_eq!(claim(&[(0, Mode::Run)]).await, [New]);
    assert_eq!(
        claim(&[(1, Mode::Miss), (2, Mode::CatchUp)]).await,
        [Missed, Wait]
    );
    assert_eq!(claim(&[(2, Mode::CatchUp)]).await, [Wait]);
    let mark = busy_mark(t, token);
    backend
        .cron_done(G, &keys, &mark, "entry", 20)
        .await
        .unwrap();
    assert_eq!(claim(&[(2, Mode::CatchUp)]).await, [New]);
    // The same claim again (its reply was lost): ours, run it.
    assert_eq!(claim(&[(2, Mode::CatchUp)]).await, [Ours]);
    // Its start, right before the body: once only.
    let id = rt.instance_id();
    let start = |claimer| backend.cron_start(G, &keys, id, token, t + 2000, claimer);
    assert!(!start(8).await.unwrap(), "another job object's start");
    assert!(start(7).await.unwrap());
    assert!(!start(7).await.unwrap(), "started twice");
    assert_eq!(claim(&[(3, Mode::Run)]).await, [Busy]);
    // Once started, t+2 is decided: a plan that reaches it again (a run
    // longer than the look-back, whose firing then planned from its old
    // time) must not run it twice.
    assert_eq!(claim(&[(2, Mode::CatchUp)]).await, [Taken]);
    assert_eq!(claim(&[(1, Mode::Run)]).await, [Taken]);
    // Recorded: t+1 missed, t+3 skipped, and the one run's entry.
    assert_eq!(
        rt.cron_ctx()
            .backend
            .cron_history(G, &keys)
            .await
            .unwrap()
            .len(),
        3
    );
}

/// One leader fires at `t`, then not again until `t + 6` (a gap: nobody
/// fired in between); tolerance 1 s, so `t+1`..`t+5` are missed. Each
/// policy runs what it says, and the history records the rest as missed.
pub(super) async fn missed_policies(rt: &Runtime) {
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let t = base();
    let window = Missed::All {
        window: Duration::from_millis(3500),
    };
    // (name, policy, cap, ticks that run: seconds after t, catch-up)
    type Case<'a> = (&'a str, Missed, usize, &'a [(i64, bool)]);
    let cases: [Case<'_>; 4] = [
        ("skip", Missed::Skip, 1, &[(0, false), (6, false)]),
        (
            "latest",
            Missed::Latest,
            1,
            &[(0, false), (5, true), (6, false)],
        ),
        (
            "all",
            window,
            16,
            &[(0, false), (3, true), (4, true), (5, true), (6, false)],
        ),
        (
            "all-capped",
            window,
            1,
            &[(0, false), (5, true), (6, false)],
        ),
    ];
    for (name, missed, cap, expected) in cases {
        let ran = Ran::default();
        let job = recording(
            JobBuilder::new("* * * * * *", G)
                .name(name)
                .missed(missed)
                .max_catch_up(cap)
                .tolerance(Duration::from_secs(1)),
            rt,
            &ran,
            at(t, 0),
        );
        job.fire_at(at(t, 100)).await;
        job.fire_at(at(t + 6, 100)).await;
        let got: Vec<(i64, bool)> = ran
            .lock()
            .unwrap()
            .iter()
            .map(|(_, id, catch_up)| {
                (
                    id.rsplit(':').next().unwrap().parse::<i64>().unwrap() / 1000 - t,
                    *catch_up,
                )
            })
            .collect();
        assert_eq!(got, expected, "{name}");
        // Every tick from t to t+6 is in the history: ran, or missed.
        let history = outcomes(rt, name).await;
        assert_eq!(history.len(), 7, "{name}: {history:?}");
        for (i, (secs, outcome)) in history.iter().enumerate() {
            assert_eq!(*secs, t + i as i64, "{name}: {history:?}");
            let ran = expected.iter().any(|(s, _)| *s == i as i64);
            let want = if ran { Outcome::Ok } else { Outcome::Missed };
            assert_eq!(*outcome, want, "{name}: tick t+{i}: {history:?}");
        }
    }
}

/// Berlin time: a 02:30 job on the spring-forward day (02:00 → 03:00) runs
/// once, at 03:00 CEST; on the fall-back day (the hour 02:00–03:00 twice)
/// once, at the first 02:30; an hourly job runs at the first 02:00, not the
/// repeated one, then at 03:00 CET. Ids are UTC instants.
pub(super) async fn dst(rt: &Runtime) {
    assert!(rt.run_if_leader(G, || async {}).await.is_some());
    let berlin = chrono_tz::Europe::Berlin;
    let utc = |y, mo, d, h, mi| Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap();
    let job = |name: &str, schedule: &str, ran: &Ran, created: DateTime<Utc>| {
        recording(
            JobBuilder::new(schedule, G)
                .name(name)
                .time_zone(berlin)
                .tolerance(Duration::from_secs(1)),
            rt,
            ran,
            created,
        )
    };
    let ms = |t: DateTime<Utc>| t.timestamp_millis();

    // Spring forward, 2025-03-30: 01:00 UTC is 02:00 CET = 03:00 CEST.
    let ran = Ran::default();
    let spring = job("spring", "0 30 2 * * *", &ran, utc(2025, 3, 30, 0, 0));
    for t in [
        utc(2025, 3, 30, 0, 59),
        utc(2025, 3, 30, 1, 0),
        utc(2025, 3, 30, 1, 30),
    ] {
        spring.fire_at(t + TimeDelta::milliseconds(300)).await;
    }
    assert_eq!(
        ids(&ran),
        [format!("spring:{}", ms(utc(2025, 3, 30, 1, 0)))]
    );

    // Fall back, 2025-10-26: 00:30 UTC is 02:30 CEST, 01:30 UTC is 02:30 CET.
    let ran = Ran::default();
    let fall = job("fall", "0 30 2 * * *", &ran, utc(2025, 10, 25, 23, 0));
    let hourly = job("hourly", "0 0 * * * *", &ran, utc(2025, 10, 25, 23, 0));
    for t in [
        utc(2025, 10, 26, 0, 0),
        utc(2025, 10, 26, 0, 30),
        utc(2025, 10, 26, 1, 0),
        utc(2025, 10, 26, 1, 30),
        utc(2025, 10, 26, 2, 0),
    ] {
        fall.fire_at(t + TimeDelta::milliseconds(300)).await;
        hourly.fire_at(t + TimeDelta::milliseconds(300)).await;
    }
    let mut got = ids(&ran);
    got.sort();
    let mut want = vec![
        format!("fall:{}", ms(utc(2025, 10, 26, 0, 30))),
        format!("hourly:{}", ms(utc(2025, 10, 26, 0, 0))),
        format!("hourly:{}", ms(utc(2025, 10, 26, 2, 0))),
    ];
    want.sort();
    assert_eq!(got, want);
    // The same instants whatever zone the schedule is in: UTC ids.
    let paris: Tz = "Europe/Paris".parse().unwrap();
    let ran = Ran::default();
    let in_paris = recording(
        JobBuilder::new("0 30 2 * * *", G)
            .name("paris")
            .time_zone(paris)
            .tolerance(Duration::from_secs(1)),
        rt,
        &ran,
        utc(2025, 10, 26, 0, 0),
    );
    in_paris
        .fire_at(utc(2025, 10, 26, 0, 30) + TimeDelta::milliseconds(300))
        .await;
    assert_eq!(
        ids(&ran),
        [format!("paris:{}", ms(utc(2025, 10, 26, 0, 30)))]
    );
}

/// A job slower than its period, across a handover: `a` runs tick `t` and
/// loses its lease while the body still runs; `b` leads. With
/// `Overlap::Skip`, `b` skips ticks until `a`'s run ends, then runs the
/// next; with `Allow`, `b` runs at once. `lose` takes `a`'s lease away
/// (as a partition would), `elect_b` waits until `b` leads.
pub(super) async fn overlap_across_handover<L, E>(
    a: &Runtime,
    b: &Runtime,
    overlap: Overlap,
    lose: L,
    elect_b: E,
) where
    L: std::future::Future<Output = ()>,
    E: std::future::Future<Output = ()>,
{
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let name = match overlap {
        Overlap::Skip => "slow-skip",
        Overlap::Allow => "slow-allow",
    };
    let t = base();
    let ran = Ran::default();
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let slow = {
        let (ran, started, finish) = (ran.clone(), started.clone(), finish.clone());
        let mut job = JobBuilder::new("* * * * * *", G)
            .name(name)
            .overlap(overlap)
            .tolerance(Duration::from_secs(1))
            .runtime(a)
            .prepare(move |tick| {
                ran.lock()
                    .unwrap()
                    .push(("a".into(), tick.id().to_owned(), false));
                let (started, finish) = (started.clone(), finish.clone());
                async move {
                    started.notify_one();
                    finish.notified().await;
                }
            })
            .unwrap();
        job.created = at(t, 0);
        Arc::new(job)
    };
    let on_b = recording(
        JobBuilder::new("* * * * * *", G)
            .name(name)
            .overlap(overlap),
        b,
        &ran,
        at(t, 0),
    );
    let run_a = tokio::spawn({
        let slow = slow.clone();
        async move { slow.fire_at(at(t, 100)).await }
    });
    let limit = Duration::from_secs(30);
    tokio::time::timeout(limit, started.notified())
        .await
        .expect("a's run started");
    lose.await;
    tokio::time::timeout(limit, elect_b).await.expect("b leads");
    assert!(!a.is_leader(G) && b.is_leader(G));
    on_b.fire_at(at(t + 1, 100)).await;
    on_b.fire_at(at(t + 2, 100)).await;
    let during = ids(&ran);
    finish.notify_one();
    run_a.await.unwrap();
    on_b.fire_at(at(t + 3, 100)).await;
    let tick = |s: i64| format!("{name}:{}", s * 1000);
    let history = outcomes(b, name).await;
    match overlap {
        Overlap::Skip => {
            assert_eq!(during, [tick(t)], "b ran while a's run was in flight");
            assert_eq!(ids(&ran), [tick(t), tick(t + 3)]);
            assert_eq!(
                history,
                [
                    (t, Outcome::Ok),
                    (t + 1, Outcome::SkippedOverlap),
                    (t + 2, Outcome::SkippedOverlap),
                    (t + 3, Outcome::Ok)
                ]
            );
        }
        Overlap::Allow => {
            assert_eq!(during, [tick(t), tick(t + 1), tick(t + 2)]);
            assert_eq!(history.len(), 4, "{history:?}");
        }
    }
}

/// The history of job `name`, oldest first: (tick in seconds, outcome,
/// instance).
async fn entries(rt: &Runtime, name: &str) -> Vec<(i64, Outcome, String)> {
    let mut runs: Vec<(i64, Outcome, String)> = rt
        .cron_history(G, name)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                super::history::unix_ms(r.scheduled) / 1000,
                r.outcome,
                r.instance,
            )
        })
        .collect();
    runs.reverse();
    runs
}

/// Claimed, not run: `a` claims minute `m`'s tick of three jobs (as its
/// job would; the body never starts: `a` dies, or the reply comes after its
/// view ended), with a busy mark that would hold for an hour; then `a`
/// loses its lease (`lose`) and `b` leads (`elect_b`). `a` can no longer
/// start the tick; `b`, firing five seconds after it, decides it again per
/// each job's missed-run policy: `Missed::Skip` records it missed,
/// `Latest` and `All` run it (a catch-up), and the history says
/// `abandoned` (a's claim) before that. The stale busy mark does not make
/// `b` skip the next tick. A fourth job's claim that `a` started is never
/// decided again (its body may have run), and its run counts as in flight.
/// (Before: the tick was `taken`, so nothing ran or was recorded for it,
/// and the next one was `skipped-overlap`.)
pub(super) async fn a_claim_that_never_started<L, E>(a: &Runtime, b: &Runtime, lose: L, elect_b: E)
where
    L: std::future::Future<Output = ()>,
    E: std::future::Future<Output = ()>,
{
    use crate::backend::cron::{Claimed, JobKeys, Mode};
    assert!(a.run_if_leader(G, || async {}).await.is_some());
    let token_a = a.status()[0].token.unwrap();
    let m = (base() / 60 + 1) * 60;
    let window = Missed::All {
        window: Duration::from_secs(3600),
    };
    let cases = [
        ("never-started-skip", Missed::Skip),
        ("never-started-latest", Missed::Latest),
        ("never-started-all", window),
    ];
    let ticks = [(m * 1000, Mode::Run)];
    for name in cases.map(|c| c.0).into_iter().chain(["started-latest"]) {
        let keys = JobKeys::new("leader", G, name);
        let req = crate::backend::cron::ClaimRequest {
            busy_ttl: Duration::from_secs(3600),
            created_ms: (m - 30) * 1000,
            ..request(a, &keys, token_a, m * 1000 + 100, &ticks)
        };
        let answer = a.cron_ctx().backend.cron_claim(&req).await.unwrap();
        assert_eq!(answer, Some(vec![Claimed::New]), "{name}");
    }
    // One of them started: its body may have run (a died in it).
    let keys = JobKeys::new("leader", G, "started-latest");
    let backend = &a.cron_ctx().backend;
    let start = backend.cron_start(G, &keys, a.instance_id(), token_a, m * 1000, 7);
    assert!(start.await.unwrap());
    lose.await;
    tokio::time::timeout(Duration::from_secs(30), elect_b)
        .await
        .expect("b leads");
    let a_starts = |name: &'static str| async move {
        let keys = JobKeys::new("leader", G, name);
        a.cron_ctx()
            .backend
            .cron_start(G, &keys, a.instance_id(), token_a, m * 1000, 7)
            .await
            .unwrap()
    };
    for (name, _) in cases {
        assert!(
            !a_starts(name).await,
            "{name}: a started after its lease ended"
        );
    }
    let ran = Ran::default();
    for (name, missed) in cases {
        let job = recording(
            JobBuilder::new("0 * * * * *", G)
                .name(name)
                .missed(missed)
                .tolerance(Duration::from_secs(1)),
            b,
            &ran,
            at(m - 30, 0),
        );
        job.fire_at(at(m + 5, 100)).await;
        assert!(
            !a_starts(name).await,
            "{name}: a started after b decided it"
        );
        job.fire_at(at(m + 60, 100)).await;
    }
    // The started one never runs again, whatever the policy says; its run
    // counts as in flight until its busy mark runs out.
    let started = recording(
        JobBuilder::new("0 * * * * *", G)
            .name("started-latest")
            .missed(Missed::Latest)
            .tolerance(Duration::from_secs(1)),
        b,
        &ran,
        at(m - 30, 0),
    );
    started.fire_at(at(m + 5, 100)).await;
    started.fire_at(at(m + 60, 100)).await;
    assert_eq!(
        entries(b, "started-latest").await,
        [(m + 60, Outcome::SkippedOverlap, b.instance_id().to_owned())]
    );
    let tick = |name: &str, s: i64| format!("{name}:{}", s * 1000);
    let mut got = ran.lock().unwrap().clone();
    got.sort();
    let mut want = vec![
        ("b".to_owned(), tick("never-started-all", m), true),
        ("b".to_owned(), tick("never-started-all", m + 60), false),
        ("b".to_owned(), tick("never-started-latest", m), true),
        ("b".to_owned(), tick("never-started-latest", m + 60), false),
        ("b".to_owned(), tick("never-started-skip", m + 60), false),
    ];
    want.sort();
    assert_eq!(got, want);
    let (ia, ib) = (a.instance_id().to_owned(), b.instance_id().to_owned());
    for (name, missed) in cases {
        let caught_up = if missed == Missed::Skip {
            Outcome::Missed
        } else {
            Outcome::Ok
        };
        assert_eq!(
            entries(b, name).await,
            [
                (m, Outcome::Abandoned, ia.clone()),
                (m, caught_up, ib.clone()),
                (m + 60, Outcome::Ok, ib.clone()),
            ],
            "{name}"
        );
    }
}
