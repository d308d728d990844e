//! `Runtime::once` against a real `redis-server` (each test starts its own):
//! instances calling at the same moment run the body once; a runner cut off
//! and dropped without a release is replaced when its lease expires, under a
//! greater token; a runner deposed mid-body cannot record; a failing body is
//! retried up to the limit and the waiters learn of the failure; a call
//! after completion, also on a restarted instance, runs nothing; the
//! documented least-privilege ACL user is enough; on a Redis Cluster every
//! key of a name is in one slot.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_runtime::{current_lease, Config, Error, Once, OnceRecord, Runtime};
use leader_testkit::{FaultProxy, RedisCluster, RedisServer, Reply};
use tokio::sync::oneshot;
use tokio::time::{sleep, timeout, Instant};

mod support;
const TTL: Duration = Duration::from_millis(1000);
const RENEW: Duration = Duration::from_millis(300);
const NAME: &str = "migrate-2026-12";
const RESULT_KEY: &str = "leader:{once:migrate-2026-12}:result";

fn instance(url: &str, id: &str) -> Runtime {
    Runtime::new(
        Config::builder()
            .redis_url(url)
            .ttl(TTL)
            .renew_interval(RENEW)
            .retry_interval(Duration::from_millis(100))
            .instance_id(id)
            .build()
            .unwrap(),
    )
    .unwrap()
}

/// A body that counts its runs, works for `work`, and returns its token.
fn counting(
    runs: &Arc<AtomicU32>,
    work: Duration,
) -> impl FnOnce() -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<String, std::io::Error>> + Send>,
> {
    let runs = runs.clone();
    move || {
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let token = current_lease().expect("runs under the lease").token();
            sleep(work).await;
            Ok(format!("token {token}"))
        })
    }
}

async fn hget(server: &RedisServer, field: &str) -> Option<String> {
    let reply = server.cmd(&["HGET", RESULT_KEY, field]).await.unwrap();
    reply.as_str().map(str::to_owned)
}

#[tokio::test]
async fn instances_calling_at_the_same_moment_run_the_body_once_and_a_restart_runs_nothing() {
    let server = RedisServer::start().await.unwrap();
    let rts: Vec<Runtime> = (0..4)
        .map(|i| instance(&server.url(), &format!("i{i}")))
        .collect();
    let runs = Arc::new(AtomicU32::new(0));
    let calls = rts.iter().map(|rt| {
        let body = counting(&runs, Duration::from_millis(1500)); // longer than the ttl
        async move { rt.once(NAME, body).await }
    });
    let results: Vec<OnceRecord> = timeout(TTL * 10, futures_util::future::join_all(calls))
        .await
        .expect("every call returns")
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    server.check(runs.load(Ordering::SeqCst) == 1, format!("{results:?}"));
    assert_eq!(results.iter().filter(|r| r.ran_here).count(), 1);
    let done = results.iter().find(|r| r.ran_here).unwrap().clone();
    for r in &results {
        assert_eq!(
            (&r.instance_id, r.token, r.attempts),
            (&done.instance_id, done.token, 1)
        );
        assert_eq!(
            r.summary,
            format!("token {}", done.token),
            "the body's own token"
        );
    }
    assert_eq!(
        hget(&server, "done_by").await.as_deref(),
        Some(done.instance_id.as_str())
    );
    assert_eq!(
        hget(&server, "done_token").await,
        Some(done.token.to_string())
    );
    // Every call released the name's lease.
    assert_eq!(
        rts[0].leader_id("once:migrate-2026-12").await.unwrap(),
        None
    );
    for rt in &rts {
        rt.shutdown().await;
    }

    // A restarted instance gets the record at once, runs nothing, campaigns for nothing.
    let restarted = instance(&server.url(), &done.instance_id);
    let start = Instant::now();
    let again = restarted
        .once(NAME, counting(&runs, Duration::ZERO))
        .await
        .unwrap();
    let took = start.elapsed();
    server.check(took < Duration::from_millis(200), format!("took {took:?}"));
    assert!(!again.ran_here);
    assert_eq!((again.token, &again.summary), (done.token, &done.summary));
    assert_eq!(again.finished_at, done.finished_at);
    assert!(restarted.status().is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    restarted.shutdown().await;
}

#[tokio::test]
async fn a_runner_killed_without_release_is_replaced_when_its_lease_expires() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let a = instance(&proxy.url(), "a");
    let b = instance(&server.url(), "b");
    let (started, is_started) = oneshot::channel();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let _ = started.send(current_lease().unwrap().token());
                std::future::pending::<Result<String, std::io::Error>>().await
            })
            .await
        }
    });
    let first_token = timeout(TTL * 3, is_started).await.unwrap().unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let waiter = tokio::spawn({
        let (b, body) = (b.clone(), counting(&runs, Duration::ZERO));
        async move { b.once(NAME, body).await }
    });
    sleep(TTL * 2).await;
    assert!(!waiter.is_finished(), "waits while the runner renews");

    // "kill -9": a can reach Redis no more, its call and runtime are gone.
    proxy.blackhole();
    let killed = Instant::now();
    runner.abort();
    drop(a);
    // The lease expires one ttl after a's last renewal (a renewal in flight
    // at the kill may still land: up to RENEW later).
    let lease_key = "leader:{once:migrate-2026-12}:lease";
    let pttl = server.cmd(&["PTTL", lease_key]).await.unwrap().as_int();
    let expires = killed + Duration::from_millis(pttl.unwrap_or(0).max(0) as u64);
    let done = timeout(TTL * 5, waiter).await.unwrap().unwrap().unwrap();
    // b takes over at the expiry: an acquire and its body's start take
    // milliseconds on an idle machine. The slack is wide for 2 busy cores
    // (scheduling delays of several hundred ms were seen), yet below the
    // one more ttl a regression (a safe start, a wake-up missed until a
    // later read) would add.
    let late = Instant::now().saturating_duration_since(expires);
    server.check(
        late <= Duration::from_millis(900),
        format!("took over {late:?} after the expiry (PTTL {pttl:?} at the kill)"),
    );
    assert!(done.ran_here);
    assert!(done.token > first_token, "{} <= {first_token}", done.token);
    assert_eq!((done.instance_id.as_str(), done.attempts), ("b", 2));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    b.shutdown().await;
}

#[tokio::test]
async fn a_deposed_runner_cannot_record_and_its_successor_finishes_under_a_greater_token() {
    let server = RedisServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let a = instance(&proxy.url(), "a");
    let b = instance(&server.url(), "b");
    let (a_started, a_is_started) = oneshot::channel();
    let (a_finish, a_may_finish) = oneshot::channel::<()>();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let _ = a_started.send(current_lease().unwrap().token());
                let _ = a_may_finish.await;
                Ok::<_, std::io::Error>("by a")
            })
            .await
        }
    });
    let first_token = timeout(TTL * 3, a_is_started).await.unwrap().unwrap();
    let (b_started, b_is_started) = oneshot::channel();
    let (b_finish, b_may_finish) = oneshot::channel::<()>();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.once(NAME, || async move {
                let _ = b_started.send(current_lease().unwrap().token());
                let _ = b_may_finish.await;
                Ok::<_, std::io::Error>("by b")
            })
            .await
        }
    });
    // A partition: a's lease expires and b takes over while a's body runs.
    proxy.blackhole();
    let second_token = timeout(TTL * 5, b_is_started).await.unwrap().unwrap();
    assert!(second_token > first_token);
    // The partition heals and a's body finishes: the script refuses its record.
    proxy.pass();
    a_finish.send(()).unwrap();
    let late = timeout(TTL * 5, runner).await.unwrap().unwrap();
    assert!(
        matches!(late, Err(Error::OnceUnrecorded { token, .. }) if token == first_token),
        "{late:?}"
    );
    assert_eq!(hget(&server, "done_token").await, None);
    b_finish.send(()).unwrap();
    let done = timeout(TTL * 5, waiter).await.unwrap().unwrap().unwrap();
    assert_eq!((done.token, done.summary.as_str()), (second_token, "by b"));
    assert_eq!(hget(&server, "done_by").await.as_deref(), Some("b"));
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test]
async fn a_failing_body_is_retried_up_to_the_limit_and_the_waiters_learn_it_failed() {
    let server = RedisServer::start().await.unwrap();
    let rts: Vec<Runtime> = (0..3)
        .map(|i| instance(&server.url(), &format!("i{i}")))
        .collect();
    let runs = Arc::new(AtomicU32::new(0));
    let calls = rts.iter().map(|rt| {
        let runs = runs.clone();
        async move {
            Once::new(NAME)
                .attempts(2)
                .timeout(TTL * 10)
                .run_on(rt, || async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    sleep(Duration::from_millis(200)).await;
                    Err::<String, _>(format!("run {n}: no route to redis://app:s3cret@db:6379"))
                })
                .await
        }
    });
    let results = futures_util::future::join_all(calls).await;
    server.check(
        runs.load(Ordering::SeqCst) == 2,
        format!("{} runs: {results:?}", runs.load(Ordering::SeqCst)),
    );
    let mut attempts: Vec<u32> = results
        .iter()
        .filter_map(|r| match r {
            Err(Error::OnceBody { attempt, .. }) => Some(*attempt),
            _ => None,
        })
        .collect();
    attempts.sort();
    assert_eq!(attempts, [1, 2], "{results:?}");
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| match r {
            Err(e @ Error::OnceFailed { attempts: 2, .. }) => Some(e.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "{results:?}");
    assert!(failed[0].contains("failed 2 times"), "{}", failed[0]);
    assert!(
        failed[0].contains("redis://app:***@db:6379"),
        "{}",
        failed[0]
    );
    assert!(!failed[0].contains("s3cret"), "{}", failed[0]);
    assert_eq!(hget(&server, "failures").await.as_deref(), Some("2"));
    assert!(!hget(&server, "error").await.unwrap().contains("s3cret"));

    // After a fix: reset, and the next call runs.
    let status = rts[0].reset_once(NAME).await.unwrap();
    assert_eq!(
        (status.attempts, status.failures, status.done),
        (0, 0, None)
    );
    let done = Once::new(NAME)
        .attempts(2)
        .run_on(&rts[1], counting(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert!(done.ran_here);
    assert_eq!(done.attempts, 1);
    for rt in &rts {
        rt.shutdown().await;
    }
}

#[tokio::test]
async fn the_documented_acl_user_is_enough() {
    // The rules `ConfigBuilder::redis_url` and DEPLOYING.md list.
    const RULES: &str = support::ACL_RULES;
    let server = RedisServer::builder()
        .password("admin-pw")
        .acl_user("app", "app-pw", RULES)
        .start()
        .await
        .unwrap();
    let url = format!("redis://app:app-pw@127.0.0.1:{}", server.port());
    let (a, b) = (instance(&url, "a"), instance(&url, "b"));
    let runs = Arc::new(AtomicU32::new(0));
    let (one, two) = tokio::join!(
        a.once(NAME, counting(&runs, Duration::from_millis(200))),
        b.once(NAME, counting(&runs, Duration::from_millis(200))),
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.token, two.token);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(a.once_status(NAME).await.unwrap().done.is_some());
    assert!(b.reset_once(NAME).await.is_ok());
    let denials = server.cmd(&["ACL", "LOG"]).await.unwrap();
    server.check(
        matches!(&denials, Reply::Array(v) if v.is_empty()),
        format!("ACL denials: {denials:?}"),
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn on_a_redis_cluster_the_body_runs_once() {
    let cluster = RedisCluster::start().await.unwrap();
    let rts: Vec<Runtime> = (0..2)
        .map(|i| {
            Runtime::new(
                Config::builder()
                    .redis_cluster_urls(cluster.urls())
                    .ttl(TTL)
                    .renew_interval(RENEW)
                    .retry_interval(Duration::from_millis(100))
                    .instance_id(format!("i{i}"))
                    .build()
                    .unwrap(),
            )
            .unwrap()
        })
        .collect();
    let runs = Arc::new(AtomicU32::new(0));
    let both = async {
        tokio::join!(
            rts[0].once(NAME, counting(&runs, Duration::from_millis(200))),
            rts[1].once(NAME, counting(&runs, Duration::from_millis(200))),
        )
    };
    // A regression fails here, not at the default five-minute wait.
    let (one, two) = timeout(TTL * 10, both).await.expect("both calls return");
    let (one, two) = (one.unwrap(), two.unwrap());
    cluster.check(runs.load(Ordering::SeqCst) == 1, "the body ran once");
    assert_eq!((one.token, one.ran_here), (two.token, !two.ran_here));
    let status = rts[0].once_status(NAME).await.unwrap();
    assert_eq!(status.done.map(|d| d.token), Some(one.token));
    for rt in &rts {
        rt.shutdown().await;
    }
}
