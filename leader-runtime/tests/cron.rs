//! `leader_runtime::cron` end to end: two instances on one real
//! `redis-server`, each with its own tokio-cron-scheduler firing a
//! per-second job, the second instance's clock a second ahead; leadership
//! moves a → b → a in the middle of seconds. Every tick runs exactly once,
//! and the history, fleet-wide, says so.
// `clock_offset_ms` is a test hook (feature `test-hooks`, which the
// workspace's e2e dev-dependency enables in `cargo test --workspace`).
#![cfg(all(feature = "cron", feature = "test-hooks"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leader_runtime::cron::JobBuilder;
use leader_runtime::Runtime;
use leader_testkit::{RedisServer, Reply};
use tokio_cron_scheduler::JobScheduler;

mod support;
use support::{config, runtime};

const G: &str = "cron";

fn instance(server: &RedisServer, id: &str) -> Runtime {
    let config = config(id).redis_url(server.url());
    runtime(
        config
            .ttl(Duration::from_millis(1500))
            .renew_interval(Duration::from_millis(500)),
    )
}

type Ran = Arc<Mutex<Vec<(&'static str, String)>>>;

async fn scheduler(rt: &Runtime, host: &'static str, offset_ms: i64, ran: &Ran) -> JobScheduler {
    let ran = ran.clone();
    // The skew (1 s) and the scheduler's delays, and not much above the ttl
    // (1.5 s): on a fresh Redis (as after data loss) the first claim refuses
    // the ticks of the tolerance beyond the ttl.
    let job = JobBuilder::new("* * * * * *", G)
        .name("tick")
        .runtime(rt)
        .tolerance(Duration::from_secs(2))
        .clock_offset_ms(offset_ms)
        .build(move |tick| {
            let ran = ran.clone();
            async move {
                assert!(leader_runtime::current_lease().is_some());
                ran.lock().unwrap().push((host, tick.id().to_owned()));
            }
        })
        .unwrap();
    let scheduler = JobScheduler::new().await.unwrap();
    scheduler.add(job).await.unwrap();
    scheduler
}

/// Sleep until the wall clock is `millis` into a second.
async fn until_subsec(millis: u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = now.subsec_millis();
    let wait = (1000 + millis - into) % 1000;
    tokio::time::sleep(Duration::from_millis(u64::from(wait.max(1)))).await;
}

fn ms_of(id: &str) -> i64 {
    id.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_runs_once_across_skewed_clocks_and_handovers() {
    let server = RedisServer::start().await.unwrap();
    let (a, b) = (instance(&server, "a"), instance(&server, "b"));
    // A fresh Redis: the first leader's view turns true after one ttl (safe start).
    a.run_if_leader(G, || async {}).await;
    tokio::time::timeout(Duration::from_secs(5), async {
        while !a.is_leader(G) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leads");
    assert!(b.run_if_leader(G, || async {}).await.is_none());
    let ran = Ran::default();
    let mut sched_a = scheduler(&a, "a", 0, &ran).await;
    let mut sched_b = scheduler(&b, "b", 1000, &ran).await;
    sched_a.start().await.unwrap();
    sched_b.start().await.unwrap();

    tokio::time::sleep(Duration::from_secs(3)).await;
    until_subsec(500).await;
    a.step_down(G).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.check(b.is_leader(G), "b took over");
    tokio::time::sleep(Duration::from_secs(3)).await;
    until_subsec(500).await;
    b.step_down(G).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.check(a.is_leader(G), "a took over again");
    tokio::time::sleep(Duration::from_secs(3)).await;
    sched_a.shutdown().await.unwrap();
    sched_b.shutdown().await.unwrap();
    // Let a firing already under way finish.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let ran = ran.lock().unwrap().clone();
    let hosts: Vec<_> = ran.iter().map(|(h, _)| *h).collect();
    server.check(
        hosts.contains(&"a") && hosts.contains(&"b"),
        format!("both led: {ran:?}"),
    );
    let mut ticks: Vec<i64> = ran.iter().map(|(_, id)| ms_of(id)).collect();
    ticks.sort();
    let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
    let expected: Vec<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .collect();
    server.check(
        ticks == expected,
        format!("every tick once, none missing: {ran:?}"),
    );
    server.check(ticks.len() >= 8, format!("ran long enough: {ran:?}"));
    let last_tick = last;

    // The decisions: one hash per job, in the group's slot, no expiry; the
    // history of the last runs (20 by default), fleet-wide.
    match server
        .cmd(&["HGET", &format!("leader:{{{G}}}:cron:tick"), "last"])
        .await
        .unwrap()
    {
        Reply::Bulk(last) => server.check(
            last.parse::<i64>().ok() == Some(last_tick),
            format!("the watermark is the last tick: {last:?}"),
        ),
        other => server.fail(format!("HGET last: {other:?}")),
    }
    // Every run, and before them the ticks the first claim refused on a
    // fresh Redis (the tolerance beyond the ttl), recorded as missed.
    let history = a.cron_history(G, "tick").await.unwrap();
    let (runs, refused): (Vec<_>, Vec<_>) = history
        .iter()
        .partition(|r| r.outcome == leader_runtime::cron::Outcome::Ok);
    server.check(runs.len() == ticks.len().min(20), format!("{history:?}"));
    let before_first = |r: &&leader_runtime::cron::Run| {
        let ms = r
            .scheduled
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        r.outcome == leader_runtime::cron::Outcome::Missed && (ms as i64) < first
    };
    server.check(refused.iter().all(before_first), format!("{history:?}"));
    a.shutdown().await;
    b.shutdown().await;
}
