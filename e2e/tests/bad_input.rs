//! Bad input the instances must survive (issue 3): Redis unreachable at
//! start-up, a wrong password, a Redis answering with unexpected types.
//! Invalid configs and group names are unit-tested in leader-runtime.
//! Each test runs `leader-instance` processes, so a panic anywhere (also in
//! a background task) shows on their stderr.

mod support;

use std::sync::Arc;

use leader_testkit::{monotonic_now_ns, process_state, ChildProcess, RedisServer};
use support::checker::{parse_line, History, Line, ProcessLog};
use support::fake_redis::{FakeRedis, Op};
use support::fleet::{instance_command, Fleet, FleetConfig, Member};
use support::{ms, ns_to_ms, SERIAL};

fn parsed(m: &Member) -> Vec<Line> {
    m.lines().iter().filter_map(|l| parse_line(l)).collect()
}

fn stderr_count(m: &Member, needle: &str) -> usize {
    m.child
        .stderr()
        .snapshot()
        .iter()
        .filter(|l| l.contains(needle))
        .count()
}

fn alive(m: &Member) -> bool {
    !matches!(process_state(m.child.pid()), None | Some('Z') | Some('X'))
}

fn spawn_one(cfg: &FleetConfig, name: &str, url: &str) -> Member {
    let child = ChildProcess::spawn(instance_command(cfg, name, url, None)).expect("spawns");
    Member {
        name: name.to_owned(),
        slot: 0,
        child,
    }
}

async fn sigterm_cleanly(m: &mut Member) {
    m.child.terminate().expect("SIGTERM");
    let status = m.child.wait_timeout(ms(10_000)).await.expect("exits");
    assert!(
        status.success(),
        "{}: {status:?}\n{}",
        m.name,
        m.child.transcript()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_at_startup_then_it_appears() {
    let _serial = SERIAL.lock().await;
    let mut redis = RedisServer::start().await.unwrap();
    redis.kill().await.unwrap(); // its port now refuses connections
    let cfg = FleetConfig::new().env("STATS_MS", "100");
    let (ttl, renew, retry) = (cfg.ttl, cfg.renew, cfg.retry);
    let mut fleet = Fleet::start_on(cfg, redis).await;
    let started = std::time::Instant::now();
    let down = ms(2_000);
    tokio::time::sleep(down).await; // Redis stays away this long

    for slot in fleet.live_slots() {
        let m = fleet.member(slot);
        let lines = parsed(m);
        fleet.check(alive(m), format!("{} is alive", m.name));
        fleet.check(
            !lines.iter().any(|l| matches!(l, Line::Elected { .. })),
            format!("{} stays a follower", m.name),
        );
        // One error per failure burst: one event, one ERROR log line.
        let errors = lines
            .iter()
            .filter(|l| matches!(l, Line::BackendError { .. }))
            .count();
        fleet.check(
            errors == 1,
            format!("{}: {errors} backend_error lines", m.name),
        );
        let logged = stderr_count(m, " ERROR ");
        fleet.check(logged == 1, format!("{}: {logged} ERROR log lines", m.name));
        // It keeps retrying, paced by retry_interval (not a hot loop).
        let attempts = lines
            .iter()
            .rev()
            .find_map(|l| match l {
                Line::Stats {
                    acquire_attempts, ..
                } => Some(*acquire_attempts),
                _ => None,
            })
            .unwrap_or(0);
        let paced = (down.as_millis() / retry.as_millis()) as u64;
        fleet.check(
            attempts >= paced / 2 && attempts <= paced * 2,
            format!(
                "{}: {attempts} acquire attempts in {down:?} (retry {retry:?})",
                m.name
            ),
        );
    }
    let elapsed = started.elapsed();
    fleet.check(
        elapsed < down + ms(1_000),
        format!("checks took {elapsed:?}"),
    );

    fleet.redis_mut().start_again().await.unwrap();
    let back = monotonic_now_ns();
    let (slot, line) = fleet
        .wait_elected_after(back, ttl * 5)
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    let Line::Elected { at, .. } = line else {
        unreachable!()
    };
    fleet.check(
        at - back <= (ttl + renew).as_nanos() as u64,
        format!("led {:.1} ms after Redis appeared", ns_to_ms(at - back)),
    );
    let leader = fleet.member(slot);
    fleet.check(
        stderr_count(leader, "backend reachable again") == 1,
        "recovery is logged once",
    );
    fleet
        .settle(ms(5_000))
        .await
        .unwrap_or_else(|e| fleet.fail(e));
    fleet.stop_all().await;
    fleet.assert_safe();
    for m in fleet.members() {
        fleet.check(
            stderr_count(m, "panicked") == 0,
            format!("{} panicked", m.name),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_reported_without_the_password() {
    let _serial = SERIAL.lock().await;
    const RIGHT: &str = "right-pw-31337";
    const WRONG: &str = "wrong-pw-4711";
    let redis = RedisServer::builder()
        .password(RIGHT)
        .start()
        .await
        .unwrap();
    let addr = redis.addr();
    let cfg = FleetConfig::new().env("RUST_LOG", "debug");
    let mut good = spawn_one(&cfg, "good", &format!("redis://:{RIGHT}@{addr}"));
    let mut bad = spawn_one(&cfg, "bad", &format!("redis://:{WRONG}@{addr}"));
    let mut bad_user = spawn_one(&cfg, "bad-user", &format!("redis://default:{WRONG}@{addr}"));

    // The right password leads (so the server and URLs are fine) ...
    good.wait_line(0, |l| matches!(l, Line::Elected { .. }), ms(10_000))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", redis.report()));
    // ... the wrong ones report an authentication error and retry.
    for m in [&bad, &bad_user] {
        let (_, line) = m
            .wait_line(0, |l| matches!(l, Line::BackendError { .. }), ms(5_000))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", m.child.transcript()));
        let Line::BackendError { message, .. } = line else {
            unreachable!()
        };
        let lower = message.to_lowercase();
        assert!(
            lower.contains("wrongpass") || lower.contains("auth") || lower.contains("password"),
            "{}: unclear error: {message}",
            m.name
        );
        assert_eq!(stderr_count(m, " ERROR "), 1, "{}", m.child.transcript());
    }
    // Give them a few more rounds against a held lease, then stop everyone.
    let rounds = good.lines().len();
    good.wait_line(rounds, |l| matches!(l, Line::Renewed { .. }), ms(5_000))
        .await
        .unwrap();
    good.wait_line(rounds, |l| matches!(l, Line::Run { .. }), ms(5_000))
        .await
        .unwrap();
    for m in [&mut good, &mut bad, &mut bad_user] {
        sigterm_cleanly(m).await;
    }
    for m in [&bad, &bad_user] {
        assert!(
            !parsed(m).iter().any(|l| matches!(l, Line::Elected { .. })),
            "{} was elected with a wrong password",
            m.name
        );
    }
    for m in [&good, &bad, &bad_user] {
        let all = [m.child.stdout().snapshot(), m.child.stderr().snapshot()].concat();
        assert!(all.len() > 3, "{}", m.child.transcript());
        for line in all {
            assert!(
                !line.contains(RIGHT) && !line.contains(WRONG),
                "{}: a password in a log line: {line}",
                m.name
            );
            assert!(!line.contains("panicked"), "{}: {line}", m.name);
        }
    }
}

/// Replies no lease script may give; none of them is a valid acquire,
/// renew or release answer.
fn unexpected() -> Vec<&'static [u8]> {
    vec![
        b":5\r\n",
        b"$5\r\nhello\r\n",
        b"*3\r\n:1\r\n:-5\r\n:0\r\n",
        b"*3\r\n:1\r\n$3\r\nabc\r\n:0\r\n",
        b"*2\r\n:1\r\n:2\r\n",
        b"*3\r\n:0\r\n:7\r\n:100\r\n",
        b"*-1\r\n",
        b"$-1\r\n",
        b"-ERR something odd\r\n",
        b"+OK\r\n",
        b"*3\r\n:7\r\n:1\r\n:0\r\n",
        b"*1\r\n*1\r\n*1\r\n:1\r\n",
        b"*0\r\n",
        b":99999999999999999999999999\r\n",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unexpected_reply_types_to_acquire_never_elect() {
    let _serial = SERIAL.lock().await;
    let weird = unexpected();
    let n = weird.len() as u64;
    let fake = FakeRedis::start(Arc::new(move |_op: Op, i: u64| {
        weird[(i % n) as usize].to_vec()
    }))
    .await
    .unwrap();
    let cfg = FleetConfig::new().env("RUST_LOG", "info,leader_runtime=debug");
    let mut m = spawn_one(&cfg, "odd", &fake.url());
    fake.wait_calls(2 * n, ms(20_000))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", m.child.transcript()));
    let lines = parsed(&m);
    assert!(alive(&m), "{}", m.child.transcript());
    assert!(
        !lines.iter().any(|l| matches!(l, Line::Elected { .. })),
        "elected on nonsense replies\n{}",
        m.child.transcript()
    );
    let errors: Vec<&Line> = lines
        .iter()
        .filter(|l| matches!(l, Line::BackendError { .. }))
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "one error event per burst\n{}",
        m.child.transcript()
    );
    assert!(
        matches!(errors[0], Line::BackendError { message, .. } if message.contains("unexpected reply")),
        "{:?}",
        errors[0]
    );
    assert_eq!(stderr_count(&m, " ERROR "), 1, "{}", m.child.transcript());
    // Every later failure is still seen (at debug level), most as protocol errors.
    let protocol = stderr_count(&m, "unexpected reply");
    assert!(
        protocol as u64 >= n / 2,
        "{protocol} protocol errors\n{}",
        m.child.transcript()
    );
    sigterm_cleanly(&mut m).await;
    assert_eq!(stderr_count(&m, "panicked"), 0, "{}", m.child.transcript());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unexpected_reply_types_to_renew_end_the_leadership() {
    let _serial = SERIAL.lock().await;
    let weird = unexpected();
    let n = weird.len() as u64;
    // Acquire always wins (with a growing token and no wait, in
    // acquire.lua's reply: {1, token as a decimal string, wait, why, last},
    // `last` empty: no record before), every
    // renew is nonsense.
    let fake = FakeRedis::start(Arc::new(move |op: Op, i: u64| match op {
        Op::Acquire => {
            let token = (1000 + i).to_string();
            format!(
                "*5\r\n:1\r\n${}\r\n{token}\r\n:0\r\n$0\r\n\r\n$0\r\n\r\n",
                token.len()
            )
            .into_bytes()
        }
        Op::Renew => weird[(i % n) as usize].to_vec(),
        Op::Release => b":1\r\n".to_vec(),
    }))
    .await
    .unwrap();
    let cfg = FleetConfig::new();
    let ttl = cfg.ttl;
    let mut m = spawn_one(&cfg, "odd", &fake.url());
    let mut from = 0;
    for _ in 0..3 {
        let (i, _) = m
            .wait_line(from, |l| matches!(l, Line::Lost { .. }), ttl * 5)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", m.child.transcript()));
        from = i + 1;
    }
    sigterm_cleanly(&mut m).await;
    let lines = parsed(&m);
    assert!(
        !lines.iter().any(|l| matches!(l, Line::Renewed { .. })),
        "a nonsense reply renewed the lease\n{}",
        m.child.transcript()
    );
    let history = History::from_logs(&[ProcessLog::new("odd", m.lines())]);
    assert!(history.windows.len() >= 3);
    for w in &history.windows {
        // The view never outlived the acquisition's ttl, and ended by expiry.
        assert!(w.end - w.start <= ttl.as_nanos() as u64, "{w:?}");
        let (reason, at) = w.lost.clone().unwrap_or_else(|| ("none".into(), u64::MAX));
        if w.token != history.windows.last().unwrap().token {
            assert_eq!(reason, "expired", "{w:?}");
            assert!(
                at - w.start <= (ttl + ms(250)).as_nanos() as u64,
                "kept leading {:.1} ms: {w:?}",
                ns_to_ms(at - w.start)
            );
        }
    }
    assert_eq!(history.check(), vec![], "{}", m.child.transcript());
    assert_eq!(stderr_count(&m, "panicked"), 0, "{}", m.child.transcript());
}
