//! Unit tests of `once` on the in-memory backend, with paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{sleep, Instant};

use crate::test_support::{instance, paused_current_thread, settle, Captured, RENEW, TTL};
use crate::{current_lease, Error, MemoryBackend, Once, OnceRecord, Runtime};

const NAME: &str = "migrate-2026-12";

/// A body that counts its runs and returns its token as the summary.
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
            let token = current_lease()
                .expect("the body runs under the lease")
                .token();
            sleep(work).await;
            Ok(format!("token {token}"))
        })
    }
}

fn fleet(mem: &MemoryBackend, n: usize) -> Vec<Runtime> {
    (0..n).map(|i| instance(mem, &format!("i{i}"))).collect()
}

#[tokio::test(start_paused = true)]
async fn callers_at_the_same_moment_run_the_body_once_and_all_get_its_record() {
    let mem = MemoryBackend::new();
    let rts = fleet(&mem, 3);
    let runs = Arc::new(AtomicU32::new(0));
    let calls = rts.iter().map(|rt| {
        let body = counting(&runs, Duration::from_secs(10)); // longer than the ttl
        async move { rt.once(NAME, body).await }
    });
    let results: Vec<OnceRecord> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(results.iter().filter(|r| r.ran_here).count(), 1);
    let first = &results[0];
    for r in &results {
        assert_eq!(
            (&r.instance_id, r.token, r.attempts),
            (&first.instance_id, first.token, 1)
        );
        assert_eq!(r.summary, format!("token {}", first.token));
    }
    // Every call let go of the name's group.
    for rt in &rts {
        assert!(rt.status().is_empty(), "{:?}", rt.status());
    }
    assert_eq!(
        rts[0].leader_id("once:migrate-2026-12").await.unwrap(),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn waiters_return_right_after_the_runner_records() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let runs = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let runner = tokio::spawn({
        let (a, body) = (a.clone(), counting(&runs, Duration::from_secs(7)));
        async move { a.once(NAME, body).await }
    });
    settle().await;
    let waited = b.once(NAME, counting(&runs, Duration::ZERO)).await.unwrap();
    // The runner's release wakes b's election at once: no poll interval late.
    assert_eq!(start.elapsed(), Duration::from_secs(7));
    assert!(!waited.ran_here);
    assert!(runner.await.unwrap().unwrap().ran_here);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_after_completion_returns_the_record_without_running_also_after_a_restart() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let runs = Arc::new(AtomicU32::new(0));
    let done = a.once(NAME, counting(&runs, Duration::ZERO)).await.unwrap();
    assert!(done.ran_here);
    a.shutdown().await;

    // A new instance, and a's restart: both get the record, nothing runs.
    for id in ["b", "a"] {
        let rt = instance(&mem, id);
        let start = Instant::now();
        let again = rt
            .once(NAME, counting(&runs, Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(!again.ran_here);
        assert_eq!(
            (again.token, again.summary.as_str()),
            (done.token, done.summary.as_str())
        );
        assert_eq!(again.finished_at, done.finished_at);
        assert!(rt.status().is_empty(), "no election was started");
        rt.shutdown().await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_body_is_retried_up_to_the_limit_then_everyone_learns_it_failed() {
    let mem = MemoryBackend::new();
    let rts = fleet(&mem, 3);
    let runs = Arc::new(AtomicU32::new(0));
    let calls = rts.iter().map(|rt| {
        let runs = runs.clone();
        async move {
            Once::new(NAME)
                .attempts(2)
                .run_on(rt, || async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    sleep(Duration::from_secs(1)).await;
                    Err::<String, _>(format!(
                        "run {n}: cannot connect to postgres://app:s3cret@db/x"
                    ))
                })
                .await
        }
    });
    let results = futures_util::future::join_all(calls).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "{results:?}");
    let mut ran: Vec<u32> = results
        .iter()
        .filter_map(|r| match r {
            Err(
                e @ Error::OnceBody {
                    attempt, source, ..
                },
            ) => {
                assert!(
                    source.get_ref().to_string().contains("s3cret"),
                    "the caller's own error"
                );
                assert!(!e.to_string().contains("s3cret"), "{e}");
                assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
                Some(*attempt)
            }
            _ => None,
        })
        .collect();
    ran.sort();
    assert_eq!(ran, [1, 2], "{results:?}");
    let failed: Vec<&Error> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|e| matches!(e, Error::OnceFailed { .. }))
        .collect();
    assert_eq!(failed.len(), 1, "{results:?}");
    let text = failed[0].to_string();
    assert!(
        text.starts_with("once `migrate-2026-12` failed 2 times (the attempt limit); last error: run 2: cannot connect to postgres://app:***@db/x"),
        "{text}"
    );

    // A later call gets the failure at once; a higher limit tries again.
    let runs_before = runs.load(Ordering::SeqCst);
    let start = Instant::now();
    let late = Once::new(NAME)
        .attempts(2)
        .run_on(&rts[0], counting(&runs, Duration::ZERO))
        .await;
    assert!(
        matches!(late, Err(Error::OnceFailed { attempts: 2, .. })),
        "{late:?}"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    let more = Once::new(NAME)
        .attempts(3)
        .run_on(&rts[1], counting(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert!(more.ran_here);
    assert_eq!(more.attempts, 3);
    assert_eq!(runs.load(Ordering::SeqCst), runs_before + 1);
    let status = rts[2].once_status(NAME).await.unwrap();
    assert_eq!((status.attempts, status.failures), (3, 2));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_runner_is_replaced_at_once_under_a_greater_token() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
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
    let first_token = is_started.await.unwrap();
    let waiter = tokio::spawn({
        let (b, runs) = (b.clone(), Arc::new(AtomicU32::new(0)));
        async move { b.once(NAME, counting(&runs, Duration::ZERO)).await }
    });
    sleep(Duration::from_secs(60)).await;
    assert!(!waiter.is_finished(), "waits while the runner runs");
    let aborted = Instant::now();
    runner.abort();
    let done = waiter.await.unwrap().unwrap();
    assert_eq!(
        aborted.elapsed(),
        Duration::ZERO,
        "the release wakes the waiter"
    );
    assert!(done.ran_here);
    assert!(done.token > first_token);
    assert_eq!((done.instance_id.as_str(), done.attempts), ("b", 2));
}

#[tokio::test(start_paused = true)]
async fn a_runner_that_lost_its_lease_cannot_record_and_a_waiter_finishes_under_a_greater_token() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (started, is_started) = oneshot::channel();
    let (finish, may_finish) = oneshot::channel::<()>();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let _ = started.send(current_lease().unwrap().token());
                let _ = may_finish.await;
                Ok::<_, std::io::Error>("a's summary")
            })
            .await
        }
    });
    let first_token = is_started.await.unwrap();
    let (b_started, b_is_started) = oneshot::channel();
    let (b_finish, b_may_finish) = oneshot::channel::<()>();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.once(NAME, || async move {
                let _ = b_started.send(current_lease().unwrap().token());
                let _ = b_may_finish.await;
                Ok::<_, std::io::Error>("b's summary")
            })
            .await
        }
    });
    settle().await;
    // a's lease vanishes (a partition, an eviction): a's next renewal (within
    // RENEW) ends its view, while its body still runs.
    mem.lose_lease("leader", "once:migrate-2026-12");
    let lost = Instant::now();
    // b takes the lease once a's view has certainly ended (the safe start of
    // a lease key gone early: at most one TTL), while a's body still runs:
    // a's own election, out of the race since its attempt began, does not
    // take it back.
    let second_token = tokio::time::timeout(TTL + Duration::from_millis(10), b_is_started)
        .await
        .expect("b runs the body within one ttl of the loss")
        .unwrap();
    assert!(second_token > first_token);
    assert!(!a.is_leader("once:migrate-2026-12"));
    assert!(!runner.is_finished());
    // a's body finishes after that: its success cannot be recorded.
    finish.send(()).unwrap();
    let late = runner.await.unwrap();
    assert!(
        matches!(late, Err(Error::OnceUnrecorded { token, .. }) if token == first_token),
        "{late:?}"
    );
    b_finish.send(()).unwrap();
    let done = waiter.await.unwrap().unwrap();
    assert!(
        lost.elapsed() <= TTL + Duration::from_millis(10),
        "{:?}",
        lost.elapsed()
    );
    assert!(done.ran_here);
    assert_eq!(
        (done.token, done.summary.as_str()),
        (second_token, "b's summary")
    );
    assert_eq!((done.instance_id.as_str(), done.attempts), ("b", 2));
    let status = a.once_status(NAME).await.unwrap();
    assert_eq!(status.done.unwrap().token, done.token);
}

#[tokio::test(start_paused = true)]
async fn a_success_recorded_but_whose_reply_was_lost_with_the_lease_is_still_the_runners() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (started, is_started) = oneshot::channel();
    let (finish, may_finish) = oneshot::channel::<()>();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let _ = started.send(current_lease().unwrap().token());
                let _ = may_finish.await;
                Ok::<_, std::io::Error>("a's summary")
            })
            .await
        }
    });
    let token = is_started.await.unwrap();
    // From now on every step applies, but its reply is lost.
    mem.lose_once_replies(true);
    finish.send(()).unwrap();
    settle().await;
    let status = a.once_status(NAME).await.unwrap();
    assert_eq!(status.done.map(|d| d.token), Some(token), "recorded");
    assert!(!runner.is_finished(), "retries while the lease is valid");
    // Then the lease is lost too: the runner's view ends with no reply.
    mem.lose_lease("leader", "once:migrate-2026-12");
    let done = tokio::time::timeout(RENEW * 2, runner)
        .await
        .expect("the runner ends with its view")
        .unwrap()
        .unwrap();
    assert!(done.ran_here);
    assert_eq!((done.token, done.summary.as_str()), (token, "a's summary"));
}

#[tokio::test(start_paused = true)]
async fn a_begin_and_a_failure_retried_after_lost_replies_count_once() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let (started, is_started) = oneshot::channel();
    let (fail, may_fail) = oneshot::channel::<()>();
    mem.lose_once_replies(true);
    let call = tokio::spawn({
        let a = a.clone();
        async move {
            Once::new(NAME)
                .attempts(1)
                .run_on(&a, || async move {
                    let _ = started.send(());
                    let _ = may_fail.await;
                    Err::<String, _>("boom")
                })
                .await
        }
    });
    // The begin applied, its reply lost, and it was tried again meanwhile.
    sleep(Duration::from_secs(3)).await;
    assert_eq!(a.once_status(NAME).await.unwrap().attempts, 1);
    mem.lose_once_replies(false);
    is_started.await.unwrap();
    // The failure's record: applied, its reply lost, tried again.
    mem.lose_once_replies(true);
    fail.send(()).unwrap();
    sleep(Duration::from_secs(1)).await;
    mem.lose_once_replies(false);
    let failed = call.await.unwrap();
    assert!(
        matches!(failed, Err(Error::OnceBody { attempt: 1, .. })),
        "{failed:?}"
    );
    let status = a.once_status(NAME).await.unwrap();
    assert_eq!((status.attempts, status.failures), (1, 1));
    assert_eq!(status.last_error.as_deref(), Some("boom"));
}

#[tokio::test(start_paused = true)]
async fn crashed_attempts_alone_use_up_the_limit_and_a_later_caller_reads_it() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    for _ in 0..2 {
        let (started, is_started) = oneshot::channel();
        let call = tokio::spawn({
            let a = a.clone();
            async move {
                Once::new(NAME)
                    .attempts(2)
                    .run_on(&a, || async move {
                        let _ = started.send(());
                        std::future::pending::<Result<String, std::io::Error>>().await
                    })
                    .await
            }
        });
        is_started.await.unwrap();
        call.abort(); // a crash: nothing recorded but the attempt
        let _ = call.await;
    }
    let status = a.once_status(NAME).await.unwrap();
    assert_eq!((status.attempts, status.failures), (2, 0));
    // Another instance's call learns it from its first read: no election.
    let b = instance(&mem, "b");
    let mut events = b.subscribe();
    let runs = Arc::new(AtomicU32::new(0));
    let late = Once::new(NAME)
        .attempts(2)
        .run_on(&b, counting(&runs, Duration::ZERO))
        .await;
    let Err(Error::OnceFailed {
        attempts: 2,
        last_error,
        ..
    }) = &late
    else {
        panic!("{late:?}")
    };
    assert!(
        last_error.contains("ended without a result"),
        "{last_error}"
    );
    assert!(events.try_recv().is_err(), "b campaigned for nothing");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_reset_is_refused_while_an_attempt_runs() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (started, is_started) = oneshot::channel();
    let (finish, may_finish) = oneshot::channel::<()>();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let _ = started.send(());
                let _ = may_finish.await;
                Err::<String, _>("boom")
            })
            .await
        }
    });
    is_started.await.unwrap();
    let busy = b.reset_once(NAME).await;
    assert!(matches!(busy, Err(Error::OnceBusy { .. })), "{busy:?}");
    assert_eq!(
        b.once_status(NAME).await.unwrap().attempts,
        1,
        "still counted"
    );
    finish.send(()).unwrap();
    assert!(runner.await.unwrap().is_err());
    let reset = b.reset_once(NAME).await.unwrap();
    assert_eq!(
        (reset.attempts, reset.failures, reset.last_error),
        (0, 0, None)
    );
}

#[tokio::test(start_paused = true)]
async fn a_deposed_runner_that_finishes_after_its_successor_recorded_gets_that_record() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (started, is_started) = oneshot::channel();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async move {
                let token = current_lease().unwrap().token();
                let _ = started.send(());
                // Deposed mid-way, it goes on past its successor's success.
                sleep(Duration::from_secs(60)).await;
                Ok::<_, std::io::Error>(format!("token {token}"))
            })
            .await
        }
    });
    is_started.await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let waiter = tokio::spawn({
        let (b, body) = (b.clone(), counting(&runs, Duration::ZERO));
        async move { b.once(NAME, body).await }
    });
    settle().await;
    mem.lose_lease("leader", "once:migrate-2026-12");
    let done = waiter.await.unwrap().unwrap();
    assert!(done.ran_here);
    let late = runner.await.unwrap().unwrap();
    assert!(!late.ran_here);
    assert_eq!((late.token, late.instance_id.as_str()), (done.token, "b"));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gives_up_at_its_timeout() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let runs = Arc::new(AtomicU32::new(0));
    let runner = tokio::spawn({
        let (a, body) = (a.clone(), counting(&runs, Duration::from_secs(600)));
        async move { a.once(NAME, body).await }
    });
    settle().await;
    let start = Instant::now();
    let waited = Once::new(NAME)
        .timeout(Duration::from_secs(20))
        .run_on(&b, counting(&runs, Duration::ZERO))
        .await;
    assert_eq!(start.elapsed(), Duration::from_secs(20));
    let err = waited.unwrap_err();
    assert!(matches!(err, Error::OnceTimeout { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "once `migrate-2026-12`: no result after 20s (another instance may still be running it)"
    );
    assert!(b.status().is_empty(), "the waiter let go of the group");
    assert!(runner.await.unwrap().unwrap().ran_here);
}

#[tokio::test(start_paused = true)]
async fn calls_on_one_runtime_take_turns() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    let runs = Arc::new(AtomicU32::new(0));
    let (one, two) = tokio::join!(
        a.once(NAME, counting(&runs, Duration::from_secs(5))),
        a.once(NAME, counting(&runs, Duration::from_secs(5))),
    );
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(one.ran_here != two.ran_here);
    assert_eq!(one.token, two.token);
}

#[tokio::test(start_paused = true)]
async fn bad_names_and_limits_are_errors() {
    let a = instance(&MemoryBackend::new(), "a");
    let body = || async { Ok::<_, std::io::Error>("") };
    let bad = a.once("a b", body).await.unwrap_err();
    assert!(matches!(bad, Error::InvalidGroup { .. }), "{bad}");
    let long = a.once(&"x".repeat(124), body).await.unwrap_err();
    assert!(long.to_string().contains("at most 123 bytes"), "{long}");
    assert!(a.once(&"x".repeat(123), body).await.is_ok());
    let forever = Once::new("forever").timeout(Duration::MAX).run_on(&a, body);
    assert!(forever.await.unwrap().ran_here);
    let zero = Once::new(NAME).attempts(0).run_on(&a, body).await;
    assert!(matches!(
        zero,
        Err(Error::Config {
            field: "attempts",
            ..
        })
    ));
    a.shutdown().await;
    let down = a.once(NAME, body).await.unwrap_err();
    assert!(matches!(down, Error::ShutDown), "{down}");
}

#[tokio::test(start_paused = true)]
async fn long_summaries_are_cut_and_the_backend_outage_is_waited_out() {
    let mem = MemoryBackend::new();
    let a = instance(&mem, "a");
    mem.set_available(false);
    let call = tokio::spawn({
        let a = a.clone();
        async move {
            a.once(NAME, || async { Ok::<_, std::io::Error>("é".repeat(600)) })
                .await
        }
    });
    sleep(Duration::from_secs(30)).await;
    assert!(!call.is_finished());
    mem.set_available(true);
    let done = call.await.unwrap().unwrap();
    assert_eq!(done.summary.len(), 1024);
    assert!(done.ran_here);
}

#[test]
fn backend_errors_in_a_burst_are_logged_at_warn_once() {
    let captured = Captured::default();
    let subscriber = captured.debug_subscriber();
    tracing::subscriber::with_default(subscriber, || {
        let tokio = paused_current_thread();
        tokio.block_on(async {
            let mem = MemoryBackend::new();
            let a = instance(&mem, "a");
            // Every start of an attempt fails (its reply lost), and is
            // tried again every retry_interval.
            mem.lose_once_replies(true);
            let call = tokio::spawn({
                let a = a.clone();
                async move {
                    a.once(NAME, || async { Ok::<_, std::io::Error>("ok") })
                        .await
                }
            });
            sleep(Duration::from_secs(5)).await;
            mem.lose_once_replies(false);
            assert!(call.await.unwrap().unwrap().ran_here);
        });
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let count = |level: &str| {
        text.lines()
            .filter(|l| l.contains(level) && l.contains("once: starting an attempt failed"))
            .count()
    };
    assert_eq!(count("WARN"), 1, "{text}");
    assert!(count("DEBUG") >= 5, "{text}");
}

/// A runner whose `begin` was applied while its lease held, but whose
/// answer arrived after its view ended, must not start the body: by then the
/// next runner (another instance, elected once the lease expired) may run
/// its own attempt. (Before the check in `attempt`, `a` started its body at
/// 3.4 s, its view over since 2.97 s, beside `b`'s from 3.0 s.)
#[tokio::test(start_paused = true)]
async fn a_begin_answered_after_the_view_ended_does_not_start_the_body() {
    use std::sync::Mutex;
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let start = Instant::now();
    // Each body run: (who, started, lease valid when it started, ended).
    type Run = (&'static str, Duration, bool, Option<Duration>);
    let log: Arc<Mutex<Vec<Run>>> = Arc::default();
    let body = |who: &'static str| {
        let log = log.clone();
        move || async move {
            let valid = current_lease().expect("under the lease").is_valid();
            let i = {
                let mut l = log.lock().unwrap();
                l.push((who, start.elapsed(), valid, None));
                l.len() - 1
            };
            sleep(Duration::from_secs(5)).await;
            log.lock().unwrap()[i].3 = Some(start.elapsed());
            Ok::<_, std::io::Error>(who.to_owned())
        }
    };
    // a wins at t = 0; its first `begin` applies but the answer is lost.
    mem.lose_once_replies(true);
    let ra = tokio::spawn({
        let (a, body) = (a.clone(), body("a"));
        async move { a.once(NAME, body).await }
    });
    settle().await;
    assert!(a.is_leader("once:migrate-2026-12"));
    // Then a's lease calls fail (a degraded link): its view ends at
    // TTL - MARGIN, its lease expires at TTL, and b takes over.
    mem.cut_off(Some("a"));
    let rb = tokio::spawn({
        let (b, body) = (b.clone(), body("b"));
        async move { b.once(NAME, body).await }
    });
    // a retries its `begin` every retry_interval while its view holds; from
    // 2.2 s on, a step's answer takes 900 ms (less than the call timeout).
    tokio::time::sleep_until(start + Duration::from_millis(2200)).await;
    mem.lose_once_replies(false);
    mem.delay_once_replies(Some(("a", Duration::from_millis(900))));
    tokio::time::sleep_until(start + Duration::from_secs(12)).await;
    let _ = (ra.await, rb.await);
    let log = log.lock().unwrap().clone();
    assert!(
        log.iter().any(|r| r.0 == "b"),
        "b ran the body once a's lease expired: {log:?}"
    );
    // Every body started inside its view, and never two at once.
    for r in &log {
        assert!(
            r.2,
            "a body started after its view had ended: {r:?} (all: {log:?})"
        );
    }
    for (i, x) in log.iter().enumerate() {
        for y in &log[i + 1..] {
            let overlap = x.1 < y.3.unwrap() && y.1 < x.3.unwrap();
            assert!(!overlap, "two bodies of one run-once name at once: {log:?}");
        }
    }
}

/// A success time no clock writes (a stray write to the result's key) reads
/// as the epoch: as a `SystemTime` past the year 9999 it would break whoever
/// formats it (chrono panics past the year 262143).
#[test]
fn a_success_time_no_clock_writes_reads_as_the_epoch() {
    use crate::backend::once::{Done, Stored};
    let stored = |at_ms| Stored {
        attempts: 1,
        failures: 0,
        error: String::new(),
        done: Some(Done {
            token: 7,
            by: "a".to_owned(),
            at_ms,
            summary: "ok".to_owned(),
        }),
    };
    let at = |ms| super::record(NAME, &stored(ms), None).unwrap().finished_at;
    assert_eq!(at(1_000), std::time::UNIX_EPOCH + Duration::from_secs(1));
    assert_eq!(at(9_000_000_000_000_000), std::time::UNIX_EPOCH);
    assert_eq!(at(u64::MAX), std::time::UNIX_EPOCH);
}

/// The runner's lease key is evicted while its body runs, and the attempts
/// are used up (one): a waiter must not report `OnceFailed` while that body
/// may still run (neither from its reads nor from a begin once its own
/// election won the lease), and the body's later success is recorded.
/// Fails on the old code: the waiter's next read found nobody holding the
/// lease and returned `OnceFailed`, and the success came back
/// `OnceUnrecorded`.
#[tokio::test(start_paused = true)]
async fn an_evicted_runners_body_is_never_reported_failed_and_its_success_is_recorded() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (started, is_started) = oneshot::channel();
    let (finish, may_finish) = oneshot::channel::<()>();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            Once::new(NAME)
                .attempts(1)
                .run_on(&a, || async move {
                    let _ = started.send(current_lease().unwrap().token());
                    let _ = may_finish.await;
                    Ok::<_, std::io::Error>("a's summary")
                })
                .await
        }
    });
    let token = is_started.await.unwrap();
    let b_runs = Arc::new(AtomicU32::new(0));
    let waiter = tokio::spawn({
        let (b, body) = (b.clone(), counting(&b_runs, Duration::ZERO));
        async move { Once::new(NAME).attempts(1).run_on(&b, body).await }
    });
    settle().await;
    mem.lose_lease("leader", "once:migrate-2026-12");
    // Long past the end of a's view and b's election winning the lease:
    // a's body still runs, so b neither fails nor runs its own.
    sleep(TTL * 5).await;
    assert!(!runner.is_finished());
    assert!(
        !waiter.is_finished(),
        "the waiter settled while the body runs: {:?}",
        waiter.await
    );
    assert_eq!(b_runs.load(Ordering::SeqCst), 0);
    finish.send(()).unwrap();
    let done = runner.await.unwrap().expect("the success is recorded");
    assert!(done.ran_here);
    assert_eq!((done.token, done.summary.as_str()), (token, "a's summary"));
    let seen = waiter.await.unwrap().expect("the waiter gets a's record");
    assert!(!seen.ran_here);
    assert_eq!((seen.instance_id.as_str(), seen.token), ("a", token));
    assert_eq!(b_runs.load(Ordering::SeqCst), 0);
}

/// A runner that crashes after its lease key was evicted (here: its body
/// is dropped while it says it still runs) stops saying so: within one ttl
/// of its last word, a waiter learns that the attempts are used up.
#[tokio::test(start_paused = true)]
async fn a_deposed_runner_that_stops_is_concluded_failed_within_a_ttl() {
    let mem = MemoryBackend::new();
    let (a, b) = (instance(&mem, "a"), instance(&mem, "b"));
    let (started, is_started) = oneshot::channel();
    let runner = tokio::spawn({
        let a = a.clone();
        async move {
            Once::new(NAME)
                .attempts(1)
                .run_on(&a, || async move {
                    let _ = started.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, std::io::Error>("never")
                })
                .await
        }
    });
    is_started.await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            Once::new(NAME)
                .attempts(1)
                .run_on(&b, || async { Ok::<_, std::io::Error>("b") })
                .await
        }
    });
    settle().await;
    mem.lose_lease("leader", "once:migrate-2026-12");
    sleep(TTL * 3).await;
    assert!(!waiter.is_finished());
    runner.abort();
    let stopped = Instant::now();
    let failed = waiter.await.unwrap();
    assert!(
        matches!(failed, Err(Error::OnceFailed { attempts: 1, .. })),
        "{failed:?}"
    );
    assert!(stopped.elapsed() <= TTL + RENEW, "{:?}", stopped.elapsed());
}
